package tenure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/fencing"
)

// ReleaseReason is recorded with a release, for audit only.
type ReleaseReason int32

// Release reasons (API.md).
const (
	ReleaseCompleted = ReleaseReason(tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED)
	ReleaseAborted   = ReleaseReason(tenurev1.ReleaseReason_RELEASE_REASON_ABORTED)
	ReleaseVoluntary = ReleaseReason(tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY)
)

// Lease is a lease this client holds and keeps alive. Its identity (ID,
// Fence, Resource, …) never changes; Proto, ExpiresAt, TrustedUntil and
// Certificate follow its renewals. All methods are safe for concurrent use.
//
// Done is closed when the lease ends for this client, for any reason; Err
// then says why: ErrReleased after Release or Close, otherwise a *LostError
// (errors.Is(err, ErrLeaseLost)). Once Done is closed the caller must stop
// acting as the holder.
type Lease struct {
	c         *Client
	id        string
	namespace string
	resource  string
	holder    string
	mode      Mode
	fence     uint64
	ttl       time.Duration
	margin    time.Duration
	wantCert  bool

	// transferring is set while this client's Transfer of the lease is in
	// flight: the registrar's notice that it ended (KeepAlive's
	// notify_ended) is then the transfer's own doing, not a loss.
	transferring atomic.Bool

	mu      sync.Mutex
	pb      *tenurev1.Lease
	cert    *Certificate
	trusted time.Time
	done    chan struct{}
	err     error
}

// Certificate is a lease certificate: the registrar's Ed25519 signature over
// Claim, checked offline with fencing.VerifyCertificate and the registrar's
// public key (ClusterService.PublicKey, identified by KeyID).
type Certificate struct {
	Signature []byte
	KeyID     string
	Claim     fencing.Claim
}

func newLease(c *Client, pb *tenurev1.Lease, wantCert bool) *Lease {
	ttl := pb.GetTtl().AsDuration()
	l := &Lease{
		c:         c,
		id:        pb.GetLeaseId(),
		namespace: pb.GetNamespace(),
		resource:  pb.GetResource(),
		holder:    pb.GetHolder(),
		mode:      Mode(pb.GetMode()),
		fence:     pb.GetFence(),
		ttl:       ttl,
		margin:    c.cfg.marginFor(ttl),
		wantCert:  wantCert,
		done:      make(chan struct{}),
	}
	if l.mode != Shared {
		l.mode = Exclusive
	}
	l.update(pb, time.Time{})
	return l
}

// ID returns the lease id.
func (l *Lease) ID() string { return l.id }

// Fence returns the lease's fencing token, strictly increasing per resource.
// Pass it with every write to storage that checks fences.
func (l *Lease) Fence() uint64 { return l.fence }

// Resource returns the leased resource.
func (l *Lease) Resource() string { return l.resource }

// Namespace returns the lease's namespace.
func (l *Lease) Namespace() string { return l.namespace }

// Holder returns the holder the lease was granted to.
func (l *Lease) Holder() string { return l.holder }

// Mode returns Exclusive or Shared.
func (l *Lease) Mode() Mode { return l.mode }

// TTL returns the lease's ttl as granted.
func (l *Lease) TTL() time.Duration { return l.ttl }

// SafetyMargin returns the margin subtracted from the ttl in the trust window.
func (l *Lease) SafetyMargin() time.Duration { return l.margin }

// ExpiresAt returns the registrar's expiry after the last confirmed grant or
// renewal, in UTC wall time. It is informative: the client trusts the lease
// only until TrustedUntil, measured on its own clock.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pb.GetExpiresAt().AsTime()
}

// TrustedUntil returns the end of the trust window: the send time of the last
// confirmed grant or renewal + ttl − safety margin, on the client's clock.
func (l *Lease) TrustedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trusted
}

// Certificate returns the latest lease certificate received (nil if none
// was asked for with RequestCertificate or given by namespace policy). A
// renewal by heartbeat brings a new certificate only when the namespace
// policy certifies every renewal; the previous one stays valid until its own
// expiry. RefreshCertificate fetches a current one.
func (l *Lease) Certificate() *Certificate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cert
}

// Proto returns a copy of the last lease message received from the registrar.
func (l *Lease) Proto() *tenurev1.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return proto.Clone(l.pb).(*tenurev1.Lease)
}

// Done is closed when the lease ends for this client: lost (revoked,
// expired, refused on renewal, trust window passed) or released. A timer
// closes it when the trust window passes: a process that was paused past
// it (SIGSTOP, a long GC or VM pause) may run before that timer does, so
// check Valid right before acting on the lease.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Valid reports, by the client's clock now, whether the lease may still be
// acted on: it has not ended and its trust window has not passed. Unlike
// Done it does not wait for the client's timers, so a process that wakes
// from a pause past the window sees false at once. (A pause between Valid
// and the action it guards is what fences are for.)
func (l *Lease) Valid() bool {
	select {
	case <-l.done:
		return false
	default:
	}
	return l.c.clock.Now().Before(l.TrustedUntil())
}

// Err returns nil while the lease is held, then why it ended: ErrReleased,
// or a *LostError matching ErrLeaseLost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// update records a lease message from the registrar and, when trusted is
// not zero, the new end of the trust window.
func (l *Lease) update(pb *tenurev1.Lease, trusted time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pb != nil {
		l.pb = pb
		if sig := pb.GetSignature(); len(sig) > 0 {
			l.cert = &Certificate{Signature: sig, KeyID: pb.GetKeyId(), Claim: ClaimOf(pb)}
		}
	}
	if trusted.After(l.trusted) {
		l.trusted = trusted
	}
}

// end closes Done with err, once.
func (l *Lease) end(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	close(l.done)
	l.mu.Unlock()
	if errors.Is(err, ErrTrustWindowPassed) {
		l.c.gaveUp(l.id, l.ttl)
	}
	return true
}

func (l *Lease) lost(cause error) *LostError {
	return &LostError{LeaseID: l.id, Resource: l.resource, At: l.c.clock.Now(), Cause: cause}
}

// ClaimOf is what the certificate of lease pb (its signature, when the
// lease carries one) attests: check it with fencing.VerifyCertificate.
func ClaimOf(pb *tenurev1.Lease) fencing.Claim {
	sc := pb.GetScope()
	return fencing.Claim{
		LeaseID:       pb.GetLeaseId(),
		Namespace:     pb.GetNamespace(),
		Resource:      pb.GetResource(),
		Holder:        pb.GetHolder(),
		Mode:          fencing.Mode(pb.GetMode()),
		Fence:         pb.GetFence(),
		IssuedAt:      pb.GetIssuedAt().AsTime(),
		ExpiresAt:     pb.GetExpiresAt().AsTime(),
		RenewalCount:  pb.GetRenewalCount(),
		ParentLeaseID: pb.GetParentLeaseId(),
		Scope:         fencing.Scope{Namespaces: sc.GetNamespaces(), ResourcePrefixes: sc.GetResourcePrefixes(), Actions: sc.GetActions()},
		Budget:        pb.GetBudget().GetLimits(),
	}
}

// Acquire claims resource and keeps the lease alive until it is released or
// lost. Without Wait it fails at once with a *HeldError (ErrLeaseHeld) when
// the resource is taken; with Wait(d) it queues for up to d.
//
// The lease returned is trusted: its trust window (send time of the grant or
// of a renewal + ttl − safety margin) has not passed. A grant that arrives
// after its own trust window (a long Wait) is renewed before Acquire returns.
//
// Acquire fails over to another endpoint on NOT_LEADER and on connection
// failures. When an attempt's outcome is unknown (OUTCOME_UNKNOWN, or a
// connection that broke off after sending), it retries, and if the retry
// answers LEASE_HELD naming a lease of this client's holder on the same
// resource and mode, which this Client does not already hold and while no
// other Acquire of the resource is in flight in this Client, that lease is
// the one granted to the lost attempt: Acquire adopts it, trusting it from
// the first attempt's send time. This is safe when the holder identity is
// unique to this Client (the default is); with WithSharedHolder or
// WithToken it is not assumed, and Acquire never adopts.
//
// An Acquire whose ctx ends after its request was sent may still have been
// granted, a lease this Client never sees. The next Acquire of the resource
// by this Client that meets such a lease of its holder (not held by this
// Client, no other Acquire of it in flight) releases it and asks again
// (unless the holder may be shared, as above: the lease then expires), as
// it does for a lease this Client gave up when its trust window passed.
//
// A grant that came too late to be trusted and that the renewal meant to
// prove it found gone (given back, expired) is no lease: Acquire asks
// once more, with what is left of the wait.
func (c *Client) Acquire(ctx context.Context, resource string, opts ...AcquireOption) (*Lease, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	ac := acquireConfig{namespace: c.cfg.namespace, mode: Exclusive}
	for _, o := range opts {
		if o != nil {
			o.applyAcquire(&ac)
		}
	}
	start := c.clock.Now()
	l, err := c.acquire(ctx, resource, ac)
	var late *lateGrantError
	if !errors.As(err, &late) || ctx.Err() != nil {
		return l, err
	}
	c.cfg.logger.Debug("tenure: asking again after a late grant was found gone", "resource", resource, "error", err)
	if ac.wait > 0 {
		// What is left of the wait, or none (asked once, not queued).
		ac.wait = max(ac.wait-c.clock.Now().Sub(start), 0)
	}
	return c.acquire(ctx, resource, ac)
}

// acquire is Acquire's one request (with its retries) of a lease.
func (c *Client) acquire(ctx context.Context, resource string, ac acquireConfig) (*Lease, error) {
	switch {
	case ac.ttl < 0:
		return nil, invalidArgument("ttl", fmt.Sprintf("must be positive, got %v", ac.ttl))
	case ac.wait < 0:
		return nil, invalidArgument("wait", fmt.Sprintf("must not be negative, got %v", ac.wait))
	}
	req := &tenurev1.AcquireRequest{
		Namespace:   ac.namespace,
		Resource:    resource,
		Holder:      c.cfg.holder,
		Mode:        tenurev1.Mode(ac.mode),
		Certificate: ac.certificate,
		Scope:       ac.scope.proto(),
		Budget:      ac.budget.proto(),
	}
	if ac.ttl != 0 {
		req.Ttl = durationpb.New(ac.ttl)
	}
	if ac.wait > 0 {
		req.Wait = durationpb.New(ac.wait)
	}
	key := ac.namespace + "\x00" + resource
	if ac.wait > 0 {
		var done func()
		ctx, done = c.untilWaitsStop(ctx)
		defer done()
	}
	// Deferred after done, so run before it: Close, told by done that the
	// waits are over, finds this Acquire no longer in flight, and may give
	// back a grant that crossed its withdrawal (found by CI under load: the
	// grant was left for its ttl, taken for this Acquire's own).
	defer c.inFlight(c.acquiring, key)()

	var (
		granted   *tenurev1.Lease
		sent      time.Time
		firstSent time.Time
		uncertain bool
		// reached: some attempt may have reached a member (not one
		// refused at the dial): only then can a grant be left behind.
		reached bool
	)
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		now := c.clock.Now()
		if firstSent.IsZero() {
			firstSent = now
		} else if ac.wait > 0 {
			// A retry waits for what is left of the wait (none: once).
			req.Wait = nil
			if left := ac.wait - now.Sub(firstSent); left > 0 {
				req.Wait = durationpb.New(left)
			}
		}
		defer func() {
			if ctx.Err() != nil && reached {
				c.mayHaveStray(key, req.GetTtl().AsDuration())
			}
		}()
		resp, err := c.acquireRPC(ctx, ep, req)
		reached = reached || err == nil || !notSent(err)
		var held *HeldError
		if err != nil && errors.As(fromConnect(err), &held) && held.Holder == c.cfg.holder &&
			(c.takeGivenUp(held.LeaseID) || !c.cfg.sharedHolder && c.takeStray(key, held.LeaseID)) {
			// A lease of ours this client gave up for lost, or granted to
			// an Acquire that had already returned: release it and ask
			// again.
			if _, rerr := c.releaseRPC(ctx, ep, &tenurev1.ReleaseRequest{LeaseId: held.LeaseID, Holder: c.cfg.holder,
				Reason: tenurev1.ReleaseReason_RELEASE_REASON_ABORTED}); rerr == nil {
				now = c.clock.Now()
				resp, err = c.acquireRPC(ctx, ep, req)
			}
		}
		if err == nil {
			granted, sent = resp.GetLease(), now
			return nil
		}
		err = fromConnect(err)
		if uncertain && errors.As(err, &held) {
			if pb := c.adoptable(ctx, ep, key, req, held); pb != nil {
				c.cfg.logger.Debug("tenure: adopted own lease after unknown outcome", "lease", pb.GetLeaseId())
				granted, sent = pb, firstSent
				return nil
			}
		}
		if outcomeUnknown(err) {
			uncertain = true
		}
		return err
	})
	if err != nil {
		ended := ctx.Err() != nil
		if !ended && (outcomeUnknown(err) || uncertain && retryable(idempotentCall, err)) {
			// Some attempt may have been granted, and the retries that
			// followed did not find out: the outcome is unknown (as for
			// any write whose answer was lost), whatever the last
			// attempt's error.
			err = unknownOutcome(err)
		}
		if (ended || ReasonOf(err) == ReasonOutcomeUnknown) && reached && !c.cfg.sharedHolder {
			// The grant may have crossed the call's end, or come after
			// the retries gave up: give it back now rather than hold the
			// resource for nobody until its ttl (and if it comes later,
			// this Client's next Acquire of the resource releases it).
			c.mayHaveStray(key, req.GetTtl().AsDuration())
			go c.releaseStrayLease(ac.namespace, resource, key, firstSent)
		}
		return nil, err
	}
	if granted.GetLeaseId() == "" || granted.GetTtl().AsDuration() <= 0 {
		return nil, fmt.Errorf("tenure: acquire %q: the registrar answered without a lease id or ttl", resource)
	}
	l := newLease(c, granted, ac.certificate)
	trusted := sent.Add(pbTTL(granted, l.ttl) - l.margin)
	if left := trusted.Sub(c.clock.Now()); left < l.ttl/3 {
		// Granted late in its own trust window (after a wait: trust counts
		// from the request's send): renewed now, so that the caller is not
		// handed a lease about to be doubted. Granted after the window,
		// only that renewal can prove the lease is still ours.
		s, pb, err := c.renewOnce(ctx, l.id, ac.certificate)
		switch {
		case err == nil:
			sent, trusted = s, s.Add(pbTTL(pb, l.ttl)-l.margin)
			l.update(pb, time.Time{})
		case left <= 0 || ReasonOf(err) != "":
			c.abandon(l)
			return nil, &lateGrantError{fmt.Errorf("tenure: lease %s on %q was granted too late to be trusted and could not be renewed: %w", l.id, resource, err)}
		}
		// Otherwise (no answer) it keeps what trust it has; the
		// heartbeat goes on.
	}
	l.update(nil, trusted)
	if err := c.track(l, sent, trusted); err != nil {
		c.abandon(l)
		return nil, err
	}
	return l, nil
}

// inFlight counts a call on key in m (acquiring, claiming) until the
// func it returns is called.
func (c *Client) inFlight(m map[string]int, key string) func() {
	c.mu.Lock()
	m[key]++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if m[key]--; m[key] == 0 {
			delete(m, key)
		}
		c.mu.Unlock()
	}
}

// releaseStrayLease releases the active leases of resource held by this
// client's holder that it does not hold, while no other Acquire of the
// resource is in flight here: granted to an Acquire that had returned,
// first sent at since. A lease granted well before since is another
// Client's (foreignGrant): kept.
func (c *Client) releaseStrayLease(namespace, resource, key string, since time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), orphanTimeout)
	defer cancel()
	var resp *connect.Response[tenurev1.ListResponse]
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		var err error
		resp, err = ep.lease.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Namespace: namespace, Resource: resource,
			Holder: c.cfg.holder, States: []tenurev1.State{tenurev1.State_STATE_ACTIVE}}))
		return err
	})
	if err != nil {
		return
	}
	for _, l := range resp.Msg.GetLeases() {
		c.mu.Lock()
		stray := l.GetHolder() == c.cfg.holder && c.leases[l.GetLeaseId()] == nil && c.acquiring[key] == 0
		c.mu.Unlock()
		if !stray || c.foreignGrant(l.GetAcquiredAt(), since, "lease "+l.GetLeaseId()+" on "+resource) {
			continue
		}
		c.mu.Lock()
		delete(c.strays, key)
		c.mu.Unlock()
		c.releaseOrphan(l)
	}
}

// grantSkew is how far the registrar's clock may be behind this Client's
// for foreignGrant.
const grantSkew = time.Second

// foreignGrant reports whether a grant to this Client's holder that this
// Client does not hold, made at granted (the registrar's time), came well
// before since, when this Client sent the request whose answer it lost:
// not that request's, but another Client's that uses the same holder.
// It is left alone, and the client warns once: Clients sharing a holder
// need WithSharedHolder, or each may give back the others' grants.
func (c *Client) foreignGrant(granted *timestamppb.Timestamp, since time.Time, what string) bool {
	if granted == nil || since.IsZero() || !granted.AsTime().Before(since.Add(-grantSkew)) {
		return false
	}
	if c.sharedWarned.CompareAndSwap(false, true) {
		c.cfg.logger.Warn("tenure: another client uses this Client's holder: give each its own holder, or every one WithSharedHolder "+
			"(without it, a Client that lost an answer may give back the others' leases and tasks)",
			"holder", c.cfg.holder, "found", what, "granted", granted.AsTime(), "lost_request_sent", since)
	}
	return true
}

// adoptable returns the lease named by held when it must be the one granted
// to an earlier attempt of this Acquire whose outcome was unknown.
func (c *Client) adoptable(ctx context.Context, ep *endpoint, key string, req *tenurev1.AcquireRequest, held *HeldError) *tenurev1.Lease {
	if held.Holder != c.cfg.holder || held.LeaseID == "" || c.cfg.sharedHolder {
		return nil
	}
	c.mu.Lock()
	_, mine := c.leases[held.LeaseID]
	others := c.acquiring[key] > 1 || c.releasing[held.LeaseID] > 0
	c.mu.Unlock()
	if mine || others {
		return nil
	}
	resp, err := ep.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: held.LeaseID, Certificate: req.GetCertificate()}))
	if err != nil {
		return nil
	}
	pb := resp.Msg.GetLease()
	wantMode := req.GetMode()
	if wantMode == tenurev1.Mode_MODE_UNSPECIFIED {
		wantMode = tenurev1.Mode_MODE_EXCLUSIVE
	}
	if pb.GetState() != tenurev1.State_STATE_ACTIVE || pb.GetHolder() != c.cfg.holder ||
		pb.GetNamespace() != req.GetNamespace() || pb.GetResource() != req.GetResource() ||
		pb.GetMode() != wantMode {
		return nil
	}
	if req.GetTtl() != nil && pb.GetTtl().AsDuration() != req.GetTtl().AsDuration() {
		return nil
	}
	return pb
}

// lateGrantError is Acquire's error when the grant came after its own trust
// window (a wait, or a process paused while it waited) and the renewal that
// would have proven it failed: the lease was given back, and asking again
// is safe, so Lock and Campaign queue again rather than fail.
type lateGrantError struct{ err error }

func (e *lateGrantError) Error() string { return e.err.Error() }
func (e *lateGrantError) Unwrap() error { return e.err }

// abandon releases, best effort and briefly, a lease Acquire will not return.
func (c *Client) abandon(l *Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		_, err := c.releaseRPC(ctx, ep, &tenurev1.ReleaseRequest{
			LeaseId: l.id, Holder: c.cfg.holder, Reason: tenurev1.ReleaseReason_RELEASE_REASON_ABORTED,
		})
		return err
	})
	l.end(ErrReleased)
}

// track registers a trusted lease with the client and its heartbeat.
func (c *Client) track(l *Lease, sent, trusted time.Time) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClientClosed
	}
	c.leases[l.id] = l
	c.mu.Unlock()
	if err := c.hb.add(l, sent, trusted); err != nil {
		c.forget(l)
		return err
	}
	return nil
}

// forget removes a lease that ended from the client's set.
// gaveUp notes a lease this client stopped trusting without knowing it
// ended (its trust window passed: the registrar or the network was
// down). The registrar may still hold it for the holder — after a restart,
// for a while longer, since its time stood still — and an Acquire of the
// resource that meets it releases it instead of waiting it out.
func (c *Client) gaveUp(id string, ttl time.Duration) {
	// Beyond a ttl the registrar ends it itself, unless its time stood
	// still for longer: a generous bound.
	c.remember(c.givenUp, id, 10*ttl+time.Minute)
}

// mayHaveStray notes that an Acquire of key ended (its ctx) after sending:
// the registrar may have granted it a lease nobody here will see.
func (c *Client) mayHaveStray(key string, ttl time.Duration) {
	if ttl <= 0 {
		ttl = 5 * time.Minute // the policy's, at most its maximum
	}
	c.remember(c.strays, key, ttl+time.Minute)
}

// remember notes key in m (givenUp, strays) for the next d, forgetting
// the entries whose time has passed.
func (c *Client) remember(m map[string]time.Time, key string, d time.Duration) {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, until := range m {
		if now.After(until) {
			delete(m, k)
		}
	}
	m[key] = now.Add(d)
}

// takeStray reports whether lease id, met on key by an Acquire, can only be
// one granted to an Acquire of key that had already returned: one was
// noted, this Client does not hold id, and no other Acquire of key is in
// flight here.
func (c *Client) takeStray(key, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.strays[key]
	if !ok || c.clock.Now().After(until) || c.leases[id] != nil || c.acquiring[key] > 1 {
		return false
	}
	delete(c.strays, key)
	return true
}

// takeGivenUp reports whether id is a lease this client gave up, and
// forgets it.
func (c *Client) takeGivenUp(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.givenUp[id]
	delete(c.givenUp, id)
	return ok
}

// markReleasing notes lease id as being released until the func it
// returns is called.
func (c *Client) markReleasing(id string) func() {
	c.mu.Lock()
	c.releasing[id]++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.releasing[id]--; c.releasing[id] == 0 {
			delete(c.releasing, id)
		}
		c.mu.Unlock()
	}
}

func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	if c.leases[l.id] == l {
		delete(c.leases, l.id)
	}
	c.mu.Unlock()
}

// pbTTL is how long a grant or renewal in pb lasts from its send time: the
// ttl, or less when the registrar gave less (a derived lease capped at its
// parent's expiry, a lease at its max lifetime), per time_remaining.
func pbTTL(pb *tenurev1.Lease, fallback time.Duration) time.Duration {
	d := pb.GetTtl().AsDuration()
	if d <= 0 {
		d = fallback
	}
	if left := pb.GetTimeRemaining().AsDuration(); left > 0 && left < d {
		d = left
	}
	return d
}

// renewOnce renews one lease by one call (not the heartbeat stream) and
// returns the send time of the attempt that succeeded.
func (c *Client) renewOnce(ctx context.Context, id string, cert bool) (time.Time, *tenurev1.Lease, error) {
	return c.renewAs(ctx, id, c.cfg.holder, cert)
}

// renewAs is renewOnce for a lease of holder.
func (c *Client) renewAs(ctx context.Context, id, holder string, cert bool) (time.Time, *tenurev1.Lease, error) {
	var (
		sent time.Time
		pb   *tenurev1.Lease
	)
	err := c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		now := c.clock.Now()
		resp, err := c.renewRPC(ctx, ep, &tenurev1.RenewRequest{LeaseIds: []string{id}, Holder: holder, Certificate: cert})
		if err != nil {
			return err
		}
		for _, f := range resp.GetFailures() {
			if f.GetLeaseId() == id {
				return failureError(f)
			}
		}
		for _, l := range resp.GetLeases() {
			if l.GetLeaseId() == id {
				sent, pb = now, l
				return nil
			}
		}
		return fmt.Errorf("tenure: renew answered without lease %s", id)
	})
	return sent, pb, err
}

// Renew renews the lease now, outside the heartbeat schedule, and extends
// the trust window from this call's send time. A refusal that ends the lease
// (expired, revoked, limits reached) also closes Done.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	sent, pb, err := l.c.renewOnce(ctx, l.id, l.wantCert)
	if err != nil {
		if fatalRenewal(ReasonOf(err)) {
			l.c.hb.lose(l, err)
		}
		return err
	}
	l.c.hb.confirm(l, sent, pb)
	return nil
}

// RefreshCertificate fetches a certificate for the lease's current state.
func (l *Lease) RefreshCertificate(ctx context.Context) (*Certificate, error) {
	var pb *tenurev1.Lease
	err := l.c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: l.id, Certificate: true}))
		if err == nil {
			pb = resp.Msg.GetLease()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(pb.GetSignature()) == 0 {
		return nil, fmt.Errorf("tenure: registrar returned no certificate for lease %s", l.id)
	}
	l.update(pb, time.Time{})
	return l.Certificate(), nil
}

// Release ends the lease. Heartbeats stop first; then the registrar records
// the release with reason. Release is idempotent on the registrar, so it is
// retried on another endpoint after any transient failure, and releasing a
// lease that already ended succeeds. Afterwards Done is closed and Err is
// ErrReleased; if the registrar answers that the lease had expired or been
// revoked before this release, Err is a *LostError saying so (what a
// lock's Unlock reports); if the release could not be confirmed, Err is a
// *LostError (the lease ends at its expiry at the latest) and Release
// returns why. A release cut short by ctx (already ended, say) goes on in
// the background for a few seconds, and this Client's next Acquire of the
// resource releases the lease if it is still there rather than wait for it.
func (l *Lease) Release(ctx context.Context, reason ReleaseReason) error {
	// Marked before it leaves the client's set, until the registrar
	// confirms: an Acquire of the same resource in another goroutine,
	// whose own outcome was unknown, must not take this lease (still
	// active there) for the one granted to it.
	defer l.c.markReleasing(l.id)()
	l.c.hb.remove(l)
	l.c.forget(l)
	if reason == 0 {
		reason = ReleaseVoluntary
	}
	var pb *tenurev1.Lease
	var already bool
	err := l.c.call(ctx, idempotentCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := l.c.releaseRPC(ctx, ep, &tenurev1.ReleaseRequest{
			LeaseId: l.id, Holder: l.holder, Reason: tenurev1.ReleaseReason(reason),
		})
		if err == nil {
			pb, already = resp.GetLease(), resp.GetAlreadyTerminal()
		}
		return err
	})
	if err != nil {
		// Not confirmed: the registrar may still hold the lease. This
		// Client's next Acquire of the resource releases it rather than
		// wait it out, and when only the caller's ctx ended, the release
		// goes on in the background (bounded) instead of leaving the
		// resource taken, unrenewed, for its ttl.
		l.c.gaveUp(l.id, l.ttl)
		if ctx.Err() != nil && l.c.checkOpen() == nil { // not Close's own releases
			go l.c.releaseOrphanID(l.id, l.holder)
		}
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err) // Close's: ErrClientClosed
		}
		l.end(l.lost(fmt.Errorf("release failed: %w", err)))
		return err
	}
	if pb != nil {
		l.update(pb, time.Time{})
	}
	// Already RELEASED is this release's own retry (or an earlier one);
	// already EXPIRED or REVOKED means the lease was gone before it.
	if st := pb.GetState(); already && (st == tenurev1.State_STATE_EXPIRED || st == tenurev1.State_STATE_REVOKED) {
		l.end(l.lost(fmt.Errorf("tenure: lease %s was already %s when released", l.id, stateWord(st))))
		return nil
	}
	l.end(ErrReleased)
	return nil
}

// stateWord names a terminal state in lower case ("expired").
func stateWord(s tenurev1.State) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATE_"))
}

// Transfer hands the lease over to newHolder: the registrar ends it
// (released, reason TRANSFERRED) and grants newHolder a new lease on the
// resource, with a new id and a higher fence, for ttl (0: this lease's
// ttl). From then on this Lease is done, with Err ErrTransferred; the new
// holder's process takes the returned lease over with Resume (a client of
// that holder). A transfer whose outcome is unknown (OUTCOME_UNKNOWN) is
// not repeated: check with VerifyAll. Task and piece leases cannot be
// transferred (INVALID_ARGUMENT).
func (l *Lease) Transfer(ctx context.Context, newHolder string, ttl time.Duration) (*tenurev1.Lease, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	req := &tenurev1.TransferRequest{LeaseId: l.id, Holder: l.holder, NewHolder: newHolder}
	if ttl != 0 {
		req.Ttl = durationpb.New(ttl)
	}
	var next *tenurev1.Lease
	l.transferring.Store(true)
	err := l.c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.Transfer(ctx, connect.NewRequest(req))
		if err == nil {
			next = resp.Msg.GetLease()
		}
		return err
	})
	if err != nil {
		l.transferring.Store(false)
		return nil, err
	}
	l.c.hb.remove(l)
	l.c.forget(l)
	l.end(ErrTransferred)
	return next, nil
}

// Resume takes over an ACTIVE lease of this holder granted to an earlier run
// of the process (found with VerifyAll after a restart): it renews it now
// and keeps it alive like an acquired lease. The holder must be the one the
// lease was granted to, so give it with WithHolder: the default holder
// names the process (its pid) and differs from run to run.
func (c *Client) Resume(ctx context.Context, leaseID string) (*Lease, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	l, ok := c.leases[leaseID]
	c.mu.Unlock()
	if ok {
		return l, nil
	}
	sent, pb, err := c.renewOnce(ctx, leaseID, false)
	if err != nil {
		return nil, err
	}
	if pb.GetHolder() != c.cfg.holder {
		return nil, fmt.Errorf("tenure: resume %s: the lease is held by %q, not by this client's holder %q", leaseID, pb.GetHolder(), c.cfg.holder)
	}
	l = newLease(c, pb, false)
	trusted := sent.Add(pbTTL(pb, l.ttl) - l.margin)
	l.update(nil, trusted)
	if err := c.track(l, sent, trusted); err != nil {
		return nil, err
	}
	return l, nil
}
