package server

import (
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestPoolPipeline: pool operations over one stream answer as their unary
// RPCs do, and each is authorized on its own.
func TestPoolPipeline(t *testing.T) {
	b := startSecure(t, nil)
	q1, q2 := b.as("tok-q1"), b.as("tok-q2")
	p1, p2 := newPoolPipeliner(t.Context(), q1.pools), newPoolPipeliner(t.Context(), q2.pools)
	if _, err := p1.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_Want{Want: &tenurev1.WantRequest{Namespace: "jobs", Pool: "p",
		FileIndex: 0, PieceCount: 16, Ranges: []*tenurev1.PieceRange{{Start: 0, End: 4}}}}}); err != nil {
		t.Fatal(err)
	}
	have := []*tenurev1.HaveMap{{FileIndex: 0, Bits: []byte{0x0f, 0}}}
	r, err := p1.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_RequestLeases{RequestLeases: &tenurev1.RequestLeasesRequest{
		Namespace: "jobs", Pool: "p", Peer: "q1", Max: 3, Have: have}}})
	if err != nil || len(r.GetRequestLeases().GetLeases()) != 3 {
		t.Fatalf("request: %v %v", r, err)
	}
	got := r.GetRequestLeases().Leases[0]
	// q2 may neither request as q1 nor complete q1's piece; as itself, the
	// piece is not leased to it.
	_, err = p2.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_RequestLeases{RequestLeases: &tenurev1.RequestLeasesRequest{
		Namespace: "jobs", Pool: "p", Peer: "q1", Max: 1, Have: have}}})
	if err == nil || !strings.HasPrefix(err.Error(), "PERMISSION_DENIED") {
		t.Errorf("request as another peer: %v", err)
	}
	_, err = p2.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_CompletePiece{CompletePiece: &tenurev1.CompletePieceRequest{
		Namespace: "jobs", Pool: "p", Peer: "q2", FileIndex: 0, PieceIndex: got.PieceIndex, Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS}}})
	if err == nil || !strings.HasPrefix(err.Error(), "PIECE_NOT_LEASED") {
		t.Errorf("complete of another's piece: %v", err)
	}
	// One piece left for q2, then nothing: a rejection is an answer.
	r, err = p2.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_RequestLeases{RequestLeases: &tenurev1.RequestLeasesRequest{
		Namespace: "jobs", Pool: "p", Peer: "q2", Max: 4, Have: have}}})
	if err != nil || len(r.GetRequestLeases().GetLeases()) != 1 {
		t.Fatalf("q2 request: %v %v", r, err)
	}
	r, err = p2.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_RequestLeases{RequestLeases: &tenurev1.RequestLeasesRequest{
		Namespace: "jobs", Pool: "p", Peer: "q2", Max: 4, Have: have}}})
	if err != nil || r.GetRequestLeases().GetRejectedReason() != tenurev1.RejectedReason_REJECTED_REASON_PEER_AT_CAPACITY &&
		r.GetRequestLeases().GetRejectedReason() != tenurev1.RejectedReason_REJECTED_REASON_NO_AVAILABLE_PIECES {
		t.Fatalf("request with nothing free: %v %v", r, err)
	}
	c, err := p1.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_CompletePiece{CompletePiece: &tenurev1.CompletePieceRequest{
		Namespace: "jobs", Pool: "p", Peer: "q1", FileIndex: 0, PieceIndex: got.PieceIndex, Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS}}})
	// 1.0 → 1.5 on a success, less the decay of the seconds since the
	// first request.
	if sc := c.GetCompletePiece().GetRanking().GetScore(); err != nil || sc <= 1.49 || sc > 1.5 {
		t.Fatalf("complete: %v %v", c, err)
	}
	if _, err := p1.do(&tenurev1.PoolOp{}); err == nil || !strings.HasPrefix(err.Error(), "INVALID_ARGUMENT") {
		t.Errorf("empty op: %v", err)
	}
}
