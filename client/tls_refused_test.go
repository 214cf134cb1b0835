package tenure_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	tenure "github.com/tenurehq/tenure/client"
)

// A write whose TLS handshake the client broke off (it does not trust
// the server's certificate) never reached a server: it fails as
// UNAVAILABLE, not as OUTCOME_UNKNOWN, which would tell the caller to
// read the state before repeating a write that was never sent.
func TestTLSUntrustedServerIsNotOutcomeUnknown(t *testing.T) {
	t.Parallel()
	var served atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		http.Error(w, "unexpected", http.StatusInternalServerError)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	c, err := tenure.New([]string{srv.URL}, tenure.WithRetryBudget(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Acquire(ctx, "tls/untrusted", tenure.TTL(10*time.Second))
	if err == nil {
		t.Fatal("Acquire from a server whose certificate is not trusted succeeded")
	}
	if errors.Is(err, tenure.ErrOutcomeUnknown) || !errors.Is(err, tenure.ErrUnavailable) {
		t.Errorf("Acquire: %v (reason %q); want UNAVAILABLE, not OUTCOME_UNKNOWN", err, tenure.ReasonOf(err))
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the server served %d requests; want none", n)
	}
}
