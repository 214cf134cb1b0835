package tenure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// State is a resource's guarded state: a small blob and its epoch. The epoch
// is 0 before the first write and grows by one per write.
type State struct {
	Data  []byte
	Epoch uint64
}

// ReadState returns the guarded state of resource. It is a read: retried on
// any endpoint.
func (c *Client) ReadState(ctx context.Context, resource string, opts ...CallOption) (State, error) {
	cc := c.callConfig(opts)
	var st State
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.ReadState(ctx, connect.NewRequest(&tenurev1.ReadStateRequest{Namespace: cc.namespace, Resource: resource}))
		if err == nil {
			st = State{Data: resp.Msg.GetData(), Epoch: resp.Msg.GetEpoch()}
		}
		return err
	})
	return st, err
}

// WriteState writes the guarded state of the lease's resource when the lease
// is the resource's active exclusive lease and expectedEpoch is the current
// epoch; it returns the new epoch (expectedEpoch+1). Errors: ErrLeaseViolation
// (not the active exclusive lease, including an expired one), ErrStaleEpoch
// (someone wrote since), ErrFutureEpoch. On ErrOutcomeUnknown, ReadState
// tells whether the write happened (the epoch moved and the data is yours).
func (c *Client) WriteState(ctx context.Context, l *Lease, expectedEpoch uint64, data []byte) (uint64, error) {
	var epoch uint64
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{
			Namespace: l.namespace, Resource: l.resource, LeaseId: l.id, ExpectedEpoch: expectedEpoch, Data: data,
		}))
		if err == nil {
			epoch = resp.Msg.GetEpoch()
		}
		return err
	})
	return epoch, err
}

// CheckFence asks whether fence belongs to an active lease of resource
// (current) and returns the resource's active fence (0 if none). Storage
// uses it to refuse a deposed holder's writes; the fencing package does the
// same check offline.
func (c *Client) CheckFence(ctx context.Context, resource string, fence uint64, opts ...CallOption) (current bool, activeFence uint64, err error) {
	cc := c.callConfig(opts)
	err = c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.CheckFence(ctx, connect.NewRequest(&tenurev1.CheckFenceRequest{Namespace: cc.namespace, Resource: resource, Fence: fence}))
		if err == nil {
			current, activeFence = resp.Msg.GetCurrent(), resp.Msg.GetActiveFence()
		}
		return err
	})
	return current, activeFence, err
}

// Get returns a lease by id (any state), or ErrLeaseNotFound.
func (c *Client) Get(ctx context.Context, leaseID string) (*tenurev1.Lease, error) {
	var pb *tenurev1.Lease
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: leaseID}))
		if err == nil {
			pb = resp.Msg.GetLease()
		}
		return err
	})
	return pb, err
}

// Revoke ends any lease (admin role). reason is free text for the audit.
func (c *Client) Revoke(ctx context.Context, leaseID, reason string) (*tenurev1.Lease, error) {
	var pb *tenurev1.Lease
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: leaseID, Reason: reason}))
		if err == nil {
			pb = resp.Msg.GetLease()
		}
		return err
	})
	return pb, err
}

// Verified is the registrar's answer about one lease id.
type Verified struct {
	LeaseID string
	// Found is false when the registrar does not know the id (never issued,
	// or pruned after it ended).
	Found bool
	// Lease is the current state (nil when not found).
	Lease *tenurev1.Lease
}

// Active reports whether the lease is found and ACTIVE.
func (v Verified) Active() bool {
	return v.Found && v.Lease.GetState() == tenurev1.State_STATE_ACTIVE
}

// VerifyOption configures VerifyAll.
type VerifyOption func(*verifyConfig)

type verifyConfig struct {
	grace     time.Duration
	namespace string
}

// RestartGrace makes VerifyAll first declare a restart of this holder: its
// active leases are held up to grace past their expiry (once per lease, at
// most the policy's cap, 15 s by default) until it verifies and renews them.
// ns limits the declaration to one namespace; "" means every namespace
// (with authentication on, only for a principal of "*"; a principal of one
// namespace gets that one, any other must name it: PERMISSION_DENIED).
func RestartGrace(grace time.Duration, ns string) VerifyOption {
	return func(v *verifyConfig) { v.grace, v.namespace = grace, ns }
}

// VerifyAll is the reality check of a restarting agent (seed 002,
// VERIFY_ALL): the registrar's current state of each lease id, in order.
// With RestartGrace it first calls DeclareRestart so that leases that are
// still active survive until the agent resumes them (Client.Resume). The
// answer overrides whatever the agent remembered: an id that is not Active
// is no longer held. Resume, which takes an active one over, needs the
// Client to hold as the earlier run did (WithHolder).
func (c *Client) VerifyAll(ctx context.Context, ids []string, opts ...VerifyOption) ([]Verified, error) {
	var vc verifyConfig
	for _, o := range opts {
		if o != nil {
			o(&vc)
		}
	}
	if vc.grace > 0 {
		err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
			_, err := ep.lease.DeclareRestart(ctx, connect.NewRequest(&tenurev1.DeclareRestartRequest{
				Holder: c.cfg.holder, Grace: durationpb.New(vc.grace), Namespace: vc.namespace,
			}))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("tenure: declare restart: %w", err)
		}
	}
	if len(ids) == 0 {
		return nil, nil // nothing to ask about (Verify refuses an empty list)
	}
	var out []Verified
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.Verify(ctx, connect.NewRequest(&tenurev1.VerifyRequest{LeaseIds: ids}))
		if err != nil {
			return err
		}
		out = out[:0]
		for _, r := range resp.Msg.GetResults() {
			v := Verified{LeaseID: r.GetLeaseId(), Found: r.GetFound()}
			if v.Found {
				v.Lease = r.GetLease()
			}
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// Watch calls fn with every ledger event of the namespace whose resource
// starts with prefix, from afterIndex (exclusive; 0 means from now). It
// resumes from the last event (or the last progress notification, with
// WatchProgress) after a broken stream, on any endpoint, and
// returns when ctx ends (ctx.Err()), when fn returns an error (that error),
// or on an error that retrying cannot fix (authentication, permission,
// invalid argument).
func (c *Client) Watch(ctx context.Context, prefix string, afterIndex uint64, fn func(*tenurev1.Event) error, opts ...CallOption) (err error) {
	if err := c.checkOpen(); err != nil {
		return err
	}
	ctx, done := c.untilClose(ctx)
	defer done(&err)
	cc := c.callConfig(opts)
	last := afterIndex
	if last == 0 {
		// Pin "now" to an index so that a reconnect misses nothing.
		last, _ = c.LedgerIndex(ctx) // none answering: the server's "now"
	}
	backoff := 50 * time.Millisecond
	// Members that refused to resume after last (one that no longer, or
	// not yet, holds the events after it: a member replaced with an empty
	// data dir, one catching up): another may hold them.
	var refused map[int]bool
	for {
		ep, idx := c.pick()
		req := &tenurev1.WatchRequest{Namespace: cc.namespace, Prefix: prefix, AfterIndex: last}
		if cc.progressInterval != 0 {
			req.ProgressInterval = durationpb.New(cc.progressInterval)
		}
		stream, err := ep.lease.Watch(ctx, connect.NewRequest(req))
		if err == nil {
			for first := true; stream.Receive(); first = false {
				backoff = 50 * time.Millisecond
				refused = nil
				if first {
					// ep answers: learn the members it lists, as a unary
					// call does, so that a watch given one member's
					// address can resume elsewhere when that member goes.
					c.syncMembers(ep)
				}
				ev := stream.Msg().GetEvent()
				if ev == nil {
					// A progress notification (only when asked for): the
					// watch has got that far, and resumes from there.
					p := stream.Msg().GetProgressIndex()
					if p == 0 {
						continue
					}
					last = max(last, p)
					if cc.onProgress != nil {
						if ferr := cc.onProgress(p); ferr != nil {
							_ = stream.Close()
							return ferr
						}
					}
					continue
				}
				if ev.GetIndex() > last {
					last = ev.GetIndex()
				}
				if ferr := fn(ev); ferr != nil {
					_ = stream.Close()
					return ferr
				}
			}
			err = stream.Err()
			_ = stream.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = fromConnect(err)
		var e *Error
		if errors.As(err, &e) && e.Reason == ReasonInvalidArgument && e.Metadata["field"] == "after_index" {
			if refused == nil {
				refused = map[int]bool{}
			}
			refused[idx] = true
			if len(refused) < c.endpointCount() {
				c.failover(idx, "")
				continue
			}
			return err // every member refused it
		}
		switch ReasonOf(err) {
		case ReasonUnauthenticated, ReasonPermissionDenied, ReasonInvalidArgument:
			return err
		}
		if errors.Is(err, context.Canceled) {
			return err
		}
		c.failover(idx, leaderHint(err))
		if sleep(ctx, c.clock, backoff) != nil {
			return ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// LedgerIndex returns the index of the last event in the ledger now: to
// watch from (Watch's afterIndex) without missing what follows. It asks
// every endpoint at once and takes the highest of the answers that come
// within a moment of the first: asked in turn, a hung member would hold
// the question for seconds, and the events committed meanwhile would fall
// before "now"; the highest, because a member that lags answers an
// earlier index. The error is the last endpoint's when none answers.
func (c *Client) LedgerIndex(ctx context.Context) (uint64, error) {
	c.mu.Lock()
	eps := slices.Clone(c.endpoints)
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		ep  *endpoint
		st  *tenurev1.StatusResponse
		err error
	}
	answers := make(chan answer, len(eps))
	for _, ep := range eps {
		go func() {
			resp, err := ep.cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
			if err != nil {
				answers <- answer{err: fromConnect(err)}
				return
			}
			answers <- answer{ep: ep, st: resp.Msg}
		}()
	}
	var idx uint64
	var err error
	var grace <-chan time.Time // runs from the first answer
	for range eps {
		select {
		case a := <-answers:
			if a.st == nil {
				if grace == nil {
					err = a.err
				}
				continue
			}
			idx = max(idx, a.st.GetLedgerIndex())
			if grace == nil {
				c.syncMembers(a.ep) // as a unary call that succeeded does
				t := c.clock.NewTimer(100 * time.Millisecond)
				defer t.Stop()
				grace = t.C()
			}
		case <-grace:
			return idx, nil
		}
	}
	if grace == nil {
		return 0, err
	}
	return idx, nil
}

// Status returns the cluster status as seen by the endpoint in use.
func (c *Client) Status(ctx context.Context) (*tenurev1.StatusResponse, error) {
	var st *tenurev1.StatusResponse
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		if err == nil {
			st = resp.Msg
		}
		return err
	})
	return st, err
}

// WhoAmI asks the server who this client's credentials (WithToken, or a
// client certificate in WithTLS) belong to. Authenticated is false when
// the server runs without authentication. With authentication on, the
// holder of every request is the principal: a client meant to act as it
// passes the answer's Principal to WithHolder.
func (c *Client) WhoAmI(ctx context.Context) (*tenurev1.WhoAmIResponse, error) {
	var out *tenurev1.WhoAmIResponse
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.cluster.WhoAmI(ctx, connect.NewRequest(&tenurev1.WhoAmIRequest{}))
		if err == nil {
			out = resp.Msg
		}
		return err
	})
	return out, err
}
