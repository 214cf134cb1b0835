package queue

import (
	"strconv"
	"strings"
	"unicode/utf8"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Outcome is what a queue command answers. Err is set on rejection, and
// then the command emitted nothing.
type Outcome struct {
	Err error
	// Tasks answers Enqueue (request order) and Claim.
	Tasks []Task
	// Existed is parallel to Tasks for Enqueue: the id was already there.
	Existed []bool
	// Leases are the claimed tasks' leases, parallel to Tasks (Claim).
	Leases []registrar.Lease
	// Task answers Complete, Fail and Cancel.
	Task *Task
	// MaxAttempts answers ConfigureQueue: the queue's default now.
	MaxAttempts uint32
	// Message says why a Claim claimed fewer tasks than it could have (a
	// quota), when one did.
	Message string
}

func fail(err error) Outcome { return Outcome{Err: err} }

func invalid(field, format string, args ...any) error {
	return registrar.NewError(registrar.ReasonInvalidArgument, map[string]string{"field": field}, field+": "+format, args...)
}

// ValidateQueue checks a namespace and queue name.
func ValidateQueue(ns, queue string) error {
	if err := registrar.CheckIdentifier("namespace", ns, false); err != nil {
		return err
	}
	return registrar.CheckIdentifier("queue", queue, true)
}

// ValidateTaskRef checks a namespace, queue and task id.
func ValidateTaskRef(ns, queue, id string) error {
	if err := ValidateQueue(ns, queue); err != nil {
		return err
	}
	return registrar.CheckIdentifier("task_id", id, true)
}

// ValidateEnqueue checks an enqueue's fields without looking at state.
func ValidateEnqueue(c *logpb.Enqueue) error {
	if err := ValidateQueue(c.Namespace, c.Queue); err != nil {
		return err
	}
	if len(c.Tasks) == 0 {
		return invalid("tasks", "name at least one task")
	}
	if len(c.Tasks) > MaxBatch {
		return invalid("tasks", "lists %d tasks; the limit is %d", len(c.Tasks), MaxBatch)
	}
	for i, t := range c.Tasks {
		f := "tasks[" + strconv.Itoa(i) + "]"
		if err := registrar.CheckIdentifier(f+".task_id", t.TaskId, false); err != nil {
			return err
		}
		if len(t.Payload) > MaxPayloadBytes {
			return invalid(f+".payload", "is %d bytes; the limit is %d", len(t.Payload), MaxPayloadBytes)
		}
		if t.MaxAttempts > MaxAttemptsLimit {
			return invalid(f+".max_attempts", "is %d; the limit is %d", t.MaxAttempts, MaxAttemptsLimit)
		}
		if t.NotBefore < 0 {
			return invalid(f+".not_before", "is before 1970")
		}
	}
	return nil
}

// GeneratedIDPrefix starts the ids given to tasks enqueued without one:
// "T" and the task's sequence number (and "-k" in the rare case a caller
// took that id first, in logs written before the API refused such ids).
const GeneratedIDPrefix = "T"

// IsGeneratedID reports whether id has the form of a generated task id,
// which callers may not choose (CheckCallerTaskID).
func IsGeneratedID(id string) bool {
	rest, ok := strings.CutPrefix(id, GeneratedIDPrefix)
	if !ok {
		return false
	}
	num, k, dash := strings.Cut(rest, "-")
	return allDigits(num) && (!dash || allDigits(k))
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// CheckCallerTaskIDs refuses task ids a caller chose that have the form of
// generated ones: "T7" would otherwise answer the task generated as T7 (an
// idempotent enqueue of someone else's task) and drop the caller's; and
// ids whose task's lease resource would be too long to claim. It is
// the API's check, not the state machine's: logs written before it may
// hold such ids, and must apply as they did.
func CheckCallerTaskIDs(c *logpb.Enqueue) error {
	for i, t := range c.Tasks {
		f := "tasks[" + strconv.Itoa(i) + "].task_id"
		if IsGeneratedID(t.TaskId) {
			return invalid(f,
				"%q has the form of the ids the server generates (T and a number); choose another, or leave it empty for a generated one", t.TaskId)
		}
		// A task is claimed under a lease on Resource(queue, id), which
		// must be a valid resource name: else the task could never be
		// claimed, and it would stand before every task behind it. (A
		// generated id always fits: a queue name escapes to 384 bytes at
		// most.)
		if r := Resource(c.Queue, t.TaskId); t.TaskId != "" && len(r) > registrar.MaxResourceBytes {
			return invalid(f, "its task's lease would be on a resource of %d bytes (queue/<queue, with %% and / escaped>/<task id>), past the limit of %d: shorten the queue name or the task id",
				len(r), registrar.MaxResourceBytes)
		}
	}
	return nil
}

// Enqueue adds tasks. A task id that already exists in the queue answers
// the existing task, unchanged (idempotent enqueue).
func (qs *Queues) Enqueue(tx *registrar.Tx, c *logpb.Enqueue) Outcome {
	if err := ValidateEnqueue(c); err != nil {
		return fail(err)
	}
	ns := registrar.OrDefault(c.Namespace)
	if err := qs.checkPending(tx, ns, c); err != nil {
		return fail(err)
	}
	out := Outcome{Tasks: make([]Task, 0, len(c.Tasks)), Existed: make([]bool, len(c.Tasks))}
	for i, nt := range c.Tasks {
		q := qs.queue(ns, c.Queue, false)
		id := nt.TaskId
		if id != "" {
			if t := present(tx, q, id); t != nil {
				out.Tasks = append(out.Tasks, qs.view(t))
				out.Existed[i] = true
				continue
			}
			// A finished task gone by now (its record's apply prunes it
			// first) leaves the id free.
		}
		seq := qs.nextSeq
		if id == "" {
			id = GeneratedIDPrefix + itoa(seq)
			for k := 1; q != nil && q.tasks[id] != nil; k++ {
				id = GeneratedIDPrefix + itoa(seq) + "-" + strconv.Itoa(k)
			}
		}
		ma := nt.MaxAttempts
		if ma == 0 {
			ma = qs.MaxAttemptsOf(ns, c.Queue)
		}
		tx.Emit(&logpb.Record{Body: &logpb.Record_TaskEnqueued{TaskEnqueued: &logpb.TaskEnqueued{
			Task:    &logpb.TaskRef{Namespace: ns, Queue: c.Queue, TaskId: id, Seq: seq},
			Payload: nt.Payload, Priority: nt.Priority, NotBefore: nt.NotBefore, MaxAttempts: ma,
		}}})
		if tx.Err() != nil {
			return fail(tx.Err())
		}
		out.Tasks = append(out.Tasks, qs.view(qs.bySeq[seq]))
	}
	return out
}

// checkPending refuses an enqueue that would take the namespace past its
// MaxPendingTasks or MaxPendingTaskBytes, counting only the tasks it adds
// (an id the queue has, or that the batch named before, adds nothing).
func (qs *Queues) checkPending(tx *registrar.Tx, ns string, c *logpb.Enqueue) error {
	q := qs.queue(ns, c.Queue, false)
	var n, bytes uint64
	var named map[string]bool
	for _, nt := range c.Tasks {
		if id := nt.TaskId; id != "" {
			if present(tx, q, id) != nil || named[id] {
				continue
			}
			if named == nil {
				named = map[string]bool{}
			}
			named[id] = true
		}
		n++
		bytes += uint64(len(nt.Payload))
	}
	return qs.checkPendingRoom(ns, c.Queue, n, bytes)
}

// checkPendingRoom refuses n more unfinished tasks of these payload bytes
// in a queue of namespace ns past the namespace's quotas.
func (qs *Queues) checkPendingRoom(ns, queueName string, n, bytes uint64) error {
	if n == 0 {
		return nil
	}
	var have pending
	if p := qs.pending[ns]; p != nil {
		have = *p
	}
	pol := qs.reg.Policy(ns)
	scope := map[string]string{"namespace": ns, "queue": queueName}
	if have.tasks+n > pol.MaxPendingTasks {
		return registrar.Quota("max_pending_tasks", pol.MaxPendingTasks, scope,
			"namespace %s has %d unfinished tasks; %d more would take it past its limit of %d (max_pending_tasks)",
			ns, have.tasks, n, pol.MaxPendingTasks)
	}
	if have.bytes+bytes > pol.MaxPendingTaskBytes {
		return registrar.Quota("max_pending_task_bytes", pol.MaxPendingTaskBytes, scope,
			"namespace %s holds %d payload bytes of unfinished tasks; %d more would take it past its limit of %d (max_pending_task_bytes)",
			ns, have.bytes, bytes, pol.MaxPendingTaskBytes)
	}
	return nil
}

// ValidateConfigure checks a ConfigureQueue's fields without looking at
// state.
func ValidateConfigure(c *logpb.ConfigureQueue) error {
	if err := ValidateQueue(c.Namespace, c.Queue); err != nil {
		return err
	}
	if c.MaxAttempts > MaxAttemptsLimit {
		return invalid("max_attempts", "is %d; the limit is %d", c.MaxAttempts, MaxAttemptsLimit)
	}
	return nil
}

// Configure sets a queue's defaults: the max_attempts of the tasks
// enqueued without one (0: DefaultMaxAttempts). Tasks already enqueued
// keep theirs. Setting what is set already records nothing.
func (qs *Queues) Configure(tx *registrar.Tx, c *logpb.ConfigureQueue) Outcome {
	if err := ValidateConfigure(c); err != nil {
		return fail(err)
	}
	ns := registrar.OrDefault(c.Namespace)
	if qs.configs[qkey{ns, c.Queue}] != c.MaxAttempts {
		tx.Emit(&logpb.Record{Body: &logpb.Record_QueueConfigured{QueueConfigured: &logpb.QueueConfigured{
			Namespace: ns, Queue: c.Queue, MaxAttempts: c.MaxAttempts}}})
		if err := tx.Err(); err != nil {
			return fail(err)
		}
	}
	return Outcome{MaxAttempts: qs.MaxAttemptsOf(ns, c.Queue)}
}

// MaxAttemptsOf is the max_attempts of a task enqueued into the queue
// without one.
func (qs *Queues) MaxAttemptsOf(ns, queue string) uint32 {
	if m := qs.configs[qkey{registrar.OrDefault(ns), queue}]; m != 0 {
		return m
	}
	return DefaultMaxAttempts
}

// ValidateClaim checks a claim's fields without looking at state.
func ValidateClaim(c *logpb.Claim) error {
	if err := ValidateQueue(c.Namespace, c.Queue); err != nil {
		return err
	}
	if err := registrar.CheckIdentifier("worker", c.Worker, true); err != nil {
		return err
	}
	if c.Max > MaxClaim {
		return invalid("max", "is %d; the limit is %d", c.Max, MaxClaim)
	}
	return nil
}

// Claim leases up to max claimable tasks to a worker: highest priority
// first, then earliest ready, then enqueue order. Each task gets its own
// lease, issued in the same step as its claim record. Nothing claimable
// is an empty answer, not an error.
func (qs *Queues) Claim(tx *registrar.Tx, c *logpb.Claim) Outcome {
	if err := ValidateClaim(c); err != nil {
		return fail(err)
	}
	ns := registrar.OrDefault(c.Namespace)
	ttl, err := qs.reg.TTLFor(ns, "lease_ttl", c.LeaseTtlMs)
	if err != nil {
		return fail(err)
	}
	want := int(max(c.Max, 1))
	q := qs.queue(ns, c.Queue, false)
	if q == nil {
		return Outcome{}
	}
	q.promote(tx.Wall)
	n := min(want, q.ready.Len())
	out := Outcome{Tasks: make([]Task, 0, n), Leases: make([]registrar.Lease, 0, n)}
	var skipped map[*task]bool // tasks whose resource is leased by someone else
	pol := qs.reg.Policy(ns)
	for len(out.Tasks) < want {
		var cands []*task
		q.ready.Ascend(func(t *task) bool {
			if t.readyAt <= tx.Wall && !skipped[t] {
				cands = append(cands, t)
			}
			return len(cands) < want-len(out.Tasks)
		})
		if len(cands) == 0 {
			break
		}
		for _, t := range cands {
			l, err := qs.reg.IssueFor(tx, registrar.Grant{
				Namespace: ns, Resource: Resource(q.name, t.id), Holder: c.Worker, TTL: ttl,
				MaxRenewals: pol.TaskMaxRenewals, MaxLifetime: pol.TaskMaxLifetime,
			})
			if registrar.ReasonOf(err) == registrar.ReasonLeaseHeld {
				// Somebody holds an ordinary lease on the task's resource;
				// the task waits until it ends.
				if skipped == nil {
					skipped = map[*task]bool{}
				}
				skipped[t] = true
				continue
			}
			if err != nil {
				if len(out.Tasks) == 0 {
					return fail(err)
				}
				out.Message = "claimed " + strconv.Itoa(len(out.Tasks)) + " of the " + strconv.Itoa(want) + " asked for: " + err.Error()
				if q := registrar.ToError(err).Metadata["quota"]; q != "" {
					out.Message += " (" + q + ")"
				}
				return out
			}
			tx.Emit(&logpb.Record{Body: &logpb.Record_TaskClaimed{TaskClaimed: &logpb.TaskClaimed{
				Task: qs.ref(t), LeaseSeq: l.Fence, LeaseId: l.ID, Worker: c.Worker, Attempt: t.attempts + 1,
			}}})
			if tx.Err() != nil {
				return fail(tx.Err())
			}
			out.Tasks = append(out.Tasks, qs.view(t))
			out.Leases = append(out.Leases, l)
		}
	}
	return out
}

func (qs *Queues) ref(t *task) *logpb.TaskRef {
	return &logpb.TaskRef{Namespace: t.q.ns, Queue: t.q.name, TaskId: t.id, Seq: t.seq}
}

func (qs *Queues) find(ns, queue, id string) (*task, error) {
	if err := ValidateTaskRef(ns, queue, id); err != nil {
		return nil, err
	}
	t := qs.lookup(ns, queue, id)
	if t == nil {
		return nil, taskNotFound(ns, queue, id)
	}
	return t, nil
}

func taskNotFound(ns, queue, id string) error {
	return registrar.NewError(registrar.ReasonTaskNotFound,
		map[string]string{"namespace": registrar.OrDefault(ns), "queue": queue, "task_id": id},
		"no task %s in queue %s", id, queue)
}

// goneAt reports whether t is a finished task whose retention has passed
// at now: the state drops it at the next queue record (pruneTo), and until
// then Retry, GetAt and (from rules 1: statemachine.Rules) Enqueue treat
// it as gone.
func (t *task) goneAt(now registrar.Tick) bool { return t.pruneTick != 0 && t.pruneTick <= now }

// present returns the task id names in q, nil when there is none or (by
// the rules tx was proposed under) it is gone.
func present(tx *registrar.Tx, q *queue, id string) *task {
	if q == nil {
		return nil
	}
	t := q.tasks[id]
	if t != nil && tx.Rules >= 1 && t.goneAt(tx.Tick) {
		return nil
	}
	return t
}

func (qs *Queues) notLeased(t *task, leaseID string) error {
	meta := map[string]string{"namespace": registrar.OrDefault(t.q.ns), "task_id": t.id, "queue": t.q.name, "lease_id": leaseID, "state": t.state.String()}
	// current_lease_id is empty when the task is not leased.
	cur, said := "", "none"
	if t.state == Leased {
		cur, said = t.leaseID, t.leaseID
	}
	meta["current_lease_id"] = cur
	return registrar.NewError(registrar.ReasonTaskNotLeased, meta,
		"lease %s is not the current lease of task %s (task is %s, current lease: %s)", leaseID, t.id, t.state, said)
}

// retention is the prune tick of a task that succeeds or is cancelled at
// tick.
func (qs *Queues) retention(ns string, tick registrar.Tick) int64 {
	return int64(tick) + qs.reg.Policy(ns).LeaseRetention
}

// DeadRetention is how long a dead task is kept when its namespace's
// policy sets no dead task retention (commands of rules 4 on): a day, for
// someone to look at it and Retry it (River keeps discarded jobs a week).
const DeadRetention = 24 * 3_600_000

// deadRetention is the prune tick of a task that dies now: the
// namespace's dead task retention later, when its policy sets one;
// otherwise DeadRetention (rules 4 on), or its lease retention, as for
// the other finished tasks (before).
func (qs *Queues) deadRetention(tx *registrar.Tx, ns string) int64 {
	switch d := qs.reg.Policy(ns).DeadTaskRetention; {
	case d > 0:
		return int64(tx.Tick) + d
	case tx.Rules >= 4:
		return int64(tx.Tick) + DeadRetention
	}
	return qs.retention(ns, tx.Tick)
}

func checkText(field, v string, limit int) error {
	if len(v) > limit {
		return invalid(field, "is %d bytes; the limit is %d", len(v), limit)
	}
	if !utf8.ValidString(v) {
		return invalid(field, "is not valid UTF-8")
	}
	return nil
}

// ValidateComplete checks a completion's fields without looking at state.
func ValidateComplete(c *logpb.CompleteTask) error {
	if err := ValidateTaskRef(c.Namespace, c.Queue, c.TaskId); err != nil {
		return err
	}
	if err := registrar.CheckLeaseIDText("lease_id", c.LeaseId); err != nil {
		return err
	}
	if len(c.Result) > MaxResultBytes {
		return invalid("result", "is %d bytes; the limit is %d", len(c.Result), MaxResultBytes)
	}
	return nil
}

// Complete finishes a task by its current lease, records the result and
// releases the lease. Repeating a completion by the same lease answers the
// task again (a retry after an unknown outcome is safe).
func (qs *Queues) Complete(tx *registrar.Tx, c *logpb.CompleteTask) Outcome {
	if err := ValidateComplete(c); err != nil {
		return fail(err)
	}
	t, err := qs.find(c.Namespace, c.Queue, c.TaskId)
	if err != nil {
		return fail(err)
	}
	if t.state == Succeeded && t.leaseID == c.LeaseId && t.outcome == byComplete {
		v := qs.view(t)
		return Outcome{Task: &v}
	}
	if t.state != Leased || t.leaseID != c.LeaseId {
		return fail(qs.notLeased(t, c.LeaseId))
	}
	worker := t.worker
	tx.Emit(&logpb.Record{Body: &logpb.Record_TaskCompleted{TaskCompleted: &logpb.TaskCompleted{
		Task: qs.ref(t), Result: c.Result, PruneTick: qs.retention(t.q.ns, tx.Tick),
	}}})
	return qs.releaseAfter(tx, t, worker, c.LeaseId, tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED)
}

// releaseAfter ends the lease of a task that just left LEASED (the hook
// then finds no task on it) and answers the task.
func (qs *Queues) releaseAfter(tx *registrar.Tx, t *task, worker, leaseID string, why tenurev1.ReleaseReason) Outcome {
	if tx.Err() != nil {
		return fail(tx.Err())
	}
	if out := qs.reg.Release(tx, &logpb.Release{LeaseId: leaseID, Holder: worker, Reason: why}); out.Err != nil {
		return fail(out.Err)
	}
	v := qs.view(t)
	return Outcome{Task: &v, Err: tx.Err()}
}

// ValidateFail checks a failure's fields without looking at state.
func ValidateFail(c *logpb.FailTask) error {
	if err := ValidateTaskRef(c.Namespace, c.Queue, c.TaskId); err != nil {
		return err
	}
	if err := registrar.CheckLeaseIDText("lease_id", c.LeaseId); err != nil {
		return err
	}
	if err := checkText("error", c.Error, MaxErrorBytes); err != nil {
		return err
	}
	if c.RetryAfterMs != nil && (*c.RetryAfterMs < 0 || *c.RetryAfterMs > maxDelayMs) {
		return invalid("retry_after", "must be between 0 and 10 years")
	}
	return nil
}

// Fail ends an attempt by the task's current lease: the task is retried
// after retry_after or its backoff, or is DEAD when its attempts are used
// up. The lease is released.
func (qs *Queues) Fail(tx *registrar.Tx, c *logpb.FailTask) Outcome {
	if err := ValidateFail(c); err != nil {
		return fail(err)
	}
	t, err := qs.find(c.Namespace, c.Queue, c.TaskId)
	if err != nil {
		return fail(err)
	}
	if (t.state == Failed || t.state == Dead) && t.leaseID == c.LeaseId && t.outcome == byFail {
		v := qs.view(t)
		return Outcome{Task: &v}
	}
	if t.state != Leased || t.leaseID != c.LeaseId {
		return fail(qs.notLeased(t, c.LeaseId))
	}
	worker := t.worker
	if t.attempts >= t.maxAttempts {
		tx.Emit(&logpb.Record{Body: &logpb.Record_TaskDead{TaskDead: &logpb.TaskDead{
			Task: qs.ref(t), Error: c.Error, PruneTick: qs.deadRetention(tx, t.q.ns), ByFail: true,
		}}})
	} else {
		delay := Backoff(t.id, t.attempts)
		if c.RetryAfterMs != nil {
			delay = *c.RetryAfterMs
		}
		tx.Emit(&logpb.Record{Body: &logpb.Record_TaskFailed{TaskFailed: &logpb.TaskFailed{
			Task: qs.ref(t), Error: c.Error, ReadyAt: tx.Wall + delay,
		}}})
	}
	return qs.releaseAfter(tx, t, worker, c.LeaseId, tenurev1.ReleaseReason_RELEASE_REASON_ABORTED)
}

// Cancel cancels a queued, failed or leased task (a leased task's lease
// is revoked). Cancelling a finished task changes nothing and answers it.
func (qs *Queues) Cancel(tx *registrar.Tx, c *logpb.CancelTask) Outcome {
	t, err := qs.find(c.Namespace, c.Queue, c.TaskId)
	if err != nil {
		return fail(err)
	}
	if t.state.Finished() {
		v := qs.view(t)
		return Outcome{Task: &v}
	}
	leased, leaseID := t.state == Leased, t.leaseID
	tx.Emit(&logpb.Record{Body: &logpb.Record_TaskCancelled{TaskCancelled: &logpb.TaskCancelled{
		Task: qs.ref(t), PruneTick: qs.retention(t.q.ns, tx.Tick),
	}}})
	if leased && tx.Err() == nil {
		if out := qs.reg.Revoke(tx, &logpb.Revoke{LeaseId: leaseID, Reason: "task cancelled"}); out.Err != nil {
			return fail(out.Err)
		}
	}
	if tx.Err() != nil {
		return fail(tx.Err())
	}
	v := qs.view(t)
	return Outcome{Task: &v}
}

// Retry runs a task again from its first attempt: a DEAD, CANCELLED or
// SUCCEEDED task is queued again, claimable now (its last error kept, its
// result dropped); a FAILED task waiting for its retry is claimable now.
// Either way its attempts start over. A QUEUED or LEASED task is answered
// unchanged: it will run anyway.
func (qs *Queues) Retry(tx *registrar.Tx, c *logpb.RetryTask) Outcome {
	t, err := qs.find(c.Namespace, c.Queue, c.TaskId)
	if err == nil && t.goneAt(tx.Tick) {
		// Whatever the command's rules: its record would be applied
		// after the prune it triggers, naming a task no longer there (the
		// state machine stopped on it; no log that holds such a command
		// was ever applied past it).
		err = taskNotFound(c.Namespace, c.Queue, c.TaskId)
	}
	if err != nil {
		return fail(err)
	}
	if t.state == Queued || t.state == Leased {
		v := qs.view(t)
		return Outcome{Task: &v}
	}
	if t.state.Finished() {
		// Unfinished again: it counts against the quotas as a new task.
		if err := qs.checkPendingRoom(t.q.ns, t.q.name, 1, uint64(len(t.payload))); err != nil {
			return fail(err)
		}
	}
	tx.Emit(&logpb.Record{Body: &logpb.Record_TaskRetried{TaskRetried: &logpb.TaskRetried{
		Task: qs.ref(t), ReadyAt: tx.Wall,
	}}})
	if err := tx.Err(); err != nil {
		return fail(err)
	}
	v := qs.view(t)
	return Outcome{Task: &v}
}

// leaseEnded is the registrar's OnLeaseEnd hook: a task lease that ends
// without a completion or failure puts its task back in the queue, in the
// same apply step. A lease given back (released, as a draining worker
// does, revoked or transferred) returns its attempt: the task is queued
// again as it was before the claim, even on its last attempt. A lease
// that expired (its worker died or stalled) used its attempt: the task is
// DEAD when that was the last.
func (qs *Queues) leaseEnded(tx *registrar.Tx, l registrar.Lease) {
	t := qs.byLease[l.Fence]
	if t == nil || t.state != Leased {
		return
	}
	why := "lease " + l.ID + " " + leaseEnd(l) + " during attempt " + strconv.FormatUint(uint64(t.attempts), 10)
	if l.State != registrar.Expired {
		tx.Emit(&logpb.Record{Body: &logpb.Record_TaskRequeued{TaskRequeued: &logpb.TaskRequeued{
			Task: qs.ref(t), Reason: why + " (the attempt is not counted)", ReadyAt: tx.Wall, AttemptReturned: true,
			KeepLastError: tx.Rules >= 3,
		}}})
		return
	}
	if t.attempts >= t.maxAttempts {
		tx.Emit(&logpb.Record{Body: &logpb.Record_TaskDead{TaskDead: &logpb.TaskDead{
			Task: qs.ref(t), Error: why + "; attempts used up", PruneTick: qs.deadRetention(tx, t.q.ns),
		}}})
		return
	}
	tx.Emit(&logpb.Record{Body: &logpb.Record_TaskRequeued{TaskRequeued: &logpb.TaskRequeued{
		Task: qs.ref(t), Reason: why, ReadyAt: tx.Wall,
	}}})
}

func leaseEnd(l registrar.Lease) string {
	switch l.State {
	case registrar.Expired:
		return "expired"
	case registrar.Revoked:
		return "was revoked"
	}
	if l.ReleaseReason == tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED {
		return "was transferred"
	}
	return "was released"
}
