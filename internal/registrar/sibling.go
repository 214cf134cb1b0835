package registrar

import (
	"strconv"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

// Grant is a lease a sibling domain (the work queue, the piece pool)
// issues on its own behalf, inside one of its commands.
type Grant struct {
	Namespace, Resource, Holder string
	// TTL in ms; MaxRenewals (0 = unlimited) and MaxLifetime (ms, 0 =
	// unlimited) are the lease's renewal limits.
	TTL         int64
	MaxRenewals uint32
	MaxLifetime int64
}

// IssueFor grants an exclusive lease for a sibling domain in the same
// apply step as the domain's own records. It answers LEASE_HELD when the
// resource is leased or has waiters, QUOTA_EXCEEDED over the holder's or
// namespace's quota, and emits nothing then.
func (r *Registrar) IssueFor(tx *Tx, g Grant) (Lease, error) {
	if err := CheckResource("resource", g.Resource); err != nil {
		return Lease{}, err
	}
	if err := CheckIdentifier("holder", g.Holder, true); err != nil {
		return Lease{}, err
	}
	nsName := OrDefault(g.Namespace)
	ns := r.namespaces[nsName]
	if ns != nil {
		if res := ns.resources[g.Resource]; res != nil && (len(res.waiters()) > 0 || !compatible(res, Exclusive)) {
			return Lease{}, r.held(res, tx.Tick, false)
		}
	}
	if err := r.checkQuota(ns, g.Holder); err != nil {
		return Lease{}, err
	}
	l, id := r.issue(tx, issueArgs{
		ns: nsName, resource: g.Resource, holder: g.Holder, mode: Exclusive, ttl: g.TTL,
		maxRenewals: g.MaxRenewals, maxLifetime: g.MaxLifetime,
	})
	if tx.err != nil {
		return Lease{}, tx.err
	}
	return r.viewID(l, tx.Tick, id), nil
}

// TTLFor resolves a requested ttl (nil: the default) against a namespace's
// policy, answering TTL_OUT_OF_RANGE outside it.
func (r *Registrar) TTLFor(ns, field string, req *int64) (int64, error) {
	if req != nil && *req <= 0 {
		return 0, newError(ReasonTTLOutOfRange, map[string]string{"field": field, "ttl_ms": strconv.FormatInt(*req, 10)},
			"%s must be positive, got %s", field, Dur(*req))
	}
	return ttlFor(r.Policy(ns), field, req)
}

// Quota is a QUOTA_EXCEEDED error of a sibling domain: what names the
// quota, limit its value, scope what it was counted on (metadata).
func Quota(what string, limit uint64, scope map[string]string, format string, args ...any) error {
	return quota(what, limit, scope, format, args...)
}

// NewError builds a typed rejection whose message starts with the reason,
// for sibling domains.
func NewError(reason Reason, meta map[string]string, format string, args ...any) *Error {
	return newError(reason, meta, format, args...)
}

// Observe moves registrar time to a record owned by a sibling domain (and
// prunes what is due), so that time advances with every record alike on
// the leader, on replay and after restore.
func (r *Registrar) Observe(rec *logpb.Record) { r.advanceTo(Tick(rec.Tick), rec.Wall) }

// EndFor releases an active lease (by fence/seq) for a sibling domain, in
// the same apply step as the domain's own records: RELEASED with reason
// (COMPLETED, ABORTED, …), waiters handed the resource, OnLeaseEnd hooks
// told. It answers LEASE_NOT_FOUND for a lease that is unknown or no
// longer active.
func (r *Registrar) EndFor(tx *Tx, seq uint64, reason tenurev1.ReleaseReason) (Lease, error) {
	return r.endFor(tx, seq, &logpb.LeaseEnded{State: tenurev1.State_STATE_RELEASED, Reason: reason})
}

// RevokeFor revokes an active lease (by fence/seq) for a sibling domain,
// with why as its revoke reason, as EndFor releases one.
func (r *Registrar) RevokeFor(tx *Tx, seq uint64, why string) (Lease, error) {
	return r.endFor(tx, seq, &logpb.LeaseEnded{State: tenurev1.State_STATE_REVOKED, RevokeReason: why})
}

func (r *Registrar) endFor(tx *Tx, seq uint64, ended *logpb.LeaseEnded) (Lease, error) {
	l := r.leases[seq]
	if l == nil || l.state.Terminal() {
		return Lease{}, newError(ReasonLeaseNotFound, map[string]string{"fence": strconv.FormatUint(seq, 10)},
			"no active lease with fence %d", seq)
	}
	id := r.end(tx, l, ended, true)
	if tx.err != nil {
		return Lease{}, tx.err
	}
	return r.viewID(l, tx.Tick, id), nil
}
