package registrar_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Restart grace (seed 002 §3.1 "Resurrection Window"; DESIGN §1.1): a
// restarting holder's active leases are held at most 15 s past their
// expiry, once per lease, never past max_lifetime.
func TestGrace_HoldsPastExpiry_Seed002(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		grace     *int64
		wantGrace int64 // past expiry
	}{
		{"default_is_15s", nil, 15_000},
		{"shorter_on_request", ms(5000), 5000},
		{"capped_at_15s", ms(60_000), 15_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "agent-1", ttl(10_000))
			mark := e.mark()
			out := e.after(4000).declareRestart("agent-1", c.grace)
			if out.Err != nil || len(out.Leases) != 1 || out.Leases[0].ID != l.ID {
				t.Fatalf("declare: %+v", out)
			}
			recs := e.wantRecords(mark, "grace")
			until := l.ExpiresTick + registrar.Tick(c.wantGrace)
			if g := recs[0].GetGrace(); g.UntilTick != int64(until) || g.UntilWall != wallAt(until) {
				t.Fatalf("grace record %+v, want until %d", g, until)
			}
			got := out.Leases[0]
			if got.GraceTick != until || got.Deadline() != until || got.ExpiresTick != l.ExpiresTick {
				t.Fatalf("lease %+v", got)
			}
			// Held past its expiry, not at the end of the grace.
			reg := e.m.Registrar()
			if v, _ := reg.Get(l.ID, l.ExpiresTick+1); v.State != registrar.Active {
				t.Fatalf("1 ms past expiry in grace: %v", v.State)
			}
			if v, _ := reg.Get(l.ID, until-1); v.State != registrar.Active || v.Remaining != time.Millisecond {
				t.Fatalf("last ms of grace: %+v", v)
			}
			if v, _ := reg.Get(l.ID, until); v.State != registrar.Expired {
				t.Fatalf("end of grace: %v", v.State)
			}
			wantReason(t, e.at(l.ExpiresTick+1).acquire("orders/42", "agent-2").Err, registrar.ReasonLeaseHeld)
			mark = e.mark()
			e.at(until).mustAcquire("orders/42", "agent-2")
			e.wantRecords(mark, "ended EXPIRED", "issued agent-2")
			// Its life ended when the grace did.
			if v := e.get(l.ID); v.TerminatedAt.UnixMilli() != wallAt(until) {
				t.Fatalf("terminated at %v, want the end of the grace", v.TerminatedAt)
			}
		})
	}
}

// The holder verifies and renews during the grace; that ends the grace.
func TestGrace_RenewDuringGrace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "agent-1", ttl(10_000))
	e.after(9000).declareRestart("agent-1", nil)
	e.at(l.ExpiresTick + 3000) // restarted, past the old expiry
	vr, err := e.m.Registrar().Verify([]string{l.ID}, e.tick)
	if err != nil || !vr[0].Found || vr[0].Lease.State != registrar.Active || vr[0].Lease.Holder != "agent-1" {
		t.Fatalf("verify in grace: %+v %v", vr, err)
	}
	out := e.renew(l.ID, nil)
	if out.Err != nil || out.Lease.ExpiresTick != e.tick+10_000 || out.Lease.Deadline() != e.tick+10_000 {
		t.Fatalf("renew in grace: %v %+v", out.Err, out.Lease)
	}
	// A second declare does not grant another grace.
	var again registrar.Outcome
	e.unchanged(func() { again = e.after(1000).declareRestart("agent-1", nil) })
	if again.Err != nil || len(again.Leases) != 0 {
		t.Fatalf("second declare: %+v", again)
	}
	if got := e.get(l.ID); got.Deadline() != got.ExpiresTick {
		t.Fatalf("grace reappeared: %+v", got)
	}
}

// Once per lease: declaring again before the renewal does not extend.
func TestGrace_SecondDeclareDoesNotExtend(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "agent-1", ttl(10_000))
	first := e.after(1000).declareRestart("agent-1", ms(5000))
	var again registrar.Outcome
	e.unchanged(func() { again = e.after(1000).declareRestart("agent-1", nil) })
	if again.Err != nil || len(again.Leases) != 0 {
		t.Fatalf("second declare: %+v", again)
	}
	if got := e.get(l.ID); got.GraceTick != first.Leases[0].GraceTick {
		t.Fatalf("grace moved from %d to %d", first.Leases[0].GraceTick, got.GraceTick)
	}
	// A lease acquired later gets its own grace.
	n := e.mustAcquire("orders/43", "agent-1", ttl(10_000))
	out := e.declareRestart("agent-1", nil)
	if len(out.Leases) != 1 || out.Leases[0].ID != n.ID {
		t.Fatalf("new lease grace: %+v", out.Leases)
	}
}

// The grace never carries a lease past acquired + max_lifetime.
func TestGrace_NeverPastMaxLifetime(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("default", &tenurev1.NamespacePolicy{MaxLifetime: durationpb.New(12 * time.Second)})
	l := e.mustAcquire("orders/42", "agent-1", ttl(10_000))
	capped := e.mustAcquire("orders/43", "agent-1", ttl(12_000)) // already at its cap
	out := e.after(1000).declareRestart("agent-1", nil)
	if out.Err != nil || len(out.Leases) != 1 || out.Leases[0].ID != l.ID {
		t.Fatalf("declare: %+v", out)
	}
	if got := out.Leases[0].GraceTick; got != l.IssuedTick+12_000 {
		t.Fatalf("grace until %d, want the lifetime cap %d", got, l.IssuedTick+12_000)
	}
	if got := e.get(capped.ID); got.Deadline() != capped.ExpiresTick {
		t.Fatalf("lease at its cap got a grace: %+v", got)
	}
}

// Only the declaring holder's active leases, optionally one namespace.
func TestGrace_ScopeAndValidation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.mustAcquire("a", "agent-1")
	b := e.mustAcquire("b", "agent-1", inNS("tenant-b"))
	other := e.mustAcquire("c", "agent-2")
	gone := e.mustAcquire("d", "agent-1")
	e.release(gone.ID, "agent-1")
	out := e.declareRestartIn("agent-1", "tenant-b", nil)
	if len(out.Leases) != 1 || out.Leases[0].ID != b.ID {
		t.Fatalf("one namespace: %+v", out.Leases)
	}
	out = e.declareRestart("agent-1", nil)
	if len(out.Leases) != 1 || out.Leases[0].ID != a.ID {
		t.Fatalf("all namespaces (b already used its grace): %+v", out.Leases)
	}
	if got := e.get(other.ID); got.GraceTick != 0 {
		t.Fatal("another holder's lease got a grace")
	}
	if out := e.declareRestart("nobody", nil); out.Err != nil || len(out.Leases) != 0 {
		t.Fatalf("nobody: %+v", out)
	}
	for _, c := range []struct {
		name   string
		holder string
		grace  *int64
		field  string
	}{
		{"no_holder", "", nil, "holder"},
		{"zero_grace", "agent-1", ms(0), "grace"},
		{"negative_grace", "agent-1", ms(-5), "grace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out registrar.Outcome
			e.unchanged(func() { out = e.declareRestart(c.holder, c.grace) })
			wantReason(t, out.Err, registrar.ReasonInvalidArgument)
			wantMeta(t, out.Err, "field", c.field)
		})
	}
}
