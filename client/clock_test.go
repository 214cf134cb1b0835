package tenure

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock is a manual Clock: time moves only in Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	clk    *fakeClock
	ch     chan time.Time
	when   time.Time
	active bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clk: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.active && !c.now.Before(t.when) {
			t.active = false
			select {
			case t.ch <- c.now:
			default:
			}
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := t.active
	t.active = false
	select {
	case <-t.ch: // no stale value after Stop, as with time.Timer since Go 1.23
	default:
	}
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := t.active
	select {
	case <-t.ch:
	default:
	}
	t.when, t.active = t.clk.now.Add(d), true
	if d <= 0 {
		t.active = false
		t.ch <- t.clk.now
	}
	return was
}

// The client measures every deadline on its Clock: with a fake clock, the
// trust window follows the fake time alone (the bubble's own clock stands
// still throughout this test).
func TestTrustWindowOnInjectedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		fc.members["a:1"].set(func(m *fakeMember) { m.ka = kaSilent })
		clk := newFakeClock()
		c := fc.client([]string{"a:1"}, WithClock(clk))
		t0 := clk.Now()
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(2500 * time.Millisecond); !l.TrustedUntil().Equal(want) {
			t.Fatalf("TrustedUntil = %v, want %v", l.TrustedUntil(), want)
		}
		clk.Advance(time.Second)
		synctest.Wait()
		if n := len(fc.members["a:1"].keepalives()); n != 1 {
			t.Fatalf("%d renewals after ttl/3 of fake time, want 1", n)
		}
		clk.Advance(1500*time.Millisecond - time.Millisecond)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("Done before the trust window ended: %v", l.Err())
		}
		clk.Advance(time.Millisecond)
		synctest.Wait()
		if !isDone(l) || !errors.Is(l.Err(), ErrTrustWindowPassed) {
			t.Fatalf("Done=%v Err=%v, want lost at the end of the trust window", isDone(l), l.Err())
		}
	})
}
