package tenure

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Handler processes one claimed task and returns its result (at most
// 256 KiB). Its ctx is cancelled when the task's lease is lost
// (context.Cause is the lease's *LostError, errors.Is(…, ErrLeaseLost)) or
// when the Worker's drain timeout passes during shutdown (ErrDrainTimeout);
// the handler must then stop working on the task.
type Handler func(ctx context.Context, t *Task) ([]byte, error)

// ErrDrainTimeout is returned by Worker.Run, and is the handlers' context
// cause, when in-flight tasks did not finish within the drain timeout.
var ErrDrainTimeout = errors.New("tenure: worker drain timeout passed with tasks in flight")

// PanicError is the failure recorded for a task whose handler panicked:
// the panic value and the panicking goroutine's stack, trimmed to the
// frames between the panic and the Worker.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack) }

// Worker claims tasks of one queue with long-polls and runs a Handler on
// each, at most Concurrency at a time. A task whose handler returns nil is
// completed with the result; one whose handler returns an error, or
// panics, is failed with the error text (a panic's with a trimmed stack),
// and the registrar retries it after its backoff until its attempts are
// used up. Task leases are kept alive by the Client's heartbeats while the
// handler runs, within the renewal limits of task leases: a handler that
// runs past them, about 11/3 × the lease ttl by default (see
// WorkerLeaseTTL), sees its ctx cancelled (ErrRenewalLimitExceeded or
// ErrLifetimeExceeded).
//
// A finished task's Complete or Fail goes out in the background: its
// handler slot is free for the next task at once, as in River's
// completer, and at most Concurrency of them are in flight (so a Worker
// holds at most twice Concurrency task leases). Run's drain waits for
// them.
//
// Delivery is at least once: a task whose lease is lost is claimed again
// by someone else; its Complete from the old lease is refused.
type Worker struct {
	c       *Client
	queue   string
	handler Handler

	namespace    string
	concurrency  int
	leaseTTL     time.Duration
	wait         time.Duration
	drainTimeout time.Duration
	retryAfter   time.Duration
	onFinish     func(t *Task, final *tenurev1.Task, err error)
	// finishing bounds the completions in flight (Concurrency).
	finishing chan struct{}

	mu       sync.Mutex
	running  bool
	draining bool               // the drain timeout passed
	inflight map[*Task]struct{} // tasks whose handler runs
}

// A WorkerOption configures a Worker.
type WorkerOption func(*Worker)

// WorkerConcurrency sets how many tasks run at once (default 1).
func WorkerConcurrency(n int) WorkerOption { return func(w *Worker) { w.concurrency = n } }

// WorkerLeaseTTL sets the ttl of task leases (default: the namespace's
// default ttl, 60 s unless its policy sets another).
//
// The ttl bounds how long a handler can run. By default the registrar
// grants a task lease 10 renewals and a 2 h lifetime; the heartbeat renews
// it every ttl/3, never earlier, and the renewal after the 10th is refused
// about 11/3 × ttl after the claim, which cancels the handler's ctx
// (ErrRenewalLimitExceeded): after about 3 min 40 s with a 60 s ttl, 18 min
// 20 s with 300 s, the longest ttl the default policy allows. (A renewal
// resent after a failover may count twice, so plan for less.) A handler
// that needs longer needs the namespace policy's task_max_renewals and
// task_max_lifetime raised (0 is unlimited): `tenure policy set NAMESPACE
// --task-max-renewals 0 --task-max-lifetime 24h` (ClusterService.SetPolicy;
// this Client has no method for it), or a longer ttl within its max_ttl
// (`--max-ttl`). A longer ttl also makes a task whose worker died wait up to
// that ttl before it is claimed again, so raising the limits is the better
// way for long handlers. The policy's max_renewals and max_lifetime are for
// plain leases and do not apply to task leases. With the default limits a
// handler never runs past 2 h (ErrLifetimeExceeded), which bites first from
// a ttl of about 33 min.
func WorkerLeaseTTL(d time.Duration) WorkerOption { return func(w *Worker) { w.leaseTTL = d } }

// WorkerWait sets the long-poll wait of each claim (default 20 s). With 0
// (or less) a claim does not wait: the worker polls, and while the queue
// is empty it waits between claims, twice as long each time from 50 ms up
// to a second.
func WorkerWait(d time.Duration) WorkerOption { return func(w *Worker) { w.wait = max(d, 0) } }

// WorkerDrainTimeout sets how long Run waits for in-flight tasks after its
// ctx is cancelled (default 30 s). Tasks still running then are given
// back: their leases released, they return to the queue with their
// attempts not counted.
func WorkerDrainTimeout(d time.Duration) WorkerOption { return func(w *Worker) { w.drainTimeout = d } }

// WorkerRetryAfter sets the retry delay of a failed task (default 0: the
// registrar's backoff: attempt⁴ seconds, at most 1 h, with jitter;
// RetryNow: at once).
func WorkerRetryAfter(d time.Duration) WorkerOption { return func(w *Worker) { w.retryAfter = d } }

// WorkerNamespace sets the queue's namespace (default: the client's).
func WorkerNamespace(ns string) WorkerOption { return func(w *Worker) { w.namespace = ns } }

// WorkerOnFinish calls fn after each task was handled: final is the task as
// the registrar answered the Complete or Fail (nil if that call failed),
// err the handler's error (a *PanicError after a panic) or, when the
// handler succeeded, the Complete's error. fn runs on the task's goroutine.
func WorkerOnFinish(fn func(t *Task, final *tenurev1.Task, err error)) WorkerOption {
	return func(w *Worker) { w.onFinish = fn }
}

// NewWorker returns a Worker for queue. Start it with Run.
func NewWorker(c *Client, queue string, handler Handler, opts ...WorkerOption) *Worker {
	w := &Worker{
		c: c, queue: queue, handler: handler,
		namespace: c.cfg.namespace, concurrency: 1, wait: 20 * time.Second, drainTimeout: 30 * time.Second,
	}
	for _, o := range opts {
		if o != nil {
			o(w)
		}
	}
	w.concurrency = max(w.concurrency, 1)
	return w
}

// finishTimeout bounds a Complete or Fail after the handler returned.
const finishTimeout = 30 * time.Second

// Run claims and handles tasks until ctx is cancelled, then stops claiming
// and waits up to the drain timeout for the tasks in flight to be handled
// and completed or failed. It returns nil after a full drain. When the
// drain timeout passes, the remaining handlers' contexts are cancelled
// (cause ErrDrainTimeout), their leases are released so that the tasks
// return to the queue at once, and Run returns ErrDrainTimeout without
// waiting for those handlers. Run also stops, after draining, when claiming
// fails for good (an invalid queue name or ttl, no permission, a closed
// client), and returns that error; other claim errors are retried with
// backoff.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("tenure: Worker.Run is already running")
	}
	w.running, w.draining = true, false
	w.inflight = make(map[*Task]struct{})
	w.finishing = make(chan struct{}, w.concurrency)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()

	drained := make(chan struct{}) // closed when the drain timeout passes
	var wg sync.WaitGroup
	slots := make(chan struct{}, w.concurrency)
	claimErr := w.claimLoop(ctx, slots, func(t *Task) {
		w.mu.Lock()
		w.inflight[t] = struct{}{}
		w.mu.Unlock()
		wg.Go(func() {
			var once sync.Once
			free := func() { once.Do(func() { <-slots }) }
			defer free()
			w.handle(ctx, t, drained, free)
		})
	})

	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	timer := w.c.clock.NewTimer(w.drainTimeout)
	defer timer.Stop()
	select {
	case <-all:
		return claimErr
	case <-timer.C():
	}
	// draining is set, and the tasks in flight taken, before the handlers'
	// contexts are cancelled: a handler that returns because of the drain
	// must find draining set, or it would fail its task (using up its
	// attempt, dead on its last one) and leave the list here before Run
	// releases its lease.
	w.mu.Lock()
	w.draining = true
	left := make([]*Task, 0, len(w.inflight))
	for t := range w.inflight {
		left = append(left, t)
	}
	w.mu.Unlock()
	close(drained)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var kept []error
	for _, t := range left {
		switch err := t.Lease.Release(rctx, ReleaseAborted); {
		case err != nil:
			kept = append(kept, fmt.Errorf("task %s kept its lease until it expires (its attempt counts): %w", t.ID, err))
		case !errors.Is(t.Lease.Err(), ErrReleased):
			// Gone before the release: expired (the attempt counted) or
			// revoked.
			kept = append(kept, fmt.Errorf("task %s was not given back: %w", t.ID, t.Lease.Err()))
		}
	}
	drainErr := fmt.Errorf("%w (%d tasks returned to the queue)", ErrDrainTimeout, len(left)-len(kept))
	return errors.Join(append([]error{drainErr, claimErr}, kept...)...)
}

// claimLoop claims into free slots until ctx ends or claiming fails for
// good; start runs a claimed task, whose slot is already taken.
func (w *Worker) claimLoop(ctx context.Context, slots chan struct{}, start func(*Task)) error {
	backoff, poll := 50*time.Millisecond, time.Duration(0)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	fill:
		for free < min(w.concurrency, maxClaim) { // a Claim takes at most maxClaim tasks
			select {
			case slots <- struct{}{}:
				free++
			default:
				break fill
			}
		}
		tasks, err := w.c.Claim(ctx, w.queue, ClaimOptions{Max: free, LeaseTTL: w.leaseTTL, Wait: w.wait}, Namespace(w.namespace))
		for _, t := range tasks {
			start(t)
		}
		for range free - len(tasks) {
			<-slots
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && (len(tasks) > 0 || w.wait > 0):
			backoff, poll = 50*time.Millisecond, 0
			continue
		case err == nil: // an empty answer to a claim that did not wait
			poll = min(max(2*poll, 50*time.Millisecond), time.Second)
			if sleep(ctx, w.c.clock, poll) != nil {
				return nil
			}
			continue
		case permanentClaimError(err):
			w.c.cfg.logger.Error("tenure: worker stops claiming", "queue", w.queue, "err", err)
			return err
		}
		w.c.cfg.logger.Warn("tenure: worker claim failed; retrying", "queue", w.queue, "err", err, "in", backoff)
		if sleep(ctx, w.c.clock, backoff) != nil {
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// maxClaim is the most tasks one Claim may ask for (the registrar's
// limit).
const maxClaim = 1000

func permanentClaimError(err error) bool {
	if errors.Is(err, ErrClientClosed) {
		return true
	}
	switch ReasonOf(err) {
	case ReasonInvalidArgument, ReasonTTLOutOfRange, ReasonUnauthenticated, ReasonPermissionDenied:
		return true
	}
	return false
}

// handle runs the handler on t and completes or fails it, calling free
// once the handler is done and a completion may start (Worker.finishing).
func (w *Worker) handle(ctx context.Context, t *Task, drained <-chan struct{}, free func()) {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	finished := make(chan struct{})
	go func() {
		select {
		case <-t.Lease.Done():
			cancel(t.Lease.Err())
		case <-drained:
			cancel(ErrDrainTimeout)
		case <-finished:
		}
	}()
	result, herr := w.call(hctx, t)
	close(finished)
	w.mu.Lock()
	draining := w.draining
	delete(w.inflight, t)
	w.mu.Unlock()
	if draining {
		return // Run releases the lease: the task goes back to the queue
	}
	w.finishing <- struct{}{}
	defer func() { <-w.finishing }()
	free() // the next task runs while this one completes

	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer fcancel()
	var (
		final *tenurev1.Task
		err   error
	)
	if herr == nil {
		final, err = t.Complete(fctx, result)
		if ReasonOf(err) == ReasonInvalidArgument {
			// The result itself was refused (too large): fail the attempt with why.
			herr = fmt.Errorf("completing the task failed: %w", err)
		}
	}
	if herr != nil {
		var ferr error
		final, ferr = t.Fail(fctx, herr.Error(), w.retryAfter)
		err = herr
		if ferr != nil {
			final = nil
			w.c.cfg.logger.Warn("tenure: worker could not fail task", "queue", w.queue, "task", t.ID, "err", ferr)
		}
	} else if err != nil {
		w.c.cfg.logger.Warn("tenure: worker could not complete task", "queue", w.queue, "task", t.ID, "err", err)
	}
	if w.onFinish != nil {
		w.onFinish(t, final, err)
	}
}

// call runs the handler, turning a panic into a *PanicError.
func (w *Worker) call(ctx context.Context, t *Task) (result []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			result, err = nil, &PanicError{Value: r, Stack: panicStack()}
		}
	}()
	return w.handler(ctx, t)
}

// maxStackFrames bounds the stack recorded for a panic.
const maxStackFrames = 32

// panicStack returns the stack of a panicking goroutine, called from the
// deferred recover in Worker.call: the frames from the one that panicked
// down to the handler, without the runtime's panic machinery and the
// Worker's own frames.
func panicStack() string {
	pcs := make([]uintptr, 128)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var b strings.Builder
	inPanic, started, count := false, false, 0
	for {
		f, more := frames.Next()
		switch {
		case !inPanic:
			inPanic = f.Function == "runtime.gopanic"
		case strings.HasSuffix(f.Function, ".(*Worker).call"):
			more = false
		case !started && strings.HasPrefix(f.Function, "runtime."):
			// panicmem, sigpanic, goPanicIndex, …
		default:
			started = true
			if count == maxStackFrames {
				b.WriteString("…\n")
				more = false
				break
			}
			fmt.Fprintf(&b, "%s\n\t%s:%d\n", f.Function, f.File, f.Line)
			count++
		}
		if !more {
			break
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
