package tenure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// lockWaitChunk is the longest single wait Lock asks the registrar for; it
// queues again when a wait runs out, until its context ends.
const lockWaitChunk = 30 * time.Second

// Mutex is a distributed mutual-exclusion lock on one resource, backed by an
// exclusive lease kept alive by the Client. It also excludes goroutines of
// this process sharing the Mutex (like sync.Mutex), so one Mutex may be used
// by many goroutines.
//
// Holding the Mutex is holding its lease: take Lease() right after Lock
// returns, watch its Done while working and stop when it closes, check its
// Valid right before each action (a pause past the trust window may run
// before Done's timer), and pass its Fence to storage that checks fences.
//
// When the lease ends before Unlock (revoked, expired, trust window passed,
// released behind the Mutex's back, the Client closed), the Mutex is free
// again for this process: a Lock or TryLock of another goroutine may take it
// with a new lease. The goroutine that lost it learns of it from its lease's
// Done and Err, and its Unlock releases nothing and returns the loss. Like
// sync.Mutex, Unlock is not tied to a goroutine: while a lost lock has not
// been unlocked, the next Unlock is taken as its Unlock, even when the
// caller is a later holder (whose lock then stays held until the next
// Unlock) — so never Unlock a lock this goroutine did not take. Lease
// likewise returns the lease of whichever goroutine holds the Mutex now,
// which is why a holder keeps its own.
type Mutex struct {
	c        *Client
	resource string
	opts     []AcquireOption
	hold     *localHold
}

// NewMutex returns a Mutex on resource. opts apply to each acquisition (TTL,
// Namespace, RequestCertificate); Mode is always Exclusive and Wait is set
// by Lock.
func NewMutex(c *Client, resource string, opts ...AcquireOption) *Mutex {
	return &Mutex{c: c, resource: resource, opts: opts, hold: newLocalHold()}
}

// Lock blocks until the Mutex is held or ctx ends. It waits in the
// resource's FIFO queue at the registrar (queueing again each time a wait
// runs out) and backs off while the queue is full. It first waits while
// another goroutine of this process holds the Mutex (until its Unlock or
// the loss of its lease).
//
// If ctx ends just as the registrar grants the lease, the client releases
// that lease in the background (and withdraws a wait still queued), so
// the resource is not blocked for its ttl.
func (m *Mutex) Lock(ctx context.Context) error {
	if err := m.hold.take(ctx); err != nil {
		return err
	}
	l, err := m.acquire(ctx, true)
	if err != nil {
		m.hold.giveBack()
		return err
	}
	m.hold.set(l)
	return nil
}

// TryLock takes the Mutex if it is free now: (false, nil) when it is held,
// by this process (a lock whose lease was lost does not count) or another.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	if !m.hold.tryTake() {
		return false, nil
	}
	l, err := m.acquire(ctx, false)
	if err != nil {
		m.hold.giveBack()
		if errors.Is(err, ErrLeaseHeld) {
			return false, nil
		}
		return false, err
	}
	m.hold.set(l)
	return true, nil
}

// Unlock releases the Mutex. It returns an error if the Mutex is not held
// or the release could not be confirmed; either way the Mutex is free for
// this process afterwards. When the lock's lease ended before Unlock, it
// releases nothing and returns an error matching ErrLeaseLost that wraps
// the lease's Err (a *LostError whose Cause says why, or ErrReleased); see
// Mutex for which lock an Unlock ends.
func (m *Mutex) Unlock(ctx context.Context) error {
	l, lost := m.hold.end()
	switch {
	case lost != nil:
		return lockLost("unlock", m.resource, lost)
	case l == nil:
		return ErrNotLocked
	}
	defer m.hold.giveBack()
	return releaseLock(ctx, "unlock", m.resource, l)
}

// releaseLock releases a lock's lease, and reports as lost (ErrLeaseLost)
// one the registrar says had expired or been revoked before the release:
// the lock ended before its unlock, though the client had not yet seen
// it.
func releaseLock(ctx context.Context, op, resource string, l *Lease) error {
	if err := l.Release(ctx, ReleaseVoluntary); err != nil {
		return err
	}
	if errors.Is(l.Err(), ErrLeaseLost) {
		return lockLost(op, resource, l)
	}
	return nil
}

// Lease returns the lease of the goroutine that holds the Mutex. While no
// goroutine holds it, Lease returns the last lease that ended while held
// and whose Unlock has not come yet (Done closed, Err says why), else nil.
// A holder should keep the lease it got right after Lock rather than ask
// again later, when the Mutex may have passed to another goroutine.
func (m *Mutex) Lease() *Lease { return m.hold.current() }

func (m *Mutex) acquire(ctx context.Context, wait bool) (*Lease, error) {
	return acquireWaiting(ctx, m.c, m.resource, m.opts, Exclusive, wait)
}

// lockLost is the error of an Unlock (or Resign) whose lease had ended: it
// matches ErrLeaseLost and wraps the lease's Err.
func lockLost(op, resource string, l *Lease) error {
	cause := l.Err()
	if errors.Is(cause, ErrLeaseLost) {
		return fmt.Errorf("tenure: %s of %q: lease ended before %s: %w", op, resource, op, cause)
	}
	return fmt.Errorf("tenure: %s of %q: %w: %w", op, resource, ErrLeaseLost, cause)
}

// localHold is the side of a lease-backed lock that lives in this process:
// at most one goroutine holds it at a time, from take until its lease is
// given up (end) or ends by itself. A lease that ends by itself frees the
// hold at once and is remembered as lost until an end call accounts for it,
// so that the late Unlock of a lost lock never releases a later holder's
// lease.
type localHold struct {
	turn chan struct{} // one token: the right to hold a lease in this process

	mu    sync.Mutex
	lease *Lease   // the holder's lease; nil while free or acquiring
	lost  []*Lease // leases that ended while held, not yet accounted for by end; oldest first
}

func newLocalHold() *localHold { return &localHold{turn: make(chan struct{}, 1)} }

// take waits for the turn, or until ctx ends (ctx.Err()).
func (h *localHold) take(ctx context.Context) error {
	if h.tryTake() {
		return nil
	}
	select {
	case h.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryTake takes the turn if it is free now, or if the holder's lease has
// ended (the turn passes from the lost holder to the caller without waiting
// for set's watcher to notice).
func (h *localHold) tryTake() bool {
	select {
	case h.turn <- struct{}{}:
		return true
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.lease; l != nil && leaseEnded(l) {
		h.lease = nil
		h.lost = append(h.lost, l)
		return true
	}
	// set's watcher may have freed the turn between the first try and the
	// lock (it gives the turn back while holding h.mu): try once more.
	select {
	case h.turn <- struct{}{}:
		return true
	default:
		return false
	}
}

// giveBack frees the turn taken by take or tryTake, after a failed
// acquisition or once end's lease was released.
func (h *localHold) giveBack() { <-h.turn }

// set makes l the hold's lease and frees the turn as soon as l ends by
// itself.
func (h *localHold) set(l *Lease) {
	h.mu.Lock()
	h.lease = l
	h.mu.Unlock()
	go func() {
		<-l.Done()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.lease != l {
			return // given up by end, which frees the turn
		}
		h.lease = nil
		h.lost = append(h.lost, l)
		h.giveBack() // the turn is ours: h.lease was set
	}()
}

// end gives up a hold: the oldest lost lease not yet accounted for, if any
// (the turn is already free), else the holder's lease, which the caller
// releases before giveBack. A holder's lease that has just ended is
// returned as lost, with the turn freed.
func (h *localHold) end() (held, lost *Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.lost) > 0 {
		lost = h.lost[0]
		h.lost[0] = nil
		h.lost = h.lost[1:]
		return nil, lost
	}
	l := h.lease
	h.lease = nil
	switch {
	case l == nil:
		return nil, nil
	case leaseEnded(l):
		h.giveBack()
		return nil, l
	default:
		return l, nil
	}
}

// leaseEnded reports whether l's Done is closed.
func leaseEnded(l *Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// current returns the holder's lease, else the last lost lease not yet
// accounted for, else nil.
func (h *localHold) current() *Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lease != nil {
		return h.lease
	}
	if n := len(h.lost); n > 0 {
		return h.lost[n-1]
	}
	return nil
}

// acquireWaiting acquires a lease of mode on resource, queueing at the
// registrar until ctx ends when wait is set.
func acquireWaiting(ctx context.Context, c *Client, resource string, opts []AcquireOption, mode Mode, wait bool) (*Lease, error) {
	all := append(append([]AcquireOption(nil), opts...), mode)
	if !wait {
		return c.Acquire(ctx, resource, all...)
	}
	backoff := 50 * time.Millisecond
	for {
		w := lockWaitChunk
		if dl, ok := ctx.Deadline(); ok {
			// End the registrar's wait a little before ctx, so that a grant
			// at the last moment still reaches us.
			left := time.Until(dl)
			w = min(w, left-left/10)
		}
		if w <= 0 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		l, err := c.Acquire(ctx, resource, append(all, Wait(w))...)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, endedWith(ctx, err)
		}
		var held *HeldError
		var late *lateGrantError
		switch {
		case errors.As(err, &held) && held.WaitEnded, errors.As(err, &late):
			// The wait ran out, or its grant came too late to be
			// trusted and was given back: queue again.
			backoff = 50 * time.Millisecond
			continue
		case errors.Is(err, ErrLeaseHeld), errors.Is(err, ErrQuotaExceeded):
			// Refused without waiting (queue full, rate limit): back off.
			if sleep(ctx, c.clock, backoff) != nil {
				return nil, endedWith(ctx, err)
			}
			backoff = min(2*backoff, time.Second)
		default:
			return nil, err
		}
	}
}

// endedWith is the error of a wait that ctx ended after an attempt failed
// with last: ctx.Err() (errors.Is matches it, as it matches last), saying
// why the attempt failed when that was not ctx ending (found from outside:
// a Lock against a wrong address ended with a bare "context deadline
// exceeded", where Acquire said "connection refused").
func endedWith(ctx context.Context, last error) error {
	switch code := connect.CodeOf(last); {
	case last == nil, errors.Is(last, ErrDeadlineExceeded), errors.Is(last, ErrCanceled),
		code == connect.CodeCanceled, code == connect.CodeDeadlineExceeded:
		return ctx.Err()
	}
	return &waitEndedError{ctx: ctx.Err(), last: last}
}

type waitEndedError struct{ ctx, last error }

func (e *waitEndedError) Error() string {
	return e.ctx.Error() + " (the last attempt: " + e.last.Error() + ")"
}

func (e *waitEndedError) Unwrap() []error { return []error{e.ctx, e.last} }
