package registrar

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

// scopeViolation builds a SCOPE_VIOLATION naming the rule.
func scopeViolation(leaseID, rule, value string, format string, args ...any) *Error {
	return newError(ReasonScopeViolation, map[string]string{"lease_id": leaseID, "rule": rule, "value": value}, format, args...)
}

// budgetExhausted builds a BUDGET_EXHAUSTED naming the lease that ran out.
func budgetExhausted(leaseID, counter string, c Counter, asked int64, format string, args ...any) *Error {
	return newError(ReasonBudgetExhausted, map[string]string{
		"lease_id": leaseID, "lease": leaseID, "counter": counter,
		"used": strconv.FormatInt(c.Used, 10), "reserved": strconv.FormatInt(c.Reserved, 10),
		"limit": strconv.FormatInt(c.Limit, 10), "requested": strconv.FormatInt(asked, 10),
	}, format, args...)
}

func (l *lease) scope() Scope {
	if l.tree == nil {
		return Scope{}
	}
	return l.tree.scope
}

// covers reports whether a prefix list allows v (empty list: anything).
func coversPrefix(prefixes []string, v string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

func coversExact(list []string, v string) bool {
	if len(list) == 0 {
		return true
	}
	_, ok := slices.BinarySearch(list, v)
	return ok
}

// narrow computes a child's effective scope from the parent's and the
// requested one: an empty requested list inherits the parent's, and a
// non-empty one must be covered by it.
func narrow(parentID string, p Scope, req *logpb.Derivation) (Scope, error) {
	out := Scope{Namespaces: req.Namespaces, ResourcePrefixes: req.ResourcePrefixes, Actions: req.Actions}
	if len(out.Namespaces) == 0 {
		out.Namespaces = p.Namespaces
	}
	for _, ns := range out.Namespaces {
		if !coversExact(p.Namespaces, ns) {
			return Scope{}, scopeViolation(parentID, "namespaces", ns,
				"namespace %q is outside the scope of lease %s (namespaces %v)", ns, parentID, p.Namespaces)
		}
	}
	if len(out.ResourcePrefixes) == 0 {
		out.ResourcePrefixes = p.ResourcePrefixes
	}
	for _, rp := range out.ResourcePrefixes {
		if !coversPrefix(p.ResourcePrefixes, rp) {
			return Scope{}, scopeViolation(parentID, "resource_prefixes", rp,
				"resource prefix %q is outside the scope of lease %s (resource prefixes %v)", rp, parentID, p.ResourcePrefixes)
		}
	}
	if len(out.Actions) == 0 {
		out.Actions = p.Actions
	}
	for _, a := range out.Actions {
		if !coversExact(p.Actions, a) {
			return Scope{}, scopeViolation(parentID, "actions", a,
				"action %q is outside the scope of lease %s (actions %v)", a, parentID, p.Actions)
		}
	}
	return out, nil
}

// checkResourceScope answers whether (ns, resource) is inside s.
func checkResourceScope(leaseID string, s Scope, ns, resource string) error {
	if !coversExact(s.Namespaces, ns) {
		return scopeViolation(leaseID, "namespaces", ns,
			"namespace %q is outside the scope of lease %s (namespaces %v)", ns, leaseID, s.Namespaces)
	}
	if !coversPrefix(s.ResourcePrefixes, resource) {
		return scopeViolation(leaseID, "resource_prefixes", resource,
			"resource %q is outside the scope of lease %s (resource prefixes %v)", resource, leaseID, s.ResourcePrefixes)
	}
	return nil
}

// carve checks that the parent can hand each requested limit to a child.
func (r *Registrar) carve(p *lease, parentID string, limits []*logpb.CounterLimit) error {
	for _, cl := range limits {
		if pc := p.tree.counter(cl.Counter); pc != nil && pc.Limited {
			if cl.Limit > pc.Remaining() {
				return budgetExhausted(parentID, cl.Counter, *pc, cl.Limit,
					"lease %s has %d %s left (limit %d, used %d, reserved %d); the child asks for %d",
					parentID, pc.Remaining(), cl.Counter, pc.Limit, pc.Used, pc.Reserved, cl.Limit)
			}
			continue
		}
		if a := limiter(p, cl.Counter); a != nil {
			aid := FormatLeaseID(a.issuedWall, r.tag, a.seq)
			return budgetExhausted(parentID, cl.Counter, Counter{Name: cl.Counter, Limited: true}, cl.Limit,
				"lease %s has no %s to carve: the counter is limited by ancestor %s and was not carved to it",
				parentID, cl.Counter, aid)
		}
	}
	return nil
}

// Derive issues a child lease under an active parent for the parent's
// holder (CTR: DESIGN §1.6). The child's scope is the requested one with
// empty lists inherited, and must lie inside the parent's, as must the
// child's own namespace and resource (SCOPE_VIOLATION); its limits are
// reserved out of the parent's remaining budget (BUDGET_EXHAUSTED); its
// expiry is capped at the parent's deadline.
func (r *Registrar) Derive(tx *Tx, c *logpb.Derive) Outcome {
	if err := CheckLeaseIDText("parent_lease_id", c.ParentLeaseId); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("holder", c.Holder, true); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("new_holder", c.NewHolder, false); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("namespace", c.Namespace, false); err != nil {
		return fail(err)
	}
	if err := CheckResource("resource", c.Resource); err != nil {
		return fail(err)
	}
	if c.Mode != tenurev1.Mode_MODE_UNSPECIFIED {
		if err := checkMode("mode", Mode(c.Mode)); err != nil {
			return fail(err)
		}
	}
	if c.TtlMs != nil && *c.TtlMs <= 0 {
		return fail(newError(ReasonTTLOutOfRange, map[string]string{"field": "ttl"}, "ttl must be positive, got %s", Dur(*c.TtlMs)))
	}
	req, err := ValidateDerivation(c.Derivation)
	if err != nil {
		return fail(err)
	}
	if req == nil {
		req = &logpb.Derivation{}
	}
	p := r.lookup(c.ParentLeaseId)
	if err := r.checkLive(c.ParentLeaseId, p, c.Holder, tx.Tick); err != nil {
		return fail(err)
	}
	parentID := FormatLeaseID(p.issuedWall, r.tag, p.seq)
	depth := 1
	for a := p.parent(); a != nil; a = a.parent() {
		depth++
	}
	if depth > MaxTreeDepth {
		return fail(quota("max_tree_depth", MaxTreeDepth, map[string]string{"lease_id": parentID}, "lease %s is already %d levels deep; the limit is %d", parentID, depth-1, MaxTreeDepth))
	}
	nsName := c.Namespace
	if nsName == "" {
		nsName = p.res.ns.name
	}
	holder := c.NewHolder
	if holder == "" {
		holder = c.Holder
	}
	scope, err := narrow(parentID, p.scope(), req)
	if err != nil {
		return fail(err)
	}
	if err := checkResourceScope(parentID, p.scope(), nsName, c.Resource); err != nil {
		return fail(err)
	}
	if err := r.carve(p, parentID, req.Limits); err != nil {
		return fail(err)
	}
	pol := r.Policy(nsName)
	ttl, err := ttlFor(pol, "ttl", c.TtlMs)
	if err != nil {
		return fail(err)
	}
	mode := Mode(c.Mode)
	if mode == 0 {
		mode = Exclusive
	}
	ns := r.namespaces[nsName]
	if ns != nil {
		if res := ns.resources[c.Resource]; res != nil && !(len(res.waiters()) == 0 && compatible(res, mode)) {
			return fail(r.held(res, tx.Tick, false))
		}
	}
	if err := r.checkQuota(ns, holder); err != nil {
		return fail(err)
	}
	d := &logpb.Derivation{
		ParentSeq: p.seq, ParentLeaseId: parentID,
		Namespaces: scope.Namespaces, ResourcePrefixes: scope.ResourcePrefixes, Actions: scope.Actions,
		Limits: req.Limits,
	}
	capTick, capWall := p.expiryCap(tx.Rules)
	l, id := r.issue(tx, issueArgs{
		ns: nsName, resource: c.Resource, holder: holder, mode: mode, ttl: ttl,
		maxRenewals: pol.MaxRenewals, maxLifetime: pol.MaxLifetime, deriv: d, capTick: capTick, capWall: capWall,
	})
	if tx.err != nil {
		return fail(tx.err)
	}
	v := r.viewID(l, tx.Tick, id)
	return Outcome{Lease: &v}
}

// Consume charges amount of a counter to an active lease. The lease spends
// only what it holds: for a counter it limits, limit − used − reserved;
// a counter it does not limit is unlimited unless an ancestor limits it,
// in which case it was not carved to this lease and nothing is spendable.
// On BUDGET_EXHAUSTED nothing is charged.
func (r *Registrar) Consume(tx *Tx, c *logpb.Consume) Outcome {
	if err := CheckLeaseIDText("lease_id", c.LeaseId); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("counter", c.Counter, true); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("holder", c.Holder, false); err != nil {
		return fail(err)
	}
	if c.Amount <= 0 || c.Amount > MaxAmount {
		return fail(invalid("amount", "must be in 1..%d, got %d", MaxAmount, c.Amount))
	}
	l := r.lookup(c.LeaseId)
	if err := r.checkLive(c.LeaseId, l, c.Holder, tx.Tick); err != nil {
		return fail(err)
	}
	if l.chainDeadline() <= tx.Tick { // an ancestor's deadline passed (its end is not applied yet)
		return fail(newError(ReasonLeaseExpired, map[string]string{"lease_id": c.LeaseId}, "lease %s expired with an ancestor", c.LeaseId))
	}
	cc := l.tree.counter(c.Counter)
	if cc == nil && tx.Rules >= 2 && l.tree != nil && len(l.tree.counters) >= MaxCounters {
		// Every input is bounded (DESIGN §1.5): a lease tracks at most
		// MaxCounters counters, as a budget limits at most as many.
		return fail(quota("max_counters", MaxCounters, map[string]string{"lease_id": c.LeaseId, "counter": c.Counter},
			"lease %s already tracks %d counters; the limit is %d", c.LeaseId, len(l.tree.counters), MaxCounters))
	}
	if cc != nil && cc.Limited {
		if c.Amount > cc.Remaining() {
			return fail(budgetExhausted(c.LeaseId, c.Counter, *cc, c.Amount,
				"lease %s has %d %s left (limit %d, used %d, reserved %d); asked for %d",
				c.LeaseId, cc.Remaining(), c.Counter, cc.Limit, cc.Used, cc.Reserved, c.Amount))
		}
	} else if a := limiter(l, c.Counter); a != nil {
		aid := FormatLeaseID(a.issuedWall, r.tag, a.seq)
		var used int64
		if cc != nil {
			used = cc.Used
		}
		return fail(budgetExhausted(c.LeaseId, c.Counter, Counter{Name: c.Counter, Limited: true, Used: used}, c.Amount,
			"lease %s has no %s: the counter is limited by ancestor %s and was not carved to it", c.LeaseId, c.Counter, aid))
	}
	tx.Emit(&logpb.Record{Body: &logpb.Record_Consumed{Consumed: &logpb.LeaseConsumed{
		Lease: r.ref(l), Counter: c.Counter, Amount: c.Amount,
	}}})
	if tx.err != nil {
		return fail(tx.err)
	}
	v := r.view(l, tx.Tick)
	return Outcome{Lease: &v}
}

func (r *Registrar) applyConsumed(rec *logpb.Record, lc *logpb.LeaseConsumed) error {
	l, err := r.liveLease(lc.GetLease())
	if err != nil {
		return err
	}
	if lc.Amount <= 0 || lc.Counter == "" {
		return fmt.Errorf("record %d: consumes %d of counter %q", rec.Index, lc.Amount, lc.Counter)
	}
	cc := l.node().counterFor(lc.Counter)
	cc.Used = satAdd(cc.Used, lc.Amount)
	return nil
}

// Authorize answers whether an active lease's scope allows a resource (in
// ns, default the lease's namespace) and/or an action. A denial is not an
// error: it comes back as a *Error with reason SCOPE_VIOLATION naming the
// rule. A lease that is not active answers LEASE_EXPIRED/LEASE_TERMINAL,
// an unknown one LEASE_NOT_FOUND.
func (r *Registrar) Authorize(id, ns, resource, action string, t Tick) (denied *Error, err error) {
	if err := CheckLeaseIDText("lease_id", id); err != nil {
		return nil, err
	}
	if err := CheckIdentifier("namespace", ns, false); err != nil {
		return nil, err
	}
	if resource != "" {
		if err := CheckResource("resource", resource); err != nil {
			return nil, err
		}
	}
	if err := CheckIdentifier("action", action, false); err != nil {
		return nil, err
	}
	if resource == "" && action == "" {
		return nil, invalid("resource", "name a resource or an action to authorize")
	}
	l := r.lookup(id)
	if err := r.checkLive(id, l, "", t); err != nil {
		return nil, err
	}
	if l.chainDeadline() <= t {
		return nil, newError(ReasonLeaseExpired, map[string]string{"lease_id": id}, "lease %s expired with an ancestor", id)
	}
	s := l.scope()
	if resource != "" {
		if ns == "" {
			ns = l.res.ns.name
		}
		if err := checkResourceScope(id, s, ns, resource); err != nil {
			return ToError(err), nil
		}
	}
	if action != "" && !coversExact(s.Actions, action) {
		return scopeViolation(id, "actions", action, "action %q is outside the scope of lease %s (actions %v)", action, id, s.Actions), nil
	}
	return nil, nil
}

// Tree returns a lease and its descendants that are not yet pruned, depth
// first, parents before children, children by fence.
func (r *Registrar) Tree(id string, t Tick) ([]Lease, error) {
	if err := CheckLeaseIDText("lease_id", id); err != nil {
		return nil, err
	}
	l := r.lookup(id)
	if l == nil {
		return nil, notFound(id)
	}
	var out []Lease
	var walk func(*lease)
	walk = func(x *lease) {
		out = append(out, r.view(x, t))
		if x.tree != nil {
			for _, c := range x.tree.children {
				walk(c)
			}
		}
	}
	walk(l)
	return out, nil
}

// endDescendants ends l's active descendants, deepest first, each with
// l's terminal state and reason and a note of the ancestor that ended it
// (top): so when l's own record is applied, everything its subtree used
// has already come back to it.
func (r *Registrar) endDescendants(tx *Tx, l *lease, e *logpb.LeaseEnded, top uint64) {
	if l.tree == nil {
		return
	}
	for _, c := range slices.Clone(l.tree.children) {
		if c.state != Active || tx.err != nil {
			continue
		}
		r.end(tx, c, &logpb.LeaseEnded{
			State: e.State, Reason: e.Reason, RevokeReason: e.RevokeReason, EndedBy: top,
		}, true)
	}
}

// carryOver is what the successor of a transferred lease inherits: its
// place in the tree and scope, and as limits what the old lease had left
// (its subtree has ended, so nothing is reserved), so a transfer never
// widens a budget; the parent's accounting is unchanged by the swap.
func (r *Registrar) carryOver(old *lease, rules uint32) (*logpb.Derivation, Tick, int64) {
	d := r.derivationOf(old)
	if d == nil {
		return nil, 0, 0
	}
	for _, cl := range d.Limits {
		if c := old.tree.counter(cl.Counter); c != nil {
			cl.Limit = max(0, c.Limit-c.Used)
		}
	}
	if p := old.parent(); p != nil {
		capTick, capWall := p.expiryCap(rules)
		return d, capTick, capWall
	}
	return d, 0, 0
}
