package tenure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Heartbeat tuning. Renewals are due every ttl/3 after the send time of the
// last confirmed one; leases due within ttl/renewCoalesce are renewed in the
// same request, so that leases acquired at slightly different times end up
// sharing requests.
//
// A lease with a renewal limit (max_renewals > 0: every task lease, and any
// lease of a namespace whose policy sets one) is never renewed before it is
// due: coalescing would pull it into the requests of leases due nearby and
// spend its renewals up to twice as fast (a 6 s task lease next to a 1.5 s
// lease was refused after 11 s, not 22 s). It is still due at ttl/3, not
// later: its trust window ends ttl − margin after a renewal is sent, and the
// margin may reach ttl/2, so a renewal at ttl/2 could find the window already
// closing, and would leave little or no room for the two failed renewals
// (each presumed lost after ttl/6) that the ttl/3 schedule absorbs. A lease
// limited to n renewals is thus refused at its (n+1)-th, about (n+1)·ttl/3
// after the grant.
const (
	renewCoalesce   = 6
	maxBatch        = 1000
	minStuckTimeout = 100 * time.Millisecond
	maxReopenDelay  = time.Second
	minRetryDelay   = 20 * time.Millisecond
	outQueue        = 16
	// followAfter is how long after its grant a lease's end is followed on
	// the stream (KeepAliveRequest.follow_lease_ids) when its first
	// renewal is further away: a revocation (a cancelled task) reaches its
	// holder within about this, not at the first renewal, a third of the
	// ttl later; a lease released sooner costs the stream nothing.
	followAfter = 500 * time.Millisecond
)

// heartbeat keeps all leases of a Client alive over one KeepAlive stream.
//
// One goroutine (run) owns every field below changes; others reach it
// through ops, or through changes for the leases acquired and released,
// which callers hand over without waiting for the loop to run them. Each
// renewal request records its send time; a response extends a lease's
// trust window only when it answers a request of the current stream that
// carried that lease, so trust is never extended on a response whose send
// time is unknown. Responses of abandoned streams are dropped.
type heartbeat struct {
	c      *Client
	clock  Clock
	ctx    context.Context
	cancel context.CancelFunc
	ops    chan func()
	// changes is unbuffered: once a send returns, the loop holds the
	// change and applies it before anything else it does.
	changes chan leaseChange
	events  chan streamEvent
	done    chan struct{}
	wg      sync.WaitGroup // stream goroutines

	leases   map[string]*tracked
	wakeAt   time.Time // when the loop's timer fires (zero: stopped)
	stream   *kaStream
	gen      uint64
	pending  map[uint64]*attempt
	nextID   uint64
	failures int       // consecutive stream failures
	reopenAt time.Time // a broken stream is reopened no earlier than this
	rtt      rttEstimate
}

// rttEstimate follows how long renewals take to be answered (RFC 6298's
// smoothed round trip and its variation), so that a renewal is presumed
// lost only past what the network has shown it takes: max(ttl/6, 100 ms)
// alone broke streams, and lost most 2 s leases, on a link of 50 ± 20 ms
// with 2% loss, where a renewal through a follower takes four hops and an
// fsync. Each renewal presumed lost doubles the allowance until an answer
// comes.
type rttEstimate struct {
	srtt, rttvar time.Duration
	backoff      uint // doublings since the last answer
}

func (e *rttEstimate) sample(r time.Duration) {
	if e.srtt == 0 {
		e.srtt, e.rttvar = r, r/2
	} else {
		e.rttvar = (3*e.rttvar + (e.srtt - r).Abs()) / 4
		e.srtt = (7*e.srtt + r) / 8
	}
	e.backoff = 0
}

// timeout is how long a renewal of a lease of ttl may go unanswered
// before its stream is presumed dead: at least max(ttl/6, 100 ms), and at
// most a third of the ttl (the time between renewals), which leaves a
// stalled member's lease the time to fail over (a slow answer, a stalled
// leader's included, raises the estimate for a while).
func (e *rttEstimate) timeout(ttl time.Duration) time.Duration {
	floor := max(ttl/6, minStuckTimeout)
	return min(max(floor, e.srtt+4*e.rttvar)<<min(e.backoff, 4), max(floor, ttl/3))
}

// tracked is the heartbeat's view of one lease.
type tracked struct {
	l         *Lease
	trusted   time.Time // end of the trust window
	nextRenew time.Time
	inflight  uint64 // request id of the unanswered renewal on the current stream
	lastErr   error  // the last renewal problem, reported if the lease is lost
	limited   bool   // the registrar limits its renewals: never renewed early
	// followAt is when to have the current stream follow the lease's end
	// without renewing it (zero: renewed or followed on it already).
	followAt time.Time
}

// attempt is one KeepAlive request in flight.
type attempt struct {
	sent  time.Time
	stuck time.Time // without an answer by then the stream is presumed dead
	ids   []string
}

type kaStream struct {
	gen    uint64
	ep     int
	url    string
	cancel context.CancelFunc
	out    chan *tenurev1.KeepAliveRequest
}

// leaseChange starts tracking a lease (add) or stops (remove).
type leaseChange struct {
	add    *tracked
	remove *Lease
}

type streamEvent struct {
	gen  uint64
	resp *tenurev1.KeepAliveResponse
	err  error
}

func newHeartbeat(c *Client) *heartbeat {
	ctx, cancel := context.WithCancel(context.Background())
	h := &heartbeat{
		c:       c,
		clock:   c.clock,
		ctx:     ctx,
		cancel:  cancel,
		ops:     make(chan func(), 64),
		changes: make(chan leaseChange),
		events:  make(chan streamEvent, 64),
		done:    make(chan struct{}),
		leases:  make(map[string]*tracked),
		pending: make(map[uint64]*attempt),
	}
	go h.run()
	return h
}

// do runs f on the loop and waits for it.
func (h *heartbeat) do(f func()) error {
	ran := make(chan struct{})
	select {
	case h.ops <- func() { f(); close(ran) }:
	case <-h.done:
		return ErrClientClosed
	}
	select {
	case <-ran:
		return nil
	case <-h.done:
		return ErrClientClosed
	}
}

// add starts heartbeating l, whose last confirmed attempt was sent at sent.
// It does not wait for the loop: an Acquire pays no round trip through it.
func (h *heartbeat) add(l *Lease, sent, trusted time.Time) error {
	t := &tracked{l: l, trusted: trusted, nextRenew: sent.Add(l.ttl / 3), limited: renewalLimited(l)}
	if at := sent.Add(min(l.ttl/6, followAfter)); at.Before(t.sendFrom()) {
		t.followAt = at
	}
	return h.change(leaseChange{add: t})
}

func (h *heartbeat) change(c leaseChange) error {
	select {
	case h.changes <- c:
		return nil
	case <-h.done:
		return ErrClientClosed
	}
}

// apply applies a change on the loop and reports whether the loop must
// recompute its timer: a new lease due before the timer fires. (A removed
// lease at most wakes the loop once for nothing.) Unlike a full step, it
// does not scan every lease, which made each Acquire and Release cost
// O(leases) on a client holding many.
func (h *heartbeat) apply(c leaseChange) (rearm bool) {
	if c.remove != nil {
		if t := h.leases[c.remove.id]; t != nil && t.l == c.remove {
			delete(h.leases, c.remove.id)
		}
		return false
	}
	t := c.add
	if t.l.Err() != nil {
		return false
	}
	h.leases[t.l.id] = t
	return h.wakeAt.IsZero() || t.nextRenew.Before(h.wakeAt) || t.trusted.Before(h.wakeAt) ||
		!t.followAt.IsZero() && t.followAt.Before(h.wakeAt)
}

// renewalLimited reports whether the registrar granted l with a renewal
// limit (max_renewals > 0).
func renewalLimited(l *Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pb.GetMaxRenewals() > 0
}

// remove stops heartbeating l (Release): once it returns, no renewal of l
// is sent that was not already in flight.
func (h *heartbeat) remove(l *Lease) { _ = h.change(leaseChange{remove: l}) }

// confirm records a renewal of l sent at sent and confirmed outside the
// stream (Lease.Renew).
func (h *heartbeat) confirm(l *Lease, sent time.Time, pb *tenurev1.Lease) {
	err := h.do(func() {
		if t := h.leases[l.id]; t != nil && t.l == l {
			h.renewed(t, sent, pb)
		}
	})
	if err != nil {
		l.update(pb, time.Time{})
	}
}

// lose ends l with cause.
func (h *heartbeat) lose(l *Lease, cause error) {
	err := h.do(func() {
		if t := h.leases[l.id]; t != nil && t.l == l {
			h.lost(t, cause)
		}
	})
	if err != nil && l.end(l.lost(cause)) {
		h.c.forget(l)
	}
}

// stop ends the loop; leases still tracked are lost with ErrClientClosed.
func (h *heartbeat) stop() {
	h.cancel()
	<-h.done
	h.wg.Wait()
}

func (h *heartbeat) run() {
	defer close(h.done)
	timer := h.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := h.clock.Now()
		h.step(now)
		if h.wakeAt = h.nextWake(); !h.wakeAt.IsZero() {
			timer.Reset(max(h.wakeAt.Sub(now), 0))
		} else {
			timer.Stop()
		}
		if !h.wait(timer) {
			h.shutdown()
			return
		}
	}
}

// wait applies lease changes until something needs a full step, and
// reports false when the client is closing.
func (h *heartbeat) wait(timer Timer) bool {
	for {
		select {
		case <-h.ctx.Done():
			return false
		case c := <-h.changes:
			if h.apply(c) {
				return true
			}
		case f := <-h.ops:
			f()
			return true
		case ev := <-h.events:
			h.handle(ev)
			return true
		case <-timer.C():
			return true
		}
	}
}

func (h *heartbeat) shutdown() {
	h.closeStream()
	for _, t := range h.leases {
		h.lost(t, ErrClientClosed)
	}
}

// step does whatever is due at now: leases whose trust window passed are
// lost, a stream that stopped answering is abandoned, a stream is (re)opened
// when renewals are due, and due renewals are sent.
func (h *heartbeat) step(now time.Time) {
	for _, t := range h.leases {
		if !now.Before(t.trusted) {
			cause := error(ErrTrustWindowPassed)
			if t.lastErr != nil {
				cause = fmt.Errorf("%w (last error: %w)", ErrTrustWindowPassed, t.lastErr)
			}
			h.lost(t, cause)
		}
	}
	for _, a := range h.pending {
		if !now.Before(a.stuck) {
			h.rtt.backoff++
			h.breakStream(now, fmt.Errorf("tenure: keepalive on %s unanswered for %v", h.stream.url, now.Sub(a.sent)))
			break
		}
	}
	due, follow := false, false
	for _, t := range h.leases {
		if t.inflight == 0 && !now.Before(t.nextRenew) {
			due = true
			break
		}
		follow = follow || !t.followAt.IsZero() && !now.Before(t.followAt)
	}
	if !due && !follow {
		return
	}
	if h.stream == nil {
		if now.Before(h.reopenAt) {
			return
		}
		h.openStream(now)
	}
	if due { // (only then are leases due soon pulled into the request)
		h.sendDue(now)
	}
	h.sendFollows(now)
}

// sendFollows has the stream follow the leases due to be followed.
func (h *heartbeat) sendFollows(now time.Time) {
	var ids []string
	for id, t := range h.leases {
		if t.followAt.IsZero() || now.Before(t.followAt) || t.inflight != 0 {
			continue
		}
		ids = append(ids, id)
		if len(ids) == maxBatch {
			h.follow(now, ids)
			ids = nil
		}
	}
	if len(ids) > 0 {
		h.follow(now, ids)
	}
}

// follow sends one follow message: not answered, so not pending.
func (h *heartbeat) follow(now time.Time, ids []string) {
	req := &tenurev1.KeepAliveRequest{FollowLeaseIds: ids, NotifyEnded: true}
	sent := true
	select {
	case h.stream.out <- req:
	default:
		sent = false // the stream is busy: again shortly
	}
	for _, id := range ids {
		if t := h.leases[id]; sent {
			t.followAt = time.Time{}
		} else {
			t.followAt = now.Add(minRetryDelay)
		}
	}
}

// nextWake is the earliest instant step has something to do (zero: none).
func (h *heartbeat) nextWake() time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, t := range h.leases {
		earliest(t.trusted)
		if t.inflight == 0 {
			r := t.nextRenew
			if !t.followAt.IsZero() && t.followAt.Before(r) {
				r = t.followAt
			}
			if h.stream == nil && h.reopenAt.After(r) {
				r = h.reopenAt
			}
			earliest(r)
		}
	}
	for _, a := range h.pending {
		earliest(a.stuck)
	}
	return next
}

// sendDue sends every due renewal, and those due soon, in batches.
func (h *heartbeat) sendDue(now time.Time) {
	var ids []string
	stuck := time.Duration(0)
	for id, t := range h.leases {
		if t.inflight != 0 || now.Before(t.sendFrom()) {
			continue
		}
		ids = append(ids, id)
		if d := h.rtt.timeout(t.l.ttl); stuck == 0 || d < stuck {
			stuck = d
		}
		if len(ids) == maxBatch {
			h.send(now, ids, stuck)
			ids, stuck = nil, 0
			if h.stream == nil {
				return
			}
		}
	}
	if len(ids) > 0 {
		h.send(now, ids, stuck)
	}
}

// send queues one request on the stream. Its send time is taken before the
// request is handed to the sender, which only makes the trust window
// shorter.
func (h *heartbeat) send(now time.Time, ids []string, stuck time.Duration) {
	h.nextID++
	id := h.nextID
	req := &tenurev1.KeepAliveRequest{LeaseIds: ids, RequestId: id, NotifyEnded: true}
	select {
	case h.stream.out <- req:
	default:
		h.breakStream(now, fmt.Errorf("tenure: keepalive on %s is not draining", h.stream.url))
		return
	}
	h.pending[id] = &attempt{sent: now, stuck: now.Add(stuck), ids: ids}
	for _, lid := range ids {
		t := h.leases[lid]
		t.inflight, t.followAt = id, time.Time{} // a renewal follows it too
	}
}

// openStream opens a stream; the leases it has not renewed yet are
// followed on it (the last stream's following ended with it).
func (h *heartbeat) openStream(now time.Time) {
	for _, t := range h.leases {
		t.followAt = now
	}
	ep, idx := h.c.pick()
	ctx, cancel := context.WithCancel(h.ctx)
	h.gen++
	s := &kaStream{gen: h.gen, ep: idx, url: ep.url, cancel: cancel, out: make(chan *tenurev1.KeepAliveRequest, outQueue)}
	h.stream = s
	bidi := ep.lease.KeepAlive(ctx)
	h.c.cfg.logger.Debug("tenure: keepalive stream opened", "endpoint", ep.url)
	h.wg.Go(func() {
		for {
			select {
			case req := <-s.out:
				if err := bidi.Send(req); err != nil {
					if !errors.Is(err, io.EOF) {
						h.report(ctx, streamEvent{gen: s.gen, err: err})
					}
					// On io.EOF the receiver reports the server's error.
					return
				}
			case <-ctx.Done():
				_ = bidi.CloseRequest()
				return
			}
		}
	})
	h.wg.Go(func() {
		defer func() { _ = bidi.CloseResponse() }()
		// Closing the response unblocks Receive once the stream is
		// abandoned: a cancelled context alone was seen to leave it blocked
		// (and Client.Close waiting for it) when the server kept the
		// response open.
		defer context.AfterFunc(ctx, func() { _ = bidi.CloseResponse() })()
		for {
			resp, err := bidi.Receive()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = fmt.Errorf("tenure: keepalive stream on %s ended: %w", s.url, err)
				}
				h.report(ctx, streamEvent{gen: s.gen, err: err})
				return
			}
			if !h.report(ctx, streamEvent{gen: s.gen, resp: resp}) {
				return
			}
		}
	})
}

func (h *heartbeat) report(ctx context.Context, ev streamEvent) bool {
	select {
	case h.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func (h *heartbeat) closeStream() {
	if h.stream == nil {
		return
	}
	h.stream.cancel()
	h.stream = nil
	for id, a := range h.pending {
		for _, lid := range a.ids {
			if t := h.leases[lid]; t != nil && t.inflight == id {
				t.inflight = 0
			}
		}
	}
	clear(h.pending)
}

// breakStream abandons the current stream after err and moves to another
// endpoint: the leader named by a NOT_LEADER error, else the next one. Its
// unanswered renewals are resent on the next stream.
func (h *heartbeat) breakStream(now time.Time, err error) {
	if h.stream == nil {
		return
	}
	from := h.stream.ep
	h.closeStream()
	err = fromConnect(err)
	followed := h.c.failover(from, leaderHint(err))
	h.failures++
	delay := time.Duration(0)
	if !followed && h.failures > 1 {
		delay = min(minStuckTimeout<<(h.failures-2), maxReopenDelay)
	}
	h.reopenAt = now.Add(delay)
	for _, t := range h.leases {
		t.lastErr = err
	}
	h.c.cfg.logger.Debug("tenure: keepalive stream broken", "err", err, "reopen_in", delay)
}

// handle processes one event of a stream.
func (h *heartbeat) handle(ev streamEvent) {
	if h.stream == nil || ev.gen != h.stream.gen {
		return // an abandoned stream
	}
	now := h.clock.Now()
	if ev.err != nil {
		h.breakStream(now, ev.err)
		return
	}
	resp := ev.resp
	a := h.pending[resp.GetRequestId()]
	delete(h.pending, resp.GetRequestId())
	h.failures = 0
	if a != nil {
		h.rtt.sample(now.Sub(a.sent))
		for _, pb := range resp.GetLeases() {
			t := h.leases[pb.GetLeaseId()]
			if t == nil || t.inflight != resp.GetRequestId() {
				continue
			}
			t.inflight = 0
			if pb.GetState() != tenurev1.State_STATE_ACTIVE && pb.GetState() != tenurev1.State_STATE_UNSPECIFIED {
				h.lost(t, fmt.Errorf("tenure: renewal answered state %v", pb.GetState()))
				continue
			}
			h.renewed(t, a.sent, pb)
		}
	}
	notLeader := false
	for _, f := range resp.GetFailures() {
		t := h.leases[f.GetLeaseId()]
		if t == nil {
			continue
		}
		err := failureError(f)
		if a == nil && t.l.transferring.Load() {
			continue // told that this client's own Transfer ended it
		}
		// A failure that ends the lease is final whatever request it
		// answers; any other only delays the next attempt.
		if fatalRenewal(Reason(f.GetReason())) {
			h.lost(t, err)
			continue
		}
		if a != nil && t.inflight == resp.GetRequestId() {
			t.inflight = 0
			t.nextRenew = now.Add(retryDelay(t))
		}
		t.lastErr = err
		notLeader = notLeader || f.GetReason() == string(ReasonNotLeader)
	}
	if a != nil {
		// Ids the response did not mention are retried shortly.
		for _, lid := range a.ids {
			if t := h.leases[lid]; t != nil && t.inflight == resp.GetRequestId() {
				t.inflight = 0
				t.nextRenew = now.Add(retryDelay(t))
			}
		}
	}
	if notLeader {
		h.breakStream(now, ErrNotLeader)
	}
}

// renewed extends t's trust window from the send time of the renewal.
func (h *heartbeat) renewed(t *tracked, sent time.Time, pb *tenurev1.Lease) {
	ttl := pbTTL(pb, t.l.ttl)
	trusted := sent.Add(ttl - t.l.margin)
	if trusted.After(t.trusted) {
		t.trusted = trusted
	}
	if next := sent.Add(ttl / 3); next.After(t.nextRenew) {
		t.nextRenew = next
	}
	t.lastErr = nil
	t.limited = t.limited || pb.GetMaxRenewals() > 0
	t.l.update(pb, t.trusted)
}

// lost ends t with cause and stops tracking it.
func (h *heartbeat) lost(t *tracked, cause error) {
	delete(h.leases, t.l.id)
	if t.inflight != 0 {
		t.inflight = 0
	}
	if t.l.end(t.l.lost(cause)) {
		h.c.cfg.logger.Debug("tenure: lease lost", "lease", t.l.id, "resource", t.l.resource, "cause", cause)
	}
	h.c.forget(t.l)
}

// sendFrom is the earliest instant t may be renewed: ttl/renewCoalesce
// before it is due, to share a request with leases due then, except for a
// lease whose renewals are limited (see the heartbeat tuning above).
func (t *tracked) sendFrom() time.Time {
	if t.limited {
		return t.nextRenew
	}
	return t.nextRenew.Add(-t.l.ttl / renewCoalesce)
}

func retryDelay(t *tracked) time.Duration {
	return max(t.l.ttl/30, minRetryDelay)
}

// fatalRenewal reports whether a renewal refused for reason means the lease
// is over.
func fatalRenewal(r Reason) bool {
	switch r {
	case ReasonLeaseExpired, ReasonLeaseTerminal, ReasonLeaseNotFound, ReasonNotHolder,
		ReasonRenewalLimitExceeded, ReasonLifetimeExceeded:
		return true
	}
	return false
}

// failureError turns a per-lease renewal failure into an *Error.
func failureError(f *tenurev1.RenewFailure) error {
	r := Reason(f.GetReason())
	msg := f.GetMessage()
	if msg == "" {
		msg = string(r) + ": lease " + f.GetLeaseId()
	}
	e := &Error{Reason: r, Message: msg, Metadata: map[string]string{"lease_id": f.GetLeaseId()}}
	if s := Sentinel(r); s != nil {
		e.Code = s.Code
	} else {
		e.Code = connect.CodeUnknown
	}
	return e
}
