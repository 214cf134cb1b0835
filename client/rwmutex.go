package tenure

import (
	"context"
	"errors"
)

// RWMutex is a distributed readers-writer lock on one resource: any number
// of readers, each holding a shared lease of its own, or one writer holding
// an exclusive lease, as the Mutex does. The registrar queues acquires in
// FIFO order and grants a shared lease only while nobody waits, so a
// waiting writer is not starved by a stream of new readers (readers that
// come after it wait for it).
//
// The writer side is a Mutex (Lock, TryLock, Unlock, Lease), with the same
// rules for a lost lease. A reader gets its own lease from RLock, keeps it
// (watch its Done; pass its Fence to storage that checks fences) and hands
// it back to RUnlock. As with sync.RWMutex, a goroutine that holds a read
// lock and asks for the write lock waits for itself forever.
type RWMutex struct {
	Mutex
}

// NewRWMutex returns an RWMutex on resource. opts apply to each
// acquisition (TTL, Namespace, RequestCertificate); the mode and Wait are
// set by each call.
func NewRWMutex(c *Client, resource string, opts ...AcquireOption) *RWMutex {
	return &RWMutex{Mutex: *NewMutex(c, resource, opts...)}
}

// RLock blocks until a read lock is held, or ctx ends, and returns its
// lease. It waits in the resource's queue at the registrar as Lock does.
func (m *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return acquireWaiting(ctx, m.c, m.resource, m.opts, Shared, true)
}

// TryRLock takes a read lock if one is free now: (nil, nil) while a writer
// holds the lock or waits for it.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	l, err := acquireWaiting(ctx, m.c, m.resource, m.opts, Shared, false)
	if errors.Is(err, ErrLeaseHeld) {
		return nil, nil
	}
	return l, err
}

// RUnlock releases the read lock whose lease RLock or TryRLock returned.
// When that lease ended first, it releases nothing and returns an error
// matching ErrLeaseLost that wraps the lease's Err.
func (m *RWMutex) RUnlock(ctx context.Context, l *Lease) error {
	if l == nil {
		return errors.New("tenure: RUnlock without a read lock's lease")
	}
	if leaseEnded(l) {
		return lockLost("runlock", m.resource, l)
	}
	return releaseLock(ctx, "runlock", m.resource, l)
}
