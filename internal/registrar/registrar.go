package registrar

import (
	"fmt"
	"slices"

	"github.com/tenurehq/tenure/internal/logpb"
)

// DefaultsNamespace names the server-wide default policy in SetPolicy.
const DefaultsNamespace = "*"

// Registrar is the lease domain of the state machine. It is not safe for
// concurrent use; the state machine serialises commands and queries.
//
// Commands (Acquire, Renew, …) decide and emit records through a Tx; every
// state change happens in Apply, which replays a record. So the state is a
// pure function of the record sequence (INV-0502).
type Registrar struct {
	defaults   Policy
	namespaces map[string]*namespace
	leases     map[uint64]*lease
	waiters    map[uint64]*waiter
	expiry     timerHeap[*lease]
	deadlines  timerHeap[*waiter]
	nextSeq    uint64
	nextWaiter uint64
	tick       Tick  // of the last applied record
	wall       int64 // of the last applied record
	tag        uint16
	// nextPrune is the earliest tick at which some terminal lease is due
	// for pruning (derived, not snapshotted).
	nextPrune Tick
	// retiring holds the namespaces with terminal leases not yet pruned,
	// by when their oldest is due (derived): pruning visits only the
	// namespaces due, not every namespace (with 100,000 namespaces,
	// visiting all of them on every entry while pruning went on cut
	// throughput fourfold; visiting all that keep terminal leases, when
	// a quarter million namespaces did, cut it to 212 commands/s).
	retiring timerHeap[*namespace]
	// retiredTrees counts the terminal leases in lease trees (derived):
	// a snapshot copies them at once (SnapshotInto).
	retiredTrees int
	// LeaseEnded, when set, is told of every lease that ends, inside the
	// same apply step (sibling domains hook task requeue and piece return
	// here).
	onEnd []func(tx *Tx, l Lease)
}

// New returns an empty registrar with the given default policy.
func New(defaults Policy) *Registrar {
	return &Registrar{
		defaults:   defaults,
		namespaces: make(map[string]*namespace),
		leases:     make(map[uint64]*lease),
		waiters:    make(map[uint64]*waiter),
		expiry:     newLeaseHeap(),
		deadlines:  newWaiterHeap(),
		nextSeq:    1,
		nextWaiter: 1,
		nextPrune:  noPrune,
		retiring:   newNamespaceHeap(),
	}
}

const noPrune = Tick(1<<63 - 1)

// SetIDTag sets the cluster tag mixed into lease ids.
func (r *Registrar) SetIDTag(tag uint16) { r.tag = tag }

// IDTag returns the cluster tag mixed into lease ids.
func (r *Registrar) IDTag() uint16 { return r.tag }

// Tick returns the tick of the last applied record.
func (r *Registrar) Tick() Tick { return r.tick }

// Wall returns the latest wall time (unix ms) of the applied records.
func (r *Registrar) Wall() int64 { return r.wall }

// Defaults returns the server-wide default policy.
func (r *Registrar) Defaults() Policy { return r.defaults }

// SetDefaults replaces the default policy (bootstrap and restore only).
func (r *Registrar) SetDefaults(p Policy) {
	r.defaults = p
	for _, ns := range r.namespaces {
		if !ns.hasPolicy {
			ns.policy = p
		}
	}
}

// Policy returns the policy in force for a namespace.
func (r *Registrar) Policy(ns string) Policy {
	if n := r.namespaces[OrDefault(ns)]; n != nil {
		return n.policy
	}
	return r.defaults
}

func (r *Registrar) namespace(name string, create bool) *namespace {
	if n := r.namespaces[name]; n != nil || !create {
		return n
	}
	n := newNamespace(name, r.defaults)
	r.namespaces[n.name] = n
	return n
}

// Apply applies one sealed record. It fails only on a record that cannot
// follow the current state (a corrupt or reordered ledger).
func (r *Registrar) Apply(rec *logpb.Record) error {
	r.advanceTo(Tick(rec.Tick), rec.Wall)
	switch b := rec.Body.(type) {
	case *logpb.Record_Issued:
		return r.applyIssued(rec, b.Issued)
	case *logpb.Record_Renewed:
		l, err := r.liveLease(b.Renewed.GetLease())
		if err != nil {
			return err
		}
		l.expiresTick = Tick(b.Renewed.ExpiresTick)
		l.expiresWall = b.Renewed.ExpiresWall
		l.ttl = b.Renewed.TtlMs
		l.lastRenewedWall = rec.Wall
		if l.renewals < ^uint32(0) { // saturate (INV-0303)
			l.renewals++
		}
		if l.extra != nil {
			l.extra.graceTick, l.extra.graceWall = 0, 0
		}
		r.expiry.fix(l)
	case *logpb.Record_Ended:
		l, err := r.recordLease(b.Ended.GetLease())
		if err != nil {
			return err
		}
		if s := State(b.Ended.State); s != Released && s != Expired && s != Revoked {
			return fmt.Errorf("record %d: lease %d ends in state %d", rec.Index, l.seq, b.Ended.State)
		}
		r.applyEnded(rec, l, b.Ended)
	case *logpb.Record_Grace:
		l, err := r.liveLease(b.Grace.GetLease())
		if err != nil {
			return err
		}
		x := l.ext()
		x.graceTick = Tick(b.Grace.UntilTick)
		x.graceWall = b.Grace.UntilWall
		x.graceUsed = true
		r.expiry.fix(l)
	case *logpb.Record_Waiting:
		return r.applyWaiting(b.Waiting)
	case *logpb.Record_WaitEnded:
		w := r.waiters[b.WaitEnded.WaiterId]
		if w == nil {
			return fmt.Errorf("record %d: unknown waiter %d", rec.Index, b.WaitEnded.WaiterId)
		}
		r.removeWaiter(w)
	case *logpb.Record_StateWritten:
		sw := b.StateWritten
		ns := r.namespace(sw.Namespace, true)
		ns.setState(ns.resource(sw.Resource, true), sw.Epoch, sw.Data)
	case *logpb.Record_PolicySet:
		p := PolicyFromProto(r.defaults, b.PolicySet.Policy)
		if b.PolicySet.Namespace == DefaultsNamespace {
			r.SetDefaults(p)
		} else {
			n := r.namespace(b.PolicySet.Namespace, true)
			n.policy, n.hasPolicy = p, true
		}
		r.schedulePrune()
	case *logpb.Record_Initialized:
		r.SetDefaults(PolicyFromProto(DefaultPolicy(), b.Initialized.DefaultPolicy))
	case *logpb.Record_Consumed:
		return r.applyConsumed(rec, b.Consumed)
	case *logpb.Record_Checkpoint:
		// The chain is the state machine's business.
	default:
		return fmt.Errorf("record %d: unknown body %T", rec.Index, rec.Body)
	}
	return nil
}

func (r *Registrar) recordLease(ref *logpb.LeaseRef) (*lease, error) {
	l := r.leases[ref.GetSeq()]
	if l == nil {
		return nil, fmt.Errorf("record names unknown lease %d", ref.GetSeq())
	}
	return l, nil
}

// liveLease is recordLease for records that only an active lease can take
// (a renewal or grace of an ended lease would put it back in the expiry
// heap, where expiring it again would never remove it).
func (r *Registrar) liveLease(ref *logpb.LeaseRef) (*lease, error) {
	l, err := r.recordLease(ref)
	if err == nil && l.state.Terminal() {
		return nil, fmt.Errorf("record names lease %d, which already ended", l.seq)
	}
	return l, err
}

func (r *Registrar) applyIssued(rec *logpb.Record, is *logpb.LeaseIssued) error {
	// Every lease held has a sequence below nextSeq (restore checks it),
	// so a sequence at or past it is unused: no lookup of r.leases.
	if is.Seq == 0 || is.Seq < r.nextSeq {
		return fmt.Errorf("record %d: lease sequence %d reused", rec.Index, is.Seq)
	}
	if m := Mode(is.Mode); m != Exclusive && m != Shared {
		return fmt.Errorf("record %d: lease %d has mode %d", rec.Index, is.Seq, is.Mode)
	}
	ns := r.namespaces[is.Namespace]
	var res *resource
	if ns != nil {
		if res = ns.resources[is.Resource]; res != nil && !compatible(res, Mode(is.Mode)) {
			// CTR-0501: a grant for an already-leased resource.
			return fmt.Errorf("record %d: lease %d on %s, which is already leased", rec.Index, is.Seq, is.Resource)
		}
	}
	if is.WaiterId != 0 {
		w := r.waiters[is.WaiterId]
		if w == nil {
			return fmt.Errorf("record %d: grants unknown waiter %d", rec.Index, is.WaiterId)
		}
		r.removeWaiter(w) // may drop the resource: look it up again
		res = nil
		ns = r.namespaces[is.Namespace]
	}
	switch {
	case ns == nil:
		ns = r.namespace(is.Namespace, true)
		res = ns.resource(is.Resource, true)
	case res == nil && is.WaiterId == 0:
		res = ns.newResource(is.Resource) // not there: looked up above
	case res == nil:
		res = ns.resource(is.Resource, true)
	}
	h := ns.holder(is.Holder)
	l := &lease{
		seq:         is.Seq,
		res:         res,
		holder:      h,
		issuedTick:  Tick(rec.Tick),
		expiresTick: Tick(is.ExpiresTick),
		issuedWall:  rec.Wall,
		expiresWall: is.ExpiresWall,
		ttl:         is.TtlMs,
		maxLifetime: is.MaxLifetimeMs,
		maxRenewals: is.MaxRenewals,
		renewals:    is.RenewalCount,
		state:       Active,
		mode:        Mode(is.Mode),
		heapIdx:     -1,
	}
	if is.LifetimeFromTick != 0 {
		l.ext().lifeFrom, l.ext().lifeFromWall = Tick(is.LifetimeFromTick), is.LifetimeFromWall
	}
	r.nextSeq = is.Seq + 1
	r.leases[l.seq] = l
	res.leases = append(res.leases, l)
	if l.mode == Shared {
		c := res.contention()
		c.shared = append(c.shared, l)
	} else {
		res.excl = l
	}
	l.hNext = h.head
	if h.head != nil {
		h.head.hPrev = l
	}
	h.head = l
	h.active++
	h.refs++
	ns.counts[Active]++
	r.expiry.push(l)
	if !emptyDerivation(is.Derivation) {
		if p := is.Derivation.ParentSeq; p != 0 && (r.leases[p] == nil || r.leases[p].state.Terminal()) {
			return fmt.Errorf("record %d: lease %d derived from lease %d, which is not active", rec.Index, is.Seq, p)
		}
		r.applyDerivation(l, is.Derivation)
	}
	return nil
}

func (r *Registrar) applyEnded(rec *logpb.Record, l *lease, e *logpb.LeaseEnded) {
	if l.state.Terminal() {
		return // INV-0101: terminal states never change
	}
	ns := l.res.ns
	l.state = State(e.State)
	l.reason = uint8(e.Reason)
	if e.RevokeReason != "" {
		l.ext().revokeReason = e.RevokeReason
	}
	l.endedTick = Tick(rec.Tick)
	if l.state == Expired {
		// INV-0304: an expired lease terminates at its own expiry, never
		// at a time supplied by a request.
		l.terminatedWall = l.expiresWall
		if gt, gw := l.grace(); gt > l.expiresTick {
			l.terminatedWall = gw
		}
		// Ended with an ancestor whose deadline came first (ancestors are
		// still active here: descendants end first): it terminated there.
		if e.EndedBy != 0 {
			if _, w := l.chainDeadlineWall(); w < l.terminatedWall {
				l.terminatedWall = w
			}
		}
	} else {
		l.terminatedWall = rec.Wall
	}
	r.expiry.remove(l)
	res := l.res
	if res.excl == l {
		res.excl = nil
	} else if i := slices.Index(res.shared(), l); i >= 0 {
		res.cont.shared = slices.Delete(res.cont.shared, i, i+1)
		res.settle()
	}
	h := l.holder
	if l.hPrev != nil {
		l.hPrev.hNext = l.hNext
	} else {
		h.head = l.hNext
	}
	if l.hNext != nil {
		l.hNext.hPrev = l.hPrev
	}
	l.hPrev, l.hNext = nil, nil
	h.active--
	ns.counts[Active]--
	ns.counts[l.state]++
	r.retire(l)
	r.settleEnded(l, e.EndedBy)
}

func (r *Registrar) applyWaiting(wq *logpb.WaiterQueued) error {
	if wq.WaiterId == 0 || r.waiters[wq.WaiterId] != nil || wq.WaiterId < r.nextWaiter {
		return fmt.Errorf("waiter id %d reused", wq.WaiterId)
	}
	if m := Mode(wq.Mode); m != Exclusive && m != Shared {
		return fmt.Errorf("waiter %d has mode %d", wq.WaiterId, wq.Mode)
	}
	ns := r.namespace(wq.Namespace, true)
	res := ns.resource(wq.Resource, true)
	w := &waiter{
		id:          wq.WaiterId,
		res:         res,
		holder:      wq.Holder,
		mode:        Mode(wq.Mode),
		ttl:         wq.TtlMs,
		deadline:    Tick(wq.DeadlineTick),
		maxRenewals: wq.MaxRenewals,
		maxLifetime: wq.MaxLifetimeMs,
		heapIdx:     -1,
		deriv:       wq.Derivation,
	}
	r.nextWaiter = w.id + 1
	r.waiters[w.id] = w
	h := ns.holder(w.holder)
	h.waiting++
	h.refs++
	c := res.contention()
	c.waiters = append(c.waiters, w)
	ns.waiters++
	r.deadlines.push(w)
	return nil
}

func (r *Registrar) removeWaiter(w *waiter) {
	delete(r.waiters, w.id)
	r.deadlines.remove(w)
	res := w.res
	if i := slices.Index(res.waiters(), w); i >= 0 {
		res.cont.waiters = slices.Delete(res.cont.waiters, i, i+1)
		res.settle()
	}
	res.ns.waiters--
	if h := res.ns.holders[w.holder]; h != nil {
		h.waiting--
		h.refs--
		if h.refs == 0 {
			delete(res.ns.holders, h.name)
		}
	}
	res.ns.dropIfEmpty(res)
}

// advanceTo moves registrar time forward to t and prunes terminal leases
// whose retention has passed. Pruning is a pure function of the state and
// the tick, so replay prunes exactly alike.
func (r *Registrar) advanceTo(t Tick, wall int64) {
	if t > r.tick {
		r.tick = t
	}
	if wall > r.wall {
		r.wall = wall
	}
	r.pruneUntil(r.tick)
}

// pruneUntil prunes the terminal leases due for pruning at tick t: past
// their retention, or the oldest ticks' of a namespace over its cap
// (never those that ended at t).
func (r *Registrar) pruneUntil(t Tick) {
	if t < r.nextPrune {
		return
	}
	for ns, ok := r.retiring.peek(); ok && ns.pruneDue <= t; ns, ok = r.retiring.peek() {
		ret := Tick(ns.policy.LeaseRetention)
	prune:
		for l := ns.retired.peek(); l != nil; l = ns.retired.peek() {
			switch {
			case l.endedTick+ret <= t:
				ns.retired.pop()
				r.prune(l)
			case overCap(ns) && l.endedTick < t:
				r.pruneTick(ns, l.endedTick)
			default:
				break prune
			}
		}
		r.reschedule(ns)
	}
	r.nextPrune = r.firstPrune()
}

// overCap reports whether ns keeps more terminal leases than its policy's
// MaxRetainedLeases.
func overCap(ns *namespace) bool { return uint64(ns.retired.len()) > ns.policy.MaxRetainedLeases }

// pruneTick prunes the terminal leases of ns that ended at tick t, the
// oldest it keeps. The cap prunes whole ticks: the order of the leases
// that ended in one tick is the order of their records, which a restored
// snapshot does not keep, so pruning part of a tick could leave replicas
// with different leases. Leases of the current tick are never pruned this
// way, so a command's later records always find the leases its earlier
// records ended.
func (r *Registrar) pruneTick(ns *namespace, t Tick) {
	for l := ns.retired.peek(); l != nil && l.endedTick == t; l = ns.retired.peek() {
		ns.retired.pop()
		r.prune(l)
	}
}

// retire queues terminal lease l for pruning.
func (r *Registrar) retire(l *lease) {
	ns := l.res.ns
	ns.retired.push(l)
	if l.tree != nil {
		r.retiredTrees++
	}
	r.reschedule(ns)
	r.nextPrune = r.firstPrune()
}

// reschedule files ns in retiring by when its oldest terminal lease is
// due (at the end of its retention, or at the next tick if ns keeps more
// than its cap), or takes it out when it keeps none.
func (r *Registrar) reschedule(ns *namespace) {
	l := ns.retired.peek()
	if l == nil {
		r.retiring.remove(ns)
		return
	}
	due := l.endedTick + Tick(ns.policy.LeaseRetention)
	if overCap(ns) {
		due = min(due, l.endedTick+1)
	}
	if ns.pruneIdx >= 0 && due == ns.pruneDue {
		return
	}
	ns.pruneDue = due
	r.retiring.fix(ns)
}

// firstPrune is when the next terminal lease is due for pruning.
func (r *Registrar) firstPrune() Tick {
	if ns, ok := r.retiring.peek(); ok {
		return ns.pruneDue
	}
	return noPrune
}

// schedulePrune files every retiring namespace again, after policies
// changed (their retention or cap).
func (r *Registrar) schedulePrune() {
	for _, ns := range slices.Clone(r.retiring.items) {
		r.reschedule(ns)
	}
	r.nextPrune = r.firstPrune()
}

func (r *Registrar) prune(l *lease) {
	delete(r.leases, l.seq)
	if l.tree != nil {
		r.retiredTrees--
	}
	r.unlink(l)
	res := l.res
	ns := res.ns
	ns.counts[l.state]--
	if h := l.holder; h.refs > 0 {
		h.refs--
		if h.refs == 0 {
			delete(ns.holders, h.name)
		}
	}
	// Leases are pruned oldest first, so l is nearly always the
	// resource's first: no search through the others (each a cold read).
	if len(res.leases) > 0 && res.leases[0] == l {
		res.leases[0] = nil
		res.leases = res.leases[1:]
	} else if i, ok := slices.BinarySearchFunc(res.leases, l.seq, func(x *lease, s uint64) int {
		return cmpUint(x.seq, s)
	}); ok {
		res.leases = slices.Delete(res.leases, i, i+1)
	}
	ns.dropIfEmpty(res)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
