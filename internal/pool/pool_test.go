package pool_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/registrar"
)

const hour = 3_600_000

func mustGrant(t *testing.T, out pool.Outcome) []pool.Grant {
	t.Helper()
	if out.Err != nil || len(out.Leases) == 0 {
		t.Fatalf("want leases, got err %v rejected %v (%s)", out.Err, out.Rejected, out.Message)
	}
	return out.Leases
}

func TestRankingHandComputed(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 16, 0, 16)
	// One success from 1.0 → 1.5.
	g := mustGrant(t, e.request("p", "a", 1, have(0, span(0, 16)...)))
	if out := e.complete("p", "a", g[0].File, g[0].Piece, true, 0); out.Err != nil || out.Ranking.Score != 1.5 {
		t.Fatalf("after one success: %+v %v", out.Ranking, out.Err)
	}
	// Two hours later another success: 1.5·0.95² + 0.5.
	e.after(2 * hour)
	g = mustGrant(t, e.request("p", "a", 1, have(0, span(0, 16)...)))
	out := e.complete("p", "a", g[0].File, g[0].Piece, true, 0)
	if want := 1.5*0.95*0.95 + 0.5; math.Abs(out.Ranking.Score-want) > 1e-12 || out.Ranking.Successes != 2 {
		t.Fatalf("after decay: %v, want %v", out.Ranking, want)
	}
	// One failure from 1.0 → clamped to 0.1.
	g = mustGrant(t, e.request("p", "b", 1, have(0, span(0, 16)...)))
	out = e.complete("p", "b", g[0].File, g[0].Piece, false, tenurev1.FailureReason_FAILURE_REASON_VERIFICATION_FAILED)
	if out.Err != nil || out.Ranking.Score != 0.1 || out.Ranking.Failures != 1 {
		t.Fatalf("after one failure: %+v %v", out.Ranking, out.Err)
	}
	// Now under the minimum score 0.2.
	if out := e.request("p", "b", 1, have(0, span(0, 16)...)); out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_PEER_RANKING_TOO_LOW {
		t.Fatalf("want PEER_RANKING_TOO_LOW, got %+v", out)
	}
	rs, _ := e.m.Pools().Rankings("", "p")
	if len(rs) != 2 || rs[0].Peer != "a" || rs[1].Peer != "b" {
		t.Fatalf("rankings order: %+v", rs)
	}
	st, _ := e.m.Pools().Status("", "p")
	if f := st.Files[0]; f.Done != 2 || f.Wanted != 14 || f.Leased != 0 {
		t.Fatalf("status: %+v", f)
	}
	if pool.NextScore(pool.DefaultConfig(), 1, 0, 1, 0) != 1.5 {
		t.Fatal("NextScore")
	}
	e.checkReplay()
}

func TestRarestFirst(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 8, 0, 8)
	// b has 0..5, c has 0..3: availability 0-3 → 3 (with a), 4-5 → 2, 6-7 → 1.
	e.request("p", "b", 1, have(0, span(0, 6)...))
	e.request("p", "c", 1, have(0, span(0, 4)...))
	// b and c each took piece... check who holds what, then a (has all).
	g := mustGrant(t, e.request("p", "a", 2, have(0, span(0, 8)...)))
	if len(g) != 2 || g[0].Piece != 6 || g[1].Piece != 7 {
		t.Fatalf("a got %+v, want pieces 6 and 7 (held by a only)", g)
	}
	// b's first request saw only its own map: all equally rare, lowest first.
	if h, _, ok := e.m.Pools().Holder("", "p", 0, 0); !ok || h != "b" {
		t.Fatalf("piece 0 held by %q", h)
	}
	// Next for a: pieces 4, 5 (availability 2) before 1..3 (3).
	g = mustGrant(t, e.request("p", "a", 2, have(0, span(0, 8)...)))
	if g[0].Piece != 4 || g[1].Piece != 5 {
		t.Fatalf("a got %+v, want 4 and 5", g)
	}
	if err := e.m.Pools().Check(); err != nil {
		t.Fatal(err)
	}
	e.checkReplay()
}

func TestMultiFileSpread(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 10, 0, 10)
	e.wantRange("p", 3, 10, 0, 10)
	g := mustGrant(t, e.request("p", "a", 4, have(3, span(0, 10)...), have(0, span(0, 10)...)))
	want := [][2]uint32{{0, 0}, {3, 0}, {0, 1}, {3, 1}}
	if len(g) != 4 {
		t.Fatalf("got %d grants", len(g))
	}
	for i, w := range want {
		if g[i].File != w[0] || g[i].Piece != w[1] {
			t.Fatalf("grant %d = %d/%d, want %v", i, g[i].File, g[i].Piece, w)
		}
		l, err := e.m.Registrar().Get(g[i].LeaseID, registrar.Tick(e.tick))
		if err != nil || l.Resource != pool.Resource("p", w[0], w[1]) || l.Holder != "a" || l.TTL.Milliseconds() != 300_000 {
			t.Fatalf("lease %+v %v", l, err)
		}
	}
	e.checkReplay()
}

func TestExpiryPenalty(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 4, 0, 4)
	g := mustGrant(t, e.request("p", "a", 4, have(0, 0, 1, 2, 3)))
	if len(g) != 4 {
		t.Fatalf("got %d", len(g))
	}
	e.after(299_999).advance()
	if r := e.ranking("p", "a"); r.CurrentLeases != 4 || r.Failures != 0 {
		t.Fatalf("before expiry: %+v", r)
	}
	e.after(1).advance()
	r := e.ranking("p", "a")
	if r.CurrentLeases != 0 || r.Failures != 4 || r.Score != 0.1 {
		t.Fatalf("after expiry: %+v", r)
	}
	st, _ := e.m.Pools().Status("", "p")
	if f := st.Files[0]; f.Wanted != 4 || f.Leased != 0 {
		t.Fatalf("pieces not returned: %+v", f)
	}
	// Completing an expired piece: not leased.
	if out := e.complete("p", "a", 0, 0, true, 0); registrar.ReasonOf(out.Err) != registrar.ReasonPieceNotLeased {
		t.Fatalf("complete after expiry: %v", out.Err)
	}
	// Another peer can take them now.
	mustGrant(t, e.request("p", "b", 4, have(0, 0, 1, 2, 3)))
	e.checkReplay()
}

// A report on an expired lease of a piece must not end the lease the same
// peer was granted on that piece since: with the lease named, it is
// PIECE_NOT_LEASED and the current lease, the piece and the ranking stay.
func TestLateCompletionOfAnEarlierLease(t *testing.T) {
	e := setup(t)
	zero := 0.0
	if out := e.create("p", &tenurev1.PoolConfig{LeaseDuration: durationpb.New(time.Second), MinPeerScore: &zero}); out.Err != nil {
		t.Fatal(out.Err)
	}
	e.wantRange("p", 0, 1, 0, 1)
	first := mustGrant(t, e.request("p", "a", 1, have(0, 0)))[0]
	e.after(1000).advance() // expired: the piece is wanted again, a failure for a
	second := mustGrant(t, e.request("p", "a", 1, have(0, 0)))[0]
	if second.LeaseID == first.LeaseID || second.Piece != first.Piece {
		t.Fatalf("second grant %+v after %+v", second, first)
	}
	before := e.ranking("p", "a")
	for _, ok := range []bool{true, false} {
		out := e.completeLease("p", "a", first.LeaseID, 0, 0, ok, map[bool]tenurev1.FailureReason{false: tenurev1.FailureReason_FAILURE_REASON_TIMEOUT}[ok])
		if registrar.ReasonOf(out.Err) != registrar.ReasonPieceNotLeased {
			t.Fatalf("late report (success %v) on %s: %v", ok, first.LeaseID, out.Err)
		}
		var re *registrar.Error
		if !errors.As(out.Err, &re) || re.Metadata["current_lease_id"] != second.LeaseID || re.Metadata["lease_id"] != first.LeaseID {
			t.Fatalf("error %#v", out.Err)
		}
	}
	if r := e.ranking("p", "a"); r != before {
		t.Fatalf("ranking moved: %+v, was %+v", r, before)
	}
	if l, err := e.m.Registrar().Get(second.LeaseID, registrar.Tick(e.tick)); err != nil || l.State != registrar.Active {
		t.Fatalf("current lease %+v %v", l, err)
	}
	// Naming the current lease completes it; naming none, as before, too.
	if out := e.completeLease("p", "a", second.LeaseID, 0, 0, true, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	st, _ := e.m.Pools().Status("", "p")
	if f := st.Files[0]; f.Done != 1 || f.Leased != 0 {
		t.Fatalf("after completion: %+v", f)
	}
	e.checkReplay()
}

func TestRejections(t *testing.T) {
	e := setup(t)
	cap2 := &tenurev1.PoolConfig{MaxLeasesPerPeer: 2}
	if out := e.create("p", cap2); out.Err != nil || !out.Created {
		t.Fatalf("create: %+v", out)
	}
	if out := e.create("p", cap2); out.Err != nil || out.Created {
		t.Fatalf("create again: %+v", out)
	}
	if out := e.create("p", nil); registrar.ReasonOf(out.Err) != registrar.ReasonInvalidArgument {
		t.Fatalf("create with another config: %+v", out)
	}
	e.wantRange("p", 0, 10, 0, 10)
	inv := tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST
	for name, out := range map[string]pool.Outcome{
		"unknown pool":  e.request("nope", "a", 1, have(0, 1)),
		"max 0":         e.request("p", "a", 0, have(0, 1)),
		"unknown file":  e.request("p", "a", 1, have(1, 1)),
		"bits too long": e.request("p", "a", 1, &logpb.PoolHave{FileIndex: 0, Bits: []byte{1, 0, 0}}),
		"bit past end":  e.request("p", "a", 1, &logpb.PoolHave{FileIndex: 0, Bits: []byte{1, 4}}),
		"file twice":    e.request("p", "a", 1, have(0, 1), have(0, 2)),
	} {
		if out.Rejected != inv || out.Err != nil || len(out.Leases) != 0 {
			t.Errorf("%s: %+v", name, out)
		}
	}
	if _, ok := e.m.Pools().Status("", "p"); ok == nil {
		st, _ := e.m.Pools().Status("", "p")
		if len(st.Peers) != 0 {
			t.Fatalf("invalid requests recorded a peer: %+v", st.Peers)
		}
	}
	if out := e.request("p", "a", 1, have(0)); out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_NO_AVAILABLE_PIECES {
		t.Fatalf("empty have: %+v", out)
	}
	mustGrant(t, e.request("p", "a", 5, have(0, span(0, 10)...)))
	if out := e.request("p", "a", 1, have(0, span(0, 10)...)); out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_PEER_AT_CAPACITY {
		t.Fatalf("at capacity: %+v", out)
	}
	// b holds a piece, fails another → score 0.1 while holding one: ranking first.
	mustGrant(t, e.request("p", "b", 2, have(0, span(0, 10)...)))
	if out := e.complete("p", "b", 0, 2, false, tenurev1.FailureReason_FAILURE_REASON_TIMEOUT); out.Err != nil {
		t.Fatal(out.Err)
	}
	// b now scores 0.1 < 0.2 while holding one lease of two.
	if out := e.request("p", "b", 1, have(0, span(0, 10)...)); out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_PEER_RANKING_TOO_LOW {
		t.Fatalf("low ranking: %+v", out)
	}
	// Precedence: invalid before ranking, ranking before no pieces.
	if out := e.request("p", "b", 1, have(7, 1)); out.Rejected != inv {
		t.Fatalf("invalid by a low peer: %+v", out)
	}
	if out := e.request("p", "b", 1); out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_PEER_RANKING_TOO_LOW {
		t.Fatalf("low peer with nothing: %+v", out)
	}
	// Capacity before no pieces: a at its cap with nothing to offer.
	if out := e.request("p", "a", 1); out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_PEER_AT_CAPACITY {
		t.Fatalf("capacity before no pieces: %+v", out)
	}
	e.checkReplay()
}

func TestCompleteErrors(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 4, 0, 4)
	g := mustGrant(t, e.request("p", "a", 1, have(0, 0)))
	wantErr := func(what string, out pool.Outcome, reason registrar.Reason, msg string, meta map[string]string) {
		t.Helper()
		var re *registrar.Error
		if !errors.As(out.Err, &re) || re.Reason != reason || re.Message != msg {
			t.Fatalf("%s: %v, want %s", what, out.Err, msg)
		}
		for k, v := range meta {
			if re.Metadata[k] != v {
				t.Errorf("%s: metadata %v, want %s=%s", what, re.Metadata, k, v)
			}
		}
	}
	wantErr("other peer", e.complete("p", "b", g[0].File, g[0].Piece, true, 0), registrar.ReasonPieceNotLeased,
		"PIECE_NOT_LEASED: piece 0 of file 0 is leased to peer a, not to b", map[string]string{"holder": "a", "peer": "b", "piece_state": "leased"})
	wantErr("unleased piece", e.complete("p", "a", 0, 1, true, 0), registrar.ReasonPieceNotLeased,
		"PIECE_NOT_LEASED: piece 1 of file 0 is not leased to a", map[string]string{"piece_index": "1", "piece_state": "wanted"})
	wantErr("piece out of range", e.complete("p", "a", 0, 9, true, 0), registrar.ReasonInvalidArgument,
		"INVALID_ARGUMENT: piece_index: pool p has no piece 9 of file 0 (it has 4 pieces)", map[string]string{"field": "piece_index"})
	wantErr("unknown file", e.complete("p", "a", 3, 0, true, 0), registrar.ReasonInvalidArgument,
		"INVALID_ARGUMENT: file_index: pool p has no file 3", map[string]string{"field": "file_index"})
	if out := e.complete("p", "a", 0, 0, false, 0); registrar.ReasonOf(out.Err) != registrar.ReasonInvalidArgument {
		t.Fatalf("failure without reason: %v", out.Err)
	}
	if out := e.complete("q", "a", 0, 0, true, 0); registrar.ReasonOf(out.Err) != pool.ReasonPoolNotFound {
		t.Fatalf("unknown pool: %v", out.Err)
	}
	// Completion releases the lease (COMPLETED) and marks the piece done.
	if out := e.complete("p", "a", 0, 0, true, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	l, err := e.m.Registrar().Get(g[0].LeaseID, registrar.Tick(e.tick))
	if err != nil || l.State != registrar.Released || l.ReleaseReason != tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED {
		t.Fatalf("lease after completion: %+v %v", l, err)
	}
	// A retry of it (after OUTCOME_UNKNOWN) is refused, changes nothing,
	// and says the piece is done.
	before := e.ranking("p", "a")
	var re *registrar.Error
	if out := e.complete("p", "a", 0, 0, true, 0); !errors.As(out.Err, &re) || re.Reason != registrar.ReasonPieceNotLeased || re.Metadata["piece_state"] != "done" {
		t.Fatalf("retried completion: %v", out.Err)
	}
	if after := e.ranking("p", "a"); after != before {
		t.Fatalf("a retried completion ranked again: %+v, was %+v", after, before)
	}
	// Done for good: wanting it again changes nothing.
	if out := e.wantRange("p", 0, 4, 0, 4); out.Added != 0 || out.File.Done != 1 || out.File.Wanted != 3 {
		t.Fatalf("want again: %+v", out)
	}
	e.checkReplay()
}

func TestPieceHeldOutsideIsSkipped(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 4, 0, 4)
	acq := e.m.Apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
		Resource: pool.Resource("p", 0, 0), Holder: "squatter"}}})
	e.keep(acq)
	if acq.Outcome.Err != nil {
		t.Fatal(acq.Outcome.Err)
	}
	g := mustGrant(t, e.request("p", "a", 1, have(0, 0, 1)))
	if g[0].Piece != 1 {
		t.Fatalf("got piece %d, want 1", g[0].Piece)
	}
	e.checkReplay()
}

// TestPieceLeaseEndedFromOutside: a piece lease released by its peer
// through LeaseService returns the piece and counts as a failure, as an
// expiry does (else a peer could give pieces up without the penalty a
// reported failure carries); a revocation returns it unranked; and a
// piece lease cannot be transferred, which would strand the piece with a
// lease no peer may complete it under.
func TestPieceLeaseEndedFromOutside(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 4, 0, 4)
	g := mustGrant(t, e.request("p", "a", 2, have(0, 0, 1)))
	apply := func(op *logpb.Command) registrar.Outcome {
		op.Tick, op.Wall = e.tick, wallBase+e.tick
		res := e.m.Apply(op)
		e.keep(res)
		return res.Outcome
	}

	out := apply(&logpb.Command{Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{LeaseId: g[0].LeaseID, Holder: "a", NewHolder: "b"}}})
	var re *registrar.Error
	if !errors.As(out.Err, &re) || re.Reason != registrar.ReasonInvalidArgument || re.Metadata["field"] != "lease_id" || re.Metadata["pool"] != "p" {
		t.Fatalf("transfer of a piece lease: %v", out.Err)
	}
	if l, err := e.m.Registrar().Get(g[0].LeaseID, registrar.Tick(e.tick)); err != nil || l.State != registrar.Active || l.Holder != "a" {
		t.Fatalf("after the refused transfer: %+v %v", l, err)
	}

	e.after(1)
	if out := apply(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: g[0].LeaseID, Holder: "a"}}}); out.Err != nil {
		t.Fatal(out.Err)
	}
	if r := e.ranking("p", "a"); r.Failures != 1 || r.CurrentLeases != 1 || r.Score != 0.1 {
		t.Fatalf("after a release: %+v", r)
	}
	if out := apply(&logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: g[1].LeaseID, Reason: "maintenance"}}}); out.Err != nil {
		t.Fatal(out.Err)
	}
	if r := e.ranking("p", "a"); r.Failures != 1 || r.CurrentLeases != 0 {
		t.Fatalf("after a revocation: %+v", r)
	}
	st, _ := e.m.Pools().Status("", "p")
	if f := st.Files[0]; f.Wanted != 4 || f.Leased != 0 {
		t.Fatalf("pieces not returned: %+v", f)
	}
	e.checkReplay()
}

// A success is final: wanting a done piece again adds nothing, and the
// answer says how many of the pieces named are done.
func TestWantDonePieceStaysDone(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 4, 0, 2)
	g := mustGrant(t, e.request("p", "a", 1, have(0, 0)))[0]
	if out := e.complete("p", "a", g.File, g.Piece, true, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	out := e.wantRange("p", 0, 0, 0, 4)
	if out.Added != 2 || out.AlreadyDone != 1 || out.File.Done != 1 || out.File.Wanted != 3 {
		t.Fatalf("want again: %+v", out)
	}
	e.checkReplay()
}

// The namespace's ttl bounds hold for piece leases: a lease duration
// outside them is refused when a pool is created, and a pool whose
// duration a policy left outside them leases within them.
func TestNamespaceTTLBounds(t *testing.T) {
	e := setup(t)
	setPolicy := e.setPolicy
	setPolicy(&tenurev1.NamespacePolicy{DefaultTtl: durationpb.New(5 * time.Second), MaxTtl: durationpb.New(10 * time.Second)})
	out := e.create("long", &tenurev1.PoolConfig{LeaseDuration: durationpb.New(time.Hour)})
	if registrar.ReasonOf(out.Err) != registrar.ReasonTTLOutOfRange || !strings.Contains(out.Err.Error(), "config.lease_duration") {
		t.Fatalf("create with 1h in a namespace of at most 10s: %v", out.Err)
	}
	if _, err := e.m.Pools().Status("", "long"); err == nil {
		t.Fatal("the refused pool exists")
	}
	// Below the floor too: a duration out of range is TTL_OUT_OF_RANGE
	// whichever bound it misses (it was INVALID_ARGUMENT below 1 s).
	for _, d := range []time.Duration{500 * time.Millisecond, 0} {
		if out := e.create("tiny", &tenurev1.PoolConfig{LeaseDuration: durationpb.New(d)}); registrar.ReasonOf(out.Err) != registrar.ReasonTTLOutOfRange {
			t.Fatalf("create with a lease duration of %v: %v, want TTL_OUT_OF_RANGE", d, out.Err)
		}
	}
	// The default duration (300s) is brought within the bounds.
	e.wantRange("p", 0, 8, 0, 8)
	g := mustGrant(t, e.request("p", "a", 1, have(0, 0, 1, 2, 3)))
	if got := int64(g[0].ExpiresTick) - e.tick; got != 10_000 {
		t.Fatalf("piece lease of the default pool lasts %d ms, want the namespace's max 10000", got)
	}
	// A policy raising the floor above a pool's duration raises its leases.
	setPolicy(&tenurev1.NamespacePolicy{MinTtl: durationpb.New(20 * time.Second), DefaultTtl: durationpb.New(20 * time.Second), MaxTtl: durationpb.New(30 * time.Second)})
	if out := e.create("short", &tenurev1.PoolConfig{LeaseDuration: durationpb.New(2 * time.Second)}); registrar.ReasonOf(out.Err) != registrar.ReasonTTLOutOfRange {
		t.Fatalf("create with 2s in a namespace of at least 20s: %v", out.Err)
	}
	g = mustGrant(t, e.request("p", "b", 1, have(0, 4, 5)))
	if got := int64(g[0].ExpiresTick) - e.tick; got != 30_000 {
		t.Fatalf("piece lease lasts %d ms, want the namespace's max 30000", got)
	}
	if out := e.create("ok", &tenurev1.PoolConfig{LeaseDuration: durationpb.New(25 * time.Second)}); out.Err != nil || !out.Created {
		t.Fatalf("create within the bounds: %+v", out)
	}
	e.checkReplay()
}

// A namespace's pools hold at most MaxPoolPieces pieces over all their
// files: a Want naming a new file past it is QUOTA_EXCEEDED and changes
// nothing; files already there take more pieces freely.
func TestPoolPiecesQuota(t *testing.T) {
	e := setup(t)
	e.setPolicy(&tenurev1.NamespacePolicy{MaxPoolPieces: 1000})
	e.wantRange("a", 0, 600, 0, 10)
	out := e.do(&logpb.PoolCommand{Pool: "b", Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{FileIndex: 0, PieceCount: 401}}})
	if registrar.ReasonOf(out.Err) != registrar.ReasonQuotaExceeded || !strings.Contains(out.Err.Error(), "max_pool_pieces") {
		t.Fatalf("a second pool's file past the quota: %v", out.Err)
	}
	var qe *registrar.Error
	if !errors.As(out.Err, &qe) || qe.Metadata["limit"] != "1000" || qe.Metadata["quota"] != "max_pool_pieces" {
		t.Fatalf("quota metadata: %+v", qe)
	}
	if _, err := e.m.Pools().Status("", "b"); err == nil {
		t.Fatal("the refused Want created its pool")
	}
	e.wantRange("a", 0, 600, 10, 600) // the same file: no new pieces
	e.wantRange("b", 0, 400, 0, 400)  // exactly up to the quota
	e.fork()                          // a restored replica counts them too
	out = e.do(&logpb.PoolCommand{Pool: "a", Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{FileIndex: 1, PieceCount: 1}}})
	if registrar.ReasonOf(out.Err) != registrar.ReasonQuotaExceeded {
		t.Fatalf("one piece past the quota: %v", out.Err)
	}
	e.checkReplay()
}

// Deleting a pool revokes its piece leases (unranked, as an admin's
// revocation), drops its files and peers, frees its pieces from the
// namespace's quota, and lets a pool of the same name start afresh with
// higher fences. Deleting a pool that is not there changes nothing.
func TestDeletePool(t *testing.T) {
	e := setup(t)
	e.setPolicy(&tenurev1.NamespacePolicy{MaxPoolPieces: 100})
	e.wantRange("p", 0, 60, 0, 60)
	e.wantRange("p", 1, 40, 0, 40)
	full := e.do(&logpb.PoolCommand{Pool: "q", Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{FileIndex: 0, PieceCount: 99}}})
	if registrar.ReasonOf(full.Err) != registrar.ReasonQuotaExceeded {
		t.Fatalf("a pool past the quota: %v", full.Err)
	}
	g := mustGrant(t, e.request("p", "a", 3, have(0, 0, 1, 2)))
	if out := e.complete("p", "a", g[0].File, g[0].Piece, true, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	before := e.ranking("p", "a")

	e.after(1)
	del := func(name string) pool.Outcome {
		return e.do(&logpb.PoolCommand{Pool: name, Op: &logpb.PoolCommand_Delete{Delete: &logpb.PoolDelete{}}})
	}
	out := del("p")
	if out.Err != nil || !out.Deleted || out.Revoked != 2 || out.Files != 2 || out.PiecesDone != 1 {
		t.Fatalf("delete: %+v", out)
	}
	for _, l := range g[1:] {
		got, err := e.m.Registrar().Get(l.LeaseID, registrar.Tick(e.tick))
		if err != nil || got.State != registrar.Revoked || got.RevokeReason != pool.RevokeReasonDeleted {
			t.Fatalf("piece lease %s after the delete: %+v %v", l.LeaseID, got, err)
		}
	}
	if _, err := e.m.Pools().Status("", "p"); registrar.ReasonOf(err) != pool.ReasonPoolNotFound {
		t.Fatalf("status of the deleted pool: %v", err)
	}
	if names := e.m.Pools().Names(""); slices.Contains(names, "p") {
		t.Fatalf("pools after the delete: %v", names)
	}
	// Its pieces no longer count: a new file takes the whole quota.
	e.wantRange("q", 0, 99, 0, 99)
	// Not there (any more): nothing changes, no record.
	n := len(e.log)
	if out := del("p"); out.Err != nil || out.Deleted || len(e.log) != n {
		t.Fatalf("delete again: %+v (%d records)", out, len(e.log)-n)
	}
	// The same name starts afresh: no done pieces, a new ranking, and
	// fences past the old leases'.
	e.wantRange("p", 0, 1, 0, 1)
	g2 := mustGrant(t, e.request("p", "a", 1, have(0, 0)))
	if g2[0].Fence <= g[2].Fence {
		t.Fatalf("fence %d after the delete, old leases had up to %d", g2[0].Fence, g[2].Fence)
	}
	if r := e.ranking("p", "a"); r.Successes != 0 || r.Score != pool.StartScore || before.Successes != 1 {
		t.Fatalf("ranking in the new pool: %+v (before: %+v)", r, before)
	}
	if err := e.m.Pools().Check(); err != nil {
		t.Fatal(err)
	}
	e.checkReplay()
}

// A request that a quota cut short says so in its message (the grants
// stand); a CreatePool that conflicts with the pool there names what
// differs.
func TestPartialGrantAndConflictSayWhy(t *testing.T) {
	e := setup(t)
	e.setPolicy(&tenurev1.NamespacePolicy{MaxActivePerHolder: 3})
	e.wantRange("p", 0, 8, 0, 8)
	out := e.request("p", "q3", 4, have(0, 0, 1, 2, 3, 4, 5, 6, 7))
	if out.Err != nil || len(out.Leases) != 3 || !strings.Contains(out.Message, "granted 3 of 4: QUOTA_EXCEEDED") {
		t.Fatalf("request past the holder's quota: %d leases, message %q, err %v", len(out.Leases), out.Message, out.Err)
	}
	out = e.create("p", &tenurev1.PoolConfig{MaxLeasesPerPeer: 8})
	if out.Err == nil || !strings.Contains(out.Err.Error(), "max leases per peer 4, not 8") {
		t.Fatalf("conflicting create: %v", out.Err)
	}
	e.checkReplay()
}

// A peer refused for its ranking gets a fresh start from ResetPeer (rules
// 5): score 1.0, no outcomes, and its requests granted again; an unknown
// peer changes nothing; under rules 4 the command is refused and emits
// nothing, as a build that does not know it refuses it.
func TestResetPeer(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 16, 0, 16)
	g := mustGrant(t, e.request("p", "b", 2, have(0, span(0, 16)...)))
	if out := e.complete("p", "b", g[0].File, g[0].Piece, false, tenurev1.FailureReason_FAILURE_REASON_TIMEOUT); out.Ranking.Score != 0.1 {
		t.Fatalf("after one failure: %+v", out)
	}
	if out := e.request("p", "b", 1, have(0, span(0, 16)...)); out.Rejected != tenurev1.RejectedReason_REJECTED_REASON_PEER_RANKING_TOO_LOW {
		t.Fatalf("want PEER_RANKING_TOO_LOW, got %+v", out)
	}
	reset := func(rules uint32, peer string) pool.Outcome {
		t.Helper()
		res := e.apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Rules: rules, Op: &logpb.Command_Pool{Pool: &logpb.PoolCommand{
			Pool: "p", Op: &logpb.PoolCommand_ResetPeer{ResetPeer: &logpb.PoolResetPeer{Peer: peer}}}}})
		if res.Pool == nil {
			return pool.Outcome{Err: res.Outcome.Err}
		}
		return *res.Pool
	}
	if out := reset(pool.ResetRules-1, "b"); registrar.ReasonOf(out.Err) != registrar.ReasonUnimplemented || len(e.last) != 0 {
		t.Fatalf("reset under rules %d: %+v, %d records", pool.ResetRules-1, out, len(e.last))
	}
	if r := e.ranking("p", "b"); r.Score != 0.1 || r.Failures != 1 {
		t.Fatalf("a refused reset changed the ranking: %+v", r)
	}
	e.fork() // a restored replica resets alike
	e.after(1000)
	out := reset(pool.ResetRules, "b")
	if out.Err != nil || !out.Known || out.Before.Score != 0.1 || out.Before.Failures != 1 || out.Before.CurrentLeases != 1 ||
		out.Ranking.Score != pool.StartScore || out.Ranking.Failures != 0 || out.Ranking.Successes != 0 || out.Ranking.CurrentLeases != 1 {
		t.Fatalf("reset: %+v", out)
	}
	// Granted again; one success from the fresh start, at the reset's
	// tick, is 1.5.
	g2 := mustGrant(t, e.request("p", "b", 1, have(0, span(0, 16)...)))
	if out := e.complete("p", "b", g2[0].File, g2[0].Piece, true, 0); out.Ranking.Score != 1.5 || out.Ranking.Successes != 1 {
		t.Fatalf("a success after the reset: %+v", out.Ranking)
	}
	if out := reset(pool.ResetRules, "nobody"); out.Err != nil || out.Known || out.Ranking.Score != pool.StartScore || len(e.last) != 0 {
		t.Fatalf("reset of an unknown peer: %+v, %d records", out, len(e.last))
	}
	for _, r := range mustRankings(t, e) {
		if r.Peer == "nobody" {
			t.Fatalf("an unknown peer's reset added it: %+v", r)
		}
	}
	if out := (func() pool.Outcome {
		res := e.apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Rules: pool.ResetRules, Op: &logpb.Command_Pool{Pool: &logpb.PoolCommand{
			Pool: "nope", Op: &logpb.PoolCommand_ResetPeer{ResetPeer: &logpb.PoolResetPeer{Peer: "b"}}}}})
		return pool.Outcome{Err: res.Outcome.Err}
	})(); registrar.ReasonOf(out.Err) != pool.ReasonPoolNotFound {
		t.Fatalf("reset in an unknown pool: %+v", out)
	}
	e.checkReplay()
}

func mustRankings(t *testing.T, e *env) []pool.Ranking {
	t.Helper()
	rs, err := e.m.Pools().Rankings("", "p")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
