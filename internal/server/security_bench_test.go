package server

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// BenchmarkAcquireReleaseAuth is BenchmarkAcquireRelease with
// authentication on: every call carries a bearer token, is authorized,
// and the release checks the lease's holder before proposing.
func BenchmarkAcquireReleaseAuth(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			w1 := startSecure(b, nil).as("tok-w1")
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
					for range n {
						a, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: res}))
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := w1.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: a.Msg.Lease.LeaseId})); err != nil {
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

// BenchmarkAuthorizeAcquire measures the per-request authorization of an
// Acquire (rule lookup, role, namespace pattern, holder fill) without I/O.
func BenchmarkAuthorizeAcquire(b *testing.B) {
	bd := startSecure(b, nil)
	p, ok := bd.srv.cfg.Auth.Token("tok-w1")
	if !ok {
		b.Fatal("no principal")
	}
	ctx := context.WithValue(context.Background(), principalKey{}, p)
	b.ReportAllocs()
	for b.Loop() {
		req := &tenurev1.AcquireRequest{Resource: "orders/1"}
		if err := bd.srv.authorize(ctx, "/tenure.v1.LeaseService/Acquire", req); err != nil {
			b.Fatal(err)
		}
	}
}
