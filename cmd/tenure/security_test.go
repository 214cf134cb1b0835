package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/testlog"
)

// writeServerPKI writes a CA (ca.crt) and a certificate for the API
// server on 127.0.0.1 (server.crt, server.key) into dir.
func writeServerPKI(t *testing.T, dir string) {
	t.Helper()
	writePKI(t, dir, "ca", "server")
}

// TestCLISecureServer runs the binary as a TLS server with an auth file
// (given as TENURE_AUTH_FILE) and drives it with the CLI: no token is
// UNAUTHENTICATED, a token acts as its principal (raw commands and the Go
// client alike), another holder or role is PERMISSION_DENIED, plain text
// fails, and SIGHUP reloads the tokens without a restart.
func TestCLISecureServer(t *testing.T) {
	// The shared test server runs without authentication.
	if out := ok(t, "cluster", "whoami"); !strings.Contains(out, "without authentication") {
		t.Fatalf("whoami without auth: %q", out)
	}
	dir := t.TempDir()
	writeServerPKI(t, dir)
	authFile := filepath.Join(dir, "auth.json")
	writeAuth := func(body string) {
		t.Helper()
		if err := os.WriteFile(authFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeAuth(`{"tokens":[{"token":"tok-w1","principal":"w1","roles":["holder"],"namespaces":["default"]}]}`)
	api, raft := freePort(), freePort()
	srv := exec.Command(tenureBin, "server", "--data-dir", filepath.Join(dir, "data"), "--listen", api, "--raft-listen", raft,
		"--tls-cert", filepath.Join(dir, "server.crt"), "--tls-key", filepath.Join(dir, "server.key"), "--log-level", "warn")
	srv.Env = append(os.Environ(), "TENURE_AUTH_FILE="+authFile)
	var log testlog.Buffer
	srv.Stdout, srv.Stderr = &log, &log
	exited := startBackground(t, srv)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	waitReady(t, hc, "https://"+api+"/readyz", exited, &log)

	run := func(env []string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, tenureBin, args...)
		cmd.Env = append(os.Environ(), "TENURE_ENDPOINTS="+api, "TENURE_HOLDER=", "TENURE_TOKEN=", "TENURE_TLS_CA="+filepath.Join(dir, "ca.crt"))
		cmd.Env = append(cmd.Env, env...)
		return runCmd(t, cmd)
	}
	wantFail := func(r result, reason string) {
		t.Helper()
		if r.code != 1 || !strings.HasPrefix(r.stderr, reason+": ") {
			t.Fatalf("exit %d, stderr %q; want exit 1 with %s", r.code, r.stderr, reason)
		}
	}

	wantFail(run(nil, "acquire", "orders/1"), "UNAUTHENTICATED")
	r := run([]string{"TENURE_TOKEN=tok-w1"}, "acquire", "orders/1", "-o", "json")
	if r.code != 0 {
		t.Fatalf("acquire with a token: %d %s", r.code, r.stderr)
	}
	if l := parse(t, r.stdout, &tenurev1.Lease{}); l.Holder != "w1" {
		t.Fatalf("holder %q, want the principal w1", l.Holder)
	}
	wantFail(run(nil, "acquire", "orders/2", "--token", "tok-w1", "--holder", "w2"), "PERMISSION_DENIED")
	if r := run([]string{"TENURE_TOKEN=tok-w1"}, "cluster", "whoami"); r.code != 0 ||
		!strings.Contains(r.stdout, "w1") || !strings.Contains(r.stdout, "holder") || !strings.Contains(r.stdout, "token") {
		t.Fatalf("cluster whoami: %+v", r)
	}
	wantFail(run([]string{"TENURE_TOKEN=tok-w1"}, "ls"), "PERMISSION_DENIED")
	// The Go client path (exec) asks WhoAmI and acts as the principal.
	if r := run([]string{"TENURE_TOKEN=tok-w1"}, "exec", "jobs/x", "--", "true"); r.code != 0 {
		t.Fatalf("exec with a token: %d %s", r.code, r.stderr)
	}
	// The load generator holds as the principal: no refusals.
	if r := run([]string{"TENURE_TOKEN=tok-w1"}, "bench", "--workload", "cycle", "--concurrency", "2", "--duration", "1s", "-o", "json"); r.code != 0 ||
		!strings.Contains(r.stdout, `"ops":`) || strings.Contains(r.stdout, "PERMISSION_DENIED") {
		t.Fatalf("bench with a token: %+v", r)
	}
	// Plain text against the TLS port fails.
	if r := run([]string{"TENURE_TOKEN=tok-w1", "TENURE_TLS_CA=", "TENURE_ENDPOINTS=http://" + api}, "get", "01ABC"); r.code == 0 {
		t.Fatal("a plain-text call to the TLS server succeeded")
	}

	// SIGHUP: tok-w1 is withdrawn, tok-w9 added, without a restart.
	writeAuth(`{"tokens":[{"token":"tok-w9","principal":"w9","roles":["holder","reader"],"namespaces":["*"]}]}`)
	if err := srv.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the reloaded auth file to take effect", func() bool {
		return run([]string{"TENURE_TOKEN=tok-w9"}, "ls").code == 0
	})
	wantFail(run([]string{"TENURE_TOKEN=tok-w1"}, "acquire", "orders/3"), "UNAUTHENTICATED")
	select {
	case <-exited:
		t.Fatalf("the server exited on SIGHUP: %s", log.String())
	default:
	}
}

func TestServerSecurityFlagErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"tokens":[{"token":"secret value","principal":"p","roles":["holder"],"namespaces":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		out  string
	}{
		{"cert without key", []string{"--tls-cert", "x.pem"}, "--tls-cert and --tls-key go together"},
		{"client CA without cert", []string{"--tls-client-ca", "ca.crt"}, "need --tls-cert"},
		{"missing auth file", []string{"--auth-file", filepath.Join(dir, "nope.json")}, "--auth-file"},
		{"invalid auth file", []string{"--auth-file", bad}, "tokens[0]"},
		{"bad rate", []string{"--rate-limit", "fast"}, "--rate-limit"},
		{"negative rate", []string{"--rate-limit", "-1"}, "rate-limit"},
		{"ledger size unit", []string{"--ledger-max-size", "4GB2"}, "--ledger-max-size"},
		{"ledger size negative", []string{"--ledger-max-size", "-1"}, "--ledger-max-size"},
		{"heartbeat not a duration", []string{"--raft-heartbeat-timeout", "5"}, "--raft-heartbeat-timeout"},
		{"heartbeat too short", []string{"--raft-heartbeat-timeout", "10ms"}, "from 100ms to 1m"},
		{"election too long", []string{"--raft-election-timeout", "2m"}, "--raft-election-timeout"},
		{"listen is raft-listen", []string{"--listen", "127.0.0.1:1", "--raft-listen", "localhost:1"}, "need a port each"},
		{"join own listen", []string{"--listen", "127.0.0.1:1", "--join", "127.0.0.1:1"}, "is this node's own --listen address"},
		{"policy duration", []string{"--max-ttl", "long"}, "--max-ttl"},
		{"policy count", []string{"--max-active-per-holder", "0x10"}, "--max-active-per-holder"},
		{"policy inconsistent", []string{"--min-ttl", "10m"}, "max_ttl: 5m0s is below min_ttl 10m0s"},
		{"policy file missing", []string{"--policy-file", filepath.Join(dir, "nope.json")}, "--policy-file"},
		{"policy file unknown setting", []string{"--policy-file", bad}, `unknown setting "tokens"`},
		{"unreadable certificate", []string{"--tls-cert", filepath.Join(dir, "x.pem"), "--tls-key", filepath.Join(dir, "x.key")}, "--tls-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"server", "--data-dir", filepath.Join(dir, "d"), "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"}, tc.args...)
			code := run(context.Background(), args, &out, &out)
			if code != 2 || !strings.Contains(out.String(), tc.out) {
				t.Fatalf("exit %d, output %q; want 2 containing %q", code, out.String(), tc.out)
			}
			if strings.Contains(out.String(), "secret value") {
				t.Errorf("the error quotes a token: %s", out.String())
			}
		})
	}
}
