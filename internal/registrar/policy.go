package registrar

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Policy is one namespace's limits. Durations are milliseconds.
type Policy struct {
	// DefaultTTL applies when a request names no ttl.
	DefaultTTL int64
	// MinTTL and MaxTTL bound every requested ttl (TTL_OUT_OF_RANGE).
	MinTTL, MaxTTL int64
	// MaxRenewals caps renewals per lease; 0 = unlimited.
	MaxRenewals uint32
	// MaxLifetime caps a lease's life from its grant; 0 = unlimited.
	MaxLifetime int64
	// MaxGrace caps (and is the default of) a restart grace.
	MaxGrace int64
	// MaxActivePerHolder and MaxActivePerNamespace are active-lease quotas.
	MaxActivePerHolder, MaxActivePerNamespace uint64
	// MaxWaitersPerResource bounds a resource's wait queue.
	MaxWaitersPerResource uint64
	// LeaseRetention is how long terminal leases are kept before pruning.
	LeaseRetention int64
	// HistoryRetention is how long per-resource history is kept.
	HistoryRetention int64
	// MaxRetainedLeases caps the terminal leases kept: past it the oldest
	// are pruned before LeaseRetention, so that memory stays bounded under
	// sustained traffic (at 15,000 cycles/s an hour of retention is 54
	// million leases).
	MaxRetainedLeases uint64
	// MaxRetainedTasks caps the finished queue tasks kept, likewise.
	MaxRetainedTasks uint64
	// AlwaysCertify signs every grant and renewal.
	AlwaysCertify bool
	// TaskMaxRenewals and TaskMaxLifetime cap the leases of queue tasks
	// (0 = unlimited), as MaxRenewals and MaxLifetime do plain leases.
	TaskMaxRenewals uint32
	TaskMaxLifetime int64
	// MaxStateBytes caps a namespace's guarded state (StateCost of each
	// resource's), so that one tenant cannot grow every member for good.
	MaxStateBytes uint64
	// MaxPendingTasks and MaxPendingTaskBytes cap a namespace's unfinished
	// queue tasks and their payload bytes; MaxPoolPieces the pieces of its
	// pools' files. Each is QUOTA_EXCEEDED past it.
	MaxPendingTasks, MaxPendingTaskBytes, MaxPoolPieces uint64
	// DeadTaskRetention is how long a dead queue task is kept; 0 (the
	// default): a day (queue.DeadRetention; LeaseRetention for commands
	// of rules before 4).
	DeadTaskRetention int64
}

// DefaultPolicy returns the defaults of API.md "Conventions settled".
func DefaultPolicy() Policy {
	return Policy{
		DefaultTTL:            60_000,
		MinTTL:                1_000,
		MaxTTL:                300_000,
		MaxGrace:              15_000,
		MaxActivePerHolder:    10_000,
		MaxActivePerNamespace: 1_000_000,
		MaxWaitersPerResource: 1_000,
		LeaseRetention:        3_600_000,
		HistoryRetention:      86_400_000,
		MaxRetainedLeases:     100_000,
		MaxRetainedTasks:      100_000,
		TaskMaxRenewals:       10,
		TaskMaxLifetime:       2 * 3_600_000,
		MaxStateBytes:         256 << 20,
		MaxPendingTasks:       1_000_000,
		MaxPendingTaskBytes:   1 << 30,
		MaxPoolPieces:         1 << 24,
	}
}

// Validate reports the first inconsistent field, by name.
func (p Policy) Validate() error {
	bad := func(field, format string, args ...any) error {
		return newError(ReasonInvalidArgument, map[string]string{"field": field}, "%s: "+format, append([]any{field}, args...)...)
	}
	switch {
	case p.MinTTL <= 0:
		return bad("min_ttl", "must be positive")
	case p.MaxTTL <= 0:
		return bad("max_ttl", "must be positive")
	case p.MaxTTL < p.MinTTL:
		return bad("max_ttl", "%s is below min_ttl %s", Dur(p.MaxTTL), Dur(p.MinTTL))
	case p.DefaultTTL <= 0:
		return bad("default_ttl", "must be positive")
	case p.DefaultTTL < p.MinTTL || p.DefaultTTL > p.MaxTTL:
		return bad("default_ttl", "%s is outside [min_ttl %s, max_ttl %s]", Dur(p.DefaultTTL), Dur(p.MinTTL), Dur(p.MaxTTL))
	case p.MaxTTL > maxDurationMs:
		return bad("max_ttl", "is too long")
	case p.MaxLifetime < 0 || p.MaxLifetime > maxDurationMs:
		return bad("max_lifetime", "must be between 0 (unlimited) and 10 years")
	case p.MaxGrace < 0 || p.MaxGrace > 15_000:
		return bad("max_grace", "must be between 0 and 15s")
	case p.MaxActivePerHolder == 0:
		return bad("max_active_per_holder", "must be positive")
	case p.MaxActivePerNamespace == 0:
		return bad("max_active_per_namespace", "must be positive")
	case p.MaxWaitersPerResource == 0:
		return bad("max_waiters_per_resource", "must be positive")
	case p.LeaseRetention <= 0 || p.LeaseRetention > maxDurationMs:
		return bad("lease_retention", "must be positive and at most 10 years")
	case p.HistoryRetention <= 0 || p.HistoryRetention > maxDurationMs:
		return bad("history_retention", "must be positive and at most 10 years")
	case p.MaxRetainedLeases == 0:
		return bad("max_retained_leases", "must be positive")
	case p.MaxRetainedTasks == 0:
		return bad("max_retained_tasks", "must be positive")
	case p.MaxStateBytes == 0:
		return bad("max_state_bytes", "must be positive")
	case p.MaxPendingTasks == 0:
		return bad("max_pending_tasks", "must be positive")
	case p.MaxPendingTaskBytes == 0:
		return bad("max_pending_task_bytes", "must be positive")
	case p.MaxPoolPieces == 0:
		return bad("max_pool_pieces", "must be positive")
	case p.TaskMaxLifetime < 0 || p.TaskMaxLifetime > maxDurationMs:
		return bad("task_max_lifetime", "must be between 0 (unlimited) and 10 years")
	case p.DeadTaskRetention < 0 || p.DeadTaskRetention > maxDurationMs:
		return bad("dead_task_retention", "must be between 0 (the default, a day) and 10 years")
	}
	return nil
}

// PolicyFromProto overlays the set fields of pb on base.
func PolicyFromProto(base Policy, pb *tenurev1.NamespacePolicy) Policy {
	if pb == nil {
		return base
	}
	ms := func(d *durationpb.Duration, into *int64) {
		if d != nil {
			*into = Ms(d.AsDuration())
		}
	}
	ms(pb.DefaultTtl, &base.DefaultTTL)
	ms(pb.MinTtl, &base.MinTTL)
	ms(pb.MaxTtl, &base.MaxTTL)
	ms(pb.MaxLifetime, &base.MaxLifetime)
	ms(pb.MaxGrace, &base.MaxGrace)
	ms(pb.LeaseRetention, &base.LeaseRetention)
	ms(pb.HistoryRetention, &base.HistoryRetention)
	if pb.MaxRenewals != nil {
		base.MaxRenewals = *pb.MaxRenewals
	}
	count := func(v uint64, into *uint64) { // 0: not set
		if v != 0 {
			*into = v
		}
	}
	count(pb.MaxActivePerHolder, &base.MaxActivePerHolder)
	count(pb.MaxActivePerNamespace, &base.MaxActivePerNamespace)
	count(pb.MaxWaitersPerResource, &base.MaxWaitersPerResource)
	count(pb.MaxRetainedLeases, &base.MaxRetainedLeases)
	count(pb.MaxRetainedTasks, &base.MaxRetainedTasks)
	count(pb.MaxStateBytes, &base.MaxStateBytes)
	count(pb.MaxPendingTasks, &base.MaxPendingTasks)
	count(pb.MaxPendingTaskBytes, &base.MaxPendingTaskBytes)
	count(pb.MaxPoolPieces, &base.MaxPoolPieces)
	base.AlwaysCertify = pb.AlwaysCertify
	if pb.TaskMaxRenewals != nil {
		base.TaskMaxRenewals = *pb.TaskMaxRenewals
	}
	ms(pb.TaskMaxLifetime, &base.TaskMaxLifetime)
	ms(pb.DeadTaskRetention, &base.DeadTaskRetention)
	return base
}

// optionalDuration is ms as a duration, or nil (unset) for 0: a field
// added after the first release, left out at its default so that records
// and snapshots keep their bytes.
func optionalDuration(ms int64) *durationpb.Duration {
	if ms == 0 {
		return nil
	}
	return durationpb.New(time.Duration(ms) * time.Millisecond)
}

// nonZero is v, or nil (unset) for 0.
func nonZero(v uint32) *uint32 {
	if v == 0 {
		return nil
	}
	return &v
}

// Proto renders the policy with every field explicit but max_renewals,
// unset when 0 (unlimited): so it encoded before the field became
// optional, and records carrying a policy must stay byte for byte as they
// were. ProtoToSet sets it.
func (p Policy) Proto() *tenurev1.NamespacePolicy {
	d := func(ms int64) *durationpb.Duration { return durationpb.New(time.Duration(ms) * time.Millisecond) }
	return &tenurev1.NamespacePolicy{
		DefaultTtl:            d(p.DefaultTTL),
		MinTtl:                d(p.MinTTL),
		MaxTtl:                d(p.MaxTTL),
		MaxRenewals:           nonZero(p.MaxRenewals),
		MaxLifetime:           d(p.MaxLifetime),
		MaxGrace:              d(p.MaxGrace),
		MaxActivePerHolder:    p.MaxActivePerHolder,
		MaxActivePerNamespace: p.MaxActivePerNamespace,
		MaxWaitersPerResource: p.MaxWaitersPerResource,
		LeaseRetention:        d(p.LeaseRetention),
		HistoryRetention:      d(p.HistoryRetention),
		AlwaysCertify:         p.AlwaysCertify,
		MaxRetainedLeases:     p.MaxRetainedLeases,
		MaxRetainedTasks:      p.MaxRetainedTasks,
		TaskMaxRenewals:       &p.TaskMaxRenewals,
		TaskMaxLifetime:       d(p.TaskMaxLifetime),
		MaxStateBytes:         p.MaxStateBytes,
		MaxPendingTasks:       p.MaxPendingTasks,
		MaxPendingTaskBytes:   p.MaxPendingTaskBytes,
		MaxPoolPieces:         p.MaxPoolPieces,
		DeadTaskRetention:     optionalDuration(p.DeadTaskRetention),
	}
}

// ProtoToSet renders the policy for a SetPolicy that sets every field,
// max_renewals (0: unlimited) and dead_task_retention (0s: the default, a
// day) too: a policy read and written back stays as it was, where an
// unset field would take the "*" policy's value.
func (p Policy) ProtoToSet() *tenurev1.NamespacePolicy {
	pb := p.Proto()
	pb.MaxRenewals = &p.MaxRenewals
	pb.DeadTaskRetention = durationpb.New(time.Duration(p.DeadTaskRetention) * time.Millisecond)
	return pb
}

// ProtoOver renders the policy for a record that is read back over base
// (PolicyFromProto(base, …)). Fields added after the first release are
// left out when base supplies the same value, so that a log written by an
// earlier binary derives the same record bytes on this one: the ledger
// compares them on every restart (and upgrade), and replicas of both
// versions must write the same history.
func (p Policy) ProtoOver(base Policy) *tenurev1.NamespacePolicy {
	pb := p.Proto()
	if p.MaxRenewals == 0 && base.MaxRenewals != 0 {
		// Unlimited over a limit: said outright (unset reads as base's).
		// Records of policies set before 0 could be set never have it.
		pb.MaxRenewals = &p.MaxRenewals
	}
	if p.MaxRetainedLeases == base.MaxRetainedLeases {
		pb.MaxRetainedLeases = 0
	}
	if p.MaxRetainedTasks == base.MaxRetainedTasks {
		pb.MaxRetainedTasks = 0
	}
	if p.TaskMaxRenewals == base.TaskMaxRenewals {
		pb.TaskMaxRenewals = nil
	}
	if p.TaskMaxLifetime == base.TaskMaxLifetime {
		pb.TaskMaxLifetime = nil
	}
	if p.MaxStateBytes == base.MaxStateBytes {
		pb.MaxStateBytes = 0
	}
	if p.MaxPendingTasks == base.MaxPendingTasks {
		pb.MaxPendingTasks = 0
	}
	if p.MaxPendingTaskBytes == base.MaxPendingTaskBytes {
		pb.MaxPendingTaskBytes = 0
	}
	if p.MaxPoolPieces == base.MaxPoolPieces {
		pb.MaxPoolPieces = 0
	}
	if p.DeadTaskRetention == base.DeadTaskRetention {
		pb.DeadTaskRetention = nil
	}
	return pb
}
