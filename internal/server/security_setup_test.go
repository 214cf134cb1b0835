package server

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/auth"
)

// testAuthFile: two holders in "default", a reader of team-*, two
// workers of jobs, an admin of everything, an admin of team-*,
// two principals (a reader and a holder) limited to two
// requests (its bucket refills once in ~17 minutes), and a certificate
// principal.
const testAuthFile = `{"tokens":[
 {"token":"tok-w1","principal":"w1","roles":["holder"],"namespaces":["default"]},
 {"token":"tok-w2","principal":"w2","roles":["holder"],"namespaces":["default"]},
 {"token":"tok-r1","principal":"r1","roles":["reader"],"namespaces":["team-*"]},
 {"token":"tok-q1","principal":"q1","roles":["worker"],"namespaces":["jobs"]},
 {"token":"tok-q2","principal":"q2","roles":["worker"],"namespaces":["jobs"]},
 {"token":"tok-root","principal":"root","roles":["admin"],"namespaces":["*"]},
 {"token":"tok-teamadmin","principal":"teamadmin","roles":["admin"],"namespaces":["team-*"]},
 {"token":"tok-slow","principal":"slow","roles":["reader"],"namespaces":["*"],"rate":0.001,"burst":2},
 {"token":"tok-slowholder","principal":"slowholder","roles":["holder"],"namespaces":["default"],"rate":0.001,"burst":2},
 {"principal":"svc.test","roles":["worker"],"namespaces":["jobs"]}
]}`

// secureBundle is a single node with authentication on.
type secureBundle struct {
	srv      *Server
	base     string
	authPath string
}

// startSecure starts a node with testAuthFile (mod may change the config
// further, e.g. add TLS) and waits until it serves writes.
func startSecure(t testing.TB, mod func(*Config)) *secureBundle {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(path, []byte(testAuthFile), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Open(path, auth.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(filepath.Join(dir, "data"))
	cfg.Auth = store
	if mod != nil {
		mod(&cfg)
	}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	return &secureBundle{srv: srv, base: scheme + srv.Addr(), authPath: path}
}

// bearer sends "Authorization: Bearer <token>" on unary calls and streams.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		}
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// clients are the four service clients of one caller.
type clients struct {
	leases  tenurev1connect.LeaseServiceClient
	queues  tenurev1connect.QueueServiceClient
	pools   tenurev1connect.PoolServiceClient
	cluster tenurev1connect.ClusterServiceClient
}

// as returns clients that present token ("" = no credentials) over h2c,
// or over TLS with tlsCfg.
func (b *secureBundle) as(token string, tlsCfg ...*tls.Config) clients {
	hc := h2cClient()
	if len(tlsCfg) > 0 {
		hc = tlsClient(tlsCfg[0])
	}
	o := connect.WithInterceptors(bearer(token))
	return clients{
		leases:  tenurev1connect.NewLeaseServiceClient(hc, b.base, o, connect.WithGRPC()),
		queues:  tenurev1connect.NewQueueServiceClient(hc, b.base, o),
		pools:   tenurev1connect.NewPoolServiceClient(hc, b.base, o),
		cluster: tenurev1connect.NewClusterServiceClient(hc, b.base, o),
	}
}

// tlsClient speaks HTTP/2 over TLS with cfg.
func tlsClient(cfg *tls.Config) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}
