package registrar

import (
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

// Outcome is what a command answers. Err is set on rejection, and then the
// command changed nothing (besides expiries due at its tick, which every
// command applies first).
type Outcome struct {
	Err error
	// Lease is the granted, renewed, released or revoked lease.
	Lease *Lease
	// Released is the old lease of a transfer.
	Released *Lease
	// WaiterID is set when an acquire joined the wait queue.
	WaiterID uint64
	// AlreadyTerminal is set when a release found the lease already ended.
	AlreadyTerminal bool
	// Leases and Failures answer batch commands (renew, expire, restart).
	Leases   []Lease
	Failures []Failure
	// Epoch is the new guarded-state epoch of a write.
	Epoch uint64
}

// Failure is one rejected item of a batch.
type Failure struct {
	LeaseID string
	Err     error
}

func fail(err error) Outcome { return Outcome{Err: err} }

func (r *Registrar) lookup(id string) *lease {
	wall, tag, seq, err := ParseLeaseID(id)
	if err != nil || tag != r.tag {
		return nil
	}
	if l := r.leases[seq]; l != nil && l.issuedWall == wall {
		return l
	}
	return nil
}

// pruned reports whether id is well formed and names a lease this
// registrar issued and has since pruned.
func (r *Registrar) pruned(id string) bool {
	_, tag, seq, err := ParseLeaseID(id)
	return err == nil && tag == r.tag && seq > 0 && seq < r.nextSeq && r.leases[seq] == nil
}

func notFound(id string) error {
	return newError(ReasonLeaseNotFound, map[string]string{"lease_id": id}, "no lease %s", id)
}

func (r *Registrar) ref(l *lease) *logpb.LeaseRef {
	x := &logpb.LeaseRef{}
	r.setRef(x, l)
	return x
}

// Advance applies everything due by the transaction's tick, in time order:
// leases past their deadline expire (handing their resource to waiters)
// and waiters whose wait ran out leave their queue. Every command starts
// with it, so expiry is exact even when the leader's expirer is late.
func (r *Registrar) Advance(tx *Tx) {
	for tx.err == nil {
		l, lok := r.expiry.peek()
		w, wok := r.deadlines.peek()
		lDue := lok && l.deadline() <= tx.Tick
		wDue := wok && w.deadline <= tx.Tick
		switch {
		case wDue && (!lDue || w.deadline <= l.deadline()):
			res := w.res
			tx.Emit(&logpb.Record{Body: &logpb.Record_WaitEnded{WaitEnded: &logpb.WaiterEnded{
				WaiterId: w.id, Namespace: w.res.ns.name, Resource: w.res.name, Holder: w.holder,
			}}})
			// A departed exclusive head may have been all that kept the
			// shared waiters behind it from joining the active shared leases.
			r.handoff(tx, res)
		case lDue:
			r.end(tx, l, &logpb.LeaseEnded{State: tenurev1.State_STATE_EXPIRED}, true)
		default:
			return
		}
	}
}

// end emits the record that ends l, tells the sibling domains, and, when
// handoff is set, grants the resource to its waiters in the same step.
// It returns the lease's id.
func (r *Registrar) end(tx *Tx, l *lease, e *logpb.LeaseEnded, handoff bool) string {
	if l.tree != nil {
		top := e.EndedBy
		if top == 0 {
			top = l.seq
		}
		r.endDescendants(tx, l, e, top)
	}
	tx.Emit(r.endedRec(l, e))
	if len(r.onEnd) > 0 {
		v := r.viewID(l, tx.Tick, e.Lease.LeaseId)
		for _, f := range r.onEnd {
			f(tx, v)
		}
	}
	if handoff {
		r.handoff(tx, l.res)
	}
	return e.Lease.LeaseId
}

// compatible reports whether a lease of mode m can be granted next to the
// resource's active leases.
func compatible(res *resource, m Mode) bool {
	if m == Shared {
		return res.excl == nil
	}
	return res.excl == nil && len(res.shared()) == 0
}

// handoff grants the head of the resource's queue while it is compatible:
// one exclusive waiter, or a run of shared ones.
func (r *Registrar) handoff(tx *Tx, res *resource) {
	for tx.err == nil && len(res.waiters()) > 0 {
		w := res.waiters()[0]
		if !compatible(res, w.mode) {
			return
		}
		r.issue(tx, issueArgs{
			ns: res.ns.name, resource: res.name, holder: w.holder, mode: w.mode, ttl: w.ttl,
			maxRenewals: w.maxRenewals, maxLifetime: w.maxLifetime, waiterID: w.id, deriv: w.deriv,
		})
	}
}

type issueArgs struct {
	ns, resource, holder string
	mode                 Mode
	ttl                  int64
	maxRenewals          uint32
	maxLifetime          int64
	waiterID             uint64
	transferredFrom      uint64
	// renewals and lifeFrom continue a predecessor's limits (a transfer
	// that carries them over): the renewal count it starts with, and the
	// tick its lifetime counts from (0: now).
	renewals     uint32
	lifeFrom     Tick
	lifeFromWall int64
	// deriv places the lease in a lease tree (parent, scope, limits).
	deriv *logpb.Derivation
	// capTick, when set, caps the expiry (a child never outlives its
	// parent); a capped expiry takes capWall as its wall time, so the
	// two read alike.
	capTick Tick
	capWall int64
}

// issue emits a new lease and returns it with its id.
func (r *Registrar) issue(tx *Tx, a issueArgs) (*lease, string) {
	seq := r.nextSeq
	exp := tx.Tick + Tick(a.ttl)
	if a.maxLifetime > 0 {
		from := tx.Tick
		if a.lifeFrom != 0 {
			from = a.lifeFrom
		}
		exp = min(exp, from+Tick(a.maxLifetime))
	}
	expWall := tx.Wall + int64(exp-tx.Tick)
	if a.capTick != 0 && exp >= a.capTick {
		exp, expWall = a.capTick, a.capWall
	}
	id := FormatLeaseID(tx.Wall, r.tag, seq)
	x := &issuedRecord{msg: logpb.LeaseIssued{
		Seq:             seq,
		LeaseId:         id,
		Namespace:       a.ns,
		Resource:        a.resource,
		Holder:          a.holder,
		Mode:            tenurev1.Mode(a.mode),
		TtlMs:           a.ttl,
		ExpiresTick:     int64(exp),
		ExpiresWall:     expWall,
		MaxRenewals:     a.maxRenewals,
		MaxLifetimeMs:   a.maxLifetime,
		WaiterId:        a.waiterID,
		TransferredFrom: a.transferredFrom,
		Derivation:      a.deriv,
		RenewalCount:    a.renewals,
	}}
	if a.lifeFrom != 0 && a.lifeFrom != tx.Tick {
		x.msg.LifetimeFromTick, x.msg.LifetimeFromWall = int64(a.lifeFrom), a.lifeFromWall
	}
	x.body.Issued = &x.msg
	x.rec.Body = &x.body
	tx.Emit(&x.rec)
	return r.leases[seq], id
}

// ttlFor resolves a requested ttl against the policy.
func ttlFor(p Policy, field string, req *int64) (int64, error) {
	if req == nil {
		return p.DefaultTTL, nil
	}
	if *req < p.MinTTL || *req > p.MaxTTL {
		return 0, newError(ReasonTTLOutOfRange, map[string]string{
			"field": field, "ttl_ms": strconv.FormatInt(*req, 10),
			"min_ttl_ms": strconv.FormatInt(p.MinTTL, 10), "max_ttl_ms": strconv.FormatInt(p.MaxTTL, 10),
		}, "%s %s is outside [%s, %s]", field, Dur(*req), Dur(p.MinTTL), Dur(p.MaxTTL))
	}
	return *req, nil
}

// quota is a QUOTA_EXCEEDED error; scope names what the quota was
// counted on (namespace, holder, resource, lease_id), as metadata.
func quota(what string, limit uint64, scope map[string]string, format string, args ...any) error {
	meta := map[string]string{"quota": what, "limit": strconv.FormatUint(limit, 10)}
	for k, v := range scope {
		meta[k] = v
	}
	return newError(ReasonQuotaExceeded, meta, format, args...)
}

// checkQuota enforces the per-holder and per-namespace active-lease quotas.
func (r *Registrar) checkQuota(ns *namespace, holder string) error {
	if ns == nil {
		return nil
	}
	p := ns.policy
	// Queued acquires count: each will become an active lease when granted.
	if h := ns.holders[holder]; h != nil && h.active+h.waiting >= p.MaxActivePerHolder {
		return quota("max_active_per_holder", p.MaxActivePerHolder, map[string]string{"namespace": ns.name, "holder": holder},
			"holder %s has %d active and %d queued leases in namespace %s; the limit is %d",
			holder, h.active, h.waiting, ns.name, p.MaxActivePerHolder)
	}
	if n := ns.counts[Active] + ns.waiters; n >= p.MaxActivePerNamespace {
		return quota("max_active_per_namespace", p.MaxActivePerNamespace, map[string]string{"namespace": ns.name},
			"namespace %s has %d active and %d queued leases; the limit is %d", ns.name, ns.counts[Active], ns.waiters, p.MaxActivePerNamespace)
	}
	return nil
}

// ValidateAcquire checks an acquire's fields without looking at state.
func ValidateAcquire(c *logpb.Acquire) error {
	if err := CheckIdentifier("namespace", c.Namespace, false); err != nil {
		return err
	}
	if err := CheckResource("resource", c.Resource); err != nil {
		return err
	}
	if err := CheckIdentifier("holder", c.Holder, true); err != nil {
		return err
	}
	if c.Mode != tenurev1.Mode_MODE_UNSPECIFIED {
		if err := checkMode("mode", Mode(c.Mode)); err != nil {
			return err
		}
	}
	if c.TtlMs != nil && *c.TtlMs <= 0 {
		return newError(ReasonTTLOutOfRange, map[string]string{"field": "ttl", "ttl_ms": strconv.FormatInt(*c.TtlMs, 10)},
			"ttl must be positive, got %s", Dur(*c.TtlMs))
	}
	if d := c.Derivation; d != nil && (d.ParentSeq != 0 || d.ParentLeaseId != "") {
		return invalid("derivation", "an acquire issues a root lease; derive a child with Derive")
	}
	if _, err := ValidateDerivation(c.Derivation); err != nil {
		return err
	}
	if c.TtlMs != nil && *c.TtlMs > maxDurationMs {
		// Above any policy max: the same answer as any other ttl above it (API.md).
		return newError(ReasonTTLOutOfRange, map[string]string{"field": "ttl", "ttl_ms": strconv.FormatInt(*c.TtlMs, 10)},
			"ttl %dms is longer than any policy allows", *c.TtlMs)
	}
	return checkDurationMs("wait", c.WaitMs, true)
}

// Acquire grants a lease on a resource, queues the request when it waits,
// or answers a *HeldError naming the lease in the way.
func (r *Registrar) Acquire(tx *Tx, c *logpb.Acquire) Outcome {
	if err := ValidateAcquire(c); err != nil {
		return fail(err)
	}
	nsName := OrDefault(c.Namespace)
	p := r.Policy(nsName)
	ttl, err := ttlFor(p, "ttl", c.TtlMs)
	if err != nil {
		return fail(err)
	}
	deriv, _ := ValidateDerivation(c.Derivation) // checked by ValidateAcquire
	if emptyDerivation(deriv) {
		deriv = nil
	}
	mode := Mode(c.Mode)
	if mode == 0 {
		mode = Exclusive
	}
	ns := r.namespaces[nsName]
	var res *resource
	if ns != nil {
		res = ns.resources[c.Resource]
	}
	free := res == nil || (len(res.waiters()) == 0 && compatible(res, mode))
	if !free && c.WaitMs <= 0 {
		// LEASE_HELD before the quota: a holder at its quota retrying an
		// acquire whose outcome it did not learn must still find its lease.
		e := r.held(res, tx.Tick, false)
		e.QueuedAhead = compatible(res, mode)
		return fail(e)
	}
	if err := r.checkQuota(ns, c.Holder); err != nil {
		return fail(err)
	}
	if free {
		l, id := r.issue(tx, issueArgs{
			ns: nsName, resource: c.Resource, holder: c.Holder, mode: mode, ttl: ttl,
			maxRenewals: p.MaxRenewals, maxLifetime: p.MaxLifetime, deriv: deriv,
		})
		if tx.err != nil {
			return fail(tx.err)
		}
		v := r.viewID(l, tx.Tick, id)
		return Outcome{Lease: &v}
	}
	if c.WaitMs > 0 {
		if uint64(len(res.waiters())) >= p.MaxWaitersPerResource {
			return fail(quota("max_waiters_per_resource", p.MaxWaitersPerResource,
				map[string]string{"namespace": nsName, "resource": c.Resource},
				"%s has %d waiters; the limit is %d", c.Resource, len(res.waiters()), p.MaxWaitersPerResource))
		}
		id := r.nextWaiter
		tx.Emit(&logpb.Record{Body: &logpb.Record_Waiting{Waiting: &logpb.WaiterQueued{
			WaiterId: id, Namespace: nsName, Resource: c.Resource, Holder: c.Holder,
			Mode: tenurev1.Mode(mode), TtlMs: ttl, DeadlineTick: int64(tx.Tick) + c.WaitMs,
			MaxRenewals: p.MaxRenewals, MaxLifetimeMs: p.MaxLifetime, Derivation: deriv,
		}}})
		return Outcome{WaiterID: id, Err: tx.err}
	}
	return fail(r.held(res, tx.Tick, false))
}

// held describes what holds res.
func (r *Registrar) held(res *resource, t Tick, waitEnded bool) *HeldError {
	e := &HeldError{Namespace: res.ns.name, Resource: res.name, Waiters: len(res.waiters()), WaitEnded: waitEnded}
	l := res.excl
	if l == nil && len(res.shared()) > 0 {
		l = res.shared()[0]
	}
	if l != nil {
		v := r.view(l, t)
		e.LeaseID, e.Holder, e.Fence, e.Mode, e.Remaining = v.ID, v.Holder, v.Fence, v.Mode, v.Remaining
	}
	return e
}

// WaitEnded builds the error a waiter gets when its wait runs out.
func (r *Registrar) WaitEnded(ns, resource string, t Tick) error {
	if n := r.namespaces[ns]; n != nil {
		if res := n.resources[resource]; res != nil {
			return r.held(res, t, true)
		}
	}
	return &HeldError{Namespace: ns, Resource: resource, WaitEnded: true}
}

// CancelWait withdraws a queued acquire of holder (its caller went away).
// A waiter already granted or ended is a successful no-op; the caller
// then releases any lease the wait produced.
func (r *Registrar) CancelWait(tx *Tx, c *logpb.CancelWait) Outcome {
	if err := CheckIdentifier("holder", c.Holder, true); err != nil {
		return fail(err)
	}
	w := r.waiters[c.WaiterId]
	if w == nil {
		return Outcome{}
	}
	if w.holder != c.Holder {
		return fail(newError(ReasonNotHolder, map[string]string{"waiter_id": strconv.FormatUint(c.WaiterId, 10)},
			"waiter %d belongs to %s, not %s", c.WaiterId, w.holder, c.Holder))
	}
	res := w.res
	tx.Emit(&logpb.Record{Body: &logpb.Record_WaitEnded{WaitEnded: &logpb.WaiterEnded{
		WaiterId: w.id, Namespace: res.ns.name, Resource: res.name, Holder: w.holder,
	}}})
	// The waiter may have been all that kept later waiters back.
	r.handoff(tx, res)
	return Outcome{Err: tx.err}
}

// Renew extends leases: the listed ids, or every active lease of a holder.
// A single-id renew reports its failure as Err; a batch lists failures.
func (r *Registrar) Renew(tx *Tx, c *logpb.Renew) Outcome {
	if err := checkBatch("lease_ids", len(c.LeaseIds)); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("holder", c.Holder, c.AllOfHolder); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("namespace", c.Namespace, false); err != nil {
		return fail(err)
	}
	if c.TtlMs != nil && *c.TtlMs <= 0 {
		return fail(newError(ReasonTTLOutOfRange, map[string]string{"field": "ttl"}, "ttl must be positive, got %s", Dur(*c.TtlMs)))
	}
	if len(c.LeaseIds) == 0 && !c.AllOfHolder {
		return fail(invalid("lease_ids", "name at least one lease, or set all_of_holder"))
	}
	for _, id := range c.LeaseIds {
		if err := CheckLeaseIDText("lease_ids", id); err != nil {
			return fail(err)
		}
	}
	var out Outcome
	renew := func(id string, l *lease) {
		v, err := r.renewOne(tx, id, l, c.Holder, c.TtlMs)
		if err != nil {
			out.Failures = append(out.Failures, Failure{LeaseID: id, Err: err})
		} else {
			out.Leases = append(out.Leases, v)
		}
	}
	for _, id := range c.LeaseIds {
		renew(id, r.lookup(id))
	}
	if c.AllOfHolder {
		for _, ns := range r.namespacesFor(c.Namespace) {
			if h := ns.holders[c.Holder]; h != nil {
				for l := h.head; l != nil; l = l.hNext {
					// Named, so that a failure says which lease it is about.
					renew(FormatLeaseID(l.issuedWall, r.tag, l.seq), l)
				}
			}
		}
	}
	if tx.err != nil {
		return fail(tx.err)
	}
	if len(c.LeaseIds) == 1 && !c.AllOfHolder {
		if len(out.Failures) == 1 {
			return fail(out.Failures[0].Err)
		}
		out.Lease = &out.Leases[0]
	}
	return out
}

// namespacesFor returns the named namespace, or all of them (sorted, so
// batch results are deterministic) for "".
func (r *Registrar) namespacesFor(name string) []*namespace {
	if name != "" {
		if ns := r.namespaces[name]; ns != nil {
			return []*namespace{ns}
		}
		return nil
	}
	out := make([]*namespace, 0, len(r.namespaces))
	for _, ns := range r.namespaces {
		out = append(out, ns)
	}
	sortNamespaces(out)
	return out
}

// checkLive answers why a lease cannot be renewed or transferred at t.
func (r *Registrar) checkLive(id string, l *lease, holder string, t Tick) error {
	if l == nil {
		return notFound(id)
	}
	if holder != "" && l.holder.name != holder {
		return newError(ReasonNotHolder, map[string]string{"lease_id": id, "holder": l.holder.name},
			"lease %s is held by %s, not %s", id, l.holder.name, holder)
	}
	switch {
	case l.state == Expired || l.state == Active && !l.activeAt(t):
		return newError(ReasonLeaseExpired, map[string]string{"lease_id": id},
			"lease %s expired at %s", id, WallTime(l.expiresWall).Format("2006-01-02T15:04:05.000Z07:00"))
	case l.state.Terminal():
		why := ""
		if l.extra != nil && l.extra.revokeReason != "" {
			why = ": " + l.extra.revokeReason // as the KeepAlive stream's notice says it
		}
		return newError(ReasonLeaseTerminal, map[string]string{"lease_id": id, "state": l.state.String()},
			"lease %s is %s%s", id, l.state, why)
	}
	return nil
}

func (r *Registrar) renewOne(tx *Tx, id string, l *lease, holder string, ttlReq *int64) (Lease, error) {
	if l != nil && id == "" {
		id = FormatLeaseID(l.issuedWall, r.tag, l.seq)
	}
	if err := r.checkLive(id, l, holder, tx.Tick); err != nil {
		return Lease{}, err
	}
	ttl := l.ttl
	if ttlReq != nil {
		var err error
		if ttl, err = ttlFor(l.res.ns.policy, "ttl", ttlReq); err != nil {
			return Lease{}, err
		}
	}
	want := tx.Tick + Tick(ttl)
	var capWall int64
	if p := l.parent(); p != nil {
		if capTick, w := p.expiryCap(tx.Rules); want >= capTick {
			want, capWall = capTick, w // a child never outlives its parent
		}
	}
	if want == l.expiresTick {
		// A retry within the same tick: a successful no-op that does not
		// count as a renewal (API.md), even after the last allowed one.
		return r.view(l, tx.Tick), nil
	}
	if l.maxRenewals > 0 && l.renewals >= l.maxRenewals {
		count, limit := strconv.FormatUint(uint64(l.renewals), 10), strconv.FormatUint(uint64(l.maxRenewals), 10)
		return Lease{}, newError(ReasonRenewalLimitExceeded, map[string]string{
			"lease_id": id, "count": count, "max": limit, // API.md's names
			"renewal_count": count, "max_renewals": limit, // the seed's
		}, "lease %s on %s has reached maximum renewals (%d/%d). Release and reclaim to continue.",
			id, l.res.name, l.renewals, l.maxRenewals)
	}
	limit := l.lifetimeCap()
	// Expiry never passes the cap and strict expiry ends the lease there,
	// so the limit bites when the lease already lives as long as it may and
	// the renewal asks for more; lifetime is what the renewal asks for.
	if tx.Tick >= limit || want > limit && l.expiresTick >= limit {
		// The lifetime is the lease's age (the seed's now − acquired_at).
		lived := int64(tx.Tick - l.lifeFrom())
		lifetime, maxLifetime := strconv.FormatInt(lived/1000, 10), strconv.FormatInt(l.maxLifetime/1000, 10)
		meta := map[string]string{
			"lease_id": id, "lifetime": lifetime, "max": maxLifetime, // API.md's names, in seconds
			"lifetime_seconds": lifetime, "max_lifetime": maxLifetime, // the seed's
			"lifetime_ms": strconv.FormatInt(lived, 10), "max_lifetime_ms": strconv.FormatInt(l.maxLifetime, 10),
		}
		if lived >= l.maxLifetime {
			return Lease{}, newError(ReasonLifetimeExceeded, meta,
				"lease %s on %s has exceeded maximum lifetime (%ds/%ds). Release and reclaim to continue.",
				id, l.res.name, lived/1000, l.maxLifetime/1000)
		}
		return Lease{}, newError(ReasonLifetimeExceeded, meta,
			"lease %s on %s already expires at its maximum lifetime (%s of %s lived) and cannot be renewed past it. Release and reclaim to continue.",
			id, l.res.name, Dur(lived), Dur(l.maxLifetime))
	}
	exp := min(want, limit) // never extended past max_lifetime
	cur := l.expiresTick
	if tx.Rules >= 2 && l.parent() != nil {
		// A derived lease expires with its ancestors: an ancestor whose
		// deadline moved earlier than this lease's own expiry (renewed out
		// of its restart grace) set the expiry the renewal must not move
		// earlier. The renewal then brings the lease's own expiry down to
		// the cap.
		cur = min(cur, l.chainDeadline())
	}
	if exp < cur {
		return Lease{}, newError(ReasonRenewalDoesNotExtend, map[string]string{
			"lease_id": id, "expires_tick": strconv.FormatInt(int64(cur), 10), "requested_tick": strconv.FormatInt(int64(exp), 10),
		}, "renewing lease %s would move its expiry earlier (%s left, asked for %s)", id, Dur(int64(cur-tx.Tick)), Dur(int64(exp-tx.Tick)))
	}
	expWall := tx.Wall + int64(exp-tx.Tick)
	if capWall != 0 && exp == want {
		expWall = capWall
	}
	x := &renewedRecord{msg: logpb.LeaseRenewed{ExpiresTick: int64(exp), ExpiresWall: expWall, TtlMs: ttl}}
	r.setRef(&x.ref, l)
	x.msg.Lease = &x.ref
	x.body.Renewed = &x.msg
	x.rec.Body = &x.body
	tx.Emit(&x.rec)
	return r.view(l, tx.Tick), tx.err
}

// CheckReleaseReason resolves the reason a Release gives (none:
// VOLUNTARY); the others are recorded by the registrar itself.
func CheckReleaseReason(rr tenurev1.ReleaseReason) (tenurev1.ReleaseReason, error) {
	switch rr {
	case tenurev1.ReleaseReason_RELEASE_REASON_UNSPECIFIED:
		return tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY, nil
	case tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED, tenurev1.ReleaseReason_RELEASE_REASON_ABORTED,
		tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY:
		return rr, nil
	}
	if name, ok := tenurev1.ReleaseReason_name[int32(rr)]; ok {
		return 0, invalid("reason", "%s is recorded by the registrar (Transfer), not given to Release; give COMPLETED, ABORTED or VOLUNTARY", name)
	}
	return 0, invalid("reason", "unknown release reason %d; give COMPLETED, ABORTED or VOLUNTARY", rr)
}

// Release ends a lease at its holder's request (CTR-0505). Releasing a
// lease that already ended, or was pruned, succeeds and says so.
func (r *Registrar) Release(tx *Tx, c *logpb.Release) Outcome {
	if err := CheckLeaseIDText("lease_id", c.LeaseId); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("holder", c.Holder, true); err != nil {
		return fail(err)
	}
	reason, err := CheckReleaseReason(c.Reason)
	if err != nil {
		return fail(err)
	}
	l := r.lookup(c.LeaseId)
	if l == nil {
		if r.pruned(c.LeaseId) {
			return Outcome{AlreadyTerminal: true}
		}
		return fail(notFound(c.LeaseId))
	}
	if l.holder.name != c.Holder {
		return fail(newError(ReasonNotHolder, map[string]string{"lease_id": c.LeaseId, "holder": l.holder.name},
			"lease %s is held by %s, not %s", c.LeaseId, l.holder.name, c.Holder))
	}
	if l.state.Terminal() {
		v := r.view(l, tx.Tick)
		return Outcome{Lease: &v, AlreadyTerminal: true}
	}
	id := r.end(tx, l, &logpb.LeaseEnded{State: tenurev1.State_STATE_RELEASED, Reason: reason}, true)
	v := r.viewID(l, tx.Tick, id)
	return Outcome{Lease: &v, Err: tx.err}
}

// Revoke ends a lease by an administrator's decision. Revoking a revoked
// lease is a no-op; other ended leases answer why they cannot be revoked.
func (r *Registrar) Revoke(tx *Tx, c *logpb.Revoke) Outcome {
	if err := CheckLeaseIDText("lease_id", c.LeaseId); err != nil {
		return fail(err)
	}
	if err := CheckReason("reason", c.Reason); err != nil {
		return fail(err)
	}
	l := r.lookup(c.LeaseId)
	if l != nil && l.state == Revoked {
		v := r.view(l, tx.Tick)
		return Outcome{Lease: &v}
	}
	if err := r.checkLive(c.LeaseId, l, "", tx.Tick); err != nil {
		return fail(err)
	}
	r.end(tx, l, &logpb.LeaseEnded{State: tenurev1.State_STATE_REVOKED, RevokeReason: c.Reason}, true)
	v := r.view(l, tx.Tick)
	return Outcome{Lease: &v, Err: tx.err}
}

// Transfer hands a lease to a new holder in one step: the old lease ends
// RELEASED/TRANSFERRED and a new lease, with a new id and a higher fence,
// is issued before any waiter can slip in.
func (r *Registrar) Transfer(tx *Tx, c *logpb.Transfer) Outcome {
	if err := CheckLeaseIDText("lease_id", c.LeaseId); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("holder", c.Holder, true); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("new_holder", c.NewHolder, true); err != nil {
		return fail(err)
	}
	if c.TtlMs != nil && *c.TtlMs <= 0 {
		return fail(newError(ReasonTTLOutOfRange, map[string]string{"field": "ttl"}, "ttl must be positive, got %s", Dur(*c.TtlMs)))
	}
	l := r.lookup(c.LeaseId)
	if err := r.checkLive(c.LeaseId, l, c.Holder, tx.Tick); err != nil {
		return fail(err)
	}
	if c.NewHolder == c.Holder {
		// The new lease would start its renewal count and lifetime
		// afresh, a way past the policy's limits and ahead of the
		// resource's waiters.
		return fail(invalid("new_holder", "is the lease's holder already; a lease is transferred to another holder (renew it to keep it)"))
	}
	ns := l.res.ns
	ttl := l.ttl
	if c.TtlMs != nil {
		var err error
		if ttl, err = ttlFor(ns.policy, "ttl", c.TtlMs); err != nil {
			return fail(err)
		}
	}
	if err := r.checkQuota(ns, c.NewHolder); err != nil {
		return fail(err)
	}
	ended := &logpb.LeaseEnded{State: tenurev1.State_STATE_RELEASED, Reason: tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED}
	// The subtree ends first: its handoffs may issue leases, and the
	// record must name the sequence the new lease really gets.
	r.endDescendants(tx, l, ended, l.seq)
	ended.TransferredTo = r.nextSeq
	r.end(tx, l, ended, false)
	deriv, capTick, capWall := r.carryOver(l, tx.Rules)
	a := issueArgs{
		ns: ns.name, resource: l.res.name, holder: c.NewHolder, mode: l.mode, ttl: ttl,
		maxRenewals: ns.policy.MaxRenewals, maxLifetime: ns.policy.MaxLifetime, transferredFrom: l.seq,
		deriv: deriv, capTick: capTick, capWall: capWall,
	}
	if c.CarryLimits {
		// Handing a lease on is no way past the renewal limits: the new
		// lease continues the old one's tenure, its count and lifetime
		// under the limits it was granted with (seed 003: only a release
		// and a fresh acquire, behind the waiters, starts anew).
		a.maxRenewals, a.maxLifetime = l.maxRenewals, l.maxLifetime
		a.renewals = l.renewals
		a.lifeFrom, a.lifeFromWall = l.acquired()
	}
	nl, _ := r.issue(tx, a)
	if tx.err != nil {
		return fail(tx.err)
	}
	old, nv := r.view(l, tx.Tick), r.view(nl, tx.Tick)
	return Outcome{Lease: &nv, Released: &old}
}

// Expire is the leader's expirer asking for due leases to be expired. The
// due ones already expired in Advance; an id that is not yet due is
// refused (an expire earlier than the lease's expiry is rejected).
func (r *Registrar) Expire(tx *Tx, c *logpb.Expire) Outcome {
	if err := checkBatch("lease_ids", len(c.LeaseIds)); err != nil {
		return fail(err)
	}
	var out Outcome
	for _, id := range c.LeaseIds {
		l := r.lookup(id)
		switch {
		case l == nil:
			if !r.pruned(id) {
				out.Failures = append(out.Failures, Failure{LeaseID: id, Err: notFound(id)})
			}
		case l.activeAt(tx.Tick):
			out.Failures = append(out.Failures, Failure{LeaseID: id, Err: newError(ReasonExpiryTooEarly,
				map[string]string{"lease_id": id, "expires_tick": strconv.FormatInt(int64(l.deadline()), 10)},
				"lease %s is not due until tick %d (now %d)", id, l.deadline(), tx.Tick)})
		default:
			out.Leases = append(out.Leases, r.view(l, tx.Tick))
		}
	}
	return out
}

// DeclareRestart gives a restarting holder's active leases a grace period
// past their expiry, once per lease and never past max_lifetime, so that it
// can verify and renew them.
func (r *Registrar) DeclareRestart(tx *Tx, c *logpb.DeclareRestart) Outcome {
	if err := CheckIdentifier("holder", c.Holder, true); err != nil {
		return fail(err)
	}
	if err := CheckIdentifier("namespace", c.Namespace, false); err != nil {
		return fail(err)
	}
	if c.GraceMs != nil {
		if err := checkDurationMs("grace", *c.GraceMs, false); err != nil {
			return fail(err)
		}
	}
	var out Outcome
	for _, ns := range r.namespacesFor(c.Namespace) {
		h := ns.holders[c.Holder]
		if h == nil {
			continue
		}
		grace := ns.policy.MaxGrace
		if c.GraceMs != nil && *c.GraceMs < grace {
			grace = *c.GraceMs
		}
		var derived []*lease
		graceOne := func(l *lease) {
			if (l.extra != nil && l.extra.graceUsed) || grace == 0 {
				return
			}
			until := l.expiresTick + Tick(grace)
			if cp := l.lifetimeCap(); until > cp {
				until = cp
			}
			untilWall := l.expiresWall + int64(until-l.expiresTick)
			if p := l.parent(); p != nil {
				if capTick, w := p.expiryCap(tx.Rules); until >= capTick {
					until, untilWall = capTick, w // a child never outlives its parent
				}
			}
			if until <= l.expiresTick {
				return
			}
			tx.Emit(&logpb.Record{Body: &logpb.Record_Grace{Grace: &logpb.LeaseGrace{
				Lease: r.ref(l), UntilTick: int64(until), UntilWall: untilWall,
			}}})
			out.Leases = append(out.Leases, r.view(l, tx.Tick))
		}
		for l := h.head; l != nil && tx.err == nil; l = l.hNext {
			if l.parent() != nil {
				derived = append(derived, l)
				continue
			}
			graceOne(l)
		}
		// Derived leases after the roots, parents before children, so a
		// child's grace can reach as far as its parent's new deadline.
		slices.SortFunc(derived, func(a, b *lease) int { return cmpUint(a.seq, b.seq) })
		for _, l := range derived {
			if tx.err == nil {
				graceOne(l)
			}
		}
	}
	out.Err = tx.err
	return out
}

// WriteState writes a resource's guarded state: only its active exclusive
// lease may, and only at the current epoch.
func (r *Registrar) WriteState(tx *Tx, c *logpb.WriteState) Outcome {
	if err := CheckIdentifier("namespace", c.Namespace, false); err != nil {
		return fail(err)
	}
	if err := CheckResource("resource", c.Resource); err != nil {
		return fail(err)
	}
	if err := CheckLeaseIDText("lease_id", c.LeaseId); err != nil {
		return fail(err)
	}
	if len(c.Data) > MaxStateBytes {
		return fail(invalid("data", "is %d bytes; the limit is %d", len(c.Data), MaxStateBytes))
	}
	nsName := OrDefault(c.Namespace)
	var res *resource
	if ns := r.namespaces[nsName]; ns != nil {
		res = ns.resources[c.Resource]
	}
	l := r.lookup(c.LeaseId)
	if l == nil || res == nil || l.res != res || l.mode != Exclusive || res.excl != l || !l.activeAt(tx.Tick) {
		meta := map[string]string{"lease_id": c.LeaseId, "resource": c.Resource}
		// active_lease_id is empty when no exclusive lease is active.
		active, said := "", "none"
		if res != nil && res.excl != nil && res.excl.activeAt(tx.Tick) {
			active = FormatLeaseID(res.excl.issuedWall, r.tag, res.excl.seq)
			said = active
		}
		meta["active_lease_id"] = active
		return fail(newError(ReasonLeaseViolation, meta,
			"lease %s is not the active exclusive lease of %s (active: %s)", c.LeaseId, c.Resource, said))
	}
	var cur uint64
	if res.guarded != nil {
		cur = res.guarded.epoch
	}
	meta := map[string]string{"expected_epoch": strconv.FormatUint(c.ExpectedEpoch, 10), "current_epoch": strconv.FormatUint(cur, 10),
		"namespace": nsName, "resource": c.Resource, "lease_id": c.LeaseId}
	switch {
	case c.ExpectedEpoch < cur:
		return fail(newError(ReasonStaleEpoch, meta, "expected epoch %d < current %d", c.ExpectedEpoch, cur))
	case c.ExpectedEpoch > cur:
		return fail(newError(ReasonFutureEpoch, meta, "expected epoch %d > current %d", c.ExpectedEpoch, cur))
	}
	ns := r.namespaces[nsName]
	held := ns.stateBytes
	if res.guarded != nil {
		held -= StateCost(len(res.guarded.data))
	}
	if limit := ns.policy.MaxStateBytes; held+StateCost(len(c.Data)) > limit {
		meta := map[string]string{"namespace": nsName, "resource": c.Resource, "limit": strconv.FormatUint(limit, 10),
			"held": strconv.FormatUint(held, 10), "quota": "state_bytes"}
		return fail(newError(ReasonQuotaExceeded, meta,
			"namespace %s holds %d bytes of guarded state; this write would take it past its limit of %d (max_state_bytes; writing an empty blob frees a resource's bytes)",
			nsName, held, limit))
	}
	tx.Emit(&logpb.Record{Body: &logpb.Record_StateWritten{StateWritten: &logpb.StateWritten{
		Namespace: nsName, Resource: c.Resource, Seq: l.seq, Epoch: cur + 1, Data: c.Data,
	}}})
	return Outcome{Epoch: cur + 1, Err: tx.err}
}

// SetPolicy replaces a namespace's policy (or, for "*", the defaults).
func (r *Registrar) SetPolicy(tx *Tx, c *logpb.SetPolicy) Outcome {
	if c.Namespace != DefaultsNamespace {
		if err := CheckIdentifier("namespace", c.Namespace, true); err != nil {
			return fail(err)
		}
	}
	p := PolicyFromProto(r.defaults, c.Policy)
	if err := p.Validate(); err != nil {
		return fail(err)
	}
	pb := p.ProtoOver(r.defaults)
	if tx.Rules >= RulesDeadRetentionOutright && p.DeadTaskRetention == 0 && r.defaults.DeadTaskRetention != 0 {
		// The default (a day) over defaults that set a retention: said
		// outright, or it reads back as theirs.
		pb.DeadTaskRetention = durationpb.New(0)
	}
	tx.Emit(&logpb.Record{Body: &logpb.Record_PolicySet{PolicySet: &logpb.PolicySet{Namespace: c.Namespace, Policy: pb}}})
	return Outcome{Err: tx.err}
}

// RulesDeadRetentionOutright is the first rules (statemachine.Rules) under
// which a policy's dead_task_retention of 0 (the default) over defaults
// ("*") that set one is recorded outright; before, it was left out, and
// the namespace took the defaults' retention instead of the day it was set
// to (found from outside: a policy read and written back changed).
const RulesDeadRetentionOutright = 5
