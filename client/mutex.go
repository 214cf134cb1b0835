package tenure

import (
	"context"
	"errors"
	"sync"
	"time"
)

// lockWaitChunk is the longest single wait Lock asks the registrar for; it
// queues again when a wait runs out, until its context ends.
const lockWaitChunk = 30 * time.Second

// Mutex is a distributed mutual-exclusion lock on one resource, backed by an
// exclusive lease kept alive by the Client. It also excludes goroutines of
// this process sharing the Mutex (like sync.Mutex), so one Mutex may be used
// by many goroutines.
//
// Holding the Mutex is holding its lease: watch Lease().Done() while working
// and stop when it closes, and pass Lease().Fence() to storage that checks
// fences.
type Mutex struct {
	c        *Client
	resource string
	opts     []AcquireOption
	local    chan struct{} // one token: the right to hold the lease in this process

	mu    sync.Mutex
	lease *Lease
}

// NewMutex returns a Mutex on resource. opts apply to each acquisition (TTL,
// Namespace, RequestCertificate); Mode is always Exclusive and Wait is set
// by Lock.
func NewMutex(c *Client, resource string, opts ...AcquireOption) *Mutex {
	return &Mutex{c: c, resource: resource, opts: opts, local: make(chan struct{}, 1)}
}

// Lock blocks until the Mutex is held or ctx ends. It waits in the
// resource's FIFO queue at the registrar (queueing again each time a wait
// runs out) and backs off while the queue is full.
//
// If ctx ends just as the registrar grants the lease, that lease is never
// seen by this client and blocks the resource until its ttl runs out.
func (m *Mutex) Lock(ctx context.Context) error {
	select {
	case m.local <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	l, err := m.acquire(ctx, true)
	if err != nil {
		<-m.local
		return err
	}
	m.set(l)
	return nil
}

// TryLock takes the Mutex if it is free now: (false, nil) when it is held,
// by this process or another.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	select {
	case m.local <- struct{}{}:
	default:
		return false, nil
	}
	l, err := m.acquire(ctx, false)
	if err != nil {
		<-m.local
		if errors.Is(err, ErrLeaseHeld) {
			return false, nil
		}
		return false, err
	}
	m.set(l)
	return true, nil
}

// Unlock releases the Mutex. It returns an error if the Mutex is not held
// or the release could not be confirmed; either way the Mutex is free for
// this process afterwards.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	l := m.lease
	m.lease = nil
	m.mu.Unlock()
	if l == nil {
		return errors.New("tenure: unlock of unlocked Mutex")
	}
	defer func() { <-m.local }()
	return l.Release(ctx, ReleaseVoluntary)
}

// Lease returns the lease held while the Mutex is locked, else nil.
func (m *Mutex) Lease() *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

func (m *Mutex) set(l *Lease) {
	m.mu.Lock()
	m.lease = l
	m.mu.Unlock()
}

func (m *Mutex) acquire(ctx context.Context, wait bool) (*Lease, error) {
	return acquireWaiting(ctx, m.c, m.resource, m.opts, wait)
}

// acquireWaiting acquires an exclusive lease on resource, queueing at the
// registrar until ctx ends when wait is set.
func acquireWaiting(ctx context.Context, c *Client, resource string, opts []AcquireOption, wait bool) (*Lease, error) {
	all := append(append([]AcquireOption(nil), opts...), Exclusive)
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
			return nil, ctx.Err()
		}
		var held *HeldError
		switch {
		case errors.As(err, &held) && held.WaitEnded:
			backoff = 50 * time.Millisecond
			continue // queue again
		case errors.Is(err, ErrLeaseHeld), errors.Is(err, ErrQuotaExceeded):
			// Refused without waiting (queue full, rate limit): back off.
			if sleep(ctx, c.clock, backoff) != nil {
				return nil, ctx.Err()
			}
			backoff = min(2*backoff, time.Second)
		default:
			return nil, err
		}
	}
}
