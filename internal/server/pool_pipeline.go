package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// Pipeline runs many pool operations in flight on one stream, as
// LeaseService.Pipeline does for leases: each goes through its unary
// RPC's authorization, forwarding and handler, and concurrent ones share
// Raft entries.
func (h *poolService) Pipeline(ctx context.Context, stream *connect.BidiStream[tenurev1.PoolPipelineRequest, tenurev1.PoolPipelineResponse]) error {
	return servePipeline(ctx, stream, h.s.stillValid, (*tenurev1.PoolPipelineRequest).GetOps, h.runOp, h.startOp,
		func(rs []*tenurev1.PoolResult) *tenurev1.PoolPipelineResponse {
			return &tenurev1.PoolPipelineResponse{Results: rs}
		})
}

// runOp runs one pool operation through its unary handler, or forwards
// it to the leader as that unary RPC when this member does not lead.
func (h *poolService) runOp(ctx context.Context, hdr http.Header, op *tenurev1.PoolOp) *tenurev1.PoolResult {
	r := &tenurev1.PoolResult{Id: op.Id}
	s := h.s
	proc, msg := poolOpRequest(op)
	s.runPipelineOp(ctx, op.Op, proc, msg, func() (err error) {
		switch o := op.Op.(type) {
		case *tenurev1.PoolOp_RequestLeases:
			var m *tenurev1.RequestLeasesResponse
			if m, err = callOp(ctx, s, hdr, proc, o.RequestLeases, h.RequestLeases); err == nil {
				r.Result = &tenurev1.PoolResult_RequestLeases{RequestLeases: m}
			}
		case *tenurev1.PoolOp_CompletePiece:
			var m *tenurev1.CompletePieceResponse
			if m, err = callOp(ctx, s, hdr, proc, o.CompletePiece, h.CompletePiece); err == nil {
				r.Result = &tenurev1.PoolResult_CompletePiece{CompletePiece: m}
			}
		case *tenurev1.PoolOp_Want:
			var m *tenurev1.WantResponse
			if m, err = callOp(ctx, s, hdr, proc, o.Want, h.Want); err == nil {
				r.Result = &tenurev1.PoolResult_Want{Want: m}
			}
		}
		return err
	}, func(e *tenurev1.PipelineError) { r.Result = &tenurev1.PoolResult_Error{Error: e} })
	return r
}

// poolOpRequest names the unary RPC each pool operation stands for.
func poolOpRequest(op *tenurev1.PoolOp) (proc string, msg any) {
	switch o := op.Op.(type) {
	case *tenurev1.PoolOp_RequestLeases:
		return v1c.PoolServiceRequestLeasesProcedure, o.RequestLeases
	case *tenurev1.PoolOp_CompletePiece:
		return v1c.PoolServiceCompletePieceProcedure, o.CompletePiece
	case *tenurev1.PoolOp_Want:
		return v1c.PoolServiceWantProcedure, o.Want
	}
	return "", nil
}
