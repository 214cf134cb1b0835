package server

import (
	"context"
	"errors"
	"net/http"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// The operations that make up most of a busy stream run on the leader
// without a goroutine waiting through each commit (servePipeline's start):
// the stream's receive loop authorizes the operation and builds its
// command as the unary RPC would, proposes it with Node.ProposeThen, and
// the node's completion goroutine renders the result. A trace showed a
// fifth of a busy server's CPU in waking and parking those goroutines.
// Anything that waits (an Acquire or a Claim with a wait), signs (a
// certificate), or must be forwarded (on a follower) takes the ordinary
// path, runOp; the checks, errors and answers are the same on both.

// thenOp is one operation taken by startThen.
type thenOp[Result any] struct {
	op, msg any    // the operation's oneof and its unary request
	proc    string // the unary RPC it stands for
	cmd     func() (*logpb.Command, error)
	// answer renders the result of the command; it runs on the
	// completion goroutine, so it must not block or read state.
	answer func(statemachine.Result) (*Result, error)
	// fail renders an error as the operation's result.
	fail func(*tenurev1.PipelineError) *Result
}

// startThen runs one operation as described above and hands its result
// (or error) to deliver.
func startThen[Result any](ctx context.Context, s *Server, o thenOp[Result], deliver func(*Result)) {
	fail := func(err error) {
		pe := pipelineError(s.toConnect(err))
		s.rpc.op(o.proc, pe.Code)
		deliver(o.fail(pe))
	}
	if err := s.authorizeOp(ctx, o.op, o.proc, o.msg); err != nil {
		fail(err)
		return
	}
	if err := s.checkLeases(ctx, o.proc, o.msg); err != nil {
		fail(err)
		return
	}
	c, err := o.cmd()
	if err != nil {
		fail(err)
		return
	}
	stampActor(ctx, c)
	s.node.ProposeThen(ctx, c, func(res statemachine.Result, err error) {
		if err != nil {
			logUnexpected(s.log, "proposal broke off", err)
			fail(err)
			return
		}
		r, err := o.answer(res)
		if err != nil {
			fail(err)
			return
		}
		s.rpc.op(o.proc, "ok")
		deliver(r)
	})
}

// startOp takes an Acquire that neither waits nor wants a certificate,
// and a Release (see above).
func (h *leaseService) startOp(ctx context.Context, _ http.Header, op *tenurev1.PipelineOp, deliver func(*tenurev1.PipelineResult)) bool {
	s := h.s
	if !s.node.IsLeader() {
		return false
	}
	o := thenOp[tenurev1.PipelineResult]{op: op.Op, fail: func(e *tenurev1.PipelineError) *tenurev1.PipelineResult {
		return &tenurev1.PipelineResult{Id: op.Id, Result: &tenurev1.PipelineResult_Error{Error: e}}
	}}
	switch x := op.Op.(type) {
	case *tenurev1.PipelineOp_Acquire:
		m := x.Acquire
		if m.Wait != nil || m.Certificate || s.policy(registrar.OrDefault(m.Namespace)).AlwaysCertify {
			return false
		}
		o.proc, o.msg = v1c.LeaseServiceAcquireProcedure, m
		o.cmd = func() (*logpb.Command, error) {
			c, err := s.acquireCommand(m)
			return &logpb.Command{Op: &logpb.Command_Acquire{Acquire: c}}, err
		}
		o.answer = func(res statemachine.Result) (*tenurev1.PipelineResult, error) {
			if res.Outcome.Err != nil {
				return nil, res.Outcome.Err
			}
			if res.Outcome.Lease == nil {
				return nil, errors.New("acquire answered no lease")
			}
			return &tenurev1.PipelineResult{Id: op.Id, Result: &tenurev1.PipelineResult_Acquire{
				Acquire: &tenurev1.AcquireResponse{Lease: res.Outcome.Lease.Proto()}}}, nil
		}
	case *tenurev1.PipelineOp_Release:
		m := x.Release
		o.proc, o.msg = v1c.LeaseServiceReleaseProcedure, m
		o.cmd = func() (*logpb.Command, error) {
			c, err := releaseCommand(m)
			return &logpb.Command{Op: &logpb.Command_Release{Release: c}}, err
		}
		o.answer = func(res statemachine.Result) (*tenurev1.PipelineResult, error) {
			if res.Outcome.Err != nil {
				return nil, res.Outcome.Err
			}
			return &tenurev1.PipelineResult{Id: op.Id, Result: &tenurev1.PipelineResult_Release{Release: releaseResponse(res.Outcome)}}, nil
		}
	default:
		return false
	}
	startThen(ctx, s, o, deliver)
	return true
}

// startOp takes a RequestLeases that will be proposed (positive max, not
// too many have-maps) and a CompletePiece (see above).
func (h *poolService) startOp(ctx context.Context, _ http.Header, op *tenurev1.PoolOp, deliver func(*tenurev1.PoolResult)) bool {
	s := h.s
	if !s.node.IsLeader() {
		return false
	}
	o := thenOp[tenurev1.PoolResult]{op: op.Op, fail: func(e *tenurev1.PipelineError) *tenurev1.PoolResult {
		return &tenurev1.PoolResult{Id: op.Id, Result: &tenurev1.PoolResult_Error{Error: e}}
	}}
	switch x := op.Op.(type) {
	case *tenurev1.PoolOp_RequestLeases:
		m := x.RequestLeases
		if invalidRequest(m) != nil {
			return false // answered without proposing
		}
		o.proc, o.msg = v1c.PoolServiceRequestLeasesProcedure, m
		o.cmd = func() (*logpb.Command, error) { return poolCommand(m.Peer, requestCommand(m)) }
		o.answer = func(res statemachine.Result) (*tenurev1.PoolResult, error) {
			out, err := poolOutcome(res)
			if err != nil {
				return nil, err
			}
			return &tenurev1.PoolResult{Id: op.Id, Result: &tenurev1.PoolResult_RequestLeases{RequestLeases: requestLeasesResponse(out)}}, nil
		}
	case *tenurev1.PoolOp_CompletePiece:
		m := x.CompletePiece
		o.proc, o.msg = v1c.PoolServiceCompletePieceProcedure, m
		o.cmd = func() (*logpb.Command, error) {
			c, err := completePieceCommand(m)
			if err != nil {
				return nil, err
			}
			return poolCommand(m.Peer, c)
		}
		o.answer = func(res statemachine.Result) (*tenurev1.PoolResult, error) {
			out, err := poolOutcome(res)
			if err != nil {
				return nil, err
			}
			return &tenurev1.PoolResult{Id: op.Id, Result: &tenurev1.PoolResult_CompletePiece{
				CompletePiece: &tenurev1.CompletePieceResponse{Ranking: rankingProto(out.Ranking)}}}, nil
		}
	default:
		return false
	}
	startThen(ctx, s, o, deliver)
	return true
}

// startOp takes an Enqueue, a Complete, a Fail, and a Claim that does
// not wait (see above).
func (h *queueService) startOp(ctx context.Context, _ http.Header, op *tenurev1.QueueOp, deliver func(*tenurev1.QueueResult)) bool {
	s := h.s
	if !s.node.IsLeader() {
		return false
	}
	o := thenOp[tenurev1.QueueResult]{op: op.Op, fail: func(e *tenurev1.PipelineError) *tenurev1.QueueResult {
		return &tenurev1.QueueResult{Id: op.Id, Result: &tenurev1.QueueResult_Error{Error: e}}
	}}
	switch x := op.Op.(type) {
	case *tenurev1.QueueOp_Complete:
		m := x.Complete
		o.proc, o.msg = v1c.QueueServiceCompleteProcedure, m
		o.cmd = func() (*logpb.Command, error) { return completeCommand(m) }
		o.answer = answerTask(op.Id, func(t *tenurev1.Task) *tenurev1.QueueResult {
			return &tenurev1.QueueResult{Result: &tenurev1.QueueResult_Complete{Complete: &tenurev1.CompleteResponse{Task: t}}}
		})
	case *tenurev1.QueueOp_Fail:
		m := x.Fail
		o.proc, o.msg = v1c.QueueServiceFailProcedure, m
		o.cmd = func() (*logpb.Command, error) { return failCommand(m) }
		o.answer = answerTask(op.Id, func(t *tenurev1.Task) *tenurev1.QueueResult {
			return &tenurev1.QueueResult{Result: &tenurev1.QueueResult_Fail{Fail: &tenurev1.FailResponse{Task: t}}}
		})
	case *tenurev1.QueueOp_Enqueue:
		m := x.Enqueue
		o.proc, o.msg = v1c.QueueServiceEnqueueProcedure, m
		o.cmd = func() (*logpb.Command, error) { return enqueueCommand(m) }
		o.answer = func(res statemachine.Result) (*tenurev1.QueueResult, error) {
			out, err := queueOutcome(res)
			if err != nil {
				return nil, err
			}
			return &tenurev1.QueueResult{Id: op.Id, Result: &tenurev1.QueueResult_Enqueue{Enqueue: enqueueResponse(out)}}, nil
		}
	case *tenurev1.QueueOp_Claim:
		m := x.Claim
		if m.Wait != nil || s.policy(registrar.OrDefault(m.Namespace)).AlwaysCertify {
			return false
		}
		o.proc, o.msg = v1c.QueueServiceClaimProcedure, m
		o.cmd = func() (*logpb.Command, error) {
			c, _, err := s.claimCommand(m)
			return &logpb.Command{Actor: c.GetWorker(), Op: &logpb.Command_Claim{Claim: c}}, err
		}
		o.answer = func(res statemachine.Result) (*tenurev1.QueueResult, error) {
			out, err := queueOutcome(res)
			if err != nil {
				return nil, err
			}
			resp := &tenurev1.ClaimResponse{Tasks: make([]*tenurev1.Task, len(out.Tasks)), Message: out.Message}
			for i, t := range out.Tasks {
				resp.Tasks[i] = taskPB(t)
				resp.Tasks[i].Lease = out.Leases[i].Proto()
			}
			return &tenurev1.QueueResult{Id: op.Id, Result: &tenurev1.QueueResult_Claim{Claim: resp}}, nil
		}
	default:
		return false
	}
	startThen(ctx, s, o, deliver)
	return true
}

// answerTask renders the answer of a command that answers one task (a
// Complete, a Fail): wrap puts the task in the operation's result.
func answerTask(id uint64, wrap func(*tenurev1.Task) *tenurev1.QueueResult) func(statemachine.Result) (*tenurev1.QueueResult, error) {
	return func(res statemachine.Result) (*tenurev1.QueueResult, error) {
		out, err := queueOutcome(res)
		if err != nil {
			return nil, err
		}
		t, err := taskAnswer(out)
		if err != nil {
			return nil, err
		}
		r := wrap(t)
		r.Id = id
		return r, nil
	}
}
