package fencing

import (
	"math"
	"strconv"
	"sync"
)

// Validator is a downstream processor's view of one resource: the lease it
// accepts work from (with that lease's fence) and the next epoch it expects.
//
// The rules (seed 001, with the registrar's reason codes):
//   - Work must carry the accepted lease id, else LEASE_VIOLATION. An empty lease
//     id is always a violation.
//   - Epochs are processed in order, each exactly once. With next the epoch
//     expected next (0 for a new Validator, or as set by SetEpoch):
//     epoch == next is accepted; epoch < next → STALE_EPOCH (already processed,
//     including a replay of the last one); epoch > next → FUTURE_EPOCH (an earlier
//     epoch is missing; wait for it or resynchronise).
//   - The lease check comes first: work from a foreign lease is LEASE_VIOLATION
//     whatever its epoch.
//
// Seed 001 rejects only epoch < last_processed, which would let the last epoch be
// processed twice; a Validator rejects that replay as STALE_EPOCH.
//
// After epoch math.MaxUint64 has been accepted no further epoch can be, and every
// epoch is STALE_EPOCH until SetEpoch.
//
// A Validator is guarded by a mutex and safe for concurrent use. Use NewValidator;
// the zero value accepts no lease until Handoff.
type Validator struct {
	mu        sync.Mutex
	leaseID   string // accepted lease; "" accepts nothing
	fence     uint64 // fence of leaseID; a Handoff must exceed it
	next      uint64 // the epoch expected next
	exhausted bool   // epoch math.MaxUint64 was accepted: next would overflow
}

// NewValidator returns a Validator accepting work from leaseID, whose fence is
// fence, expecting epoch 0 first. Call SetEpoch to resume from a persisted
// position (for example the epoch returned by Tenure's ReadState).
func NewValidator(leaseID string, fence uint64) *Validator {
	return &Validator{leaseID: leaseID, fence: fence}
}

// Check reports whether work (leaseID, epoch) would be accepted now, without
// recording anything: nil, or an *Error with reason LEASE_VIOLATION, STALE_EPOCH
// or FUTURE_EPOCH. Another goroutine may change the answer right after; use Accept
// to check and record atomically.
//
// Metadata: LEASE_VIOLATION has "expected_lease_id" and "lease_id"; STALE_EPOCH
// and FUTURE_EPOCH have "epoch" and "expected_epoch" (the next epoch; absent once
// exhausted).
func (v *Validator) Check(leaseID string, epoch uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.checkLocked(leaseID, epoch)
}

// Accept checks (leaseID, epoch) like Check and, if it passes, records epoch as
// processed in the same critical section, so among concurrent callers exactly one
// Accept of a given epoch succeeds. Accept before doing the work: once it returns
// nil the epoch is consumed, and a retry of the same epoch is STALE_EPOCH. A
// processor that fails the work and must redo it rewinds explicitly with SetEpoch.
func (v *Validator) Accept(leaseID string, epoch uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkLocked(leaseID, epoch); err != nil {
		return err
	}
	if epoch == math.MaxUint64 {
		v.exhausted = true
	} else {
		v.next = epoch + 1
	}
	return nil
}

func (v *Validator) checkLocked(leaseID string, epoch uint64) error {
	if leaseID == "" || leaseID != v.leaseID {
		return newError(ReasonLeaseViolation,
			"lease "+strconv.Quote(leaseID)+" is not the accepted lease "+strconv.Quote(v.leaseID),
			"expected_lease_id", v.leaseID, "lease_id", leaseID)
	}
	e := strconv.FormatUint(epoch, 10)
	if v.exhausted {
		return newError(ReasonStaleEpoch,
			"epoch "+e+" <= "+strconv.FormatUint(math.MaxUint64, 10)+", the last epoch, already processed",
			"epoch", e)
	}
	n := strconv.FormatUint(v.next, 10)
	switch {
	case epoch < v.next:
		return newError(ReasonStaleEpoch, "epoch "+e+" < "+n+", the next expected epoch",
			"epoch", e, "expected_epoch", n)
	case epoch > v.next:
		return newError(ReasonFutureEpoch, "epoch "+e+" > "+n+", the next expected epoch",
			"epoch", e, "expected_epoch", n)
	}
	return nil
}

// Handoff makes the Validator accept newLeaseID (with fence newFence) instead of
// the current lease, as after a Tenure Transfer or a re-acquire by a successor.
// newFence must be greater than the current fence, else FENCE_STALE (metadata
// "fence", "current_fence") and nothing changes: a deposed lease can never be
// reinstated. An empty newLeaseID is INVALID_ARGUMENT. Epochs continue: the
// successor resumes at the next expected epoch, as guarded state outlives leases.
func (v *Validator) Handoff(newLeaseID string, newFence uint64) error {
	if newLeaseID == "" {
		return invalidArgument("lease_id", "must not be empty")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if newFence <= v.fence {
		f, cur := strconv.FormatUint(newFence, 10), strconv.FormatUint(v.fence, 10)
		return newError(ReasonFenceStale,
			"fence "+f+" of lease "+strconv.Quote(newLeaseID)+" <= "+cur+", the current fence",
			"fence", f, "current_fence", cur, "lease_id", newLeaseID)
	}
	v.leaseID, v.fence = newLeaseID, newFence
	return nil
}

// SetEpoch sets the epoch expected next, unconditionally: use it to resume from a
// persisted position or to resynchronise after FUTURE_EPOCH. Moving it backwards
// allows epochs to be processed again; that is the caller's decision.
func (v *Validator) SetEpoch(next uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.next, v.exhausted = next, false
}

// FenceGuard protects storage from writes by deposed holders: per resource it
// remembers the highest fence admitted and refuses lower ones. Fences are strictly
// increasing per resource and never reused, so a lower fence belongs to a lease
// that has been superseded.
//
// The zero value is ready to use and safe for concurrent use. Resource is the
// caller's key: include the namespace (e.g. "ns/resource") when resources of
// several namespaces share one guard. The guard remembers every resource it has
// seen; it never forgets one, since forgetting would let a deposed holder in.
type FenceGuard struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// Admit admits a write to resource under fence: nil if fence is at least the
// highest fence admitted for resource so far, which it then records. A lower
// fence is FENCE_STALE (metadata "resource", "fence", "highest_fence"). Fence 0 is
// never issued by Tenure (it is the unset value) and is INVALID_ARGUMENT.
// Equal fences are admitted: the current holder writes many times.
func (g *FenceGuard) Admit(resource string, fence uint64) error {
	if fence == 0 {
		return invalidArgument("fence", "must not be 0 (unset)")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if hi := g.highest[resource]; fence < hi {
		f, h := strconv.FormatUint(fence, 10), strconv.FormatUint(hi, 10)
		return newError(ReasonFenceStale,
			"fence "+f+" < "+h+", the highest fence admitted for "+strconv.Quote(resource),
			"resource", resource, "fence", f, "highest_fence", h)
	}
	if g.highest == nil {
		g.highest = make(map[string]uint64)
	}
	g.highest[resource] = fence
	return nil
}

// Highest returns the highest fence admitted for resource, and false if none was.
func (g *FenceGuard) Highest(resource string) (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f, ok := g.highest[resource]
	return f, ok
}
