package registrar

import (
	"cmp"
	"slices"
)

// QueuedWait names a queued acquire: its waiter id and holder, what a
// CancelWait command needs.
type QueuedWait struct {
	ID     uint64
	Holder string
}

// QueuedWaits lists every queued acquire, the latest first.
//
// A new leader withdraws the waits queued under earlier terms (their
// callers waited on a member that no longer leads, and have gone or
// retried), in this order: withdrawing the last of a resource's queue
// first never unblocks another of them on the way, so none is granted a
// lease nobody would receive. Waiter ids grow in queue order.
func (r *Registrar) QueuedWaits() []QueuedWait {
	out := make([]QueuedWait, 0, len(r.waiters))
	for _, w := range r.waiters {
		out = append(out, QueuedWait{ID: w.id, Holder: w.holder})
	}
	slices.SortFunc(out, func(a, b QueuedWait) int { return cmp.Compare(b.ID, a.ID) })
	return out
}
