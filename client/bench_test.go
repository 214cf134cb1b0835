package tenure

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkClientAcquireRelease measures acquire+release cycles made
// through one Client by 64 goroutines against a real `tenure server`
// process (durable single node), over the shared Pipeline stream and with
// unary calls; it reports cycles/s.
func BenchmarkClientAcquireRelease(b *testing.B) {
	for _, mode := range []string{"pipeline", "unary"} {
		b.Run(mode, func(b *testing.B) {
			s := startRealServer(b)
			opts := []Option{WithHolder("bench")}
			if mode == "unary" {
				opts = append(opts, WithoutPipeline())
			}
			c := s.client(b, opts...)
			ctx := context.Background()
			const callers = 64
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range callers {
				n := b.N / callers
				if w < b.N%callers {
					n++
				}
				wg.Go(func() {
					res := fmt.Sprintf("bench/%d", w)
					for range n {
						l, err := c.Acquire(ctx, res, TTL(30*time.Second))
						if err != nil {
							b.Error(err)
							return
						}
						if err := l.Release(ctx, ReleaseCompleted); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
		})
	}
}
