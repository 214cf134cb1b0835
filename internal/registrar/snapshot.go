package registrar

import (
	"cmp"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

// SnapshotInto copies the registrar's state into s: states and policies
// by name, leases and waiters in no particular order
// (statemachine.EncodeSnapshot sorts them by sequence).
//
// Terminal leases outside lease trees are not copied: they never change
// again (pruning drops them from the registrar without touching them), so
// the returned Retained keeps only the namespaces' lists of terminal
// leases (a copy of their pointers), and its Fill adds them to s later,
// beside the applies that follow, instead of while they wait. On a busy
// registrar most leases are terminal ones kept for their retention. The
// leases read here are the active ones (the expiry heap holds exactly
// those) and the terminal ones in lease trees, whose trees may change.
func (r *Registrar) SnapshotInto(s *logpb.Snapshot) *Retained {
	s.Tick, s.Wall = int64(r.tick), r.wall
	s.NextSeq, s.NextWaiter = r.nextSeq, r.nextWaiter
	s.IdTag = uint32(r.tag)
	s.DefaultPolicy = r.defaults.Proto()
	ret := &Retained{}
	n := 0
	for _, ns := range r.retiring.items {
		n += ns.retired.len()
	}
	ret.leases = make([]*lease, 0, n)
	for _, ns := range r.retiring.items {
		ret.leases = append(ret.leases, ns.retired.items[ns.retired.head:]...)
	}
	live := r.expiry.items
	if r.retiredTrees > 0 {
		live = slices.Clone(live)
		for _, l := range ret.leases {
			if l.tree != nil {
				live = append(live, l)
			}
		}
	}
	s.Leases = make([]*logpb.LeaseSnap, 0, len(r.leases))
	snaps := make([]logpb.LeaseSnap, len(live)) // one allocation: applies wait
	for i, l := range live {
		s.Leases = append(s.Leases, &snaps[i])
		r.leaseSnap(l, &snaps[i])
	}
	r.snapshotRest(s)
	return ret
}

// Retained is the part of a snapshot SnapshotInto left for later: its
// terminal leases (those in lease trees it copied already).
type Retained struct{ leases []*lease }

// Fill adds the retained leases outside lease trees to s. It may run
// beside later applies: it reads only leases that never change again.
func (ret *Retained) Fill(s *logpb.Snapshot) {
	snaps := make([]logpb.LeaseSnap, len(ret.leases))
	n := 0
	for _, l := range ret.leases {
		if l.tree != nil {
			continue
		}
		snapOf(l, &snaps[n])
		s.Leases = append(s.Leases, &snaps[n])
		n++
	}
	ret.leases = nil
}

// leaseSnap fills ls from l, a live lease or one in a lease tree (read on
// the apply goroutine).
func (r *Registrar) leaseSnap(l *lease, ls *logpb.LeaseSnap) {
	snapOf(l, ls)
	if t := l.tree; t != nil {
		ls.Derivation = r.derivationOf(l)
		ls.EndedByLeaseId = t.endedBy
		for _, c := range t.counters {
			if c.Used != 0 || c.Reserved != 0 {
				ls.Usage = append(ls.Usage, &logpb.CounterUse{Counter: c.Name, Used: c.Used, Reserved: c.Reserved})
			}
		}
	}
}

// snapOf fills ls with the fields of l's own (everything but its tree).
func snapOf(l *lease, ls *logpb.LeaseSnap) {
	{
		var x leaseExtra
		if l.extra != nil {
			x = *l.extra
		}
		*ls = logpb.LeaseSnap{
			Seq: l.seq, Namespace: l.res.ns.name, Resource: l.res.name, Holder: l.holder.name,
			Mode: tenurev1.Mode(l.mode), State: tenurev1.State(l.state), TtlMs: l.ttl,
			IssuedTick: int64(l.issuedTick), IssuedWall: l.issuedWall,
			ExpiresTick: int64(l.expiresTick), ExpiresWall: l.expiresWall,
			LastRenewedWall: l.lastRenewedWall, RenewalCount: l.renewals,
			Reason: tenurev1.ReleaseReason(l.reason), TerminatedWall: l.terminatedWall,
			GraceUntilTick: int64(x.graceTick), GraceUntilWall: x.graceWall, GraceUsed: x.graceUsed,
			MaxRenewals: l.maxRenewals, MaxLifetimeMs: l.maxLifetime, RevokeReason: x.revokeReason,
			EndedTick: int64(l.endedTick), LifetimeFromTick: int64(x.lifeFrom), LifetimeFromWall: x.lifeFromWall,
		}
	}
}

// snapshotRest copies what is not leases: waiters, states, policies.
func (r *Registrar) snapshotRest(s *logpb.Snapshot) {
	s.Waiters = make([]*logpb.WaiterQueued, 0, len(r.waiters))
	for _, w := range r.waiters {
		s.Waiters = append(s.Waiters, &logpb.WaiterQueued{
			WaiterId: w.id, Namespace: w.res.ns.name, Resource: w.res.name, Holder: w.holder,
			Mode: tenurev1.Mode(w.mode), TtlMs: w.ttl, DeadlineTick: int64(w.deadline),
			MaxRenewals: w.maxRenewals, MaxLifetimeMs: w.maxLifetime,
			// A message of its own: the encoding runs beside later applies.
			Derivation: cloneDerivation(w.deriv),
		})
	}
	s.States, s.Policies = nil, nil
	for _, ns := range r.namespacesFor("") {
		if ns.hasPolicy {
			s.Policies = append(s.Policies, &logpb.PolicySet{Namespace: ns.name, Policy: ns.policy.Proto()})
		}
		for _, res := range ns.guarded { // by name, as the resource index orders them
			s.States = append(s.States, &logpb.GuardedStateSnap{
				Namespace: ns.name, Resource: res.name, Epoch: res.guarded.epoch, Data: res.guarded.data,
			})
		}
	}
}

// Restore builds a registrar from a snapshot.
func Restore(s *logpb.Snapshot) (*Registrar, error) {
	if s.NextSeq == 0 || s.NextWaiter == 0 {
		// Both start at 1; 0 would be issued and refused by the next grant.
		return nil, fmt.Errorf("snapshot: next lease or waiter id is 0")
	}
	r := New(PolicyFromProto(DefaultPolicy(), s.DefaultPolicy))
	r.tick, r.wall = Tick(s.Tick), s.Wall
	// nextWaiter is set after the waiters are queued: applyWaiting refuses
	// ids below it.
	r.nextSeq = s.NextSeq
	r.tag = uint16(s.IdTag)
	for _, p := range s.Policies {
		n := r.namespace(p.Namespace, true)
		// Proto writes every field, and max_renewals 0 means unlimited
		// here: overlaying on r.defaults would turn it into the defaults'.
		n.policy, n.hasPolicy = PolicyFromProto(DefaultPolicy(), p.Policy), true
	}
	var retired []*lease
	for _, ls := range s.Leases {
		if ls.Seq == 0 || ls.Seq >= r.nextSeq || r.leases[ls.Seq] != nil {
			return nil, fmt.Errorf("snapshot: bad lease sequence %d", ls.Seq)
		}
		if ls.State < tenurev1.State_STATE_ACTIVE || ls.State > tenurev1.State_STATE_REVOKED {
			return nil, fmt.Errorf("snapshot: lease %d has bad state %d", ls.Seq, ls.State)
		}
		ns := r.namespace(ls.Namespace, true)
		res := ns.resource(ls.Resource, true)
		l := &lease{
			seq: ls.Seq, res: res, holder: ns.holder(ls.Holder),
			issuedTick: Tick(ls.IssuedTick), expiresTick: Tick(ls.ExpiresTick),
			issuedWall: ls.IssuedWall, expiresWall: ls.ExpiresWall, lastRenewedWall: ls.LastRenewedWall,
			terminatedWall: ls.TerminatedWall, endedTick: Tick(ls.EndedTick),
			ttl: ls.TtlMs, maxLifetime: ls.MaxLifetimeMs, maxRenewals: ls.MaxRenewals, renewals: ls.RenewalCount,
			state: State(ls.State), mode: Mode(ls.Mode), reason: uint8(ls.Reason),
			heapIdx: -1,
		}
		if ls.GraceUntilTick != 0 || ls.GraceUntilWall != 0 || ls.GraceUsed || ls.RevokeReason != "" || ls.LifetimeFromTick != 0 {
			l.extra = &leaseExtra{graceTick: Tick(ls.GraceUntilTick), graceWall: ls.GraceUntilWall,
				graceUsed: ls.GraceUsed, revokeReason: ls.RevokeReason, lifeFrom: Tick(ls.LifetimeFromTick), lifeFromWall: ls.LifetimeFromWall}
		}
		if l.mode != Exclusive && l.mode != Shared {
			return nil, fmt.Errorf("snapshot: lease %d has bad mode %d", ls.Seq, ls.Mode)
		}
		if err := r.restoreTree(l, ls); err != nil {
			return nil, err
		}
		r.leases[l.seq] = l
		l.holder.refs++
		res.leases = append(res.leases, l) // snapshot order is by seq
		ns.counts[l.state]++
		if l.state != Active {
			retired = append(retired, l)
			continue
		}
		if l.mode == Shared {
			c := res.contention()
			c.shared = append(c.shared, l)
		} else {
			if res.excl != nil {
				return nil, fmt.Errorf("snapshot: two exclusive leases on %s", res.name)
			}
			res.excl = l
		}
		h := l.holder
		l.hNext = h.head
		if h.head != nil {
			h.head.hPrev = l
		}
		h.head = l
		h.active++
		r.expiry.push(l)
	}
	// Pruning pops by ended tick; equal ticks prune together, so their
	// order does not matter.
	slices.SortStableFunc(retired, func(a, b *lease) int { return cmp.Compare(a.endedTick, b.endedTick) })
	for _, l := range retired {
		r.retire(l)
	}
	for _, wq := range s.Waiters {
		if err := r.applyWaiting(wq); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
	}
	if s.NextWaiter < r.nextWaiter {
		return nil, fmt.Errorf("snapshot: next waiter id %d is not above the queued ones", s.NextWaiter)
	}
	r.nextWaiter = s.NextWaiter
	for _, st := range s.States {
		ns := r.namespace(st.Namespace, true)
		ns.setState(ns.resource(st.Resource, true), st.Epoch, st.Data)
	}
	r.schedulePrune()
	return r, nil
}

// restoreTree rebuilds a lease's tree node from its snapshot. Leases come
// in sequence order, so a parent is restored before its children and
// children are appended in order. Reservations are restored as recorded
// rather than re-derived: the snapshot is the state.
func (r *Registrar) restoreTree(l *lease, ls *logpb.LeaseSnap) error {
	d := ls.Derivation
	if d == nil && len(ls.Usage) == 0 && ls.EndedByLeaseId == "" {
		return nil
	}
	if d != nil {
		if d.ParentSeq >= ls.Seq {
			return fmt.Errorf("snapshot: lease %d derived from later lease %d", ls.Seq, d.ParentSeq)
		}
		if p := r.leases[d.ParentSeq]; d.ParentSeq != 0 && p != nil {
			if l.state == Active && p.state != Active {
				return fmt.Errorf("snapshot: active lease %d under ended lease %d", ls.Seq, d.ParentSeq)
			}
		}
		// The parent's own snapshot already holds its reservations.
		r.link(l, d, false)
	}
	t := l.node()
	t.endedBy = ls.EndedByLeaseId
	for _, u := range ls.Usage {
		c := t.counterFor(u.Counter)
		c.Used, c.Reserved = u.Used, u.Reserved
	}
	return nil
}

func cloneDerivation(d *logpb.Derivation) *logpb.Derivation {
	if d == nil {
		return nil
	}
	return proto.CloneOf(d)
}
