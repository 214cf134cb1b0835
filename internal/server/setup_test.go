package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/cluster"
)

// bundle is what a test needs: a running single node and clients for it.
type bundle struct {
	srv     *Server
	dir     string
	base    string
	http    *http.Client // plain HTTP/1.1, for Connect JSON
	leases  tenurev1connect.LeaseServiceClient
	cluster tenurev1connect.ClusterServiceClient
}

func testConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Cluster = cluster.DefaultConfig()
	cfg.Cluster.DataDir = dir
	cfg.Cluster.RaftAddr = "127.0.0.1:0"
	cfg.Cluster.HeartbeatTimeout = 50 * time.Millisecond
	cfg.Cluster.ElectionTimeout = 50 * time.Millisecond
	cfg.Cluster.FeedSize = 10_000
	// Tests compare commit and ledger indexes before and after calls that
	// must change nothing: no checkpoint of a quiet tail in between.
	cfg.Cluster.SignAfter = time.Hour
	return cfg
}

// setup starts a single node on a fresh data dir (or dir, when given) and
// waits until it serves writes. The node stops when the test ends.
func setup(t testing.TB, dir ...string) *bundle {
	t.Helper()
	d := t.TempDir()
	if len(dir) > 0 {
		d = dir[0]
	}
	return setupWith(t, d, nil)
}

// setupWith is setup on data dir d with the config passed through mod
// (when not nil).
func setupWith(t testing.TB, d string, mod func(*Config)) *bundle {
	t.Helper()
	cfg := testConfig(d)
	if mod != nil {
		mod(&cfg)
	}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		srv.Close(context.Background())
		t.Fatalf("WaitReady: %v", err)
	}
	b := &bundle{srv: srv, dir: d, base: "http://" + srv.Addr(), http: &http.Client{Timeout: 10 * time.Second}}
	h2c := h2cClient()
	b.leases = tenurev1connect.NewLeaseServiceClient(h2c, b.base, connect.WithGRPC())
	b.cluster = tenurev1connect.NewClusterServiceClient(h2c, b.base)
	t.Cleanup(func() { b.stop(t) })
	return b
}

func (b *bundle) stop(t testing.TB) {
	if b.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.srv.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	b.srv = nil
}

// h2cClient speaks HTTP/2 without TLS, as gRPC clients do on loopback.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, MaxIdleConns: 100, MaxIdleConnsPerHost: 100}}
}

func (b *bundle) acquire(t testing.TB, req *tenurev1.AcquireRequest) *tenurev1.Lease {
	t.Helper()
	resp, err := b.leases.Acquire(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Acquire(%v): %v", req, err)
	}
	return resp.Msg.Lease
}

func (b *bundle) status(t testing.TB) *tenurev1.StatusResponse {
	t.Helper()
	resp, err := b.cluster.Status(context.Background(), connect.NewRequest(&tenurev1.StatusRequest{}))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return resp.Msg
}

// metadataOf returns a Connect error's ErrorInfo metadata (nil: none).
func metadataOf(err error) map[string]string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Metadata
			}
		}
	}
	return nil
}

// wantReason checks a Connect error's code, ErrorInfo reason and message.
func wantReason(t testing.TB, err error, code connect.Code, reason string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want %s/%s, got %v", code, reason, err)
	}
	if ce.Code() != code {
		t.Errorf("code = %s, want %s (%v)", ce.Code(), code, err)
	}
	var got string
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			t.Fatalf("detail: %v", derr)
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok {
			got = info.Reason
			if info.Domain != ErrorDomain {
				t.Errorf("domain = %q", info.Domain)
			}
			// An unknown outcome says what broke off, for machines.
			if info.Reason == "OUTCOME_UNKNOWN" && info.Metadata["cause"] == "" {
				t.Errorf("OUTCOME_UNKNOWN without a cause in its metadata: %v", info.Metadata)
			}
		}
	}
	if got != reason {
		t.Errorf("ErrorInfo reason = %q, want %q (%v)", got, reason, err)
	}
	if len(ce.Message()) < len(reason) || ce.Message()[:len(reason)] != reason {
		t.Errorf("message %q does not start with %s", ce.Message(), reason)
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
