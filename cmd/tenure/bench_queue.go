package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/opstream"
)

// queueTransport carries the queue workload's operations.
type queueTransport interface {
	enqueue(ctx context.Context, req *tenurev1.EnqueueRequest) error
	claim(ctx context.Context, req *tenurev1.ClaimRequest) ([]*tenurev1.Task, error)
	complete(ctx context.Context, req *tenurev1.CompleteRequest) error
}

// unaryQueueOps makes one unary call per operation.
type unaryQueueOps struct{ r *remote }

func (u unaryQueueOps) enqueue(ctx context.Context, req *tenurev1.EnqueueRequest) error {
	return firstAnswer(u.r.queues, func(c tenurev1connect.QueueServiceClient) error {
		_, err := c.Enqueue(ctx, connect.NewRequest(req))
		return err
	})
}

func (u unaryQueueOps) claim(ctx context.Context, req *tenurev1.ClaimRequest) ([]*tenurev1.Task, error) {
	var tasks []*tenurev1.Task
	err := firstAnswer(u.r.queues, func(c tenurev1connect.QueueServiceClient) error {
		res, err := c.Claim(ctx, connect.NewRequest(req))
		if err == nil {
			tasks = res.Msg.GetTasks()
		}
		return err
	})
	return tasks, err
}

func (u unaryQueueOps) complete(ctx context.Context, req *tenurev1.CompleteRequest) error {
	return firstAnswer(u.r.queues, func(c tenurev1connect.QueueServiceClient) error {
		_, err := c.Complete(ctx, connect.NewRequest(req))
		return err
	})
}

// queuePipe sends the queue workload's operations over QueueService.Pipeline.
type queuePipe struct{ p *opstream.QueueSet }

func (q queuePipe) enqueue(ctx context.Context, req *tenurev1.EnqueueRequest) error {
	_, err := q.p.Do(ctx, &tenurev1.QueueOp{Op: &tenurev1.QueueOp_Enqueue{Enqueue: req}})
	return err
}

func (q queuePipe) claim(ctx context.Context, req *tenurev1.ClaimRequest) ([]*tenurev1.Task, error) {
	r, err := q.p.Do(ctx, &tenurev1.QueueOp{Op: &tenurev1.QueueOp_Claim{Claim: req}})
	if err != nil {
		return nil, err
	}
	return r.GetClaim().GetTasks(), nil
}

func (q queuePipe) complete(ctx context.Context, req *tenurev1.CompleteRequest) error {
	_, err := q.p.Do(ctx, &tenurev1.QueueOp{Op: &tenurev1.QueueOp_Complete{Complete: req}})
	return err
}

// enqueueBatch is how many tasks the queue workload's producer enqueues
// per call.
const enqueueBatch = 500

// benchQueue runs the queue workload: a producer keeps the run's queue
// topped up (Enqueue calls of enqueueBatch tasks), and --concurrency
// workers each claim up to --batch tasks and complete them, round after
// round. Ops are completed tasks; latency is per round (one Claim and the
// completion of what it claimed). At the end the tasks left are claimed
// and completed (not counted), so the run leaves nothing queued.
func benchQueue(ctx context.Context, c *cliCommand, cfg benchConfig) (*benchResult, error) {
	r, err := c.remote()
	if err != nil {
		return nil, err
	}
	var q queueTransport = unaryQueueOps{r}
	if !cfg.unary {
		p := opstream.OpenQueue(ctx, r.queues[0], cfg.streams)
		defer p.Close()
		q = queuePipe{p}
	}
	name := cfg.holder // bench-<run id>: one queue per run
	ttl := durationpb.New(cfg.ttl)

	// The producer keeps about backlog tasks queued: enough that no
	// worker waits for work, few enough to drain quickly at the end.
	backlog := int64(max(4*enqueueBatch, 4*cfg.concurrency*cfg.batch))
	var enqueued, completed atomic.Int64
	need := make(chan struct{}, 1)
	enqueue := func(ctx context.Context) error {
		tasks := make([]*tenurev1.NewTask, enqueueBatch)
		for i := range tasks {
			tasks[i] = &tenurev1.NewTask{Payload: []byte("bench")}
		}
		if err := q.enqueue(ctx, &tenurev1.EnqueueRequest{Namespace: c.namespace, Queue: name, Tasks: tasks}); err != nil {
			return err
		}
		enqueued.Add(enqueueBatch)
		return nil
	}
	for enqueued.Load() < backlog {
		if err := enqueue(ctx); err != nil {
			return nil, fmt.Errorf("%w (while filling the queue)", err)
		}
	}

	stats := &benchStats{reasons: make(map[string]int64)}
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	stopProgress := startProgress(c.stderr, func(elapsed time.Duration) string {
		n, e := stats.ops.Load(), stats.errs.Load()
		return fmt.Sprintf("queue %s: %d tasks, %.0f tasks/s, %d errors", fmtDuration(elapsed), n, float64(n)/elapsed.Seconds(), e)
	})
	start := time.Now()
	produced := make(chan error, 1)
	go func() {
		for {
			for enqueued.Load()-completed.Load() < backlog {
				if err := enqueue(runCtx); err != nil {
					if runCtx.Err() != nil {
						err = nil
					}
					produced <- err
					return
				}
			}
			select {
			case <-need:
			case <-runCtx.Done():
				produced <- nil
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range cfg.concurrency {
		wg.Go(func() {
			worker := cfg.holderOf(w)
			var lat []time.Duration
			reasons := make(map[string]int64)
			fail := func(err error) { stats.failed(ctx, runCtx, reasons, benchReason(err), err) }
			// Async completions: at most --batch in flight; each
			// reports its outcome to this worker's loop (fail and lat
			// are the worker's own).
			pending := make(chan struct{}, cfg.batch)
			outcomes := make(chan error, cfg.batch)
			inFlight := 0
			settle := func(err error) {
				inFlight--
				if err != nil {
					fail(err)
					return
				}
				completed.Add(1)
				if runCtx.Err() == nil {
					stats.ops.Add(1)
				}
			}
			for runCtx.Err() == nil {
				t0 := time.Now()
				tasks, err := q.claim(ctx, &tenurev1.ClaimRequest{Namespace: c.namespace, Queue: name, Worker: worker,
					Max: uint32(cfg.batch), LeaseTtl: ttl, Wait: durationpb.New(time.Second)})
				if err != nil {
					fail(err)
					continue
				}
				for _, t := range tasks {
					req := &tenurev1.CompleteRequest{Namespace: c.namespace, Queue: name, TaskId: t.TaskId, LeaseId: t.LeaseId}
					if cfg.complete == "sync" {
						inFlight++
						settle(q.complete(ctx, req))
						continue
					}
					for len(pending) == cap(pending) {
						settle(<-outcomes)
					}
					pending <- struct{}{}
					inFlight++
					go func() {
						err := q.complete(ctx, req)
						<-pending
						outcomes <- err
					}()
				}
				if len(tasks) > 0 {
					lat = append(lat, time.Since(t0))
				}
			drain:
				for {
					select {
					case err := <-outcomes:
						settle(err)
					default:
						break drain
					}
				}
				select {
				case need <- struct{}{}:
				default:
				}
			}
			for inFlight > 0 {
				settle(<-outcomes)
			}
			stats.record(lat, reasons)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	if err := <-produced; err != nil {
		return nil, fmt.Errorf("%w (while enqueueing)", err)
	}
	if err := drainQueue(ctx, q, c.namespace, name, cfg); err != nil {
		fmt.Fprintf(c.stderr, "warning: tasks may be left in queue %s: %v\n", name, err)
	}
	n := stats.ops.Load()
	return &benchResult{
		Workload: cfg.workload, Transport: cfg.transport(), Concurrency: cfg.concurrency,
		Seconds: elapsed.Seconds(), Ops: n, OpsPerSec: float64(n) / elapsed.Seconds(),
		Errors: stats.reasons, Latency: percentiles(stats.lat), Queue: name, Complete: cfg.complete,
	}, nil
}

// drainQueue claims and completes what the run left queued.
func drainQueue(ctx context.Context, q queueTransport, namespace, name string, cfg benchConfig) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		tasks, err := q.claim(ctx, &tenurev1.ClaimRequest{Namespace: namespace, Queue: name, Worker: cfg.holderOf(0), Max: 1000})
		if err != nil || len(tasks) == 0 {
			return err
		}
		var wg sync.WaitGroup
		errs := make([]error, len(tasks))
		for i, t := range tasks {
			wg.Go(func() {
				errs[i] = q.complete(ctx, &tenurev1.CompleteRequest{Namespace: namespace, Queue: name, TaskId: t.TaskId, LeaseId: t.LeaseId})
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
}
