package server

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
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

// pipeliner multiplexes operations over one Pipeline stream (of either
// service), matching results by id and batching whatever operations are
// waiting into one message, the way the Go client does.
type pipeliner[Req, Res, Op, Result any] struct {
	mu      sync.Mutex
	stream  *connect.BidiStreamForClient[Req, Res]
	next    uint64
	waiting map[uint64]chan *Result
	ops     chan *Op
	setID   func(*Op, uint64)
	errOf   func(*Result) *tenurev1.PipelineError
}

// leasePipeliner runs LeaseService.Pipeline operations.
type leasePipeliner = pipeliner[tenurev1.PipelineRequest, tenurev1.PipelineResponse, tenurev1.PipelineOp, tenurev1.PipelineResult]

func newPipeliner(ctx context.Context, b testing.TB, bd *bundle) *leasePipeliner {
	return startPipeliner(ctx, bd.leases.Pipeline(ctx),
		func(ops []*tenurev1.PipelineOp) *tenurev1.PipelineRequest { return &tenurev1.PipelineRequest{Ops: ops} },
		(*tenurev1.PipelineResponse).GetResults, (*tenurev1.PipelineResult).GetId,
		func(op *tenurev1.PipelineOp, id uint64) { op.Id = id }, (*tenurev1.PipelineResult).GetError)
}

// queuePipeliner runs QueueService.Pipeline operations.
type queuePipeliner = pipeliner[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse, tenurev1.QueueOp, tenurev1.QueueResult]

func newQueuePipeliner(ctx context.Context, bd *bundle) *queuePipeliner {
	return startPipeliner(ctx, bd.queueClient().Pipeline(ctx),
		func(ops []*tenurev1.QueueOp) *tenurev1.QueuePipelineRequest {
			return &tenurev1.QueuePipelineRequest{Ops: ops}
		},
		(*tenurev1.QueuePipelineResponse).GetResults, (*tenurev1.QueueResult).GetId,
		func(op *tenurev1.QueueOp, id uint64) { op.Id = id }, (*tenurev1.QueueResult).GetError)
}

// poolPipeliner runs PoolService.Pipeline operations.
type poolPipeliner = pipeliner[tenurev1.PoolPipelineRequest, tenurev1.PoolPipelineResponse, tenurev1.PoolOp, tenurev1.PoolResult]

func newPoolPipeliner(ctx context.Context, pc tenurev1connect.PoolServiceClient) *poolPipeliner {
	return startPipeliner(ctx, pc.Pipeline(ctx),
		func(ops []*tenurev1.PoolOp) *tenurev1.PoolPipelineRequest {
			return &tenurev1.PoolPipelineRequest{Ops: ops}
		},
		(*tenurev1.PoolPipelineResponse).GetResults, (*tenurev1.PoolResult).GetId,
		func(op *tenurev1.PoolOp, id uint64) { op.Id = id }, (*tenurev1.PoolResult).GetError)
}

func startPipeliner[Req, Res, Op, Result any](ctx context.Context, stream *connect.BidiStreamForClient[Req, Res],
	wrap func([]*Op) *Req, results func(*Res) []*Result, idOf func(*Result) uint64,
	setID func(*Op, uint64), errOf func(*Result) *tenurev1.PipelineError) *pipeliner[Req, Res, Op, Result] {
	p := &pipeliner[Req, Res, Op, Result]{
		stream:  stream,
		waiting: make(map[uint64]chan *Result),
		ops:     make(chan *Op, 1024),
		setID:   setID,
		errOf:   errOf,
	}
	go func() {
		for {
			resp, err := p.stream.Receive()
			if err != nil {
				return
			}
			p.mu.Lock()
			for _, r := range results(resp) {
				p.waiting[idOf(r)] <- r
				delete(p.waiting, idOf(r))
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		for {
			var op *Op
			select {
			case op = <-p.ops:
			case <-ctx.Done():
				// Half-close, or the server's shutdown waits for the stream.
				_ = p.stream.CloseRequest()
				return
			}
			ops := []*Op{op}
			// Let callers that were just woken enqueue before sending, so
			// that one message carries a whole round of operations.
			for yielded := false; ; {
				select {
				case op := <-p.ops:
					ops = append(ops, op)
					yielded = false
					continue
				default:
				}
				if yielded {
					break
				}
				runtime.Gosched()
				yielded = true
			}
			if err := p.stream.Send(wrap(ops)); err != nil {
				return
			}
		}
	}()
	return p
}

func (p *pipeliner[Req, Res, Op, Result]) do(op *Op) (*Result, error) {
	ch := make(chan *Result, 1)
	p.mu.Lock()
	p.next++
	p.setID(op, p.next)
	p.waiting[p.next] = ch
	p.mu.Unlock()
	p.ops <- op
	r := <-ch
	if e := p.errOf(r); e != nil {
		return nil, fmt.Errorf("%s", e.Message)
	}
	return r, nil
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
