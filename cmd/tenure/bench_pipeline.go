package main

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// benchTransport carries the operations of `tenure bench`.
type benchTransport interface {
	acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.Lease, error)
	renew(ctx context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error)
	release(ctx context.Context, req *tenurev1.ReleaseRequest) error
}

// unaryOps makes one unary call per operation.
type unaryOps struct{ r *remote }

func (u *unaryOps) acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.Lease, error) {
	var l *tenurev1.Lease
	err := u.r.lease(func(c tenurev1connect.LeaseServiceClient) error {
		res, err := c.Acquire(ctx, connect.NewRequest(req))
		if err == nil {
			l = res.Msg.GetLease()
		}
		return err
	})
	return l, err
}

func (u *unaryOps) renew(ctx context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	var out *tenurev1.RenewResponse
	err := u.r.lease(func(c tenurev1connect.LeaseServiceClient) error {
		res, err := c.Renew(ctx, connect.NewRequest(req))
		if err == nil {
			out = res.Msg
		}
		return err
	})
	return out, err
}

func (u *unaryOps) release(ctx context.Context, req *tenurev1.ReleaseRequest) error {
	return u.r.lease(func(c tenurev1connect.LeaseServiceClient) error {
		_, err := c.Release(ctx, connect.NewRequest(req))
		return err
	})
}

// pipelineError is an operation's error in a PipelineResult.
type pipelineError struct{ reason, message string }

func (e *pipelineError) Error() string { return e.message }

// errPipelineClosed is returned for operations whose stream broke.
var errPipelineClosed = errors.New("pipeline stream closed")

// opStreams sends operations over Pipeline streams of either service:
// many in flight on each, whatever is waiting batched into one message,
// results matched by id. Operations are spread over the streams
// round-robin.
type opStreams[Req, Res, Op, Result any] struct {
	streams []*opStream[Req, Res, Op, Result]
	next    atomic.Uint64
	cancel  context.CancelFunc
	// The service's message shapes.
	wrap    func([]*Op) *Req
	results func(*Res) []*Result
	idOf    func(*Result) uint64
	setID   func(*Op, uint64)
	errOf   func(*Result) *tenurev1.PipelineError
}

type opStream[Req, Res, Op, Result any] struct {
	set    *opStreams[Req, Res, Op, Result]
	stream *connect.BidiStreamForClient[Req, Res]
	ops    chan *Op
	dead   chan struct{} // closed when the stream broke
	once   sync.Once
	err    error

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan *Result
}

// pipelineOps sends lease operations over LeaseService.Pipeline streams.
type pipelineOps struct {
	*opStreams[tenurev1.PipelineRequest, tenurev1.PipelineResponse, tenurev1.PipelineOp, tenurev1.PipelineResult]
}

func newPipelineOps(ctx context.Context, r *remote, n int) (*pipelineOps, error) {
	p := &opStreams[tenurev1.PipelineRequest, tenurev1.PipelineResponse, tenurev1.PipelineOp, tenurev1.PipelineResult]{
		wrap:    func(ops []*tenurev1.PipelineOp) *tenurev1.PipelineRequest { return &tenurev1.PipelineRequest{Ops: ops} },
		results: (*tenurev1.PipelineResponse).GetResults,
		idOf:    (*tenurev1.PipelineResult).GetId,
		setID:   func(op *tenurev1.PipelineOp, id uint64) { op.Id = id },
		errOf:   (*tenurev1.PipelineResult).GetError,
	}
	p.open(ctx, n, r.leases[0].Pipeline)
	return &pipelineOps{p}, nil
}

// queuePipelineOps sends queue operations over QueueService.Pipeline
// streams.
type queuePipelineOps = opStreams[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse, tenurev1.QueueOp, tenurev1.QueueResult]

func newQueuePipelineOps(ctx context.Context, r *remote, n int) *queuePipelineOps {
	p := &queuePipelineOps{
		wrap: func(ops []*tenurev1.QueueOp) *tenurev1.QueuePipelineRequest {
			return &tenurev1.QueuePipelineRequest{Ops: ops}
		},
		results: (*tenurev1.QueuePipelineResponse).GetResults,
		idOf:    (*tenurev1.QueueResult).GetId,
		setID:   func(op *tenurev1.QueueOp, id uint64) { op.Id = id },
		errOf:   (*tenurev1.QueueResult).GetError,
	}
	p.open(ctx, n, r.queues[0].Pipeline)
	return p
}

func (p *opStreams[Req, Res, Op, Result]) open(ctx context.Context, n int, open func(context.Context) *connect.BidiStreamForClient[Req, Res]) {
	ctx, p.cancel = context.WithCancel(ctx)
	for range n {
		s := &opStream[Req, Res, Op, Result]{
			set:     p,
			stream:  open(ctx),
			ops:     make(chan *Op, 4096),
			dead:    make(chan struct{}),
			waiting: make(map[uint64]chan *Result),
		}
		go s.receive()
		go s.send(ctx)
		p.streams = append(p.streams, s)
	}
}

func (p *opStreams[Req, Res, Op, Result]) close() {
	p.cancel()
	for _, s := range p.streams {
		_ = s.stream.CloseRequest()
		_ = s.stream.CloseResponse()
	}
}

func (s *opStream[Req, Res, Op, Result]) fail(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.dead)
	})
}

func (s *opStream[Req, Res, Op, Result]) receive() {
	for {
		resp, err := s.stream.Receive()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		for _, r := range s.set.results(resp) {
			id := s.set.idOf(r)
			if ch, ok := s.waiting[id]; ok {
				ch <- r
				delete(s.waiting, id)
			}
		}
		s.mu.Unlock()
	}
}

func (s *opStream[Req, Res, Op, Result]) send(ctx context.Context) {
	for {
		var op *Op
		select {
		case op = <-s.ops:
		case <-ctx.Done():
			return
		case <-s.dead:
			return
		}
		ops := []*Op{op}
		// Yield once the queue is empty, so that workers just woken by
		// results enqueue their next operation into this message rather
		// than each into its own (one message per round, not per op).
		for yielded := false; len(ops) < 1000; {
			select {
			case op := <-s.ops:
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
		if err := s.stream.Send(s.set.wrap(ops)); err != nil {
			s.fail(err)
			return
		}
	}
}

func (p *opStreams[Req, Res, Op, Result]) do(ctx context.Context, op *Op) (*Result, error) {
	s := p.streams[p.next.Add(1)%uint64(len(p.streams))]
	ch := make(chan *Result, 1)
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	p.setID(op, id)
	s.waiting[id] = ch
	s.mu.Unlock()
	abandon := func() {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
	}
	select {
	case s.ops <- op:
	case <-s.dead:
		abandon()
		return nil, errors.Join(errPipelineClosed, s.err)
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	}
	select {
	case r := <-ch:
		if e := p.errOf(r); e != nil {
			reason := e.GetReason()
			if reason == "" {
				reason = e.GetCode()
			}
			return nil, &pipelineError{reason: reason, message: e.GetMessage()}
		}
		return r, nil
	case <-s.dead:
		abandon()
		return nil, errors.Join(errPipelineClosed, s.err)
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	}
}

func (p *pipelineOps) acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.Lease, error) {
	r, err := p.do(ctx, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Acquire{Acquire: req}})
	if err != nil {
		return nil, err
	}
	return r.GetAcquire().GetLease(), nil
}

func (p *pipelineOps) renew(ctx context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	r, err := p.do(ctx, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Renew{Renew: req}})
	if err != nil {
		return nil, err
	}
	return r.GetRenew(), nil
}

func (p *pipelineOps) release(ctx context.Context, req *tenurev1.ReleaseRequest) error {
	_, err := p.do(ctx, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Release{Release: req}})
	return err
}
