package server

import (
	"sync"
	"sync/atomic"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// endHub tells KeepAlive streams that asked for it (notify_ended) when a
// lease they renew ends other than by its holder's release: a revocation
// (an operator's, a cancelled task's), an expiry, a transfer, an
// ancestor's end. The
// holder learns at once instead of at its next renewal, up to a third of
// the ttl later. Leases are indexed by fence, each followed by the stream
// that renewed (or followed, follow_lease_ids) it last; every end of a followed lease drops it, so the
// index holds live leases only (and a stream's, until the stream ends).
type endHub struct {
	mu      sync.Mutex
	bySeq   map[uint64]*endWatch
	watches atomic.Int32 // streams registered: the apply path skips an empty hub
}

// endWatch is one KeepAlive stream's registration.
type endWatch struct {
	wake chan struct{} // one token: ended is not empty

	seqs  map[uint64]struct{}      // the leases it follows (under endHub.mu)
	ended []*tenurev1.RenewFailure // to send (under endHub.mu)
}

func newEndHub() *endHub { return &endHub{bySeq: map[uint64]*endWatch{}} }

func (h *endHub) add() *endWatch {
	h.watches.Add(1)
	return &endWatch{wake: make(chan struct{}, 1), seqs: map[uint64]struct{}{}}
}

// remove forgets w and the leases it follows.
func (h *endHub) remove(w *endWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for seq := range w.seqs {
		if h.bySeq[seq] == w {
			delete(h.bySeq, seq)
		}
	}
	w.seqs = nil
	h.watches.Add(-1)
}

// follow has w told when the leases with these fences end.
func (h *endHub) follow(w *endWatch, seqs ...uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, seq := range seqs {
		if old := h.bySeq[seq]; old != nil && old != w {
			delete(old.seqs, seq)
		}
		h.bySeq[seq] = w
		w.seqs[seq] = struct{}{}
	}
}

// unfollow stops following the leases with these fences (renewals that
// failed: the lease is not the stream's to follow, or has ended already).
func (h *endHub) unfollow(w *endWatch, seqs ...uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, seq := range seqs {
		if h.bySeq[seq] == w {
			delete(h.bySeq, seq)
			delete(w.seqs, seq)
		}
	}
}

// endedBefore tells w of the end f of the lease with fence seq, found
// when w started to follow it, unless observe told it already (or f is
// nil: a release by its holder, not told); either way w no longer
// follows it.
func (h *endHub) endedBefore(w *endWatch, seq uint64, f *tenurev1.RenewFailure) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bySeq[seq] != w {
		return
	}
	delete(h.bySeq, seq)
	delete(w.seqs, seq)
	if f == nil {
		return
	}
	w.ended = append(w.ended, f)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns the ends to send.
func (h *endHub) take(w *endWatch) []*tenurev1.RenewFailure {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := w.ended
	w.ended = nil
	return e
}

// observe hands the ends of followed leases to their streams. It runs on
// the apply path (the feed's observer): a map lookup per ended lease.
func (h *endHub) observe(recs []statemachine.Sealed) {
	if h.watches.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sl := range recs {
		e := sl.Record.GetEnded()
		if e == nil {
			continue
		}
		w := h.bySeq[e.GetLease().GetSeq()]
		if w == nil {
			continue
		}
		delete(h.bySeq, e.GetLease().GetSeq())
		delete(w.seqs, e.GetLease().GetSeq())
		if e.State == tenurev1.State_STATE_RELEASED && e.EndedBy == 0 && e.Reason != tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED {
			// Its holder's own release (a completed or failed task, a
			// reported piece): a client that keeps it alive is already
			// letting it go, and must not take its own release for a loss.
			continue
		}
		w.ended = append(w.ended, endedFailure(e))
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// endedFailure is the failure a renewal of the ended lease would answer.
func endedFailure(e *logpb.LeaseEnded) *tenurev1.RenewFailure {
	return endFailure(e.GetLease().GetLeaseId(), e.State, e.RevokeReason, e.EndedBy)
}

// endedFailureOf is endedFailure of a lease read from the registrar, or
// nil if it has not ended, or ended by its holder's own release (which
// is not told).
func endedFailureOf(l registrar.Lease) *tenurev1.RenewFailure {
	var endedBy uint64
	if l.EndedBy != "" {
		_, _, endedBy, _ = registrar.ParseLeaseID(l.EndedBy)
	}
	switch {
	case !l.State.Terminal():
		return nil
	case l.State == registrar.Released && endedBy == 0 && l.ReleaseReason != tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED:
		return nil
	}
	return endFailure(l.ID, tenurev1.State(l.State), l.RevokeReason, endedBy)
}

func endFailure(id string, state tenurev1.State, revokeReason string, endedBy uint64) *tenurev1.RenewFailure {
	why := ""
	switch {
	case endedBy != 0:
		why = " with its ancestor (fence " + utoa(endedBy) + ")"
	case revokeReason != "":
		why = ": " + revokeReason
	}
	var err error
	if state == tenurev1.State_STATE_EXPIRED {
		err = registrar.NewError(registrar.ReasonLeaseExpired, map[string]string{"lease_id": id}, "lease %s expired%s", id, why)
	} else {
		st := registrar.StateFromProto(state).String()
		err = registrar.NewError(registrar.ReasonLeaseTerminal, map[string]string{"lease_id": id, "state": st},
			"lease %s is %s%s", id, st, why)
	}
	return failures([]registrar.Failure{{LeaseID: id, Err: err}})[0]
}
