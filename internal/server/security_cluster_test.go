package server

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/auth"
)

// TestForwardingCarriesTheCaller: with authentication on in a cluster,
// members publish themselves with their member token, and a follower
// forwards a caller's write with the caller's own credentials, so the
// leader checks the same principal: its own lease is granted to it, and
// another's is refused, in unary calls and KeepAlive alike.
func TestForwardingCarriesTheCaller(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, []byte(testAuthFile), 0o600); err != nil {
		t.Fatal(err)
	}
	ms := startClusterWith(t, 3, func(c *Config) {
		store, err := auth.Open(path, auth.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		c.Auth, c.MemberToken = store, "tok-root"
	})
	leader := leaderOf(t, ms, 20*time.Second)
	var follower *member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	as := func(token string) clients {
		return (&secureBundle{base: "http://" + follower.srv.Addr()}).as(token)
	}
	root := as("tok-root")
	waitPublished(t, root, "every member to publish its address")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	_, err := as("").leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "x"}))
	wantReason(t, err, connect.CodeUnauthenticated, "UNAUTHENTICATED")

	resp, err := as("tok-w1").leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "fwd/1", Ttl: ttl(time.Minute)}))
	if err != nil {
		t.Fatalf("forwarded acquire: %v", err)
	}
	l := resp.Msg.Lease
	if l.Holder != "w1" {
		t.Fatalf("holder %q, want w1", l.Holder)
	}
	w2 := as("tok-w2")
	_, err = w2.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: l.LeaseId}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
	ka := w2.leases.KeepAlive(ctx)
	if err := ka.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{l.LeaseId}}); err != nil {
		t.Fatal(err)
	}
	kr, err := ka.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if len(kr.Failures) != 1 || kr.Failures[0].Reason != "NOT_HOLDER" || len(kr.Leases) != 0 {
		t.Errorf("forwarded KeepAlive of another's lease: %v", kr)
	}
	_ = ka.CloseRequest()
	_ = ka.CloseResponse()
	if _, err := as("tok-w1").leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: l.LeaseId})); err != nil {
		t.Fatalf("forwarded release by the holder: %v", err)
	}
}

// TestForwardingOverTLS: members that serve TLS and require client
// certificates forward to each other over TLS, presenting their own
// certificates; a token caller's write through a follower succeeds; a
// caller known only by its client certificate is answered NOT_LEADER by a
// follower (it cannot vouch for it to the leader) and served by the leader.
func TestForwardingOverTLS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, []byte(testAuthFile), 0o600); err != nil {
		t.Fatal(err)
	}
	pki := newPKI(t)
	memberCert := pki.issue(t, "member")
	ms := startClusterWith(t, 3, func(c *Config) {
		store, err := auth.Open(path, auth.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		c.Auth, c.MemberToken = store, "tok-root"
		c.TLS = &tls.Config{Certificates: []tls.Certificate{memberCert}, ClientCAs: pki.pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
		c.PeerTLS = &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{memberCert}, MinVersion: tls.VersionTLS12}
	})
	leader := leaderOf(t, ms, 20*time.Second)
	var follower *member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	clientTLS := func(cn string) *tls.Config {
		return &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.issue(t, cn)}}
	}
	at := func(m *member, token string, cfg *tls.Config) clients {
		return (&secureBundle{base: "https://" + m.srv.Addr()}).as(token, cfg)
	}
	root := at(follower, "tok-root", clientTLS("ops"))
	waitPublished(t, root, "every member to publish its address over TLS")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := at(follower, "tok-w1", clientTLS("laptop")).leases.Acquire(ctx,
		connect.NewRequest(&tenurev1.AcquireRequest{Resource: "tls/1", Ttl: ttl(time.Minute)}))
	if err != nil || resp.Msg.Lease.Holder != "w1" {
		t.Fatalf("token write forwarded over TLS: %v %v", resp, err)
	}
	enqueue := func(m *member) error {
		_, err := at(m, "", clientTLS("svc.test")).queues.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{
			Namespace: "jobs", Queue: "q", Tasks: []*tenurev1.NewTask{{Payload: []byte("p")}}}))
		return err
	}
	err = enqueue(follower)
	wantReason(t, err, connect.CodeUnavailable, "NOT_LEADER")
	if md := errorMeta(t, err); md["leader"] != leader.srv.Addr() {
		t.Errorf("NOT_LEADER names %q, want the leader %s", md["leader"], leader.srv.Addr())
	}
	if err := enqueue(leader); err != nil {
		t.Fatalf("certificate principal at the leader: %v", err)
	}
}

// waitPublished waits until, as c sees it, a leader and three members
// are known with their API addresses.
func waitPublished(t *testing.T, c clients, what string) {
	t.Helper()
	waitFor(t, what, 30*time.Second, func() bool {
		resp, err := c.cluster.Status(context.Background(), connect.NewRequest(&tenurev1.StatusRequest{}))
		if err != nil || resp.Msg.LeaderApiAddress == "" || len(resp.Msg.Members) != 3 {
			return false
		}
		for _, m := range resp.Msg.Members {
			if m.ApiAddress == "" {
				return false
			}
		}
		return true
	})
}
