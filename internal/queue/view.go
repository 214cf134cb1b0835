package queue

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"math"
	"slices"

	"github.com/tenurehq/tenure/internal/registrar"
)

// Task is a copy of a task. Wall times are unix ms (UTC), 0 when unset.
// Payload and Result share the domain's bytes: do not modify them.
type Task struct {
	ID          string
	Namespace   string
	Queue       string
	Seq         uint64
	Payload     []byte
	Priority    int32
	State       State
	Attempts    uint32
	MaxAttempts uint32
	// NotBefore is when the task is (or was) claimable: not_before, or
	// the retry time after a failure or requeue.
	NotBefore   int64
	CreatedAt   int64
	ClaimedAt   int64
	CompletedAt int64
	LastError   string
	Result      []byte
	// LeaseID and LeaseSeq are the current (LEASED) or last lease.
	LeaseID  string
	LeaseSeq uint64
	Worker   string
}

func (qs *Queues) view(t *task) Task {
	nb := t.notBefore
	if t.state.claimable() {
		nb = t.readyAt
	}
	return Task{
		ID: t.id, Namespace: t.q.ns, Queue: t.q.name, Seq: t.seq, Payload: t.payload, Priority: t.priority,
		State: t.state, Attempts: t.attempts, MaxAttempts: t.maxAttempts, NotBefore: nb,
		CreatedAt: t.createdWall, ClaimedAt: t.claimedWall, CompletedAt: t.finishedWall,
		LastError: t.lastError, Result: t.result, LeaseID: t.leaseID, LeaseSeq: t.leaseSeq, Worker: t.worker,
	}
}

// Get returns one task, or TASK_NOT_FOUND.
func (qs *Queues) Get(ns, queue, id string) (Task, error) {
	t, err := qs.find(ns, queue, id)
	if err != nil {
		return Task{}, err
	}
	return qs.view(t), nil
}

// GetAt is Get as of registrar time now: a finished task past its
// retention is gone (TASK_NOT_FOUND), though the state drops it only at
// the next queue record.
func (qs *Queues) GetAt(ns, queue, id string, now registrar.Tick) (Task, error) {
	t, err := qs.find(ns, queue, id)
	if err == nil && t.goneAt(now) {
		err = taskNotFound(ns, queue, id)
	}
	if err != nil {
		return Task{}, err
	}
	return qs.view(t), nil
}

// List returns up to limit tasks of a queue after the task with sequence
// after, in enqueue order, in any of states (all when empty), and the
// sequence to resume after (0 when done). As GetAt, it leaves out the
// finished tasks whose retention has passed by registrar time now.
func (qs *Queues) List(ns, queue string, states []State, after uint64, limit int, now registrar.Tick) ([]Task, uint64) {
	q := qs.queues[qkey{registrar.OrDefault(ns), queue}]
	if q == nil || limit <= 0 {
		return nil, 0
	}
	var want [numStates]bool
	for _, s := range states {
		if int(s) < numStates {
			want[s] = true
		}
	}
	var out []Task
	var next uint64
	q.all.AscendGreaterOrEqual(&task{seq: after + 1}, func(t *task) bool {
		if len(states) > 0 && !want[t.state] || t.goneAt(now) {
			return true
		}
		if len(out) == limit {
			next = out[len(out)-1].Seq
			return false
		}
		out = append(out, qs.view(t))
		return true
	})
	return out, next
}

// Counts are a queue's tasks by state.
type Counts struct {
	Queued, Leased, Succeeded, Failed, Dead, Cancelled uint64
}

// Stats counts a queue's tasks by state as of registrar time now: the
// finished tasks whose retention has passed are not counted, though the
// state drops them only at the next queue record.
func (qs *Queues) Stats(ns, queue string, now registrar.Tick) Counts {
	q := qs.queues[qkey{registrar.OrDefault(ns), queue}]
	if q == nil {
		return Counts{}
	}
	c := q.counts
	q.finished.eachDue(now, func(t *task) { c[t.state]-- })
	return countsOf(c)
}

func countsOf(c [numStates]uint64) Counts {
	return Counts{Queued: c[Queued], Leased: c[Leased], Succeeded: c[Succeeded], Failed: c[Failed], Dead: c[Dead], Cancelled: c[Cancelled]}
}

// EachStats calls fn with every queue's counts, in no particular order,
// until fn returns false.
func (qs *Queues) EachStats(fn func(ns, queue string, c Counts) bool) {
	for k, q := range qs.queues {
		if !fn(k.ns, k.name, countsOf(q.counts)) {
			return
		}
	}
}

// NextReady reports the earliest time (wall ms) at which some task of the
// queue is claimable: at or before wall when one is claimable now. ok is
// false when the queue has nothing to claim, ever, without a change.
func (qs *Queues) NextReady(ns, queue string, wall int64) (at int64, ok bool) {
	q := qs.queues[qkey{registrar.OrDefault(ns), queue}]
	if q == nil {
		return 0, false
	}
	found := false
	q.ready.Ascend(func(t *task) bool {
		if !found || t.readyAt < at {
			at, found = t.readyAt, true
		}
		return at > wall // stop once one is ready now
	})
	if q.delayed.Len() > 0 && (!found || q.delayed[0].readyAt < at) {
		at, found = q.delayed[0].readyAt, true
	}
	return at, found
}

// maxPriorityLevels bounds the priorities OldestReady looks at: the
// oldest task of each of the highest this many.
const maxPriorityLevels = 256

// OldestReady reports the earliest ready time (wall ms: enqueue time,
// not_before or retry time) of the queue's tasks claimable at wall, and
// whether one is: wall − it is how long the task that has been claimable
// longest has waited (the queue's latency). It looks at the first task
// of each priority (the claim order puts the oldest first within one),
// of the highest maxPriorityLevels priorities.
func (qs *Queues) OldestReady(ns, queue string, wall int64) (at int64, ok bool) {
	q := qs.queues[qkey{registrar.OrDefault(ns), queue}]
	if q == nil {
		return 0, false
	}
	pivot := &task{priority: math.MaxInt32, readyAt: math.MinInt64}
	for range maxPriorityLevels {
		var first *task
		q.ready.AscendGreaterOrEqual(pivot, func(t *task) bool { first = t; return false })
		if first == nil {
			break
		}
		if first.readyAt <= wall && (!ok || first.readyAt < at) {
			at, ok = first.readyAt, true
		}
		if first.priority == math.MinInt32 {
			break
		}
		pivot = &task{priority: first.priority - 1, readyAt: math.MinInt64}
	}
	// Delayed tasks whose time has come are claimable too (the next
	// command moves them into the claim order).
	if q.delayed.Len() > 0 && q.delayed[0].readyAt <= wall && (!ok || q.delayed[0].readyAt < at) {
		at, ok = q.delayed[0].readyAt, true
	}
	return at, ok
}

// TaskOfLease returns the task a lease (by fence) currently holds.
func (qs *Queues) TaskOfLease(fence uint64) (Task, bool) {
	if t := qs.byLease[fence]; t != nil {
		return qs.view(t), true
	}
	return Task{}, false
}

// Len returns the number of tasks kept (not yet pruned).
func (qs *Queues) Len() int { return len(qs.bySeq) }

// Finished returns how many finished tasks are kept (until their prune
// tick, or their namespace's cap prunes them).
func (qs *Queues) Finished() int { return qs.prune.Len() }

// A ListTasks page token is the version byte, a checksum of the listing's
// filters (namespace, queue, states) and the sequence number of the last
// task returned. The checksum ties a token to its listing: continuing with
// other filters, or with a token that was never issued, is
// INVALID_ARGUMENT rather than a page of something else.
const pageTokenVersion = 1

func filterSum(ns, queue string, states []State) uint32 {
	h := fnv.New32a()
	h.Write([]byte(registrar.OrDefault(ns)))
	h.Write([]byte{0})
	h.Write([]byte(queue))
	var set, all byte // a set: the order and repeats of states do not matter
	for _, st := range states {
		set |= 1 << st
	}
	for st := Queued; st <= Cancelled; st++ {
		all |= 1 << st
	}
	if set == all {
		set = 0 // every state, named or not
	}
	h.Write([]byte{0, set})
	return h.Sum32()
}

// PageToken encodes the token of the ListTasks page after the task
// numbered after, for the listing of ns, queue and states.
func PageToken(ns, queue string, states []State, after uint64) string {
	b := binary.BigEndian.AppendUint32([]byte{pageTokenVersion}, filterSum(ns, queue, states))
	b = binary.AppendUvarint(b, after)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParsePageToken decodes a ListTasks page token ("" is the start) issued
// for the listing of ns, queue and states.
func ParsePageToken(tok, ns, queue string, states []State) (uint64, error) {
	if tok == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 6 || b[0] != pageTokenVersion {
		return 0, badPageToken("is not a token this server issued")
	}
	if binary.BigEndian.Uint32(b[1:5]) != filterSum(ns, queue, states) {
		return 0, badPageToken("was issued for another listing (namespace, queue or states); start again without it")
	}
	after, n := binary.Uvarint(b[5:])
	if n <= 0 || 5+n != len(b) {
		return 0, badPageToken("is not a token this server issued")
	}
	return after, nil
}

func badPageToken(why string) error {
	return registrar.NewError(registrar.ReasonInvalidArgument, map[string]string{"field": "page_token"}, "page_token: %s", why)
}

// Names lists the namespace's queues ("" = default) by name: every queue
// that holds tasks or has held them.
func (qs *Queues) Names(ns string) []string {
	ns = registrar.OrDefault(ns)
	var out []string
	for k := range qs.queues {
		if k.ns == ns {
			out = append(out, k.name)
		}
	}
	slices.Sort(out)
	return out
}
