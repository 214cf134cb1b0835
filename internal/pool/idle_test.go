package pool_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/registrar"
)

// forgotten lists the peers whose have-maps the last command forgot, as
// "peer/file", in record order.
func (e *env) forgotten() []string {
	var out []string
	for _, s := range e.last {
		if h := s.Record.GetPool().GetHave(); h != nil && h.Idle {
			out = append(out, h.Peer+"/"+strconv.Itoa(int(h.FileIndex)))
		}
	}
	return out
}

// recorded lists the peers whose have-maps the last command recorded.
func (e *env) recorded() []string {
	var out []string
	for _, s := range e.last {
		if h := s.Record.GetPool().GetHave(); h != nil && !h.Idle {
			out = append(out, h.Peer)
		}
	}
	return out
}

func idleConfig(idle, lease time.Duration) *tenurev1.PoolConfig {
	return &tenurev1.PoolConfig{PeerIdleTimeout: durationpb.New(idle), LeaseDuration: durationpb.New(lease)}
}

func TestIdlePeerForgotten(t *testing.T) {
	const idle = 10 * 60_000
	e := setup(t)
	e.create("p", idleConfig(idle*time.Millisecond, time.Minute))
	e.wantRange("p", 0, 8, 0, 8)
	t0 := e.tick
	g := mustGrant(t, e.request("p", "b", 1, have(0, span(0, 4)...)))
	if out := e.complete("p", "b", g[0].File, g[0].Piece, true, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	// Just before b is idle: a's request sees b's have-map (pieces 1-3
	// are on two peers, 4-7 on one) and takes the rarest.
	e.tick = t0 + idle - 1
	g = mustGrant(t, e.request("p", "a", 1, have(0, span(1, 8)...)))
	if g[0].Piece != 4 || len(e.forgotten()) != 0 {
		t.Fatalf("a got piece %d, forgot %v; want piece 4, nothing forgotten", g[0].Piece, e.forgotten())
	}
	if out := e.complete("p", "a", g[0].File, g[0].Piece, true, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	// b is idle now: c's request forgets its have-map first, so pieces
	// 1-3 are no rarer than 5-7 and c takes the lowest.
	e.tick = t0 + idle
	g = mustGrant(t, e.request("p", "c", 1, have(0, span(1, 8)...)))
	if got := e.forgotten(); !slices.Equal(got, []string{"b/0"}) || g[0].Piece != 1 {
		t.Fatalf("forgot %v, c got piece %d; want b/0 forgotten and piece 1", got, g[0].Piece)
	}
	if err := e.m.Pools().Check(); err != nil {
		t.Fatal(err)
	}
	// b keeps its score; its next request, with the same bytes as before,
	// records its have-map again.
	if r := e.ranking("p", "b"); r.Successes != 1 || r.Score != 1.5 {
		t.Fatalf("b's ranking after it was forgotten: %+v", r)
	}
	g = mustGrant(t, e.request("p", "b", 1, have(0, span(0, 4)...)))
	if got := e.recorded(); !slices.Equal(got, []string{"b"}) || g[0].Piece != 2 {
		t.Fatalf("recorded %v, b got piece %d; want b recorded again and piece 2", got, g[0].Piece)
	}
	e.checkReplay()
}

func TestIdlePeerHoldingLeaseIsKept(t *testing.T) {
	const idle, lease = 60_000, 5 * 60_000
	e := setup(t)
	e.create("p", idleConfig(idle*time.Millisecond, lease*time.Millisecond))
	e.wantRange("p", 0, 8, 0, 8)
	t0 := e.tick
	mustGrant(t, e.request("p", "a", 1, have(0, span(0, 4)...)))
	e.tick = t0 + 2*idle
	mustGrant(t, e.request("p", "b", 1, have(0, span(4, 8)...)))
	if got := e.forgotten(); len(got) != 0 {
		t.Fatalf("forgot %v while a holds a lease", got)
	}
	// a's lease expires: that ends its last lease, and counts as activity.
	e.tick = t0 + lease
	e.advance()
	if r := e.ranking("p", "a"); r.CurrentLeases != 0 || r.Failures != 1 {
		t.Fatalf("a after expiry: %+v", r)
	}
	e.tick = t0 + lease + idle - 1
	e.wantRange("p", 1, 4, 0, 4)
	if got := e.forgotten(); len(got) != 0 {
		t.Fatalf("forgot %v before a was idle", got)
	}
	e.tick = t0 + lease + idle
	e.wantRange("p", 2, 4, 0, 4)
	if got := e.forgotten(); !slices.Equal(got, []string{"a/0"}) {
		t.Fatalf("forgot %v, want a/0 (b holds a lease)", got)
	}
	e.checkReplay()
}

func TestIdlePeersForgottenAFewTicksAtATime(t *testing.T) {
	e := setup(t)
	e.create("p", idleConfig(time.Second, time.Minute))
	e.wantRange("p", 0, 16, 0, 8)
	e.wantRange("p", 1, 8, 0, 8)
	// 70 peers, each at a tick of its own, with a have-map of file 0 that
	// holds no wanted piece (so they lease nothing) and an empty one of
	// file 1 (not recorded), then 100 peers all at one tick.
	none := func(f uint32) *logpb.PoolHave { return &logpb.PoolHave{FileIndex: f, Bits: []byte{0}} }
	for i := range 70 {
		e.after(1)
		e.request("p", "x"+strconv.Itoa(100+i), 1, have(0, 9), none(1))
	}
	e.after(1)
	for i := range 100 {
		e.request("p", "y"+strconv.Itoa(100+i), 1, have(0, 9), none(1))
	}
	e.after(1000)
	// x100…x163 (64 peers) go first, each with its one recorded have-map.
	e.wantRange("p", 2, 8, 0, 8)
	got := e.forgotten()
	if len(got) != 64 || got[0] != "x100/0" || got[63] != "x163/0" {
		t.Fatalf("first command forgot %d: %v", len(got), got)
	}
	// Then x164…x169 and, being of one tick, all 100 y peers together.
	e.wantRange("p", 3, 8, 0, 8)
	if got := e.forgotten(); len(got) != 106 || got[5] != "x169/0" || got[6] != "y100/0" {
		t.Fatalf("second command forgot %d: %v", len(got), got)
	}
	if err := e.m.Pools().Check(); err != nil {
		t.Fatal(err)
	}
	e.checkReplay()
}

func TestPeerIdleTimeoutConfig(t *testing.T) {
	e := setup(t)
	for _, d := range []time.Duration{500 * time.Millisecond, 31 * 24 * time.Hour, -time.Second} {
		out := e.create("bad", idleConfig(d, time.Minute))
		var re *registrar.Error
		if !errors.As(out.Err, &re) || re.Reason != registrar.ReasonInvalidArgument || re.Metadata["field"] != "config.peer_idle_timeout" {
			t.Fatalf("idle timeout %v: %v", d, out.Err)
		}
	}
	out := e.create("p", nil)
	if out.Err != nil || out.Config.PeerIdleMs != pool.DefaultPeerIdleMs || out.Config.API().PeerIdleTimeout.AsDuration() != time.Hour {
		t.Fatalf("default: %+v", out)
	}
	// Naming the default is the same configuration.
	if out := e.create("p", idleConfig(time.Hour, 5*time.Minute)); out.Err != nil || out.Created {
		t.Fatalf("same config again: %+v", out)
	}
	if out := e.create("p", idleConfig(2*time.Hour, 5*time.Minute)); registrar.ReasonOf(out.Err) != registrar.ReasonInvalidArgument {
		t.Fatalf("another idle timeout: %+v", out)
	}
}
