package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/ui"
)

// TestHandler: the embedded files are served with types a browser accepts
// under nosniff, with the security headers, and nothing else is.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	for _, c := range []struct {
		path, status, ctype, contains string
	}{
		{"/ui/", "200 OK", "text/html", `<script type="module" src="js/app.js">`},
		{"/ui/app.css", "200 OK", "text/css", "prefers-color-scheme: dark"},
		{"/ui/js/app.js", "200 OK", "text/javascript", "import * as api"},
		{"/ui/js/api.js", "200 OK", "text/javascript", "application/connect+json"},
		{"/ui/js/lease.js", "200 OK", "text/javascript", "LeaseService', 'Tree'"},
		{"/ui/nope.js", "404 Not Found", "text/plain", ""},
		{"/ui/js/", "404 Not Found", "text/plain", ""}, // no directory listing
	} {
		t.Run(c.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.Status != c.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) || !strings.Contains(string(body), c.contains) {
				t.Fatalf("%s: %s %q, body %.80q", c.path, resp.Status, resp.Header.Get("Content-Type"), body)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			// (http.Error drops Cache-Control from a 404, which is not cached anyway.)
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" || (resp.StatusCode == 200 && resp.Header.Get("Cache-Control") != "no-cache") {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
}
