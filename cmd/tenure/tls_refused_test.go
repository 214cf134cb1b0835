package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A write whose TLS handshake failed never reached a server: the CLI must
// say UNAVAILABLE (nothing was sent), not OUTCOME_UNKNOWN ("the write may
// or may not have been applied"), when the client did not trust the
// server's certificate.
func TestCLITLSHandshakeRefusedIsNotOutcomeUnknown(t *testing.T) {
	t.Parallel()
	var served atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		http.Error(w, "unexpected", http.StatusInternalServerError)
	})
	untrusted := httptest.NewUnstartedServer(handler)
	untrusted.EnableHTTP2 = true
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)

	// No --tls-ca: the system's CAs do not know httptest's certificate.
	r := runTenure(t, "acquire", "tls/"+uniq(t), "--endpoints", untrusted.URL)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "UNAVAILABLE: ") || strings.Contains(r.stderr, "may or may not") {
		t.Errorf("acquire from a server whose certificate is not trusted: exit %d, stderr %q; want UNAVAILABLE", r.code, r.stderr)
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the server served %d requests; want none", n)
	}
}
