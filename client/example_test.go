package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	tenure "github.com/tenurehq/tenure/client"
)

// process stands for the caller's work; it stops when ctx ends.
func process(ctx context.Context, fence uint64) error {
	_ = fence // pass the fence with every write to storage that checks it
	<-ctx.Done()
	return ctx.Err()
}

// Acquire a lease, work only while it is held, and release it.
func ExampleClient_Acquire() {
	c, err := tenure.New([]string{"127.0.0.1:7070", "127.0.0.2:7070", "127.0.0.3:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	lease, err := c.Acquire(ctx, "orders/42", tenure.TTL(15*time.Second))
	var held *tenure.HeldError
	switch {
	case errors.As(err, &held):
		fmt.Printf("held by %s (fence %d) for another %v\n", held.Holder, held.Fence, held.Remaining)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lease.Release(ctx, tenure.ReleaseCompleted)

	// The heartbeats run in the background; stop the work when the lease is
	// lost. process checks lease.Valid() right before each write (a pause
	// past the trust window may run before Done's timer) and passes the
	// fence to storage that checks it.
	work, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-lease.Done()
		cancel()
	}()
	if err := process(work, lease.Fence()); err != nil && errors.Is(lease.Err(), tenure.ErrLeaseLost) {
		log.Printf("stopped: %v", lease.Err())
	}
}

// A distributed lock: Lock waits in the registrar's FIFO queue.
func ExampleMutex() {
	c, err := tenure.New([]string{"127.0.0.1:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	m := tenure.NewMutex(c, "locks/nightly-report", tenure.TTL(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	defer m.Unlock(context.Background())
	lease := m.Lease() // the holder's lease, kept from right after Lock

	for range 3 { // the critical section, step by step
		if !lease.Valid() { // lost, or a pause outlived the trust window
			log.Printf("lock lost: %v", lease.Err())
			return
		}
		// one step, writing with lease.Fence() to storage that checks it
	}
}

// A readers-writer lock: readers hold shared leases, each with its own
// fence for the storage they read.
func ExampleRWMutex() {
	c, err := tenure.New([]string{"127.0.0.1:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	m := tenure.NewRWMutex(c, "config/routing", tenure.TTL(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := m.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer m.RUnlock(context.Background(), l)
	log.Printf("reading under fence %d", l.Fence())
}

// Leader election: one campaigner leads at a time; everyone can observe.
func ExampleElection() {
	c, err := tenure.New([]string{"127.0.0.1:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	e := tenure.NewElection(c, "elections/scheduler", tenure.TTL(15*time.Second))
	go func() {
		for value := range e.Observe(ctx) {
			log.Printf("leader is now %s", value)
		}
	}()
	if err := e.Campaign(ctx, "scheduler-1.internal:9000"); err != nil {
		log.Fatal(err)
	}
	defer e.Resign(ctx)

	leader, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leading as %s with fence %d\n", leader.Value, leader.Fence)
	<-e.Lease().Done() // lead until the lease is lost or resigned
}

// A restarting agent checks which of its leases survived, then resumes them.
func ExampleClient_VerifyAll() {
	c, err := tenure.New([]string{"127.0.0.1:7070"}, tenure.WithHolder("agent-7"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	remembered := []string{"01JLEASE1", "01JLEASE2"} // from the agent's journal
	results, err := c.VerifyAll(ctx, remembered, tenure.RestartGrace(15*time.Second, ""))
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		if !r.Active() {
			fmt.Printf("%s is gone: redo its work from scratch\n", r.LeaseID)
			continue
		}
		lease, err := c.Resume(ctx, r.LeaseID)
		if err != nil {
			log.Printf("%s: %v", r.LeaseID, err)
			continue
		}
		fmt.Printf("resumed %s on %s (fence %d)\n", lease.ID(), lease.Resource(), lease.Fence())
	}
}

// Guarded state: only the holder of the resource's exclusive lease writes,
// and only on top of the epoch it read.
func ExampleClient_WriteState() {
	c, err := tenure.New([]string{"127.0.0.1:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	lease, err := c.Acquire(ctx, "workflows/ingest-17")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx, tenure.ReleaseCompleted)

	st, err := c.ReadState(ctx, "workflows/ingest-17")
	if err != nil {
		log.Fatal(err)
	}
	epoch, err := c.WriteState(ctx, lease, st.Epoch, []byte(`{"step":"download","done":true}`))
	switch {
	case errors.Is(err, tenure.ErrStaleEpoch):
		log.Print("someone advanced the workflow since we read it")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("now at epoch", epoch)
	}
}

// A work queue: enqueue idempotently, and run a worker whose handler's
// result completes the task (an error fails it, retried with backoff up to
// its max attempts, then dead).
func ExampleWorker() {
	c, err := tenure.New([]string{"127.0.0.1:7070"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if _, err := c.Enqueue(ctx, "emails", []tenure.NewTask{
		{ID: "welcome-42", Payload: []byte(`{"to":"a@example.com"}`)}, // the id makes a retried enqueue harmless
	}); err != nil {
		log.Fatal(err)
	}
	w := tenure.NewWorker(c, "emails", func(ctx context.Context, t *tenure.Task) ([]byte, error) {
		// ctx ends if the task's lease is lost: stop then. Pass
		// t.Lease.Fence() to storage that checks fences.
		return []byte("sent"), nil
	}, tenure.WorkerConcurrency(8), tenure.WorkerLeaseTTL(30*time.Second))
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Fatal(err)
	}
}

// Namespaces split across two clusters: each namespace's Client talks to
// the cluster its route names.
func ExampleRouter() {
	routes, err := tenure.ParseRoutes("orders=10.0.1.1:7070,10.0.1.2:7070;team-*=10.0.2.1:7070;*=10.0.3.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	r, err := tenure.NewRouter(routes, tenure.WithHolder("worker-7"))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close() // closes every namespace's Client, releasing its leases

	orders, err := r.Client("orders") // on 10.0.1.x, namespace "orders"
	if err != nil {
		log.Fatal(err)
	}
	lease, err := orders.Acquire(context.Background(), "invoice/42", tenure.TTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lease.Namespace(), lease.Fence())
}
