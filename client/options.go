package tenure

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"sync/atomic"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Clock is the client's one time seam: every deadline of the trust window and
// every heartbeat is measured with it. The default is the real clock, whose
// readings carry Go's monotonic clock, so wall-clock jumps do not move any
// deadline. Tests may substitute a fake; testing/synctest works with the
// default clock.
type Clock interface {
	// Now returns the current time. Only differences between readings are
	// used, never the wall time itself.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the client uses. As with time.Timer since
// Go 1.23, no stale value may be received after Stop or Reset returns.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// Defaults of the client options.
const (
	// DefaultNamespace is used when no namespace is given.
	DefaultNamespace = "default"
	// DefaultMinSafetyMargin is the smallest default safety margin; the
	// default margin is the larger of this and DefaultSafetyFraction of the
	// lease's ttl.
	DefaultMinSafetyMargin = 500 * time.Millisecond
	// DefaultSafetyFraction is the share of the ttl used as the default margin.
	DefaultSafetyFraction = 0.10
	// DefaultRetryBudget bounds how long one call keeps trying other
	// endpoints (see WithRetryBudget).
	DefaultRetryBudget = 15 * time.Second
	// DefaultCloseTimeout bounds how long Close spends releasing leases.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultDialTimeout bounds one TCP/TLS connection attempt.
	DefaultDialTimeout = 3 * time.Second
)

// config is the result of applying the Options of New.
type config struct {
	namespace    string
	token        string
	holder       string
	holderGiven  bool // WithHolder: else the Client's own default
	sharedHolder bool // WithSharedHolder, or WithToken: Acquire never takes a lease it meets for its own
	tlsConfig    *tls.Config
	httpClient   *http.Client
	safetyMargin time.Duration // 0: the default rule
	clock        Clock
	grpc         bool
	logger       *slog.Logger
	retryBudget  time.Duration
	closeTimeout time.Duration
	dialTimeout  time.Duration
	pipeline     bool
}

func defaultConfig() config {
	return config{
		namespace:    DefaultNamespace,
		clock:        realClock{},
		logger:       slog.New(slog.DiscardHandler),
		retryBudget:  DefaultRetryBudget,
		closeTimeout: DefaultCloseTimeout,
		dialTimeout:  DefaultDialTimeout,
		pipeline:     true,
	}
}

// newConfig applies opts to the defaults, checks them and fills in what
// depends on them.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return config{}, err
	}
	cfg.finish()
	return cfg, nil
}

// finish fills in what depends on other options.
func (c *config) finish() {
	if !c.holderGiven {
		c.holder = defaultHolder()
	}
	if c.token != "" {
		c.sharedHolder = true
	}
}

func (c *config) validate() error {
	switch {
	case c.namespace == "":
		return fmt.Errorf("tenure: WithNamespace: namespace must not be empty")
	case c.holderGiven && c.holder == "":
		return fmt.Errorf("tenure: WithHolder: holder must not be empty")
	case len(c.holder) > 128:
		return fmt.Errorf("tenure: WithHolder: holder is %d bytes, at most 128 allowed", len(c.holder))
	case c.safetyMargin < 0:
		return fmt.Errorf("tenure: WithSafetyMargin: margin must not be negative, got %v", c.safetyMargin)
	case c.clock == nil:
		return fmt.Errorf("tenure: WithClock: clock must not be nil")
	case c.retryBudget < 0:
		return fmt.Errorf("tenure: WithRetryBudget: budget must not be negative, got %v", c.retryBudget)
	case c.closeTimeout < 0:
		return fmt.Errorf("tenure: WithCloseTimeout: timeout must not be negative, got %v", c.closeTimeout)
	}
	return nil
}

// clients counts the Clients made in this process without WithHolder.
var clients atomic.Int64

// defaultHolder is user@hostname:pid, so that two processes never share a
// holder identity by accident, and #2, #3, … after it for the second and
// later Clients of the process, so that two Clients do not either.
func defaultHolder() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	h := name + "@" + host + ":" + strconv.Itoa(os.Getpid())
	if n := clients.Add(1); n > 1 {
		h += "#" + strconv.FormatInt(n, 10)
	}
	if len(h) > 128 {
		h = h[len(h)-128:]
	}
	return h
}

// An Option configures a Client; pass options to New.
type Option func(*config)

// WithNamespace sets the namespace used by calls that do not name one
// (default "default").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithToken sends "Authorization: Bearer token" on every request.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithHolder sets the holder identity sent with acquisitions and releases.
// The default is user@hostname:pid (with #2, #3, … for the second and
// later Clients of a process). When the server authenticates requests the
// holder is the authenticated principal, and this should match it.
//
// The holder should be unique to this Client: Acquire recognises its own
// lease by the holder after an unknown outcome (see Client.Acquire). If
// other Clients may use the same holder (replicas started with one name),
// add WithSharedHolder. A Client that meets a grant to its holder made
// well before a request whose answer it lost (another Client's) leaves
// it alone and logs a warning once.
func WithHolder(holder string) Option {
	return func(c *config) { c.holder, c.holderGiven = holder, true }
}

// WithSharedHolder says that other Clients, in this process or others, may
// act as the same holder (with WithToken this is assumed: every process
// given the token is its principal). Acquire then never takes a lease it
// meets on the resource for its own: after an unknown outcome (a leader
// lost, a ctx that ended after the request went out) the lease it may have
// been granted is left to expire, and the resource answers LEASE_HELD
// naming this holder until it does, rather than risk releasing or
// adopting another Client's lease.
func WithSharedHolder() Option { return func(c *config) { c.sharedHolder = true } }

// WithTLS connects with TLS (HTTP/2 over TLS) using cfg. Endpoints without
// a scheme become https://. Without this option the client speaks HTTP/2
// cleartext (h2c).
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tlsConfig = cfg } }

// WithHTTPClient uses hc for every call instead of a client built by New. It
// must speak HTTP/2 (KeepAlive and Watch are streams). The Client does not
// close hc's connections on Close.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithSafetyMargin sets the safety margin subtracted from the ttl to form
// the trust window (see the package documentation). The default (also what
// 0 gives) is the larger of 500 ms and 10% of each lease's ttl. Whatever the source, the
// margin is capped at half the lease's ttl, so a lease is trusted for at
// least ttl/2 after each confirmed renewal attempt.
func WithSafetyMargin(d time.Duration) Option { return func(c *config) { c.safetyMargin = d } }

// WithClock replaces the real clock (tests).
func WithClock(clk Clock) Option { return func(c *config) { c.clock = clk } }

// WithGRPC speaks the gRPC protocol instead of the Connect protocol. Both
// use the binary protobuf codec.
func WithGRPC() Option { return func(c *config) { c.grpc = true } }

// WithLogger receives debug records of heartbeats, failovers and lost
// leases. The default (and a nil logger) discards them.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler) // nil: no logging, as by default
		}
		c.logger = l
	}
}

// WithRetryBudget bounds how long one unary call keeps retrying on other
// endpoints (during a leader election, for instance) before returning the
// last error, counted from its first failed attempt (a wait in the
// registrar's queue before it does not count). The call's context bounds
// it too. Zero disables retries.
func WithRetryBudget(d time.Duration) Option { return func(c *config) { c.retryBudget = d } }

// WithCloseTimeout bounds how long Close spends releasing the leases it
// still holds (default 5 s). Zero releases none: they end at their expiry,
// as after a crash.
func WithCloseTimeout(d time.Duration) Option { return func(c *config) { c.closeTimeout = d } }

// WithoutPipeline makes every call one unary RPC. By default Acquire and
// Claim without a wait, Renew, Release, Complete, Fail, RequestLeases and
// CompletePiece share a Pipeline stream per endpoint and service, many in flight at once, which is much
// cheaper for the server and the client when many goroutines share a
// Client; an endpoint that does not serve Pipeline is detected and gets
// unary calls anyway. Use this behind proxies that break long-lived
// bidirectional HTTP/2 streams.
func WithoutPipeline() Option { return func(c *config) { c.pipeline = false } }

// WithDialTimeout bounds one connection attempt (default 3 s) when New builds
// the HTTP client.
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// marginFor is the safety margin of a lease with the given ttl.
func (c *config) marginFor(ttl time.Duration) time.Duration {
	m := c.safetyMargin
	if m == 0 {
		m = max(DefaultMinSafetyMargin, time.Duration(float64(ttl)*DefaultSafetyFraction))
	}
	return min(m, ttl/2)
}

// Mode is how a lease holds its resource. A Mode is also an AcquireOption.
type Mode int32

const (
	// Exclusive: one holder at a time (the default).
	Exclusive Mode = Mode(tenurev1.Mode_MODE_EXCLUSIVE)
	// Shared: any number of shared holders, never alongside an exclusive one.
	Shared Mode = Mode(tenurev1.Mode_MODE_SHARED)
)

// String returns "exclusive", "shared", or "Mode(n)" for another value.
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

func (m Mode) applyAcquire(a *acquireConfig) { a.mode = m }

// acquireConfig is the result of applying AcquireOptions.
type acquireConfig struct {
	namespace   string
	ttl         time.Duration
	mode        Mode
	wait        time.Duration
	certificate bool
	scope       Scope
	budget      Budget
}

// An AcquireOption configures one Acquire: TTL, Wait, Namespace, RequestCertificate,
// WithScope, WithBudget, or a Mode (Exclusive, Shared).
type AcquireOption interface{ applyAcquire(*acquireConfig) }

// A CallOption configures a call that names a resource: Namespace, and
// for Watch, WatchProgress.
type CallOption interface{ applyCall(*callConfig) }

type callConfig struct {
	namespace string
	// Watch's progress notifications (WatchProgress).
	progressInterval time.Duration
	onProgress       func(index uint64) error
}

type callFunc func(*callConfig)

func (f callFunc) applyCall(c *callConfig) { f(c) }

// WatchProgress asks a Watch for progress notifications: when the server
// has sent nothing for interval (between 100 ms and 1 h; others are
// ErrInvalidArgument), it says how far the watch has got, and fn is
// called with that ledger index, every event up to which has been given
// to Watch's fn. A watch resumed from there misses nothing; Watch itself
// resumes a broken stream from there. An error from fn ends the Watch with
// it. fn may be nil, to keep an idle stream alive through proxies. Other
// calls ignore it.
func WatchProgress(interval time.Duration, fn func(index uint64) error) CallOption {
	return callFunc(func(c *callConfig) { c.progressInterval, c.onProgress = interval, fn })
}

type acquireFunc func(*acquireConfig)

func (f acquireFunc) applyAcquire(a *acquireConfig) { f(a) }

// TTL sets the lease's ttl; without it the namespace policy's default applies
// (60 s unless configured). The registrar refuses a ttl outside the policy's
// range with ErrTTLOutOfRange.
// TTL is also a DeriveOption; a derived lease's expiry is capped at its
// parent's.
func TTL(d time.Duration) TTLOption { return TTLOption(d) }

// TTLOption sets a lease's ttl: an AcquireOption and a DeriveOption.
type TTLOption time.Duration

func (t TTLOption) applyAcquire(a *acquireConfig) { a.ttl = time.Duration(t) }

// Wait makes Acquire queue for up to d in the resource's FIFO wait queue
// when it is held, instead of failing at once with ErrLeaseHeld. The call's
// context must outlive d.
func Wait(d time.Duration) AcquireOption {
	return acquireFunc(func(a *acquireConfig) { a.wait = d })
}

// RequestCertificate asks the registrar for a lease certificate with the
// grant and with every renewal (see Lease.Certificate).
func RequestCertificate() AcquireOption {
	return acquireFunc(func(a *acquireConfig) { a.certificate = true })
}

// NamespaceOption names the namespace of one call. It is both an
// AcquireOption and a CallOption.
type NamespaceOption string

// Namespace overrides the client's namespace for one call; "" names the
// default namespace, as in the API.
func Namespace(ns string) NamespaceOption { return NamespaceOption(ns) }

func (n NamespaceOption) applyAcquire(a *acquireConfig) { a.namespace = string(n) }
func (n NamespaceOption) applyCall(c *callConfig)       { c.namespace = string(n) }

func (c *Client) callConfig(opts []CallOption) callConfig {
	cc := callConfig{namespace: c.cfg.namespace}
	for _, o := range opts {
		if o != nil {
			o.applyCall(&cc)
		}
	}
	return cc
}
