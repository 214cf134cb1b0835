package tenure

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestIntegrationCloseEndsCallsAndConnections: Close ends a call that is
// waiting (a queued Acquire) with ErrClientClosed, every call after it
// fails so without reaching the server, and the client's goroutines —
// its streams' and connections' — are gone once it returns.
func TestIntegrationCloseEndsCallsAndConnections(t *testing.T) {
	s := startRealServer(t)
	other := s.client(t)
	held, err := other.Acquire(ctxTimeout(t, 10*time.Second), "closing/held", TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	c, err := New([]string{s.api})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := c.Acquire(ctx, "closing/mine", TTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "closing", []NewTask{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "closing/held", TTL(time.Minute), Wait(30*time.Second))
		waiting <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrClientClosed) {
			t.Fatalf("the waiting Acquire ended with %v, want ErrClientClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Acquire goes on after Close")
	}
	for name, call := range map[string]func() error{
		"Get":     func() error { _, err := c.Get(ctx, held.ID()); return err },
		"Enqueue": func() error { _, err := c.Enqueue(ctx, "closing", []NewTask{{Payload: []byte("y")}}); return err },
		"Status":  func() error { _, err := c.Status(ctx); return err },
		"Acquire": func() error { _, err := c.Acquire(ctx, "closing/late"); return err },
		"Watch":   func() error { return c.Watch(ctx, "", 0, nil) },
	} {
		if err := call(); !errors.Is(err, ErrClientClosed) {
			t.Errorf("%s after Close: %v, want ErrClientClosed", name, err)
		}
	}
	deadline := time.After(10 * time.Second)
	for runtime.NumGoroutine() > before {
		select {
		case <-deadline:
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before the client:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		case <-time.After(10 * time.Millisecond): // poll the condition
		}
	}
}

// TestIntegrationTransfer: a lease handed over ends for its old holder
// with ErrTransferred, and the new holder's client takes the new lease,
// with a higher fence, over with Resume.
func TestIntegrationTransfer(t *testing.T) {
	s := startRealServer(t)
	a, b := s.client(t, WithHolder("giver")), s.client(t, WithHolder("taker"))
	ctx := ctxTimeout(t, 20*time.Second)
	l, err := a.Acquire(ctx, "handover/1", TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next, err := l.Transfer(ctx, "taker", 0)
	if err != nil {
		t.Fatal(err)
	}
	if next.GetHolder() != "taker" || next.GetFence() <= l.Fence() || next.GetLeaseId() == l.ID() {
		t.Fatalf("new lease %v after %s fence %d", next, l.ID(), l.Fence())
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the old lease is not done")
	}
	if !errors.Is(l.Err(), ErrTransferred) {
		t.Fatalf("old lease Err = %v", l.Err())
	}
	taken, err := b.Resume(ctx, next.GetLeaseId())
	if err != nil || taken.Fence() != next.GetFence() {
		t.Fatalf("Resume by the new holder: %v %v", taken, err)
	}
	if _, err := l.Transfer(ctx, "someone", 0); !errors.Is(err, ErrTransferred) {
		t.Fatalf("second transfer: %v", err)
	}
}

// TestIntegrationErrorsReachConnectErrorBothWays: a refusal reaches its
// *connect.Error (and connect.CodeOf finds its code) over the Pipeline
// stream as over a unary call.
func TestIntegrationErrorsReachConnectErrorBothWays(t *testing.T) {
	s := startRealServer(t)
	ctx := ctxTimeout(t, 20*time.Second)
	if _, err := s.client(t).Acquire(ctx, "codes/1", TTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Client{"pipeline": s.client(t), "unary": s.client(t, WithoutPipeline())} {
		_, err := c.Acquire(ctx, "codes/1")
		var ce *connect.Error
		var held *HeldError
		if !errors.Is(err, ErrLeaseHeld) || !errors.As(err, &held) || !errors.As(err, &ce) ||
			connect.CodeOf(err) != connect.CodeFailedPrecondition || ce.Message() != held.Error() {
			t.Errorf("%s: %v (connect error %v, code %v)", name, err, ce, connect.CodeOf(err))
		}
	}
}

// TestIntegrationCloseWithdrawsQueuedAcquire: Close of a client that holds
// a resource and also waits for it (two Mutexes on one key, say) leaves the
// resource free: it withdraws the queued Acquire before releasing the
// lease, rather than hand the lease to its own withdrawn Acquire, which
// would hold the resource for nobody until its ttl.
func TestIntegrationCloseWithdrawsQueuedAcquire(t *testing.T) {
	s := startRealServer(t)
	c, err := New([]string{s.api}, WithHolder("closing-app"))
	if err != nil {
		t.Fatal(err)
	}
	other := s.client(t, WithHolder("other-app"))
	ctx := ctxTimeout(t, 30*time.Second)
	const resource = "closing/queued"
	if _, err := c.Acquire(ctx, resource, TTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, resource, TTL(time.Minute), Wait(30*time.Second))
		waiting <- err
	}()
	// Wait until the Acquire is queued at the registrar.
	deadline := time.After(10 * time.Second)
	for {
		_, err := other.Acquire(ctx, resource)
		var held *HeldError
		if !errors.As(err, &held) {
			t.Fatalf("Acquire of a held resource: %v, want LEASE_HELD", err)
		}
		if held.Waiters == 1 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the waiting Acquire never queued: %v", held)
		case <-time.After(10 * time.Millisecond): // poll the condition
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waiting; !errors.Is(err, ErrClientClosed) {
		t.Fatalf("the waiting Acquire ended with %v, want ErrClientClosed", err)
	}
	l, err := other.Acquire(ctx, resource)
	if err != nil {
		t.Fatalf("Acquire after the holder's Close: %v, want the resource free", err)
	}
	l.Release(ctx, ReleaseCompleted)
}
