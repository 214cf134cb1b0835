package server

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// BenchmarkAcquireRelease measures acquire+release cycles through the
// generated Connect client (binary protobuf over h2c) against a durable
// single node, with 1 and 64 concurrent clients.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			bd := setup(b)
			ctx := context.Background()
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range clients {
				n := b.N / clients
				if c < b.N%clients {
					n++
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := fmt.Sprintf("bench/%d", c)
					holder := fmt.Sprintf("w%d", c)
					for range n {
						a, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: res, Holder: holder}))
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := bd.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: a.Msg.Lease.LeaseId, Holder: holder})); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}
