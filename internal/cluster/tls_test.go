package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// testCA is a throwaway certificate authority (no key is ever committed).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue signs a member certificate usable on both ends of a connection.
func (ca *testCA) issue(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) member(t *testing.T, name string) *RaftTLS {
	return NewRaftTLS(ca.issue(t, name), ca.pool)
}

// refusals counts the Raft TLS refusals a node logs.
type refusals struct{ n atomic.Int64 }

func (r *refusals) Enabled(context.Context, slog.Level) bool { return true }
func (r *refusals) Handle(_ context.Context, rec slog.Record) error {
	if strings.Contains(rec.Message, "raft TLS: refused") {
		r.n.Add(1)
	}
	return nil
}
func (r *refusals) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *refusals) WithGroup(string) slog.Handler      { return r }

func tlsNodeConfig(t *testing.T, id string, ln net.Listener, sec *RaftTLS, log slog.Handler) Config {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NodeID = id
	cfg.RaftListener = ln
	cfg.APIAddr = "api-" + id
	cfg.RaftTLS = sec
	cfg.HeartbeatTimeout = 200 * time.Millisecond
	cfg.ElectionTimeout = 200 * time.Millisecond
	if log != nil {
		cfg.Logger = slog.New(log)
	}
	return cfg
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for time
	}
}

// startTLSCluster starts three members over mutual TLS and returns them
// with the leader first.
func startTLSCluster(t *testing.T, ca *testCA, logs []slog.Handler) []*Node {
	t.Helper()
	var peers []Peer
	var lns []net.Listener
	for i := range 3 {
		ln := listen(t)
		lns = append(lns, ln)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: ln.Addr().String()})
	}
	var nodes []*Node
	for i, p := range peers {
		cfg := tlsNodeConfig(t, p.ID, lns[i], ca.member(t, p.ID), logs[i])
		cfg.Peers = peers
		n, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	var leader *Node
	waitUntil(t, "a leader", func() bool {
		for _, n := range nodes {
			if n.IsLeader() {
				leader = n
				return true
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := leader.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	out := []*Node{leader}
	for _, n := range nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

func TestRaftTLSClusterReplicates(t *testing.T) {
	ca := newTestCA(t, "tenure test CA")
	nodes := startTLSCluster(t, ca, make([]slog.Handler, 3))
	out := acquire(t, nodes[0], "orders/1", "w1", time.Minute, 0)
	if out.Err != nil {
		t.Fatalf("acquire: %v", out.Err)
	}
	for _, f := range nodes[1:] {
		waitUntil(t, "replication to "+f.ID(), func() bool {
			var found bool
			_ = f.Read(context.Background(), true, func(m *statemachine.Machine, tk registrar.Tick) error {
				l, err := m.Registrar().Get(out.Lease.ID, tk)
				found = err == nil && l.Fence == out.Lease.Fence
				return nil
			})
			return found
		})
	}
}

func TestRaftTLSRefusesForeignMembers(t *testing.T) {
	ca := newTestCA(t, "tenure test CA")
	other := newTestCA(t, "another CA")
	logs := []slog.Handler{&refusals{}, &refusals{}, &refusals{}}
	nodes := startTLSCluster(t, ca, logs)
	leader := nodes[0]
	termBefore := leader.raft.CurrentTerm()

	for _, tc := range []struct {
		name string
		sec  *RaftTLS
	}{
		{"another CA", other.member(t, "n4")},
		{"no TLS", nil},
		// A member that has a cluster certificate but trusts another CA
		// would refuse the leader: it must not be added either.
		{"trusts another CA", NewRaftTLS(ca.issue(t, "n4"), other.pool)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tlsNodeConfig(t, "n4", listen(t), tc.sec, nil)
			cfg.NoBootstrap = true
			n4, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n4.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = leader.AddVoter(ctx, "n4", n4.RaftAddr(), "api-n4", false)
			if registrar.ReasonOf(err) != registrar.ReasonPermissionDenied {
				t.Fatalf("AddVoter of a member with %s: got %v, want PERMISSION_DENIED", tc.name, err)
			}
			cf := leader.raft.GetConfiguration()
			if err := cf.Error(); err != nil {
				t.Fatal(err)
			}
			if got := len(cf.Configuration().Servers); got != 3 {
				t.Fatalf("configuration has %d servers after the refused join, want 3", got)
			}
		})
	}

	// Nothing listening is not a refusal: the join may retry.
	ln := listen(t)
	gone := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.AddVoter(ctx, "n5", gone, "", false); registrar.ReasonOf(err) != registrar.ReasonUnavailable {
		t.Fatalf("AddVoter of an unreachable member: got %v, want UNAVAILABLE", err)
	}

	// A rogue member with a foreign certificate that claims membership
	// (bootstraps a configuration naming the real members) keeps asking
	// them for votes; they refuse its connections and notice nothing.
	var peers []Peer
	for _, n := range nodes {
		peers = append(peers, Peer{ID: n.ID(), RaftAddr: n.RaftAddr()})
	}
	rln := listen(t)
	peers = append(peers, Peer{ID: "rogue", RaftAddr: rln.Addr().String()})
	cfg := tlsNodeConfig(t, "rogue", rln, other.member(t, "rogue"), nil)
	cfg.Peers = peers
	rogue, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	waitUntil(t, "every member to refuse the rogue", func() bool {
		for _, l := range logs {
			if l.(*refusals).n.Load() < 2 {
				return false
			}
		}
		return true
	})
	if !leader.IsLeader() || leader.raft.CurrentTerm() != termBefore {
		t.Fatalf("the rogue disturbed the cluster: leader %v, term %d (was %d)", leader.IsLeader(), leader.raft.CurrentTerm(), termBefore)
	}
	if rogue.raft.State() == raft.Leader {
		t.Fatal("the rogue became a leader")
	}
	if out := acquire(t, leader, "orders/2", "w1", time.Minute, 0); out.Err != nil {
		t.Fatalf("acquire with the rogue around: %v", out.Err)
	}

	// At the wire: a client with a foreign certificate, with none, or
	// without TLS gets no answer (the probe byte is answered only after a
	// valid handshake).
	// What a plain Raft peer sends first: an RPC type (0, AppendEntries)
	// and its encoding; never a TLS record.
	plainRPC := []byte{0, 0x85, 0xa4, 'T', 'e', 'r', 'm', 1, 2, 3, 4, 5, 6, 7, 8}
	for name, dial := range map[string]func() (net.Conn, error){
		"foreign certificate": func() (net.Conn, error) {
			return tls.Dial("tcp", leader.RaftAddr(), &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
				Certificates: []tls.Certificate{other.issue(t, "x")}})
		},
		"no certificate": func() (net.Conn, error) {
			return tls.Dial("tcp", leader.RaftAddr(), &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true})
		},
		"plain TCP": func() (net.Conn, error) { return net.Dial("tcp", leader.RaftAddr()) },
	} {
		conn, err := dial()
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			msg := []byte{probeByte}
			if _, plain := conn.(*net.TCPConn); plain {
				msg = plainRPC
			}
			if _, err = conn.Write(msg); err == nil {
				var b [1]byte
				_, err = conn.Read(b[:])
			}
			conn.Close()
		}
		if err == nil {
			t.Fatalf("a client with %s got an answer", name)
		}
	}
}

func TestLoadRaftTLSFromFiles(t *testing.T) {
	ca := newTestCA(t, "tenure test CA")
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := ca.issue(t, "n1")
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := write("n1.crt", "CERTIFICATE", c.Certificate[0]), write("n1.key", "PRIVATE KEY", keyDER)
	caFile := write("ca.crt", "CERTIFICATE", ca.cert.Raw)
	if _, err := LoadRaftTLS(certFile, keyFile, keyFile); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a key as the CA: got %v", err)
	}
	sec, err := LoadRaftTLS(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	// Two members with the loaded configuration talk: the probe passes.
	a, err := Open(tlsNodeConfig(t, "n1", listen(t), sec, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.stream.probe(raft.ServerAddress(a.RaftAddr()), 5*time.Second); err != nil {
		t.Fatalf("probe of itself: %v", err)
	}
}
