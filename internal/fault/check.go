package fault

import (
	"fmt"
	"sort"
	"time"
)

// tickSlack is how far registrar time may run ahead of real time: a
// leader rounds its clock up to the next millisecond, once per term.
const tickSlack = 5 * time.Millisecond

// leaseInfo is what a history says about one lease.
type leaseInfo struct {
	id, resource string
	fence        uint64
	grant        Op    // the acknowledged acquire or transfer that issued it
	deadline     int64 // latest send time + ttl over its acknowledged grant and renewals
	ended        []Op  // release (ok, not already terminal) or transfer attempts that may have ended it
}

// leases indexes the acknowledged grants of a history and their renewals.
func leases(ops []Op) map[string]*leaseInfo {
	ls := map[string]*leaseInfo{}
	for _, o := range ops {
		if (o.Kind == KindAcquire || o.Kind == KindTransfer) && o.Outcome == OK {
			ls[o.NewLease] = &leaseInfo{id: o.NewLease, resource: o.Resource, fence: o.Fence, grant: o,
				deadline: o.Call + int64(time.Duration(o.TTLms)*time.Millisecond)}
		}
	}
	for _, o := range ops {
		l := ls[o.LeaseID]
		if l == nil {
			continue
		}
		switch {
		case o.Kind == KindRenew && o.Outcome == OK:
			l.deadline = max(l.deadline, o.Call+int64(time.Duration(o.TTLms)*time.Millisecond))
		case o.Kind == KindRelease && (o.Outcome == Unknown || o.Outcome == OK && !o.AlreadyTerminal),
			o.Kind == KindTransfer && (o.Outcome == Unknown || o.Outcome == OK):
			l.ended = append(l.ended, o)
		}
	}
	return ls
}

// endedBefore: may the lease have been ended by its holder before t?
func (l *leaseInfo) endedBefore(t int64) bool {
	for _, e := range l.ended {
		if e.Call < t {
			return true
		}
	}
	return false
}

// CheckGrants checks the direct guarantees of a history and returns every
// violation found:
//   - fences are unique per resource and follow real time: a grant that
//     returned before another was sent has the lower fence;
//   - no two grants overlap and no lease ends early: a grant of a resource
//     returns no earlier than send time + ttl of the previous holder's last
//     acknowledged grant or renewal, unless that holder released it first;
//   - a renewal or guarded write of a lease that says it is no longer live
//     returns no earlier than that same deadline.
func CheckGrants(ops []Op) []string {
	var bad []string
	ls := leases(ops)
	byRes := map[string][]*leaseInfo{}
	for _, l := range ls {
		byRes[l.resource] = append(byRes[l.resource], l)
	}
	slack := int64(tickSlack)
	for res, list := range byRes {
		sort.Slice(list, func(i, j int) bool { return list[i].fence < list[j].fence })
		for i := 1; i < len(list); i++ {
			if list[i].fence == list[i-1].fence {
				bad = append(bad, fmt.Sprintf("%s: fence %d granted twice (leases %s and %s)", res, list[i].fence, list[i-1].id, list[i].id))
			}
		}
		for i, a := range list {
			for _, b := range list[i+1:] {
				// b has the higher fence.
				if b.grant.Return < a.grant.Call {
					bad = append(bad, fmt.Sprintf("%s: fence went backwards: lease %s (fence %d) returned before lease %s (fence %d) was requested",
						res, b.id, b.fence, a.id, a.fence))
				}
				if b.grant.Return+slack < a.deadline && !a.endedBefore(b.grant.Return) {
					bad = append(bad, fmt.Sprintf("%s: lease %s (fence %d) granted %v before lease %s (fence %d) could expire (send time + ttl)",
						res, b.id, b.fence, time.Duration(a.deadline-b.grant.Return), a.id, a.fence))
				}
			}
		}
	}
	for _, o := range ops {
		l := ls[o.LeaseID]
		if l == nil || o.Outcome != Failed || !(o.Kind == KindRenew && o.Reason == "LEASE_EXPIRED" ||
			o.Kind == KindWrite && o.Reason == "LEASE_VIOLATION" || o.Kind == KindTransfer && o.Reason == "LEASE_EXPIRED") {
			continue
		}
		if o.Return+slack < l.deadline && !l.endedBefore(o.Return) {
			bad = append(bad, fmt.Sprintf("%s: %s of lease %s answered %s %v before send time + ttl",
				l.resource, o.Kind, l.id, o.Reason, time.Duration(l.deadline-o.Return)))
		}
	}
	sort.Strings(bad)
	return bad
}

// Acknowledged returns the acknowledged grants of a history by lease id,
// with their fences, and whether each was (possibly) ended by its holder.
func Acknowledged(ops []Op) map[string]Grant {
	out := map[string]Grant{}
	for id, l := range leases(ops) {
		out[id] = Grant{Resource: l.resource, Fence: l.fence, MaybeEnded: len(l.ended) > 0, DeadlineNs: l.deadline}
	}
	return out
}

// Grant is one acknowledged grant.
type Grant struct {
	Resource   string
	Fence      uint64
	MaybeEnded bool  // a release or transfer of it was attempted
	DeadlineNs int64 // send time + ttl on the recorder's clock
}
