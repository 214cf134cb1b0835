package registrar

import (
	"slices"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/logpb"
)

// Limits on scopes and budgets (DESIGN §1.5: every input is bounded).
const (
	MaxScopeEntries = 64
	MaxCounters     = 32
	// MaxAmount bounds one limit or one charge, so that sums of them
	// never overflow.
	MaxAmount = int64(1) << 53
	// MaxTreeDepth bounds a lease tree's depth (a root is at depth 0), so
	// that walks up a chain stay short.
	MaxTreeDepth = 32
)

// Scope restricts what a lease authorizes. An empty list is unrestricted
// of that kind. Lists are sorted and free of duplicates.
type Scope struct {
	Namespaces       []string
	ResourcePrefixes []string
	Actions          []string
}

// Empty reports whether the scope restricts nothing.
func (s Scope) Empty() bool {
	return len(s.Namespaces) == 0 && len(s.ResourcePrefixes) == 0 && len(s.Actions) == 0
}

// Counter is one budget counter of a lease. A counter the lease does not
// limit (Limited false) only tracks what was used.
type Counter struct {
	Name     string
	Limit    int64
	Limited  bool
	Used     int64 // by the lease itself and by its ended descendants
	Reserved int64 // carved out to its active children
}

// Remaining is what the lease can still spend or carve: limit − used −
// reserved (meaningless for an unlimited counter).
func (c Counter) Remaining() int64 { return c.Limit - c.Used - c.Reserved }

// tree is a lease's place in a lease tree.
type tree struct {
	parent    *lease // nil for a root, or once the parent was pruned
	parentSeq uint64
	parentID  string
	children  []*lease // by seq, until pruned
	endedBy   string   // id of the ancestor whose end ended this lease
	scope     Scope
	counters  []Counter // by name
}

func (l *lease) node() *tree {
	if l.tree == nil {
		l.tree = &tree{}
	}
	return l.tree
}

// parent returns the lease's parent while it is not pruned.
func (l *lease) parent() *lease {
	if l.tree == nil {
		return nil
	}
	return l.tree.parent
}

// counter returns the named counter, or nil.
func (t *tree) counter(name string) *Counter {
	if t == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(t.counters, name, func(c Counter, n string) int { return strings.Compare(c.Name, n) })
	if !ok {
		return nil
	}
	return &t.counters[i]
}

// counterFor returns the named counter, adding an unlimited one if needed.
func (t *tree) counterFor(name string) *Counter {
	i, ok := slices.BinarySearchFunc(t.counters, name, func(c Counter, n string) int { return strings.Compare(c.Name, n) })
	if !ok {
		t.counters = slices.Insert(t.counters, i, Counter{Name: strings.Clone(name)})
	}
	return &t.counters[i]
}

// limiter returns the nearest strict ancestor of l that limits counter,
// or nil when none does.
func limiter(l *lease, counter string) *lease {
	for a := l.parent(); a != nil; a = a.parent() {
		if c := a.tree.counter(counter); c != nil && c.Limited {
			return a
		}
	}
	return nil
}

// deadlineWall is the wall time of deadline().
func (l *lease) deadlineWall() int64 {
	if l.extra != nil && l.extra.graceTick > l.expiresTick {
		return l.extra.graceWall
	}
	return l.expiresWall
}

// expiryCap is the deadline a child of l may not outlive: l's own deadline
// or, from rules 2 (statemachine.Rules), the earliest of l's and its
// ancestors', since an ancestor renewed out of its restart grace moves its
// deadline earlier than the descendants capped at that grace.
func (l *lease) expiryCap(rules uint32) (Tick, int64) {
	if rules >= 2 {
		return l.chainDeadlineWall()
	}
	return l.deadline(), l.deadlineWall()
}

// chainDeadline is the earliest deadline of the lease and its ancestors:
// a lease is honoured only while all of them are.
func (l *lease) chainDeadline() Tick {
	d, _ := l.chainDeadlineWall()
	return d
}

// chainDeadlineWall is chainDeadline with its wall time.
func (l *lease) chainDeadlineWall() (Tick, int64) {
	d, w := l.deadline(), l.deadlineWall()
	for a := l.parent(); a != nil; a = a.parent() {
		if a.state != Active {
			break
		}
		if ad := a.deadline(); ad < d {
			d, w = ad, a.deadlineWall()
		}
	}
	return d, w
}

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// canonicalList validates and sorts one scope list.
func canonicalList(field string, in []string, check func(string, string) error) ([]string, error) {
	if len(in) > MaxScopeEntries {
		return nil, invalid(field, "lists %d entries; the limit is %d", len(in), MaxScopeEntries)
	}
	for i, v := range in {
		if v == "" {
			return nil, invalid(field, "entry %d is empty", i)
		}
		if err := check(field, v); err != nil {
			return nil, err
		}
	}
	if len(in) == 0 {
		return nil, nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ValidateDerivation checks and canonicalises a requested scope and budget
// (lists sorted, duplicates dropped, limits sorted by counter).
func ValidateDerivation(d *logpb.Derivation) (*logpb.Derivation, error) {
	if d == nil {
		return nil, nil
	}
	out := &logpb.Derivation{ParentSeq: d.ParentSeq, ParentLeaseId: d.ParentLeaseId}
	var err error
	ident := func(f, v string) error { return CheckIdentifier(f, v, true) }
	if out.Namespaces, err = canonicalList("scope.namespaces", d.Namespaces, ident); err != nil {
		return nil, err
	}
	if out.ResourcePrefixes, err = canonicalList("scope.resource_prefixes", d.ResourcePrefixes, CheckResource); err != nil {
		return nil, err
	}
	if out.Actions, err = canonicalList("scope.actions", d.Actions, ident); err != nil {
		return nil, err
	}
	if len(d.Limits) > MaxCounters {
		return nil, invalid("budget.limits", "lists %d counters; the limit is %d", len(d.Limits), MaxCounters)
	}
	for _, cl := range d.Limits {
		if cl.Counter == "" {
			return nil, invalid("budget.limits", "a counter name is empty")
		}
		if err := CheckIdentifier("budget.limits", cl.Counter, true); err != nil {
			return nil, err
		}
		if cl.Limit < 0 || cl.Limit > MaxAmount {
			return nil, invalid("budget.limits", "counter %s has limit %d; limits are 0..%d", cl.Counter, cl.Limit, MaxAmount)
		}
		out.Limits = append(out.Limits, &logpb.CounterLimit{Counter: cl.Counter, Limit: cl.Limit})
	}
	slices.SortFunc(out.Limits, func(a, b *logpb.CounterLimit) int { return strings.Compare(a.Counter, b.Counter) })
	for i := 1; i < len(out.Limits); i++ {
		if out.Limits[i].Counter == out.Limits[i-1].Counter {
			return nil, invalid("budget.limits", "counter %s is listed twice", out.Limits[i].Counter)
		}
	}
	return out, nil
}

// emptyDerivation reports whether d carries nothing (no parent, no scope,
// no budget), so a lease issued with it is a plain lease.
func emptyDerivation(d *logpb.Derivation) bool {
	return d == nil || d.ParentSeq == 0 && len(d.Namespaces) == 0 && len(d.ResourcePrefixes) == 0 &&
		len(d.Actions) == 0 && len(d.Limits) == 0
}

// applyDerivation links a newly issued lease into its tree and reserves its
// limits out of its parent's (for the counters the parent limits).
func (r *Registrar) applyDerivation(l *lease, d *logpb.Derivation) {
	r.link(l, d, true)
}

// link sets l's scope and limits from d and links it under its parent;
// with reserve, its limits are reserved in the parent.
func (r *Registrar) link(l *lease, d *logpb.Derivation, reserve bool) {
	t := l.node()
	t.scope = Scope{
		Namespaces:       slices.Clone(d.Namespaces),
		ResourcePrefixes: slices.Clone(d.ResourcePrefixes),
		Actions:          slices.Clone(d.Actions),
	}
	t.counters = make([]Counter, 0, len(d.Limits))
	for _, cl := range d.Limits {
		t.counters = append(t.counters, Counter{Name: cl.Counter, Limit: cl.Limit, Limited: true})
	}
	slices.SortFunc(t.counters, func(a, b Counter) int { return strings.Compare(a.Name, b.Name) })
	if d.ParentSeq == 0 {
		return
	}
	p := r.leases[d.ParentSeq]
	t.parentSeq, t.parentID = d.ParentSeq, d.ParentLeaseId
	if p == nil {
		return
	}
	t.parent = p
	pt := p.node()
	pt.children = append(pt.children, l)
	if !reserve {
		return
	}
	for _, c := range t.counters {
		if pc := pt.counter(c.Name); pc != nil && pc.Limited {
			pc.Reserved += c.Limit
		}
	}
}

// settleEnded returns an ended lease's budget to its parent: what it
// reserved there is freed and what it used is added to the parent's used.
func (r *Registrar) settleEnded(l *lease, endedBy uint64) {
	t := l.tree
	if t == nil {
		return
	}
	if endedBy != 0 {
		t.endedBy = r.IDOfSeq(endedBy)
	}
	p := t.parent
	if p == nil {
		return
	}
	pt := p.node()
	for _, c := range t.counters {
		pc := pt.counter(c.Name)
		if c.Limited && pc != nil && pc.Limited {
			pc.Reserved -= c.Limit
		}
		if c.Used != 0 {
			if pc == nil {
				if len(pt.counters) >= MaxCounters {
					// A counter no lease of the chain limits (a limited
					// one is tracked all the way up), used by a child
					// only: what it used is not tracked past the limit.
					continue
				}
				pc = pt.counterFor(c.Name)
			}
			pc.Used = satAdd(pc.Used, c.Used)
		}
	}
}

// unlink detaches a pruned lease from its tree.
func (r *Registrar) unlink(l *lease) {
	t := l.tree
	if t == nil {
		return
	}
	if p := t.parent; p != nil && p.tree != nil {
		// Children are by seq and mostly pruned in the order they were
		// derived: usually the first one goes, which costs nothing.
		cs := p.tree.children
		if i, ok := slices.BinarySearchFunc(cs, l.seq, func(x *lease, s uint64) int { return cmpUint(x.seq, s) }); ok {
			if i == 0 {
				cs[0] = nil
				p.tree.children = cs[1:]
			} else {
				p.tree.children = slices.Delete(cs, i, i+1)
			}
		}
	}
	for _, c := range t.children {
		c.tree.parent = nil
	}
	t.children = nil
}

// derivationOf renders a lease's tree node as a record field (nil when it
// carries no parent, scope or limits).
func (r *Registrar) derivationOf(l *lease) *logpb.Derivation {
	t := l.tree
	if t == nil {
		return nil
	}
	d := &logpb.Derivation{
		ParentSeq: t.parentSeq, ParentLeaseId: t.parentID,
		Namespaces: t.scope.Namespaces, ResourcePrefixes: t.scope.ResourcePrefixes, Actions: t.scope.Actions,
	}
	for _, c := range t.counters {
		if c.Limited {
			d.Limits = append(d.Limits, &logpb.CounterLimit{Counter: c.Name, Limit: c.Limit})
		}
	}
	if emptyDerivation(d) {
		return nil
	}
	return d
}

// IDOfSeq formats the id of a lease known by its sequence. A pruned lease
// keeps no issue time, so only its sequence can be shown then.
func (r *Registrar) IDOfSeq(seq uint64) string {
	if l := r.leases[seq]; l != nil {
		return FormatLeaseID(l.issuedWall, r.tag, l.seq)
	}
	return "#" + strconv.FormatUint(seq, 10)
}
