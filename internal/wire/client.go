package wire

import (
	"crypto/tls"
	"net"
	"net/http"
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
	var p http.Protocols
	if tc != nil {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: Transport(&http.Transport{
		Protocols:         &p,
		TLSClientConfig:   tc,
		ForceAttemptHTTP2: true,
		IdleConnTimeout:   90 * time.Second,
		DialContext:       (&net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: HealthCheckAfter,
			PingTimeout:     PingTimeout,
		},
	})}
}
