package registrar_test

import (
	"google.golang.org/protobuf/proto"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

func TestRelease_ByHolder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		reason tenurev1.ReleaseReason
		want   tenurev1.ReleaseReason
	}{
		{"no_reason_is_voluntary", tenurev1.ReleaseReason_RELEASE_REASON_UNSPECIFIED, tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY},
		{"completed", tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED, tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED},
		{"aborted", tenurev1.ReleaseReason_RELEASE_REASON_ABORTED, tenurev1.ReleaseReason_RELEASE_REASON_ABORTED},
		{"voluntary", tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY, tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1", ttl(30_000))
			mark := e.mark()
			out := e.after(1234).releaseWith(&logpb.Release{LeaseId: l.ID, Holder: "w1", Reason: c.reason})
			if out.Err != nil || out.AlreadyTerminal || out.Lease == nil {
				t.Fatalf("release: %+v", out)
			}
			recs := e.wantRecords(mark, "ended RELEASED")
			if got := recs[0].GetEnded().Reason; got != c.want {
				t.Fatalf("recorded reason %v, want %v", got, c.want)
			}
			got := e.get(l.ID)
			if got.State != registrar.Released || got.ReleaseReason != c.want || got.Remaining != 0 {
				t.Fatalf("lease %+v", got)
			}
			// A released lease terminates when it was released.
			if got.TerminatedAt.UnixMilli() != wallAt(e.tick) {
				t.Fatalf("terminated at %v, want %d", got.TerminatedAt, wallAt(e.tick))
			}
			// The resource is free again.
			e.mustAcquire("orders/42", "w2")
		})
	}
}

// Only the holder may release (CTR-0505; seed 000 "Unauthorized Release Attack").
func TestRelease_NotHolder_CTR0505(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1")
	var out registrar.Outcome
	e.unchanged(func() { out = e.release(l.ID, "mallory") })
	wantReason(t, out.Err, registrar.ReasonNotHolder)
	wantErrIs(t, out.Err, registrar.ErrNotHolder)
	wantMeta(t, out.Err, "lease_id", l.ID, "holder", "w1")
	wantMessagePrefix(t, out.Err)
	if s := e.state(l.ID); s != registrar.Active {
		t.Fatalf("state %v", s)
	}
	// Also on an ended lease: the caller learns nothing it may not.
	e.release(l.ID, "w1")
	wantReason(t, e.release(l.ID, "mallory").Err, registrar.ReasonNotHolder)
}

// Release is idempotent: a lease already released, expired, revoked or
// pruned answers success with AlreadyTerminal and changes nothing (seed 002
// §5.3; API.md conventions).
func TestRelease_IdempotentOnEndedLeases(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		end       func(e *env, l registrar.Lease)
		wantState registrar.State
		pruned    bool
	}{
		{"released", func(e *env, l registrar.Lease) { e.release(l.ID, "w1") }, registrar.Released, false},
		{"expired_recorded", func(e *env, l registrar.Lease) { e.at(l.ExpiresTick).advance() }, registrar.Expired, false},
		{"expired_not_yet_recorded", func(e *env, l registrar.Lease) { e.at(l.ExpiresTick + 1) }, registrar.Expired, false},
		{"revoked", func(e *env, l registrar.Lease) { e.revoke(l.ID, "ops") }, registrar.Revoked, false},
		{"transferred", func(e *env, l registrar.Lease) { e.transfer(l.ID, "w1", "w2", nil) }, registrar.Released, false},
		{"pruned", func(e *env, l registrar.Lease) {
			e.release(l.ID, "w1")
			e.after(1000).mustAcquire("other", "w9") // a record after the retention prunes
		}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.setPolicy("default", &tenurev1.NamespacePolicy{LeaseRetention: durationpb.New(time.Second)})
			l := e.mustAcquire("orders/42", "w1", ttl(5000))
			c.end(e, l)
			e.after(1) // not the tick of the ending command
			if c.name == "expired_not_yet_recorded" {
				// The first release applies the due expiry itself, then answers.
				out := e.release(l.ID, "w1")
				if out.Err != nil || !out.AlreadyTerminal || out.Lease.State != registrar.Expired {
					t.Fatalf("release: %+v", out)
				}
			}
			var out registrar.Outcome
			e.unchanged(func() { out = e.release(l.ID, "w1") })
			if out.Err != nil || !out.AlreadyTerminal {
				t.Fatalf("release again: %+v", out)
			}
			if c.pruned {
				if out.Lease != nil {
					t.Fatalf("pruned lease returned %+v", out.Lease)
				}
				return
			}
			if out.Lease == nil || out.Lease.State != c.wantState || out.Lease.ID != l.ID {
				t.Fatalf("lease %+v", out.Lease)
			}
		})
	}
}

func TestRelease_UnknownAndBadIDs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1")
	wall, tag, seq, _ := registrar.ParseLeaseID(l.ID)
	cases := []struct {
		name  string
		id    string
		want  registrar.Reason
		field string
	}{
		{"never_issued", registrar.FormatLeaseID(wall, tag, seq+1), registrar.ReasonLeaseNotFound, ""},
		{"forged_time_part", registrar.FormatLeaseID(wall+1, tag, seq), registrar.ReasonLeaseNotFound, ""},
		{"other_cluster_tag", registrar.FormatLeaseID(wall, tag+1, seq), registrar.ReasonLeaseNotFound, ""},
		{"free_text", "lease-001", registrar.ReasonLeaseNotFound, ""},
		{"empty", "", registrar.ReasonInvalidArgument, "lease_id"},
		{"oversized", string(make([]byte, 200)), registrar.ReasonInvalidArgument, "lease_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out registrar.Outcome
			e.unchanged(func() { out = e.release(c.id, "w1") })
			wantReason(t, out.Err, c.want)
			if out.AlreadyTerminal {
				t.Fatal("unknown id reported as already terminal")
			}
			if c.field != "" {
				wantMeta(t, out.Err, "field", c.field)
			}
		})
	}
	// Reasons a client may not give.
	for _, r := range []tenurev1.ReleaseReason{tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED, 99} {
		var out registrar.Outcome
		e.unchanged(func() { out = e.releaseWith(&logpb.Release{LeaseId: l.ID, Holder: "w1", Reason: r}) })
		wantReason(t, out.Err, registrar.ReasonInvalidArgument)
		wantMeta(t, out.Err, "field", "reason")
	}
	out := e.release(l.ID, "")
	wantReason(t, out.Err, registrar.ReasonInvalidArgument)
	wantMeta(t, out.Err, "field", "holder")
}

// Revoke: REVOKED with the admin's reason; hands the resource on; revoking
// again is a no-op; other ended leases say why they cannot be revoked.
func TestRevoke(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1", ttl(5000))
	e.acquire("orders/42", "w2", wait(60_000))
	mark := e.mark()
	out := e.after(10).revoke(l.ID, "holder is wedged")
	if out.Err != nil || out.Lease == nil || out.Lease.State != registrar.Revoked || out.Lease.RevokeReason != "holder is wedged" {
		t.Fatalf("revoke: %+v", out)
	}
	recs := e.wantRecords(mark, "ended REVOKED", "issued w2")
	if recs[0].GetEnded().RevokeReason != "holder is wedged" {
		t.Fatalf("record %+v", recs[0].GetEnded())
	}
	if got := e.get(l.ID); got.TerminatedAt.UnixMilli() != wallAt(e.tick) {
		t.Fatalf("terminated at %v", got.TerminatedAt)
	}
	var again registrar.Outcome
	e.unchanged(func() { again = e.revoke(l.ID, "again") })
	if again.Err != nil || again.Lease.State != registrar.Revoked || again.Lease.RevokeReason != "holder is wedged" {
		t.Fatalf("revoke again: %+v", again)
	}
	// The holder cannot renew a revoked lease, and releasing it is idempotent.
	wantReason(t, e.renew(l.ID, nil).Err, registrar.ReasonLeaseTerminal)
	if out := e.release(l.ID, "w1"); out.Err != nil || !out.AlreadyTerminal {
		t.Fatalf("release revoked: %+v", out)
	}

	t.Run("ended_leases", func(t *testing.T) {
		e := setup(t)
		rel := e.mustAcquire("a", "w1")
		e.release(rel.ID, "w1")
		exp := e.mustAcquire("b", "w1", ttl(1000))
		e.after(1000)
		_, tag, _, _ := registrar.ParseLeaseID(rel.ID)
		cases := []struct {
			name string
			id   string
			want registrar.Reason
		}{
			{"released", rel.ID, registrar.ReasonLeaseTerminal},
			{"expired", exp.ID, registrar.ReasonLeaseExpired},
			{"unknown", registrar.FormatLeaseID(wallAt(e.tick), tag, 777), registrar.ReasonLeaseNotFound},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				out := e.revoke(c.id, "")
				wantReason(t, out.Err, c.want)
				e.unchanged(func() { e.revoke(c.id, "") })
			})
		}
		long := string(make([]byte, registrar.MaxReasonBytes+1))
		wantReason(t, e.revoke(rel.ID, long).Err, registrar.ReasonInvalidArgument)
	})
}

// Transfer: one atomic step; the old lease ends RELEASED/TRANSFERRED, the
// new one has a new id, the new holder and a higher fence, and no waiter
// slips in between (DESIGN §1.1; seed 001 "lease handoff").
func TestTransfer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("wf/7", "orch-a", ttl(20_000))
	e.after(100).renew(l.ID, nil)
	q := e.acquire("wf/7", "orch-c", wait(60_000))
	mark := e.mark()
	out := e.after(500).transfer(l.ID, "orch-a", "orch-b", nil)
	if out.Err != nil || out.Lease == nil || out.Released == nil {
		t.Fatalf("transfer: %+v", out)
	}
	recs := e.wantRecords(mark, "ended RELEASED", "issued orch-b")
	if recs[0].GetEnded().Reason != tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED ||
		recs[0].GetEnded().TransferredTo != out.Lease.Fence || recs[1].GetIssued().TransferredFrom != l.Fence {
		t.Fatalf("records %v", recs)
	}
	old, nw := *out.Released, *out.Lease
	if old.ID != l.ID || old.State != registrar.Released || old.ReleaseReason != tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED {
		t.Fatalf("old %+v", old)
	}
	if nw.ID == l.ID || nw.Holder != "orch-b" || nw.Fence <= l.Fence || nw.State != registrar.Active ||
		nw.Resource != "wf/7" || nw.Mode != registrar.Exclusive {
		t.Fatalf("new %+v", nw)
	}
	// The new lease starts now with the old lease's ttl and fresh counters.
	if nw.IssuedTick != e.tick || nw.ExpiresTick != e.tick+20_000 || nw.RenewalCount != 0 {
		t.Fatalf("new lease timing %+v", nw)
	}
	if !e.m.Registrar().WaiterPending(q.WaiterID) {
		t.Fatal("the waiter slipped in")
	}
	if got := e.activeHolders("", "wf/7"); len(got) != 1 || got[0] != "orch-b" {
		t.Fatalf("active %v", got)
	}
	// The old holder is deposed.
	wantReason(t, e.renew(l.ID, nil).Err, registrar.ReasonLeaseTerminal)
	if cur, _, _ := e.m.Registrar().Fence("", "wf/7", l.Fence, e.tick); cur {
		t.Fatal("old fence still current")
	}
	// With a ttl.
	out = e.after(10).transfer(nw.ID, "orch-b", "orch-d", ms(3000))
	if out.Err != nil || out.Lease.ExpiresTick != e.tick+3000 || out.Lease.Fence <= nw.Fence {
		t.Fatalf("transfer with ttl: %+v", out)
	}
}

func TestTransfer_Errors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(e *env, l registrar.Lease) (id, holder, newHolder string, ttlMs *int64)
		want  registrar.Reason
		field string
	}{
		{"not_holder", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			return l.ID, "mallory", "w2", nil
		}, registrar.ReasonNotHolder, ""},
		{"expired", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			e.at(l.ExpiresTick).advance() // the expiry itself is recorded by whatever command comes first
			return l.ID, "w1", "w2", nil
		}, registrar.ReasonLeaseExpired, ""},
		{"released", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			e.release(l.ID, "w1")
			return l.ID, "w1", "w2", nil
		}, registrar.ReasonLeaseTerminal, ""},
		{"unknown", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			w, tag, seq, _ := registrar.ParseLeaseID(l.ID)
			return registrar.FormatLeaseID(w, tag, seq+50), "w1", "w2", nil
		}, registrar.ReasonLeaseNotFound, ""},
		{"ttl_too_long", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			return l.ID, "w1", "w2", ms(300_001)
		}, registrar.ReasonTTLOutOfRange, ""},
		{"ttl_zero", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			return l.ID, "w1", "w2", ms(0)
		}, registrar.ReasonTTLOutOfRange, ""},
		{"no_new_holder", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			return l.ID, "w1", "", nil
		}, registrar.ReasonInvalidArgument, "new_holder"},
		// A transfer to oneself would restart the renewal count and the
		// lifetime, past the policy's limits and ahead of waiters.
		{"to_itself", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			e.setPolicy("default", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(1)})
			return l.ID, "w1", "w1", nil
		}, registrar.ReasonInvalidArgument, "new_holder"},
		{"new_holder_over_quota", func(e *env, l registrar.Lease) (string, string, string, *int64) {
			e.setPolicy("default", &tenurev1.NamespacePolicy{MaxActivePerHolder: 1})
			e.mustAcquire("other", "w2")
			return l.ID, "w1", "w2", nil
		}, registrar.ReasonQuotaExceeded, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("wf/7", "w1", ttl(5000))
			id, holder, newHolder, ttlMs := c.setup(e, l)
			var out registrar.Outcome
			e.unchanged(func() { out = e.transfer(id, holder, newHolder, ttlMs) })
			wantReason(t, out.Err, c.want)
			wantMessagePrefix(t, out.Err)
			if c.field != "" {
				wantMeta(t, out.Err, "field", c.field)
			}
			if out.Lease != nil || out.Released != nil {
				t.Fatalf("failed transfer returned leases: %+v", out)
			}
		})
	}
}

func TestCheckReleaseReasonNamesTheReason(t *testing.T) {
	t.Parallel()
	for rr, want := range map[tenurev1.ReleaseReason]string{
		tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED: "RELEASE_REASON_TRANSFERRED is recorded by the registrar",
		tenurev1.ReleaseReason(42):                        "unknown release reason 42",
	} {
		_, err := registrar.CheckReleaseReason(rr)
		wantReason(t, err, registrar.ReasonInvalidArgument)
		wantMeta(t, err, "field", "reason")
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "give COMPLETED, ABORTED or VOLUNTARY") {
			t.Errorf("reason %d: %v", rr, err)
		}
	}
	if got, err := registrar.CheckReleaseReason(0); err != nil || got != tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY {
		t.Errorf("no reason: %v %v, want VOLUNTARY", got, err)
	}
}
