package wire

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestCloseAllClosesBusyConnections: a connection with a stream still open
// (a call cancelled an instant before, not yet forgotten by HTTP/2) is not
// idle, so CloseIdleConnections leaves it open, with its read loop, until it
// idles out; CloseAll closes it at once, and refuses to dial again.
func TestCloseAllClosesBusyConnections(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h2c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select { // hold the stream open
		case <-release:
		case <-r.Context().Done():
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { close(release); srv.Close() })

	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	hc, conns := newTrackedHTTPClient(nil, dial)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://tenure.test/busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		read <- err
	}()

	hc.CloseIdleConnections() // the stream is open: the connection stays
	conns.CloseAll()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("the body ended cleanly; want the connection closed under it")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the busy connection is still open after CloseAll")
	}
	if _, err := hc.Do(req.Clone(ctx)); err == nil {
		t.Fatal("a request after CloseAll was sent; want the dial refused")
	}
}
