package pool

import (
	"fmt"
	"slices"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// SnapshotInto copies every pool into s: pools by (namespace, name),
// files by index, peers by name, bit sets canonical (encodeSet), leases
// in no particular order (statemachine.EncodeSnapshot sorts them by
// fence). Availability and the leased sets are derived.
func (ps *Pools) SnapshotInto(s *logpb.Snapshot) {
	s.Pools = nil
	for _, p := range ps.sortedPools() {
		sp := &logpb.PoolSnap{Namespace: p.ns, Pool: p.name, Config: p.cfg.proto()}
		for _, f := range p.sortedFiles() {
			sp.Files = append(sp.Files, &logpb.PoolFileSnap{FileIndex: f.index, PieceCount: f.count,
				Wanted: encodeSet(f.wanted), Done: encodeSet(f.done)})
		}
		for _, pe := range p.sortedPeers() {
			snap := &logpb.PoolPeerSnap{Peer: pe.name, Score: pe.score, Successes: pe.successes,
				Failures: pe.failures, LastTick: pe.lastTick, SeenTick: pe.seenTick}
			idx := make([]uint32, 0, len(pe.have))
			for i := range pe.have {
				idx = append(idx, i)
			}
			slices.Sort(idx)
			for _, i := range idx {
				snap.Have = append(snap.Have, &logpb.PoolPeerHaveSnap{FileIndex: i, Pieces: encodeSet(pe.have[i])})
			}
			sp.Peers = append(sp.Peers, snap)
		}
		for _, pl := range p.held {
			sp.Leases = append(sp.Leases, &logpb.PoolLeaseSnap{LeaseSeq: pl.seq, Peer: pl.peer.name, FileIndex: pl.file, PieceIndex: pl.piece})
		}
		s.Pools = append(s.Pools, sp)
	}
}

// Restore rebuilds the pool domain from a snapshot, hooked to reg.
func Restore(s *logpb.Snapshot, reg *registrar.Registrar) (*Pools, error) {
	ps := New(reg)
	for _, sp := range s.Pools {
		k := key{sp.Namespace, sp.Pool}
		if ps.pools[k] != nil || sp.Config == nil {
			return nil, fmt.Errorf("snapshot: pool %s/%s listed twice or without config", k.ns, k.name)
		}
		cfg := configFromProto(sp.Config)
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("snapshot: pool %s: %w", k.name, err)
		}
		p := newPool(k, cfg)
		ps.pools[k] = p
		for _, fs := range sp.Files {
			if p.files[fs.FileIndex] != nil || fs.PieceCount == 0 || fs.PieceCount > MaxPiecesPerFile {
				return nil, fmt.Errorf("snapshot: pool %s: bad file %d", k.name, fs.FileIndex)
			}
			f := newFile(fs.FileIndex, fs.PieceCount)
			var err error
			if f.done, err = decodeSet(fs.Done, f.count); err != nil {
				return nil, fmt.Errorf("snapshot: pool %s file %d: %w", k.name, f.index, err)
			}
			p.files[f.index] = f
			ps.pieces[k.ns] += uint64(f.count)
		}
		for _, pss := range sp.Peers {
			if p.peers[pss.Peer] != nil {
				return nil, fmt.Errorf("snapshot: pool %s: peer %s listed twice", k.name, pss.Peer)
			}
			pe := p.peer(pss.Peer, pss.LastTick)
			pe.score, pe.successes, pe.failures, pe.seenTick = pss.Score, pss.Successes, pss.Failures, pss.SeenTick
			if pe.seenTick == 0 { // written before peers were forgotten
				pe.seenTick = pss.LastTick
			}
			for _, h := range pss.Have {
				f := p.files[h.FileIndex]
				if f == nil {
					return nil, fmt.Errorf("snapshot: pool %s: have-map of unknown file %d", k.name, h.FileIndex)
				}
				bm, err := decodeSet(h.Pieces, f.count)
				if err != nil {
					return nil, fmt.Errorf("snapshot: pool %s: %w", k.name, err)
				}
				p.replaceHave(f, pe, bm) // wanted is still empty: only counts
			}
		}
		p.relinkIdle()
		// Wanted after availability, so each piece lands in its bucket once.
		for _, fs := range sp.Files {
			f := p.files[fs.FileIndex]
			w, err := decodeSet(fs.Wanted, f.count)
			if err != nil {
				return nil, fmt.Errorf("snapshot: pool %s file %d: %w", k.name, f.index, err)
			}
			p.addWantedSet(f, w)
		}
		for _, ls := range sp.Leases {
			f := p.files[ls.FileIndex]
			pe := p.peers[ls.Peer]
			pk := pieceKey{ls.FileIndex, ls.PieceIndex}
			if f == nil || pe == nil || ls.PieceIndex >= f.count || p.held[pk] != nil || ps.byLease[ls.LeaseSeq] != nil ||
				f.wanted.Contains(ls.PieceIndex) || f.done.Contains(ls.PieceIndex) {
				return nil, fmt.Errorf("snapshot: pool %s: bad lease %d", k.name, ls.LeaseSeq)
			}
			ps.addLease(p, &pieceLease{pool: p, seq: ls.LeaseSeq, peer: pe, pieceKey: pk})
		}
	}
	return ps, nil
}
