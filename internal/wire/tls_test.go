package wire

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// An endpoint that speaks plain HTTP, reached with TLS, never received a
// request: net/http reports it with a text of its own, not the record
// header error, and it is refused all the same.
func TestTLSRefusedPlainHTTPEndpoint(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the request reached the server: %s %s", r.Method, r.URL)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+strings.TrimPrefix(srv.URL, "http://")+"/x", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("https to a plain HTTP server succeeded")
	}
	if !TLSRefused(err) {
		t.Fatalf("TLSRefused(%v) = false, want true", err)
	}
	if TLSRefused(nil) {
		t.Fatal("TLSRefused(nil) = true")
	}
}
