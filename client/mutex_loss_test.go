package tenure

import (
	"context"
	"errors"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// A Mutex whose lease ends before Unlock is free again for this process: a
// later TryLock or Lock takes it with a new lease, and the Unlock of the
// lock that was lost reports the loss without touching the new holder's
// lease. Real server, real time.
func TestMutexLostLease(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithHolder("mutex-loss"))

	cases := []struct {
		name string
		// end ends the Mutex's lease behind its back.
		end   func(context.Context, *Lease) error
		cause error
	}{
		{
			name: "revoked",
			end: func(ctx context.Context, l *Lease) error {
				_, err := c.Revoke(ctx, l.ID(), "test")
				return err
			},
			cause: ErrLeaseTerminal,
		},
		{
			name:  "released elsewhere",
			end:   func(ctx context.Context, l *Lease) error { return l.Release(ctx, ReleaseVoluntary) },
			cause: ErrReleased,
		},
	}
	for _, tc := range cases {
		t.Run("TryLock after "+tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxTimeout(t, 30*time.Second)
			m := NewMutex(c, "mutex-loss/"+tc.name, TTL(3*time.Second))
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			lost := m.Lease()
			if err := tc.end(ctx, lost); err != nil {
				t.Fatal(err)
			}
			waitLeaseEnded(t, lost, 10*time.Second)
			if !errors.Is(lost.Err(), tc.cause) {
				t.Fatalf("lease Err = %v, want %v", lost.Err(), tc.cause)
			}

			next := tryLockElsewhere(t, m)
			assertNewHolder(t, lost, next)

			// The first goroutine's late Unlock: the loss, nothing released.
			err := m.Unlock(ctx)
			if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, tc.cause) {
				t.Fatalf("Unlock of the lost lock = %v, want ErrLeaseLost and %v", err, tc.cause)
			}
			assertStillHeld(ctx, t, c, m, next)
			if ok, err := m.TryLock(ctx); ok || err != nil {
				t.Fatalf("TryLock while the new holder holds = %v, %v, want false, nil", ok, err)
			}

			// The new holder's Unlock releases its own lease.
			if err := m.Unlock(ctx); err != nil {
				t.Fatalf("Unlock of the new holder: %v", err)
			}
			if pb, err := c.Get(ctx, next.ID()); err != nil || pb.GetState() != tenurev1.State_STATE_RELEASED {
				t.Fatalf("new holder's lease after its Unlock: %v, %v", pb.GetState(), err)
			}
			if l := m.Lease(); l != nil {
				t.Errorf("Lease() after both Unlocks = %s, want nil", l.ID())
			}
			if err := m.Unlock(ctx); !errors.Is(err, ErrNotLocked) || errors.Is(err, ErrLeaseLost) {
				t.Errorf("Unlock of an unlocked Mutex = %v, want the not-locked error", err)
			}
		})
	}

	t.Run("waiting Lock after revoked", func(t *testing.T) {
		t.Parallel()
		ctx := ctxTimeout(t, 30*time.Second)
		m := NewMutex(c, "mutex-loss/waiting", TTL(3*time.Second))
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		lost := m.Lease()
		locked := make(chan error, 1)
		go func() { locked <- m.Lock(ctx) }()

		if _, err := c.Revoke(ctx, lost.ID(), "test"); err != nil {
			t.Fatal(err)
		}
		waitLeaseEnded(t, lost, 10*time.Second)
		select {
		case err := <-locked:
			if err != nil {
				t.Fatalf("waiting Lock: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiting Lock still blocked 10s after the holder's lease was revoked")
		}
		next := m.Lease()
		assertNewHolder(t, lost, next)

		err := m.Unlock(ctx)
		if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrLeaseTerminal) {
			t.Fatalf("Unlock of the lost lock = %v, want ErrLeaseLost caused by LEASE_TERMINAL", err)
		}
		assertStillHeld(ctx, t, c, m, next)
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of the new holder: %v", err)
		}
	})
}

// waitLeaseEnded waits until l's Done is closed.
func waitLeaseEnded(t *testing.T, l *Lease, d time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(d):
		t.Fatalf("lease %s still not ended %v after its end", l.ID(), d)
	}
}

// tryLockElsewhere calls m.TryLock on another goroutine, which must take the
// Mutex, and returns the lease it got.
func tryLockElsewhere(t *testing.T, m *Mutex) *Lease {
	t.Helper()
	type result struct {
		ok    bool
		err   error
		lease *Lease
	}
	got := make(chan result, 1)
	go func() {
		ok, err := m.TryLock(t.Context())
		got <- result{ok, err, m.Lease()}
	}()
	select {
	case r := <-got:
		if !r.ok || r.err != nil {
			t.Fatalf("TryLock after the lease ended = %v, %v, want true", r.ok, r.err)
		}
		return r.lease
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock did not return in 10s")
		return nil
	}
}

// assertNewHolder checks that next is a new, trusted lease, later than lost.
func assertNewHolder(t *testing.T, lost, next *Lease) {
	t.Helper()
	if next == nil || next == lost || next.ID() == lost.ID() {
		t.Fatalf("the new holder's lease is %v, want a new lease", next)
	}
	if next.Err() != nil || next.Fence() <= lost.Fence() {
		t.Fatalf("new lease: Err %v, fence %d (lost fence %d)", next.Err(), next.Fence(), lost.Fence())
	}
}

// assertStillHeld checks that next is still m's live lease, here and at the
// registrar.
func assertStillHeld(ctx context.Context, t *testing.T, c *Client, m *Mutex, next *Lease) {
	t.Helper()
	if err := next.Err(); err != nil {
		t.Fatalf("the new holder's lease ended: %v", err)
	}
	if pb, err := c.Get(ctx, next.ID()); err != nil || pb.GetState() != tenurev1.State_STATE_ACTIVE {
		t.Fatalf("the new holder's lease at the registrar: %v, %v, want ACTIVE", pb.GetState(), err)
	}
	if l := m.Lease(); l != next {
		t.Fatalf("Lease() = %v, want the new holder's %s", l, next.ID())
	}
}
