package registrar_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

func (e *env) derive(parent, holder, resource string, d *logpb.Derivation) registrar.Outcome {
	return e.do(&logpb.Command{Actor: holder, Op: &logpb.Command_Derive{Derive: &logpb.Derive{
		ParentLeaseId: parent, Holder: holder, Resource: resource, Derivation: d}}})
}

func TestDeriveDepthLimit(t *testing.T) {
	e := setup(t)
	id := e.mustAcquire("d", "h", ttl(60_000)).ID
	for i := range registrar.MaxTreeDepth {
		out := e.derive(id, "h", "d/"+string(rune('a'+i%26))+string(rune('a'+i/26)), nil)
		if out.Err != nil {
			t.Fatalf("level %d: %v", i+1, out.Err)
		}
		id = out.Lease.ID
	}
	out := e.derive(id, "h", "d/too-deep", nil)
	wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
	if m := registrar.ToError(out.Err).Metadata; m["quota"] != "max_tree_depth" {
		t.Errorf("metadata %v", m)
	}
	e.wantReplayEqual()
}

// TestDeriveChainDeadline: a child whose parent stops being honoured reads
// EXPIRED at once, before any record ends it, and Authorize/Consume
// refuse it; the next command's Advance ends it with its parent.
func TestDeriveChainDeadline(t *testing.T) {
	e := setup(t)
	p := e.mustAcquire("c", "h", ttl(5000)) // expires at 6000
	if out := e.declareRestart("h", ms(8000)); out.Err != nil {
		t.Fatal(out.Err)
	}
	e.at(7000) // past its expiry, inside its grace (until 14000)
	out := e.do(&logpb.Command{Actor: "h", Op: &logpb.Command_Derive{Derive: &logpb.Derive{
		ParentLeaseId: p.ID, Holder: "h", NewHolder: "k", Resource: "c/1", TtlMs: ms(60_000)}}})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	child := *out.Lease
	if child.ExpiresTick != 14000 {
		t.Fatalf("child expires at %d, want the parent's grace end 14000", child.ExpiresTick)
	}
	// The parent renews for 1s: its grace is gone, its deadline is 8000,
	// before the child's expiry.
	if out := e.renew(p.ID, ms(1000)); out.Err != nil {
		t.Fatal(out.Err)
	}
	r := e.m.Registrar()
	if l, _ := r.Get(child.ID, 7999); l.State != registrar.Active {
		t.Fatalf("child at 7999: %v", l.State)
	}
	if l, _ := r.Get(child.ID, 8000); l.State != registrar.Expired || l.TerminatedAt.UnixMilli() != wallBase+8000 {
		t.Fatalf("child at 8000, its parent past its deadline: %v terminated %v", l.State, l.TerminatedAt)
	}
	if _, err := r.Authorize(child.ID, "", "c/1/x", "", 8000); registrar.ReasonOf(err) != registrar.ReasonLeaseExpired {
		t.Fatalf("authorize at 8000: %v", err)
	}
	e.at(8000)
	out = e.do(&logpb.Command{Op: &logpb.Command_Consume{Consume: &logpb.Consume{LeaseId: child.ID, Counter: "x", Amount: 1}}})
	wantReason(t, out.Err, registrar.ReasonLeaseExpired)
	if l := e.get(child.ID); l.State != registrar.Expired || l.EndedBy != p.ID || l.TerminatedAt.UnixMilli() != wallBase+8000 {
		t.Fatalf("child after the advance: %v ended by %q at %v", l.State, l.EndedBy, l.TerminatedAt)
	}
	e.wantReplayEqual()
}

// TestDeriveCapFollowsParentOutOfGrace: a child derived while its parent
// was in restart grace is capped at the grace's end; when the parent then
// renews to an earlier deadline, the child's expiry as shown (and signed
// in a certificate) is the parent's, a renewal of the child succeeds and
// brings its own expiry down to that cap, and a child derived afterwards
// from the child is capped there too. Under rules 1 the renewal was
// refused as moving the expiry earlier (the replay of such entries must
// still refuse it).
func TestDeriveCapFollowsParentOutOfGrace(t *testing.T) {
	for _, rules := range []uint32{statemachine.Rules, 1} {
		e := setup(t)
		e.rules = rules
		p := e.mustAcquire("c", "h", ttl(5000)) // expires at 6000
		if out := e.declareRestart("h", ms(8000)); out.Err != nil {
			t.Fatal(out.Err)
		}
		e.at(7000) // inside the parent's grace (until 14000)
		out := e.do(&logpb.Command{Actor: "h", Op: &logpb.Command_Derive{Derive: &logpb.Derive{
			ParentLeaseId: p.ID, Holder: "h", NewHolder: "k", Resource: "c/1", TtlMs: ms(60_000)}}})
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		child := *out.Lease
		if out := e.renew(p.ID, ms(2000)); out.Err != nil { // deadline 9000
			t.Fatal(out.Err)
		}
		if l := e.get(child.ID); l.ExpiresTick != 9000 || l.ExpiresAt.UnixMilli() != wallBase+9000 || l.Remaining != 2*time.Second {
			t.Fatalf("rules %d: child after its parent left grace: expires %d at %v, %s left", rules, l.ExpiresTick, l.ExpiresAt, l.Remaining)
		}
		e.at(7500)
		out = e.renew(child.ID, nil)
		if rules < 2 {
			wantReason(t, out.Err, registrar.ReasonRenewalDoesNotExtend)
			e.wantReplayEqual()
			continue
		}
		if out.Err != nil {
			t.Fatalf("renewing the child: %v", out.Err)
		}
		if out.Lease.ExpiresTick != 9000 {
			t.Fatalf("renewed child expires at %d, want its parent's 9000", out.Lease.ExpiresTick)
		}
		gc := e.do(&logpb.Command{Actor: "k", Op: &logpb.Command_Derive{Derive: &logpb.Derive{
			ParentLeaseId: child.ID, Holder: "k", Resource: "c/1/a", TtlMs: ms(60_000)}}})
		if gc.Err != nil || gc.Lease.ExpiresTick != 9000 {
			t.Fatalf("grandchild: %v %v", gc.Err, gc.Lease)
		}
		e.wantReplayEqual()
	}
}

// TestConsumeCounterLimit: a lease tracks at most MaxCounters counters;
// the next new one is refused (QUOTA_EXCEEDED) and charges nothing, while
// the tracked ones can still be charged. Rules 1 tracked any number.
func TestConsumeCounterLimit(t *testing.T) {
	for _, rules := range []uint32{statemachine.Rules, 1} {
		e := setup(t)
		e.rules = rules
		id := e.mustAcquire("k", "h", ttl(60_000)).ID
		consume := func(counter string) registrar.Outcome {
			return e.do(&logpb.Command{Actor: "h", Op: &logpb.Command_Consume{Consume: &logpb.Consume{
				LeaseId: id, Counter: counter, Amount: 1}}})
		}
		for i := range registrar.MaxCounters {
			if out := consume(fmt.Sprintf("c%02d", i)); out.Err != nil {
				t.Fatalf("counter %d: %v", i, out.Err)
			}
		}
		out := consume("one-more")
		if rules < 2 {
			if out.Err != nil || len(e.get(id).Counters) != registrar.MaxCounters+1 {
				t.Fatalf("rules 1: %v, %d counters", out.Err, len(e.get(id).Counters))
			}
			e.wantReplayEqual()
			continue
		}
		wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
		if m := registrar.ToError(out.Err).Metadata; m["quota"] != "max_counters" || m["limit"] != "32" {
			t.Errorf("metadata %v", m)
		}
		if out := consume("c00"); out.Err != nil {
			t.Fatalf("a tracked counter: %v", out.Err)
		}
		if l := e.get(id); len(l.Counters) != registrar.MaxCounters || l.Counters[0].Used != 2 {
			t.Fatalf("counters: %v", l.Counters)
		}
		e.wantReplayEqual()
	}
}
