package registrar

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Queries read the state as of tick t (the registrar's current time, which
// may be past the last applied record): a lease past its deadline reads
// Expired even before its expiry record is applied.

func sortNamespaces(ns []*namespace) {
	slices.SortFunc(ns, func(a, b *namespace) int { return strings.Compare(a.name, b.name) })
}

// Get returns the lease with the given id.
func (r *Registrar) Get(id string, t Tick) (Lease, error) {
	if err := CheckLeaseIDText("lease_id", id); err != nil {
		return Lease{}, err
	}
	l := r.lookup(id)
	if l == nil {
		return Lease{}, notFound(id)
	}
	return r.view(l, t), nil
}

// VerifyResult is the authoritative state of one requested id.
type VerifyResult struct {
	LeaseID string
	Found   bool
	Lease   Lease
}

// Verify answers the reality check a restarting holder makes: one result
// per id, in request order.
func (r *Registrar) Verify(ids []string, t Tick) ([]VerifyResult, error) {
	if err := checkBatch("lease_ids", len(ids)); err != nil {
		return nil, err
	}
	out := make([]VerifyResult, len(ids))
	for i, id := range ids {
		if err := CheckLeaseIDText("lease_ids["+strconv.Itoa(i)+"]", id); err != nil {
			return nil, err
		}
		out[i].LeaseID = id
		if l := r.lookup(id); l != nil {
			out[i].Found = true
			out[i].Lease = r.view(l, t)
		}
	}
	return out, nil
}

// Active returns the leases of a resource honoured at t, by fence.
func (r *Registrar) Active(ns, resource string, t Tick) []Lease {
	res := r.res(ns, resource)
	if res == nil {
		return nil
	}
	var out []Lease
	if res.excl != nil && res.excl.activeAt(t) {
		out = append(out, r.view(res.excl, t))
	}
	for _, l := range res.shared() {
		if l.activeAt(t) {
			out = append(out, r.view(l, t))
		}
	}
	return out
}

func (r *Registrar) res(ns, resource string) *resource {
	if n := r.namespaces[OrDefault(ns)]; n != nil {
		return n.resources[resource]
	}
	return nil
}

// ByHolder returns a holder's active leases in a namespace ("" = all).
func (r *Registrar) ByHolder(holder, ns string, t Tick) []Lease {
	var out []Lease
	for _, n := range r.namespacesFor(ns) {
		if h := n.holders[holder]; h != nil {
			for l := h.head; l != nil; l = l.hNext {
				if l.activeAt(t) {
					out = append(out, r.view(l, t))
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmpUint(a.Fence, b.Fence) })
	return out
}

// Fence answers CheckFence: whether fence belongs to an active lease of the
// resource, and the resource's highest active fence.
func (r *Registrar) Fence(ns, resource string, fence uint64, t Tick) (current bool, active uint64, err error) {
	if err := CheckIdentifier("namespace", ns, false); err != nil {
		return false, 0, err
	}
	if err := CheckResource("resource", resource); err != nil {
		return false, 0, err
	}
	for _, l := range r.Active(ns, resource, t) {
		if l.Fence == fence {
			current = true
		}
		active = max(active, l.Fence)
	}
	return current, active, nil
}

// ReadState returns a resource's guarded state and epoch.
func (r *Registrar) ReadState(ns, resource string) ([]byte, uint64, error) {
	if err := CheckIdentifier("namespace", ns, false); err != nil {
		return nil, 0, err
	}
	if err := CheckResource("resource", resource); err != nil {
		return nil, 0, err
	}
	if res := r.res(ns, resource); res != nil && res.guarded != nil {
		return slices.Clone(res.guarded.data), res.guarded.epoch, nil
	}
	return nil, 0, nil
}

// Due returns up to limit leases still marked active whose deadline is at
// or before t, earliest first; it costs O(k log n) for k due leases and
// does not change the heap. The leader's expirer proposes these.
func (r *Registrar) Due(t Tick, limit int) []Lease {
	var out []Lease
	// Walk the heap as a tree, visiting only due nodes, best first: the
	// frontier is itself a min-heap of node indices, so with a limit the
	// result is the earliest due leases, not whichever a depth-first walk
	// met first.
	type node struct {
		i   int   // index in the expiry heap
		pos int32 // index in the frontier
	}
	items := r.expiry.items
	frontier := timerHeap[*node]{
		less:  func(a, b *node) bool { return r.expiry.less(items[a.i], items[b.i]) },
		index: func(n *node) *int32 { return &n.pos },
	}
	visit := func(i int) {
		if i < len(items) && items[i].deadline() <= t {
			frontier.push(&node{i: i})
		}
	}
	visit(0)
	for frontier.Len() > 0 && len(out) < limit {
		n, _ := frontier.peek()
		frontier.remove(n)
		out = append(out, r.view(items[n.i], t))
		visit(2*n.i + 1)
		visit(2*n.i + 2)
	}
	return out
}

// NextPrune returns when the next terminal lease is due for pruning, and
// false when none is kept. Pruning follows the records' ticks.
func (r *Registrar) NextPrune() (Tick, bool) { return r.nextPrune, r.nextPrune != noPrune }

// NextDeadline returns the earliest deadline of an active lease or waiter,
// and false when there is none. The expirer sleeps until it.
func (r *Registrar) NextDeadline() (Tick, bool) {
	next, ok := Tick(0), false
	if l, lok := r.expiry.peek(); lok {
		next, ok = l.deadline(), true
	}
	if w, wok := r.deadlines.peek(); wok && (!ok || w.deadline < next) {
		next, ok = w.deadline, true
	}
	return next, ok
}

// ActiveCount returns how many leases are active, in all namespaces.
func (r *Registrar) ActiveCount() int { return r.expiry.Len() }

// WaiterCount returns how many acquires wait, in all namespaces.
func (r *Registrar) WaiterCount() int { return len(r.waiters) }

// Retained returns how many terminal leases all namespaces keep (until
// their retention passes, or their namespace's cap prunes them).
func (r *Registrar) Retained() int {
	n := 0
	for _, ns := range r.retiring.items {
		n += ns.retired.len()
	}
	return n
}

// Counts returns a namespace's leases by state and its waiters (as of the
// last applied record).
func (r *Registrar) Counts(ns string) (active, released, expired, revoked, waiters uint64) {
	n := r.namespaces[OrDefault(ns)]
	if n == nil {
		return
	}
	return n.counts[Active], n.counts[Released], n.counts[Expired], n.counts[Revoked], n.waiters
}

// Waiter is a queued acquire as seen by queries.
type Waiter struct {
	ID       uint64
	Holder   string
	Mode     Mode
	TTL      int64
	Deadline Tick
}

// Waiters returns a resource's wait queue, head first.
func (r *Registrar) Waiters(ns, resource string) []Waiter {
	res := r.res(ns, resource)
	if res == nil {
		return nil
	}
	out := make([]Waiter, len(res.waiters()))
	for i, w := range res.waiters() {
		out[i] = Waiter{ID: w.id, Holder: w.holder, Mode: w.mode, TTL: w.ttl, Deadline: w.deadline}
	}
	return out
}

// HolderLoad returns a holder's active leases and queued acquires in a
// namespace: what its quota counts.
func (r *Registrar) HolderLoad(holder, ns string) (active, waiting uint64) {
	if n := r.namespaces[OrDefault(ns)]; n != nil {
		if h := n.holders[holder]; h != nil {
			return h.active, h.waiting
		}
	}
	return 0, 0
}

// WaiterPending reports whether a waiter is still queued.
func (r *Registrar) WaiterPending(id uint64) bool { return r.waiters[id] != nil }

// ListQuery filters List.
type ListQuery struct {
	Namespace string
	Prefix    string
	// Resource, when set, is the one resource listed (exactly).
	Resource string
	Holder   string
	States   []State // empty = all
	// ExpiredUnmarked keeps only the leases past their expiry whose
	// expiry no record has marked yet (no lease.expired event): what the
	// leader's expirer has still to propose. They read Expired.
	ExpiredUnmarked bool
	PageSize        int
	PageToken       string
}

// MaxPageSize bounds a List page; DefaultPageSize is used for 0.
const (
	MaxPageSize     = 1000
	DefaultPageSize = 100
)

// List returns leases ordered by (resource, fence) with stable paging: the
// token names the last (resource, fence) returned, so pages neither skip
// nor repeat leases that exist across calls.
func (r *Registrar) List(q ListQuery, t Tick) (leases []Lease, next string, err error) {
	if err := CheckIdentifier("namespace", q.Namespace, false); err != nil {
		return nil, "", err
	}
	if err := CheckPrefix("prefix", q.Prefix); err != nil {
		return nil, "", err
	}
	if q.Resource != "" {
		if err := CheckResource("resource", q.Resource); err != nil {
			return nil, "", err
		}
	}
	if err := CheckIdentifier("holder", q.Holder, false); err != nil {
		return nil, "", err
	}
	for _, s := range q.States {
		if s < Active || s > Revoked {
			return nil, "", invalid("states", "unknown state %d", s)
		}
	}
	if q.PageSize < 0 || q.PageSize > MaxPageSize {
		return nil, "", invalid("page_size", "must be between 0 and %d", MaxPageSize)
	}
	size := q.PageSize
	if size == 0 {
		size = DefaultPageSize
	}
	startRes, startSeq, err := q.decodePageToken()
	if err != nil {
		return nil, "", err
	}
	ns := r.namespaces[OrDefault(q.Namespace)]
	if ns == nil {
		return nil, "", nil
	}
	if q.Resource != "" && !strings.HasPrefix(q.Resource, q.Prefix) {
		return nil, "", nil
	}
	if q.Holder != "" && q.Resource == "" && len(q.States) == 1 && q.States[0] == Active && !q.ExpiredUnmarked {
		leases, last := r.listActiveOf(ns.holders[q.Holder], q.Prefix, size, startRes, startSeq, t)
		if last != nil {
			next = q.encodePageToken(last.res.name, last.seq)
		}
		return leases, next, nil
	}
	want := func(s State) bool { return len(q.States) == 0 || slices.Contains(q.States, s) }
	from := max(q.Prefix, q.Resource, startRes)
	ns.ordered.AscendGreaterOrEqual(nameKey(from), func(e named) bool {
		res := e.res
		if !strings.HasPrefix(res.name, q.Prefix) || q.Resource != "" && res.name != q.Resource {
			return false
		}
		for _, l := range res.leases {
			if res.name == startRes && l.seq <= startSeq {
				continue
			}
			if q.Holder != "" && l.holder.name != q.Holder {
				continue
			}
			v := r.view(l, t)
			if !want(v.State) || q.ExpiredUnmarked && (l.state != Active || v.State != Expired) {
				continue
			}
			if len(leases) == size {
				last := leases[len(leases)-1]
				next = q.encodePageToken(last.Resource, last.Fence)
				return false
			}
			leases = append(leases, v)
		}
		return true
	})
	return leases, next, nil
}

// listActiveOf is List of one holder's active leases: it reads the
// holder's own list of them, not every resource of the namespace (with
// 100,000 leases, a holder filter that matched few took 8–18 ms, holding
// applies back). Same order, same paging: it returns the page and, when
// there are more, the page's last lease.
func (r *Registrar) listActiveOf(h *holderEntry, prefix string, size int, startRes string, startSeq uint64, t Tick) ([]Lease, *lease) {
	if h == nil {
		return nil, nil
	}
	var cand []*lease
	for l := h.head; l != nil; l = l.hNext {
		name := l.res.name
		if !strings.HasPrefix(name, prefix) || name < startRes || name == startRes && l.seq <= startSeq {
			continue
		}
		if d, _ := l.chainDeadlineWall(); t >= d {
			continue // expired, not yet marked: List shows it expired
		}
		cand = append(cand, l)
	}
	slices.SortFunc(cand, func(a, b *lease) int {
		if c := strings.Compare(a.res.name, b.res.name); c != 0 {
			return c
		}
		return cmpUint(a.seq, b.seq)
	})
	var last *lease
	if len(cand) > size {
		cand = cand[:size]
		last = cand[size-1]
	}
	out := make([]Lease, len(cand))
	for i, l := range cand {
		out[i] = r.view(l, t)
	}
	return out, last
}

// A List page token is the version byte, a checksum of the query's
// filters, and the (resource, fence) of the last lease returned. The
// checksum ties a token to its query: continuing with other filters, or
// with a token that was never issued, is INVALID_ARGUMENT rather than a
// page of something else. The page size may change between pages.
const pageTokenVersion = 1

func (q ListQuery) filterSum() uint32 {
	h := fnv.New32a()
	for _, f := range []string{OrDefault(q.Namespace), q.Prefix, q.Holder} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	if q.Resource != "" { // (left out when unset: tokens issued before it stay valid)
		h.Write([]byte(q.Resource))
		h.Write([]byte{1})
	}
	var states, all byte // a set: the order and repeats of States do not matter
	for _, st := range q.States {
		states |= 1 << st
	}
	for st := Active; st <= Revoked; st++ {
		all |= 1 << st
	}
	if states == all {
		states = 0 // every state, named or not
	}
	h.Write([]byte{states})
	if q.ExpiredUnmarked { // (left out when unset, as Resource)
		h.Write([]byte{2})
	}
	return h.Sum32()
}

func (q ListQuery) encodePageToken(res string, seq uint64) string {
	b := binary.BigEndian.AppendUint32([]byte{pageTokenVersion}, q.filterSum())
	b = binary.AppendUvarint(b, seq)
	b = append(b, res...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (q ListQuery) decodePageToken() (string, uint64, error) {
	if q.PageToken == "" {
		return "", 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(q.PageToken)
	if err != nil || len(b) < 5 || b[0] != pageTokenVersion {
		return "", 0, invalid("page_token", "is not a token this server issued")
	}
	if binary.BigEndian.Uint32(b[1:5]) != q.filterSum() {
		return "", 0, invalid("page_token", "was issued for other filters (namespace, prefix, resource, holder, states or expired_unmarked); start again without it")
	}
	seq, n := binary.Uvarint(b[5:])
	res := string(b[5+max(n, 0):])
	if n <= 0 || !strings.HasPrefix(res, q.Prefix) {
		return "", 0, invalid("page_token", "is not a token this server issued")
	}
	return res, seq, nil
}

// StateFromProto converts a wire state filter.
func StateFromProto(s tenurev1.State) State { return State(s) }
