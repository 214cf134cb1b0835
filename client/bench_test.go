package tenure

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkClientAcquireRelease measures acquire+release cycles made
// through one Client by 1 and 64 goroutines against a real `tenure server`
// process (durable single node), over the shared Pipeline stream and with
// unary calls; it reports cycles/s and the median cycle.
func BenchmarkClientAcquireRelease(b *testing.B) {
	for _, bc := range []struct {
		mode    string
		callers int
		held    int // leases the client holds (and keeps alive) meanwhile
	}{{"pipeline", 1, 0}, {"pipeline", 64, 0}, {"pipeline", 64, 5_000}, {"unary", 1, 0}, {"unary", 64, 0}} {
		mode, callers := bc.mode, bc.callers
		name := fmt.Sprintf("%s/callers=%d", mode, callers)
		if bc.held > 0 {
			name += fmt.Sprintf("/held=%d", bc.held)
		}
		b.Run(name, func(b *testing.B) {
			s := startRealServer(b)
			opts := []Option{WithHolder("bench")}
			if mode == "unary" {
				opts = append(opts, WithoutPipeline())
			}
			c := s.client(b, opts...)
			ctx := context.Background()
			var hold sync.WaitGroup
			for w := range callers {
				hold.Go(func() {
					for i := w; i < bc.held; i += callers {
						if _, err := c.Acquire(ctx, fmt.Sprintf("held/%d", i), TTL(30*time.Second)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			hold.Wait()
			var mu sync.Mutex
			var cycles []time.Duration
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range callers {
				n := b.N / callers
				if w < b.N%callers {
					n++
				}
				wg.Go(func() {
					res := fmt.Sprintf("bench/%d", w)
					mine := make([]time.Duration, 0, n)
					defer func() {
						mu.Lock()
						cycles = append(cycles, mine...)
						mu.Unlock()
					}()
					for range n {
						t0 := time.Now()
						l, err := c.Acquire(ctx, res, TTL(30*time.Second))
						if err != nil {
							b.Error(err)
							return
						}
						if err := l.Release(ctx, ReleaseCompleted); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
			if len(cycles) > 0 {
				slices.Sort(cycles)
				b.ReportMetric(float64(cycles[len(cycles)/2].Microseconds()), "p50-µs/cycle")
			}
		})
	}
}
