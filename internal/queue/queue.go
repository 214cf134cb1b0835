package queue

import (
	"container/heap"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/google/btree"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// State is a task's state; the numbers match tenure.v1.TaskState.
type State uint8

// Task states.
const (
	Queued    = State(tenurev1.TaskState_TASK_STATE_QUEUED)
	Leased    = State(tenurev1.TaskState_TASK_STATE_LEASED)
	Succeeded = State(tenurev1.TaskState_TASK_STATE_SUCCEEDED)
	Failed    = State(tenurev1.TaskState_TASK_STATE_FAILED)
	Dead      = State(tenurev1.TaskState_TASK_STATE_DEAD)
	Cancelled = State(tenurev1.TaskState_TASK_STATE_CANCELLED)
	numStates = 7
)

func (s State) String() string { return tenurev1.TaskState(s).String() }

// Finished reports whether the task will never run again.
func (s State) Finished() bool { return s == Succeeded || s == Dead || s == Cancelled }

// claimable reports whether the task waits for a claim (after its ready time).
func (s State) claimable() bool { return s == Queued || s == Failed }

// Limits and defaults.
const (
	DefaultMaxAttempts = 5
	MaxAttemptsLimit   = 1000
	MaxPayloadBytes    = 256 << 10
	MaxResultBytes     = 256 << 10
	MaxErrorBytes      = 8 << 10
	MaxBatch           = 1000
	MaxClaim           = 1000
	BackoffBase        = 1000        // ms, first retry; retry n after n⁴ of it
	BackoffMax         = 3600 * 1000 // ms
	maxDelayMs         = 10 * 365 * 86_400_000
	// ResourcePrefix starts the resource of every task lease.
	ResourcePrefix = "queue/"
)

// outcome of a finished task: how it got there (for idempotent retries).
const (
	byNone     = 0
	byComplete = 1
	byFail     = 2
)

type task struct {
	seq          uint64
	q            *queue
	id           string
	payload      []byte
	priority     int32
	state        State
	attempts     uint32
	maxAttempts  uint32
	notBefore    int64
	readyAt      int64
	createdWall  int64
	claimedWall  int64
	finishedWall int64
	lastError    string
	result       []byte
	leaseSeq     uint64
	leaseID      string
	worker       string
	pruneTick    registrar.Tick
	outcome      uint8
	// Index bookkeeping (derived, not snapshotted).
	where    uint8 // 0 none, 1 ready, 2 delayed
	delayIdx int
	pruneIdx int // in Queues.prune
	nsIdx    int // in its namespace's finishedHeap
	qIdx     int // in its queue's finishedHeap
}

const (
	inNone = iota
	inReady
	inDelayed
)

type qkey struct{ ns, name string }

type queue struct {
	ns, name string
	tasks    map[string]*task
	all      *btree.BTreeG[*task] // by seq
	ready    *btree.BTreeG[*task] // claim order
	delayed  delayHeap            // by ready time
	counts   [numStates]uint64
	// finished holds the queue's finished tasks by prune tick: the first
	// to give up when the namespace keeps too many (Queues.finish).
	finished finishedHeap
	fIdx     int      // in its namespace's fullestHeap, -1 when it keeps none
	pending  *pending // its namespace's unfinished tasks
}

// pending counts a namespace's unfinished tasks and their payload bytes,
// for its MaxPendingTasks and MaxPendingTaskBytes quotas.
type pending struct{ tasks, bytes uint64 }

// tally moves t's share of its namespace's pending counts by sign (±1),
// when t is unfinished.
func (t *task) tally(sign int) {
	if t.state.Finished() {
		return
	}
	if sign > 0 {
		t.q.pending.tasks++
		t.q.pending.bytes += uint64(len(t.payload))
	} else {
		t.q.pending.tasks--
		t.q.pending.bytes -= uint64(len(t.payload))
	}
}

func bySeq(a, b *task) bool { return a.seq < b.seq }

// claimOrder: higher priority, then earlier ready time, then enqueue order.
func claimOrder(a, b *task) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if a.readyAt != b.readyAt {
		return a.readyAt < b.readyAt
	}
	return a.seq < b.seq
}

// Queues is the work-queue domain. It is not safe for concurrent use.
type Queues struct {
	reg     *registrar.Registrar
	queues  map[qkey]*queue
	bySeq   map[uint64]*task
	byLease map[uint64]*task // LEASED tasks by lease seq
	nextSeq uint64
	// prune holds every finished task, by prune tick; finished holds
	// each namespace's, for its MaxRetainedTasks, and fullest each
	// namespace's queues that keep finished tasks, the one keeping most
	// first (the one to give up a task past the cap).
	prune    finishedHeap
	finished map[string]*finishedHeap
	fullest  map[string]*fullestHeap
	pending  map[string]*pending // by namespace
	configs  map[qkey]uint32     // queues' default max_attempts (ConfigureQueue)
}

// New returns an empty queue domain beside reg, hooked to its lease ends.
func New(reg *registrar.Registrar) *Queues {
	q := &Queues{reg: reg, queues: map[qkey]*queue{}, bySeq: map[uint64]*task{}, byLease: map[uint64]*task{}, nextSeq: 1,
		prune: finishedHeap{at: pruneIdx}, finished: map[string]*finishedHeap{}, fullest: map[string]*fullestHeap{},
		pending: map[string]*pending{}, configs: map[qkey]uint32{}}
	reg.OnLeaseEnd(q.leaseEnded)
	return q
}

func (qs *Queues) queue(ns, name string, create bool) *queue {
	k := qkey{ns, name}
	if q := qs.queues[k]; q != nil || !create {
		return q
	}
	pend := qs.pending[ns]
	if pend == nil {
		pend = &pending{}
		qs.pending[ns] = pend
	}
	q := &queue{ns: ns, name: name, tasks: map[string]*task{},
		all: btree.NewG(32, bySeq), ready: btree.NewG(32, claimOrder), finished: finishedHeap{at: qIdx}, fIdx: -1, pending: pend}
	qs.queues[k] = q
	return q
}

func (qs *Queues) lookup(ns, name, id string) *task {
	if q := qs.queues[qkey{registrar.OrDefault(ns), name}]; q != nil {
		return q.tasks[id]
	}
	return nil
}

// Resource returns the lease resource of a task.
func Resource(queue, id string) string {
	if strings.ContainsAny(queue, "%/") {
		queue = queueEscaper.Replace(queue)
	}
	return ResourcePrefix + queue + "/" + id
}

// queueEscaper writes a queue name without "/", so that the first "/"
// after the prefix ends it: otherwise queue "a" task "b/c" and queue
// "a/b" task "c" would share resource queue/a/b/c, and one task's lease
// would block the other.
var queueEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// ---- indexes ----

func (q *queue) makeReady(t *task, wall int64) {
	if t.readyAt <= wall {
		q.ready.ReplaceOrInsert(t)
		t.where = inReady
	} else {
		heap.Push(&q.delayed, t)
		t.where = inDelayed
	}
}

func (q *queue) unready(t *task) {
	switch t.where {
	case inReady:
		q.ready.Delete(t)
	case inDelayed:
		heap.Remove(&q.delayed, t.delayIdx)
	}
	t.where = inNone
}

// promote moves the delayed tasks ready at wall into the claim order. It
// changes only an index, never what a claim decides (the claim checks each
// task's ready time itself).
func (q *queue) promote(wall int64) {
	for q.delayed.Len() > 0 && q.delayed[0].readyAt <= wall {
		t := heap.Pop(&q.delayed).(*task)
		q.ready.ReplaceOrInsert(t)
		t.where = inReady
	}
}

func (q *queue) setState(t *task, s State) {
	q.counts[t.state]--
	t.tally(-1)
	t.state = s
	t.tally(+1)
	q.counts[s]++
}

type delayHeap []*task

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	if h[i].readyAt != h[j].readyAt {
		return h[i].readyAt < h[j].readyAt
	}
	return h[i].seq < h[j].seq
}
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].delayIdx, h[j].delayIdx = i, j
}
func (h *delayHeap) Push(x any) { t := x.(*task); t.delayIdx = len(*h); *h = append(*h, t) }
func (h *delayHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.delayIdx = -1
	return t
}

// finishedHeap orders finished tasks by prune tick, then sequence (a
// total order, so the first is the same on every replica however the
// heap was built). at is the task's index field for this heap: a task is
// in the registrar-wide heap and in its namespace's.
type finishedHeap struct {
	ts []*task
	at func(*task) *int
}

// eachDue calls fn with every task whose prune tick is at or before now,
// visiting only those and their children in the heap.
func (h *finishedHeap) eachDue(now registrar.Tick, fn func(*task)) {
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h.ts) || h.ts[i].pruneTick > now {
			return
		}
		fn(h.ts[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
}

func pruneIdx(t *task) *int { return &t.pruneIdx }
func nsIdx(t *task) *int    { return &t.nsIdx }
func qIdx(t *task) *int     { return &t.qIdx }

func (h *finishedHeap) Len() int { return len(h.ts) }
func (h *finishedHeap) Less(i, j int) bool {
	a, b := h.ts[i], h.ts[j]
	if a.pruneTick != b.pruneTick {
		return a.pruneTick < b.pruneTick
	}
	return a.seq < b.seq
}
func (h *finishedHeap) Swap(i, j int) {
	h.ts[i], h.ts[j] = h.ts[j], h.ts[i]
	*h.at(h.ts[i]), *h.at(h.ts[j]) = i, j
}
func (h *finishedHeap) Push(x any) { t := x.(*task); *h.at(t) = len(h.ts); h.ts = append(h.ts, t) }
func (h *finishedHeap) Pop() any {
	t := h.ts[len(h.ts)-1]
	h.ts[len(h.ts)-1] = nil
	h.ts = h.ts[:len(h.ts)-1]
	*h.at(t) = -1
	return t
}

// fullestHeap orders a namespace's queues that keep finished tasks: the
// one keeping most first, then the one whose oldest finished task is
// nearest its prune tick, then by name (a total order, so the first is the
// same on every replica).
type fullestHeap []*queue

func (h fullestHeap) Len() int { return len(h) }
func (h fullestHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.finished.Len() != b.finished.Len() {
		return a.finished.Len() > b.finished.Len()
	}
	if x, y := a.finished.ts[0], b.finished.ts[0]; x.pruneTick != y.pruneTick {
		return x.pruneTick < y.pruneTick
	}
	return a.name < b.name
}
func (h fullestHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].fIdx, h[j].fIdx = i, j
}
func (h *fullestHeap) Push(x any) { q := x.(*queue); q.fIdx = len(*h); *h = append(*h, q) }
func (h *fullestHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.fIdx = -1
	return q
}

// ---- backoff ----

// Backoff is the delay before retry number attempt (≥ 1) of a task:
// BackoffBase·attempt⁴ (1 s, 16 s, 81 s, 256 s, 625 s, …, as River's), capped
// at BackoffMax (1 h, from the 8th), scaled by a jitter in [0.75, 1.25)
// derived from the task id and attempt (no randomness). With the default
// five attempts a task rides out about six minutes of a failing dependency
// before it is dead.
func Backoff(id string, attempt uint32) int64 {
	a := int64(min(max(attempt, 1), 8)) // 8⁴ s is past the cap
	d := min(int64(BackoffBase)*a*a*a*a, BackoffMax)
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{byte(attempt), byte(attempt >> 8), byte(attempt >> 16), byte(attempt >> 24)})
	frac := int64(h.Sum64() % 1000) // 0..999
	return d*3/4 + d*frac/2000
}

// LeaseTask names the claimed task whose current lease has sequence
// (fence) seq, if there is one.
func (qs *Queues) LeaseTask(seq uint64) (queue, id string, ok bool) {
	t := qs.byLease[seq]
	if t == nil {
		return "", "", false
	}
	return t.q.name, t.id, true
}

// ---- apply ----

// Owns reports whether a record belongs to the queue domain.
func Owns(rec *logpb.Record) bool {
	switch rec.Body.(type) {
	case *logpb.Record_TaskEnqueued, *logpb.Record_TaskClaimed, *logpb.Record_TaskCompleted, *logpb.Record_TaskFailed,
		*logpb.Record_TaskRequeued, *logpb.Record_TaskDead, *logpb.Record_TaskCancelled, *logpb.Record_TaskRetried,
		*logpb.Record_QueueConfigured:
		return true
	}
	return false
}

// Apply applies one sealed queue record. It fails only on a record that
// cannot follow the current state (a corrupt or reordered ledger).
func (qs *Queues) Apply(rec *logpb.Record) error {
	qs.pruneTo(registrar.Tick(rec.Tick))
	switch b := rec.Body.(type) {
	case *logpb.Record_QueueConfigured:
		c := b.QueueConfigured
		if err := ValidateQueue(c.Namespace, c.Queue); err != nil || c.Namespace == "" || c.MaxAttempts > MaxAttemptsLimit {
			return fmt.Errorf("record %d: bad queue configuration %s/%s", rec.Index, c.Namespace, c.Queue)
		}
		qs.configure(c)
	case *logpb.Record_TaskEnqueued:
		e := b.TaskEnqueued
		ref := e.GetTask()
		if ref.GetSeq() == 0 || ref.Seq < qs.nextSeq || qs.bySeq[ref.Seq] != nil {
			return fmt.Errorf("record %d: task sequence %d reused", rec.Index, ref.GetSeq())
		}
		q := qs.queue(ref.Namespace, ref.Queue, true)
		if q.tasks[ref.TaskId] != nil {
			return fmt.Errorf("record %d: task %s enqueued twice", rec.Index, ref.TaskId)
		}
		if e.MaxAttempts == 0 {
			return fmt.Errorf("record %d: task %s without max attempts", rec.Index, ref.TaskId)
		}
		t := &task{seq: ref.Seq, q: q, id: ref.TaskId, payload: e.Payload, priority: e.Priority, state: Queued,
			maxAttempts: e.MaxAttempts, notBefore: e.NotBefore, readyAt: max(e.NotBefore, rec.Wall),
			createdWall: rec.Wall, delayIdx: -1, pruneIdx: -1, nsIdx: -1, qIdx: -1}
		qs.nextSeq = ref.Seq + 1
		qs.add(q, t)
		q.makeReady(t, rec.Wall)
	case *logpb.Record_TaskClaimed:
		c := b.TaskClaimed
		t, err := qs.recordTask(rec, c.GetTask())
		if err != nil {
			return err
		}
		if !t.state.claimable() || c.Attempt != t.attempts+1 || c.LeaseSeq == 0 || qs.byLease[c.LeaseSeq] != nil {
			return fmt.Errorf("record %d: claim of task %s in state %s (attempt %d after %d)", rec.Index, t.id, t.state, c.Attempt, t.attempts)
		}
		t.q.unready(t)
		t.q.setState(t, Leased)
		t.attempts = c.Attempt
		t.leaseSeq, t.leaseID, t.worker = c.LeaseSeq, c.LeaseId, c.Worker
		t.claimedWall = rec.Wall
		t.outcome = byNone
		qs.byLease[c.LeaseSeq] = t
	case *logpb.Record_TaskCompleted:
		t, err := qs.leasedTask(rec, b.TaskCompleted.GetTask())
		if err != nil {
			return err
		}
		t.result = b.TaskCompleted.Result
		qs.finish(rec, t, Succeeded, registrar.Tick(b.TaskCompleted.PruneTick))
		t.outcome = byComplete
	case *logpb.Record_TaskFailed:
		t, err := qs.leasedTask(rec, b.TaskFailed.GetTask())
		if err != nil {
			return err
		}
		delete(qs.byLease, t.leaseSeq)
		t.q.setState(t, Failed)
		t.lastError = b.TaskFailed.Error
		t.readyAt = b.TaskFailed.ReadyAt
		t.outcome = byFail
		t.q.makeReady(t, rec.Wall)
	case *logpb.Record_TaskRequeued:
		t, err := qs.leasedTask(rec, b.TaskRequeued.GetTask())
		if err != nil {
			return err
		}
		delete(qs.byLease, t.leaseSeq)
		t.q.setState(t, Queued)
		if b.TaskRequeued.AttemptReturned && t.attempts > 0 {
			t.attempts--
		}
		if !b.TaskRequeued.KeepLastError {
			t.lastError = b.TaskRequeued.Reason
		}
		t.readyAt = b.TaskRequeued.ReadyAt
		t.q.makeReady(t, rec.Wall)
	case *logpb.Record_TaskDead:
		t, err := qs.leasedTask(rec, b.TaskDead.GetTask())
		if err != nil {
			return err
		}
		t.lastError = b.TaskDead.Error
		qs.finish(rec, t, Dead, registrar.Tick(b.TaskDead.PruneTick))
		if b.TaskDead.ByFail {
			t.outcome = byFail
		}
	case *logpb.Record_TaskCancelled:
		t, err := qs.recordTask(rec, b.TaskCancelled.GetTask())
		if err != nil {
			return err
		}
		if t.state.Finished() {
			return fmt.Errorf("record %d: cancel of task %s in state %s", rec.Index, t.id, t.state)
		}
		t.q.unready(t)
		qs.finish(rec, t, Cancelled, registrar.Tick(b.TaskCancelled.PruneTick))
	case *logpb.Record_TaskRetried:
		t, err := qs.recordTask(rec, b.TaskRetried.GetTask())
		if err != nil {
			return err
		}
		switch {
		case t.state.Finished():
			qs.unfinish(t)
		case t.state == Failed:
			t.q.unready(t)
		default:
			return fmt.Errorf("record %d: retry of task %s in state %s", rec.Index, t.id, t.state)
		}
		t.q.setState(t, Queued)
		t.attempts, t.result, t.finishedWall, t.outcome = 0, nil, 0, byNone
		t.readyAt = b.TaskRetried.ReadyAt
		t.q.makeReady(t, rec.Wall)
	default:
		return fmt.Errorf("record %d: not a queue record: %T", rec.Index, rec.Body)
	}
	return nil
}

// configure sets or (max_attempts 0) drops a queue's defaults.
func (qs *Queues) configure(c *logpb.QueueConfigured) {
	if c.MaxAttempts == 0 {
		delete(qs.configs, qkey{c.Namespace, c.Queue})
	} else {
		qs.configs[qkey{c.Namespace, c.Queue}] = c.MaxAttempts
	}
}

func (qs *Queues) add(q *queue, t *task) {
	q.tasks[t.id] = t
	q.all.ReplaceOrInsert(t)
	q.counts[t.state]++
	t.tally(+1)
	qs.bySeq[t.seq] = t
}

func (qs *Queues) recordTask(rec *logpb.Record, ref *logpb.TaskRef) (*task, error) {
	t := qs.bySeq[ref.GetSeq()]
	if t == nil || t.id != ref.GetTaskId() || t.q.name != ref.GetQueue() || t.q.ns != ref.GetNamespace() {
		return nil, fmt.Errorf("record %d: names unknown task %d (%s)", rec.Index, ref.GetSeq(), ref.GetTaskId())
	}
	return t, nil
}

func (qs *Queues) leasedTask(rec *logpb.Record, ref *logpb.TaskRef) (*task, error) {
	t, err := qs.recordTask(rec, ref)
	if err == nil && t.state != Leased {
		return nil, fmt.Errorf("record %d: task %s is %s, not leased", rec.Index, t.id, t.state)
	}
	return t, err
}

func (qs *Queues) finish(rec *logpb.Record, t *task, s State, pruneTick registrar.Tick) {
	if t.state == Leased {
		delete(qs.byLease, t.leaseSeq)
	}
	t.q.setState(t, s)
	t.finishedWall = rec.Wall
	t.pruneTick = pruneTick
	qs.keepFinished(t)
	// The namespace keeps at most its policy's MaxRetainedTasks. Over it,
	// the queue keeping the most finished tasks gives up the one nearest
	// its prune tick, so that a busy queue does not push a quiet one's out
	// (its dead tasks, the ids it keeps idempotent). No later record names
	// a finished task, so pruning one (even this one) here cannot break a
	// command.
	h := qs.finished[t.q.ns]
	for limit := qs.reg.Policy(t.q.ns).MaxRetainedTasks; uint64(h.Len()) > limit; {
		qs.drop((*qs.fullest[t.q.ns])[0].finished.ts[0])
	}
}

// keepFinished files a finished task for pruning.
func (qs *Queues) keepFinished(t *task) {
	heap.Push(&qs.prune, t)
	h := qs.finished[t.q.ns]
	if h == nil {
		h = &finishedHeap{at: nsIdx}
		qs.finished[t.q.ns] = h
	}
	heap.Push(h, t)
	heap.Push(&t.q.finished, t)
	qs.refull(t.q)
}

// refull puts q where it belongs among its namespace's queues keeping
// finished tasks, after its finished tasks changed.
func (qs *Queues) refull(q *queue) {
	f := qs.fullest[q.ns]
	switch {
	case q.fIdx >= 0 && q.finished.Len() == 0:
		heap.Remove(f, q.fIdx)
		if f.Len() == 0 {
			delete(qs.fullest, q.ns)
		}
	case q.fIdx >= 0:
		heap.Fix(f, q.fIdx)
	case q.finished.Len() > 0:
		if f == nil {
			f = &fullestHeap{}
			qs.fullest[q.ns] = f
		}
		heap.Push(f, q)
	}
}

// unfinish takes a finished task that runs again out of the prune heaps.
func (qs *Queues) unfinish(t *task) {
	heap.Remove(&qs.prune, t.pruneIdx)
	if h := qs.finished[t.q.ns]; heap.Remove(h, t.nsIdx) != nil && h.Len() == 0 {
		delete(qs.finished, t.q.ns)
	}
	heap.Remove(&t.q.finished, t.qIdx)
	qs.refull(t.q)
	t.pruneTick = 0
}

// pruneTo drops finished tasks whose prune tick has come. It runs on every
// queue record, so replay prunes exactly alike.
func (qs *Queues) pruneTo(now registrar.Tick) {
	for qs.prune.Len() > 0 && qs.prune.ts[0].pruneTick <= now {
		qs.drop(qs.prune.ts[0])
	}
}

// drop forgets a finished task.
func (qs *Queues) drop(t *task) {
	qs.unfinish(t)
	q := t.q
	delete(q.tasks, t.id)
	q.all.Delete(t)
	q.counts[t.state]--
	t.tally(-1)
	delete(qs.bySeq, t.seq)
	if len(q.tasks) == 0 {
		delete(qs.queues, qkey{q.ns, q.name})
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
