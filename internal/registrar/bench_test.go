package registrar_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// benchMachine returns a bootstrapped machine whose default namespace
// allows a million leases per holder. Records are not kept (the server
// hands them to its ledger store).
func benchMachine(b *testing.B) *statemachine.Machine {
	b.Helper()
	m := statemachine.New(statemachine.DefaultConfig())
	seed := make([]byte, 32)
	if out := m.Apply(&logpb.Command{Tick: 1, Wall: wallBase, Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: seed}}}); out.Outcome.Err != nil {
		b.Fatal(out.Outcome.Err)
	}
	p := registrar.DefaultPolicy()
	p.MaxActivePerHolder = 1_000_000
	if out := m.Apply(&logpb.Command{Tick: 1, Wall: wallBase, Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default", Policy: p.Proto()}}}); out.Outcome.Err != nil {
		b.Fatal(out.Outcome.Err)
	}
	return m
}

func resourceNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "orders/" + strconv.Itoa(i)
	}
	return names
}

// BenchmarkAcquireRelease measures acquire+release pairs on distinct
// resources (one pair per op).
func BenchmarkAcquireRelease(b *testing.B) {
	acquireReleaseLoop(b, benchMachine(b), 10)
}

// acquireReleaseLoop applies an acquire and a release per op, on 1,024
// resources in turn, from tick on.
func acquireReleaseLoop(b *testing.B, m *statemachine.Machine, tick int64) {
	names := resourceNames(1024)
	acq := &logpb.Acquire{Holder: "w1"}
	rel := &logpb.Release{Holder: "w1"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tick++
		acq.Resource = names[i&1023]
		out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Acquire{Acquire: acq}})
		if out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
		rel.LeaseId = out.Outcome.Lease.ID
		if out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Release{Release: rel}}); out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
	}
}

// BenchmarkAcquireReleaseWhilePruning: acquire+release pairs while the
// namespace prunes continuously (a 1 ms retention), beside 100,000 other
// namespaces that have nothing to prune.
func BenchmarkAcquireReleaseWhilePruning(b *testing.B) {
	m := benchMachine(b)
	tick := int64(10)
	for i := range 100_000 {
		ns := "tenant-" + strconv.Itoa(i)
		if out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Namespace: ns, Resource: "r", Holder: "w"}}}); out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
	}
	acquireReleasePruning(b, m, tick)
}

// BenchmarkAcquireReleaseBesideRetiringNamespaces: acquire+release pairs
// in a namespace that prunes continuously, beside 100,000 namespaces that
// each keep a terminal lease due later (each at its own tick, so that
// some namespace is due now and then): pruning visits the namespaces due,
// not all that keep terminal leases (it did, and a quarter million such
// namespaces cut a server to 212 commands/s).
func BenchmarkAcquireReleaseBesideRetiringNamespaces(b *testing.B) {
	m := benchMachine(b)
	tick := int64(10)
	for i := range 100_000 {
		ns := "tenant-" + strconv.Itoa(i)
		tick++
		out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Namespace: ns, Resource: "r", Holder: "w"}}})
		if out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
		if out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: out.Outcome.Lease.ID, Holder: "w"}}}); out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
	}
	acquireReleasePruning(b, m, tick)
}

// acquireReleasePruning runs acquireReleaseLoop in the default namespace
// with a 1 ms retention, so that it prunes continuously.
func acquireReleasePruning(b *testing.B, m *statemachine.Machine, tick int64) {
	p := registrar.DefaultPolicy()
	p.MaxActivePerHolder = 1_000_000
	p.LeaseRetention = 1
	if out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default", Policy: p.Proto()}}}); out.Outcome.Err != nil {
		b.Fatal(out.Outcome.Err)
	}
	acquireReleaseLoop(b, m, tick)
}

// BenchmarkRenewBatch1000 renews 1,000 leases in one command (one op).
func BenchmarkRenewBatch1000(b *testing.B) {
	m := benchMachine(b)
	tick := int64(10)
	ids := make([]string, 1000)
	for i := range ids {
		out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "r/" + strconv.Itoa(i), Holder: "w1"}}})
		ids[i] = out.Outcome.Lease.ID
	}
	cmd := &logpb.Renew{LeaseIds: ids}
	b.ReportAllocs()
	for b.Loop() {
		tick++
		out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Renew{Renew: cmd}})
		if len(out.Outcome.Failures) != 0 {
			b.Fatal(out.Outcome.Failures[0].Err)
		}
	}
}

// BenchmarkExpire100k expires 100,000 leases due at the same tick (one op).
func BenchmarkExpire100k(b *testing.B) {
	names := resourceNames(100_000)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		m := benchMachine(b)
		ttl := int64(5000)
		for _, n := range names {
			m.Apply(&logpb.Command{Tick: 10, Wall: wallBase + 10, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: n, Holder: "w1", TtlMs: &ttl}}})
		}
		b.StartTimer()
		out := m.Apply(&logpb.Command{Tick: 10 + ttl, Wall: wallBase + 10 + ttl, Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}})
		if len(out.Records) < 100_000 {
			b.Fatalf("expired %d records", len(out.Records))
		}
	}
}

// BenchmarkHeapPerActiveLease reports heap bytes per active lease with
// 1,000,000 active leases on distinct resources.
func BenchmarkHeapPerActiveLease(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		m := benchMachine(b)
		for i := range n {
			m.Apply(&logpb.Command{Tick: 2, Wall: wallBase + 2, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "jobs/" + strconv.Itoa(i), Holder: "w" + strconv.Itoa(i%100)}}})
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if a, _, _, _, _ := m.Registrar().Counts("default"); a != n {
			b.Fatalf("%d active", a)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/lease")
		runtime.KeepAlive(m)
	}
}

// BenchmarkCapture300kRetained: what a snapshot holds applies back for
// (CaptureLazy) and what completing it costs beside them (fill), with
// 300,000 released leases kept for their retention and 10,000 active.
func BenchmarkCapture300kRetained(b *testing.B) {
	m := benchMachine(b)
	tick := int64(10)
	rel := &logpb.Release{Holder: "w1"}
	for i := range 310_000 {
		out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "r/" + strconv.Itoa(i), Holder: "w1"}}})
		if out.Outcome.Err != nil {
			b.Fatal(out.Outcome.Err)
		}
		if i >= 10_000 {
			rel.LeaseId = out.Outcome.Lease.ID
			if out := m.Apply(&logpb.Command{Tick: tick, Wall: wallBase + tick, Op: &logpb.Command_Release{Release: rel}}); out.Outcome.Err != nil {
				b.Fatal(out.Outcome.Err)
			}
		}
	}
	b.Run("held", func(b *testing.B) {
		for b.Loop() {
			m.CaptureLazy()
		}
	})
	b.Run("fill", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			_, fill := m.CaptureLazy()
			b.StartTimer()
			fill()
		}
	})
}
