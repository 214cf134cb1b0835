package registrar_test

import (
	"fmt"
	"google.golang.org/protobuf/proto"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// A heartbeat extends expiry to now + ttl: the lease's own ttl, or a new one
// that then sticks (DESIGN §1.1; seed 002 §3.2).
func TestRenew_ExtendsToTickPlusTTL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1", ttl(10_000))
	mark := e.mark()
	out := e.after(4000).renew(l.ID, nil)
	if out.Err != nil || out.Lease == nil {
		t.Fatal(out.Err)
	}
	recs := e.wantRecords(mark, "renewed")
	if rn := recs[0].GetRenewed(); rn.ExpiresTick != int64(e.tick)+10_000 || rn.GetLease().GetLeaseId() != l.ID {
		t.Fatalf("record %+v", rn)
	}
	got := *out.Lease
	if got.ExpiresTick != e.tick+10_000 || got.RenewalCount != 1 || got.ID != l.ID || got.Fence != l.Fence {
		t.Fatalf("renewed %+v", got)
	}
	if got.IssuedTick != l.IssuedTick {
		t.Fatalf("acquired tick moved: %d → %d", l.IssuedTick, got.IssuedTick)
	}
	if got.LastRenewedAt.UnixMilli() != wallAt(e.tick) || got.ExpiresAt.UnixMilli() != wallAt(e.tick+10_000) {
		t.Fatalf("wall times %v %v", got.LastRenewedAt, got.ExpiresAt)
	}
	// A new ttl applies now and becomes the lease's own.
	out = e.after(1000).renew(l.ID, ms(20_000))
	if out.Err != nil || out.Lease.ExpiresTick != e.tick+20_000 || out.Lease.TTL != 20*time.Second {
		t.Fatalf("renew with ttl: %+v %v", out.Lease, out.Err)
	}
	out = e.after(1000).renew(l.ID, nil)
	if out.Err != nil || out.Lease.ExpiresTick != e.tick+20_000 || out.Lease.RenewalCount != 3 {
		t.Fatalf("renew with the lease's ttl: %+v %v", out.Lease, out.Err)
	}
}

// Strict expiry: a renew at the expiry tick is LEASE_EXPIRED, 1 ms before
// works (seed 002 §5.1; CTR-0301 t >= expires_at is expired).
func TestRenew_StrictExpiry_CTR0301(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		offset int64 // from the issue tick; ttl is 5000
		want   registrar.Reason
	}{
		{"well_before", 1000, ""},
		{"one_ms_before", 4999, ""},
		{"at_expiry", 5000, registrar.ReasonLeaseExpired},
		{"one_ms_late", 5001, registrar.ReasonLeaseExpired},
		{"long_after", 500_000, registrar.ReasonLeaseExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1", ttl(5000))
			out := e.after(c.offset).renew(l.ID, nil)
			if c.want == "" {
				if out.Err != nil || out.Lease.ExpiresTick != e.tick+5000 {
					t.Fatalf("renew: %v %+v", out.Err, out.Lease)
				}
				return
			}
			wantReason(t, out.Err, c.want)
			wantErrIs(t, out.Err, registrar.ErrLeaseExpired)
			wantMeta(t, out.Err, "lease_id", l.ID)
			wantMessagePrefix(t, out.Err)
			if s := e.state(l.ID); s != registrar.Expired {
				t.Fatalf("state %v", s)
			}
		})
	}
}

// Renewing a released or revoked lease is LEASE_TERMINAL; an expired one is
// LEASE_EXPIRED (API.md conventions; INV-0102 / CTR-0504).
func TestRenew_EndedLeases_CTR0504(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		end  func(e *env, l registrar.Lease)
		want registrar.Reason
	}{
		{"released", func(e *env, l registrar.Lease) { e.release(l.ID, "w1") }, registrar.ReasonLeaseTerminal},
		{"revoked", func(e *env, l registrar.Lease) { e.revoke(l.ID, "ops") }, registrar.ReasonLeaseTerminal},
		{"transferred", func(e *env, l registrar.Lease) { e.transfer(l.ID, "w1", "w2", nil) }, registrar.ReasonLeaseTerminal},
		{"expired_and_recorded", func(e *env, l registrar.Lease) { e.at(l.ExpiresTick).advance() }, registrar.ReasonLeaseExpired},
		{"expired_not_yet_recorded", func(e *env, l registrar.Lease) { e.at(l.ExpiresTick + 7) }, registrar.ReasonLeaseExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1", ttl(5000))
			c.end(e, l)
			out := e.renew(l.ID, nil)
			wantReason(t, out.Err, c.want)
			wantMessagePrefix(t, out.Err)
			// And the renewal changed nothing.
			e.unchanged(func() { e.renew(l.ID, nil) })
		})
	}
}

func TestRenew_UnknownAndMalformedIDs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1")
	_, tag, seq, _ := registrar.ParseLeaseID(l.ID)
	cases := []struct {
		name  string
		id    string
		want  registrar.Reason
		field string
	}{
		{"never_issued", registrar.FormatLeaseID(wallAt(e.tick), tag, seq+1000), registrar.ReasonLeaseNotFound, ""},
		{"not_an_id_shape", "lease-001", registrar.ReasonLeaseNotFound, ""},
		{"empty", "", registrar.ReasonInvalidArgument, "lease_ids"},
		{"oversized", string(make([]byte, 129)), registrar.ReasonInvalidArgument, "lease_ids"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out registrar.Outcome
			e.unchanged(func() { out = e.renew(c.id, nil) })
			wantReason(t, out.Err, c.want)
			if c.field != "" {
				wantMeta(t, out.Err, "field", c.field)
			}
		})
	}
}

func TestRenew_NotHolder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1")
	var out registrar.Outcome
	e.unchanged(func() {
		out = e.renewWith(&logpb.Renew{LeaseIds: []string{l.ID}, Holder: "w2"})
	})
	wantReason(t, out.Err, registrar.ReasonNotHolder)
	wantMeta(t, out.Err, "lease_id", l.ID, "holder", "w1")
	if out := e.renewWith(&logpb.Renew{LeaseIds: []string{l.ID}, Holder: "w1"}); out.Err != nil {
		t.Fatal(out.Err)
	}
}

// A renewal that would move expiry earlier is RENEWAL_DOES_NOT_EXTEND; an
// equal one (a retry in the same tick) is a successful no-op that does not
// count (API.md conventions).
func TestRenew_DoesNotExtendAndEqualRetry(t *testing.T) {
	t.Parallel()
	t.Run("shorter_ttl", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		l := e.mustAcquire("orders/42", "w1", ttl(60_000))
		var out registrar.Outcome
		e.unchanged(func() { out = e.after(1000).renew(l.ID, ms(10_000)) })
		wantReason(t, out.Err, registrar.ReasonRenewalDoesNotExtend)
		wantErrIs(t, out.Err, registrar.ErrRenewalDoesNotExtend)
		wantMessagePrefix(t, out.Err)
		wantMeta(t, out.Err, "lease_id", l.ID, "expires_tick", strconv.FormatInt(int64(l.ExpiresTick), 10))
		if got := e.get(l.ID); got.ExpiresTick != l.ExpiresTick || got.RenewalCount != 0 {
			t.Fatalf("lease changed: %+v", got)
		}
	})
	t.Run("retry_in_same_tick", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		l := e.mustAcquire("orders/42", "w1", ttl(10_000))
		first := e.after(3000).renew(l.ID, nil)
		var again registrar.Outcome
		e.unchanged(func() { again = e.renew(l.ID, nil) })
		if again.Err != nil || again.Lease == nil {
			t.Fatalf("retry: %v", again.Err)
		}
		if again.Lease.ExpiresTick != first.Lease.ExpiresTick || again.Lease.RenewalCount != 1 {
			t.Fatalf("retry changed the lease: %+v", again.Lease)
		}
	})
	t.Run("at_issue_tick", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		l := e.mustAcquire("orders/42", "w1", ttl(10_000))
		var out registrar.Outcome
		e.unchanged(func() { out = e.renew(l.ID, nil) })
		if out.Err != nil || out.Lease.RenewalCount != 0 {
			t.Fatalf("renew at issue tick: %v %+v", out.Err, out.Lease)
		}
	})
	t.Run("equal_expiry_with_other_ttl", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		l := e.mustAcquire("orders/42", "w1", ttl(10_000))
		// 4 s later a 6 s ttl lands exactly on the current expiry.
		var out registrar.Outcome
		e.unchanged(func() { out = e.after(4000).renew(l.ID, ms(6000)) })
		if out.Err != nil || out.Lease.RenewalCount != 0 || out.Lease.ExpiresTick != l.ExpiresTick {
			t.Fatalf("equal expiry: %v %+v", out.Err, out.Lease)
		}
	})
}

func TestRenew_TTLOutOfRange(t *testing.T) {
	t.Parallel()
	for _, v := range []int64{0, -1, 999, 300_001} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1")
			var out registrar.Outcome
			e.unchanged(func() { out = e.after(10).renew(l.ID, ms(v)) })
			wantReason(t, out.Err, registrar.ReasonTTLOutOfRange)
			wantMeta(t, out.Err, "field", "ttl")
		})
	}
}

// Renew with several ids succeeds and lists each failure by id, in order.
func TestRenew_BatchListsFailuresPerID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.mustAcquire("a", "w1", ttl(10_000))
	b := e.mustAcquire("b", "w1", ttl(10_000))
	c := e.mustAcquire("c", "w1", ttl(10_000))
	e.release(c.ID, "w1")
	_, tag, _, _ := registrar.ParseLeaseID(a.ID)
	unknown := registrar.FormatLeaseID(wallAt(e.tick), tag, 9999)
	mark := e.mark()
	out := e.after(2000).renewWith(&logpb.Renew{LeaseIds: []string{a.ID, unknown, c.ID, b.ID}})
	if out.Err != nil || out.Lease != nil {
		t.Fatalf("batch: err %v lease %v", out.Err, out.Lease)
	}
	e.wantRecords(mark, "renewed", "renewed")
	if len(out.Leases) != 2 || out.Leases[0].ID != a.ID || out.Leases[1].ID != b.ID {
		t.Fatalf("renewed %+v", out.Leases)
	}
	for _, l := range out.Leases {
		if l.ExpiresTick != e.tick+10_000 {
			t.Fatalf("%s expires %d", l.ID, l.ExpiresTick)
		}
	}
	if len(out.Failures) != 2 {
		t.Fatalf("failures %+v", out.Failures)
	}
	if f := out.Failures[0]; f.LeaseID != unknown || registrar.ReasonOf(f.Err) != registrar.ReasonLeaseNotFound {
		t.Fatalf("failure 0: %s %v", f.LeaseID, f.Err)
	}
	if f := out.Failures[1]; f.LeaseID != c.ID || registrar.ReasonOf(f.Err) != registrar.ReasonLeaseTerminal {
		t.Fatalf("failure 1: %s %v", f.LeaseID, f.Err)
	}
	// A batch of only failures still succeeds as a call.
	if out := e.renewWith(&logpb.Renew{LeaseIds: []string{unknown, c.ID}}); out.Err != nil || len(out.Failures) != 2 {
		t.Fatalf("all-failed batch: %+v", out)
	}
}

// Renew every active lease of a holder in one call, across namespaces or
// within one.
func TestRenew_AllOfHolder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ids := map[string]bool{}
	for _, r := range strs("a", "b", "c") {
		ids[e.mustAcquire(r, "w1", ttl(10_000)).ID] = true
	}
	other := e.mustAcquire("x", "w1", ttl(10_000), inNS("tenant-b"))
	ids[other.ID] = true
	notMine := e.mustAcquire("d", "w2", ttl(10_000))
	gone := e.mustAcquire("e", "w1", ttl(10_000))
	e.release(gone.ID, "w1")

	out := e.after(5000).renewWith(&logpb.Renew{Holder: "w1", AllOfHolder: true})
	if out.Err != nil || len(out.Failures) != 0 || len(out.Leases) != 4 {
		t.Fatalf("all of holder: %+v", out)
	}
	for _, l := range out.Leases {
		if !ids[l.ID] || l.Holder != "w1" || l.ExpiresTick != e.tick+10_000 {
			t.Fatalf("renewed %+v", l)
		}
	}
	if got := e.get(notMine.ID); got.RenewalCount != 0 {
		t.Fatal("another holder's lease was renewed")
	}
	out = e.after(1000).renewWith(&logpb.Renew{Holder: "w1", AllOfHolder: true, Namespace: "tenant-b"})
	if out.Err != nil || len(out.Leases) != 1 || out.Leases[0].ID != other.ID {
		t.Fatalf("one namespace: %+v", out)
	}
	// Nobody's leases: an empty success.
	if out := e.renewWith(&logpb.Renew{Holder: "nobody", AllOfHolder: true}); out.Err != nil || len(out.Leases) != 0 {
		t.Fatalf("nobody: %+v", out)
	}
	// Failures of an all-of-holder renewal name their lease.
	out = e.renewWith(&logpb.Renew{Holder: "w1", AllOfHolder: true, TtlMs: ms(1000)})
	if out.Err != nil || len(out.Leases) != 0 || len(out.Failures) != 4 {
		t.Fatalf("shorter ttl for all: %+v", out)
	}
	for _, f := range out.Failures {
		if !ids[f.LeaseID] || registrar.ReasonOf(f.Err) != registrar.ReasonRenewalDoesNotExtend {
			t.Fatalf("failure %q: %v", f.LeaseID, f.Err)
		}
	}
	// all_of_holder without a holder, or no ids at all, is a bad request.
	out = e.renewWith(&logpb.Renew{AllOfHolder: true})
	wantReason(t, out.Err, registrar.ReasonInvalidArgument)
	wantMeta(t, out.Err, "field", "holder")
	out = e.renewWith(&logpb.Renew{})
	wantReason(t, out.Err, registrar.ReasonInvalidArgument)
	wantMeta(t, out.Err, "field", "lease_ids")
}

// max_renewals → RENEWAL_LIMIT_EXCEEDED with count/max metadata and the
// seed 003 message; recovery is release + re-acquire with fresh counters.
func TestRenew_RenewalLimit_Seed003(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("default", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(3)})
	l := e.mustAcquire("task/xyz-789", "w1", ttl(10_000))
	if l.MaxRenewals != 3 {
		t.Fatalf("max renewals %d", l.MaxRenewals)
	}
	for i := 1; i <= 3; i++ {
		out := e.after(1000).renew(l.ID, nil)
		if out.Err != nil || out.Lease.RenewalCount != uint32(i) {
			t.Fatalf("renewal %d: %v %+v", i, out.Err, out.Lease)
		}
		// A retry in the same tick does not use up a renewal.
		if out := e.renew(l.ID, nil); out.Err != nil || out.Lease.RenewalCount != uint32(i) {
			t.Fatalf("retry %d: %v %+v", i, out.Err, out.Lease)
		}
	}
	var out registrar.Outcome
	e.unchanged(func() { out = e.after(1000).renew(l.ID, nil) })
	wantReason(t, out.Err, registrar.ReasonRenewalLimitExceeded)
	wantErrIs(t, out.Err, registrar.ErrRenewalLimitExceeded)
	wantMeta(t, out.Err, "renewal_count", "3", "max_renewals", "3", "count", "3", "max", "3", "lease_id", l.ID)
	want := "RENEWAL_LIMIT_EXCEEDED: lease " + l.ID + " on task/xyz-789 has reached maximum renewals (3/3). Release and reclaim to continue."
	if out.Err.Error() != want {
		t.Fatalf("message %q\nwant    %q", out.Err.Error(), want)
	}
	if got := e.get(l.ID); got.State != registrar.Active || got.RenewalCount != 3 {
		t.Fatalf("lease %+v", got)
	}
	// Recovery: release and reclaim → new lease, new fence, fresh counters.
	e.release(l.ID, "w1")
	n := e.mustAcquire("task/xyz-789", "w1", ttl(10_000))
	if n.ID == l.ID || n.Fence <= l.Fence || n.RenewalCount != 0 {
		t.Fatalf("reclaimed %+v", n)
	}
	if out := e.after(1000).renew(n.ID, nil); out.Err != nil || out.Lease.RenewalCount != 1 {
		t.Fatalf("renew reclaimed: %v", out.Err)
	}
}

// max_lifetime caps expiry at acquired + max_lifetime, at issue and on
// every renewal; once a renewal can no longer extend the lease because of
// it, the answer is LIFETIME_EXCEEDED (seed 003 P1.1; DESIGN §1.1).
func TestRenew_LifetimeLimit_Seed003(t *testing.T) {
	t.Parallel()
	pol := &tenurev1.NamespacePolicy{MaxLifetime: durationpb.New(10 * time.Second)}

	t.Run("issue_capped", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		e.setPolicy("default", pol)
		l := e.mustAcquire("r", "w1", ttl(30_000))
		if l.ExpiresTick != l.IssuedTick+10_000 || l.MaxLifetime != 10*time.Second {
			t.Fatalf("issued %+v", l)
		}
	})
	t.Run("renewals_capped_then_refused", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		e.setPolicy("default", pol)
		l := e.mustAcquire("task/xyz-789", "w1", ttl(6000))
		acquired := l.IssuedTick
		out := e.after(5000).renew(l.ID, nil)
		if out.Err != nil || out.Lease.ExpiresTick != acquired+10_000 {
			t.Fatalf("capped renewal: %v %+v", out.Err, out.Lease)
		}
		var again registrar.Outcome
		e.unchanged(func() { again = e.after(1000).renew(l.ID, nil) })
		wantReason(t, again.Err, registrar.ReasonLifetimeExceeded)
		wantErrIs(t, again.Err, registrar.ErrLifetimeExceeded)
		wantMessagePrefix(t, again.Err)
		wantMeta(t, again.Err, "lease_id", l.ID, "max_lifetime_ms", "10000", "max", "10", "lifetime", "6", "lifetime_ms", "6000")
		if got := e.get(l.ID); got.State != registrar.Active || got.ExpiresTick != acquired+10_000 {
			t.Fatalf("lease %+v", got)
		}
		// At the cap the lease expires like any other.
		wantReason(t, e.at(acquired+10_000).renew(l.ID, nil).Err, registrar.ReasonLeaseExpired)
		// Recovery: a new lease with a fresh lifetime.
		n := e.mustAcquire("task/xyz-789", "w1", ttl(6000))
		if n.ExpiresTick != e.tick+6000 {
			t.Fatalf("reacquired %+v", n)
		}
	})
	t.Run("renew_that_fits_is_not_capped", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		e.setPolicy("default", pol)
		l := e.mustAcquire("r", "w1", ttl(3000))
		out := e.after(2000).renew(l.ID, nil)
		if out.Err != nil || out.Lease.ExpiresTick != e.tick+3000 {
			t.Fatalf("renew: %v %+v", out.Err, out.Lease)
		}
	})
}

// renewal_count saturates instead of overflowing (INV-0303) — not
// reachable in a test at 2^32 renewals; the count is at least monotonic.
func TestRenew_CountIsMonotonic_INV0303(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("r", "w1", ttl(2000))
	var last uint32
	for i := 0; i < 50; i++ {
		out := e.after(1000).renew(l.ID, nil)
		if out.Err != nil || out.Lease.RenewalCount != last+1 {
			t.Fatalf("renewal %d: %v %+v", i, out.Err, out.Lease)
		}
		last = out.Lease.RenewalCount
	}
}
