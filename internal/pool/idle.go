package pool

import (
	"cmp"
	"slices"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Idle peers. A swarm's peers come and go, and a peer's have-maps are the
// bulk of what a pool keeps of it (a bitmap per file). A peer that holds
// no piece lease and has not recorded a have-map, taken a lease or ended
// one for the pool's peer idle timeout has its have-maps forgotten: they
// stop counting towards rarity, and its next request records them again.
// Its score is kept, so waiting does not clear a penalty.
//
// Forgetting is decided by commands (want, request, complete, after they
// validate) and carried out by records (an empty PeerHave marked idle per
// have-map), so replay and restore forget exactly alike. The decision
// reads only replicated state: each peer's seenTick and leases; the list
// below is an index of it, ordered by seenTick.

// maxForget bounds the idle peers one command forgets: it stops after a
// whole tick of peers once it has this many, so the peers chosen do not
// depend on the order of peers within a tick (which a restored list does
// not keep).
const maxForget = 64

// peerList links a pool's peers in order of seenTick (oldest first). A
// peer may be left out while it cannot be forgotten: it holds a lease
// (the lease's end touches it) or has no have-map (recording one touches
// it). Every peer with a have-map and no lease is in it.
type peerList struct{ front, back *peer }

func (l *peerList) pushBack(pe *peer) {
	pe.prev, pe.next, pe.listed = l.back, nil, true
	if l.back != nil {
		l.back.next = pe
	} else {
		l.front = pe
	}
	l.back = pe
}

func (l *peerList) remove(pe *peer) {
	if !pe.listed {
		return
	}
	if pe.prev != nil {
		pe.prev.next = pe.next
	} else {
		l.front = pe.next
	}
	if pe.next != nil {
		pe.next.prev = pe.prev
	} else {
		l.back = pe.prev
	}
	pe.prev, pe.next, pe.listed = nil, nil, false
}

// touch records activity of pe at tick (ticks of applied records never
// decrease, so the list stays ordered).
func (p *pool) touch(pe *peer, tick int64) {
	pe.seenTick = tick
	p.idle.remove(pe)
	p.idle.pushBack(pe)
}

// relinkIdle rebuilds the list from the peers' seenTicks (Restore).
func (p *pool) relinkIdle() {
	p.idle = peerList{}
	peers := p.sortedPeers()
	slices.SortStableFunc(peers, func(a, b *peer) int { return cmp.Compare(a.seenTick, b.seenTick) })
	for _, pe := range peers {
		pe.listed = false
		p.idle.pushBack(pe)
	}
}

// forgetIdle forgets the have-maps of up to about maxForget peers idle at
// tx's tick, oldest first, except active (the peer whose command this
// is).
func (ps *Pools) forgetIdle(tx *registrar.Tx, p *pool, active string) {
	due := int64(tx.Tick) - p.cfg.PeerIdleMs
	var idle []*peer
	for pe := p.idle.front; pe != nil && pe.seenTick <= due; {
		next := pe.next
		switch {
		case len(idle) >= maxForget && pe.seenTick > idle[len(idle)-1].seenTick:
			next = nil
		case pe.name == active:
			// It stays: its own records touch it, or a later command
			// finds it idle.
		case pe.current == 0 && len(pe.have) > 0:
			idle = append(idle, pe)
			p.idle.remove(pe)
		default:
			p.idle.remove(pe)
		}
		pe = next
	}
	slices.SortFunc(idle, func(a, b *peer) int {
		return cmp.Or(cmp.Compare(a.seenTick, b.seenTick), cmp.Compare(a.name, b.name))
	})
	for _, pe := range idle {
		files := make([]uint32, 0, len(pe.have))
		for i := range pe.have {
			files = append(files, i)
		}
		slices.Sort(files)
		for _, i := range files {
			ps.emit(tx, p.key, &logpb.PoolRecord{Event: &logpb.PoolRecord_Have{Have: &logpb.PeerHave{
				Peer: pe.name, FileIndex: i, Idle: true,
			}}})
			if tx.Err() != nil {
				return
			}
		}
	}
}
