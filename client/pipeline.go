package tenure

import (
	"context"
	"errors"
	"sync"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/opstream"
)

// leasePipe is an endpoint's LeaseService.Pipeline stream, which carries
// the client's Acquire (without a wait), Renew and Release calls: every
// call of every goroutine of the Client shares it, many in flight, so that
// concurrent callers cost the server one HTTP/2 message per round instead
// of one request each (measured: about four times the acquire+release
// cycles of unary calls at 64 callers). It is opened on first use and
// again after it broke. An endpoint that does not serve Pipeline, or a
// Client built WithoutPipeline, makes unary calls.
type leasePipe struct {
	mu  sync.Mutex
	set *opstream.LeaseSet
	off bool // unary calls only
}

// pipe returns ep's open stream, or nil for unary calls.
func (c *Client) pipe(ep *endpoint) *opstream.LeaseSet {
	if !c.cfg.pipeline {
		return nil
	}
	p := &ep.pipe
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off {
		return nil
	}
	if p.set == nil || p.set.Broken() {
		if p.set != nil {
			p.set.Close()
			p.set = nil
		}
		if c.pipeCtx.Err() != nil {
			return nil // closed
		}
		p.set = opstream.OpenLease(c.pipeCtx, ep.lease, 1)
	}
	return p.set
}

// closePipes ends the endpoints' streams (Close, once no call needs them).
func (c *Client) closePipes() {
	c.mu.Lock()
	eps := append([]*endpoint(nil), c.endpoints...)
	c.mu.Unlock()
	for _, ep := range eps {
		ep.pipe.mu.Lock()
		if ep.pipe.set != nil {
			ep.pipe.set.Close()
			ep.pipe.set = nil
		}
		ep.pipe.mu.Unlock()
	}
}

// pipelined runs one lease operation on ep: over ep's Pipeline stream,
// else (or when the endpoint turns out not to serve Pipeline) with unary.
// Errors come as from a unary call: an *Error for an operation the
// registrar refused, a connect error with code Unavailable for one whose
// stream broke after sending it (its outcome is unknown).
func pipelined[Res any](ctx context.Context, c *Client, ep *endpoint, op *tenurev1.PipelineOp,
	result func(*tenurev1.PipelineResult) *Res, unary func() (*Res, error)) (*Res, error) {
	set := c.pipe(ep)
	if set == nil {
		return unary()
	}
	r, err := set.Do(ctx, op)
	if err == nil {
		return result(r), nil
	}
	var oe *opstream.OpError
	if errors.As(err, &oe) {
		return nil, fromPipeline(oe)
	}
	var se *opstream.StreamError
	if !errors.As(err, &se) {
		return nil, err // ctx ended
	}
	if connect.CodeOf(se.Err) == connect.CodeUnimplemented {
		// The endpoint (or a proxy before it) does not serve Pipeline
		// and ran nothing: unary from now on.
		c.cfg.logger.Debug("tenure: endpoint does not serve Pipeline; using unary calls", "endpoint", ep.url, "err", se.Err)
		ep.pipe.mu.Lock()
		ep.pipe.off = true
		ep.pipe.mu.Unlock()
		return unary()
	}
	if !se.Sent {
		// Never handed to the stream: nothing ran, so the call may go
		// out again (the next call opens a new stream).
		return unary()
	}
	if e := fromConnect(se.Err); ReasonOf(e) != "" {
		return nil, e // the stream was refused: UNAUTHENTICATED, …
	}
	return nil, connect.NewError(connect.CodeUnavailable, err)
}

// fromPipeline turns an operation's error in a PipelineResult into the
// error the same unary call would have returned.
func fromPipeline(oe *opstream.OpError) error {
	if oe.GetReason() == "" {
		return connect.NewError(oe.Code(), errors.New(oe.GetMessage()))
	}
	e := &Error{
		Reason:   Reason(oe.GetReason()),
		Message:  oe.GetMessage(),
		Metadata: oe.GetMetadata(),
		Code:     oe.Code(),
		cause:    oe,
	}
	if e.Message == "" {
		e.Message = string(e.Reason)
	}
	if e.Reason == ReasonLeaseHeld {
		return heldFrom(e)
	}
	return e
}

// acquireRPC, renewRPC and releaseRPC make one LeaseService call on ep.
func (c *Client) acquireRPC(ctx context.Context, ep *endpoint, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	unary := func() (*tenurev1.AcquireResponse, error) {
		resp, err := ep.lease.Acquire(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	if req.GetWait() != nil {
		// A waiting Acquire ends with its call: cancelling the call
		// withdraws the waiter, which an operation on a stream cannot.
		return unary()
	}
	return pipelined(ctx, c, ep, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Acquire{Acquire: req}},
		(*tenurev1.PipelineResult).GetAcquire, unary)
}

func (c *Client) renewRPC(ctx context.Context, ep *endpoint, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	return pipelined(ctx, c, ep, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Renew{Renew: req}},
		(*tenurev1.PipelineResult).GetRenew, func() (*tenurev1.RenewResponse, error) {
			resp, err := ep.lease.Renew(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		})
}

func (c *Client) releaseRPC(ctx context.Context, ep *endpoint, req *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
	return pipelined(ctx, c, ep, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Release{Release: req}},
		(*tenurev1.PipelineResult).GetRelease, func() (*tenurev1.ReleaseResponse, error) {
			resp, err := ep.lease.Release(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, err
			}
			return resp.Msg, nil
		})
}
