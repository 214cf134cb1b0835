package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// BenchmarkProposeCycle measures acquire+release cycles proposed straight
// to a durable single node (no API in between: Raft, the log's fsync and
// the FSM only), with 1 and 64 concurrent callers; it reports cycles/s
// and the median latency of one proposal.
func BenchmarkProposeCycle(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.DataDir = b.TempDir()
			cfg.RaftAddr = "127.0.0.1:0"
			n, err := Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			ctx := context.Background()
			if err := n.WaitLeader(ctx); err != nil {
				b.Fatal(err)
			}
			var mu sync.Mutex
			var lat []time.Duration
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range clients {
				cycles := b.N / clients
				if c < b.N%clients {
					cycles++
				}
				wg.Go(func() {
					res, holder := fmt.Sprintf("bench/%d", c), fmt.Sprintf("w%d", c)
					var mine []time.Duration
					for range cycles {
						t0 := time.Now()
						a, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: res, Holder: holder}}})
						mine = append(mine, time.Since(t0))
						if err == nil {
							err = a.Outcome.Err
						}
						if err != nil {
							b.Error(err)
							return
						}
						t0 = time.Now()
						r, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: a.Outcome.Lease.ID, Holder: holder}}})
						mine = append(mine, time.Since(t0))
						if err == nil {
							err = r.Outcome.Err
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs/op")
			}
		})
	}
}

// BenchmarkApplyBatch measures the FSM's apply path alone (no Raft, no
// log fsync): entries of 46 acquires, then 46 releases of those leases,
// decoded, applied, sealed, observed by the metrics, appended to the feed
// and handed to a durable ledger. It reports the time per command the
// FSM goroutine spends, which every caller of Propose waits for.
func BenchmarkApplyBatch(b *testing.B) {
	const perEntry = 46
	f := newFSM(statemachine.DefaultConfig(), NewFeed(0, nil))
	f.observe = newMetrics(nil, nil).observe
	var err error
	if f.ledger, err = openLedger(b.TempDir(), 0, 0, nil, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	defer f.ledger.close()
	index := uint64(0)
	apply := func(cmds ...*logpb.Command) []statemachine.Result {
		data, err := proto.Marshal(&logpb.Batch{Commands: cmds})
		if err != nil {
			b.Fatal(err)
		}
		index++
		out := f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})
		res, ok := out[0].([]statemachine.Result)
		if !ok {
			b.Fatalf("apply: %v", out[0])
		}
		return res
	}
	const wall = 1_700_000_000_000
	apply(&logpb.Command{Tick: 1, Wall: wall, Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: make([]byte, 32)}}})
	acq := make([]*logpb.Command, perEntry)
	rel := make([]*logpb.Command, perEntry)
	tick := int64(1)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		tick++
		for i := range acq {
			acq[i] = &logpb.Command{Tick: tick, Wall: wall + tick, Actor: "bench", Rules: statemachine.Rules, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
				Resource: fmt.Sprintf("bench/%d", i), Holder: fmt.Sprintf("w%d", i)}}}
		}
		data, err := proto.Marshal(&logpb.Batch{Commands: acq})
		if err != nil {
			b.Fatal(err)
		}
		index++
		b.StartTimer()
		out := f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})
		b.StopTimer()
		res := out[0].([]statemachine.Result)
		for i, r := range res {
			if r.Outcome.Err != nil {
				b.Fatal(r.Outcome.Err)
			}
			rel[i] = &logpb.Command{Tick: tick, Wall: wall + tick, Actor: "bench", Rules: statemachine.Rules, Op: &logpb.Command_Release{Release: &logpb.Release{
				LeaseId: r.Outcome.Lease.ID, Holder: fmt.Sprintf("w%d", i)}}}
		}
		if data, err = proto.Marshal(&logpb.Batch{Commands: rel}); err != nil {
			b.Fatal(err)
		}
		index++
		b.StartTimer()
		out = f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})
		b.StopTimer()
		for _, r := range out[0].([]statemachine.Result) {
			if r.Outcome.Err != nil {
				b.Fatal(r.Outcome.Err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*perEntry), "ns/cmd")
}
