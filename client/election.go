package tenure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Election elects one leader among campaigners on a resource. The leader
// holds the resource's exclusive lease and publishes its value in the
// resource's guarded state, tagged with its lease id, so observers can tell
// the current leader's value from a deposed one's.
//
// Leadership is the lease: watch Lease().Done() and stop leading when it
// closes, and check Lease().Valid() right before acting as the leader (a
// pause past the trust window may run before Done's timer). Fence() orders
// leaders (a later leader has a higher fence).
//
// Within this process an Election is held like a Mutex: one goroutine at a
// time campaigns or leads, and a Campaign of another goroutine waits its
// turn locally (not in the registrar's queue behind its own lease) until
// that leadership is resigned or its lease ends. As with Mutex.Unlock,
// Resign, Proclaim and Lease act on the Election's current leadership, not
// on the calling goroutine's: a leader keeps the Lease it got after
// Campaign, and a leadership lost before Resign is accounted for by the next
// Resign (see Resign).
type Election struct {
	c        *Client
	resource string
	opts     []CallOption
	aopts    []AcquireOption
	hold     *localHold
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
	e := &Election{c: c, resource: resource, aopts: opts, hold: newLocalHold()}
	// The reads (Leader, Observe) go to the namespace the leases are in:
	// the client's, or the one an option names ("" the default one).
	ac := acquireConfig{namespace: c.cfg.namespace}
	for _, o := range opts {
		if o != nil {
			o.applyAcquire(&ac)
		}
	}
	e.opts = []CallOption{Namespace(ac.namespace)}
	return e
}

// Campaign blocks until this client is the leader (or ctx ends), then
// publishes value. It returns nil once leading; Lease() is the leadership.
//
// While another goroutine of this process campaigns on or leads the
// Election, Campaign first waits for it to resign or lose its lease, like
// Lock on a locked Mutex; so a leader that calls Campaign again waits for
// itself until ctx ends. To change the value of a leadership, use Proclaim.
func (e *Election) Campaign(ctx context.Context, value string) error {
	if err := e.hold.take(ctx); err != nil {
		return err
	}
	l, err := acquireWaiting(ctx, e.c, e.resource, e.aopts, Exclusive, true)
	if err != nil {
		e.hold.giveBack()
		return err
	}
	if err := e.publish(ctx, l, value); err != nil {
		_ = l.Release(context.WithoutCancel(ctx), ReleaseAborted)
		e.hold.giveBack()
		return err
	}
	e.hold.set(l)
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

// Resign gives up leadership (if held) by releasing the lease, and lets
// the next Campaign of this process go ahead. It returns nil when the
// Election does not lead. When a leadership of this Election lost its lease
// (revoked, expired, trust window passed) and has not been resigned since,
// Resign accounts for that one instead: it releases nothing, not even a
// later leader's lease, and returns an error matching ErrLeaseLost that
// wraps the lost lease's Err.
func (e *Election) Resign(ctx context.Context) error {
	l, lost := e.hold.end()
	switch {
	case lost != nil:
		return lockLost("resign", e.resource, lost)
	case l == nil:
		return nil
	}
	defer e.hold.giveBack()
	return releaseLock(ctx, "resign", e.resource, l)
}

// Lease returns the leadership lease while this client leads, or led and
// has not resigned (its lease ended: check Err), else nil. It is the
// current leadership's lease, whichever goroutine campaigned for it.
func (e *Election) Lease() *Lease { return e.hold.current() }

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

// Observe returns a channel of the leader's value and closes it when ctx
// ends or the Client closes. It reads the current leader when it starts and after each ledger
// event of the resource (it follows the ledger with Watch, starting again
// from the present if the watch fails for good), and sends the value read
// when it differs from the last one sent. So each value is the leader's as
// of an observation, not a log of every change: a leader or a value that
// lasted less than a read (a Proclaim just before a Resign, say) may be
// skipped, a new leader publishing the value sent last sends nothing, and a
// period without a leader sends nothing. But the current value is always
// delivered eventually: once the leader stops changing, the last value sent
// is its value (a read that fails is made again, with backoff).
func (e *Election) Observe(ctx context.Context) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		ctx, done := e.c.untilClose(ctx) // its calls end with the Client
		var err error
		defer done(&err)
		last, have := "", false
		// emit sends the current leader's value if it changed. It fails when
		// ctx ended or the leader could not be read; the caller then reads
		// again later, so the current value is never left unsent.
		emit := func() error {
			info, err := e.Leader(ctx)
			switch {
			case errors.Is(err, ErrNoLeader):
				return nil // nothing to send; last stays what was sent
			case err != nil:
				return err
			case have && info.Value == last:
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
			if emit() == nil {
				_ = e.c.Watch(ctx, e.resource, from, func(ev *tenurev1.Event) error {
					if ev.GetResource() != e.resource {
						return nil
					}
					backoff = 50 * time.Millisecond
					return emit()
				}, e.opts...)
			}
			// The leader could not be read, or the watch failed for good
			// (for instance, it fell behind the server's event feed): start
			// again from the present.
			if sleep(ctx, e.c.clock, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
	return ch
}
