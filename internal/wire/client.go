package wire

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// HealthCheckAfter and PingTimeout bound how long a hung member holds
// the calls sent to it: about 4 s. Pings detect a dead connection that
// TCP alone would keep open: a member that hangs (a stopped process, a
// stalled VM, a black hole) is given up after HealthCheckAfter of silence
// and a ping unanswered for PingTimeout. A member's HTTP/2 layer answers
// a ping whatever its Raft log is doing, so a healthy but busy member is
// not mistaken for a hung one.
const (
	HealthCheckAfter = 2 * time.Second
	PingTimeout      = 2 * time.Second
)

// NewHTTPClient is the HTTP client of the Go client and the CLI: HTTP/2
// only, cleartext (h2c) when tc is nil and TLS otherwise, with the
// health check above and Transport's framing.
func NewHTTPClient(tc *tls.Config, dialTimeout time.Duration) *http.Client {
	hc, _ := NewTrackedHTTPClient(tc, dialTimeout)
	return hc
}

// NewTrackedHTTPClient is NewHTTPClient, and the set of the connections it
// dials, for an owner that must close them all when it is done: closing
// idle connections is not enough, since a connection whose last request
// was cancelled an instant before is not idle yet (HTTP/2 forgets a
// cancelled stream in the background), and it would then stay open, with
// its goroutines, until it idles out.
func NewTrackedHTTPClient(tc *tls.Config, dialTimeout time.Duration) (*http.Client, *Conns) {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}
	return newTrackedHTTPClient(tc, d.DialContext)
}

func newTrackedHTTPClient(tc *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Client, *Conns) {
	var p http.Protocols
	if tc != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	conns := &Conns{open: make(map[*trackedConn]struct{})}
	return &http.Client{Transport: Transport(&http.Transport{
		Protocols:         &p,
		TLSClientConfig:   tc,
		ForceAttemptHTTP2: true,
		IdleConnTimeout:   90 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return conns.add(c)
		},
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: HealthCheckAfter,
			PingTimeout:     PingTimeout,
		},
	})}, conns
}

// Conns is the set of the open connections an HTTP client dialed.
type Conns struct {
	mu     sync.Mutex
	open   map[*trackedConn]struct{}
	closed bool
}

func (s *Conns) add(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, set: s}
	s.open[tc] = struct{}{}
	return tc, nil
}

// CloseAll closes every connection still open, and every one dialed from
// now on.
func (s *Conns) CloseAll() {
	s.mu.Lock()
	s.closed = true
	open := s.open
	s.open = nil
	s.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	set  *Conns
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.open, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}
