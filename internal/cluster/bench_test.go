package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/logpb"
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
