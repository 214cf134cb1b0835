package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// poolService implements tenure.v1.PoolService.
type poolService struct{ s *Server }

func init() {
	// Followers forward pool writes (and linearizable reads) to the leader.
	routes[v1c.PoolServiceCreatePoolProcedure] = route{true, via[tenurev1.CreatePoolRequest, tenurev1.CreatePoolResponse](v1c.PoolServiceCreatePoolProcedure)}
	routes[v1c.PoolServiceWantProcedure] = route{true, via[tenurev1.WantRequest, tenurev1.WantResponse](v1c.PoolServiceWantProcedure)}
	routes[v1c.PoolServiceRequestLeasesProcedure] = route{true, via[tenurev1.RequestLeasesRequest, tenurev1.RequestLeasesResponse](v1c.PoolServiceRequestLeasesProcedure)}
	routes[v1c.PoolServiceCompletePieceProcedure] = route{true, via[tenurev1.CompletePieceRequest, tenurev1.CompletePieceResponse](v1c.PoolServiceCompletePieceProcedure)}
	routes[v1c.PoolServiceRankingsProcedure] = route{false, via[tenurev1.RankingsRequest, tenurev1.RankingsResponse](v1c.PoolServiceRankingsProcedure)}
	routes[v1c.PoolServiceStatusProcedure] = route{false, via[tenurev1.PoolStatusRequest, tenurev1.PoolStatusResponse](v1c.PoolServiceStatusProcedure)}
	routes[v1c.PoolServiceStatsProcedure] = route{false, via[tenurev1.PoolStatsRequest, tenurev1.PoolStatsResponse](v1c.PoolServiceStatsProcedure)}
	routes[v1c.PoolServiceListPoolsProcedure] = route{false, via[tenurev1.ListPoolsRequest, tenurev1.ListPoolsResponse](v1c.PoolServiceListPoolsProcedure)}
	routes[v1c.PoolServiceDeletePoolProcedure] = route{true, via[tenurev1.DeletePoolRequest, tenurev1.DeletePoolResponse](v1c.PoolServiceDeletePoolProcedure)}
	routes[v1c.PoolServiceResetPeerProcedure] = route{true, via[tenurev1.ResetPeerRequest, tenurev1.ResetPeerResponse](v1c.PoolServiceResetPeerProcedure)}
}

// proposePool validates and replicates a pool command and returns its
// answer; an error (not a RequestLeases rejection) comes back as the error.
func (s *Server) proposePool(ctx context.Context, actor string, c *logpb.PoolCommand) (pool.Outcome, error) {
	cmd, err := poolCommand(actor, c)
	if err != nil {
		return pool.Outcome{}, err
	}
	stampActor(ctx, cmd)
	res, err := s.node.Propose(ctx, cmd)
	if err != nil {
		logUnexpected(s.log, "proposal broke off", err)
		return pool.Outcome{}, err
	}
	return poolOutcome(res)
}

// poolCommand validates a pool command and wraps it.
func poolCommand(actor string, c *logpb.PoolCommand) (*logpb.Command, error) {
	if err := pool.ValidateCommand(c); err != nil {
		return nil, err
	}
	return &logpb.Command{Actor: actor, Op: &logpb.Command_Pool{Pool: c}}, nil
}

// poolOutcome is the pool domain's answer in a command's result.
func poolOutcome(res statemachine.Result) (pool.Outcome, error) {
	if res.Pool == nil {
		if res.Outcome.Err != nil {
			return pool.Outcome{}, res.Outcome.Err
		}
		return pool.Outcome{}, errors.New("the state machine gave no pool answer")
	}
	return *res.Pool, res.Pool.Err
}

func (s *Server) readPools(ctx context.Context, fn func(ps *pool.Pools) error) error {
	return s.node.Read(ctx, staleRead(ctx), func(m *statemachine.Machine, _ registrar.Tick) error { return fn(m.Pools()) })
}

func rankingProto(r pool.Ranking) *tenurev1.PeerRanking {
	return &tenurev1.PeerRanking{Peer: r.Peer, Score: r.Score, Successes: r.Successes, Failures: r.Failures, CurrentLeases: r.CurrentLeases}
}

func fileStatusProto(f pool.FileStatus) *tenurev1.PoolFileStatus {
	return &tenurev1.PoolFileStatus{FileIndex: f.Index, Pieces: f.Pieces, Wanted: f.Wanted, Leased: f.Leased, Done: f.Done}
}

func (h *poolService) CreatePool(ctx context.Context, req *connect.Request[tenurev1.CreatePoolRequest]) (*connect.Response[tenurev1.CreatePoolResponse], error) {
	m := req.Msg
	cfg, err := pool.ConfigFromAPI(m.Config)
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	if cfg.MinScore > pool.StartScore {
		// Only an outcome changes a score, and a refused peer has none:
		// such a pool could never lease a piece. (The API's check: a log
		// may hold such pools, which apply as they did.)
		return nil, h.s.toConnect(invalidArg("config.min_peer_score", fmt.Sprintf(
			"is %g, above a new peer's score of %g: every peer would be refused, and for good", cfg.MinScore, pool.StartScore)))
	}
	out, err := h.s.proposePool(ctx, "", &logpb.PoolCommand{Namespace: m.Namespace, Pool: m.Pool,
		Op: &logpb.PoolCommand_Create{Create: &logpb.PoolCreate{Config: m.Config}}})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.CreatePoolResponse{Created: out.Created, Config: out.Config.API()}), nil
}

// Want adds pieces; a pool that does not exist yet is created with the
// default configuration.
func (h *poolService) Want(ctx context.Context, req *connect.Request[tenurev1.WantRequest]) (*connect.Response[tenurev1.WantResponse], error) {
	m := req.Msg
	if m.FileIndex > pool.MaxFileIndex {
		return nil, h.s.toConnect(invalidArg("file_index", fmt.Sprintf("is %d; the largest is %d", m.FileIndex, pool.MaxFileIndex)))
	}
	if m.PieceCount > pool.MaxPiecesPerFile {
		return nil, h.s.toConnect(invalidArg("piece_count", fmt.Sprintf("is %d; the limit is %d pieces per file", m.PieceCount, pool.MaxPiecesPerFile)))
	}
	if len(m.Ranges) > pool.MaxRanges {
		return nil, h.s.toConnect(invalidArg("ranges", fmt.Sprintf("has %d ranges; the limit is %d", len(m.Ranges), pool.MaxRanges)))
	}
	out, err := h.s.proposePool(ctx, "", &logpb.PoolCommand{Namespace: m.Namespace, Pool: m.Pool,
		Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{FileIndex: m.FileIndex, PieceCount: m.PieceCount, Bits: m.Bits, Ranges: m.Ranges}}})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.WantResponse{Added: out.Added, AlreadyDone: out.AlreadyDone, File: fileStatusProto(out.File)}), nil
}

func (h *poolService) RequestLeases(ctx context.Context, req *connect.Request[tenurev1.RequestLeasesRequest]) (*connect.Response[tenurev1.RequestLeasesResponse], error) {
	m := req.Msg
	if r := invalidRequest(m); r != nil {
		return connect.NewResponse(r), nil
	}
	out, err := h.s.proposePool(ctx, m.Peer, requestCommand(m))
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(requestLeasesResponse(out)), nil
}

// invalidRequest answers a RequestLeases that is malformed on its face
// (max 0, too many have-maps, an empty or malformed pool, peer or
// namespace) without proposing it: nothing to record. Like the
// rejections the pool answers (an unknown pool or file, a bad have-map),
// it is REJECTED_REASON_INVALID_REQUEST in the response, not an error.
// nil: the request goes to the pool.
func invalidRequest(m *tenurev1.RequestLeasesRequest) *tenurev1.RequestLeasesResponse {
	why := ""
	switch {
	case m.Max == 0:
		why = "max must be positive"
	case len(m.Have) > pool.MaxHaveMaps:
		why = "too many have-maps"
	default:
		err := registrar.CheckNamespace("namespace", m.Namespace, false)
		if err == nil {
			err = pool.ValidateCommand(requestCommand(m))
		}
		if err == nil {
			return nil
		}
		why = strings.TrimPrefix(err.Error(), string(registrar.ReasonInvalidArgument)+": ")
	}
	r := tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST
	return &tenurev1.RequestLeasesResponse{RejectedReason: r, Message: r.String() + ": " + why}
}

// requestCommand is the pool command of a RequestLeases.
func requestCommand(m *tenurev1.RequestLeasesRequest) *logpb.PoolCommand {
	have := make([]*logpb.PoolHave, len(m.Have))
	for i, hm := range m.Have {
		have[i] = &logpb.PoolHave{FileIndex: hm.FileIndex, Bits: hm.Bits}
	}
	return &logpb.PoolCommand{Namespace: m.Namespace, Pool: m.Pool,
		Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{Peer: m.Peer, Have: have, Max: m.Max}}}
}

func requestLeasesResponse(out pool.Outcome) *tenurev1.RequestLeasesResponse {
	resp := &tenurev1.RequestLeasesResponse{RejectedReason: out.Rejected, Message: out.Message}
	for _, g := range out.Leases {
		resp.Leases = append(resp.Leases, &tenurev1.PieceLease{FileIndex: g.File, PieceIndex: g.Piece, LeaseId: g.LeaseID,
			ExpiresAt: timestamppb.New(g.ExpiresAt), Fence: g.Fence})
	}
	return resp
}

func (h *poolService) CompletePiece(ctx context.Context, req *connect.Request[tenurev1.CompletePieceRequest]) (*connect.Response[tenurev1.CompletePieceResponse], error) {
	m := req.Msg
	c, err := completePieceCommand(m)
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	out, err := h.s.proposePool(ctx, m.Peer, c)
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.CompletePieceResponse{Ranking: rankingProto(out.Ranking)}), nil
}

// completePieceCommand checks a CompletePiece's result and builds its pool
// command.
func completePieceCommand(m *tenurev1.CompletePieceRequest) (*logpb.PoolCommand, error) {
	switch m.Result {
	case tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS, tenurev1.CompletionResult_COMPLETION_RESULT_FAILURE:
	default:
		return nil, invalidArg("result", "must be COMPLETION_RESULT_SUCCESS or COMPLETION_RESULT_FAILURE")
	}
	if m.LeaseId != "" {
		if err := registrar.CheckLeaseIDText("lease_id", m.LeaseId); err != nil {
			return nil, err
		}
	}
	return &logpb.PoolCommand{Namespace: m.Namespace, Pool: m.Pool,
		Op: &logpb.PoolCommand_Complete{Complete: &logpb.PoolComplete{Peer: m.Peer, FileIndex: m.FileIndex,
			PieceIndex: m.PieceIndex, Result: m.Result, FailureReason: m.FailureReason, LeaseId: m.LeaseId}}}, nil
}

// DeletePool revokes a pool's piece leases and drops the pool.
func (h *poolService) DeletePool(ctx context.Context, req *connect.Request[tenurev1.DeletePoolRequest]) (*connect.Response[tenurev1.DeletePoolResponse], error) {
	m := req.Msg
	out, err := h.s.proposePool(ctx, "", &logpb.PoolCommand{Namespace: m.Namespace, Pool: m.Pool,
		Op: &logpb.PoolCommand_Delete{Delete: &logpb.PoolDelete{}}})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.DeletePoolResponse{Deleted: out.Deleted, RevokedLeases: out.Revoked,
		Files: out.Files, PiecesDone: out.PiecesDone}), nil
}

// ResetPeer gives a peer a fresh start in a pool's ranking.
func (h *poolService) ResetPeer(ctx context.Context, req *connect.Request[tenurev1.ResetPeerRequest]) (*connect.Response[tenurev1.ResetPeerResponse], error) {
	m := req.Msg
	if err := checkPoolName(m.Namespace, m.Pool); err != nil {
		return nil, h.s.toConnect(err)
	}
	if h.s.node.IsLeader() {
		// A leader just elected asks its members for their rules first.
		if r := h.s.node.AwaitRules(ctx, 2*rulesEvery); r < pool.ResetRules {
			// Refused before proposing, as the state machine would refuse it.
			return nil, h.s.toConnect(registrar.NewError(registrar.ReasonUnimplemented, map[string]string{"rules": utoa(uint64(r))},
				"the cluster applies rules %d: a member runs a build that cannot reset a peer; upgrade every member first", r))
		}
	}
	out, err := h.s.proposePool(ctx, "", &logpb.PoolCommand{Namespace: m.Namespace, Pool: m.Pool,
		Op: &logpb.PoolCommand_ResetPeer{ResetPeer: &logpb.PoolResetPeer{Peer: m.Peer}}})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	resp := &tenurev1.ResetPeerResponse{Known: out.Known, Ranking: rankingProto(out.Ranking)}
	if out.Known {
		resp.Before = rankingProto(out.Before)
	}
	return connect.NewResponse(resp), nil
}

func checkPoolName(ns, name string) error {
	if err := registrar.CheckNamespace("namespace", ns, false); err != nil {
		return err
	}
	return registrar.CheckIdentifier("pool", name, true)
}

func (h *poolService) Rankings(ctx context.Context, req *connect.Request[tenurev1.RankingsRequest]) (*connect.Response[tenurev1.RankingsResponse], error) {
	m := req.Msg
	if err := checkPoolName(m.Namespace, m.Pool); err != nil {
		return nil, h.s.toConnect(err)
	}
	resp := &tenurev1.RankingsResponse{}
	err := h.s.readPools(ctx, func(ps *pool.Pools) error {
		rs, err := ps.Rankings(m.Namespace, m.Pool)
		for _, r := range rs {
			resp.Rankings = append(resp.Rankings, rankingProto(r))
		}
		return err
	})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}

func (h *poolService) Status(ctx context.Context, req *connect.Request[tenurev1.PoolStatusRequest]) (*connect.Response[tenurev1.PoolStatusResponse], error) {
	m := req.Msg
	if err := checkPoolName(m.Namespace, m.Pool); err != nil {
		return nil, h.s.toConnect(err)
	}
	var st pool.Status
	err := h.s.readPools(ctx, func(ps *pool.Pools) error {
		var err error
		st, err = ps.Status(m.Namespace, m.Pool)
		return err
	})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	resp := &tenurev1.PoolStatusResponse{Pool: st.Pool, Namespace: st.Namespace, Config: st.Config.API()}
	for _, f := range st.Files {
		resp.Files = append(resp.Files, fileStatusProto(f))
	}
	for _, p := range st.Peers {
		resp.Peers = append(resp.Peers, &tenurev1.PoolPeerStatus{Peer: p.Peer, CurrentLeases: p.CurrentLeases})
	}
	return connect.NewResponse(resp), nil
}

func (h *poolService) Stats(ctx context.Context, req *connect.Request[tenurev1.PoolStatsRequest]) (*connect.Response[tenurev1.PoolStatsResponse], error) {
	m := req.Msg
	if err := checkPoolName(m.Namespace, m.Pool); err != nil {
		return nil, h.s.toConnect(err)
	}
	var st pool.Stats
	err := h.s.readPools(ctx, func(ps *pool.Pools) error {
		var err error
		st, err = ps.Stats(m.Namespace, m.Pool)
		return err
	})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.PoolStatsResponse{Queued: st.Queued, Leased: st.Leased, Succeeded: st.Succeeded,
		Files: st.Files, Pieces: st.Pieces, Peers: st.Peers, Failures: st.Failures}), nil
}

// Pool event types (DESIGN §1.2 piece.*).
const (
	EventPoolCreated   = "pool.created"
	EventPoolWanted    = "pool.wanted"
	EventPoolDeleted   = "pool.deleted"
	EventPeerReset     = "pool.peer_reset"
	EventPeerHave      = "pool.peer_have"
	EventPieceLeased   = "piece.leased"
	EventPieceComplete = "piece.completed"
	EventPieceFailed   = "piece.failed"
	EventPieceExpired  = "piece.expired"
	EventPieceReturned = "piece.returned"
)

func renderPoolEvent(ev *tenurev1.Event, d map[string]string, pr *logpb.PoolRecord) {
	ev.Namespace = pr.Namespace
	d["pool"] = pr.Pool
	piece := func(peer string, file, idx uint32) {
		ev.Holder = peer
		ev.Resource = pool.Resource(pr.Pool, file, idx)
		d["file_index"], d["piece_index"] = utoa(uint64(file)), utoa(uint64(idx))
	}
	switch e := pr.Event.(type) {
	case *logpb.PoolRecord_Created:
		ev.Type = EventPoolCreated
	case *logpb.PoolRecord_Deleted:
		ev.Type = EventPoolDeleted
	case *logpb.PoolRecord_PeerReset:
		ev.Type = EventPeerReset
		ev.Holder = e.PeerReset.Peer
	case *logpb.PoolRecord_Wanted:
		ev.Type = EventPoolWanted
		d["file_index"], d["piece_count"] = utoa(uint64(e.Wanted.FileIndex)), utoa(uint64(e.Wanted.PieceCount))
	case *logpb.PoolRecord_Have:
		ev.Type = EventPeerHave
		ev.Holder = e.Have.Peer
		d["file_index"] = utoa(uint64(e.Have.FileIndex))
		if e.Have.Idle {
			d["forgotten"] = "idle" // the peer was idle: its have-map no longer counts
		}
	case *logpb.PoolRecord_Leased:
		ev.Type = EventPieceLeased
		piece(e.Leased.Peer, e.Leased.FileIndex, e.Leased.PieceIndex)
		ev.LeaseId, ev.Fence = e.Leased.LeaseId, e.Leased.LeaseSeq
	case *logpb.PoolRecord_Done:
		x := e.Done
		piece(x.Peer, x.FileIndex, x.PieceIndex)
		ev.Fence = x.LeaseSeq
		switch {
		case x.Result == tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS:
			ev.Type = EventPieceComplete
		case x.Result == tenurev1.CompletionResult_COMPLETION_RESULT_FAILURE:
			ev.Type = EventPieceFailed
			d["failure_reason"] = x.FailureReason.String()
		case x.LeaseState == tenurev1.State_STATE_EXPIRED:
			ev.Type = EventPieceExpired
		default:
			ev.Type = EventPieceReturned
			d["lease_state"] = x.LeaseState.String()
		}
		if x.Ranked {
			d["score"] = strconv.FormatFloat(x.Score, 'g', -1, 64)
		}
	}
}

func poolEventScope(pr *logpb.PoolRecord) (ns, resource string) {
	switch e := pr.Event.(type) {
	case *logpb.PoolRecord_Leased:
		return pr.Namespace, pool.Resource(pr.Pool, e.Leased.FileIndex, e.Leased.PieceIndex)
	case *logpb.PoolRecord_Done:
		return pr.Namespace, pool.Resource(pr.Pool, e.Done.FileIndex, e.Done.PieceIndex)
	}
	return pr.Namespace, ""
}

// ListPools names a namespace's pools, by name.
func (h *poolService) ListPools(ctx context.Context, req *connect.Request[tenurev1.ListPoolsRequest]) (*connect.Response[tenurev1.ListPoolsResponse], error) {
	m := req.Msg
	if err := registrar.CheckNamespace("namespace", m.Namespace, false); err != nil {
		return nil, h.s.toConnect(err)
	}
	resp := &tenurev1.ListPoolsResponse{}
	err := h.s.readPools(ctx, func(ps *pool.Pools) error {
		resp.Pools = ps.Names(m.Namespace)
		return nil
	})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}
