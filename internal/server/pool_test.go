package server

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/wire"
)

func poolClient(b *bundle) tenurev1connect.PoolServiceClient {
	return tenurev1connect.NewPoolServiceClient(h2cClient(), b.base, connect.WithGRPC())
}

func TestPoolEndToEnd(t *testing.T) {
	b := setup(t)
	pc := poolClient(b)
	ctx := context.Background()
	cr, err := pc.CreatePool(ctx, connect.NewRequest(&tenurev1.CreatePoolRequest{Pool: "swarm", Config: &tenurev1.PoolConfig{MaxLeasesPerPeer: 2}}))
	if err != nil || !cr.Msg.Created || cr.Msg.Config.MaxLeasesPerPeer != 2 || cr.Msg.Config.GetSuccessBonus() != 0.5 {
		t.Fatalf("CreatePool: %v %v", cr, err)
	}
	// A minimum score above a new peer's would refuse every peer for good.
	high := 1.5
	_, err = pc.CreatePool(ctx, connect.NewRequest(&tenurev1.CreatePoolRequest{Pool: "closed", Config: &tenurev1.PoolConfig{MinPeerScore: &high}}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	if md := errorMeta(t, err); md["field"] != "config.min_peer_score" {
		t.Errorf("min score above the start: metadata %v", md)
	}
	// Want by bits on file 0 (pieces 0..9) and by range on file 1.
	w, err := pc.Want(ctx, connect.NewRequest(&tenurev1.WantRequest{Pool: "swarm", FileIndex: 0, PieceCount: 10, Bits: []byte{0xff, 0x03}}))
	if err != nil || w.Msg.Added != 10 {
		t.Fatalf("Want: %v %v", w, err)
	}
	if _, err := pc.Want(ctx, connect.NewRequest(&tenurev1.WantRequest{Pool: "swarm", FileIndex: 1, PieceCount: 8,
		Ranges: []*tenurev1.PieceRange{{Start: 0, End: 8}}})); err != nil {
		t.Fatal(err)
	}
	_, err = pc.Want(ctx, connect.NewRequest(&tenurev1.WantRequest{Pool: "swarm", FileIndex: 0, PieceCount: 10, Bits: []byte{0, 0, 1}}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	// A limit refused says what the limit is.
	_, err = pc.Want(ctx, connect.NewRequest(&tenurev1.WantRequest{Pool: "swarm", FileIndex: 2, PieceCount: pool.MaxPiecesPerFile + 1}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	if !strings.Contains(err.Error(), strconv.Itoa(pool.MaxPiecesPerFile)) {
		t.Errorf("the piece count refused does not name the limit: %v", err)
	}

	rl, err := pc.RequestLeases(ctx, connect.NewRequest(&tenurev1.RequestLeasesRequest{Pool: "swarm", Peer: "p1", Max: 5,
		Have: []*tenurev1.HaveMap{{FileIndex: 0, Bits: []byte{0x01}}, {FileIndex: 1, Bits: []byte{0x01}}}}))
	if err != nil || len(rl.Msg.Leases) != 2 || rl.Msg.RejectedReason != tenurev1.RejectedReason_REJECTED_REASON_UNSPECIFIED {
		t.Fatalf("RequestLeases: %v %v", rl, err)
	}
	g, kept := rl.Msg.Leases[0], rl.Msg.Leases[1]
	// The piece lease is an ordinary lease.
	got, err := b.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: g.LeaseId}))
	if err != nil || got.Msg.Lease.Resource != fmt.Sprintf("pool/swarm/%d/%d", g.FileIndex, g.PieceIndex) || got.Msg.Lease.Holder != "p1" {
		t.Fatalf("Get: %v %v", got, err)
	}
	// At capacity, then the rejection reasons.
	rl, err = pc.RequestLeases(ctx, connect.NewRequest(&tenurev1.RequestLeasesRequest{Pool: "swarm", Peer: "p1", Max: 1,
		Have: []*tenurev1.HaveMap{{FileIndex: 0, Bits: []byte{0xff}}}}))
	if err != nil || rl.Msg.RejectedReason != tenurev1.RejectedReason_REJECTED_REASON_PEER_AT_CAPACITY {
		t.Fatalf("capacity: %v %v", rl, err)
	}
	rl, _ = pc.RequestLeases(ctx, connect.NewRequest(&tenurev1.RequestLeasesRequest{Pool: "swarm", Peer: "p2", Max: 0}))
	if rl.Msg.RejectedReason != tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST {
		t.Fatalf("max 0: %v", rl.Msg)
	}
	rl, _ = pc.RequestLeases(ctx, connect.NewRequest(&tenurev1.RequestLeasesRequest{Pool: "swarm", Peer: "p2", Max: 1,
		Have: []*tenurev1.HaveMap{{FileIndex: 0, Bits: []byte{0x01}}}}))
	if rl.Msg.RejectedReason != tenurev1.RejectedReason_REJECTED_REASON_NO_AVAILABLE_PIECES {
		t.Fatalf("no pieces: %v", rl.Msg)
	}
	// A malformed peer or pool is an invalid request like max 0: answered
	// in the response, as every rejection of RequestLeases is.
	for _, bad := range []*tenurev1.RequestLeasesRequest{{Pool: "swarm", Peer: "", Max: 1}, {Pool: "", Peer: "p2", Max: 1}, {Pool: "swarm", Peer: " ", Max: 1}} {
		rl, err = pc.RequestLeases(ctx, connect.NewRequest(bad))
		if err != nil || rl.Msg.RejectedReason != tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST ||
			!strings.HasPrefix(rl.Msg.Message, "REJECTED_REASON_INVALID_REQUEST: ") || len(rl.Msg.Leases) != 0 {
			t.Fatalf("request %v: %v %v", bad, rl, err)
		}
	}

	// Completion by another peer; then success and failure by the holder.
	_, err = pc.CompletePiece(ctx, connect.NewRequest(&tenurev1.CompletePieceRequest{Pool: "swarm", Peer: "p2",
		FileIndex: g.FileIndex, PieceIndex: g.PieceIndex, Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS}))
	wantReason(t, err, connect.CodeFailedPrecondition, "PIECE_NOT_LEASED")
	cp, err := pc.CompletePiece(ctx, connect.NewRequest(&tenurev1.CompletePieceRequest{Pool: "swarm", Peer: "p1",
		FileIndex: g.FileIndex, PieceIndex: g.PieceIndex, Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS}))
	// 1.0·0.95^(hours since first seen, a few ms) + 0.5.
	if err != nil || cp.Msg.Ranking.Score > 1.5 || cp.Msg.Ranking.Score < 1.49 || cp.Msg.Ranking.Successes != 1 {
		t.Fatalf("complete: %v %v", cp, err)
	}
	rk, err := pc.Rankings(ctx, connect.NewRequest(&tenurev1.RankingsRequest{Pool: "swarm"}))
	if err != nil || len(rk.Msg.Rankings) != 2 || rk.Msg.Rankings[0].Peer != "p1" || rk.Msg.Rankings[0].CurrentLeases != 1 {
		t.Fatalf("Rankings: %v %v", rk, err)
	}
	st, err := pc.Status(ctx, connect.NewRequest(&tenurev1.PoolStatusRequest{Pool: "swarm"}))
	if err != nil || len(st.Msg.Files) != 2 || st.Msg.Files[0].Done+st.Msg.Files[1].Done != 1 ||
		st.Msg.Files[0].Leased+st.Msg.Files[1].Leased != 1 {
		t.Fatalf("Status: %v %v", st, err)
	}
	_, err = pc.Status(ctx, connect.NewRequest(&tenurev1.PoolStatusRequest{Pool: "nope"}))
	wantReason(t, err, connect.CodeNotFound, "POOL_NOT_FOUND")
	// Stats: the 18 pieces by where they stand, in the queue's fields.
	code, js := b.postJSON(t, "PoolService/Stats", `{"pool":"swarm"}`)
	want := map[string]any{"queued": "16", "leased": "1", "succeeded": "1", "failed": "0", "dead": "0", "cancelled": "0",
		"files": float64(2), "pieces": "18", "peers": float64(2), "failures": "0"}
	if code != http.StatusOK || !maps.Equal(js, want) {
		t.Fatalf("Stats: %d %v, want %v", code, js, want)
	}
	_, err = pc.Stats(ctx, connect.NewRequest(&tenurev1.PoolStatsRequest{Pool: "nope"}))
	wantReason(t, err, connect.CodeNotFound, "POOL_NOT_FOUND")
	// Want on an unknown pool creates it with the defaults.
	if _, err := pc.Want(ctx, connect.NewRequest(&tenurev1.WantRequest{Pool: "auto", FileIndex: 2, PieceCount: 3, Bits: []byte{7}})); err != nil {
		t.Fatal(err)
	}
	st, err = pc.Status(ctx, connect.NewRequest(&tenurev1.PoolStatusRequest{Pool: "auto"}))
	if err != nil || st.Msg.Config.MaxLeasesPerPeer != 4 || st.Msg.Config.LeaseDuration.AsDuration().Seconds() != 300 {
		t.Fatalf("auto pool: %v %v", st, err)
	}

	// ResetPeer: p1 ranked afresh, its lease kept; the feed says so.
	rs, err := pc.ResetPeer(ctx, connect.NewRequest(&tenurev1.ResetPeerRequest{Pool: "swarm", Peer: "p1"}))
	if err != nil || !rs.Msg.Known || rs.Msg.Before.GetSuccesses() != 1 || rs.Msg.Ranking.GetScore() != pool.StartScore ||
		rs.Msg.Ranking.GetSuccesses() != 0 || rs.Msg.Ranking.GetCurrentLeases() != 1 {
		t.Fatalf("ResetPeer: %v %v", rs, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	rw, err := b.leases.Watch(rctx, connect.NewRequest(&tenurev1.WatchRequest{AfterIndex: b.status(t).LedgerIndex - 1}))
	if err != nil {
		t.Fatal(err)
	}
	if !rw.Receive() || rw.Msg().Event.Type != "pool.peer_reset" || rw.Msg().Event.Holder != "p1" || rw.Msg().Event.Namespace != "default" {
		t.Fatalf("the reset's event: %v (%v)", rw.Msg(), rw.Err())
	}
	rw.Close()
	if rs, err := pc.ResetPeer(ctx, connect.NewRequest(&tenurev1.ResetPeerRequest{Pool: "swarm", Peer: "ghost"})); err != nil || rs.Msg.Known {
		t.Fatalf("ResetPeer of an unknown peer: %v %v", rs, err)
	}
	_, err = pc.ResetPeer(ctx, connect.NewRequest(&tenurev1.ResetPeerRequest{Pool: "nope", Peer: "p1"}))
	wantReason(t, err, connect.CodeNotFound, "POOL_NOT_FOUND")
	_, err = pc.ResetPeer(ctx, connect.NewRequest(&tenurev1.ResetPeerRequest{Pool: "swarm", Peer: ""}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")

	// Deleting the pool revokes p1's remaining piece lease, and the
	// feed says so: the piece returned, then the pool deleted.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	watch, err := b.leases.Watch(wctx, connect.NewRequest(&tenurev1.WatchRequest{AfterIndex: b.status(t).LedgerIndex}))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	dp, err := pc.DeletePool(ctx, connect.NewRequest(&tenurev1.DeletePoolRequest{Pool: "swarm"}))
	if err != nil || !dp.Msg.Deleted || dp.Msg.RevokedLeases != 1 || dp.Msg.Files != 2 || dp.Msg.PiecesDone != 1 {
		t.Fatalf("DeletePool: %v %v", dp, err)
	}
	var types []string
	for len(types) < 3 && watch.Receive() {
		types = append(types, watch.Msg().Event.Type)
	}
	if want := []string{"lease.revoked", "piece.returned", "pool.deleted"}; !slices.Equal(types, want) && !slices.Equal(types, []string{want[1], want[0], want[2]}) {
		t.Fatalf("events of the delete: %v (%v), want %v", types, watch.Err(), want)
	}
	got, err = b.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: kept.LeaseId}))
	if err != nil || got.Msg.Lease.State != tenurev1.State_STATE_REVOKED {
		t.Fatalf("the piece lease left: %v %v", got, err)
	}
	_, err = pc.Status(ctx, connect.NewRequest(&tenurev1.PoolStatusRequest{Pool: "swarm"}))
	wantReason(t, err, connect.CodeNotFound, "POOL_NOT_FOUND")
	dp, err = pc.DeletePool(ctx, connect.NewRequest(&tenurev1.DeletePoolRequest{Pool: "swarm"}))
	if err != nil || dp.Msg.Deleted {
		t.Fatalf("DeletePool again: %v %v", dp, err)
	}
	_, err = pc.DeletePool(ctx, connect.NewRequest(&tenurev1.DeletePoolRequest{Pool: ""}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
}

// BenchmarkPoolRequestComplete: 64 peers, each looping RequestLeases (up
// to 4) and CompletePiece(SUCCESS) for what it got, against a durable
// single node: one unary call per operation through the generated Connect
// client, or over one shared PoolService.Pipeline stream. Pool of 100,000
// pieces in 10 files, every peer has every piece.
func BenchmarkPoolRequestComplete(b *testing.B) {
	for _, transport := range []string{"unary", "pipeline"} {
		b.Run("transport="+transport, func(b *testing.B) {
			bd := setup(b)
			// Encoding as the Go client does.
			pc := tenurev1connect.NewPoolServiceClient(h2cClient(), bd.base, connect.WithGRPC(), connect.WithCodec(wire.Codec{}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			request := func(r *tenurev1.RequestLeasesRequest) (*tenurev1.RequestLeasesResponse, error) {
				res, err := pc.RequestLeases(ctx, connect.NewRequest(r))
				if err != nil {
					return nil, err
				}
				return res.Msg, nil
			}
			complete := func(r *tenurev1.CompletePieceRequest) error {
				_, err := pc.CompletePiece(ctx, connect.NewRequest(r))
				return err
			}
			if transport == "pipeline" {
				p := newPoolPipeliner(ctx, pc)
				request = func(r *tenurev1.RequestLeasesRequest) (*tenurev1.RequestLeasesResponse, error) {
					res, err := p.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_RequestLeases{RequestLeases: r}})
					return res.GetRequestLeases(), err
				}
				complete = func(r *tenurev1.CompletePieceRequest) error {
					_, err := p.do(&tenurev1.PoolOp{Op: &tenurev1.PoolOp_CompletePiece{CompletePiece: r}})
					return err
				}
			}
			const files, perFile, peers = 10, 10_000, 64
			var have []*tenurev1.HaveMap
			for f := range files {
				if _, err := pc.Want(ctx, connect.NewRequest(&tenurev1.WantRequest{Pool: "bench", FileIndex: uint32(f), PieceCount: perFile,
					Ranges: []*tenurev1.PieceRange{{Start: 0, End: perFile}}})); err != nil {
					b.Fatal(err)
				}
				bits := make([]byte, perFile/8)
				for i := range bits {
					bits[i] = 0xff
				}
				have = append(have, &tenurev1.HaveMap{FileIndex: uint32(f), Bits: bits})
			}
			var requests, leases atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range peers {
				n := b.N / peers
				if c < b.N%peers {
					n++
				}
				wg.Go(func() {
					peer := fmt.Sprintf("peer%d", c)
					for range n {
						rl, err := request(&tenurev1.RequestLeasesRequest{Pool: "bench", Peer: peer, Max: 4, Have: have})
						if err != nil {
							b.Error(err)
							return
						}
						for _, l := range rl.Leases {
							if err := complete(&tenurev1.CompletePieceRequest{Pool: "bench", Peer: peer,
								FileIndex: l.FileIndex, PieceIndex: l.PieceIndex, Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS}); err != nil {
								b.Error(err)
								return
							}
						}
						requests.Add(1)
						leases.Add(int64(len(rl.Leases)))
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(requests.Load())/b.Elapsed().Seconds(), "requests/s")
			b.ReportMetric(float64(requests.Load()+leases.Load())/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
