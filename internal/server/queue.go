package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// queueService implements tenure.v1.QueueService.
type queueService struct{ s *Server }

// MaxClaimWait caps a Claim's long-poll.
const MaxClaimWait = 5 * time.Minute

// DefaultListTasksPage and MaxListTasksPage bound ListTasks pages.
const (
	DefaultListTasksPage = 100
	MaxListTasksPage     = 1000
)

func init() {
	// Followers forward queue writes (and linearizable reads) to the leader.
	routes[v1c.QueueServiceEnqueueProcedure] = route{true, via[tenurev1.EnqueueRequest, tenurev1.EnqueueResponse](v1c.QueueServiceEnqueueProcedure)}
	routes[v1c.QueueServiceClaimProcedure] = route{true, via[tenurev1.ClaimRequest, tenurev1.ClaimResponse](v1c.QueueServiceClaimProcedure)}
	routes[v1c.QueueServiceCompleteProcedure] = route{true, via[tenurev1.CompleteRequest, tenurev1.CompleteResponse](v1c.QueueServiceCompleteProcedure)}
	routes[v1c.QueueServiceFailProcedure] = route{true, via[tenurev1.FailRequest, tenurev1.FailResponse](v1c.QueueServiceFailProcedure)}
	routes[v1c.QueueServiceCancelProcedure] = route{true, via[tenurev1.CancelRequest, tenurev1.CancelResponse](v1c.QueueServiceCancelProcedure)}
	routes[v1c.QueueServiceRetryProcedure] = route{true, via[tenurev1.RetryRequest, tenurev1.RetryResponse](v1c.QueueServiceRetryProcedure)}
	routes[v1c.QueueServiceSetQueueConfigProcedure] = route{true, via[tenurev1.SetQueueConfigRequest, tenurev1.SetQueueConfigResponse](v1c.QueueServiceSetQueueConfigProcedure)}
	routes[v1c.QueueServiceGetTaskProcedure] = route{false, via[tenurev1.GetTaskRequest, tenurev1.GetTaskResponse](v1c.QueueServiceGetTaskProcedure)}
	routes[v1c.QueueServiceListTasksProcedure] = route{false, via[tenurev1.ListTasksRequest, tenurev1.ListTasksResponse](v1c.QueueServiceListTasksProcedure)}
	routes[v1c.QueueServiceStatsProcedure] = route{false, via[tenurev1.QueueStatsRequest, tenurev1.QueueStatsResponse](v1c.QueueServiceStatsProcedure)}
	routes[v1c.QueueServiceListQueuesProcedure] = route{false, via[tenurev1.ListQueuesRequest, tenurev1.ListQueuesResponse](v1c.QueueServiceListQueuesProcedure)}
}

// proposeQueue replicates a queue command and returns its answer; a
// rejection comes back as the error too.
func (s *Server) proposeQueue(ctx context.Context, cmd *logpb.Command) (queue.Outcome, error) {
	stampActor(ctx, cmd)
	res, err := s.node.Propose(ctx, cmd)
	if err != nil {
		logUnexpected(s.log, "proposal broke off", err)
		return queue.Outcome{}, err
	}
	return queueOutcome(res)
}

// queueOutcome is the queue domain's answer in a command's result.
func queueOutcome(res statemachine.Result) (queue.Outcome, error) {
	if res.Queue == nil {
		if res.Outcome.Err != nil {
			return queue.Outcome{}, res.Outcome.Err
		}
		return queue.Outcome{}, errors.New("the state machine gave no queue answer")
	}
	return *res.Queue, res.Queue.Err
}

func (s *Server) readQueues(ctx context.Context, fn func(m *statemachine.Machine, t registrar.Tick) error) error {
	return s.node.Read(ctx, staleRead(ctx), fn)
}

func wallTS(ms int64) *timestamppb.Timestamp {
	if ms == 0 {
		return nil
	}
	return timestamppb.New(registrar.WallTime(ms))
}

func (s *Server) taskProto(t queue.Task, l *registrar.Lease) (*tenurev1.Task, error) {
	pb := taskPB(t)
	if l != nil {
		lp, err := s.leaseProto(*l, false)
		if err != nil {
			return nil, err
		}
		pb.Lease = lp
	}
	return pb, nil
}

// taskPB renders a task without its lease.
func taskPB(t queue.Task) *tenurev1.Task {
	return &tenurev1.Task{
		TaskId: t.ID, Namespace: t.Namespace, Queue: t.Queue, Payload: t.Payload, Priority: t.Priority,
		State: tenurev1.TaskState(t.State), Attempts: t.Attempts, MaxAttempts: t.MaxAttempts,
		NotBefore: wallTS(t.NotBefore), CreatedAt: wallTS(t.CreatedAt), ClaimedAt: wallTS(t.ClaimedAt),
		CompletedAt: wallTS(t.CompletedAt), LastError: t.LastError, Result: t.Result, LeaseId: t.LeaseID, Worker: t.Worker,
	}
}

func (h *queueService) Enqueue(ctx context.Context, req *connect.Request[tenurev1.EnqueueRequest]) (*connect.Response[tenurev1.EnqueueResponse], error) {
	s, m := h.s, req.Msg
	c, err := enqueueCommand(m)
	if err != nil {
		return nil, s.toConnect(err)
	}
	out, err := s.proposeQueue(ctx, c)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(enqueueResponse(out)), nil
}

// enqueueCommand validates an Enqueue and builds its command.
func enqueueCommand(m *tenurev1.EnqueueRequest) (*logpb.Command, error) {
	c := &logpb.Enqueue{Namespace: m.Namespace, Queue: m.Queue, Tasks: make([]*logpb.NewTask, len(m.Tasks))}
	for i, t := range m.Tasks {
		nt := &logpb.NewTask{TaskId: t.TaskId, Payload: t.Payload, Priority: t.Priority, MaxAttempts: t.MaxAttempts}
		if t.NotBefore != nil {
			if err := t.NotBefore.CheckValid(); err != nil {
				return nil, invalidArg("tasks.not_before", err.Error())
			}
			nt.NotBefore = max(t.NotBefore.AsTime().UnixMilli(), 0)
		}
		c.Tasks[i] = nt
	}
	if err := queue.ValidateEnqueue(c); err != nil {
		return nil, err
	}
	if err := queue.CheckCallerTaskIDs(c); err != nil {
		return nil, err
	}
	return &logpb.Command{Op: &logpb.Command_Enqueue{Enqueue: c}}, nil
}

func enqueueResponse(out queue.Outcome) *tenurev1.EnqueueResponse {
	resp := &tenurev1.EnqueueResponse{Tasks: make([]*tenurev1.Task, len(out.Tasks)), Existed: out.Existed}
	for i, t := range out.Tasks {
		resp.Tasks[i] = taskPB(t)
	}
	return resp
}

func (h *queueService) Claim(ctx context.Context, req *connect.Request[tenurev1.ClaimRequest]) (*connect.Response[tenurev1.ClaimResponse], error) {
	s, m := h.s, req.Msg
	c, waitD, err := s.claimCommand(m)
	if err != nil {
		return nil, s.toConnect(err)
	}
	out, err := s.claim(ctx, c, waitD)
	if err != nil {
		return nil, s.toConnect(err)
	}
	resp := &tenurev1.ClaimResponse{Tasks: make([]*tenurev1.Task, len(out.Tasks)), Message: out.Message}
	for i, t := range out.Tasks {
		if resp.Tasks[i], err = s.taskProto(t, &out.Leases[i]); err != nil {
			return nil, s.toConnect(err)
		}
	}
	return connect.NewResponse(resp), nil
}

// claimCommand validates a Claim and builds its command and wait.
func (s *Server) claimCommand(m *tenurev1.ClaimRequest) (*logpb.Claim, time.Duration, error) {
	ttl, err := durationMs("lease_ttl", m.LeaseTtl)
	if err != nil {
		return nil, 0, err
	}
	if err := positiveTTL("lease_ttl", ttl); err != nil {
		return nil, 0, err
	}
	wait, err := durationMs("wait", m.Wait)
	if err != nil {
		return nil, 0, err
	}
	var waitD time.Duration
	if wait != nil {
		if *wait < 0 || registrar.Dur(*wait) > MaxClaimWait {
			return nil, 0, invalidArg("wait", "must be between 0 and "+MaxClaimWait.String())
		}
		waitD = registrar.Dur(*wait)
	}
	c := &logpb.Claim{Namespace: m.Namespace, Queue: m.Queue, Worker: m.Worker, Max: m.Max, LeaseTtlMs: ttl}
	if err := queue.ValidateClaim(c); err != nil {
		return nil, 0, err
	}
	if err := s.checkTTL(m.Namespace, "lease_ttl", ttl); err != nil {
		return nil, 0, err
	}
	return c, waitD, nil
}

// claim proposes a claim; with a wait, it proposes again whenever the
// queue may have a claimable task (a record of one of its tasks applied,
// or a delayed task's ready time), until it gets one or the wait ends. An
// empty answer after the wait is not an error; a wait cut short by the
// server's shutdown is UNAVAILABLE.
//
// A waiting claim is woken by the watch hub for its queue's records only:
// woken by every applied entry, 1,000 idle workers long-polling empty
// queues cut unrelated write throughput by more than half.
func (s *Server) claim(ctx context.Context, c *logpb.Claim, wait time.Duration) (queue.Outcome, error) {
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	var ready *time.Timer
	defer func() {
		if ready != nil {
			ready.Stop()
		}
	}()
	var changed <-chan struct{} // nil without a wait: never ready
	var w *watcher
	if wait > 0 {
		// Registered before the first look, so that no change after it
		// goes unnoticed.
		w = s.watchers.add(registrar.OrDefault(c.Namespace), queue.Resource(c.Queue, ""))
		defer s.watchers.remove(w)
		changed = w.wake
	}
	propose := true
	for {
		if propose {
			out, err := s.proposeClaim(ctx, c)
			if err != nil || len(out.Tasks) > 0 || wait <= 0 {
				return out, err
			}
		}
		// Nothing claimable for us: sleep until a change or the next ready
		// time, then look locally before proposing again.
		var at int64
		var ok bool
		_ = s.node.Read(ctx, true, func(m *statemachine.Machine, _ registrar.Tick) error {
			at, ok = m.Queues().NextReady(c.Namespace, c.Queue, s.node.Wall())
			return nil
		})
		// Ready times are the leader's wall times: wait by the cluster's
		// wall time, not this member's clock, which may be off.
		var readyC <-chan time.Time
		if now := s.node.Wall(); ok && at > now {
			if ready == nil {
				ready = time.NewTimer(registrar.Dur(at - now))
			} else {
				ready.Reset(registrar.Dur(at - now))
			}
			readyC = ready.C
		}
		select {
		case <-changed:
			w.take() // the indexes are not needed: the state is read
			propose = s.claimable(c)
		case <-readyC:
			propose = true
		case <-deadline:
			return queue.Outcome{}, nil
		case <-ctx.Done():
			return queue.Outcome{}, ctx.Err()
		case <-s.closing:
			// Not "no task": the caller should ask another member.
			return queue.Outcome{}, &registrar.Error{Reason: registrar.ReasonUnavailable,
				Message: string(registrar.ReasonUnavailable) + ": the server is shutting down; nothing was claimed"}
		}
	}
}

// proposeClaim proposes a claim and waits for its outcome even if the
// caller goes away meanwhile: tasks claimed for a caller that is gone
// (a worker shutting down cancels its long poll) are given back at once,
// their attempts not counted, rather than left leased to no one until
// their leases expire and use the attempts up.
func (s *Server) proposeClaim(ctx context.Context, c *logpb.Claim) (queue.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return queue.Outcome{}, err
	}
	pctx, cancel := detach(ctx)
	defer cancel()
	out, err := s.proposeQueue(pctx, &logpb.Command{Actor: c.Worker, Op: &logpb.Command_Claim{Claim: c}})
	if ctx.Err() == nil || err != nil {
		return out, err
	}
	for i := range out.Leases {
		s.releaseAbandoned(pctx, out.Leases[i].Holder, out.Leases[i].ID, "a claim")
	}
	return queue.Outcome{}, ctx.Err()
}

// claimable reports from local state whether the queue has a task ready now.
func (s *Server) claimable(c *logpb.Claim) bool {
	var ok bool
	_ = s.node.Read(context.Background(), true, func(m *statemachine.Machine, _ registrar.Tick) error {
		now := s.node.Wall()
		at, found := m.Queues().NextReady(c.Namespace, c.Queue, now)
		ok = found && at <= now
		return nil
	})
	return ok
}

func (h *queueService) Complete(ctx context.Context, req *connect.Request[tenurev1.CompleteRequest]) (*connect.Response[tenurev1.CompleteResponse], error) {
	s, m := h.s, req.Msg
	c, err := completeCommand(m)
	if err != nil {
		return nil, s.toConnect(err)
	}
	t, err := s.taskCommand(ctx, c)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.CompleteResponse{Task: t}), nil
}

// completeCommand validates a Complete and builds its command.
func completeCommand(m *tenurev1.CompleteRequest) (*logpb.Command, error) {
	c := &logpb.CompleteTask{Namespace: m.Namespace, Queue: m.Queue, TaskId: m.TaskId, LeaseId: m.LeaseId, Result: m.Result}
	if err := queue.ValidateComplete(c); err != nil {
		return nil, err
	}
	return &logpb.Command{Op: &logpb.Command_CompleteTask{CompleteTask: c}}, nil
}

func (h *queueService) Fail(ctx context.Context, req *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
	s, m := h.s, req.Msg
	c, err := failCommand(m)
	if err != nil {
		return nil, s.toConnect(err)
	}
	t, err := s.taskCommand(ctx, c)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.FailResponse{Task: t}), nil
}

// failCommand validates a Fail and builds its command.
func failCommand(m *tenurev1.FailRequest) (*logpb.Command, error) {
	after, err := durationMs("retry_after", m.RetryAfter)
	if err != nil {
		return nil, err
	}
	c := &logpb.FailTask{Namespace: m.Namespace, Queue: m.Queue, TaskId: m.TaskId, LeaseId: m.LeaseId, Error: m.Error, RetryAfterMs: after}
	if err := queue.ValidateFail(c); err != nil {
		return nil, err
	}
	return &logpb.Command{Op: &logpb.Command_FailTask{FailTask: c}}, nil
}

func (h *queueService) Cancel(ctx context.Context, req *connect.Request[tenurev1.CancelRequest]) (*connect.Response[tenurev1.CancelResponse], error) {
	s, m := h.s, req.Msg
	if err := queue.ValidateTaskRef(m.Namespace, m.Queue, m.TaskId); err != nil {
		return nil, s.toConnect(err)
	}
	t, err := s.taskCommand(ctx, &logpb.Command{Op: &logpb.Command_CancelTask{CancelTask: &logpb.CancelTask{
		Namespace: m.Namespace, Queue: m.Queue, TaskId: m.TaskId}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.CancelResponse{Task: t}), nil
}

func (h *queueService) Retry(ctx context.Context, req *connect.Request[tenurev1.RetryRequest]) (*connect.Response[tenurev1.RetryResponse], error) {
	s, m := h.s, req.Msg
	if err := queue.ValidateTaskRef(m.Namespace, m.Queue, m.TaskId); err != nil {
		return nil, s.toConnect(err)
	}
	t, err := s.taskCommand(ctx, &logpb.Command{Op: &logpb.Command_RetryTask{RetryTask: &logpb.RetryTask{
		Namespace: m.Namespace, Queue: m.Queue, TaskId: m.TaskId}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.RetryResponse{Task: t}), nil
}

func (s *Server) taskCommand(ctx context.Context, cmd *logpb.Command) (*tenurev1.Task, error) {
	out, err := s.proposeQueue(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return taskAnswer(out)
}

// taskAnswer renders the one task a task command answers.
func taskAnswer(out queue.Outcome) (*tenurev1.Task, error) {
	if out.Task == nil {
		return nil, errors.New("the state machine answered no task")
	}
	return taskPB(*out.Task), nil
}

func (h *queueService) GetTask(ctx context.Context, req *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	s, m := h.s, req.Msg
	if err := queue.ValidateTaskRef(m.Namespace, m.Queue, m.TaskId); err != nil {
		return nil, s.toConnect(err)
	}
	var t queue.Task
	var l *registrar.Lease
	err := s.readQueues(ctx, func(mc *statemachine.Machine, tick registrar.Tick) error {
		var err error
		if t, err = mc.Queues().GetAt(m.Namespace, m.Queue, m.TaskId, tick); err != nil {
			return err
		}
		if t.State == queue.Leased {
			if lv, err := mc.Registrar().Get(t.LeaseID, tick); err == nil {
				l = &lv
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	pb, err := s.taskProto(t, l)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.GetTaskResponse{Task: pb}), nil
}

func (h *queueService) ListTasks(ctx context.Context, req *connect.Request[tenurev1.ListTasksRequest]) (*connect.Response[tenurev1.ListTasksResponse], error) {
	s, m := h.s, req.Msg
	if err := queue.ValidateQueue(m.Namespace, m.Queue); err != nil {
		return nil, s.toConnect(err)
	}
	size := int(m.PageSize)
	switch {
	case size == 0:
		size = DefaultListTasksPage
	case size > MaxListTasksPage:
		size = MaxListTasksPage
	}
	states := make([]queue.State, 0, len(m.States))
	for _, st := range m.States {
		if st <= tenurev1.TaskState_TASK_STATE_UNSPECIFIED || st > tenurev1.TaskState_TASK_STATE_CANCELLED {
			return nil, s.toConnect(invalidArg("states", "unknown task state "+st.String()))
		}
		states = append(states, queue.State(st))
	}
	after, err := queue.ParsePageToken(m.PageToken, m.Namespace, m.Queue, states)
	if err != nil {
		return nil, s.toConnect(err)
	}
	var tasks []queue.Task
	var next uint64
	err = s.readQueues(ctx, func(mc *statemachine.Machine, tick registrar.Tick) error {
		tasks, next = mc.Queues().List(m.Namespace, m.Queue, states, after, size, tick)
		return nil
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	resp := &tenurev1.ListTasksResponse{Tasks: make([]*tenurev1.Task, len(tasks))}
	for i, t := range tasks {
		if resp.Tasks[i], err = s.taskProto(t, nil); err != nil {
			return nil, s.toConnect(err)
		}
	}
	if next != 0 {
		resp.NextPageToken = queue.PageToken(m.Namespace, m.Queue, states, next)
	}
	return connect.NewResponse(resp), nil
}

func (h *queueService) Stats(ctx context.Context, req *connect.Request[tenurev1.QueueStatsRequest]) (*connect.Response[tenurev1.QueueStatsResponse], error) {
	s, m := h.s, req.Msg
	if err := queue.ValidateQueue(m.Namespace, m.Queue); err != nil {
		return nil, s.toConnect(err)
	}
	var resp *tenurev1.QueueStatsResponse
	err := s.readQueues(ctx, func(mc *statemachine.Machine, tick registrar.Tick) error {
		resp = queueStatsPB(mc.Queues(), m.Namespace, m.Queue, tick, s.node.Wall())
		resp.Config = &tenurev1.QueueConfig{MaxAttempts: mc.Queues().MaxAttemptsOf(m.Namespace, m.Queue)}
		return nil
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}

// queueStatsPB is a queue's counts as of tick, and its oldest claimable
// task's wait at wall.
func queueStatsPB(qs *queue.Queues, ns, name string, tick registrar.Tick, wall int64) *tenurev1.QueueStatsResponse {
	c := qs.Stats(ns, name, tick)
	resp := &tenurev1.QueueStatsResponse{Queued: c.Queued, Leased: c.Leased, Succeeded: c.Succeeded,
		Failed: c.Failed, Dead: c.Dead, Cancelled: c.Cancelled}
	if at, ok := qs.OldestReady(ns, name, wall); ok {
		resp.OldestReadyAge = durationpb.New(time.Duration(max(wall-at, 0)) * time.Millisecond)
	}
	return resp
}

// SetQueueConfig sets a queue's defaults (ConfigureQueue).
func (h *queueService) SetQueueConfig(ctx context.Context, req *connect.Request[tenurev1.SetQueueConfigRequest]) (*connect.Response[tenurev1.SetQueueConfigResponse], error) {
	s, m := h.s, req.Msg
	c := &logpb.ConfigureQueue{Namespace: m.Namespace, Queue: m.Queue, MaxAttempts: m.MaxAttempts}
	if err := queue.ValidateConfigure(c); err != nil {
		return nil, s.toConnect(err)
	}
	out, err := s.proposeQueue(ctx, &logpb.Command{Op: &logpb.Command_ConfigureQueue{ConfigureQueue: c}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.SetQueueConfigResponse{Config: &tenurev1.QueueConfig{MaxAttempts: out.MaxAttempts}}), nil
}

// ListQueues names a namespace's queues with their counts, by name.
func (h *queueService) ListQueues(ctx context.Context, req *connect.Request[tenurev1.ListQueuesRequest]) (*connect.Response[tenurev1.ListQueuesResponse], error) {
	s, m := h.s, req.Msg
	if err := registrar.CheckNamespace("namespace", m.Namespace, false); err != nil {
		return nil, s.toConnect(err)
	}
	resp := &tenurev1.ListQueuesResponse{}
	err := s.readQueues(ctx, func(mc *statemachine.Machine, tick registrar.Tick) error {
		qs, wall := mc.Queues(), s.node.Wall()
		for _, name := range qs.Names(m.Namespace) {
			resp.Queues = append(resp.Queues, &tenurev1.QueueSummary{Queue: name, Stats: queueStatsPB(qs, m.Namespace, name, tick, wall)})
		}
		return nil
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}
