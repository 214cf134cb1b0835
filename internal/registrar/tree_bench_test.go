package registrar_test

import (
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
)

// BenchmarkConsumeDepth4 measures Consume on the leaf of a four-level
// chain (root → child → grandchild → leaf), each level carved a share of
// a counter, through the state machine (ledger sealing included). The
// leaf's budget is large enough never to run out.
func BenchmarkConsumeDepth4(b *testing.B) {
	m := benchMachine(b)
	tick := int64(10)
	ttl := int64(300_000)
	limit := func(n int64) *logpb.Derivation {
		return &logpb.Derivation{Limits: []*logpb.CounterLimit{{Counter: "tokens", Limit: n}}}
	}
	out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
		Resource: "job/1", Holder: "root", TtlMs: &ttl, Derivation: limit(1 << 50)}}})
	if out.Outcome.Err != nil {
		b.Fatal(out.Outcome.Err)
	}
	id := out.Outcome.Lease.ID
	for depth, res := range []string{"job/1/a", "job/1/a/b", "job/1/a/b/c"} {
		out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Derive{Derive: &logpb.Derive{
			ParentLeaseId: id, Holder: "root", Resource: res, TtlMs: &ttl, Derivation: limit(1<<50 - int64(depth+1)),
		}}})
		if out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
		id = out.Outcome.Lease.ID
	}
	c := &logpb.Consume{LeaseId: id, Counter: "tokens", Amount: 1}
	cmd := &logpb.Command{Op: &logpb.Command_Consume{Consume: c}}
	b.ReportAllocs()
	for b.Loop() {
		cmd.Tick, cmd.Wall = tick, wallBase+tick
		if out := m.Apply(cmd); out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
