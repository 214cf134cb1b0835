package pool_test

import (
	"math/rand/v2"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

// BenchmarkRequestLeases: RequestLeases through statemachine.Machine on a
// pool of 100,000 pieces in 10 files with 1,000 peers, each sending
// have-maps (about half of every file, random) for all 10 files. Every
// iteration is one request of up to 4 pieces by the next peer; the
// completions that free its leases (and the rebuild of a drained pool)
// are not counted: requests/s is b.N over the time spent in the requests
// alone (measured around each call; StopTimer would stop the world).
func BenchmarkRequestLeases(b *testing.B) {
	const files, perFile, peers = 10, 10_000, 1000
	rng := rand.New(rand.NewPCG(1, 2))
	haves := make([][]*logpb.PoolHave, peers)
	for p := range haves {
		for f := range files {
			bits := make([]byte, perFile/8)
			for i := range bits {
				bits[i] = byte(rng.Uint32())
			}
			haves[p] = append(haves[p], &logpb.PoolHave{FileIndex: uint32(f), Bits: bits})
		}
	}
	names := make([]string, peers)
	for p := range names {
		names[p] = "peer-" + string(rune('a'+p%26)) + string(rune('a'+p/26%26)) + string(rune('a'+p/676))
	}
	build := func() *env {
		e := setup(b)
		for f := range files {
			e.wantRange("p", uint32(f), perFile, 0, perFile)
		}
		for p := range peers { // the pool has seen every have-map
			e.request("p", names[p], 1, haves[p]...)
			e.after(1)
		}
		e.log = nil
		return e
	}
	e := build()
	granted, done := 0, 0
	var spent time.Duration
	b.ResetTimer()
	for i := range b.N {
		p := i % peers
		// The command is built, and its outcome read, outside the timed
		// part (env's helpers would also time testing.TB.Helper's stack
		// walks: ~4% of a request).
		cmd := &logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Op: &logpb.Command_Pool{Pool: &logpb.PoolCommand{
			Pool: "p", Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{Peer: names[p], Have: haves[p], Max: 4}}}}}
		t0 := time.Now()
		res := e.m.Apply(cmd)
		spent += time.Since(t0)
		if res.Pool == nil || res.Pool.Err != nil {
			b.Fatal(res.Outcome.Err, res.Pool)
		}
		out := *res.Pool
		granted += len(out.Leases)
		// Free the peer's leases (all of them: also the one from build).
		for _, r := range e.m.Pools().HeldBy("", "p", names[p]) {
			if c := e.complete("p", names[p], r[0], r[1], true, tenurev1.FailureReason_FAILURE_REASON_UNSPECIFIED); c.Err != nil {
				b.Fatal(c.Err)
			}
			done++
		}
		e.after(1)
		e.log = e.log[:0]
		if done > files*perFile-20_000 { // fewer than 20,000 pieces still wanted
			e, done = build(), 0
		}
	}
	b.ReportMetric(float64(b.N)/spent.Seconds(), "requests/s")
	b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "ns/request")
	b.ReportMetric(float64(granted)/float64(b.N), "leases/request")
}
