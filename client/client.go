package tenure

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/wire"
)

// Client talks to a Tenure cluster through any of its endpoints. It keeps one
// KeepAlive stream for the heartbeats of all its leases and fails over
// between endpoints. A Client is safe for concurrent use; make one per
// process (per holder identity) and Close it when done.
type Client struct {
	cfg        config
	clock      Clock
	httpClient *http.Client
	ownHTTP    bool
	conns      *wire.Conns // the connections of an own httpClient
	connOpts   []connect.ClientOption

	mu        sync.Mutex
	endpoints []*endpoint
	current   int // index of the endpoint believed to be the leader
	closed    bool
	leases    map[string]*Lease    // active leases of this client by id
	acquiring map[string]int       // Acquire calls in flight per namespace + resource
	claiming  map[string]int       // Claim calls in flight per namespace + queue
	givenUp   map[string]time.Time // leases given up for lost (gaveUp), until when to remember them
	strays    map[string]time.Time // namespace + resource of Acquires that ended after sending, until when
	// sharedWarned is set once the client has warned that another Client
	// uses its holder (foreignGrant).
	sharedWarned atomic.Bool
	releasing    map[string]int // leases being released (Release), not yet confirmed: never adopted
	calls        int            // calls and streams running under untilClose
	callsDone    chan struct{}  // closed when calls reaches 0, if Close waits for it

	hb *heartbeat

	// synced is when the member list was last asked for (syncMembers);
	// syncing says a sync runs, in syncs.
	synced  time.Time
	syncing bool
	syncs   sync.WaitGroup

	// pipeCtx bounds the endpoints' Pipeline streams (pipeline.go).
	pipeCtx    context.Context
	pipeCancel context.CancelFunc
	// shut ends, with cause ErrClientClosed, once Close has released the
	// leases: calls then refuse to start and those running (a long-poll, a
	// queued acquire) end.
	shut     context.Context
	shutDown context.CancelCauseFunc
	// waits ends, with cause ErrClientClosed, when Close begins: the
	// Acquires queued at the registrar (a Lock, a Campaign) are withdrawn
	// before Close releases the leases, which would otherwise be handed
	// to them. waiting counts those Acquires; waitsDone is closed when it
	// reaches 0, if Close waits for it.
	waits     context.Context
	stopWaits context.CancelCauseFunc
	waiting   int
	waitsDone chan struct{}
}

// endpoint is one member's API address and its service clients.
type endpoint struct {
	url     string
	lease   tenurev1connect.LeaseServiceClient
	cluster tenurev1connect.ClusterServiceClient
	queue   tenurev1connect.QueueServiceClient
	pool    tenurev1connect.PoolServiceClient

	leasePipe leasePipe
	queuePipe queuePipe
	poolPipe  poolPipe
}

// New returns a client for the cluster reachable at endpoints: API
// addresses such as "127.0.0.1:7070" (h2c, or https:// with WithTLS) or full
// URLs ("http://10.0.0.5:7070", "https://tenure.example:443"). Any member
// will do; the client finds the leader from NOT_LEADER answers. New does not
// contact the server.
func New(endpoints []string, opts ...Option) (*Client, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if len(endpoints) == 0 {
		return nil, errors.New("tenure: New: at least one endpoint is required")
	}
	c := &Client{
		cfg:       cfg,
		clock:     cfg.clock,
		leases:    make(map[string]*Lease),
		acquiring: make(map[string]int),
		claiming:  make(map[string]int),
		givenUp:   make(map[string]time.Time),
		strays:    make(map[string]time.Time),
		releasing: make(map[string]int),
	}
	if cfg.httpClient == nil {
		cfg.tlsConfig = autoTLS(cfg.tlsConfig, endpoints)
		c.cfg.tlsConfig = cfg.tlsConfig
	}
	c.httpClient = cfg.httpClient
	if c.httpClient == nil {
		c.httpClient, c.conns = wire.NewTrackedHTTPClient(cfg.tlsConfig, cfg.dialTimeout)
		c.ownHTTP = true
	}
	c.connOpts = append(c.connOpts, connect.WithCodec(wire.Codec{}), connect.WithInterceptors(consistency{}))
	if cfg.grpc {
		c.connOpts = append(c.connOpts, connect.WithGRPC())
	}
	if cfg.token != "" {
		c.connOpts = append(c.connOpts, connect.WithInterceptors(bearer(cfg.token)))
	}
	seen := make(map[string]bool)
	for _, e := range endpoints {
		u, err := c.normalize(e)
		if err != nil {
			return nil, err
		}
		if !seen[u] {
			seen[u] = true
			c.endpoints = append(c.endpoints, c.newEndpoint(u))
		}
	}
	c.pipeCtx, c.pipeCancel = context.WithCancel(context.Background())
	c.shut, c.shutDown = context.WithCancelCause(context.Background())
	c.waits, c.stopWaits = context.WithCancelCause(context.Background())
	c.hb = newHeartbeat(c)
	return c, nil
}

// autoTLS is the TLS configuration for endpoints: tc when given, else,
// when an endpoint is an https:// URL, one that trusts the system's CAs
// (such an endpoint needs TLS even without WithTLS), else nil.
func autoTLS(tc *tls.Config, endpoints []string) *tls.Config {
	if tc != nil {
		return tc
	}
	for _, e := range endpoints {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(e)), "https://") {
			return &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	return nil
}

// newHTTPClient speaks HTTP/2 only: cleartext (h2c) by default, TLS with
// WithTLS. Its pings give up a hung member after about 4 s of silence
// (wire.HealthCheckAfter, wire.PingTimeout; it was 15 s, the whole default
// retry budget, so a read failed instead of moving on), and its calls fail
// over.
func newHTTPClient(cfg *config) *http.Client {
	return wire.NewHTTPClient(cfg.tlsConfig, cfg.dialTimeout)
}

func (c *Client) normalize(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if err := CheckEndpoint(addr); err != nil {
		return "", err
	}
	if !strings.Contains(addr, "://") {
		if c.cfg.tlsConfig != nil {
			addr = "https://" + addr
		} else {
			addr = "http://" + addr
		}
	}
	return strings.TrimRight(addr, "/"), nil
}

// CheckEndpoint reports whether addr is an endpoint New accepts:
// host:port, or an http or https URL with a host (the port may be left to
// the scheme) and no path, query or user.
func CheckEndpoint(addr string) error {
	bad := func(why string) error {
		return fmt.Errorf("tenure: endpoint %q %s: want host:port or an http(s)://host[:port] URL", addr, why)
	}
	if addr == "" {
		return errors.New("tenure: empty endpoint")
	}
	if strings.Contains(addr, ",") {
		return bad("lists several endpoints in one: give each as its own entry")
	}
	if !strings.Contains(addr, "://") {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return bad("has no port")
		}
		if host == "" || strings.ContainsAny(host, " /,") {
			return bad("has no valid host")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("has no valid port")
		}
		return nil
	}
	u, err := url.Parse(addr)
	switch {
	case err != nil:
		return bad("does not parse")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("is not http or https")
	case u.Hostname() == "" || strings.ContainsAny(u.Hostname(), " ,"):
		return bad("has no valid host")
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil:
		return bad("has a path, query or user")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad("has no valid port")
		}
	}
	return nil
}

func (c *Client) newEndpoint(url string) *endpoint {
	ep := &endpoint{
		url:     url,
		lease:   tenurev1connect.NewLeaseServiceClient(c.httpClient, url, c.connOpts...),
		cluster: tenurev1connect.NewClusterServiceClient(c.httpClient, url, c.connOpts...),
		queue:   tenurev1connect.NewQueueServiceClient(c.httpClient, url, c.connOpts...),
		pool:    tenurev1connect.NewPoolServiceClient(c.httpClient, url, c.connOpts...),
	}
	newPipes(c, ep)
	return ep
}

// Holder returns the holder identity this client acquires leases as.
func (c *Client) Holder() string { return c.cfg.holder }

// Namespace returns the client's default namespace.
func (c *Client) Namespace() string { return c.cfg.namespace }

// Endpoints returns the endpoint URLs the client knows, including leaders it
// learned about from NOT_LEADER answers.
func (c *Client) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.endpoints))
	for i, e := range c.endpoints {
		out[i] = e.url
	}
	return out
}

// Close withdraws the Acquires queued at the registrar (a Lock, a
// Campaign: they return ErrClientClosed), releases every lease the client
// still holds (their Err becomes ErrReleased; one that cannot be released
// within the close timeout ends with a LostError whose cause is
// ErrClientClosed) and any lease granted to a withdrawn Acquire, then ends
// the calls still running (a long-poll Claim) with ErrClientClosed,
// stops the heartbeats and closes the connections. Calls made after Close
// return ErrClientClosed. Close is idempotent; it returns the release
// errors. A claimed task whose lease Close releases goes back to its queue
// with its attempt not counted (only an expiry, or Fail, counts one): a
// process that exits through Close on every attempt of a task never makes
// it dead, so Fail a task that cannot be done rather than close over it.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()

	ctx, cancel := context.WithTimeoutCause(context.Background(), c.cfg.closeTimeout, closeTimedOut(c.cfg.closeTimeout))
	// Withdraw the queued Acquires first: releasing a lease hands the
	// resource to the first waiter, which could be one of this Client's,
	// whose grant nobody would take up.
	c.stopWaits(ErrClientClosed)
	c.awaitWaits(ctx)
	c.mu.Lock()
	held := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		held = append(held, l)
	}
	// The keys whose grants may be strays, taken before the releases: the
	// withdrawn Acquire's own look for its stray may find the lease this
	// Close is releasing, take it for the stray and forget the key, while
	// the grant the release hands to the withdrawn waiter comes after
	// (found by CI under load: that grant was left for its ttl).
	strays := make([]string, 0, len(c.strays))
	for key := range c.strays {
		strays = append(strays, key)
	}
	c.mu.Unlock()

	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i, l := range held {
		if l.Err() != nil {
			continue
		}
		wg.Go(func() {
			if err := l.Release(ctx, ReleaseVoluntary); err != nil {
				errs[i] = fmt.Errorf("tenure: releasing lease %s on %s: %w (it ends at its expiry)", l.ID(), l.Resource(), err)
			}
		})
	}
	wg.Wait()
	// A withdrawn Acquire may still have been granted (a release crossed
	// the withdrawal): give such grants back while calls can still be made.
	if !c.cfg.sharedHolder {
		for _, key := range strays {
			if ns, resource, ok := strings.Cut(key, "\x00"); ok && ctx.Err() == nil {
				c.releaseStrayLease(ns, resource, key, time.Time{})
			}
		}
	}
	cancel()
	c.shutDown(ErrClientClosed)
	c.syncs.Wait()
	c.hb.stop()
	c.pipeCancel()
	c.closePipes() // waits for the streams to end, so that their connections are idle
	if c.ownHTTP {
		// A Watch or Observe whose handler is slow to return leaves its
		// connection open (until it idles out) after a second.
		c.awaitCalls(time.Second)
		c.httpClient.CloseIdleConnections()
		// A connection whose last call was cancelled just now (a
		// background member sync cut short by Close, say) is not idle
		// yet: close it too, or it stays open until it idles out.
		c.conns.CloseAll()
	}
	return errors.Join(errs...)
}

func (c *Client) checkOpen() error {
	if c.shut.Err() != nil {
		return ErrClientClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClientClosed
	}
	return nil
}

// pick returns the endpoint believed to be the leader and its index.
// endpointCount is the number of endpoints the client knows.
func (c *Client) endpointCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.endpoints)
}

func (c *Client) pick() (*endpoint, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endpoints[c.current], c.current
}

// failover moves away from endpoint from: to the leader named by hint when
// there is one, else to the next endpoint (unless another caller already
// moved). It reports whether it followed a hint to a different endpoint.
func (c *Client) failover(from int, hint string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hint != "" {
		if u, err := c.normalize(hint); err == nil {
			for i, e := range c.endpoints {
				if e.url == u {
					c.current = i
					return i != from
				}
			}
			c.endpoints = append(c.endpoints, c.newEndpoint(u))
			c.current = len(c.endpoints) - 1
			c.cfg.logger.Debug("tenure: learned leader endpoint", "url", u)
			return true
		}
	}
	if c.current == from {
		c.current = (from + 1) % len(c.endpoints)
	}
	return false
}

// memberSyncEvery bounds how often a client asks for the member list.
const memberSyncEvery = 30 * time.Second

// syncMembers learns, in the background, the API addresses of the members
// that ep (which just answered) knows of, at most every memberSyncEvery:
// a client given one member's address can then fail over when that member
// goes away (a follower forwards every call, so no NOT_LEADER ever names
// the others).
func (c *Client) syncMembers(ep *endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.syncing || !c.synced.IsZero() && c.clock.Now().Sub(c.synced) < memberSyncEvery {
		return
	}
	c.syncing = true
	c.syncs.Go(func() {
		ctx, cancel := context.WithTimeout(c.shut, 2*time.Second)
		defer cancel()
		resp, err := ep.cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		c.mu.Lock()
		defer c.mu.Unlock()
		c.syncing, c.synced = false, c.clock.Now()
		if err != nil {
			return
		}
	members:
		for _, m := range resp.Msg.GetMembers() {
			u, err := c.normalize(m.GetApiAddress())
			if m.GetApiAddress() == "" || err != nil {
				continue
			}
			for _, e := range c.endpoints {
				if e.url == u {
					continue members
				}
			}
			c.endpoints = append(c.endpoints, c.newEndpoint(u))
			c.cfg.logger.Debug("tenure: learned member endpoint", "member", m.GetId(), "url", u)
		}
	})
}

// callKind says when a unary call may be repeated on another endpoint.
type callKind int

const (
	// readCall: after any transient failure (a read changes nothing).
	readCall callKind = iota
	// writeCall: only when nothing was proposed: NOT_LEADER, or a connection
	// that was never made. OUTCOME_UNKNOWN is returned to the caller.
	writeCall
	// idempotentCall: a write whose repetition is harmless (Release, Renew),
	// retried like a read.
	idempotentCall
)

// call runs fn against the current endpoint and, when kind allows, against
// others, for up to the retry budget and while ctx lasts. fn's error is
// returned as parsed by fromConnect.
func (c *Client) call(ctx context.Context, kind callKind, fn func(context.Context, *endpoint) error) (err error) {
	if c.shut.Err() != nil {
		return ErrClientClosed
	}
	ctx, done := c.untilClose(ctx)
	defer done(&err)
	// The budget counts from the first failure, not from the call's
	// start: an Acquire or Claim that waited in the registrar's queue for
	// longer than the budget, and lost its leader then, still retries.
	var failing time.Time
	backoff := 25 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ep, idx := c.pick()
		err := fromConnect(fn(ctx, ep))
		if err == nil {
			c.syncMembers(ep)
			return nil
		}
		if ctx.Err() != nil {
			return whileEnded(ctx, ep.url, err)
		}
		if !retryable(kind, err) {
			return sentWrite(kind, err)
		}
		if failing.IsZero() {
			failing = c.clock.Now()
		}
		followed := c.failover(idx, leaderHint(err))
		if c.clock.Now().Sub(failing) >= c.cfg.retryBudget {
			return unreached(sentWrite(kind, err))
		}
		c.mu.Lock()
		n := len(c.endpoints)
		c.mu.Unlock()
		if n > 1 {
			c.cfg.logger.Debug("tenure: retrying on another endpoint", "from", ep.url, "err", err)
		} else {
			c.cfg.logger.Debug("tenure: retrying", "endpoint", ep.url, "err", err)
		}
		// Go straight to a named leader and through the list once; after
		// that (an election in progress, everyone down) back off.
		if followed || attempt < n {
			continue
		}
		if sleep(ctx, c.clock, backoff) != nil {
			return whileEnded(ctx, ep.url, err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

// closeTimedOut is the cause of a release Close gave up on: it says
// so, and is ErrClientClosed (errors.Is) as Close's documentation has it.
type closeTimedOut time.Duration

func (e closeTimedOut) Error() string {
	return fmt.Sprintf("tenure: Close gave up after %v (WithCloseTimeout)", time.Duration(e))
}

func (closeTimedOut) Unwrap() error { return ErrClientClosed }

// whileEnded is the error of a call to url whose context ended while it
// tried: the last attempt's error, which says more than ctx's, but
// matching ctx's too (errors.Is(err, context.DeadlineExceeded)), and
// naming the member when the error says nothing else (one that does not
// answer at all).
func whileEnded(ctx context.Context, url string, err error) error {
	cause := context.Cause(ctx)
	switch {
	case cause == nil:
		return err
	case errors.Is(err, cause):
		if err.Error() == cause.Error() || strings.HasSuffix(err.Error(), ": "+cause.Error()) {
			return fmt.Errorf("%w (waiting for %s)", err, url)
		}
		return err
	case strings.Contains(err.Error(), cause.Error()):
		return &ended{err, cause, ""}
	}
	return &ended{err, cause, " (" + cause.Error() + ")"}
}

// ended is a call's last error joined with its context's cause.
type ended struct {
	err, cause error
	note       string // the cause, when err does not say it already
}

func (e *ended) Error() string   { return e.err.Error() + e.note }
func (e *ended) Unwrap() []error { return []error{e.err, e.cause} }

// untilClose derives from ctx a context that also ends, with cause
// ErrClientClosed, when Close shuts the client down; done turns the error
// of a call that ended so into ErrClientClosed, and frees the context.
func (c *Client) untilClose(ctx context.Context) (context.Context, func(err *error)) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.shut, func() { cancel(ErrClientClosed) })
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return ctx, func(err *error) {
		stop()
		if *err != nil && context.Cause(ctx) == ErrClientClosed { // not Close's own timeout
			*err = ErrClientClosed
		}
		cancel(nil)
		c.mu.Lock()
		if c.calls--; c.calls == 0 && c.callsDone != nil {
			close(c.callsDone)
			c.callsDone = nil
		}
		c.mu.Unlock()
	}
}

// awaitWaits waits, until ctx ends, for the Acquires queued at the
// registrar to return (Close has ended their contexts).
func (c *Client) awaitWaits(ctx context.Context) {
	c.mu.Lock()
	var done chan struct{}
	if c.waiting > 0 {
		done = make(chan struct{})
		c.waitsDone = done
	}
	c.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// untilWaitsStop derives from ctx, for an Acquire that waits in the
// registrar's queue, a context that also ends, with cause ErrClientClosed,
// when Close begins.
func (c *Client) untilWaitsStop(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.waits, func() { cancel(ErrClientClosed) })
	c.mu.Lock()
	c.waiting++
	c.mu.Unlock()
	return ctx, func() {
		stop()
		cancel(nil)
		c.mu.Lock()
		if c.waiting--; c.waiting == 0 && c.waitsDone != nil {
			close(c.waitsDone)
			c.waitsDone = nil
		}
		c.mu.Unlock()
	}
}

// awaitCalls waits, at most d, for the calls and streams running under
// untilClose to return (Close has ended their contexts), so that their
// connections are idle when Close closes the idle ones.
func (c *Client) awaitCalls(d time.Duration) {
	c.mu.Lock()
	var done chan struct{}
	if c.calls > 0 {
		done = make(chan struct{})
		c.callsDone = done
	}
	c.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// retryable reports whether err allows repeating a call of kind elsewhere.
func retryable(kind callKind, err error) bool {
	switch ReasonOf(err) {
	case ReasonNotLeader, ReasonUnavailable: // nothing was proposed
		return true
	case ReasonOutcomeUnknown:
		return kind != writeCall
	case "":
		if notSent(err) {
			return true
		}
		if kind == writeCall {
			return false
		}
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal:
			return true
		}
	}
	return false
}

// sentWrite is the error of a write whose request went out and broke off
// without an answer (a connection reset, a member killed mid-call): the
// write may have been applied, and the error says so as the server's own
// OUTCOME_UNKNOWN does (errors.Is(err, ErrOutcomeUnknown)), with the
// transport's error as its cause. Any other error, and any error of a
// read or of an idempotent write (retried, and read by its callers as a
// transport error), is returned as it is.
func sentWrite(kind callKind, err error) error {
	if kind != writeCall || ReasonOf(err) != "" || !outcomeUnknown(err) {
		return err
	}
	return unknownOutcome(err)
}

// unreached is err as an UNAVAILABLE when no member could be reached at
// all (the request was never sent: errors.Is(err, ErrUnavailable), and
// ReasonOf says so), with the transport's error as its cause; any other
// error is returned as it is.
func unreached(err error) error {
	if ReasonOf(err) != "" || !notSent(err) {
		return err
	}
	return newError(ReasonUnavailable, string(ReasonUnavailable)+": no member could be reached ("+err.Error()+
		"); nothing was sent", nil, connect.CodeUnavailable, err)
}

// unknownOutcome is err as an OUTCOME_UNKNOWN: the request was sent and
// may or may not have been applied.
func unknownOutcome(err error) error {
	if ReasonOf(err) == ReasonOutcomeUnknown {
		return err
	}
	return newError(ReasonOutcomeUnknown, string(ReasonOutcomeUnknown)+": "+err.Error()+
		"; the request was sent and may or may not have been applied", nil, connect.CodeUnavailable, err)
}

// outcomeUnknown reports whether a write that failed with err may have been
// applied anyway.
func outcomeUnknown(err error) bool {
	switch ReasonOf(err) {
	case ReasonOutcomeUnknown, ReasonDeadlineExceeded, ReasonCanceled:
		return true
	case "":
		if notSent(err) {
			return false
		}
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal,
			connect.CodeDeadlineExceeded, connect.CodeCanceled:
			return true
		}
	}
	return false
}

// sleep waits d on clk, or until ctx ends.
func sleep(ctx context.Context, clk Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bearer adds "Authorization: Bearer <token>" to every request.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
