package tenure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// runWorker runs w in the background; the returned function cancels it and
// returns Run's error.
func runWorker(t *testing.T, w *Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				err = errors.New("Worker.Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestQueueClientCalls(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithHolder("w1"))
	ctx := ctxTimeout(t, 30*time.Second)

	got, err := c.Enqueue(ctx, "calls", []NewTask{{ID: "a", Payload: []byte("pa"), Priority: 1}, {ID: "b", Payload: []byte("pb"), Priority: 5}})
	if err != nil || len(got) != 2 || got[0].GetTaskId() != "a" || got[0].GetState() != tenurev1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("enqueue: %v %v", got, err)
	}
	// Idempotent by id: the existing task, unchanged.
	again, err := c.Enqueue(ctx, "calls", []NewTask{{ID: "a", Payload: []byte("other")}})
	if err != nil || string(again[0].GetPayload()) != "pa" {
		t.Fatalf("re-enqueue: %v %v", again, err)
	}
	// EnqueueTasks tells which ids existed (in a queue of its own).
	eq, err := c.EnqueueTasks(ctx, "eq", []NewTask{{ID: "a", Payload: []byte("first")}})
	if err != nil || len(eq) != 1 || eq[0].Existed || string(eq[0].Task.GetPayload()) != "first" {
		t.Fatalf("EnqueueTasks of a new id: %+v %v", eq, err)
	}
	eq, err = c.EnqueueTasks(ctx, "eq", []NewTask{{ID: "a", Payload: []byte("other")}, {ID: "n"}})
	if err != nil || len(eq) != 2 || !eq[0].Existed || string(eq[0].Task.GetPayload()) != "first" || eq[1].Existed || eq[1].Task.GetTaskId() != "n" {
		t.Fatalf("EnqueueTasks of an existing and a new id: %+v %v", eq, err)
	}
	// Priority first; the claimed lease is kept alive by the heartbeats.
	tasks, err := c.Claim(ctx, "calls", ClaimOptions{Max: 1, LeaseTTL: time.Second})
	if err != nil || len(tasks) != 1 || tasks[0].ID != "b" || tasks[0].Attempts != 1 || tasks[0].Lease == nil {
		t.Fatalf("claim: %v %v", tasks, err)
	}
	tk := tasks[0]
	waitRenewals(t, tk.Lease, 2)
	if _, err := c.Complete(ctx, "calls", "a", tk.Lease.ID(), nil); !errors.Is(err, ErrTaskNotLeased) {
		t.Fatalf("complete of another task's lease: %v", err)
	}
	done, err := tk.Complete(ctx, []byte("rb"))
	if err != nil || done.GetState() != tenurev1.TaskState_TASK_STATE_SUCCEEDED || string(done.GetResult()) != "rb" {
		t.Fatalf("complete: %v %v", done, err)
	}
	<-tk.Lease.Done()
	if !errors.Is(tk.Lease.Err(), ErrReleased) {
		t.Fatalf("lease after complete: %v", tk.Lease.Err())
	}
	// Repeating the completion is harmless.
	if _, err := tk.Complete(ctx, []byte("rb")); err != nil {
		t.Fatalf("repeated complete: %v", err)
	}

	tasks, err = c.Claim(ctx, "calls", ClaimOptions{Max: 5})
	if err != nil || len(tasks) != 1 || tasks[0].ID != "a" {
		t.Fatalf("claim a: %v %v", tasks, err)
	}
	failed, err := tasks[0].Fail(ctx, "nope", time.Hour)
	if err != nil || failed.GetState() != tenurev1.TaskState_TASK_STATE_FAILED || failed.GetLastError() != "nope" {
		t.Fatalf("fail: %v %v", failed, err)
	}
	if _, err := tasks[0].Complete(ctx, nil); !errors.Is(err, ErrTaskNotLeased) {
		t.Fatalf("zombie complete: %v", err)
	}
	// A queue's default attempts apply to tasks enqueued without their own.
	if got, err := c.SetQueueMaxAttempts(ctx, "now", 3); err != nil || got != 3 {
		t.Fatalf("SetQueueMaxAttempts: %d %v", got, err)
	}
	if st, err := c.QueueStats(ctx, "now"); err != nil || st.GetConfig().GetMaxAttempts() != 3 {
		t.Fatalf("QueueStats config: %v %v", st, err)
	}
	// RetryNow: claimable again at once, not after the backoff.
	if _, err := c.Enqueue(ctx, "now", []NewTask{{ID: "x"}}); err != nil {
		t.Fatal(err)
	}
	if tasks, err = c.Claim(ctx, "now", ClaimOptions{}); err != nil || len(tasks) != 1 || tasks[0].MaxAttempts != 3 {
		t.Fatalf("claim x: %v %v", tasks, err)
	}
	if _, err := tasks[0].Fail(ctx, "again", RetryNow); err != nil {
		t.Fatal(err)
	}
	if again, err := c.Claim(ctx, "now", ClaimOptions{}); err != nil || len(again) != 1 || again[0].ID != "x" || again[0].Attempts != 2 {
		t.Fatalf("claim right after Fail(RetryNow): %v %v", again, err)
	} else if _, err := again[0].Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	cancelled, err := c.Cancel(ctx, "calls", "a")
	if err != nil || cancelled.GetState() != tenurev1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("cancel: %v %v", cancelled, err)
	}
	if _, err := c.GetTask(ctx, "calls", "nope"); !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := c.Enqueue(ctx, "", []NewTask{{}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("enqueue without queue: %v", err)
	}
	page, next, err := c.ListTasks(ctx, "calls", ListTasksOptions{PageSize: 1})
	if err != nil || len(page) != 1 || page[0].GetTaskId() != "a" || next == "" {
		t.Fatalf("list page 1: %v %q %v", page, next, err)
	}
	page, next, err = c.ListTasks(ctx, "calls", ListTasksOptions{PageToken: next})
	if err != nil || len(page) != 1 || page[0].GetTaskId() != "b" || next != "" {
		t.Fatalf("list page 2: %v %q %v", page, next, err)
	}
	page, _, err = c.ListTasks(ctx, "calls", ListTasksOptions{States: []tenurev1.TaskState{tenurev1.TaskState_TASK_STATE_CANCELLED}})
	if err != nil || len(page) != 1 || page[0].GetTaskId() != "a" {
		t.Fatalf("list cancelled: %v %v", page, err)
	}
	st, err := c.QueueStats(ctx, "calls")
	if err != nil || st.GetSucceeded() != 1 || st.GetCancelled() != 1 || st.GetQueued() != 0 {
		t.Fatalf("stats: %v %v", st, err)
	}
	qs, err := c.ListQueues(ctx)
	if err != nil || len(qs) != 3 || qs[0].GetQueue() != "calls" || qs[0].GetStats().GetCancelled() != 1 ||
		qs[1].GetQueue() != "eq" || qs[1].GetStats().GetQueued() != 2 {
		t.Fatalf("ListQueues: %v %v", qs, err)
	}
	// Retry runs the cancelled task again, from its first attempt.
	retried, err := c.Retry(ctx, "calls", "a")
	if err != nil || retried.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED || retried.GetAttempts() != 0 || retried.GetLastError() != "nope" {
		t.Fatalf("retry: %v %v", retried, err)
	}
	tasks, err = c.Claim(ctx, "calls", ClaimOptions{Max: 5})
	if err != nil || len(tasks) != 1 || tasks[0].ID != "a" || tasks[0].Attempts != 1 {
		t.Fatalf("claim after retry: %v %v", tasks, err)
	}
	if _, err := tasks[0].Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Retry(ctx, "calls", "nope"); !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("retry unknown: %v", err)
	}
}

// TestWorkersProcessEachTaskOnce: several workers on two clients handle
// 100 tasks, each exactly once, and complete them with their results.
func TestWorkersProcessEachTaskOnce(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	ctx := ctxTimeout(t, 60*time.Second)
	const n = 100
	var (
		mu      sync.Mutex
		handled = map[string]int{}
		count   atomic.Int64
	)
	all := make(chan struct{})
	handler := func(ctx context.Context, tk *Task) ([]byte, error) {
		mu.Lock()
		handled[tk.ID]++
		mu.Unlock()
		if count.Add(1) == n {
			close(all)
		}
		return append([]byte("done:"), tk.Payload...), nil
	}
	var stops []func() error
	for i := range 4 {
		c := s.client(t, WithHolder(fmt.Sprintf("client%d", i%2)))
		w := NewWorker(c, "jobs", handler, WorkerConcurrency(4), WorkerLeaseTTL(10*time.Second), WorkerWait(2*time.Second))
		stops = append(stops, runWorker(t, w))
	}
	// Enqueued while the workers long-poll.
	prod := s.client(t)
	for i := 0; i < n; i += 25 {
		var batch []NewTask
		for j := i; j < i+25; j++ {
			batch = append(batch, NewTask{ID: fmt.Sprintf("t%03d", j), Payload: []byte(fmt.Sprint(j))})
		}
		if _, err := prod.Enqueue(ctx, "jobs", batch); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("only %d of %d tasks handled", count.Load(), n)
	}
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	if len(handled) != n {
		t.Fatalf("handled %d distinct tasks, want %d", len(handled), n)
	}
	for id, k := range handled {
		if k != 1 {
			t.Fatalf("task %s handled %d times", id, k)
		}
	}
	st, err := prod.QueueStats(ctx, "jobs")
	if err != nil || st.GetSucceeded() != n || st.GetQueued()+st.GetLeased()+st.GetFailed() != 0 {
		t.Fatalf("stats %v, %v", st, err)
	}
	tk, err := prod.GetTask(ctx, "jobs", "t042")
	if err != nil || string(tk.GetResult()) != "done:42" || tk.GetAttempts() != 1 {
		t.Fatalf("t042: %v %v", tk, err)
	}
}

// TestWorkerFailRetriesAndPanics: a handler error fails the attempt and the
// task is retried; a panic is a failure whose text holds the trimmed stack.
func TestWorkerFailRetriesAndPanics(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	finished := make(chan *tenurev1.Task, 10)
	handler := func(ctx context.Context, tk *Task) ([]byte, error) {
		switch {
		case tk.ID == "panics":
			panic("boom")
		case tk.Attempts == 1:
			return nil, errors.New("transient trouble")
		}
		return []byte("ok"), nil
	}
	w := NewWorker(c, "retry", handler, WorkerRetryAfter(time.Millisecond), WorkerWait(time.Second),
		WorkerOnFinish(func(tk *Task, final *tenurev1.Task, err error) { finished <- final }))
	stop := runWorker(t, w)
	if _, err := c.Enqueue(ctx, "retry", []NewTask{{ID: "flaky"}, {ID: "panics", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	var flaky []*tenurev1.Task
	var panicked *tenurev1.Task
	for len(flaky) < 2 || panicked == nil {
		select {
		case f := <-finished:
			if f == nil {
				t.Fatal("complete or fail failed")
			}
			if f.GetTaskId() == "panics" {
				panicked = f
			} else {
				flaky = append(flaky, f)
			}
		case <-ctx.Done():
			t.Fatalf("flaky %v, panicked %v", flaky, panicked)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if f := flaky[0]; f.GetState() != tenurev1.TaskState_TASK_STATE_FAILED || f.GetLastError() != "transient trouble" {
		t.Fatalf("first attempt: %v", f)
	}
	if f := flaky[1]; f.GetState() != tenurev1.TaskState_TASK_STATE_SUCCEEDED || f.GetAttempts() != 2 || string(f.GetResult()) != "ok" {
		t.Fatalf("retry: %v", f)
	}
	msg := panicked.GetLastError()
	if panicked.GetState() != tenurev1.TaskState_TASK_STATE_DEAD ||
		!strings.HasPrefix(msg, "panic: boom") ||
		!strings.Contains(msg, "queue_test.go") {
		t.Fatalf("panicked task: %v\n%s", panicked, msg)
	}
	for _, noise := range []string{"runtime.gopanic", "runtime/panic.go", "(*Worker).call", "(*Worker).handle"} {
		if strings.Contains(msg, noise) {
			t.Fatalf("stack not trimmed (%s):\n%s", noise, msg)
		}
	}
}

// TestWorkerDrainsOnShutdown: cancelling Run stops claiming but lets the
// handlers in flight finish, with a live context, and completes them.
func TestWorkerDrainsOnShutdown(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	started := make(chan string, 2)
	proceed := make(chan struct{})
	handler := func(hctx context.Context, tk *Task) ([]byte, error) {
		started <- tk.ID
		<-proceed
		if err := hctx.Err(); err != nil {
			return nil, err
		}
		return []byte("drained"), nil
	}
	w := NewWorker(c, "drain", handler, WorkerConcurrency(2), WorkerWait(time.Second))
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	if _, err := c.Enqueue(ctx, "drain", []NewTask{{ID: "x"}, {ID: "y"}}); err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("Run returned before its handlers finished: %v", err)
	default:
	}
	// A task enqueued now is not claimed any more.
	if _, err := c.Enqueue(ctx, "drain", []NewTask{{ID: "z"}}); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, id := range []string{"x", "y"} {
		tk, err := c.GetTask(ctx, "drain", id)
		if err != nil || tk.GetState() != tenurev1.TaskState_TASK_STATE_SUCCEEDED || string(tk.GetResult()) != "drained" {
			t.Fatalf("%s after drain: %v %v", id, tk, err)
		}
	}
	if tk, err := c.GetTask(ctx, "drain", "z"); err != nil || tk.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("z after shutdown: %v %v", tk, err)
	}
}

// TestWorkerDrainTimeout: a handler still running when the drain timeout
// passes has its context cancelled, and its task returns to the queue.
func TestWorkerDrainTimeout(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	started := make(chan struct{})
	cause := make(chan error, 1)
	handler := func(hctx context.Context, tk *Task) ([]byte, error) {
		close(started)
		<-hctx.Done()
		cause <- context.Cause(hctx)
		return nil, hctx.Err()
	}
	w := NewWorker(c, "slow", handler, WorkerDrainTimeout(100*time.Millisecond), WorkerWait(time.Second))
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	// On its only attempt: the drain gives the lease back, which returns
	// the attempt, so the task is queued again, not dead.
	if _, err := c.Enqueue(ctx, "slow", []NewTask{{ID: "s", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, ErrDrainTimeout) || !strings.Contains(err.Error(), "(1 tasks returned to the queue)") {
		t.Fatalf("Run: %v", err)
	}
	if err := <-cause; !errors.Is(err, ErrDrainTimeout) {
		t.Fatalf("handler context cause: %v", err)
	}
	tk, err := c.GetTask(ctx, "slow", "s")
	if err != nil || tk.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED || tk.GetAttempts() != 0 {
		t.Fatalf("task after drain timeout: %v %v", tk, err)
	}
}

// TestWorkerLeaseLostCancelsHandler: cancelling a running task revokes its
// lease; the heartbeat learns it and the handler's context is cancelled
// with the loss as cause.
func TestWorkerLeaseLostCancelsHandler(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	started := make(chan struct{})
	cause := make(chan error, 1)
	handler := func(hctx context.Context, tk *Task) ([]byte, error) {
		close(started)
		<-hctx.Done()
		cause <- context.Cause(hctx)
		return nil, hctx.Err()
	}
	w := NewWorker(c, "lost", handler, WorkerLeaseTTL(2*time.Second), WorkerWait(time.Second))
	stop := runWorker(t, w)
	if _, err := c.Enqueue(ctx, "lost", []NewTask{{ID: "l"}}); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := c.Cancel(ctx, "lost", "l"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("cause %v", err)
		}
	case <-ctx.Done():
		t.Fatal("handler context not cancelled after the lease was revoked")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerCancelToldAtOnce: a task cancelled while its handler runs,
// after its lease's first renewal, cancels the handler at once (the
// KeepAlive stream tells), not at the lease's next renewal.
func TestWorkerCancelToldAtOnce(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 9 * time.Second // renewed every 3 s
	running := make(chan *Task, 1)
	cause := make(chan error, 1)
	handler := func(hctx context.Context, tk *Task) ([]byte, error) {
		running <- tk
		<-hctx.Done()
		cause <- context.Cause(hctx)
		return nil, hctx.Err()
	}
	stop := runWorker(t, NewWorker(c, "told", handler, WorkerLeaseTTL(ttl), WorkerWait(time.Second)))
	if _, err := c.Enqueue(ctx, "told", []NewTask{{ID: "t"}}); err != nil {
		t.Fatal(err)
	}
	tk := <-running
	waitRenewed(t, tk.Lease, ttl)
	if _, err := c.Cancel(ctx, "told", "t"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "task cancelled") {
			t.Fatalf("cause %v", err)
		}
	case <-time.After(ttl/3 - time.Second):
		t.Fatal("handler not cancelled before its lease's next renewal was due")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// gatedTransport holds back every request to one path until gate closes.
type gatedTransport struct {
	next http.RoundTripper
	path string
	gate chan struct{}
	held atomic.Int64
}

func (g *gatedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == g.path {
		g.held.Add(1)
		select {
		case <-g.gate:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return g.next.RoundTrip(r)
}

// TestWorkerRunsNextTaskWhileCompleting: the handler slot is free as soon
// as the handler returns; the Complete goes out in the background. With
// one slot and every Complete held back until the second handler runs,
// a Worker that awaited each Complete before the next task would never
// get there.
func TestWorkerRunsNextTaskWhileCompleting(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	ctx := ctxTimeout(t, 60*time.Second)
	prod := s.client(t)
	if _, err := prod.Enqueue(ctx, "bg", []NewTask{{ID: "first"}, {ID: "second"}}); err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	gt := &gatedTransport{next: newHTTPClient(&cfg).Transport, path: "/tenure.v1.QueueService/Complete", gate: make(chan struct{})}
	c := s.client(t, WithHTTPClient(&http.Client{Transport: gt}), WithoutPipeline())
	finished := make(chan string, 2)
	w := NewWorker(c, "bg", func(ctx context.Context, tk *Task) ([]byte, error) {
		if tk.ID == "second" {
			if gt.held.Load() != 1 {
				t.Errorf("the second task runs with %d completions held back, want the first's", gt.held.Load())
			}
			close(gt.gate)
		}
		return nil, nil
	}, WorkerConcurrency(1), WorkerWait(time.Second), WorkerOnFinish(func(tk *Task, final *tenurev1.Task, err error) {
		if err != nil || final.GetState() != tenurev1.TaskState_TASK_STATE_SUCCEEDED {
			t.Errorf("%s finished as %v, %v", tk.ID, final.GetState(), err)
		}
		finished <- tk.ID
	}))
	stop := runWorker(t, w)
	for range 2 {
		select {
		case <-finished:
		case <-ctx.Done():
			t.Fatal("the second task never ran while the first one's Complete was held back")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerDrainReportsATaskItCouldNotGiveBack: a handler that ignores
// its context outlives its task lease (the renewal limit ends it); the
// drain's release then finds the lease expired, and Run says the task
// was not given back (the expiry used its attempt) instead of counting it
// as returned.
func TestWorkerDrainReportsATaskItCouldNotGiveBack(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	started, unblock := make(chan struct{}), make(chan struct{})
	defer close(unblock)
	handler := func(context.Context, *Task) ([]byte, error) {
		close(started)
		<-unblock // deaf to its context
		return nil, errors.New("too late")
	}
	w := NewWorker(c, "deaf", handler, WorkerConcurrency(1), WorkerLeaseTTL(time.Second),
		WorkerDrainTimeout(100*time.Millisecond), WorkerWait(time.Second))
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	if _, err := c.Enqueue(ctx, "deaf", []NewTask{{ID: "d", MaxAttempts: 3}}); err != nil {
		t.Fatal(err)
	}
	<-started
	// 10 renewals at ttl/3, then the lease expires and the task is queued
	// again with its attempt counted.
	waitFor(t, "the task lease to expire", 20*time.Second, func() bool {
		tk, err := c.GetTask(ctx, "deaf", "d")
		return err == nil && tk.GetState() == tenurev1.TaskState_TASK_STATE_QUEUED
	})
	cancel()
	err := <-errc
	if !errors.Is(err, ErrDrainTimeout) || !strings.Contains(err.Error(), "(0 tasks returned to the queue)") ||
		!strings.Contains(err.Error(), "task d was not given back") {
		t.Fatalf("Run: %v", err)
	}
	if tk, err := c.GetTask(ctx, "deaf", "d"); err != nil || tk.GetAttempts() != 1 {
		t.Fatalf("task after the drain: %v %v", tk, err)
	}
}

// A grant whose answer crossed its call's end (the caller gave up as it
// was granted) is given back: a lease on the resource, claimed tasks of
// the queue, held for this client's holder but not by this client. The
// grant is made here by a second client of the same holder, as the lost
// answer would have made it.
func TestStrayGrantsGivenBack(t *testing.T) {
	s := startRealServer(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c := s.client(t, WithHolder("w-stray"))
	other := s.client(t, WithHolder("w-stray"))
	if _, err := other.Acquire(ctx, "stray/res", TTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	mine, err := c.Acquire(ctx, "stray/mine", TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A lease granted well before the lost request was sent is another
	// Client's that shares the holder: kept.
	c.releaseStrayLease(DefaultNamespace, "stray/res", DefaultNamespace+"\x00stray/res", time.Now().Add(time.Minute))
	if _, err := c.Acquire(ctx, "stray/res", TTL(time.Minute)); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("a lease granted before the lost request was given back: %v", err)
	}
	if !c.sharedWarned.Load() {
		t.Error("no warning of a holder shared with another client")
	}
	c.releaseStrayLease(DefaultNamespace, "stray/res", DefaultNamespace+"\x00stray/res", time.Now())
	c.releaseStrayLease(DefaultNamespace, "stray/mine", DefaultNamespace+"\x00stray/mine", time.Now())
	if l, err := c.Acquire(ctx, "stray/res", TTL(time.Minute)); err != nil {
		t.Fatalf("the stray lease was not given back: %v", err)
	} else {
		_ = l.Release(ctx, ReleaseCompleted)
	}
	if mine.Err() != nil {
		t.Fatalf("a lease this client holds was given back: %v", mine.Err())
	}

	if _, err := c.Enqueue(ctx, "stray", []NewTask{{ID: "t1"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := other.Claim(ctx, "stray", ClaimOptions{}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	c.releaseStrayClaims(DefaultNamespace, "stray", DefaultNamespace+"\x00stray", 0, time.Now().Add(time.Minute))
	if task, err := c.GetTask(ctx, "stray", "t1"); err != nil || task.GetState() != tenurev1.TaskState_TASK_STATE_LEASED {
		t.Fatalf("a task claimed before the lost request was given back: %v %v", task, err)
	}
	c.releaseStrayClaims(DefaultNamespace, "stray", DefaultNamespace+"\x00stray", 0, time.Now())
	task, err := c.GetTask(ctx, "stray", "t1")
	if err != nil || task.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED || task.GetAttempts() != 0 {
		t.Fatalf("the stray claim was not given back: %v %v", task, err)
	}
}

// loseClaimAnswer is a transport that reads the answer of the first
// unary Claim and reports a reset connection instead, as a member killed
// with the answer on its way would.
type loseClaimAnswer struct {
	base http.RoundTripper
	lost atomic.Bool
}

func (l *loseClaimAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, ".QueueService/Claim") || l.lost.Load() {
		return resp, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	l.lost.Store(true)
	return nil, syscall.ECONNRESET
}

// TestClaimWithALostAnswerGivesItsTasksBack: a Claim whose answer was lost
// after the registrar applied it (OUTCOME_UNKNOWN) gives back the tasks it
// claimed before it returns, so that their attempts are not counted (found
// from outside: a task of one attempt went to the dead letters when its
// claim's answer was lost in a failover, its handler never run).
func TestClaimWithALostAnswerGivesItsTasksBack(t *testing.T) {
	s := startRealServer(t)
	ctx := ctxTimeout(t, 30*time.Second)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	lose := &loseClaimAnswer{base: &http.Transport{Protocols: &p}}
	c := s.client(t, WithHolder("w-lost"), WithoutPipeline(), WithHTTPClient(&http.Client{Transport: lose}))
	if _, err := c.Enqueue(ctx, "lost", []NewTask{{ID: "once", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Claim(ctx, "lost", ClaimOptions{LeaseTTL: time.Minute})
	if !lose.lost.Load() || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("claim with its answer lost: %v %v (lost: %v)", got, err, lose.lost.Load())
	}
	task, err := c.GetTask(ctx, "lost", "once")
	if err != nil || task.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED || task.GetAttempts() != 0 {
		t.Fatalf("the lost claim's task: %v %v; want it queued, no attempt counted", task, err)
	}
	again, err := c.Claim(ctx, "lost", ClaimOptions{LeaseTTL: time.Minute})
	if err != nil || len(again) != 1 || again[0].ID != "once" {
		t.Fatalf("claim again: %v %v", again, err)
	}
}

// timerLog is the real clock, noting the durations of the timers made.
type timerLog struct {
	mu sync.Mutex
	ds []time.Duration
}

func (c *timerLog) Now() time.Time { return time.Now() }

func (c *timerLog) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	c.ds = append(c.ds, d)
	c.mu.Unlock()
	return realClock{}.NewTimer(d)
}

// between returns the durations noted within [lo, hi], in order.
func (c *timerLog) between(lo, hi time.Duration) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, d := range c.ds {
		if d >= lo && d <= hi {
			out = append(out, d)
		}
	}
	return out
}

// TestWorkerWithoutWaitPolls: with WorkerWait(0) a worker polls an empty
// queue with growing pauses between claims (not a claim loop that never
// rests), and still takes a task enqueued later.
func TestWorkerWithoutWaitPolls(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	clk := &timerLog{}
	c := s.client(t, WithClock(clk))
	handled := make(chan string, 1)
	w := NewWorker(c, "poll", func(ctx context.Context, tk *Task) ([]byte, error) {
		handled <- tk.ID
		return nil, nil
	}, WorkerWait(0))
	runWorker(t, w)
	waitFor(t, "five empty polls", 20*time.Second, func() bool { return len(clk.between(50*time.Millisecond, time.Second)) >= 5 })
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	if got := clk.between(50*time.Millisecond, time.Second)[:5]; !slices.Equal(got, want) {
		t.Fatalf("pauses between empty claims %v, want %v", got, want)
	}
	if _, err := c.Enqueue(ctxTimeout(t, 10*time.Second), "poll", []NewTask{{ID: "late"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-handled:
		if id != "late" {
			t.Fatalf("handled %q", id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the task enqueued later was never handled")
	}
}
