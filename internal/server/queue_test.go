package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/logpb"
)

func (b *bundle) queueClient() tenurev1connect.QueueServiceClient {
	return tenurev1connect.NewQueueServiceClient(h2cClient(), b.base, connect.WithGRPC())
}

// TestQueueEndToEnd: several concurrent workers long-poll, claim and
// complete every task exactly once against a real single node.
func TestQueueEndToEnd(t *testing.T) {
	b := setup(t)
	qc := b.queueClient()
	ctx := context.Background()
	const n, workers = 300, 8
	var mu sync.Mutex
	done := map[string]int{}
	var completed atomic.Int64
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for wctx.Err() == nil {
				resp, err := qc.Claim(wctx, connect.NewRequest(&tenurev1.ClaimRequest{Queue: "jobs", Worker: fmt.Sprintf("w%d", w),
					Max: 4, Wait: durationpb.New(2 * time.Second)}))
				if err != nil {
					if wctx.Err() == nil {
						t.Errorf("claim: %v", err)
					}
					return
				}
				for _, tk := range resp.Msg.Tasks {
					if tk.Lease == nil || tk.Lease.LeaseId != tk.LeaseId || tk.State != tenurev1.TaskState_TASK_STATE_LEASED {
						t.Errorf("claimed task %v", tk)
					}
					if _, err := qc.Complete(wctx, connect.NewRequest(&tenurev1.CompleteRequest{Queue: "jobs", TaskId: tk.TaskId,
						LeaseId: tk.LeaseId, Result: tk.Payload})); err != nil {
						t.Errorf("complete %s: %v", tk.TaskId, err)
						continue
					}
					mu.Lock()
					done[tk.TaskId]++
					mu.Unlock()
					if completed.Add(1) == n {
						cancel()
					}
				}
			}
		}(w)
	}
	// Enqueue after the workers started waiting: the long-poll must wake.
	for i := 0; i < n; i += 50 {
		var ts []*tenurev1.NewTask
		for j := i; j < i+50; j++ {
			ts = append(ts, &tenurev1.NewTask{TaskId: fmt.Sprintf("t%03d", j), Payload: []byte(fmt.Sprint(j))})
		}
		if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "jobs", Tasks: ts})); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	wg.Wait()
	if len(done) != n {
		t.Fatalf("completed %d distinct tasks, want %d", len(done), n)
	}
	for id, c := range done {
		if c != 1 {
			t.Fatalf("task %s completed %d times", id, c)
		}
	}
	st, err := qc.Stats(ctx, connect.NewRequest(&tenurev1.QueueStatsRequest{Queue: "jobs"}))
	if err != nil || st.Msg.Succeeded != n || st.Msg.Queued+st.Msg.Leased != 0 {
		t.Fatalf("stats %v, %v", st, err)
	}
	got, err := qc.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{Queue: "jobs", TaskId: "t007"}))
	if err != nil || got.Msg.Task.State != tenurev1.TaskState_TASK_STATE_SUCCEEDED || string(got.Msg.Task.Result) != "7" ||
		got.Msg.Task.CompletedAt == nil {
		t.Fatalf("get: %v, %v", got, err)
	}
	// Paging through ListTasks sees every task once.
	seen, tok := 0, ""
	for {
		page, err := qc.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Queue: "jobs", PageSize: 64, PageToken: tok,
			States: []tenurev1.TaskState{tenurev1.TaskState_TASK_STATE_SUCCEEDED}}))
		if err != nil {
			t.Fatal(err)
		}
		seen += len(page.Msg.Tasks)
		if tok = page.Msg.NextPageToken; tok == "" {
			break
		}
	}
	if seen != n {
		t.Fatalf("listed %d tasks", seen)
	}
	// A page token belongs to its listing: other states or another queue,
	// or a token never issued, is refused rather than paged through.
	first, err := qc.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Queue: "jobs", PageSize: 1}))
	if err != nil || first.Msg.NextPageToken == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	tok = first.Msg.NextPageToken
	for _, req := range []*tenurev1.ListTasksRequest{
		{Queue: "jobs", PageToken: tok, States: []tenurev1.TaskState{tenurev1.TaskState_TASK_STATE_SUCCEEDED}},
		{Queue: "other", PageToken: tok},
		{Queue: "jobs", PageToken: "7"},
	} {
		_, err := qc.ListTasks(ctx, connect.NewRequest(req))
		wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	}
	// Every state named is the same listing as none named.
	all := []tenurev1.TaskState{6, 5, 4, 3, 2, 1, 1}
	next, err := qc.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Queue: "jobs", PageSize: 1, PageToken: tok, States: all}))
	if err != nil || len(next.Msg.Tasks) != 1 || next.Msg.Tasks[0].TaskId == first.Msg.Tasks[0].TaskId {
		t.Fatalf("second page with every state named: %v, %v", next, err)
	}
}

func TestQueueErrorsAndZombie(t *testing.T) {
	b := setup(t)
	qc := b.queueClient()
	ctx := context.Background()
	if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "q", Tasks: []*tenurev1.NewTask{{TaskId: "t"}}})); err != nil {
		t.Fatal(err)
	}
	// An id that exists is answered as it is, and said to have existed; a
	// generated id cannot be chosen (it would answer someone else's task).
	again, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "q", Tasks: []*tenurev1.NewTask{{TaskId: "t", Payload: []byte("other")}, {}}}))
	if err != nil || fmt.Sprint(again.Msg.Existed) != "[true false]" || len(again.Msg.Tasks[0].Payload) != 0 {
		t.Fatalf("enqueue again: existed %v, %v, %v", again.Msg.GetExisted(), again.Msg.GetTasks(), err)
	}
	gen := again.Msg.Tasks[1].TaskId
	_, err = qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "q", Tasks: []*tenurev1.NewTask{{TaskId: gen, Payload: []byte("mine")}}}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	if md := errorMeta(t, err); md["field"] != "tasks[0].task_id" {
		t.Errorf("generated id chosen: metadata %v", md)
	}
	if _, err := qc.Cancel(ctx, connect.NewRequest(&tenurev1.CancelRequest{Queue: "q", TaskId: gen})); err != nil {
		t.Fatal(err)
	}
	_, err = qc.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{Queue: "q", TaskId: "nope"}))
	wantReason(t, err, connect.CodeNotFound, "TASK_NOT_FOUND")
	_, err = qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "", Tasks: []*tenurev1.NewTask{{}}}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	// A task whose lease's resource would be too long (a queue name of
	// characters escaped to three bytes each) could never be claimed, and
	// would block the tasks after it: refused, and nothing is enqueued.
	odd := strings.Repeat("%", 128)
	for _, tc := range []struct {
		tasks []*tenurev1.NewTask
		field string
	}{
		{[]*tenurev1.NewTask{{TaskId: "short1"}, {TaskId: strings.Repeat("i", 128)}}, "tasks[1].task_id"},
		{[]*tenurev1.NewTask{{}, {TaskId: strings.Repeat("/", 128)}}, "tasks[1].task_id"},
	} {
		_, err = qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: odd, Tasks: tc.tasks}))
		wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
		if md := errorMeta(t, err); md["field"] != tc.field {
			t.Errorf("task resource too long: metadata %v, want field %s", md, tc.field)
		}
	}
	if st, err := qc.Stats(ctx, connect.NewRequest(&tenurev1.QueueStatsRequest{Queue: odd})); err != nil || st.Msg.GetQueued() != 0 {
		t.Fatalf("after refused enqueues: %v, %v", st, err)
	}
	if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: strings.Repeat("%", 100), Tasks: []*tenurev1.NewTask{{TaskId: "fits"}}})); err != nil {
		t.Fatalf("a task whose resource fits: %v", err)
	}

	c1, err := qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Queue: "q", Worker: "w1", LeaseTtl: durationpb.New(time.Second)}))
	if err != nil || len(c1.Msg.Tasks) != 1 {
		t.Fatalf("claim: %v %v", c1, err)
	}
	// The expirer requeues the task; a long-poll claim by w2 gets it.
	c2, err := qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Queue: "q", Worker: "w2", Wait: durationpb.New(10 * time.Second)}))
	if err != nil || len(c2.Msg.Tasks) != 1 || c2.Msg.Tasks[0].Attempts != 2 {
		t.Fatalf("reclaim: %v %v", c2, err)
	}
	_, err = qc.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{Queue: "q", TaskId: "t", LeaseId: c1.Msg.Tasks[0].LeaseId}))
	wantReason(t, err, connect.CodeFailedPrecondition, "TASK_NOT_LEASED")
	if md := errorMeta(t, err); md["namespace"] != "default" || md["queue"] != "q" || md["task_id"] != "t" {
		t.Errorf("TASK_NOT_LEASED metadata %v", md)
	}
	// A bad lease ttl names the request's field, lease_ttl.
	for _, d := range []time.Duration{0, time.Hour} {
		_, err = qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Queue: "q", Worker: "w1", LeaseTtl: durationpb.New(d)}))
		wantReason(t, err, connect.CodeInvalidArgument, "TTL_OUT_OF_RANGE")
		if md := errorMeta(t, err); md["field"] != "lease_ttl" {
			t.Errorf("claim with lease ttl %v: metadata %v", d, md)
		}
	}
	// Task leases are ordinary leases: renewed through LeaseService.
	if _, err := b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{c2.Msg.Tasks[0].LeaseId}})); err != nil {
		t.Fatalf("renew task lease: %v", err)
	}
	// An empty long-poll ends without an error.
	empty, err := qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Queue: "other", Worker: "w3", Wait: durationpb.New(50 * time.Millisecond)}))
	if err != nil || len(empty.Msg.Tasks) != 0 {
		t.Fatalf("empty claim: %v %v", empty, err)
	}
}

// BenchmarkQueueThroughput: enqueue → claim → complete through the server
// with 64 workers; reports tasks/s. The tasks are enqueued in batches of
// 500 first, 8 batches at a time (counted in the time), then the workers
// claim up to claim tasks at a time and run them one after another: with
// one unary call per operation, or over one shared QueueService.Pipeline
// stream. A worker waits for each task's Complete before the next (sync),
// or sends it and goes on (async: the Go client Worker's completer, and
// River's), with at most claim completions in flight per worker.
func BenchmarkQueueThroughput(b *testing.B) {
	for _, c := range []struct {
		transport string
		claim     uint32
		async     bool
	}{{"unary", 1, false}, {"pipeline", 1, false}, {"pipeline", 8, false}, {"pipeline", 8, true}} {
		complete := "sync"
		if c.async {
			complete = "async"
		}
		b.Run(fmt.Sprintf("transport=%s/claim=%d/complete=%s", c.transport, c.claim, complete), func(b *testing.B) {
			bd := setup(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var ops queueOps = unaryQueue{bd.queueClient()}
			if c.transport == "pipeline" {
				ops = pipelinedQueue{newQueuePipeliner(ctx, bd)}
			}
			n := b.N
			b.ResetTimer()
			producers := make(chan struct{}, 8)
			var pw sync.WaitGroup
			for i := 0; i < n; i += 500 {
				var ts []*tenurev1.NewTask
				for j := i; j < min(i+500, n); j++ {
					ts = append(ts, &tenurev1.NewTask{Payload: []byte("x")})
				}
				producers <- struct{}{}
				pw.Go(func() {
					defer func() { <-producers }()
					if err := ops.enqueue(&tenurev1.EnqueueRequest{Queue: "bench", Tasks: ts}); err != nil {
						b.Error(err)
					}
				})
			}
			pw.Wait()
			var left atomic.Int64
			left.Store(int64(n))
			var wg sync.WaitGroup
			for w := range 64 {
				wg.Go(func() {
					worker := fmt.Sprintf("w%d", w)
					var completing sync.WaitGroup
					defer completing.Wait()
					pending := make(chan struct{}, c.claim)
					for left.Load() > 0 {
						tasks, err := ops.claim(&tenurev1.ClaimRequest{Queue: "bench", Worker: worker, Max: c.claim})
						if err != nil {
							b.Error(err)
							return
						}
						if len(tasks) == 0 {
							return
						}
						for _, tk := range tasks {
							req := &tenurev1.CompleteRequest{Queue: "bench", TaskId: tk.TaskId, LeaseId: tk.LeaseId}
							if !c.async {
								if err := ops.complete(req); err != nil {
									b.Error(err)
									return
								}
								left.Add(-1)
								continue
							}
							pending <- struct{}{}
							completing.Go(func() {
								defer func() { <-pending }()
								if err := ops.complete(req); err != nil {
									b.Error(err)
								}
								left.Add(-1)
							})
						}
					}
				})
			}
			wg.Wait()
			if left.Load() != 0 {
				b.Fatalf("%d tasks left", left.Load())
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// queueOps is how BenchmarkQueueThroughput reaches the queue.
type queueOps interface {
	enqueue(*tenurev1.EnqueueRequest) error
	claim(*tenurev1.ClaimRequest) ([]*tenurev1.Task, error)
	complete(*tenurev1.CompleteRequest) error
}

type unaryQueue struct {
	c tenurev1connect.QueueServiceClient
}

func (u unaryQueue) enqueue(r *tenurev1.EnqueueRequest) error {
	_, err := u.c.Enqueue(context.Background(), connect.NewRequest(r))
	return err
}

func (u unaryQueue) claim(r *tenurev1.ClaimRequest) ([]*tenurev1.Task, error) {
	resp, err := u.c.Claim(context.Background(), connect.NewRequest(r))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Tasks, nil
}

func (u unaryQueue) complete(r *tenurev1.CompleteRequest) error {
	_, err := u.c.Complete(context.Background(), connect.NewRequest(r))
	return err
}

type pipelinedQueue struct{ p *queuePipeliner }

func (q pipelinedQueue) enqueue(r *tenurev1.EnqueueRequest) error {
	_, err := q.p.do(&tenurev1.QueueOp{Op: &tenurev1.QueueOp_Enqueue{Enqueue: r}})
	return err
}

func (q pipelinedQueue) claim(r *tenurev1.ClaimRequest) ([]*tenurev1.Task, error) {
	res, err := q.p.do(&tenurev1.QueueOp{Op: &tenurev1.QueueOp_Claim{Claim: r}})
	if err != nil {
		return nil, err
	}
	return res.GetClaim().GetTasks(), nil
}

func (q pipelinedQueue) complete(r *tenurev1.CompleteRequest) error {
	_, err := q.p.do(&tenurev1.QueueOp{Op: &tenurev1.QueueOp_Complete{Complete: r}})
	return err
}

// A long-poll Claim wakes for its own queue's records: in a named
// namespace, on a queue whose name needs escaping, and in the default
// namespace named or not.
func TestClaimWaitWakesForItsQueue(t *testing.T) {
	b := setup(t)
	qc := b.queueClient()
	ctx := context.Background()
	for _, tc := range []struct{ claimNS, enqueueNS, queue string }{
		{"team", "team", "a/b%c"},
		{"", "default", "plain"},
		{"default", "", "plain2"},
	} {
		got := make(chan *tenurev1.ClaimResponse, 1)
		go func() {
			resp, err := qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Namespace: tc.claimNS, Queue: tc.queue,
				Worker: "w", Wait: durationpb.New(20 * time.Second)}))
			if err != nil {
				t.Error(err)
				got <- nil
				return
			}
			got <- resp.Msg
		}()
		waitFor(t, "the claim waiting", 10*time.Second, func() bool {
			b.srv.watchers.mu.Lock()
			defer b.srv.watchers.mu.Unlock()
			return len(b.srv.watchers.subs) == 1
		})
		// Another queue's task does not end the wait.
		if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: tc.enqueueNS, Queue: tc.queue + "-other",
			Tasks: []*tenurev1.NewTask{{Payload: []byte("no")}}})); err != nil {
			t.Fatal(err)
		}
		if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: tc.enqueueNS, Queue: tc.queue,
			Tasks: []*tenurev1.NewTask{{Payload: []byte("yes")}}})); err != nil {
			t.Fatal(err)
		}
		m := <-got
		if m == nil || len(m.Tasks) != 1 || string(m.Tasks[0].Payload) != "yes" {
			t.Fatalf("%+v: claimed %v (nothing: the wait was never woken)", tc, m)
		}
	}
}

// TestClaimWaitEndsUnavailableOnShutdown: a Claim long-polling when its
// server shuts down is told UNAVAILABLE (ask another member), not that
// there is no task.
func TestClaimWaitEndsUnavailableOnShutdown(t *testing.T) {
	b := setup(t)
	errc := waitingClaim(t, b.queueClient(), b.srv)
	b.stop(t)
	wantReason(t, <-errc, connect.CodeUnavailable, "UNAVAILABLE")
}

// waitingClaim starts a Claim of an empty queue that long-polls for a
// minute, through qc, and returns once it waits on srv (the member that
// runs it: the leader); its error comes on the channel.
func waitingClaim(t *testing.T, qc tenurev1connect.QueueServiceClient, srv *Server) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := qc.Claim(context.Background(), connect.NewRequest(&tenurev1.ClaimRequest{Queue: "idle", Worker: "w",
			Wait: durationpb.New(time.Minute)}))
		errc <- err
	}()
	waitFor(t, "the claim waiting", 10*time.Second, func() bool {
		srv.watchers.mu.Lock()
		defer srv.watchers.mu.Unlock()
		return len(srv.watchers.subs) == 1
	})
	return errc
}

// goneAfterLook is a caller's context that is live when first looked at
// and gone from then on: a caller that goes away while its proposal
// commits.
type goneAfterLook struct {
	context.Context
	looks atomic.Int32
}

func (c *goneAfterLook) Err() error {
	if c.looks.Add(1) > 1 {
		return context.Canceled
	}
	return nil
}

// TestClaimForAGoneCallerGivesTheTasksBack: tasks claimed for a caller
// that went away while the claim committed go back to the queue at once,
// their attempts not counted; none is left leased to no one (a task on
// its last attempt would go DEAD without having run).
func TestClaimForAGoneCallerGivesTheTasksBack(t *testing.T) {
	b := setup(t)
	qc := b.queueClient()
	ctx := t.Context()
	for _, id := range []string{"t1", "t2"} {
		if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "q",
			Tasks: []*tenurev1.NewTask{{TaskId: id, MaxAttempts: 1}}})); err != nil {
			t.Fatal(err)
		}
	}
	out, err := b.srv.claim(&goneAfterLook{Context: ctx}, &logpb.Claim{Namespace: "default", Queue: "q", Worker: "w", Max: 2}, time.Minute)
	if err != context.Canceled || len(out.Tasks) != 0 {
		t.Fatalf("claim for a gone caller: %d tasks, %v", len(out.Tasks), err)
	}
	st, err := qc.Stats(ctx, connect.NewRequest(&tenurev1.QueueStatsRequest{Queue: "q"}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.Queued != 2 || st.Msg.Leased != 0 {
		t.Fatalf("after the claim: %d queued, %d leased; want both tasks queued", st.Msg.Queued, st.Msg.Leased)
	}
	for _, id := range []string{"t1", "t2"} {
		got, err := qc.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{Queue: "q", TaskId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if task := got.Msg.GetTask(); task.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED || task.GetAttempts() != 0 {
			t.Fatalf("task %s: %v after %d attempts; want QUEUED, none counted", id, task.GetState(), task.GetAttempts())
		}
	}
	// A live caller gets them.
	res, err := qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Queue: "q", Worker: "w2", Max: 2}))
	if err != nil || len(res.Msg.Tasks) != 2 {
		t.Fatalf("claim by a live caller: %v %v", res, err)
	}
}

// TestClaimCutShortByAQuotaSaysWhy: a Claim that the holder's quota stops
// part way answers the tasks it claimed with a message naming the quota.
func TestClaimCutShortByAQuotaSaysWhy(t *testing.T) {
	b := setup(t)
	qc := b.queueClient()
	ctx := context.Background()
	if _, err := b.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "capped",
		Policy: &tenurev1.NamespacePolicy{MaxActivePerHolder: 2}})); err != nil {
		t.Fatal(err)
	}
	if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: "capped", Queue: "q",
		Tasks: []*tenurev1.NewTask{{Payload: []byte("1")}, {Payload: []byte("2")}, {Payload: []byte("3")}}})); err != nil {
		t.Fatal(err)
	}
	resp, err := qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Namespace: "capped", Queue: "q", Worker: "w", Max: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.Msg; len(m.Tasks) != 2 || !strings.HasPrefix(m.Message, "claimed 2 of the 3 asked for: QUOTA_EXCEEDED: ") ||
		!strings.HasSuffix(m.Message, "(max_active_per_holder)") {
		t.Fatalf("claimed %d tasks, message %q", len(m.Tasks), m.Message)
	}
}
