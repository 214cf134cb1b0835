package pool

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/tenurehq/tenure/internal/registrar"
)

// Status is a pool's state at a glance.
type Status struct {
	Namespace, Pool string
	Config          Config
	Files           []FileStatus // by file index
	Peers           []Ranking    // by peer name
}

// Status describes a pool.
func (ps *Pools) Status(ns, name string) (Status, error) {
	k := key{registrar.OrDefault(ns), name}
	p := ps.pools[k]
	if p == nil {
		return Status{}, notFound(k)
	}
	st := Status{Namespace: k.ns, Pool: k.name, Config: p.cfg}
	for _, f := range p.sortedFiles() {
		st.Files = append(st.Files, f.status())
	}
	for _, pe := range p.sortedPeers() {
		st.Peers = append(st.Peers, pe.ranking())
	}
	return st, nil
}

// Rankings lists a pool's peers, highest score first (equal scores by name).
func (ps *Pools) Rankings(ns, name string) ([]Ranking, error) {
	k := key{registrar.OrDefault(ns), name}
	p := ps.pools[k]
	if p == nil {
		return nil, notFound(k)
	}
	out := make([]Ranking, 0, len(p.peers))
	for _, pe := range p.peers {
		out = append(out, pe.ranking())
	}
	slices.SortFunc(out, func(a, b Ranking) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	return out, nil
}

// Holder returns the peer holding a piece's lease and the lease's fence.
func (ps *Pools) Holder(ns, name string, file, piece uint32) (string, uint64, bool) {
	p := ps.pools[key{registrar.OrDefault(ns), name}]
	if p == nil {
		return "", 0, false
	}
	pl := p.held[pieceKey{file, piece}]
	if pl == nil {
		return "", 0, false
	}
	return pl.peer.name, pl.seq, true
}

// Check verifies the domain's invariants (tests): wanted, leased and done
// pairwise disjoint and within the piece count; every leased piece held by
// exactly one lease, no peer above its cap and its count right; every score
// within [0.1, 10]; availability and its index agree with the have-maps;
// the idle list is ordered and holds every peer that could be forgotten.
func (ps *Pools) Check() error {
	seen := 0
	pieces := map[string]uint64{}
	for _, p := range ps.sortedPools() {
		for _, f := range p.files {
			pieces[p.ns] += uint64(f.count)
		}
		current := map[string]uint32{}
		for pk, pl := range p.held {
			if pl.pieceKey != pk || pl.pool != p || ps.byLease[pl.seq] != pl {
				return fmt.Errorf("pool %s: lease index broken for %v", p.name, pk)
			}
			current[pl.peer.name]++
		}
		seen += len(p.held)
		levelN := map[uint32]int{}
		for _, f := range p.sortedFiles() {
			if roaring.And(f.wanted, f.leased).GetCardinality() != 0 || roaring.And(f.wanted, f.done).GetCardinality() != 0 ||
				roaring.And(f.leased, f.done).GetCardinality() != 0 {
				return fmt.Errorf("pool %s file %d: wanted, leased, done overlap", p.name, f.index)
			}
			for _, b := range []*roaring.Bitmap{f.wanted, f.leased, f.done} {
				if !b.IsEmpty() && b.Maximum() >= f.count {
					return fmt.Errorf("pool %s file %d: piece beyond the count", p.name, f.index)
				}
			}
			n := 0
			for it := f.leased.Iterator(); it.HasNext(); {
				x := it.Next()
				if p.held[pieceKey{f.index, x}] == nil {
					return fmt.Errorf("pool %s: piece %d/%d leased without a lease", p.name, f.index, x)
				}
				n++
			}
			avail := make([]uint32, f.count)
			for _, pe := range p.peers {
				if h := pe.have[f.index]; h != nil {
					for it := h.Iterator(); it.HasNext(); {
						avail[it.Next()]++
					}
				}
			}
			if !slices.Equal(avail, f.avail) {
				return fmt.Errorf("pool %s file %d: availability disagrees with the have-maps", p.name, f.index)
			}
			union := roaring.New()
			for lv, b := range f.byLevel {
				for it := b.Iterator(); it.HasNext(); {
					if x := it.Next(); f.avail[x] != lv {
						return fmt.Errorf("pool %s file %d: piece %d in level %d has availability %d", p.name, f.index, x, lv, f.avail[x])
					}
				}
				levelN[lv] += int(b.GetCardinality())
				union.Or(b)
			}
			if !union.Equals(f.wanted) {
				return fmt.Errorf("pool %s file %d: availability index is not the wanted set", p.name, f.index)
			}
		}
		if len(levelN) != len(p.levelN) || !slices.IsSorted(p.levels) || len(p.levels) != len(levelN) {
			return fmt.Errorf("pool %s: level index broken", p.name)
		}
		for lv, n := range levelN {
			if p.levelN[lv] != n {
				return fmt.Errorf("pool %s: level %d counts %d, not %d", p.name, lv, p.levelN[lv], n)
			}
		}
		if err := p.checkIdle(); err != nil {
			return err
		}
		for _, pe := range p.peers {
			if pe.current != current[pe.name] || pe.current > p.cfg.MaxLeasesPerPeer {
				return fmt.Errorf("pool %s: peer %s holds %d leases (counted %d, cap %d)", p.name, pe.name, current[pe.name], pe.current, p.cfg.MaxLeasesPerPeer)
			}
			if !(pe.score >= MinScoreClamp && pe.score <= MaxScoreClamp) {
				return fmt.Errorf("pool %s: peer %s scores %v", p.name, pe.name, pe.score)
			}
		}
	}
	if seen != len(ps.byLease) {
		return fmt.Errorf("%d pool leases indexed, %d held", len(ps.byLease), seen)
	}
	if !maps.Equal(pieces, ps.pieces) {
		return fmt.Errorf("pieces counted by namespace %v, the pools' files hold %v", ps.pieces, pieces)
	}
	return nil
}

// HeldBy lists the pieces (file, piece) a peer holds leases on, sorted.
func (ps *Pools) HeldBy(ns, name, peer string) [][2]uint32 {
	p := ps.pools[key{registrar.OrDefault(ns), name}]
	if p == nil {
		return nil
	}
	var out [][2]uint32
	for pk, pl := range p.held {
		if pl.peer.name == peer {
			out = append(out, [2]uint32{pk.file, pk.piece})
		}
	}
	slices.SortFunc(out, func(a, b [2]uint32) int {
		if c := cmp.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return cmp.Compare(a[1], b[1])
	})
	return out
}

// Names lists the namespace's pools ("" = default) by name.
func (ps *Pools) Names(ns string) []string {
	ns = registrar.OrDefault(ns)
	var out []string
	for k := range ps.pools {
		if k.ns == ns {
			out = append(out, k.name)
		}
	}
	slices.Sort(out)
	return out
}

// checkIdle verifies the idle list: linked both ways, seenTicks not
// decreasing, and every peer with a have-map and no lease in it.
func (p *pool) checkIdle() error {
	var prev *peer
	listed := 0
	for pe := p.idle.front; pe != nil; prev, pe = pe, pe.next {
		if !pe.listed || pe.prev != prev || p.peers[pe.name] != pe {
			return fmt.Errorf("pool %s: idle list broken at peer %s", p.name, pe.name)
		}
		if prev != nil && prev.seenTick > pe.seenTick {
			return fmt.Errorf("pool %s: idle list out of order at peer %s", p.name, pe.name)
		}
		listed++
	}
	if p.idle.back != prev {
		return fmt.Errorf("pool %s: idle list ends at the wrong peer", p.name)
	}
	for _, pe := range p.peers {
		if !pe.listed && pe.current == 0 && len(pe.have) > 0 {
			return fmt.Errorf("pool %s: peer %s could be forgotten but is not listed", p.name, pe.name)
		}
		if pe.listed {
			listed--
		}
	}
	if listed != 0 {
		return fmt.Errorf("pool %s: idle list and peers disagree", p.name)
	}
	return nil
}

// Stats counts a pool's pieces by where they stand, and its peers and
// their failures.
type Stats struct {
	Queued, Leased, Succeeded uint64
	Files                     uint32
	Pieces                    uint64
	Peers                     uint32
	Failures                  uint64
}

// Stats counts a pool's pieces (PoolService.Stats).
func (ps *Pools) Stats(ns, name string) (Stats, error) {
	k := key{registrar.OrDefault(ns), name}
	p := ps.pools[k]
	if p == nil {
		return Stats{}, notFound(k)
	}
	st := Stats{Files: uint32(len(p.files)), Peers: uint32(len(p.peers))}
	for _, f := range p.files {
		fs := f.status()
		st.Queued += fs.Wanted
		st.Leased += fs.Leased
		st.Succeeded += fs.Done
		st.Pieces += uint64(fs.Pieces)
	}
	for _, pe := range p.peers {
		st.Failures += pe.failures
	}
	return st, nil
}
