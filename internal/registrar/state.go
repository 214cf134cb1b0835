package registrar

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/internal/logpb"

	"github.com/google/btree"
)

// lease is the registrar's record of one lease. It is kept small: a
// million active leases should cost a few hundred bytes each.
type lease struct {
	seq    uint64 // also the fence
	res    *resource
	holder *holderEntry
	// hPrev, hNext link the holder's active leases.
	hPrev, hNext *lease

	issuedTick, expiresTick Tick
	issuedWall, expiresWall int64
	lastRenewedWall         int64
	terminatedWall          int64
	endedTick               Tick  // tick of the record that ended it (pruning clock)
	ttl                     int64 // ms
	maxLifetime             int64 // ms, 0 = unlimited
	maxRenewals             uint32
	renewals                uint32
	heapIdx                 int32 // index in the expiry heap, -1 when not in it
	state                   State
	mode                    Mode
	reason                  uint8 // tenurev1.ReleaseReason
	// extra holds what few leases need (grace, revoke reason), to keep
	// the common lease small.
	extra *leaseExtra
	// tree is set for a lease in a lease tree (a derived lease, a parent,
	// a lease with a scope or budget, or one that consumed a counter).
	tree *tree
}

type leaseExtra struct {
	// lifeFrom, when set, is the tick the lifetime counts from (a lease
	// issued by a transfer that carried the limits over).
	lifeFrom     Tick
	lifeFromWall int64
	graceTick    Tick
	graceWall    int64
	graceUsed    bool
	revokeReason string
}

func (l *lease) ext() *leaseExtra {
	if l.extra == nil {
		l.extra = &leaseExtra{}
	}
	return l.extra
}

// grace returns the end of the lease's restart grace (0 if none).
func (l *lease) grace() (Tick, int64) {
	if l.extra == nil {
		return 0, 0
	}
	return l.extra.graceTick, l.extra.graceWall
}

// deadline is the tick at which the lease stops being honoured: its
// expiry, or the end of a restart grace.
func (l *lease) deadline() Tick {
	if l.extra != nil && l.extra.graceTick > l.expiresTick {
		return l.extra.graceTick
	}
	return l.expiresTick
}

// activeAt reports whether the lease is honoured at tick t (strict: not at
// or after its deadline; CTR-0301).
func (l *lease) activeAt(t Tick) bool { return l.state == Active && t < l.deadline() }

// lifetimeCap is the tick past which the lease may never be extended.
func (l *lease) lifetimeCap() Tick {
	if l.maxLifetime == 0 {
		return Tick(1<<62 - 1)
	}
	return l.lifeFrom() + Tick(l.maxLifetime)
}

// lifeFrom is the tick the lease's lifetime counts from: its issue, or
// its predecessor's when a transfer carried the limits over.
func (l *lease) lifeFrom() Tick {
	t, _ := l.acquired()
	return t
}

// acquired is when the lease's tenure began (tick, wall): its issue, or
// its predecessor's when a transfer carried the limits over.
func (l *lease) acquired() (Tick, int64) {
	if l.extra != nil && l.extra.lifeFrom != 0 {
		return l.extra.lifeFrom, l.extra.lifeFromWall
	}
	return l.issuedTick, l.issuedWall
}

// resource is a claimed name in a namespace: its leases (active and
// terminal until pruned, by sequence), its FIFO wait queue and its
// guarded state. It exists while any of those does.
type resource struct {
	ns      *namespace
	name    string
	leases  []*lease // by seq; terminal ones until pruned
	excl    *lease   // the active exclusive lease, if any
	cont    *contention
	guarded *guarded
	// first is room for the first lease, which most resources never
	// outgrow (it fits the struct's size class: no extra allocation).
	first [1]*lease
}

// contention holds what only some resources have: active shared leases
// and a wait queue. Most resources have neither, so it is kept apart.
type contention struct {
	shared  []*lease // the active shared leases, by fence
	waiters []*waiter
}

func (r *resource) shared() []*lease {
	if r.cont == nil {
		return nil
	}
	return r.cont.shared
}

func (r *resource) waiters() []*waiter {
	if r.cont == nil {
		return nil
	}
	return r.cont.waiters
}

func (r *resource) contention() *contention {
	if r.cont == nil {
		r.cont = &contention{}
	}
	return r.cont
}

// settle drops the contention record once it is empty.
func (r *resource) settle() {
	if r.cont != nil && len(r.cont.shared) == 0 && len(r.cont.waiters) == 0 {
		r.cont = nil
	}
}

type guarded struct {
	epoch uint64
	data  []byte
}

func (r *resource) empty() bool {
	return len(r.leases) == 0 && r.cont == nil && r.guarded == nil
}

// waiter is a queued acquire. Waiters are granted in FIFO order; a queued
// exclusive request blocks later shared ones.
type waiter struct {
	id          uint64
	res         *resource
	holder      string
	mode        Mode
	ttl         int64
	deadline    Tick
	maxRenewals uint32
	maxLifetime int64
	heapIdx     int32
	deriv       *logpb.Derivation // scope and budget of the root lease it will get
}

// holderEntry is one holder's active leases in one namespace.
type holderEntry struct {
	name   string
	ns     *namespace
	head   *lease
	active uint64
	// waiting counts the holder's queued acquires; they count against its
	// quota, so a grant from the queue never takes it over.
	waiting uint64
	// refs counts the leases naming this entry, active or not yet pruned,
	// and its queued acquires;
	// the entry lives as long as they do, so a holder cycling one lease
	// does not churn it.
	refs uint64
}

// namespace holds the resources, holders, policy and counters of one tenant.
type namespace struct {
	name      string
	policy    Policy
	hasPolicy bool // set explicitly (replicated), not just the defaults
	resources map[string]*resource
	ordered   *btree.BTreeG[named]
	holders   map[string]*holderEntry
	retired   leaseFIFO // terminal leases in the order they ended
	// pruneDue is when the oldest of retired is due for pruning, and
	// pruneIdx the namespace's place in Registrar.retiring (-1: none).
	pruneDue Tick
	pruneIdx int32
	counts   [5]uint64 // by State
	waiters  uint64
	// guarded lists the resources with guarded state (which, once
	// written, is never dropped) by name, so that a snapshot need not
	// walk every resource to find them.
	guarded []*resource
	// stateBytes is the StateCost of the guarded state held, which the
	// policy's MaxStateBytes bounds.
	stateBytes uint64
}

// StateCost is what a resource's guarded state of n bytes counts against
// its namespace's MaxStateBytes: the blob and its entry.
func StateCost(n int) uint64 { return uint64(n) + 256 }

// setState gives res guarded state data at epoch, keeping the namespace's
// count of state bytes.
func (ns *namespace) setState(res *resource, epoch uint64, data []byte) {
	had := res.guarded != nil
	g := ns.guard(res)
	if had {
		ns.stateBytes -= StateCost(len(g.data))
	}
	ns.stateBytes += StateCost(len(data))
	g.epoch, g.data = epoch, data
}

// guard gives res guarded state, if it has none yet.
func (ns *namespace) guard(res *resource) *guarded {
	if res.guarded == nil {
		res.guarded = &guarded{}
		i, _ := slices.BinarySearchFunc(ns.guarded, res.name, func(r *resource, name string) int { return strings.Compare(r.name, name) })
		ns.guarded = slices.Insert(ns.guarded, i, res)
	}
	return res.guarded
}

// named is an entry of a namespace's ordered resources. The name is
// inline so that the tree's comparisons read only the names, not the
// resources they point to (each a likely cache miss in a large tree); and
// so are its first 16 bytes, as two big-endian words (zero-padded), which
// decide most comparisons without reading the names' bytes (another
// likely cache miss each).
type named struct {
	hi, lo uint64
	name   string
	res    *resource
}

// nameKey returns the entry of the resource name (res not set).
func nameKey(name string) named {
	var b [16]byte
	copy(b[:], name)
	return named{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:]), name: name}
}

// lessResource orders entries by name. Zero-padded prefixes that differ
// order as the names do (at the first difference, a name that has ended
// pads with 0, which no byte of a longer name sorts before); equal ones
// leave it to the names.
func lessResource(a, b named) bool {
	if a.hi != b.hi {
		return a.hi < b.hi
	}
	if a.lo != b.lo {
		return a.lo < b.lo
	}
	return a.name < b.name
}

func newNamespace(name string, p Policy) *namespace {
	return &namespace{
		name:      name,
		policy:    p,
		resources: make(map[string]*resource),
		ordered:   btree.NewG(32, lessResource),
		pruneIdx:  -1,
		holders:   make(map[string]*holderEntry),
	}
}

func (ns *namespace) resource(name string, create bool) *resource {
	if r := ns.resources[name]; r != nil || !create {
		return r
	}
	return ns.newResource(name)
}

// newResource adds the resource name, which the namespace does not have.
func (ns *namespace) newResource(name string) *resource {
	r := &resource{ns: ns, name: strings.Clone(name)}
	r.leases = r.first[:0]
	ns.resources[r.name] = r
	e := nameKey(r.name)
	e.res = r
	ns.ordered.ReplaceOrInsert(e)
	return r
}

func (ns *namespace) dropIfEmpty(r *resource) {
	if r.empty() {
		delete(ns.resources, r.name)
		ns.ordered.Delete(nameKey(r.name))
	}
}

func (ns *namespace) holder(name string) *holderEntry {
	if h := ns.holders[name]; h != nil {
		return h
	}
	h := &holderEntry{name: strings.Clone(name), ns: ns}
	ns.holders[h.name] = h
	return h
}

// leaseFIFO is a queue of leases in the order they ended.
type leaseFIFO struct {
	items []*lease
	head  int
}

func (q *leaseFIFO) push(l *lease) { q.items = append(q.items, l) }
func (q *leaseFIFO) len() int      { return len(q.items) - q.head }
func (q *leaseFIFO) peek() *lease {
	if q.head == len(q.items) {
		return nil
	}
	return q.items[q.head]
}
func (q *leaseFIFO) pop() {
	q.items[q.head] = nil
	q.head++
	if q.head > 1024 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
}
