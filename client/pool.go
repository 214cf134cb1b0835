package tenure

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// The piece pool (PoolService): files split into pieces, each piece fetched
// by one peer at a time under a piece lease, peers ranked by their results.
// A pool is one downloader's plan: the pieces it still wants and the peers
// (sources) it fetches them from; a peer's have-map is what that peer can
// serve. A swarm in which every node downloads runs one pool per node.
//
//	c.CreatePool(ctx, "swarm", tenure.MaxLeasesPerPeer(8))
//	c.Want(ctx, "swarm", 0, 1000, tenure.AllPieces)
//	leases, err := c.RequestLeases(ctx, "swarm", "peer1", map[uint32]tenure.Bitset{0: have}, 4)
//	switch {
//	case errors.Is(err, tenure.ErrNoAvailablePieces): // nothing to do now
//	case err == nil:
//		for _, l := range leases { fetch(l.File, l.Piece); c.CompletePieceLease(ctx, "swarm", "peer1", l, tenure.PieceSuccess, 0) }
//	}

// PoolConfig is a pool's configuration as the registrar resolved it
// (defaults filled in: lease 300 s, 4 leases per peer, decay 0.95 per hour,
// success bonus 0.5, failure penalty 1.0, minimum score 0.2, peer idle
// timeout 1 h).
type PoolConfig struct {
	LeaseDuration    time.Duration
	MaxLeasesPerPeer uint32
	// Decay is the factor a score is multiplied by per hour since its last update.
	Decay          float64
	SuccessBonus   float64
	FailurePenalty float64
	// MinScore: peers scoring below it are refused (ErrPeerRankingTooLow).
	MinScore float64
	// PeerIdleTimeout: a peer holding no piece lease that records no
	// have-map, takes no lease and ends none for this long has its
	// have-maps forgotten (its next request records them again; its score
	// is kept).
	PeerIdleTimeout time.Duration
}

func poolConfigFrom(pb *tenurev1.PoolConfig) PoolConfig {
	return PoolConfig{
		LeaseDuration:    pb.GetLeaseDuration().AsDuration(),
		MaxLeasesPerPeer: pb.GetMaxLeasesPerPeer(),
		Decay:            pb.GetPeerRankingDecay(),
		SuccessBonus:     pb.GetSuccessBonus(),
		FailurePenalty:   pb.GetFailurePenalty(),
		MinScore:         pb.GetMinPeerScore(),
		PeerIdleTimeout:  pb.GetPeerIdleTimeout().AsDuration(),
	}
}

// A PoolOption configures CreatePool: PieceLeaseDuration, MaxLeasesPerPeer,
// RankingDecay, SuccessBonus, FailurePenalty, MinPeerScore,
// PeerIdleTimeout, Namespace.
// Every setting not given takes the registrar's default.
type PoolOption interface{ applyPool(*poolConfig) }

type poolConfig struct {
	namespace string
	pb        tenurev1.PoolConfig
}

type poolFunc func(*poolConfig)

func (f poolFunc) applyPool(p *poolConfig) { f(p) }

func (n NamespaceOption) applyPool(p *poolConfig) { p.namespace = string(n) }

// PieceLeaseDuration sets the duration of the pool's piece leases.
func PieceLeaseDuration(d time.Duration) PoolOption {
	return poolFunc(func(p *poolConfig) { p.pb.LeaseDuration = durationpb.New(d) })
}

// MaxLeasesPerPeer sets how many piece leases a peer may hold at once.
func MaxLeasesPerPeer(n uint32) PoolOption {
	return poolFunc(func(p *poolConfig) { p.pb.MaxLeasesPerPeer = n })
}

// RankingDecay sets the per-hour decay factor of peer scores, in (0, 1].
func RankingDecay(f float64) PoolOption {
	return poolFunc(func(p *poolConfig) { p.pb.PeerRankingDecay = &f })
}

// SuccessBonus sets the success bonus of the ranking formula.
func SuccessBonus(f float64) PoolOption {
	return poolFunc(func(p *poolConfig) { p.pb.SuccessBonus = &f })
}

// FailurePenalty sets the failure penalty of the ranking formula.
func FailurePenalty(f float64) PoolOption {
	return poolFunc(func(p *poolConfig) { p.pb.FailurePenalty = &f })
}

// MinPeerScore sets the score below which a peer is refused.
func MinPeerScore(f float64) PoolOption {
	return poolFunc(func(p *poolConfig) { p.pb.MinPeerScore = &f })
}

// PeerIdleTimeout sets how long a peer holding no piece lease may be
// inactive before the pool forgets its have-maps (default 1h, within
// [1s, 720h]).
func PeerIdleTimeout(d time.Duration) PoolOption {
	return poolFunc(func(p *poolConfig) { p.pb.PeerIdleTimeout = durationpb.New(d) })
}

// CreatePool creates pool with the given settings (the rest default) and
// returns its configuration. created is false when the pool already
// existed with the same configuration (including when a first attempt
// whose outcome was unknown created it: the call is harmless to repeat, so
// it is retried on another endpoint); a different configuration is
// ErrInvalidArgument.
func (c *Client) CreatePool(ctx context.Context, pool string, opts ...PoolOption) (cfg PoolConfig, created bool, err error) {
	pc := poolConfig{namespace: c.cfg.namespace}
	for _, o := range opts {
		if o != nil {
			o.applyPool(&pc)
		}
	}
	err = c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.CreatePool(ctx, connect.NewRequest(&tenurev1.CreatePoolRequest{
			Pool: pool, Namespace: pc.namespace, Config: &pc.pb,
		}))
		if err == nil {
			cfg, created = poolConfigFrom(resp.Msg.GetConfig()), resp.Msg.GetCreated()
		}
		return err
	})
	return cfg, created, err
}

// A WantOption says which pieces Want adds: a Bitset, a Range, Ranges or
// AllPieces (several are combined); Namespace is one too.
type WantOption interface{ applyWant(*wantConfig) }

type wantConfig struct {
	namespace string
	bits      Bitset
	hasBits   bool
	ranges    []*tenurev1.PieceRange
	all       bool
}

func (s Bitset) applyWant(w *wantConfig) {
	for _, r := range s.Ranges() {
		w.bits.SetRange(r.Start, r.End)
	}
	w.hasBits = true
}

func (r Range) applyWant(w *wantConfig) {
	w.ranges = append(w.ranges, &tenurev1.PieceRange{Start: r.Start, End: r.End})
}

// Ranges is a list of piece ranges, a WantOption.
type Ranges []Range

func (rs Ranges) applyWant(w *wantConfig) {
	for _, r := range rs {
		r.applyWant(w)
	}
}

type allPieces struct{}

func (allPieces) applyWant(w *wantConfig) { w.all = true }

// AllPieces makes Want add every piece of the file: [0, pieceCount).
var AllPieces WantOption = allPieces{}

func (n NamespaceOption) applyWant(w *wantConfig) { w.namespace = string(n) }

// FileStatus is one file of a pool: its piece count and how many pieces
// are wanted, leased and done.
type FileStatus struct {
	File   uint32
	Pieces uint32
	Wanted uint64
	Leased uint64
	Done   uint64
}

func fileStatusFrom(pb *tenurev1.PoolFileStatus) FileStatus {
	return FileStatus{File: pb.GetFileIndex(), Pieces: pb.GetPieces(), Wanted: pb.GetWanted(), Leased: pb.GetLeased(), Done: pb.GetDone()}
}

// Want adds pieces of file to the pool's wanted set and returns how many
// became wanted and the file's status. pieceCount is required the first
// time a file is named and must not change (0 afterwards means "as
// before"). Pieces already done stay done, pieces leased stay leased. A
// pool that does not exist yet is created with the default configuration.
//
//	c.Want(ctx, "swarm", 0, 1000, tenure.AllPieces)
//	c.Want(ctx, "swarm", 1, 500, tenure.Range{Start: 0, End: 100}, tenure.BitsetFromBools(missing))
func (c *Client) Want(ctx context.Context, pool string, file, pieceCount uint32, pieces ...WantOption) (added uint64, st FileStatus, err error) {
	w := wantConfig{namespace: c.cfg.namespace}
	for _, p := range pieces {
		if p != nil {
			p.applyWant(&w)
		}
	}
	req := &tenurev1.WantRequest{Pool: pool, Namespace: w.namespace, FileIndex: file, PieceCount: pieceCount, Ranges: w.ranges}
	if w.hasBits {
		req.Bits = w.bits.wire()
	}
	if w.all {
		n := pieceCount
		if n == 0 {
			// "As before": the file's piece count is the pool's.
			if n, err = c.filePieces(ctx, pool, file, w.namespace); err != nil {
				return 0, FileStatus{}, err
			}
		}
		req.Ranges = append(req.Ranges, &tenurev1.PieceRange{Start: 0, End: n})
	}
	// Wanting the same pieces twice leaves the same state: safe to retry.
	err = c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.Want(ctx, connect.NewRequest(req))
		if err == nil {
			added, st = resp.Msg.GetAdded(), fileStatusFrom(resp.Msg.GetFile())
		}
		return err
	})
	return added, st, err
}

// filePieces returns the piece count of a file the pool has.
func (c *Client) filePieces(ctx context.Context, pool string, file uint32, namespace string) (uint32, error) {
	st, err := c.PoolStatus(ctx, pool, Namespace(namespace))
	if errors.Is(err, ErrPoolNotFound) {
		// Want creates the pool; the file is new, so its count is needed.
		return 0, invalidArgument("piece_count", "is required with AllPieces the first time a file is named: pool "+
			pool+" does not exist yet")
	}
	if err != nil {
		return 0, err
	}
	for _, f := range st.Files {
		if f.File == file {
			return f.Pieces, nil
		}
	}
	return 0, invalidArgument("piece_count", "is required with AllPieces the first time a file is named: pool "+
		pool+" has no file "+strconv.FormatUint(uint64(file), 10)+" yet")
}

// PieceLease is a piece granted by RequestLeases: an ordinary lease on the
// resource "pool/<pool>/<file>/<piece>", held by the peer. A download
// that takes longer than the lease renews it (RenewPiece); a peer that
// lost track of its leases (a crash, an unknown outcome) finds them with
// PieceLeases.
type PieceLease struct {
	File      uint32
	Piece     uint32
	LeaseID   string
	ExpiresAt time.Time
	Fence     uint64
}

// RejectedReason says why RequestLeases granted nothing; the values are the
// wire enum names.
type RejectedReason string

// Rejection reasons, in the registrar's order of precedence.
const (
	RejectedInvalidRequest    RejectedReason = "REJECTED_REASON_INVALID_REQUEST"
	RejectedPeerRankingTooLow RejectedReason = "REJECTED_REASON_PEER_RANKING_TOO_LOW"
	RejectedPeerAtCapacity    RejectedReason = "REJECTED_REASON_PEER_AT_CAPACITY"
	RejectedNoAvailablePieces RejectedReason = "REJECTED_REASON_NO_AVAILABLE_PIECES"
)

// RejectedError is RequestLeases' answer when it granted nothing: the
// reason and the registrar's message (which starts with the reason).
// errors.Is matches the sentinel of its reason (ErrNoAvailablePieces, …)
// and ErrRejected.
type RejectedError struct {
	Reason  RejectedReason
	Message string
}

func (e *RejectedError) Error() string {
	if e.Message == "" {
		return string(e.Reason)
	}
	return e.Message
}

// Is matches ErrRejected and any *RejectedError with the same reason.
func (e *RejectedError) Is(target error) bool {
	if target == ErrRejected {
		return true
	}
	t, ok := target.(*RejectedError)
	return ok && t != nil && t.Reason == e.Reason
}

// Sentinels of RequestLeases' rejections, for errors.Is.
var (
	// ErrRejected matches every rejection.
	ErrRejected = errors.New("tenure: piece request rejected")
	// ErrInvalidRequest: max 0, an unknown pool or file, a have-map naming
	// pieces beyond the file, two have-maps of one file.
	ErrInvalidRequest = &RejectedError{Reason: RejectedInvalidRequest}
	// ErrPeerRankingTooLow: the peer's score is below the pool's minimum.
	ErrPeerRankingTooLow = &RejectedError{Reason: RejectedPeerRankingTooLow}
	// ErrPeerAtCapacity: the peer already holds its maximum of piece leases.
	ErrPeerAtCapacity = &RejectedError{Reason: RejectedPeerAtCapacity}
	// ErrNoAvailablePieces: none of the pieces the peer has are wanted and free.
	ErrNoAvailablePieces = &RejectedError{Reason: RejectedNoAvailablePieces}
)

// RequestLeases asks for up to max pieces for peer among those it has
// (have maps a file index to the pieces of that file the peer can serve).
// The registrar grants up to min(max, capacity left) pieces that are
// wanted and not leased, rarest first, each under a lease of the pool's
// duration. When it grants nothing the error is a *RejectedError
// (ErrInvalidRequest, ErrPeerRankingTooLow, ErrPeerAtCapacity,
// ErrNoAvailablePieces); malformed input (an empty peer or pool, max 0,
// a bad have-map) is ErrInvalidRequest. The peer's lease quota (the
// namespace's max_active_per_holder) is ErrQuotaExceeded when it leaves
// room for no piece, and cuts a grant short otherwise. Either way, and for
// every rejection but ErrInvalidRequest, the pool has recorded the
// have-maps sent (they count for rarity). Not retried after an unknown outcome
// (ErrOutcomeUnknown, a member lost mid-call included): the pieces may have
// been granted, and PieceLeases lists what the peer holds now. Fetch and
// complete those: each one left to expire counts as a failure in the
// peer's ranking, and by the ranking's formula a new peer whose first
// outcome is a failure scores 1.0 − penalty, clamped to 0.1: below the
// default minimum score (0.2), refused from then on (only an outcome
// changes a score, and a refused peer has none).
func (c *Client) RequestLeases(ctx context.Context, pool, peer string, have map[uint32]Bitset, max uint32, opts ...CallOption) ([]PieceLease, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.RequestLeasesRequest{Pool: pool, Namespace: cc.namespace, Peer: peer, Max: max}
	for _, f := range slices.Sorted(maps.Keys(have)) {
		req.Have = append(req.Have, &tenurev1.HaveMap{FileIndex: f, Bits: have[f].wire()})
	}
	var resp *tenurev1.RequestLeasesResponse
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		r, err := c.requestLeasesRPC(ctx, ep, req)
		if err == nil {
			resp = r
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(resp.GetLeases()) == 0 {
		return nil, &RejectedError{Reason: RejectedReason(resp.GetRejectedReason().String()), Message: resp.GetMessage()}
	}
	out := make([]PieceLease, len(resp.GetLeases()))
	for i, l := range resp.GetLeases() {
		out[i] = PieceLease{File: l.GetFileIndex(), Piece: l.GetPieceIndex(), LeaseID: l.GetLeaseId(),
			ExpiresAt: l.GetExpiresAt().AsTime(), Fence: l.GetFence()}
	}
	return out, nil
}

// PieceResult is the outcome of a piece reported to CompletePiece.
type PieceResult int32

const (
	// PieceSuccess: the piece is done for good; the peer is rewarded.
	PieceSuccess PieceResult = PieceResult(tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS)
	// PieceFailure: the piece is wanted again; the peer is penalised.
	PieceFailure PieceResult = PieceResult(tenurev1.CompletionResult_COMPLETION_RESULT_FAILURE)
)

func (r PieceResult) String() string {
	return strings.ToLower(strings.TrimPrefix(tenurev1.CompletionResult(r).String(), "COMPLETION_RESULT_"))
}

// PieceFailureReason says why a piece failed (required with PieceFailure).
type PieceFailureReason int32

const (
	PieceVerificationFailed = PieceFailureReason(tenurev1.FailureReason_FAILURE_REASON_VERIFICATION_FAILED)
	PieceNetworkError       = PieceFailureReason(tenurev1.FailureReason_FAILURE_REASON_NETWORK_ERROR)
	PieceTimeout            = PieceFailureReason(tenurev1.FailureReason_FAILURE_REASON_TIMEOUT)
	PieceInvalidData        = PieceFailureReason(tenurev1.FailureReason_FAILURE_REASON_INVALID_DATA)
)

func (r PieceFailureReason) String() string {
	return strings.ToLower(strings.TrimPrefix(tenurev1.FailureReason(r).String(), "FAILURE_REASON_"))
}

// PeerRanking is a peer's standing in a pool.
type PeerRanking struct {
	Peer          string
	Score         float64
	Successes     uint64
	Failures      uint64
	CurrentLeases uint32
}

func rankingFrom(pb *tenurev1.PeerRanking) PeerRanking {
	return PeerRanking{Peer: pb.GetPeer(), Score: pb.GetScore(), Successes: pb.GetSuccesses(), Failures: pb.GetFailures(), CurrentLeases: pb.GetCurrentLeases()}
}

// CompletePiece reports the outcome of a piece leased to peer and returns
// the peer's new ranking. reason is required with PieceFailure and ignored
// (pass 0) with PieceSuccess. Only the peer holding the piece's lease may
// complete it: anyone else, or a second completion, gets
// ErrPieceNotLeased; an unknown pool ErrPoolNotFound. Not retried after an
// unknown outcome (a repeat would answer ErrPieceNotLeased). The registrar
// releases the piece's lease: one this client keeps alive (Resume) stops
// being renewed, its Err ErrReleased.
//
// CompletePiece reports on the piece's current lease, whichever it is:
// prefer CompletePieceLease, which names the lease, so that a report
// delayed past its lease's expiry cannot end a lease the peer was granted
// on the same piece since.
func (c *Client) CompletePiece(ctx context.Context, pool, peer string, file, piece uint32, result PieceResult, reason PieceFailureReason, opts ...CallOption) (PeerRanking, error) {
	return c.completePiece(ctx, pool, peer, "", file, piece, result, reason, opts)
}

// CompletePieceLease reports the outcome of the piece lease l (as
// RequestLeases granted it) and returns the peer's new ranking, as
// CompletePiece; when l is no longer the piece's current lease (it
// expired, even if the piece was granted to peer again since) the answer
// is ErrPieceNotLeased and nothing changes.
func (c *Client) CompletePieceLease(ctx context.Context, pool, peer string, l PieceLease, result PieceResult, reason PieceFailureReason, opts ...CallOption) (PeerRanking, error) {
	if l.LeaseID == "" {
		return PeerRanking{}, invalidArgument("lease_id", "is empty (a PieceLease from RequestLeases or PieceLeases has one)")
	}
	return c.completePiece(ctx, pool, peer, l.LeaseID, l.File, l.Piece, result, reason, opts)
}

func (c *Client) completePiece(ctx context.Context, pool, peer, leaseID string, file, piece uint32, result PieceResult, reason PieceFailureReason, opts []CallOption) (PeerRanking, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.CompletePieceRequest{Pool: pool, Namespace: cc.namespace, Peer: peer, FileIndex: file, PieceIndex: piece,
		Result: tenurev1.CompletionResult(result), LeaseId: leaseID}
	if result == PieceFailure {
		req.FailureReason = tenurev1.FailureReason(reason)
	}
	var rk PeerRanking
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := c.completePieceRPC(ctx, ep, req)
		if err == nil {
			rk = rankingFrom(resp.GetRanking())
		}
		return err
	})
	if err == nil {
		// The registrar ended the piece's lease: one this client keeps
		// alive (Resume) stops being renewed, its Err ErrReleased.
		if leaseID == "" {
			leaseID = c.trackedOn(cc.namespace, "pool/"+pool+"/"+strconv.FormatUint(uint64(file), 10)+"/"+strconv.FormatUint(uint64(piece), 10), peer)
		}
		c.settle(leaseID)
	}
	return rk, err
}

// RenewPiece extends the piece lease l of peer by the pool's lease
// duration from now, for a download that takes longer than a lease, and
// returns it with its new expiry. A lease that ended is ErrLeaseExpired
// (the piece went back to wanted and counted as a failure) or
// ErrLeaseTerminal; a lease of another peer ErrNotHolder. Renewals count
// against the namespace's renewal limits, as for any lease.
func (c *Client) RenewPiece(ctx context.Context, peer string, l PieceLease) (PieceLease, error) {
	if l.LeaseID == "" {
		return PieceLease{}, invalidArgument("lease_id", "is empty (a PieceLease from RequestLeases or PieceLeases has one)")
	}
	_, pb, err := c.renewAs(ctx, l.LeaseID, peer, false)
	if err != nil {
		return PieceLease{}, err
	}
	l.ExpiresAt = pb.GetExpiresAt().AsTime()
	return l, nil
}

// PieceLeases returns the piece leases peer holds in pool now, by file
// and piece: what a peer that lost track of them (a restart, an unknown
// outcome of RequestLeases) still holds and may complete, renew or let
// go.
func (c *Client) PieceLeases(ctx context.Context, pool, peer string, opts ...CallOption) ([]PieceLease, error) {
	cc := c.callConfig(opts)
	prefix := "pool/" + pool + "/"
	var out []PieceLease
	req := &tenurev1.ListRequest{Namespace: cc.namespace, Prefix: prefix, Holder: peer,
		States: []tenurev1.State{tenurev1.State_STATE_ACTIVE}, PageSize: 1000}
	for {
		var resp *tenurev1.ListResponse
		err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
			r, err := ep.lease.List(ctx, connect.NewRequest(req))
			if err == nil {
				resp = r.Msg
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, l := range resp.GetLeases() {
			file, piece, ok := pieceOf(l.GetResource(), prefix)
			if !ok {
				continue
			}
			out = append(out, PieceLease{File: file, Piece: piece, LeaseID: l.GetLeaseId(),
				ExpiresAt: l.GetExpiresAt().AsTime(), Fence: l.GetFence()})
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	slices.SortFunc(out, func(a, b PieceLease) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Piece, b.Piece))
	})
	return out, nil
}

// pieceOf parses a piece lease's resource, prefix + "<file>/<piece>".
func pieceOf(resource, prefix string) (file, piece uint32, ok bool) {
	rest, ok := strings.CutPrefix(resource, prefix)
	if !ok {
		return 0, 0, false
	}
	fs, ps, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	f, err1 := strconv.ParseUint(fs, 10, 32)
	p, err2 := strconv.ParseUint(ps, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uint32(f), uint32(p), true
}

// PoolStats counts the pool's pieces by where they stand: queued (wanted,
// free for a peer), leased and succeeded (done), with the queue's other
// counts at 0 (a pool never gives a piece up); and its files, pieces,
// peers and their failures. An unknown pool is ErrPoolNotFound.
func (c *Client) PoolStats(ctx context.Context, pool string, opts ...CallOption) (*tenurev1.PoolStatsResponse, error) {
	cc := c.callConfig(opts)
	var out *tenurev1.PoolStatsResponse
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.Stats(ctx, connect.NewRequest(&tenurev1.PoolStatsRequest{Pool: pool, Namespace: cc.namespace}))
		if err == nil {
			out = resp.Msg
		}
		return err
	})
	return out, err
}

// ListPools returns the names of the namespace's pools, in order.
func (c *Client) ListPools(ctx context.Context, opts ...CallOption) ([]string, error) {
	cc := c.callConfig(opts)
	var out []string
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.ListPools(ctx, connect.NewRequest(&tenurev1.ListPoolsRequest{Namespace: cc.namespace}))
		if err == nil {
			out = resp.Msg.GetPools()
		}
		return err
	})
	return out, err
}

// Rankings returns the pool's peers, highest score first (equal scores by
// peer name).
func (c *Client) Rankings(ctx context.Context, pool string, opts ...CallOption) ([]PeerRanking, error) {
	cc := c.callConfig(opts)
	var out []PeerRanking
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.Rankings(ctx, connect.NewRequest(&tenurev1.RankingsRequest{Pool: pool, Namespace: cc.namespace}))
		if err == nil {
			out = make([]PeerRanking, len(resp.Msg.GetRankings()))
			for i, r := range resp.Msg.GetRankings() {
				out[i] = rankingFrom(r)
			}
		}
		return err
	})
	return out, err
}

// PoolDeletion is what DeletePool did: whether there was a pool, how many
// piece leases it revoked, and what the pool held.
type PoolDeletion struct {
	Deleted       bool
	RevokedLeases uint32
	Files         uint32
	PiecesDone    uint64
}

// DeletePool removes a pool: its piece leases are revoked (reason "pool
// deleted"; their holders' completions then fail), its files, peers and
// rankings are dropped, and its pieces no longer count towards the
// namespace's max_pool_pieces. A pool of the same name can be created
// again. A pool that does not exist is no error: Deleted is false (so a
// retry is harmless, and is made on another endpoint when the outcome of
// a first attempt is unknown; Deleted then reports the retry's view).
// Needs the admin role of the namespace on a server with authentication.
func (c *Client) DeletePool(ctx context.Context, pool string, opts ...CallOption) (PoolDeletion, error) {
	cc := c.callConfig(opts)
	var out PoolDeletion
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.DeletePool(ctx, connect.NewRequest(&tenurev1.DeletePoolRequest{Pool: pool, Namespace: cc.namespace}))
		if err == nil {
			m := resp.Msg
			out = PoolDeletion{Deleted: m.GetDeleted(), RevokedLeases: m.GetRevokedLeases(), Files: m.GetFiles(), PiecesDone: m.GetPiecesDone()}
		}
		return err
	})
	return out, err
}

// PeerReset is what ResetPeer did: whether the pool knew the peer, and
// its ranking before and after (score 1.0, no outcomes, its current
// leases).
type PeerReset struct {
	Known           bool
	Before, Ranking PeerRanking
}

// ResetPeer gives a peer a fresh start in a pool's ranking: score 1.0, no
// successes or failures counted; its current piece leases stay. A peer
// whose score fell below the pool's minimum is refused every request
// (ErrPeerRankingTooLow), and only an outcome changes a score, so an
// operator who fixed the peer resets it. A peer the pool does not know is
// no error: Known is false (so a retry is harmless). Needs the admin role
// of the namespace on a server with authentication, and every member of
// the cluster on a build that knows it (ReasonUnimplemented otherwise);
// POOL_NOT_FOUND for an unknown pool.
func (c *Client) ResetPeer(ctx context.Context, pool, peer string, opts ...CallOption) (PeerReset, error) {
	cc := c.callConfig(opts)
	var out PeerReset
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.ResetPeer(ctx, connect.NewRequest(&tenurev1.ResetPeerRequest{Pool: pool, Namespace: cc.namespace, Peer: peer}))
		if err == nil {
			m := resp.Msg
			out = PeerReset{Known: m.GetKnown(), Before: rankingFrom(m.GetBefore()), Ranking: rankingFrom(m.GetRanking())}
		}
		return err
	})
	return out, err
}

// PoolStatus is a pool's configuration, files and peers.
type PoolStatus struct {
	Pool      string
	Namespace string
	Config    PoolConfig
	Files     []FileStatus
	// Peers with their current number of piece leases.
	Peers []PeerLeases
}

// PeerLeases is how many piece leases a peer holds.
type PeerLeases struct {
	Peer          string
	CurrentLeases uint32
}

// PoolStatus returns the pool's status: per file the pieces wanted, leased
// and done, per peer its current leases. An unknown pool is ErrPoolNotFound.
func (c *Client) PoolStatus(ctx context.Context, pool string, opts ...CallOption) (PoolStatus, error) {
	cc := c.callConfig(opts)
	var st PoolStatus
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.pool.Status(ctx, connect.NewRequest(&tenurev1.PoolStatusRequest{Pool: pool, Namespace: cc.namespace}))
		if err != nil {
			return err
		}
		m := resp.Msg
		st = PoolStatus{Pool: m.GetPool(), Namespace: m.GetNamespace(), Config: poolConfigFrom(m.GetConfig())}
		for _, f := range m.GetFiles() {
			st.Files = append(st.Files, fileStatusFrom(f))
		}
		for _, p := range m.GetPeers() {
			st.Peers = append(st.Peers, PeerLeases{Peer: p.GetPeer(), CurrentLeases: p.GetCurrentLeases()})
		}
		return nil
	})
	return st, err
}
