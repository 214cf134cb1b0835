package server

import (
	"encoding/hex"
	"strconv"
	"sync"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
	"github.com/tenurehq/tenure/internal/wire"
)

// durationMs converts an optional wire duration to milliseconds, rounding
// up so that a deadline is never earlier than asked. Absent stays nil so
// that the policy default applies. Zero and negative values pass through
// for the registrar to answer TTL_OUT_OF_RANGE / INVALID_ARGUMENT.
func durationMs(field string, d *durationpb.Duration) (*int64, error) {
	if d == nil {
		return nil, nil
	}
	if err := d.CheckValid(); err != nil {
		return nil, invalidArg(field, err.Error())
	}
	// From the fields rather than AsDuration, which saturates at ±292
	// years: a valid Duration reaches ±10,000 years, whose milliseconds
	// still fit in an int64. Rounded up to the millisecond, as Ms does.
	ms := d.GetSeconds()*1000 + int64(d.GetNanos()/1e6)
	if d.GetNanos()%1e6 > 0 {
		ms++
	}
	return &ms, nil
}

// Event type names (API.md).
const (
	EventRegistrarInitialized = "registrar.initialized"
	EventLeaseIssued          = "lease.issued"
	EventLeaseRenewed         = "lease.renewed"
	EventLeaseReleased        = "lease.released"
	EventLeaseExpired         = "lease.expired"
	EventLeaseRevoked         = "lease.revoked"
	EventLeaseTransferred     = "lease.transferred"
	EventLeaseGrace           = "lease.grace"
	EventLeaseConsumed        = "lease.consumed"
	EventLeaseWaiting         = "lease.waiting"
	EventLeaseWaitEnded       = "lease.wait_ended"
	EventStateWritten         = "state.written"
	EventPolicySet            = "policy.set"
	EventLedgerCheckpoint     = "ledger.checkpoint"
	EventMemberSet            = "cluster.member_set"
)

func itoa(v int64) string  { return strconv.FormatInt(v, 10) }
func utoa(v uint64) string { return strconv.FormatUint(v, 10) }

// durationString writes milliseconds as the JSON mapping of a protobuf
// Duration does ("60s", "0.250s"), the form of every other duration in
// the API.
func durationString(ms int64) string {
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	if ms%1000 == 0 {
		return sign + strconv.FormatInt(ms/1000, 10) + "s"
	}
	return sign + strconv.FormatInt(ms/1000, 10) + "." + strconv.FormatInt(1000+ms%1000, 10)[1:] + "s"
}

// wallString writes a wall time of an event's details with three
// fractional digits always, as protobuf JSON writes the event's own
// timestamps (…:51.500Z, not …:51.5Z).
func wallString(ms int64) string {
	return registrar.WallTime(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// RenderEvent turns a sealed ledger record into the wire event, as Watch
// and History send it (tenure audit export prints the durable ledger so).
func RenderEvent(s statemachine.Sealed) *tenurev1.Event { return renderEvent(s) }

// eventCache holds the Watch answers of the latest records, rendered and
// encoded once for every Watch stream that sends them (rendering and
// encoding each event per stream were a third of a busy server's CPU
// with 30 watchers). Its messages are shared: read-only.
type eventCache struct {
	mu     sync.Mutex
	events map[uint64]*wire.Encoded
	order  []uint64 // indexes in the order cached, for eviction
	next   int
}

// eventCacheSize bounds the answers kept.
const eventCacheSize = 4096

// response returns the Watch answer of record s, made once.
func (c *eventCache) response(s statemachine.Sealed) (*wire.Encoded, error) {
	idx := s.Record.Index
	c.mu.Lock()
	m := c.events[idx]
	c.mu.Unlock()
	if m != nil {
		return m, nil
	}
	m, err := wire.Encode(&tenurev1.WatchResponse{Event: renderEvent(s)})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		c.events, c.order = make(map[uint64]*wire.Encoded, eventCacheSize), make([]uint64, eventCacheSize)
	}
	if have := c.events[idx]; have != nil {
		return have, nil
	}
	if old := c.order[c.next]; old != 0 {
		delete(c.events, old)
	}
	c.order[c.next], c.events[idx] = idx, m
	c.next = (c.next + 1) % eventCacheSize
	return m, nil
}

// renderEvent turns a sealed ledger record into the wire event.
func renderEvent(s statemachine.Sealed) *tenurev1.Event {
	rec := s.Record
	ev := &tenurev1.Event{
		Index: rec.Index,
		Tick:  rec.Tick,
		Actor: rec.Actor,
		Hash:  append([]byte(nil), s.Hash[:]...),
	}
	if rec.Wall != 0 {
		ev.Time = timestamppb.New(registrar.WallTime(rec.Wall))
	}
	d := map[string]string{}
	ref := func(r *logpb.LeaseRef) {
		ev.Namespace, ev.Resource, ev.LeaseId, ev.Holder, ev.Fence = r.GetNamespace(), r.GetResource(), r.GetLeaseId(), r.GetHolder(), r.GetSeq()
	}
	switch b := rec.Body.(type) {
	case *logpb.Record_Initialized:
		ev.Type = EventRegistrarInitialized
		d["public_key"] = hex.EncodeToString(b.Initialized.PublicKey)
	case *logpb.Record_Issued:
		is := b.Issued
		ev.Type = EventLeaseIssued
		ev.Namespace, ev.Resource, ev.LeaseId, ev.Holder, ev.Fence = is.Namespace, is.Resource, is.LeaseId, is.Holder, is.Seq
		d["mode"] = is.Mode.String()
		d["ttl"] = durationString(is.TtlMs)
		d["expires_tick"] = itoa(is.ExpiresTick)
		d["expires_at"] = wallString(is.ExpiresWall)
		if is.MaxRenewals != 0 {
			d["max_renewals"] = utoa(uint64(is.MaxRenewals))
		}
		if is.MaxLifetimeMs != 0 {
			d["max_lifetime"] = durationString(is.MaxLifetimeMs)
		}
		if is.WaiterId != 0 {
			d["waiter_id"] = utoa(is.WaiterId)
		}
		if is.TransferredFrom != 0 {
			d["transferred_from_fence"] = utoa(is.TransferredFrom)
		}
		if is.RenewalCount != 0 { // carried over by a transfer
			d["renewal_count"] = utoa(uint64(is.RenewalCount))
		}
		if is.LifetimeFromTick != 0 {
			d["acquired_tick"] = itoa(is.LifetimeFromTick)
			d["acquired_at"] = wallString(is.LifetimeFromWall)
		}
		renderTreeEvent(d, is.Derivation)
	case *logpb.Record_Renewed:
		ev.Type = EventLeaseRenewed
		ref(b.Renewed.Lease)
		d["ttl"] = durationString(b.Renewed.TtlMs)
		d["expires_tick"] = itoa(b.Renewed.ExpiresTick)
		d["expires_at"] = wallString(b.Renewed.ExpiresWall)
	case *logpb.Record_Ended:
		e := b.Ended
		ref(e.Lease)
		switch {
		case e.State == tenurev1.State_STATE_RELEASED && e.Reason == tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED && e.EndedBy == 0:
			ev.Type = EventLeaseTransferred
			d["transferred_to_fence"] = utoa(e.TransferredTo)
		case e.State == tenurev1.State_STATE_RELEASED:
			ev.Type = EventLeaseReleased
		case e.State == tenurev1.State_STATE_EXPIRED:
			ev.Type = EventLeaseExpired
		case e.State == tenurev1.State_STATE_REVOKED:
			ev.Type = EventLeaseRevoked
		}
		d["state"] = e.State.String()
		if e.Reason != tenurev1.ReleaseReason_RELEASE_REASON_UNSPECIFIED {
			d["reason"] = e.Reason.String()
		}
		if e.RevokeReason != "" {
			d["revoke_reason"] = e.RevokeReason
		}
		if e.EndedBy != 0 {
			// Ended because an ancestor ended (a lease tree cascade).
			d["ended_by_fence"] = utoa(e.EndedBy)
		}
	case *logpb.Record_Consumed:
		ev.Type = EventLeaseConsumed
		ref(b.Consumed.Lease)
		d["counter"] = b.Consumed.Counter
		d["amount"] = itoa(b.Consumed.Amount)
	case *logpb.Record_Grace:
		ev.Type = EventLeaseGrace
		ref(b.Grace.Lease)
		d["until_tick"] = itoa(b.Grace.UntilTick)
		d["until"] = wallString(b.Grace.UntilWall)
	case *logpb.Record_Waiting:
		w := b.Waiting
		ev.Type = EventLeaseWaiting
		ev.Namespace, ev.Resource, ev.Holder = w.Namespace, w.Resource, w.Holder
		d["waiter_id"] = utoa(w.WaiterId)
		d["mode"] = w.Mode.String()
		d["ttl"] = durationString(w.TtlMs)
		d["deadline_tick"] = itoa(w.DeadlineTick)
	case *logpb.Record_WaitEnded:
		w := b.WaitEnded
		ev.Type = EventLeaseWaitEnded
		ev.Namespace, ev.Resource, ev.Holder = w.Namespace, w.Resource, w.Holder
		d["waiter_id"] = utoa(w.WaiterId)
	case *logpb.Record_StateWritten:
		sw := b.StateWritten
		ev.Type = EventStateWritten
		ev.Namespace, ev.Resource, ev.Fence = sw.Namespace, sw.Resource, sw.Seq
		d["epoch"] = utoa(sw.Epoch)
		d["bytes"] = strconv.Itoa(len(sw.Data))
	case *logpb.Record_PolicySet:
		ev.Type = EventPolicySet
		ev.Namespace = b.PolicySet.Namespace
	case *logpb.Record_MemberSet:
		ev.Type = EventMemberSet
		d["id"] = b.MemberSet.Id
		if b.MemberSet.Removed {
			d["removed"] = "true"
		} else {
			d["api_address"], d["raft_address"] = b.MemberSet.ApiAddress, b.MemberSet.RaftAddress
		}
	case *logpb.Record_Checkpoint:
		ev.Type = EventLedgerCheckpoint
		d["covers_index"] = utoa(b.Checkpoint.CoversIndex)
		d["head"] = hex.EncodeToString(b.Checkpoint.Head)
		d["signature"] = hex.EncodeToString(b.Checkpoint.Signature)
	case *logpb.Record_TaskEnqueued, *logpb.Record_TaskClaimed, *logpb.Record_TaskCompleted, *logpb.Record_TaskFailed,
		*logpb.Record_TaskRequeued, *logpb.Record_TaskDead, *logpb.Record_TaskCancelled, *logpb.Record_TaskRetried:
		renderTaskEvent(ev, d, rec)
	case *logpb.Record_Pool:
		renderPoolEvent(ev, d, b.Pool)
	case *logpb.Record_QueueConfigured:
		ev.Type, ev.Namespace = EventQueueConfigured, b.QueueConfigured.Namespace
		ev.Resource = queue.Resource(b.QueueConfigured.Queue, "")
		d["queue"], d["max_attempts"] = b.QueueConfigured.Queue, utoa(uint64(b.QueueConfigured.MaxAttempts))
	}
	if len(d) > 0 {
		ev.Details = d
	}
	return ev
}

// eventScope returns the namespace and resource a record concerns ("" for
// registrar-wide records), for filtering Watch and History.
func eventScope(rec *logpb.Record) (ns, resource string) {
	switch b := rec.Body.(type) {
	case *logpb.Record_Issued:
		return b.Issued.Namespace, b.Issued.Resource
	case *logpb.Record_Renewed:
		return b.Renewed.GetLease().GetNamespace(), b.Renewed.GetLease().GetResource()
	case *logpb.Record_Ended:
		return b.Ended.GetLease().GetNamespace(), b.Ended.GetLease().GetResource()
	case *logpb.Record_Grace:
		return b.Grace.GetLease().GetNamespace(), b.Grace.GetLease().GetResource()
	case *logpb.Record_Consumed:
		return b.Consumed.GetLease().GetNamespace(), b.Consumed.GetLease().GetResource()
	case *logpb.Record_Waiting:
		return b.Waiting.Namespace, b.Waiting.Resource
	case *logpb.Record_WaitEnded:
		return b.WaitEnded.Namespace, b.WaitEnded.Resource
	case *logpb.Record_StateWritten:
		return b.StateWritten.Namespace, b.StateWritten.Resource
	case *logpb.Record_PolicySet:
		return b.PolicySet.Namespace, ""
	case *logpb.Record_QueueConfigured:
		return b.QueueConfigured.Namespace, queue.Resource(b.QueueConfigured.Queue, "")
	}
	if pr := rec.GetPool(); pr != nil {
		return poolEventScope(pr)
	}
	if ref := taskRefOf(rec); ref != nil {
		return ref.Namespace, queue.Resource(ref.Queue, ref.TaskId)
	}
	return "", ""
}
