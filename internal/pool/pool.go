package pool

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// ReasonPoolNotFound answers a query or completion naming an unknown pool.
const ReasonPoolNotFound registrar.Reason = "POOL_NOT_FOUND"

// Pools is the piece-pool domain of the state machine. Not safe for
// concurrent use; the state machine serialises commands and queries.
type Pools struct {
	reg   *registrar.Registrar
	pools map[key]*pool
	// byLease finds the piece of a pool lease (by fence/seq).
	byLease map[uint64]*pieceLease
	// pieces counts each namespace's pieces, over its pools' files (for
	// its MaxPoolPieces quota).
	pieces map[string]uint64
	// scratch is working room reused by every request.
	scratch scratch
}

// scratch is a request's working room: its have-maps, and choose's answer
// and buffers. Not state: it only saves allocations.
type scratch struct {
	haves []haveIn
	out   []pieceKey
	per   [][]uint32
	buf   []uint32
}

type key struct{ ns, name string }

type pool struct {
	key
	cfg   Config
	files map[uint32]*file
	peers map[string]*peer
	held  map[pieceKey]*pieceLease
	// levels are the distinct availabilities of wanted pieces, ascending;
	// levelN counts wanted pieces per availability (all files).
	levels []uint32
	levelN map[uint32]int
	// idle orders the peers by their last activity (idle.go).
	idle peerList
}

// seenHave is the raw bytes of a peer's last have-map of a file and the
// recorded set they gave.
type seenHave struct {
	raw []byte
	set *roaring.Bitmap
}

type pieceKey struct{ file, piece uint32 }

type pieceLease struct {
	pool *pool
	seq  uint64
	peer *peer
	pieceKey
}

type file struct {
	index  uint32
	count  uint32
	wanted *roaring.Bitmap
	leased *roaring.Bitmap
	done   *roaring.Bitmap
	// avail[i] is how many peers' latest have-maps contain piece i.
	avail []uint32
	// byLevel holds the wanted pieces by availability.
	byLevel map[uint32]*roaring.Bitmap
}

type peer struct {
	name                string
	score               float64
	successes, failures uint64
	lastTick            int64
	current             uint32
	// have is nil while the peer has no have-map (forgotten peers are
	// the most of a long-lived pool's: an empty map keeps its buckets).
	have map[uint32]*roaring.Bitmap
	// seen caches, per file, the bytes of the peer's last have-map, so an
	// unchanged have-map is recognised without decoding it. Not
	// replicated: it only saves work, the answer is the same without it.
	// Nil when empty, as have.
	seen map[uint32]seenHave
	// seenTick is the peer's last activity: a have-map recorded, a lease
	// taken or ended (idle.go); prev and next link it in its pool's idle
	// list while listed.
	seenTick   int64
	prev, next *peer
	listed     bool
}

// New returns an empty pool domain hooked to reg's lease ends.
func New(reg *registrar.Registrar) *Pools {
	ps := &Pools{reg: reg, pools: map[key]*pool{}, byLease: map[uint64]*pieceLease{}, pieces: map[string]uint64{}}
	reg.OnLeaseEnd(ps.leaseEnded)
	return ps
}

func newPool(k key, cfg Config) *pool {
	return &pool{key: k, cfg: cfg, files: map[uint32]*file{}, peers: map[string]*peer{},
		held: map[pieceKey]*pieceLease{}, levelN: map[uint32]int{}}
}

func newFile(index, count uint32) *file {
	return &file{index: index, count: count, wanted: roaring.New(), leased: roaring.New(), done: roaring.New(),
		avail: make([]uint32, count), byLevel: map[uint32]*roaring.Bitmap{}}
}

func (p *pool) peer(name string, tick int64) *peer {
	pe := p.peers[name]
	if pe == nil {
		pe = &peer{name: name, score: StartScore, lastTick: tick, seenTick: tick}
		p.peers[name] = pe
		p.idle.pushBack(pe)
	}
	return pe
}

// Apply applies one sealed pool record.
func (ps *Pools) Apply(rec *logpb.Record) error {
	pr := rec.GetPool()
	if pr == nil {
		return fmt.Errorf("record %d: not a pool record", rec.Index)
	}
	k := key{pr.Namespace, pr.Pool}
	if c := pr.GetCreated(); c != nil {
		if ps.pools[k] != nil {
			return fmt.Errorf("record %d: pool %s/%s created twice", rec.Index, k.ns, k.name)
		}
		ps.pools[k] = newPool(k, configFromProto(c.Config))
		return nil
	}
	p := ps.pools[k]
	if p == nil {
		return fmt.Errorf("record %d: unknown pool %s/%s", rec.Index, k.ns, k.name)
	}
	switch ev := pr.Event.(type) {
	case *logpb.PoolRecord_Wanted:
		w := ev.Wanted
		f := p.files[w.FileIndex]
		if f == nil {
			if w.PieceCount == 0 || w.PieceCount > MaxPiecesPerFile {
				return fmt.Errorf("record %d: file %d with %d pieces", rec.Index, w.FileIndex, w.PieceCount)
			}
			f = newFile(w.FileIndex, w.PieceCount)
			p.files[w.FileIndex] = f
			ps.pieces[k.ns] += uint64(f.count)
		}
		set, err := decodeSet(w.Pieces, f.count)
		if err != nil {
			return fmt.Errorf("record %d: %w", rec.Index, err)
		}
		set.AndNot(f.leased)
		set.AndNot(f.done)
		set.AndNot(f.wanted)
		p.addWantedSet(f, set)
	case *logpb.PoolRecord_Have:
		h := ev.Have
		f := p.files[h.FileIndex]
		if f == nil {
			return fmt.Errorf("record %d: have-map of unknown file %d", rec.Index, h.FileIndex)
		}
		nw, err := decodeSet(h.Pieces, f.count)
		if err != nil {
			return fmt.Errorf("record %d: %w", rec.Index, err)
		}
		if h.Idle && !nw.IsEmpty() {
			return fmt.Errorf("record %d: a forgotten have-map with pieces", rec.Index)
		}
		pe := p.peer(h.Peer, rec.Tick)
		if !h.Idle {
			p.touch(pe, rec.Tick)
		}
		p.replaceHave(f, pe, nw)
	case *logpb.PoolRecord_Leased:
		l := ev.Leased
		f := p.files[l.FileIndex]
		if f == nil || l.PieceIndex >= f.count {
			return fmt.Errorf("record %d: lease of unknown piece %d/%d", rec.Index, l.FileIndex, l.PieceIndex)
		}
		pk := pieceKey{l.FileIndex, l.PieceIndex}
		if p.held[pk] != nil || ps.byLease[l.LeaseSeq] != nil || f.done.Contains(l.PieceIndex) {
			return fmt.Errorf("record %d: piece %d/%d leased twice", rec.Index, l.FileIndex, l.PieceIndex)
		}
		pe := p.peer(l.Peer, rec.Tick)
		p.touch(pe, rec.Tick)
		ps.addLease(p, &pieceLease{pool: p, seq: l.LeaseSeq, peer: pe, pieceKey: pk})
	case *logpb.PoolRecord_Done:
		d := ev.Done
		pl := ps.byLease[d.LeaseSeq]
		if pl == nil || pl.pool != p || pl.file != d.FileIndex || pl.piece != d.PieceIndex {
			return fmt.Errorf("record %d: piece %d/%d is not leased under %d", rec.Index, d.FileIndex, d.PieceIndex, d.LeaseSeq)
		}
		ps.dropLease(pl)
		p.touch(pl.peer, rec.Tick)
		f := p.files[pl.file]
		if d.Result == tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS {
			f.done.Add(pl.piece)
		} else {
			p.addWanted(f, pl.piece)
		}
		if d.Ranked {
			pe := pl.peer
			pe.score, pe.successes, pe.failures, pe.lastTick = d.Score, d.Successes, d.Failures, rec.Tick
		}
	case *logpb.PoolRecord_PeerReset:
		pe := p.peers[ev.PeerReset.Peer]
		if pe == nil {
			return fmt.Errorf("record %d: reset of unknown peer %q", rec.Index, ev.PeerReset.Peer)
		}
		pe.score, pe.successes, pe.failures, pe.lastTick = StartScore, 0, 0, rec.Tick
	case *logpb.PoolRecord_Deleted:
		if len(p.held) != 0 {
			return fmt.Errorf("record %d: pool %s/%s deleted with %d pieces leased", rec.Index, k.ns, k.name, len(p.held))
		}
		for _, f := range p.files {
			ps.pieces[k.ns] -= uint64(f.count)
		}
		if ps.pieces[k.ns] == 0 {
			delete(ps.pieces, k.ns)
		}
		delete(ps.pools, k)
	default:
		return fmt.Errorf("record %d: unknown pool event %T", rec.Index, pr.Event)
	}
	return nil
}

func (ps *Pools) addLease(p *pool, pl *pieceLease) {
	f := p.files[pl.file]
	p.removeWanted(f, pl.piece)
	f.leased.Add(pl.piece)
	p.held[pl.pieceKey] = pl
	ps.byLease[pl.seq] = pl
	pl.peer.current++
}

func (ps *Pools) dropLease(pl *pieceLease) {
	p := pl.pool
	p.files[pl.file].leased.Remove(pl.piece)
	delete(p.held, pl.pieceKey)
	delete(ps.byLease, pl.seq)
	pl.peer.current--
}

func (p *pool) sortedFiles() []*file {
	out := make([]*file, 0, len(p.files))
	for _, f := range p.files {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *file) int { return cmp.Compare(a.index, b.index) })
	return out
}

func (p *pool) sortedPeers() []*peer {
	out := make([]*peer, 0, len(p.peers))
	for _, pe := range p.peers {
		out = append(out, pe)
	}
	slices.SortFunc(out, func(a, b *peer) int { return cmp.Compare(a.name, b.name) })
	return out
}

func (ps *Pools) sortedPools() []*pool {
	out := make([]*pool, 0, len(ps.pools))
	for _, p := range ps.pools {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *pool) int {
		if c := cmp.Compare(a.ns, b.ns); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	return out
}

// LeasePiece names the piece a pool lease with sequence (fence) seq is
// on, if there is one.
func (ps *Pools) LeasePiece(seq uint64) (pool string, file, piece uint32, ok bool) {
	pl := ps.byLease[seq]
	if pl == nil {
		return "", 0, 0, false
	}
	return pl.pool.key.name, pl.file, pl.piece, true
}

// ResourcePrefix starts the resource of every piece lease.
const ResourcePrefix = "pool/"

// Resource is the registrar resource of a piece lease:
// pool/<pool>/<file>/<piece>. The last two parts are numbers, so no two
// pieces share one, whatever the pool names hold.
func Resource(pool string, file, piece uint32) string {
	b := make([]byte, 0, len(ResourcePrefix)+len(pool)+22)
	b = append(append(b, ResourcePrefix...), pool...)
	b = strconv.AppendUint(append(b, '/'), uint64(file), 10)
	b = strconv.AppendUint(append(b, '/'), uint64(piece), 10)
	return string(b)
}
