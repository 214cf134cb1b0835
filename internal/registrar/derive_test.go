package registrar_test

import (
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
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
