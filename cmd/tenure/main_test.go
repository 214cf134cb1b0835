package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/server"
)

func TestExitCodes(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"no command", nil, 2, "no command"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"version", []string{"version"}, 0, "tenure dev"},
		{"bad flag", []string{"server", "--bogus"}, 2, "bogus"},
		{"peers not yet", []string{"server", "--peers", "a=127.0.0.1:1"}, 2, "not supported yet"},
		{"join not yet", []string{"server", "--join", "127.0.0.1:7070"}, 2, "not supported yet"},
		{"public listen without insecure", []string{"server", "--listen", "0.0.0.0:7070"}, 2, "--insecure"},
		{"unusable data dir", []string{"server", "--data-dir", "", "--listen", "127.0.0.1:0"}, 1, "DataDir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), tc.args, &out, &out)
			if code != tc.code || !strings.Contains(out.String(), tc.out) {
				t.Fatalf("exit %d, output %q; want %d containing %q", code, out.String(), tc.code, tc.out)
			}
		})
	}
}

func TestServerStartsAndStops(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *server.Server, 1)
	onServerReady = func(s *server.Server) { ready <- s }
	defer func() { onServerReady = nil }()
	done := make(chan int, 1)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, []string{"server", "--data-dir", dir, "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"}, &out, &out)
	}()
	var srv *server.Server
	select {
	case srv = <-ready:
	case code := <-done:
		t.Fatalf("server exited with %d", code)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := srv.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + srv.Addr() + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel() // as SIGTERM does
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop")
	}
}
