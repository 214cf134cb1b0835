package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// Pipeline runs many queue operations in flight on one stream, as
// LeaseService.Pipeline does for leases: each goes through its unary
// RPC's authorization, forwarding and handler, and concurrent ones share
// Raft entries. A Claim that waits long-polls in its own goroutine.
func (h *queueService) Pipeline(ctx context.Context, stream *connect.BidiStream[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse]) error {
	return servePipeline(ctx, stream, h.s.stillValid, (*tenurev1.QueuePipelineRequest).GetOps, h.runOp, h.startOp,
		func(rs []*tenurev1.QueueResult) *tenurev1.QueuePipelineResponse {
			return &tenurev1.QueuePipelineResponse{Results: rs}
		})
}

// runOp runs one queue operation through its unary handler, or forwards
// it to the leader as that unary RPC when this member does not lead.
func (h *queueService) runOp(ctx context.Context, hdr http.Header, op *tenurev1.QueueOp) *tenurev1.QueueResult {
	r := &tenurev1.QueueResult{Id: op.Id}
	s := h.s
	proc, msg := queueOpRequest(op)
	s.runPipelineOp(ctx, op.Op, proc, msg, func() (err error) {
		switch o := op.Op.(type) {
		case *tenurev1.QueueOp_Enqueue:
			var m *tenurev1.EnqueueResponse
			if m, err = callOp(ctx, s, hdr, proc, o.Enqueue, h.Enqueue); err == nil {
				r.Result = &tenurev1.QueueResult_Enqueue{Enqueue: m}
			}
		case *tenurev1.QueueOp_Claim:
			var m *tenurev1.ClaimResponse
			if m, err = callOp(ctx, s, hdr, proc, o.Claim, h.Claim); err == nil {
				r.Result = &tenurev1.QueueResult_Claim{Claim: m}
			}
		case *tenurev1.QueueOp_Complete:
			var m *tenurev1.CompleteResponse
			if m, err = callOp(ctx, s, hdr, proc, o.Complete, h.Complete); err == nil {
				r.Result = &tenurev1.QueueResult_Complete{Complete: m}
			}
		case *tenurev1.QueueOp_Fail:
			var m *tenurev1.FailResponse
			if m, err = callOp(ctx, s, hdr, proc, o.Fail, h.Fail); err == nil {
				r.Result = &tenurev1.QueueResult_Fail{Fail: m}
			}
		case *tenurev1.QueueOp_Cancel:
			var m *tenurev1.CancelResponse
			if m, err = callOp(ctx, s, hdr, proc, o.Cancel, h.Cancel); err == nil {
				r.Result = &tenurev1.QueueResult_Cancel{Cancel: m}
			}
		case *tenurev1.QueueOp_GetTask:
			var m *tenurev1.GetTaskResponse
			if m, err = callOp(ctx, s, hdr, proc, o.GetTask, h.GetTask); err == nil {
				r.Result = &tenurev1.QueueResult_GetTask{GetTask: m}
			}
		}
		return err
	}, func(e *tenurev1.PipelineError) { r.Result = &tenurev1.QueueResult_Error{Error: e} })
	return r
}

// queueOpRequest names the unary RPC each queue operation stands for.
func queueOpRequest(op *tenurev1.QueueOp) (proc string, msg any) {
	switch o := op.Op.(type) {
	case *tenurev1.QueueOp_Enqueue:
		return v1c.QueueServiceEnqueueProcedure, o.Enqueue
	case *tenurev1.QueueOp_Claim:
		return v1c.QueueServiceClaimProcedure, o.Claim
	case *tenurev1.QueueOp_Complete:
		return v1c.QueueServiceCompleteProcedure, o.Complete
	case *tenurev1.QueueOp_Fail:
		return v1c.QueueServiceFailProcedure, o.Fail
	case *tenurev1.QueueOp_Cancel:
		return v1c.QueueServiceCancelProcedure, o.Cancel
	case *tenurev1.QueueOp_GetTask:
		return v1c.QueueServiceGetTaskProcedure, o.GetTask
	}
	return "", nil
}
