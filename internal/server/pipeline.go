package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/opstream"
	"github.com/tenurehq/tenure/internal/registrar"
)

// maxPipelineInFlight bounds the operations one Pipeline stream may have
// in flight; a client past it waits (backpressure through the stream).
const maxPipelineInFlight = 4096

// Pipeline runs many operations in flight on one stream. Each operation
// goes through the same handler as its unary RPC (same validation, same
// errors); results are sent as they complete, batched into as few
// messages as are ready together. Concurrent operations share Raft
// entries through the proposer, so a pipelined client gets group commit
// without paying for an HTTP/2 request per operation.
func (h *leaseService) Pipeline(ctx context.Context, stream *connect.BidiStream[tenurev1.PipelineRequest, tenurev1.PipelineResponse]) error {
	return servePipeline(ctx, stream, h.s.stillValid, (*tenurev1.PipelineRequest).GetOps, h.runOp, h.startOp,
		func(rs []*tenurev1.PipelineResult) *tenurev1.PipelineResponse {
			return &tenurev1.PipelineResponse{Results: rs}
		})
}

// servePipeline serves one Pipeline stream of any service: it runs every
// operation of every request message (at most maxPipelineInFlight at once;
// past that the stream waits) and sends the results back as they complete
// (sendResults). start, when not nil, may take an operation (returning
// true): it proposes without waiting (Node.ProposeThen, pipeline_then.go)
// and hands the result to its deliver func later. Every other operation
// runs in a goroutine of its own (run).
func servePipeline[Req, Res, Op, Result any](ctx context.Context, stream *connect.BidiStream[Req, Res],
	valid func(context.Context, http.Header) error, ops func(*Req) []*Op, run func(context.Context, http.Header, *Op) *Result,
	start func(context.Context, http.Header, *Op, func(*Result)) bool, respond func([]*Result) *Res) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hdr := stream.RequestHeader()
	ctx = withConsistency(ctx, hdr)
	results := make(chan *Result, maxPipelineInFlight)
	slots := make(chan struct{}, maxPipelineInFlight)
	sendErr := make(chan error, 1)
	go func() { sendErr <- sendResults(ctx, stream, results, respond) }()

	// Operations run on workers that live as long as the stream: an idle
	// worker takes the next operation, else a new one starts. A goroutine
	// per operation would grow a fresh stack through the handlers every
	// time (stack copying was a tenth of a busy stream's CPU).
	work := make(chan *Op)
	worker := func(op *Op) {
		for {
			results <- run(ctx, hdr, op) // never blocks: room for every slot
			<-slots
			select {
			case op = <-work:
			case <-ctx.Done():
				return
			}
		}
	}
	deliver := func(r *Result) {
		results <- r // never blocks: room for every slot
		<-slots
	}
	var recvErr error
	for recvErr == nil {
		var req *Req
		req, recvErr = stream.Receive()
		if recvErr != nil {
			break
		}
		if err := valid(ctx, hdr); err != nil {
			recvErr = err // ends the stream once what is in flight is sent
			break
		}
		for _, op := range ops(req) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			case err := <-sendErr:
				return err
			}
			if start != nil && start(ctx, hdr, op, deliver) {
				continue
			}
			select {
			case work <- op:
			default:
				go worker(op)
			}
		}
	}
	// Wait for what is in flight, then let the sender drain.
	for range maxPipelineInFlight {
		select {
		case slots <- struct{}{}:
		case err := <-sendErr:
			return err
		}
	}
	close(results)
	if err := <-sendErr; err != nil {
		return err
	}
	if errors.Is(recvErr, io.EOF) {
		return nil
	}
	return recvErr
}

// sendResults sends results as they come, each message carrying every
// result ready at that moment (up to opstream.MaxBatchBytes: a Claim's
// tasks may carry large payloads, and clients refuse messages past a few
// MiB).
func sendResults[Req, Res, Result any](ctx context.Context, stream *connect.BidiStream[Req, Res], results <-chan *Result, respond func([]*Result) *Res) error {
	var r *Result
	var carried bool // r is the result the last message had no room for
	for {
		if !carried {
			var ok bool
			select {
			case r, ok = <-results:
				if !ok {
					return nil
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// The results of one Raft entry arrive together, each from its
		// own goroutine: those just woken add theirs to this message.
		var batch []*Result
		batch, r, carried = opstream.Gather([]*Result{r}, results, 1024, opstream.MaxBatchBytes)
		if err := stream.Send(respond(batch)); err != nil {
			return err
		}
	}
}

// runOp runs one operation through its unary handler, or forwards it to
// the leader as that unary RPC when this member does not lead.
func (h *leaseService) runOp(ctx context.Context, hdr http.Header, op *tenurev1.PipelineOp) *tenurev1.PipelineResult {
	r := &tenurev1.PipelineResult{Id: op.Id}
	s := h.s
	proc, msg := opRequest(op)
	s.runPipelineOp(ctx, op.Op, proc, msg, func() (err error) {
		switch o := op.Op.(type) {
		case *tenurev1.PipelineOp_Acquire:
			var m *tenurev1.AcquireResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceAcquireProcedure, o.Acquire, h.Acquire); err == nil {
				r.Result = &tenurev1.PipelineResult_Acquire{Acquire: m}
			}
		case *tenurev1.PipelineOp_Renew:
			var m *tenurev1.RenewResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceRenewProcedure, o.Renew, h.Renew); err == nil {
				r.Result = &tenurev1.PipelineResult_Renew{Renew: m}
			}
		case *tenurev1.PipelineOp_Release:
			var m *tenurev1.ReleaseResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceReleaseProcedure, o.Release, h.Release); err == nil {
				r.Result = &tenurev1.PipelineResult_Release{Release: m}
			}
		case *tenurev1.PipelineOp_Transfer:
			var m *tenurev1.TransferResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceTransferProcedure, o.Transfer, h.Transfer); err == nil {
				r.Result = &tenurev1.PipelineResult_Transfer{Transfer: m}
			}
		case *tenurev1.PipelineOp_WriteState:
			var m *tenurev1.WriteStateResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceWriteStateProcedure, o.WriteState, h.WriteState); err == nil {
				r.Result = &tenurev1.PipelineResult_WriteState{WriteState: m}
			}
		case *tenurev1.PipelineOp_Get:
			var m *tenurev1.GetResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceGetProcedure, o.Get, h.Get); err == nil {
				if _, err = filterResponse(ctx, v1c.LeaseServiceGetProcedure, m); err == nil {
					r.Result = &tenurev1.PipelineResult_Get{Get: m}
				}
			}
		case *tenurev1.PipelineOp_Verify:
			var m *tenurev1.VerifyResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceVerifyProcedure, o.Verify, h.Verify); err == nil {
				_, _ = filterResponse(ctx, v1c.LeaseServiceVerifyProcedure, m) // filters in place
				r.Result = &tenurev1.PipelineResult_Verify{Verify: m}
			}
		case *tenurev1.PipelineOp_CheckFence:
			var m *tenurev1.CheckFenceResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceCheckFenceProcedure, o.CheckFence, h.CheckFence); err == nil {
				r.Result = &tenurev1.PipelineResult_CheckFence{CheckFence: m}
			}
		case *tenurev1.PipelineOp_Revoke:
			var m *tenurev1.RevokeResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceRevokeProcedure, o.Revoke, h.Revoke); err == nil {
				r.Result = &tenurev1.PipelineResult_Revoke{Revoke: m}
			}
		case *tenurev1.PipelineOp_Consume:
			var m *tenurev1.ConsumeResponse
			if m, err = callOp(ctx, s, hdr, v1c.LeaseServiceConsumeProcedure, o.Consume, h.Consume); err == nil {
				r.Result = &tenurev1.PipelineResult_Consume{Consume: m}
			}
		}
		return err
	}, func(e *tenurev1.PipelineError) { r.Result = &tenurev1.PipelineResult_Error{Error: e} })
	return r
}

// runPipelineOp authorizes one operation of a Pipeline stream as its unary
// RPC proc would be, then runs it (run calls the RPC's handler and sets
// the result). An operation without a procedure, or an error of either
// step, is the operation's answer, handed to fail.
func (s *Server) runPipelineOp(ctx context.Context, op any, proc string, msg any, run func() error, fail func(*tenurev1.PipelineError)) {
	err := s.authorizeOp(ctx, op, proc, msg)
	if err == nil {
		if proc == "" {
			err = invalidArg("op", fmt.Sprintf("unknown or missing operation %T", op))
		} else {
			err = run()
		}
	}
	if err != nil {
		pe := pipelineError(s.toConnect(err))
		s.rpc.op(proc, pe.Code)
		fail(pe)
		return
	}
	s.rpc.op(proc, "ok")
}

// opProcedures names the unary RPC each Pipeline operation stands for.
func opRequest(op *tenurev1.PipelineOp) (proc string, msg any) {
	switch o := op.Op.(type) {
	case *tenurev1.PipelineOp_Acquire:
		return v1c.LeaseServiceAcquireProcedure, o.Acquire
	case *tenurev1.PipelineOp_Renew:
		return v1c.LeaseServiceRenewProcedure, o.Renew
	case *tenurev1.PipelineOp_Release:
		return v1c.LeaseServiceReleaseProcedure, o.Release
	case *tenurev1.PipelineOp_Transfer:
		return v1c.LeaseServiceTransferProcedure, o.Transfer
	case *tenurev1.PipelineOp_WriteState:
		return v1c.LeaseServiceWriteStateProcedure, o.WriteState
	case *tenurev1.PipelineOp_Get:
		return v1c.LeaseServiceGetProcedure, o.Get
	case *tenurev1.PipelineOp_Verify:
		return v1c.LeaseServiceVerifyProcedure, o.Verify
	case *tenurev1.PipelineOp_CheckFence:
		return v1c.LeaseServiceCheckFenceProcedure, o.CheckFence
	case *tenurev1.PipelineOp_Revoke:
		return v1c.LeaseServiceRevokeProcedure, o.Revoke
	case *tenurev1.PipelineOp_Consume:
		return v1c.LeaseServiceConsumeProcedure, o.Consume
	}
	return "", nil
}

// authorizeOp charges one operation to the caller's rate limit and
// checks it against the rule of its unary RPC proc (with that RPC's
// request msg), exactly as that RPC would be checked. op is the
// operation's oneof: one that is set but has no procedure is refused
// (fail closed); a missing operation is left to the runner's answer.
func (s *Server) authorizeOp(ctx context.Context, op any, proc string, msg any) error {
	if err := checkNamespaceOf(proc, msg); err != nil {
		return err
	}
	p := principalOf(ctx)
	if p == nil {
		return nil
	}
	switch {
	case proc == "" && op != nil:
		// An operation the runner knows but this check does not: refuse
		// it rather than run it unchecked.
		return authError(registrar.ReasonPermissionDenied, nil, "operation %T has no access rule", op)
	case proc == "" || reflect.ValueOf(msg).IsNil():
		return nil
	}
	if err := s.charge(p, 1); err != nil {
		return err
	}
	return s.authorize(ctx, proc, msg)
}

// pipelineError renders a Connect error (as the handlers return them) in
// the pipeline's form.
func pipelineError(err error) *tenurev1.PipelineError {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return &tenurev1.PipelineError{Code: connect.CodeUnknown.String(), Message: err.Error()}
	}
	pe := &tenurev1.PipelineError{Code: ce.Code().String(), Message: ce.Message()}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
				pe.Reason, pe.Metadata = info.Reason, info.Metadata
			}
		}
	}
	return pe
}
