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

// pipelineOps sends operations over LeaseService.Pipeline streams: many in
// flight on each, whatever is waiting batched into one message, results
// matched by id. Operations are spread over the streams round-robin.
type pipelineOps struct {
	streams []*pipelineStream
	next    atomic.Uint64
	cancel  context.CancelFunc
}

type pipelineStream struct {
	stream *connect.BidiStreamForClient[tenurev1.PipelineRequest, tenurev1.PipelineResponse]
	ops    chan *tenurev1.PipelineOp
	dead   chan struct{} // closed when the stream broke
	once   sync.Once
	err    error

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan *tenurev1.PipelineResult
}

func newPipelineOps(ctx context.Context, r *remote, n int) (*pipelineOps, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &pipelineOps{cancel: cancel}
	for range n {
		s := &pipelineStream{
			stream:  r.leases[0].Pipeline(ctx),
			ops:     make(chan *tenurev1.PipelineOp, 4096),
			dead:    make(chan struct{}),
			waiting: make(map[uint64]chan *tenurev1.PipelineResult),
		}
		go s.receive()
		go s.send(ctx)
		p.streams = append(p.streams, s)
	}
	return p, nil
}

func (p *pipelineOps) close() {
	p.cancel()
	for _, s := range p.streams {
		_ = s.stream.CloseRequest()
		_ = s.stream.CloseResponse()
	}
}

func (s *pipelineStream) fail(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.dead)
	})
}

func (s *pipelineStream) receive() {
	for {
		resp, err := s.stream.Receive()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		for _, r := range resp.GetResults() {
			if ch, ok := s.waiting[r.GetId()]; ok {
				ch <- r
				delete(s.waiting, r.GetId())
			}
		}
		s.mu.Unlock()
	}
}

func (s *pipelineStream) send(ctx context.Context) {
	for {
		var op *tenurev1.PipelineOp
		select {
		case op = <-s.ops:
		case <-ctx.Done():
			return
		case <-s.dead:
			return
		}
		req := &tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{op}}
		// Yield once the queue is empty, so that workers just woken by
		// results enqueue their next operation into this message rather
		// than each into its own (one message per round, not per op).
		for yielded := false; len(req.Ops) < 1000; {
			select {
			case op := <-s.ops:
				req.Ops = append(req.Ops, op)
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
		if err := s.stream.Send(req); err != nil {
			s.fail(err)
			return
		}
	}
}

func (p *pipelineOps) do(ctx context.Context, op *tenurev1.PipelineOp) (*tenurev1.PipelineResult, error) {
	s := p.streams[p.next.Add(1)%uint64(len(p.streams))]
	ch := make(chan *tenurev1.PipelineResult, 1)
	s.mu.Lock()
	s.nextID++
	op.Id = s.nextID
	s.waiting[op.Id] = ch
	s.mu.Unlock()
	abandon := func() {
		s.mu.Lock()
		delete(s.waiting, op.Id)
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
		if e := r.GetError(); e != nil {
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
