package pool

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Grant is one piece leased to a peer.
type Grant struct {
	File, Piece uint32
	LeaseID     string
	Fence       uint64
	ExpiresAt   time.Time
	ExpiresTick registrar.Tick
}

// Ranking is a peer's standing in a pool.
type Ranking struct {
	Peer                string
	Score               float64
	Successes, Failures uint64
	CurrentLeases       uint32
}

// FileStatus counts a file's pieces by set.
type FileStatus struct {
	Index, Pieces        uint32
	Wanted, Leased, Done uint64
}

// Outcome is what a pool command answers. Err is set on an error (and the
// command changed nothing); a RequestLeases rejection is Rejected, not Err.
type Outcome struct {
	Err error
	// CreatePool.
	Created bool
	Config  Config
	// Want: the pieces that became wanted, and those named that were
	// done already (they stay done).
	Added, AlreadyDone uint64
	File               FileStatus
	// RequestLeases.
	Leases   []Grant
	Rejected tenurev1.RejectedReason
	Message  string
	// CompletePiece.
	Ranking Ranking
	// ResetPeer: whether the pool knew the peer, and its ranking before
	// (Ranking is the one after).
	Known  bool
	Before Ranking
	// DeletePool: whether there was a pool, the piece leases revoked, and
	// what the pool held.
	Deleted    bool
	Revoked    uint32
	Files      uint32
	PiecesDone uint64
}

func fail(err error) Outcome { return Outcome{Err: err} }

func reject(r tenurev1.RejectedReason, msg string) Outcome {
	return Outcome{Rejected: r, Message: r.String() + ": " + msg}
}

// ValidateCommand checks a command's identifiers without looking at state.
func ValidateCommand(c *logpb.PoolCommand) error {
	if err := registrar.CheckIdentifier("namespace", c.Namespace, false); err != nil {
		return err
	}
	if err := registrar.CheckIdentifier("pool", c.Pool, true); err != nil {
		return err
	}
	switch op := c.Op.(type) {
	case *logpb.PoolCommand_Request:
		return registrar.CheckIdentifier("peer", op.Request.GetPeer(), true)
	case *logpb.PoolCommand_Complete:
		return registrar.CheckIdentifier("peer", op.Complete.GetPeer(), true)
	case *logpb.PoolCommand_ResetPeer:
		return registrar.CheckIdentifier("peer", op.ResetPeer.GetPeer(), true)
	case nil:
		return invalid("op", "pool command has no operation")
	}
	return nil
}

// Do applies one pool command.
func (ps *Pools) Do(tx *registrar.Tx, c *logpb.PoolCommand) Outcome {
	if err := ValidateCommand(c); err != nil {
		return fail(err)
	}
	k := key{registrar.OrDefault(c.Namespace), c.Pool}
	switch op := c.Op.(type) {
	case *logpb.PoolCommand_Create:
		return ps.create(tx, k, op.Create)
	case *logpb.PoolCommand_Want:
		return ps.want(tx, k, op.Want)
	case *logpb.PoolCommand_Request:
		return ps.request(tx, k, op.Request)
	case *logpb.PoolCommand_Complete:
		return ps.complete(tx, k, op.Complete)
	case *logpb.PoolCommand_Delete:
		return ps.deletePool(tx, k)
	case *logpb.PoolCommand_ResetPeer:
		return ps.resetPeer(tx, k, op.ResetPeer)
	}
	return fail(invalid("op", "unknown pool operation %T", c.Op))
}

func (ps *Pools) emit(tx *registrar.Tx, k key, pr *logpb.PoolRecord) {
	ps.emitIn(tx, k, &logpb.Record{}, &logpb.Record_Pool{}, pr)
}

// emitIn is emit with the record and its body's oneof wrapper supplied
// by the caller (see leasedRecord).
func (ps *Pools) emitIn(tx *registrar.Tx, k key, rec *logpb.Record, body *logpb.Record_Pool, pr *logpb.PoolRecord) {
	pr.Namespace, pr.Pool = k.ns, k.name
	body.Pool = pr
	rec.Body = body
	tx.Emit(rec)
}

// leasedRecord allocates the record of a piece leased in one piece: the
// record, its oneof wrappers, the pool record and the event share one
// struct, which saves four allocations per granted piece. The messages
// are the same (fields, encoding, hashes); only their memory is shared,
// and they live as long as the record does anyway.
type leasedRecord struct {
	rec   logpb.Record
	body  logpb.Record_Pool
	pr    logpb.PoolRecord
	event logpb.PoolRecord_Leased
	msg   logpb.PieceLeased
}

func (ps *Pools) create(tx *registrar.Tx, k key, c *logpb.PoolCreate) Outcome {
	cfg, err := ConfigFromAPI(c.GetConfig())
	if err != nil {
		return fail(err)
	}
	if c.GetConfig().GetLeaseDuration() != nil {
		// A duration asked for must be one the namespace allows; the
		// default is brought within its bounds when a piece is leased.
		if _, err := ps.reg.TTLFor(k.ns, "config.lease_duration", &cfg.LeaseMs); err != nil {
			return fail(err)
		}
	}
	if p := ps.pools[k]; p != nil {
		if p.cfg != cfg {
			return fail(invalid("config", "pool %s already exists with another configuration (%s; a Want of a pool that does not exist creates it with the defaults)",
				k.name, p.cfg.diff(cfg)))
		}
		return Outcome{Config: cfg}
	}
	ps.emit(tx, k, &logpb.PoolRecord{Event: &logpb.PoolRecord_Created{Created: &logpb.PoolCreated{Config: cfg.proto()}}})
	return Outcome{Created: true, Config: cfg, Err: tx.Err()}
}

func (ps *Pools) want(tx *registrar.Tx, k key, w *logpb.PoolWant) Outcome {
	if w.FileIndex > MaxFileIndex {
		return fail(invalid("file_index", "must be at most %d, got %d", MaxFileIndex, w.FileIndex))
	}
	if w.PieceCount > MaxPiecesPerFile {
		return fail(invalid("piece_count", "must be at most %d, got %d", MaxPiecesPerFile, w.PieceCount))
	}
	if len(w.Ranges) > MaxRanges {
		return fail(invalid("ranges", "at most %d ranges, got %d", MaxRanges, len(w.Ranges)))
	}
	p := ps.pools[k]
	var f *file
	if p != nil {
		f = p.files[w.FileIndex]
	}
	count := w.PieceCount
	switch {
	case f == nil && count == 0:
		return fail(invalid("piece_count", "is required the first time file %d is named", w.FileIndex))
	case f != nil && count != 0 && count != f.count:
		return fail(invalid("piece_count", "file %d has %d pieces, not %d", w.FileIndex, f.count, count))
	case f != nil:
		count = f.count
	case f == nil:
		// A new file: its pieces count against the namespace's quota.
		if pol := ps.reg.Policy(k.ns); ps.pieces[k.ns]+uint64(count) > pol.MaxPoolPieces {
			return fail(registrar.Quota("max_pool_pieces", pol.MaxPoolPieces, map[string]string{"namespace": k.ns, "pool": k.name},
				"namespace %s's pools hold %d pieces; file %d's %d would take them past the limit of %d (max_pool_pieces)",
				k.ns, ps.pieces[k.ns], w.FileIndex, count, pol.MaxPoolPieces))
		}
	}
	if err := checkBits(w.Bits, count); err != nil {
		return fail(invalid("bits", "%v", err))
	}
	set := fromBits(w.Bits)
	for i, r := range w.Ranges {
		switch {
		case r.Start >= r.End:
			return fail(invalid("ranges", "range %d [%d, %d) is empty (end is exclusive)", i, r.Start, r.End))
		case r.End > count:
			return fail(invalid("ranges", "range %d reaches piece %d, but file %d has %d pieces (0 to %d)", i, r.End-1, w.FileIndex, count, count-1))
		}
		set.AddRange(uint64(r.Start), uint64(r.End))
	}
	added := set.Clone()
	var done uint64
	if f != nil {
		added.AndNot(f.wanted)
		added.AndNot(f.leased)
		added.AndNot(f.done)
		done = set.AndCardinality(f.done)
	}
	n := added.GetCardinality()
	if p != nil {
		ps.forgetIdle(tx, p, "")
	}
	if p == nil {
		ps.emit(tx, k, &logpb.PoolRecord{Event: &logpb.PoolRecord_Created{Created: &logpb.PoolCreated{Config: DefaultConfig().proto()}}})
	}
	if f == nil || n > 0 {
		ps.emit(tx, k, &logpb.PoolRecord{Event: &logpb.PoolRecord_Wanted{Wanted: &logpb.PoolWanted{
			FileIndex: w.FileIndex, PieceCount: count, Pieces: encodeSet(added),
		}}})
	}
	if err := tx.Err(); err != nil {
		return fail(err)
	}
	p = ps.pools[k]
	return Outcome{Added: n, AlreadyDone: done, File: p.files[w.FileIndex].status(), Config: p.cfg}
}

func (f *file) status() FileStatus {
	return FileStatus{Index: f.index, Pieces: f.count, Wanted: f.wanted.GetCardinality(),
		Leased: f.leased.GetCardinality(), Done: f.done.GetCardinality()}
}

// haveIn is one have-map of a request.
type haveIn struct {
	f   *file
	raw []byte          // the request's bits
	bm  *roaring.Bitmap // the recorded have-map
	// empty is bm.IsEmpty(), known when the request looks at bm (a
	// choose then need not read it again: a likely cache miss each).
	empty bool
	// tested counts the members a choose tested bit by bit; idle marks a
	// have-map found to share no piece with wanted.
	tested int
	idle   bool
	it     roaring.IntIterator // reused: a local one would escape
}

// emptySet stands for a missing have-map; never modified.
var emptySet = roaring.New()

func (pe *peer) haveOf(file uint32) *roaring.Bitmap {
	if pe == nil || pe.have[file] == nil {
		return emptySet
	}
	return pe.have[file]
}

func (h *haveIn) has(x uint32) bool {
	i := x / 8
	return int(i) < len(h.raw) && h.raw[i]>>(x%8)&1 != 0
}

func sameSet(a, b *roaring.Bitmap) bool {
	if a == nil {
		return b.IsEmpty()
	}
	n := a.GetCardinality()
	return n == b.GetCardinality() && a.AndCardinality(b) == n
}

func (ps *Pools) request(tx *registrar.Tx, k key, r *logpb.PoolRequest) Outcome {
	p := ps.pools[k]
	if p == nil {
		return reject(tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST, "no pool "+k.name+" in namespace "+k.ns)
	}
	if r.Max == 0 {
		return reject(tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST, "max must be positive")
	}
	if len(r.Have) > MaxHaveMaps {
		return reject(tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST, "too many have-maps")
	}
	haves := slices.Grow(ps.scratch.haves[:0], len(r.Have))
	defer func() {
		// Keep the room, not the request's bytes and sets.
		clear(haves[:cap(haves)])
		ps.scratch.haves = haves[:0]
	}()
	for _, h := range r.Have {
		f := p.files[h.FileIndex]
		if f == nil {
			return reject(tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST,
				"pool "+k.name+" has no file "+strconv.FormatUint(uint64(h.FileIndex), 10))
		}
		if err := checkBits(h.Bits, f.count); err != nil {
			return reject(tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST,
				"have-map of file "+strconv.FormatUint(uint64(h.FileIndex), 10)+" "+err.Error())
		}
		haves = append(haves, haveIn{f: f, raw: h.Bits})
	}
	slices.SortFunc(haves, func(a, b haveIn) int { return int(a.f.index) - int(b.f.index) })
	for i := 1; i < len(haves); i++ {
		if haves[i].f == haves[i-1].f {
			return reject(tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST,
				"file "+strconv.FormatUint(uint64(haves[i].f.index), 10)+" has two have-maps")
		}
	}
	ps.forgetIdle(tx, p, r.Peer)
	// The pool has seen these have-maps, whatever the answer. The set
	// operations below use the recorded (compact) have-map.
	pe := p.peers[r.Peer]
	for i := range haves {
		h := &haves[i]
		var old *roaring.Bitmap
		if pe != nil {
			// A seen entry is the peer's current recorded have-map of the
			// file, never empty: replaceHave drops it when the set changes.
			if c, ok := pe.seen[h.f.index]; ok && bytes.Equal(c.raw, h.raw) {
				h.bm = c.set
				continue
			}
			old = pe.have[h.f.index]
		}
		bm := fromBits(h.raw)
		if !sameSet(old, bm) {
			ps.emit(tx, k, &logpb.PoolRecord{Event: &logpb.PoolRecord_Have{Have: &logpb.PeerHave{
				Peer: r.Peer, FileIndex: h.f.index, Pieces: encodeSet(bm),
			}}})
			if err := tx.Err(); err != nil {
				return fail(err)
			}
			pe = p.peers[r.Peer]
		}
		h.bm = pe.haveOf(h.f.index)
		h.empty = h.bm.IsEmpty()
		if h.bm != emptySet {
			if pe.seen == nil {
				pe.seen = map[uint32]seenHave{}
			}
			pe.seen[h.f.index] = seenHave{raw: bytes.Clone(h.raw), set: h.bm}
		}
	}
	score, current := StartScore, uint32(0)
	if pe != nil {
		score, current = pe.score, pe.current
	}
	if score < p.cfg.MinScore {
		return reject(tenurev1.RejectedReason_REJECTED_REASON_PEER_RANKING_TOO_LOW,
			"peer "+r.Peer+" scores "+strconv.FormatFloat(score, 'g', -1, 64)+", below the minimum "+strconv.FormatFloat(p.cfg.MinScore, 'g', -1, 64))
	}
	if current >= p.cfg.MaxLeasesPerPeer {
		return reject(tenurev1.RejectedReason_REJECTED_REASON_PEER_AT_CAPACITY,
			"peer "+r.Peer+" holds "+strconv.FormatUint(uint64(current), 10)+" leases; the limit is "+strconv.FormatUint(uint64(p.cfg.MaxLeasesPerPeer), 10))
	}
	need := int(min(r.Max, p.cfg.MaxLeasesPerPeer-current))
	pol := ps.reg.Policy(k.ns)
	// The namespace's ttl bounds hold for piece leases too: a pool made
	// before a policy narrowed them (or with the default duration) leases
	// within them.
	ttl := min(max(p.cfg.LeaseMs, pol.MinTTL), pol.MaxTTL)
	out := Outcome{Leases: make([]Grant, 0, min(need, 64))}
	var skip map[pieceKey]bool
	for len(out.Leases) < need {
		chosen := p.choose(&ps.scratch, haves, need-len(out.Leases), skip)
		if len(chosen) == 0 {
			break
		}
		for _, pk := range chosen {
			l, err := ps.reg.IssueFor(tx, registrar.Grant{
				Namespace: k.ns, Resource: Resource(k.name, pk.file, pk.piece), Holder: r.Peer,
				TTL: ttl, MaxRenewals: pol.MaxRenewals, MaxLifetime: pol.MaxLifetime,
			})
			if err != nil && registrar.ReasonOf(err) == registrar.ReasonLeaseHeld {
				// Held outside the pool: skip this piece.
				if skip == nil {
					skip = map[pieceKey]bool{}
				}
				skip[pk] = true
				continue
			}
			if err != nil {
				if len(out.Leases) == 0 {
					return fail(err)
				}
				// Say why fewer were granted than asked (a quota).
				out.Message = "granted " + strconv.Itoa(len(out.Leases)) + " of " + strconv.Itoa(need) + ": " + err.Error()
				return out
			}
			x := &leasedRecord{msg: logpb.PieceLeased{
				Peer: r.Peer, FileIndex: pk.file, PieceIndex: pk.piece, LeaseSeq: l.Fence, LeaseId: l.ID,
			}}
			x.event.Leased = &x.msg
			x.pr.Event = &x.event
			ps.emitIn(tx, k, &x.rec, &x.body, &x.pr)
			if err := tx.Err(); err != nil {
				return fail(err)
			}
			out.Leases = append(out.Leases, Grant{File: pk.file, Piece: pk.piece, LeaseID: l.ID, Fence: l.Fence,
				ExpiresAt: l.ExpiresAt, ExpiresTick: l.ExpiresTick})
		}
	}
	if len(out.Leases) == 0 {
		return reject(tenurev1.RejectedReason_REJECTED_REASON_NO_AVAILABLE_PIECES,
			"none of the pieces peer "+r.Peer+" has are wanted and free")
	}
	return out
}

// scanLimit bounds how many bucket members one choose tests bit by bit
// against a have-map; after that it intersects bitmaps instead.
const scanLimit = 1024

// choose picks up to need wanted pieces from the have-maps: lowest
// availability first; within one availability, round robin across files
// (ascending index), lowest piece first.
// The answer and the working room are s's (reused): the answer is valid
// until the next choose.
func (p *pool) choose(s *scratch, haves []haveIn, need int, skip map[pieceKey]bool) []pieceKey {
	for i := range haves {
		h := &haves[i]
		h.tested, h.idle = 0, h.empty || h.f.wanted.IsEmpty()
	}
	out := slices.Grow(s.out[:0], need)
	// per[i] collects have-map i's pieces of one level (at most need; the
	// shared backing array covers small needs, larger ones grow).
	per := slices.Grow(s.per[:0], len(haves))[:len(haves)]
	c := min(need, 16)
	buf := slices.Grow(s.buf[:0], c*len(haves))[:c*len(haves)]
	for i := range per {
		per[i] = buf[i*c : i*c : (i+1)*c]
	}
	defer func() {
		s.out, s.per, s.buf = out[:0], per[:0], buf[:0]
	}()
	for _, lv := range p.levels {
		found := false
		for i := range haves {
			h := &haves[i]
			per[i] = per[i][:0]
			if b := h.f.byLevel[lv]; b != nil && !h.idle {
				per[i] = h.collect(per[i], b, need, skip)
				found = found || len(per[i]) > 0
			}
		}
		if !found {
			continue
		}
		for round := 0; len(out) < need; round++ {
			took := false
			for i := range haves {
				if round < len(per[i]) {
					out = append(out, pieceKey{haves[i].f.index, per[i][round]})
					took = true
					if len(out) == need {
						break
					}
				}
			}
			if !took {
				break
			}
		}
		if len(out) == need {
			break
		}
	}
	return out
}

// collect appends to dst, ascending, up to need members of bucket b that
// the peer has and that are not skipped. Members are tested against the
// request's bits (cheap for the small buckets of rare pieces) until this
// choose has tested scanLimit of them for this have-map; then, unless the
// have-map shares no piece with wanted at all (the have-map is idle for
// the rest of the choose), the bitmaps are intersected.
func (h *haveIn) collect(dst []uint32, b *roaring.Bitmap, need int, skip map[pieceKey]bool) []uint32 {
	if h.tested < scanLimit {
		it := &h.it
		for it.Initialize(b); it.HasNext() && len(dst) < need; {
			if h.tested++; h.tested > scanLimit {
				break
			}
			if x := it.Next(); h.has(x) && !skip[pieceKey{h.f.index, x}] {
				dst = append(dst, x)
			}
		}
		if h.tested <= scanLimit {
			return dst
		}
		if !h.f.wanted.Intersects(h.bm) {
			h.idle = true
			return dst
		}
	}
	if !b.Intersects(h.bm) {
		return dst
	}
	for it := roaring.And(b, h.bm).Iterator(); it.HasNext() && len(dst) < need; {
		if x := it.Next(); !slices.Contains(dst, x) && !skip[pieceKey{h.f.index, x}] {
			dst = append(dst, x)
		}
	}
	return dst
}

func (ps *Pools) complete(tx *registrar.Tx, k key, c *logpb.PoolComplete) Outcome {
	p := ps.pools[k]
	if p == nil {
		return fail(notFound(k))
	}
	f := p.files[c.FileIndex]
	if f == nil {
		return fail(invalid("file_index", "pool %s has no file %d", k.name, c.FileIndex))
	}
	if c.PieceIndex >= f.count {
		return fail(invalid("piece_index", "pool %s has no piece %d of file %d (it has %d pieces)", k.name, c.PieceIndex, c.FileIndex, f.count))
	}
	success := false
	switch c.Result {
	case tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS:
		success = true
		if c.FailureReason != tenurev1.FailureReason_FAILURE_REASON_UNSPECIFIED {
			return fail(invalid("failure_reason", "only a failure has a reason"))
		}
	case tenurev1.CompletionResult_COMPLETION_RESULT_FAILURE:
		switch c.FailureReason {
		case tenurev1.FailureReason_FAILURE_REASON_VERIFICATION_FAILED, tenurev1.FailureReason_FAILURE_REASON_NETWORK_ERROR,
			tenurev1.FailureReason_FAILURE_REASON_TIMEOUT, tenurev1.FailureReason_FAILURE_REASON_INVALID_DATA:
		case tenurev1.FailureReason_FAILURE_REASON_UNSPECIFIED:
			return fail(invalid("failure_reason", "a failure needs a reason (FAILURE_REASON_VERIFICATION_FAILED, _NETWORK_ERROR, _TIMEOUT or _INVALID_DATA)"))
		default:
			return fail(invalid("failure_reason", "unknown reason %d; it must be FAILURE_REASON_VERIFICATION_FAILED, _NETWORK_ERROR, _TIMEOUT or _INVALID_DATA", c.FailureReason))
		}
	default:
		return fail(invalid("result", "must be COMPLETION_RESULT_SUCCESS or COMPLETION_RESULT_FAILURE, got %d", c.Result))
	}
	pk := pieceKey{c.FileIndex, c.PieceIndex}
	pl := p.held[pk]
	if pl != nil && pl.peer.name == c.Peer && c.LeaseId != "" {
		// A report on an earlier lease of the piece (one that expired, the
		// piece granted to the same peer again since) must not end the
		// current one.
		if cur := ps.reg.IDOfSeq(pl.seq); cur != c.LeaseId {
			return fail(registrar.NewError(registrar.ReasonPieceNotLeased, map[string]string{
				"pool": k.name, "file_index": strconv.FormatUint(uint64(c.FileIndex), 10),
				"piece_index": strconv.FormatUint(uint64(c.PieceIndex), 10), "peer": c.Peer, "piece_state": "leased",
				"holder": c.Peer, "lease_id": c.LeaseId, "current_lease_id": cur,
			}, "lease %s is not the current lease of piece %d of file %d: peer %s holds it under lease %s",
				c.LeaseId, c.PieceIndex, c.FileIndex, c.Peer, cur))
		}
	}
	if pl == nil || pl.peer.name != c.Peer {
		// piece_state lets a peer retrying after OUTCOME_UNKNOWN tell its
		// own applied completion: a success it retries finds the piece
		// done (no one else can complete a piece leased to it).
		state := "wanted"
		switch {
		case pl != nil:
			state = "leased"
		case f.done.Contains(c.PieceIndex):
			state = "done"
		case !f.wanted.Contains(c.PieceIndex):
			state = "not_wanted"
		}
		meta := map[string]string{"pool": k.name, "file_index": strconv.FormatUint(uint64(c.FileIndex), 10),
			"piece_index": strconv.FormatUint(uint64(c.PieceIndex), 10), "peer": c.Peer, "piece_state": state}
		if c.LeaseId != "" {
			meta["lease_id"] = c.LeaseId
		}
		if pl != nil {
			meta["holder"] = pl.peer.name
			return fail(registrar.NewError(registrar.ReasonPieceNotLeased, meta,
				"piece %d of file %d is leased to peer %s, not to %s", c.PieceIndex, c.FileIndex, pl.peer.name, c.Peer))
		}
		return fail(registrar.NewError(registrar.ReasonPieceNotLeased, meta, "piece %d of file %d is not leased to %s", c.PieceIndex, c.FileIndex, c.Peer))
	}
	ps.forgetIdle(tx, p, c.Peer)
	ps.done(tx, pl, success, c.FailureReason, 0, true)
	reason := tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED
	if !success {
		reason = tenurev1.ReleaseReason_RELEASE_REASON_ABORTED
	}
	if _, err := ps.reg.EndFor(tx, pl.seq, reason); err != nil {
		return fail(err)
	}
	if err := tx.Err(); err != nil {
		return fail(err)
	}
	return Outcome{Ranking: pl.peer.ranking()}
}

// RevokeReasonDeleted is the revoke reason of the piece leases a pool's
// deletion ends.
const RevokeReasonDeleted = "pool deleted"

// deletePool revokes the pool's piece leases, oldest first (each end
// returns its piece through leaseEnded, unranked, as an admin's
// revocation does), then drops the pool. No pool: nothing changes.
func (ps *Pools) deletePool(tx *registrar.Tx, k key) Outcome {
	p := ps.pools[k]
	if p == nil {
		return Outcome{}
	}
	out := Outcome{Deleted: true, Files: uint32(len(p.files))}
	for _, f := range p.files {
		out.PiecesDone += f.done.GetCardinality()
	}
	held := slices.SortedFunc(maps.Values(p.held), func(a, b *pieceLease) int { return cmp.Compare(a.seq, b.seq) })
	for _, pl := range held {
		if _, err := ps.reg.RevokeFor(tx, pl.seq, RevokeReasonDeleted); err != nil {
			return fail(err)
		}
		out.Revoked++
	}
	ps.emit(tx, k, &logpb.PoolRecord{Event: &logpb.PoolRecord_Deleted{Deleted: &logpb.PoolDeleted{}}})
	if err := tx.Err(); err != nil {
		return fail(err)
	}
	return out
}

// ResetRules is the first rules (statemachine.Rules) under which a
// ResetPeer command applies: a build before them does not know the
// command, and refuses it without a record, as resetPeer does for a
// command stamped with earlier rules.
const ResetRules = 5

// resetPeer gives a known peer a fresh start in the pool's ranking. An
// unknown peer changes nothing.
func (ps *Pools) resetPeer(tx *registrar.Tx, k key, r *logpb.PoolResetPeer) Outcome {
	if tx.Rules < ResetRules {
		return fail(registrar.NewError(registrar.ReasonUnimplemented, map[string]string{"rules": strconv.FormatUint(uint64(tx.Rules), 10)},
			"the cluster applies rules %d: a member runs a build that cannot reset a peer; upgrade every member first", tx.Rules))
	}
	p := ps.pools[k]
	if p == nil {
		return fail(notFound(k))
	}
	pe := p.peers[r.Peer]
	if pe == nil {
		return Outcome{Ranking: Ranking{Peer: r.Peer, Score: StartScore}}
	}
	out := Outcome{Known: true, Before: pe.ranking()}
	ps.emit(tx, k, &logpb.PoolRecord{Event: &logpb.PoolRecord_PeerReset{PeerReset: &logpb.PeerReset{Peer: r.Peer}}})
	if err := tx.Err(); err != nil {
		return fail(err)
	}
	out.Ranking = pe.ranking()
	return out
}

// done emits the record that ends a piece lease, ranking the outcome.
func (ps *Pools) done(tx *registrar.Tx, pl *pieceLease, success bool, fr tenurev1.FailureReason, st registrar.State, ranked bool) {
	d := &logpb.PieceDone{Peer: pl.peer.name, FileIndex: pl.file, PieceIndex: pl.piece, LeaseSeq: pl.seq,
		FailureReason: fr, Ranked: ranked}
	if st != 0 {
		d.LeaseState = tenurev1.State(st)
	} else if success {
		d.Result = tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS
	} else {
		d.Result = tenurev1.CompletionResult_COMPLETION_RESULT_FAILURE
	}
	if ranked {
		pe := pl.peer
		d.Successes, d.Failures = pe.successes, pe.failures
		if success {
			d.Successes++
		} else {
			d.Failures++
		}
		d.Score = NextScore(pl.pool.cfg, pe.score, int64(tx.Tick)-pe.lastTick, d.Successes, d.Failures)
	}
	ps.emit(tx, pl.pool.key, &logpb.PoolRecord{Event: &logpb.PoolRecord_Done{Done: d}})
}

// leaseEnded returns the piece of a pool lease that ended outside a
// completion (OnLeaseEnd hook). An expiry counts as a failure of the
// peer, and so does a release by the peer (LeaseService.Release): it
// gave the piece up undelivered, and must not escape the penalty a
// reported failure carries. A revocation is the admin's doing and is not
// ranked.
func (ps *Pools) leaseEnded(tx *registrar.Tx, l registrar.Lease) {
	pl := ps.byLease[l.Fence]
	if pl == nil {
		return
	}
	ranked := l.State == registrar.Expired || l.State == registrar.Released
	ps.done(tx, pl, false, tenurev1.FailureReason_FAILURE_REASON_UNSPECIFIED, l.State, ranked)
}

func (pe *peer) ranking() Ranking {
	return Ranking{Peer: pe.name, Score: pe.score, Successes: pe.successes, Failures: pe.failures, CurrentLeases: pe.current}
}

func notFound(k key) error {
	return registrar.NewError(ReasonPoolNotFound, map[string]string{"pool": k.name, "namespace": k.ns},
		"no pool %s in namespace %s", k.name, k.ns)
}
