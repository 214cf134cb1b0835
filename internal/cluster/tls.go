package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/registrar"
)

// RaftTLS secures the Raft transport with mutual TLS 1.3: every member
// presents its certificate on both ends of every connection, and both
// ends require the other's to chain to the cluster CA. Host names are not
// checked (members are addressed by host:port, often IPs): the CA itself
// is the trust boundary, so it should sign member certificates only.
type RaftTLS struct {
	server, client *tls.Config
}

// LoadRaftTLS reads a member's certificate and key and the cluster CA
// (PEM files, as --raft-tls-cert, --raft-tls-key and --raft-tls-ca).
func LoadRaftTLS(certFile, keyFile, caFile string) (*RaftTLS, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("raft TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("raft TLS CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("raft TLS CA %s: no PEM certificate in it", caFile)
	}
	return NewRaftTLS(cert, roots), nil
}

// NewRaftTLS builds the transport security from a member certificate and
// the pool of CAs that member certificates must chain to.
func NewRaftTLS(cert tls.Certificate, roots *x509.CertPool) *RaftTLS {
	verify := func(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("raft TLS: the peer presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
			if err != nil {
				return fmt.Errorf("raft TLS: peer certificate: %w", err)
			}
			return nil
		}
	}
	return &RaftTLS{
		server: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    roots,
		},
		client: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			// The chain is verified below, without a host name.
			InsecureSkipVerify: true,
			VerifyConnection:   verify(x509.ExtKeyUsageServerAuth),
		},
	}
}

// handshakeTimeout bounds a TLS handshake on the Raft port, so that a
// peer that connects and stalls holds nothing for long.
const handshakeTimeout = 10 * time.Second

// Before handing a connection to Raft, the stream layer reads its first
// byte: Raft's RPC types are small numbers; probeByte instead asks "do
// you accept my certificate, and I yours?", answered with probeOK and a
// close. A leader probes a member before adding it (Node.AddVoter).
const (
	probeByte byte = 0xF7
	probeOK   byte = 0x01
)

// tlsAccept is the accepting half of a TLS stream layer: it handshakes
// each connection in its own goroutine (a stalled peer does not block the
// others), drops those that fail, answers probes, and queues the rest
// for Raft.
type tlsAccept struct {
	cfg   *RaftTLS
	log   *slog.Logger
	ready chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (s *streamLayer) startTLS(t *RaftTLS, log *slog.Logger) {
	a := &tlsAccept{cfg: t, log: log, ready: make(chan net.Conn), done: make(chan struct{})}
	s.accept = a
	go a.loop(s.Listener)
}

func (a *tlsAccept) loop(ln net.Listener) {
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			a.once.Do(func() { close(a.done) })
			return
		}
		if err != nil {
			// Out of file descriptors and the like: wait, as Raft's own
			// accept loop does, rather than stop accepting for good.
			a.log.Warn("raft TLS: accepting a connection", "err", err, "backoff", backoff)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		go a.handshake(c)
	}
}

func (a *tlsAccept) handshake(raw net.Conn) {
	c := tls.Server(raw, a.cfg.server)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	err := c.HandshakeContext(ctx)
	var first []byte
	br := bufio.NewReaderSize(c, 4096)
	if err == nil {
		first, err = br.Peek(1)
	}
	if err != nil {
		a.log.Warn("raft TLS: refused a connection", "remote", raw.RemoteAddr().String(), "err", err)
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if first[0] == probeByte {
		_, _ = c.Write([]byte{probeOK})
		_ = c.Close()
		return
	}
	select {
	case a.ready <- &bufferedConn{Conn: c, r: br}:
	case <-a.done:
		_ = c.Close()
	}
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (s *streamLayer) acceptTLS() (net.Conn, error) {
	select {
	case c := <-s.accept.ready:
		return c, nil
	case <-s.accept.done:
		return nil, net.ErrClosed
	}
}

// dialTLS secures a dialed connection, handshaking within timeout.
func (s *streamLayer) dialTLS(conn net.Conn, timeout time.Duration) (net.Conn, error) {
	c := tls.Client(conn, s.tls.client)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, &handshakeError{err}
	}
	return c, nil
}

// handshakeError is a TLS handshake that failed after the TCP connect.
type handshakeError struct{ err error }

func (e *handshakeError) Error() string { return "raft TLS handshake: " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// probe checks, before a member is added, that the member at addr holds
// a certificate of the cluster CA and accepts this node's: a handshake
// followed by the probe byte, which the member answers only once it has
// verified this node's certificate (TLS 1.3 checks the client's
// certificate after the client's handshake is done). Without TLS, that
// a member's Raft port answers there (probedConn), not something else.
func (s *streamLayer) probe(addr raft.ServerAddress, timeout time.Duration) error {
	check := "Raft TLS check"
	if s.tls == nil {
		check = "Raft check (it does not answer as a Tenure member's Raft port)"
	}
	refused := func(err error) error {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// Slow or gone: the caller may retry (a join does).
			return unavailable(fmt.Sprintf("the member at raft address %s did not complete the %s in %s: %v", addr, check, timeout, err))
		}
		return &registrar.Error{Reason: registrar.ReasonPermissionDenied,
			Message:  fmt.Sprintf("%s: the member at raft address %s failed the %s: %v", registrar.ReasonPermissionDenied, addr, check, err),
			Metadata: map[string]string{"raft_address": string(addr)}}
	}
	conn, err := s.Dial(addr, timeout)
	var he *handshakeError
	if err != nil && !errors.As(err, &he) {
		return unavailable(fmt.Sprintf("cannot reach the member at raft address %s: %v", addr, err))
	}
	if err != nil {
		return refused(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte{probeByte}); err != nil {
		return refused(err)
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		return refused(err)
	}
	if b[0] != probeOK {
		return refused(fmt.Errorf("unexpected answer %#x to the probe", b[0]))
	}
	return nil
}
