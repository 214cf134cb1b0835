package tenure

import (
	"errors"
	"runtime"
	"testing"
	"time"
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
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before the client:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
