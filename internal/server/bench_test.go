package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/opstream"
	"github.com/tenurehq/tenure/internal/wire"
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

// pipeliner runs operations over one Pipeline stream (of either service),
// many in flight, the way the Go client does (internal/opstream).
type pipeliner[Req, Res, Op, Result any] struct {
	set *opstream.Set[Req, Res, Op, Result]
}

// do runs op; a refused operation's error is its message.
func (p *pipeliner[Req, Res, Op, Result]) do(op *Op) (*Result, error) {
	return p.set.Do(context.Background(), op)
}

// leasePipeliner runs LeaseService.Pipeline operations.
type leasePipeliner = pipeliner[tenurev1.PipelineRequest, tenurev1.PipelineResponse, tenurev1.PipelineOp, tenurev1.PipelineResult]

// The pipeliners encode as the Go client does (wire.Codec).
func newPipeliner(ctx context.Context, _ testing.TB, bd *bundle) *leasePipeliner {
	lc := tenurev1connect.NewLeaseServiceClient(h2cClient(), bd.base, connect.WithGRPC(), connect.WithCodec(wire.Codec{}))
	return &leasePipeliner{opstream.OpenLease(ctx, lc, 1)}
}

// queuePipeliner runs QueueService.Pipeline operations.
type queuePipeliner = pipeliner[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse, tenurev1.QueueOp, tenurev1.QueueResult]

func newQueuePipeliner(ctx context.Context, bd *bundle) *queuePipeliner {
	qc := tenurev1connect.NewQueueServiceClient(h2cClient(), bd.base, connect.WithGRPC(), connect.WithCodec(wire.Codec{}))
	return &queuePipeliner{opstream.OpenQueue(ctx, qc, 1)}
}

// poolPipeliner runs PoolService.Pipeline operations.
type poolPipeliner = pipeliner[tenurev1.PoolPipelineRequest, tenurev1.PoolPipelineResponse, tenurev1.PoolOp, tenurev1.PoolResult]

func newPoolPipeliner(ctx context.Context, pc tenurev1connect.PoolServiceClient) *poolPipeliner {
	return &poolPipeliner{opstream.OpenPool(ctx, pc, 1)}
}

// BenchmarkPipelineAcquireRelease measures acquire+release cycles from
// concurrent callers sharing one Pipeline stream (as the Go client does).
func BenchmarkPipelineAcquireRelease(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			bd := setup(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := newPipeliner(ctx, b, bd)
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
						a, err := p.do(&tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{Resource: res, Holder: holder}}})
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := p.do(&tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Release{Release: &tenurev1.ReleaseRequest{
							LeaseId: a.GetAcquire().Lease.LeaseId, Holder: holder}}}); err != nil {
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

// BenchmarkPipelineRenew measures renewals/s of 10,000 held leases from
// 64 callers sharing one Pipeline stream, each renewing its share of the
// leases in Renew calls of batch ids (one renewal per id).
func BenchmarkPipelineRenew(b *testing.B) {
	const leases, clients = 10_000, 64
	for _, batch := range []int{1, 156} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			bd := setup(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := newPipeliner(ctx, b, bd)
			held := make([][]string, clients)
			var setup sync.WaitGroup
			for c := range clients {
				setup.Go(func() {
					for i := c; i < leases; i += clients {
						a, err := p.do(&tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{
							Resource: fmt.Sprintf("renew/%d", i), Holder: fmt.Sprintf("w%d", c), Ttl: durationpb.New(5 * time.Minute)}}})
						if err != nil {
							b.Error(err)
							return
						}
						held[c] = append(held[c], a.GetAcquire().Lease.LeaseId)
					}
				})
			}
			setup.Wait()
			if b.Failed() {
				return
			}
			calls := max(1, b.N/batch) // b.N renewals
			b.ResetTimer()
			var wg sync.WaitGroup
			var renewed atomic.Int64
			for c := range clients {
				n := calls / clients
				if c < calls%clients {
					n++
				}
				wg.Go(func() {
					ids := held[c]
					for i := range n {
						req := &tenurev1.RenewRequest{LeaseIds: make([]string, batch), Holder: fmt.Sprintf("w%d", c)}
						for j := range req.LeaseIds {
							req.LeaseIds[j] = ids[(i*batch+j)%len(ids)]
						}
						r, err := p.do(&tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Renew{Renew: req}})
						if err != nil {
							b.Error(err)
							return
						}
						if f := r.GetRenew().GetFailures(); len(f) > 0 {
							b.Errorf("renewal failed: %v", f[0])
							return
						}
						renewed.Add(int64(len(r.GetRenew().GetLeases())))
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(renewed.Load())/b.Elapsed().Seconds(), "renewals/s")
		})
	}
}
