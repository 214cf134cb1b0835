package tenure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// NewTask is a task to enqueue.
type NewTask struct {
	// ID is the task's idempotency key; empty: the registrar generates one.
	// Enqueueing an id that already exists answers the existing task.
	ID      string
	Payload []byte
	// Priority: higher is claimed first; equal priority is FIFO.
	Priority int32
	// NotBefore delays the task (zero: claimable at once).
	NotBefore time.Time
	// MaxAttempts before the task is DEAD (0: the queue default, 5).
	MaxAttempts uint32
}

// Task is a task this client claimed: its fields at claim time and the
// lease it was claimed under. The client keeps the lease alive by heartbeat
// like an acquired one, within the task lease's renewal limits (10 renewals,
// 2 h by default; the namespace policy's task_max_renewals and
// task_max_lifetime), until the task is completed or failed through this
// client, the lease is released (which returns the task to the queue), or
// it is lost (Lease.Done). The heartbeat renews a task lease every ttl/3
// and never earlier, so that it is lost to the renewal limit about
// 11/3 × its ttl after the claim (see WorkerLeaseTTL).
type Task struct {
	ID        string
	Namespace string
	Queue     string
	Payload   []byte
	Priority  int32
	// Attempts so far, this one included.
	Attempts    uint32
	MaxAttempts uint32
	Lease       *Lease

	pb *tenurev1.Task
}

// Proto returns the task message the registrar answered on Claim.
func (t *Task) Proto() *tenurev1.Task { return t.pb }

// Complete completes the task with result (see Client.Complete).
func (t *Task) Complete(ctx context.Context, result []byte) (*tenurev1.Task, error) {
	return t.Lease.c.Complete(ctx, t.Queue, t.ID, t.Lease.ID(), result, Namespace(t.Namespace))
}

// RetryNow, as Fail's retryAfter (or WorkerRetryAfter), retries a failed
// task at once rather than after the registrar's backoff.
const RetryNow time.Duration = -1

// Fail fails this attempt of the task (see Client.Fail).
func (t *Task) Fail(ctx context.Context, msg string, retryAfter time.Duration) (*tenurev1.Task, error) {
	return t.Lease.c.Fail(ctx, t.Queue, t.ID, t.Lease.ID(), msg, retryAfter, Namespace(t.Namespace))
}

// ClaimOptions configure Claim.
type ClaimOptions struct {
	// Max tasks to claim (0: 1; the registrar's limit is 1000).
	Max int
	// LeaseTTL is the ttl of each task lease (0: the namespace default). It
	// bounds how long a task can be held, about 11/3 × LeaseTTL (see Task).
	LeaseTTL time.Duration
	// Wait long-polls for up to this long when nothing is claimable (0:
	// answer at once; the registrar's limit is 5 min). ctx must outlive it.
	Wait time.Duration
}

// ListTasksOptions configure ListTasks.
type ListTasksOptions struct {
	// States filters by state (empty: every state).
	States []tenurev1.TaskState
	// PageSize (0: the registrar's default, 100; at most 1000).
	PageSize int
	// PageToken continues from a previous page's next token.
	PageToken string
}

// Enqueue adds tasks to queue (created on first use) and returns them in
// order; a task whose id already exists is answered as it is, unchanged
// (EnqueueTasks says which). When every task has an ID, Enqueue is
// idempotent and retried like a read after an unknown outcome; otherwise
// ErrOutcomeUnknown is returned.
func (c *Client) Enqueue(ctx context.Context, queue string, tasks []NewTask, opts ...CallOption) ([]*tenurev1.Task, error) {
	resp, err := c.enqueue(ctx, queue, tasks, opts)
	return resp.GetTasks(), err
}

// Enqueued is one task of an EnqueueTasks answer.
type Enqueued struct {
	Task *tenurev1.Task
	// Existed: the queue held a task with this id already, and it is
	// answered unchanged (this call's payload and options were not used;
	// a finished task is kept for the namespace's retention, see
	// docs/api-additions.md). After an unknown outcome that Enqueue
	// retried, the earlier attempt may be the one that enqueued it.
	Existed bool
}

// EnqueueTasks is Enqueue answering, for each task, whether its id
// existed already: for a caller that must tell a new task from a
// duplicate (another payload under an id in use is not an error).
func (c *Client) EnqueueTasks(ctx context.Context, queue string, tasks []NewTask, opts ...CallOption) ([]Enqueued, error) {
	resp, err := c.enqueue(ctx, queue, tasks, opts)
	if err != nil {
		return nil, err
	}
	out := make([]Enqueued, len(resp.GetTasks()))
	for i, t := range resp.GetTasks() {
		out[i] = Enqueued{Task: t, Existed: i < len(resp.GetExisted()) && resp.GetExisted()[i]}
	}
	return out, nil
}

func (c *Client) enqueue(ctx context.Context, queue string, tasks []NewTask, opts []CallOption) (*tenurev1.EnqueueResponse, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.EnqueueRequest{Namespace: cc.namespace, Queue: queue, Tasks: make([]*tenurev1.NewTask, len(tasks))}
	kind := idempotentCall
	for i, t := range tasks {
		nt := &tenurev1.NewTask{TaskId: t.ID, Payload: t.Payload, Priority: t.Priority, MaxAttempts: t.MaxAttempts}
		if !t.NotBefore.IsZero() {
			nt.NotBefore = timestamppb.New(t.NotBefore)
		}
		if t.ID == "" {
			kind = writeCall
		}
		req.Tasks[i] = nt
	}
	var out *tenurev1.EnqueueResponse
	err := c.call(ctx, kind, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.queue.Enqueue(ctx, connect.NewRequest(req))
		if err == nil {
			out = resp.Msg
		}
		return err
	})
	return out, err
}

// Claim claims up to o.Max tasks of queue for this client's holder. Each
// comes with its lease, kept alive by the client's heartbeats (see Task).
// Nothing claimable (after o.Wait) is an empty answer, not an error. Claim
// is not retried after an unknown outcome (ErrOutcomeUnknown): before it
// returns that error, it gives back the tasks of the queue claimed for
// this holder that this client does not hold (a lost answer's: their
// attempts are not counted), unless another Claim of the queue is in
// flight here or the holder is shared (WithSharedHolder), in which case
// such a task returns to the queue when its lease expires.
func (c *Client) Claim(ctx context.Context, queue string, o ClaimOptions, opts ...CallOption) ([]*Task, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	cc := c.callConfig(opts)
	req := &tenurev1.ClaimRequest{Namespace: cc.namespace, Queue: queue, Worker: c.cfg.holder, Max: uint32(max(o.Max, 0))}
	if o.LeaseTTL > 0 {
		req.LeaseTtl = durationpb.New(o.LeaseTTL)
	}
	if o.Wait > 0 {
		req.Wait = durationpb.New(o.Wait)
	}
	var (
		claimed []*tenurev1.Task
		sent    time.Time
	)
	qkey := cc.namespace + "\x00" + queue
	defer c.inFlight(c.claiming, qkey)()
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		now := c.clock.Now()
		if sent.IsZero() {
			sent = now
		}
		resp, err := c.claimRPC(ctx, ep, req)
		if err == nil {
			claimed, sent = resp.GetTasks(), now
		}
		return err
	})
	if err != nil {
		switch {
		case sent.IsZero() || c.cfg.sharedHolder:
			// Nothing was sent, or the holder's other clients may hold
			// what this one does not: nothing to give back.
		case ctx.Err() != nil:
			// The answer may have been on its way when the call gave up:
			// give back what it may have claimed (a task left leased to no
			// one would use its attempt up).
			go c.releaseStrayClaims(cc.namespace, queue, qkey, 0, sent)
		case outcomeUnknown(err):
			// The answer was lost (a member killed, a connection reset):
			// the same, before the caller claims again.
			c.releaseStrayClaims(cc.namespace, queue, qkey, 1, sent)
		}
		return nil, err
	}
	out := make([]*Task, 0, len(claimed))
	var errs []error
	for _, pb := range claimed {
		l, err := c.adopt(ctx, pb.GetLease(), sent)
		if err != nil {
			// Its lease is released (or expires): the task returns to the queue.
			errs = append(errs, fmt.Errorf("task %s: %w", pb.GetTaskId(), err))
			continue
		}
		out = append(out, &Task{
			ID: pb.GetTaskId(), Namespace: pb.GetNamespace(), Queue: pb.GetQueue(), Payload: pb.GetPayload(),
			Priority: pb.GetPriority(), Attempts: pb.GetAttempts(), MaxAttempts: pb.GetMaxAttempts(), Lease: l, pb: pb,
		})
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, e := range errs {
		c.cfg.logger.Warn("tenure: claimed task dropped", "err", e)
	}
	return out, nil
}

// releaseStrayClaims releases the leases of tasks of the queue claimed for
// this client's holder that it does not hold, while no Claim of the queue
// is in flight here but the caller's own (own: 1 for a Claim that has not
// returned yet): claimed for a call that gave up (its answer crossed its
// cancellation) or whose answer was lost, first sent at since. A task
// claimed well before since is another Client's (foreignGrant): kept.
func (c *Client) releaseStrayClaims(namespace, queue, qkey string, own int, since time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), orphanTimeout)
	defer cancel()
	var token string
	for {
		page, next, err := c.ListTasks(ctx, queue, ListTasksOptions{States: []tenurev1.TaskState{tenurev1.TaskState_TASK_STATE_LEASED},
			PageSize: 1000, PageToken: token}, Namespace(namespace))
		if err != nil {
			return
		}
		for _, t := range page {
			c.mu.Lock()
			stray := t.GetWorker() == c.cfg.holder && c.leases[t.GetLeaseId()] == nil && c.claiming[qkey] <= own
			c.mu.Unlock()
			if stray && c.foreignGrant(t.GetClaimedAt(), since, "task "+t.GetTaskId()+" of queue "+queue) {
				continue
			}
			if stray {
				c.releaseOrphanID(t.GetLeaseId(), t.GetWorker())
			}
		}
		if token = next; token == "" {
			return
		}
	}
}

// adopt keeps alive, like an acquired lease, a lease granted to a request of
// this client sent at sent (a claimed task's lease). A lease granted after
// its own trust window is renewed first; one that cannot be trusted is
// released and not returned.
func (c *Client) adopt(ctx context.Context, pb *tenurev1.Lease, sent time.Time) (*Lease, error) {
	if pb.GetLeaseId() == "" || pb.GetTtl().AsDuration() <= 0 {
		return nil, errors.New("tenure: the registrar answered a task without a lease id or ttl")
	}
	l := newLease(c, pb, false)
	trusted := sent.Add(l.ttl - l.margin)
	if !c.clock.Now().Before(trusted) {
		s, rpb, err := c.renewOnce(ctx, l.id, false)
		if err != nil {
			c.abandon(l)
			return nil, fmt.Errorf("tenure: lease %s was granted too late to be trusted and could not be renewed: %w", l.id, err)
		}
		sent, trusted = s, s.Add(pbTTL(rpb, l.ttl)-l.margin)
		l.update(rpb, time.Time{})
	}
	l.update(nil, trusted)
	if err := c.track(l, sent, trusted); err != nil {
		c.abandon(l)
		return nil, err
	}
	return l, nil
}

// settle stops keeping alive the lease leaseID of a task that left LEASED
// (completed, failed, or no longer this lease's): the registrar ended it.
func (c *Client) settle(leaseID string) {
	c.mu.Lock()
	l := c.leases[leaseID]
	c.mu.Unlock()
	if l == nil {
		return
	}
	c.hb.remove(l)
	c.forget(l)
	l.end(ErrReleased)
}

// trackedOn is the id of the lease this client keeps alive on resource
// for holder, or "".
func (c *Client) trackedOn(namespace, resource, holder string) string {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, l := range c.leases {
		if l.resource == resource && l.namespace == namespace && l.holder == holder {
			return id
		}
	}
	return ""
}

// settleAfter settles the lease unless err leaves the task under it.
func (c *Client) settleAfter(leaseID string, err error) {
	switch {
	case err == nil, errors.Is(err, ErrTaskNotLeased), errors.Is(err, ErrTaskNotFound):
		c.settle(leaseID)
	}
}

// Complete finishes a task by its current lease, recording result (at most
// 256 KiB); the registrar releases the lease. A lease that is no longer the
// task's current one (expired and re-claimed, cancelled) is refused with
// ErrTaskNotLeased. Repeating a completion is harmless, so Complete is
// retried after an unknown outcome. A lease this client keeps alive stops
// being renewed (its Err becomes ErrReleased).
func (c *Client) Complete(ctx context.Context, queue, taskID, leaseID string, result []byte, opts ...CallOption) (*tenurev1.Task, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.CompleteRequest{Namespace: cc.namespace, Queue: queue, TaskId: taskID, LeaseId: leaseID, Result: result}
	var out *tenurev1.Task
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := c.completeRPC(ctx, ep, req)
		if err == nil {
			out = resp.GetTask()
		}
		return err
	})
	c.settleAfter(leaseID, err)
	return out, err
}

// Fail ends the current attempt of a task with an error message (at most
// 8 KiB, trimmed here if longer). The task is retried after retryAfter, or,
// when retryAfter is 0, after the registrar's backoff (attempt⁴ seconds, at
// most 1 h, with jitter), or at once (RetryNow, any negative retryAfter);
// it is DEAD once its attempts are used up (Retry runs it again). Like Complete: only by
// the current lease, retried after an unknown outcome, settles the lease.
func (c *Client) Fail(ctx context.Context, queue, taskID, leaseID, msg string, retryAfter time.Duration, opts ...CallOption) (*tenurev1.Task, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.FailRequest{Namespace: cc.namespace, Queue: queue, TaskId: taskID, LeaseId: leaseID, Error: trimText(msg, maxErrorBytes)}
	if retryAfter != 0 {
		req.RetryAfter = durationpb.New(max(retryAfter, 0))
	}
	var out *tenurev1.Task
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := c.failRPC(ctx, ep, req)
		if err == nil {
			out = resp.GetTask()
		}
		return err
	})
	c.settleAfter(leaseID, err)
	return out, err
}

// Cancel cancels a queued or leased task (a leased task's lease is
// revoked); a finished task is answered unchanged.
func (c *Client) Cancel(ctx context.Context, queue, taskID string, opts ...CallOption) (*tenurev1.Task, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.CancelRequest{Namespace: cc.namespace, Queue: queue, TaskId: taskID}
	var out *tenurev1.Task
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.queue.Cancel(ctx, connect.NewRequest(req))
		if err == nil {
			out = resp.Msg.GetTask()
		}
		return err
	})
	return out, err
}

// Retry runs a task again from its first attempt: a dead, cancelled or
// succeeded task is queued again, claimable now, with its attempts reset
// (its last error kept, its result dropped); a failed task waiting for its
// retry becomes claimable now, its attempts reset. A queued or leased task
// is answered unchanged. Not retried after an unknown outcome: a repeat
// after the task ran again would run it once more.
func (c *Client) Retry(ctx context.Context, queue, taskID string, opts ...CallOption) (*tenurev1.Task, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.RetryRequest{Namespace: cc.namespace, Queue: queue, TaskId: taskID}
	var out *tenurev1.Task
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.queue.Retry(ctx, connect.NewRequest(req))
		if err == nil {
			out = resp.Msg.GetTask()
		}
		return err
	})
	return out, err
}

// ListQueues returns the namespace's queues, by name, each with its
// counts by state.
func (c *Client) ListQueues(ctx context.Context, opts ...CallOption) ([]*tenurev1.QueueSummary, error) {
	cc := c.callConfig(opts)
	var out []*tenurev1.QueueSummary
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.queue.ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{Namespace: cc.namespace}))
		if err == nil {
			out = resp.Msg.GetQueues()
		}
		return err
	})
	return out, err
}

// GetTask returns a task (with its lease while LEASED), or ErrTaskNotFound.
func (c *Client) GetTask(ctx context.Context, queue, taskID string, opts ...CallOption) (*tenurev1.Task, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.GetTaskRequest{Namespace: cc.namespace, Queue: queue, TaskId: taskID}
	var out *tenurev1.Task
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.queue.GetTask(ctx, connect.NewRequest(req))
		if err == nil {
			out = resp.Msg.GetTask()
		}
		return err
	})
	return out, err
}

// ListTasks returns one page of a queue's tasks in enqueue order and the
// token of the next page ("" after the last).
func (c *Client) ListTasks(ctx context.Context, queue string, o ListTasksOptions, opts ...CallOption) ([]*tenurev1.Task, string, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.ListTasksRequest{Namespace: cc.namespace, Queue: queue, States: o.States,
		PageSize: uint32(max(o.PageSize, 0)), PageToken: o.PageToken}
	var resp *connect.Response[tenurev1.ListTasksResponse]
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		var err error
		resp, err = ep.queue.ListTasks(ctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return resp.Msg.GetTasks(), resp.Msg.GetNextPageToken(), nil
}

// SetQueueMaxAttempts sets how many attempts a task enqueued into queue
// without its own MaxAttempts gets (0: the registrar's default, 5); tasks
// already enqueued keep theirs. It returns the queue's default now
// (QueueStats reports it too). Setting it again is harmless, so it is
// retried after an unknown outcome.
func (c *Client) SetQueueMaxAttempts(ctx context.Context, queue string, maxAttempts uint32, opts ...CallOption) (uint32, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.SetQueueConfigRequest{Namespace: cc.namespace, Queue: queue, MaxAttempts: maxAttempts}
	var out uint32
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.queue.SetQueueConfig(ctx, connect.NewRequest(req))
		if err == nil {
			out = resp.Msg.GetConfig().GetMaxAttempts()
		}
		return err
	})
	return out, err
}

// QueueStats counts a queue's tasks by state, and gives its defaults.
func (c *Client) QueueStats(ctx context.Context, queue string, opts ...CallOption) (*tenurev1.QueueStatsResponse, error) {
	cc := c.callConfig(opts)
	req := &tenurev1.QueueStatsRequest{Namespace: cc.namespace, Queue: queue}
	var out *tenurev1.QueueStatsResponse
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.queue.Stats(ctx, connect.NewRequest(req))
		if err == nil {
			out = resp.Msg
		}
		return err
	})
	return out, err
}

// maxErrorBytes is the registrar's limit on a task's error text.
const maxErrorBytes = 8 << 10

// trimText cuts s to at most limit bytes of valid UTF-8.
func trimText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	const cut = "… (trimmed)"
	s = s[:limit-len(cut)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + cut
}
