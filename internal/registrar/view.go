package registrar

import (
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/fencing"
)

// Lease is a copy of a lease as seen at one tick. Reads evaluate expiry at
// that tick: a lease past its deadline reads Expired even before its expiry
// record is applied.
type Lease struct {
	ID          string
	Fence       uint64 // also the lease's sequence number
	Namespace   string
	Resource    string
	Holder      string
	Mode        Mode
	State       State
	TTL         time.Duration
	IssuedTick  Tick
	ExpiresTick Tick
	// AcquiredTick and AcquiredAt are when the lease's tenure began, the
	// start of its max lifetime: its issue, or, for a lease issued by a
	// transfer that carried the limits over, its predecessor's.
	AcquiredTick  Tick
	AcquiredAt    time.Time
	IssuedAt      time.Time
	ExpiresAt     time.Time
	TerminatedAt  time.Time
	LastRenewedAt time.Time
	RenewalCount  uint32
	ReleaseReason tenurev1.ReleaseReason
	RevokeReason  string
	GraceUntil    time.Time
	GraceTick     Tick
	MaxRenewals   uint32
	MaxLifetime   time.Duration
	// Remaining is the time left at the tick of the view.
	Remaining time.Duration
	// ParentID names the parent of a derived lease; EndedBy the ancestor
	// whose end ended this one.
	ParentID string
	EndedBy  string
	Scope    Scope
	// Counters are the lease's budget counters, by name.
	Counters []Counter
}

// Deadline is the tick at which the lease stops being honoured.
func (l Lease) Deadline() Tick {
	if l.GraceTick > l.ExpiresTick {
		return l.GraceTick
	}
	return l.ExpiresTick
}

func (r *Registrar) view(l *lease, t Tick) Lease {
	return r.viewID(l, t, FormatLeaseID(l.issuedWall, r.tag, l.seq))
}

// viewID is view with the lease's id already formatted.
func (r *Registrar) viewID(l *lease, t Tick, id string) Lease {
	var x leaseExtra
	if l.extra != nil {
		x = *l.extra
	}
	acqTick, acqWall := l.acquired()
	v := Lease{
		ID:            id,
		AcquiredTick:  acqTick,
		AcquiredAt:    WallTime(acqWall),
		Fence:         l.seq,
		Namespace:     l.res.ns.name,
		Resource:      l.res.name,
		Holder:        l.holder.name,
		Mode:          l.mode,
		State:         l.state,
		TTL:           Dur(l.ttl),
		IssuedTick:    l.issuedTick,
		ExpiresTick:   l.expiresTick,
		IssuedAt:      WallTime(l.issuedWall),
		ExpiresAt:     WallTime(l.expiresWall),
		TerminatedAt:  WallTime(l.terminatedWall),
		LastRenewedAt: WallTime(l.lastRenewedWall),
		RenewalCount:  l.renewals,
		ReleaseReason: tenurev1.ReleaseReason(l.reason),
		RevokeReason:  x.revokeReason,
		GraceTick:     x.graceTick,
		GraceUntil:    WallTime(x.graceWall),
		MaxRenewals:   l.maxRenewals,
		MaxLifetime:   Dur(l.maxLifetime),
	}
	if tr := l.tree; tr != nil {
		v.ParentID = tr.parentID
		v.Scope = tr.scope
		v.Counters = slices.Clone(tr.counters)
		v.EndedBy = tr.endedBy
	}
	if l.state == Active {
		// A lease is honoured only while its ancestors are.
		d, w := l.chainDeadlineWall()
		if d < l.deadline() {
			// An ancestor's deadline is earlier than the lease's own (a
			// parent renewed out of its restart grace moves its deadline
			// earlier than a child capped at that grace): the expiry shown,
			// and signed in a certificate, is the one the lease has.
			if d < v.ExpiresTick {
				v.ExpiresTick, v.ExpiresAt = d, WallTime(w)
			}
			if v.GraceTick > d {
				v.GraceTick, v.GraceUntil = d, WallTime(w)
			}
		}
		if t < d {
			v.Remaining = Dur(int64(d - t))
		} else {
			// Expired at its own deadline, or at an ancestor's earlier one.
			v.State = Expired
			v.TerminatedAt = WallTime(w)
		}
	}
	return v
}

// Proto renders the lease in the wire form (without a certificate).
func (l Lease) Proto() *tenurev1.Lease {
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	pb := &tenurev1.Lease{
		LeaseId:        l.ID,
		Namespace:      l.Namespace,
		Resource:       l.Resource,
		Holder:         l.Holder,
		Mode:           tenurev1.Mode(l.Mode),
		State:          tenurev1.State(l.State),
		Fence:          l.Fence,
		Ttl:            durationpb.New(l.TTL),
		IssuedAt:       ts(l.IssuedAt),
		ExpiresAt:      ts(l.ExpiresAt),
		TerminatedAt:   ts(l.TerminatedAt),
		LastRenewedAt:  ts(l.LastRenewedAt),
		RenewalCount:   l.RenewalCount,
		ReleaseReason:  l.ReleaseReason,
		TimeRemaining:  durationpb.New(l.Remaining),
		IssuedTick:     int64(l.IssuedTick),
		ExpiresTick:    int64(l.ExpiresTick),
		AcquiredTick:   int64(l.AcquiredTick),
		AcquiredAt:     ts(l.AcquiredAt),
		GraceUntil:     ts(l.GraceUntil),
		MaxRenewals:    l.MaxRenewals,
		MaxLifetime:    durationpb.New(l.MaxLifetime),
		RevokeReason:   l.RevokeReason,
		ParentLeaseId:  l.ParentID,
		EndedByLeaseId: l.EndedBy,
	}
	if !l.Scope.Empty() {
		pb.Scope = &tenurev1.Scope{Namespaces: l.Scope.Namespaces, ResourcePrefixes: l.Scope.ResourcePrefixes, Actions: l.Scope.Actions}
	}
	for _, c := range l.Counters {
		if c.Limited {
			if pb.Budget == nil {
				pb.Budget = &tenurev1.Budget{Limits: map[string]int64{}}
			}
			pb.Budget.Limits[c.Name] = c.Limit
		}
		if pb.Used == nil {
			pb.Used = map[string]int64{}
		}
		pb.Used[c.Name] = c.Used
		if c.Reserved != 0 {
			if pb.Reserved == nil {
				pb.Reserved = map[string]int64{}
			}
			pb.Reserved[c.Name] = c.Reserved
		}
	}
	return pb
}

// Claim is what a lease certificate attests for this lease: what its
// Proto shows, the budget being the limits of the limited counters.
func (l Lease) Claim() fencing.Claim {
	var budget map[string]int64
	for _, c := range l.Counters {
		if c.Limited {
			if budget == nil {
				budget = map[string]int64{}
			}
			budget[c.Name] = c.Limit
		}
	}
	return fencing.Claim{
		LeaseID:       l.ID,
		Namespace:     l.Namespace,
		Resource:      l.Resource,
		Holder:        l.Holder,
		Mode:          fencing.Mode(l.Mode),
		Fence:         l.Fence,
		IssuedAt:      l.IssuedAt,
		ExpiresAt:     l.ExpiresAt,
		RenewalCount:  l.RenewalCount,
		ParentLeaseID: l.ParentID,
		Scope:         fencing.Scope{Namespaces: l.Scope.Namespaces, ResourcePrefixes: l.Scope.ResourcePrefixes, Actions: l.Scope.Actions},
		Budget:        budget,
	}
}
