package tenure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Election elects one leader among campaigners on a resource. The leader
// holds the resource's exclusive lease and publishes its value in the
// resource's guarded state, tagged with its lease id, so observers can tell
// the current leader's value from a deposed one's.
//
// Leadership is the lease: watch Lease().Done() and stop leading when it
// closes. Fence() orders leaders (a later leader has a higher fence).
type Election struct {
	c        *Client
	resource string
	opts     []CallOption
	aopts    []AcquireOption

	mu    sync.Mutex
	lease *Lease
}

// LeaderInfo describes the current leader.
type LeaderInfo struct {
	Value   string
	Holder  string
	LeaseID string
	Fence   uint64
}

// published is the guarded-state encoding of a leader's proclamation.
type published struct {
	LeaseID string `json:"lease_id"`
	Holder  string `json:"holder"`
	Value   string `json:"value"`
}

// NewElection returns an Election on resource. opts apply to the leader's
// lease (TTL, Namespace, RequestCertificate; Mode is always Exclusive). The
// ttl bounds how long a crashed leader blocks the next one.
func NewElection(c *Client, resource string, opts ...AcquireOption) *Election {
	e := &Election{c: c, resource: resource, aopts: opts}
	var ac acquireConfig
	for _, o := range opts {
		if o != nil {
			o.applyAcquire(&ac)
		}
	}
	if ac.namespace != "" {
		e.opts = []CallOption{Namespace(ac.namespace)}
	}
	return e
}

// Campaign blocks until this client is the leader (or ctx ends), then
// publishes value. It returns nil once leading; Lease() is the leadership.
// Campaigning while already leading only proclaims the new value.
func (e *Election) Campaign(ctx context.Context, value string) error {
	if l := e.Lease(); l != nil && l.Err() == nil {
		return e.Proclaim(ctx, value)
	}
	l, err := acquireWaiting(ctx, e.c, e.resource, e.aopts, true)
	if err != nil {
		return err
	}
	if err := e.publish(ctx, l, value); err != nil {
		_ = l.Release(context.WithoutCancel(ctx), ReleaseAborted)
		return err
	}
	e.mu.Lock()
	e.lease = l
	e.mu.Unlock()
	return nil
}

// Proclaim changes the value published by the current leader. It fails with
// ErrLeaseLost when this client does not lead.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	l := e.Lease()
	if l == nil {
		return fmt.Errorf("tenure: proclaim on %q: not leading: %w", e.resource, ErrLeaseLost)
	}
	if err := l.Err(); err != nil {
		return err
	}
	return e.publish(ctx, l, value)
}

func (e *Election) publish(ctx context.Context, l *Lease, value string) error {
	data, err := json.Marshal(published{LeaseID: l.ID(), Holder: l.Holder(), Value: value})
	if err != nil {
		return err
	}
	for range 5 {
		st, err := e.c.ReadState(ctx, e.resource, e.opts...)
		if err != nil {
			return err
		}
		_, err = e.c.WriteState(ctx, l, st.Epoch, data)
		if errors.Is(err, ErrStaleEpoch) || errors.Is(err, ErrFutureEpoch) {
			continue // raced with our own earlier write; read again
		}
		return err
	}
	return fmt.Errorf("tenure: publish on %q: epoch kept moving", e.resource)
}

// Resign gives up leadership (if held) by releasing the lease.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lease
	e.lease = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Release(ctx, ReleaseVoluntary)
}

// Lease returns the leadership lease while this client leads (or led and has
// not resigned; check Err), else nil.
func (e *Election) Lease() *Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lease
}

// Leader returns the current leader: the holder of the resource's active
// lease and the value it published. ErrNoLeader means no lease is active or
// the new leader has not published its value yet.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	st, err := e.c.ReadState(ctx, e.resource, e.opts...)
	if err != nil {
		return LeaderInfo{}, err
	}
	var p published
	if len(st.Data) == 0 || json.Unmarshal(st.Data, &p) != nil || p.LeaseID == "" {
		return LeaderInfo{}, ErrNoLeader
	}
	pb, err := e.c.Get(ctx, p.LeaseID)
	if errors.Is(err, ErrLeaseNotFound) {
		return LeaderInfo{}, ErrNoLeader
	}
	if err != nil {
		return LeaderInfo{}, err
	}
	if pb.GetState() != tenurev1.State_STATE_ACTIVE || pb.GetResource() != e.resource {
		return LeaderInfo{}, ErrNoLeader
	}
	return LeaderInfo{Value: p.Value, Holder: pb.GetHolder(), LeaseID: pb.GetLeaseId(), Fence: pb.GetFence()}, nil
}

// Observe returns a channel of the leader's value, sent when it changes (the
// current one first, if there is a leader); a period without a leader sends
// nothing. It follows the ledger with Watch (starting again from the present
// if the watch fails for good) and closes the channel when ctx ends.
func (e *Election) Observe(ctx context.Context) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		last, have := "", false
		emit := func() error {
			info, err := e.Leader(ctx)
			if err != nil {
				if errors.Is(err, ErrNoLeader) {
					have = false
					return nil
				}
				return nil // transient; the next event tries again
			}
			if have && info.Value == last {
				return nil
			}
			last, have = info.Value, true
			select {
			case ch <- info.Value:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		backoff := 50 * time.Millisecond
		for {
			// Pin the ledger position before reading the leader, so that no
			// change between the read and the watch is missed.
			var from uint64
			if st, err := e.c.Status(ctx); err == nil {
				from = st.GetLedgerIndex()
			}
			if emit() != nil {
				return
			}
			_ = e.c.Watch(ctx, e.resource, from, func(ev *tenurev1.Event) error {
				if ev.GetResource() != e.resource {
					return nil
				}
				backoff = 50 * time.Millisecond
				return emit()
			}, e.opts...)
			// The watch failed for good (for instance, it fell behind the
			// server's event feed): start again from the present.
			if sleep(ctx, e.c.clock, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
	return ch
}
