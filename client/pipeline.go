package tenure

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/opstream"
)

// pipe is one of an endpoint's Pipeline streams: LeaseService's carries
// the client's Acquire without a wait, Renew and Release; QueueService's
// Complete, Fail and Claim without a wait; PoolService's RequestLeases and
// CompletePiece. Every call of every goroutine of the Client shares the
// stream, many in flight, so that concurrent callers cost the server one
// HTTP/2 message per round instead of one request each (measured: three
// times the acquire+release cycles of unary calls at 64 callers,
// BenchmarkClientAcquireRelease). A stream is opened on first use and
// again after it broke. An endpoint that does not serve Pipeline, or a
// Client built WithoutPipeline, gets unary calls.
type pipe[Req, Res, Op, Result any] struct {
	mu   sync.Mutex
	set  *opstream.Set[Req, Res, Op, Result]
	off  bool // unary calls only
	open func(context.Context) *opstream.Set[Req, Res, Op, Result]
}

type (
	leasePipe = pipe[tenurev1.PipelineRequest, tenurev1.PipelineResponse, tenurev1.PipelineOp, tenurev1.PipelineResult]
	queuePipe = pipe[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse, tenurev1.QueueOp, tenurev1.QueueResult]
	poolPipe  = pipe[tenurev1.PoolPipelineRequest, tenurev1.PoolPipelineResponse, tenurev1.PoolOp, tenurev1.PoolResult]
)

// newPipes gives ep its streams (not opened yet). A lease granted to an
// acquire, or a task claimed, whose caller gave up waiting (its ctx
// ended) after the operation went out is released, so that no resource
// stays held, and no task leased, by no one until the lease expires (a
// task's attempt would be used up).
func newPipes(c *Client, ep *endpoint) {
	ep.leasePipe.open = func(ctx context.Context) *opstream.LeaseSet {
		return opstream.OpenLease(ctx, ep.lease, 1).OnOrphan(func(r *tenurev1.PipelineResult) {
			c.releaseOrphan(r.GetAcquire().GetLease())
		})
	}
	ep.queuePipe.open = func(ctx context.Context) *opstream.QueueSet {
		return opstream.OpenQueue(ctx, ep.queue, 1).OnOrphan(func(r *tenurev1.QueueResult) {
			for _, t := range r.GetClaim().GetTasks() {
				c.releaseOrphan(t.GetLease())
			}
		})
	}
	ep.poolPipe.open = func(ctx context.Context) *opstream.PoolSet { return opstream.OpenPool(ctx, ep.pool, 1) }
}

// releaseOrphan releases a lease granted to a call that gave up on it.
func (c *Client) releaseOrphan(l *tenurev1.Lease) {
	c.releaseOrphanID(l.GetLeaseId(), l.GetHolder())
}

func (c *Client) releaseOrphanID(id, holder string) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), orphanTimeout)
	defer cancel()
	req := &tenurev1.ReleaseRequest{LeaseId: id, Holder: holder, Reason: tenurev1.ReleaseReason_RELEASE_REASON_ABORTED}
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		_, err := c.releaseRPC(ctx, ep, req)
		return err
	})
	if err != nil {
		c.cfg.logger.Warn("tenure: releasing a lease granted to a call that gave up on it", "lease", id, "err", err)
	}
}

// orphanTimeout bounds the release of a lease granted to a call that gave
// up on it.
const orphanTimeout = 10 * time.Second

// get returns the open stream, or nil for unary calls.
func (p *pipe[Req, Res, Op, Result]) get(c *Client) *opstream.Set[Req, Res, Op, Result] {
	if !c.cfg.pipeline {
		return nil
	}
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
		p.set = p.open(c.pipeCtx)
	}
	return p.set
}

func (p *pipe[Req, Res, Op, Result]) disable() {
	p.mu.Lock()
	p.off = true
	p.mu.Unlock()
}

func (p *pipe[Req, Res, Op, Result]) close() {
	p.mu.Lock()
	if p.set != nil {
		p.set.Close()
		p.set = nil
	}
	p.mu.Unlock()
}

// closePipes ends the endpoints' streams (Close, once no call needs them).
func (c *Client) closePipes() {
	c.mu.Lock()
	eps := append([]*endpoint(nil), c.endpoints...)
	c.mu.Unlock()
	for _, ep := range eps {
		ep.leasePipe.close()
		ep.queuePipe.close()
		ep.poolPipe.close()
	}
}

// pipelined runs one operation on ep's stream p, else (or when the
// endpoint turns out not to serve Pipeline) with unary. Errors come as
// from a unary call: an *Error for an operation the registrar refused, a
// connect error with code Unavailable for one whose stream broke after
// sending it (its outcome is unknown).
func pipelined[Req, Res, Op, Result, Out any](ctx context.Context, c *Client, ep *endpoint, p *pipe[Req, Res, Op, Result],
	op *Op, result func(*Result) *Out, unary func() (*Out, error)) (*Out, error) {
	set := p.get(c)
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
		// ctx ended (the operation may still run), as a unary call
		// reports it.
		code := connect.CodeCanceled
		if errors.Is(err, context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return nil, connect.NewError(code, err)
	}
	if pipelineRefused(se.Err) {
		// The endpoint (or a proxy before it) does not serve Pipeline
		// and ran nothing: unary from now on.
		c.cfg.logger.Debug("tenure: endpoint does not serve Pipeline; using unary calls", "endpoint", ep.url, "err", se.Err)
		p.disable()
		return unary()
	}
	if !se.Sent || notSent(se.Err) {
		// Never handed to the stream, or handed to one whose connection
		// was never made (no dial, a TLS handshake the client broke
		// off): nothing ran, so the call may go out again (the next call
		// opens a new stream).
		return unary()
	}
	if e := fromConnect(se.Err); ReasonOf(e) != "" && ReasonOf(e) != ReasonUnavailable {
		return nil, e // the stream was refused: UNAUTHENTICATED, …
	}
	// The stream broke (the member shut down, the connection dropped)
	// after the operation went out: it may have run.
	return nil, newError(ReasonOutcomeUnknown, string(ReasonOutcomeUnknown)+": "+err.Error()+
		"; the operation was sent and may or may not have been applied", nil, connect.CodeUnavailable, err)
}

// unaryOf returns the unary call of req with call, for pipelined.
func unaryOf[Req, Res any](ctx context.Context, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req) func() (*Res, error) {
	return func() (*Res, error) {
		resp, err := call(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
}

// pipelineRefused reports whether a stream's error says the stream was
// refused before any operation ran: Unimplemented (a server or proxy
// without Pipeline), or HTTP 505, a server's answer to a bidirectional
// stream over HTTP/1.1 (an HTTP client from WithHTTPClient without
// HTTP/2), which Connect reports with code Unknown.
func pipelineRefused(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnimplemented ||
		(connect.CodeOf(err) == connect.CodeUnknown && strings.Contains(err.Error(), "HTTP status 505"))
}

// fromPipeline turns an operation's error in a PipelineResult into the
// error the same unary call would have returned.
func fromPipeline(oe *opstream.OpError) error {
	// The same *connect.Error a unary call would have failed with, so that
	// errors.As and connect.CodeOf reach it whichever way the call went.
	ce := connect.NewError(oe.Code(), errors.New(oe.GetMessage()))
	if oe.GetReason() == "" {
		return ce
	}
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: oe.GetReason(), Domain: errorDomain, Metadata: oe.GetMetadata()}); err == nil {
		ce.AddDetail(d)
	}
	return newError(Reason(oe.GetReason()), oe.GetMessage(), oe.GetMetadata(), oe.Code(), ce)
}

// acquireRPC, renewRPC and releaseRPC make one LeaseService call on ep.
func (c *Client) acquireRPC(ctx context.Context, ep *endpoint, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	unary := unaryOf(ctx, ep.lease.Acquire, req)
	if req.GetWait() != nil {
		// A waiting Acquire ends with its call: cancelling the call
		// withdraws the waiter, which an operation on a stream cannot.
		return unary()
	}
	return pipelined(ctx, c, ep, &ep.leasePipe, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Acquire{Acquire: req}},
		(*tenurev1.PipelineResult).GetAcquire, unary)
}

func (c *Client) renewRPC(ctx context.Context, ep *endpoint, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	return pipelined(ctx, c, ep, &ep.leasePipe, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Renew{Renew: req}},
		(*tenurev1.PipelineResult).GetRenew, unaryOf(ctx, ep.lease.Renew, req))
}

func (c *Client) releaseRPC(ctx context.Context, ep *endpoint, req *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
	return pipelined(ctx, c, ep, &ep.leasePipe, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Release{Release: req}},
		(*tenurev1.PipelineResult).GetRelease, unaryOf(ctx, ep.lease.Release, req))
}

// claimRPC, completeRPC and failRPC make one QueueService call on ep.
func (c *Client) claimRPC(ctx context.Context, ep *endpoint, req *tenurev1.ClaimRequest) (*tenurev1.ClaimResponse, error) {
	unary := unaryOf(ctx, ep.queue.Claim, req)
	if req.GetWait() != nil {
		// A long poll ends with its call: a worker that stops waiting
		// must not be granted tasks afterwards.
		return unary()
	}
	return pipelined(ctx, c, ep, &ep.queuePipe, &tenurev1.QueueOp{Op: &tenurev1.QueueOp_Claim{Claim: req}},
		(*tenurev1.QueueResult).GetClaim, unary)
}

func (c *Client) completeRPC(ctx context.Context, ep *endpoint, req *tenurev1.CompleteRequest) (*tenurev1.CompleteResponse, error) {
	return pipelined(ctx, c, ep, &ep.queuePipe, &tenurev1.QueueOp{Op: &tenurev1.QueueOp_Complete{Complete: req}},
		(*tenurev1.QueueResult).GetComplete, unaryOf(ctx, ep.queue.Complete, req))
}

func (c *Client) failRPC(ctx context.Context, ep *endpoint, req *tenurev1.FailRequest) (*tenurev1.FailResponse, error) {
	return pipelined(ctx, c, ep, &ep.queuePipe, &tenurev1.QueueOp{Op: &tenurev1.QueueOp_Fail{Fail: req}},
		(*tenurev1.QueueResult).GetFail, unaryOf(ctx, ep.queue.Fail, req))
}

// requestLeasesRPC and completePieceRPC make one PoolService call on ep.
func (c *Client) requestLeasesRPC(ctx context.Context, ep *endpoint, req *tenurev1.RequestLeasesRequest) (*tenurev1.RequestLeasesResponse, error) {
	return pipelined(ctx, c, ep, &ep.poolPipe, &tenurev1.PoolOp{Op: &tenurev1.PoolOp_RequestLeases{RequestLeases: req}},
		(*tenurev1.PoolResult).GetRequestLeases, unaryOf(ctx, ep.pool.RequestLeases, req))
}

func (c *Client) completePieceRPC(ctx context.Context, ep *endpoint, req *tenurev1.CompletePieceRequest) (*tenurev1.CompletePieceResponse, error) {
	return pipelined(ctx, c, ep, &ep.poolPipe, &tenurev1.PoolOp{Op: &tenurev1.PoolOp_CompletePiece{CompletePiece: req}},
		(*tenurev1.PoolResult).GetCompletePiece, unaryOf(ctx, ep.pool.CompletePiece, req))
}
