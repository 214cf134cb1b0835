package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/testport"
)

// The tests in this file run the compiled binary against a real server,
// both started once in TestMain.
var (
	tenureBin string // the compiled binary
	apiAddr   string // the test server's API address
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tenure-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tenureBin = filepath.Join(dir, "tenure")
	// go test puts its own toolchain first on the test's PATH.
	if out, err := exec.Command("go", "build", "-o", tenureBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building tenure: %v\n%s", err, out)
		return 1
	}
	stop, err := startTestServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	return m.Run()
}

// startTestServer starts `tenure server` on free loopback ports and waits for
// /readyz.
func startTestServer(dir string) (stop func(), err error) {
	api, raft := freePort(), freePort()
	apiAddr = api
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(tenureBin, "server", "--data-dir", filepath.Join(dir, "data"), "--listen", api, "--raft-listen", raft, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
		logFile.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + api + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Errorf("server exited: %v\n%s", err, b)
		case <-tick.C:
		}
	}
	stop()
	return nil, fmt.Errorf("server at %s not ready after 20s", api)
}

func freePort() string {
	addr, err := testport.Free()
	if err != nil {
		panic(err)
	}
	return addr
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// tenureCmd returns a command running the binary against the test server.
func tenureCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, tenureBin, args...)
	cmd.Env = append(os.Environ(), "TENURE_ENDPOINTS="+apiAddr, "TENURE_HOLDER=", "TENURE_NAMESPACE=default")
	cmd.Env = append(cmd.Env, "TENURE_BIN="+tenureBin)
	return cmd
}

// runTenure runs the binary to completion (30 s at most).
func runTenure(t *testing.T, args ...string) result {
	t.Helper()
	return tenureStdin(t, "", args...)
}

func tenureStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := tenureCmd(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	return runCmd(t, cmd)
}

// runCmd runs cmd to completion and returns its output and exit code.
func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return r
}

// startBackground starts cmd (a server) and, when the test ends, stops it
// with SIGTERM (SIGKILL after 15 s). The channel closes when it exits.
func startBackground(t *testing.T, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}

// waitReady waits until a server process (startBackground) answers
// readyz, its /readyz URL, with 200 through hc, failing the test with its
// log if it exits first.
func waitReady(t *testing.T, hc *http.Client, readyz string, exited <-chan struct{}, log fmt.Stringer) {
	t.Helper()
	waitFor(t, 20*time.Second, readyz+" to answer 200", func() bool {
		select {
		case <-exited:
			t.Fatalf("server exited: %s", log.String())
		default:
		}
		resp, err := hc.Get(readyz)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// ok runs the binary and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := runTenure(t, args...)
	if r.code != 0 {
		t.Fatalf("tenure %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs the binary and checks it exits 1 with stderr starting with reason.
func fails(t *testing.T, reason string, args ...string) {
	t.Helper()
	r := runTenure(t, args...)
	if r.code != 1 || !strings.HasPrefix(r.stderr, reason+": ") {
		t.Fatalf("tenure %s: exit %d, stderr %q; want exit 1 and stderr starting with %s", strings.Join(args, " "), r.code, r.stderr, reason)
	}
}

// parse unmarshals protobuf JSON output.
func parse[M proto.Message](t *testing.T, out string, m M) M {
	t.Helper()
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("output is not %T JSON: %v\n%s", m, err, out)
	}
	return m
}

// acquire acquires resource and returns the lease.
func acquire(t *testing.T, resource string, args ...string) *tenurev1.Lease {
	t.Helper()
	out := ok(t, append([]string{"acquire", resource, "-o", "json"}, args...)...)
	if strings.Contains(out, "UNSPECIFIED") || strings.Contains(out, ", ") {
		t.Errorf("-o json: %s; want enums at zero left out, as the API does, on one compact line", out)
	}
	return parse(t, out, &tenurev1.Lease{})
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
	}{
		{"unknown command", []string{"frobnicate"}},
		{"missing argument", []string{"acquire"}},
		{"unknown flag", []string{"acquire", "r", "--bogus"}},
		{"extra argument", []string{"get", "a", "b"}},
		{"bad output", []string{"ls", "-o", "yaml"}},
		{"bad mode", []string{"acquire", "r", "--mode", "sometimes"}},
		{"bad release reason", []string{"release", "id", "--reason", "tired"}},
		{"bad state", []string{"ls", "--state", "sleeping"}},
		{"fence not a number", []string{"fence", "check", "r", "seventeen"}},
		{"state put without epoch", []string{"state", "put", "r", "--lease", "x"}},
		{"unknown cluster subcommand", []string{"cluster", "explode"}},
		{"exec without command", []string{"exec", "r"}},
		{"bench unknown workload", []string{"bench", "--workload", "sprint"}},
		{"bench batch of none", []string{"bench", "--workload", "renew", "--batch", "0"}},
		{"bench batch past the limit", []string{"bench", "--workload", "renew", "--batch", "10001"}},
		{"bench claim past the limit", []string{"bench", "--workload", "queue", "--batch", "1001"}},
		{"bench pool of no pieces", []string{"bench", "--workload", "pool", "--pieces", "0"}},
		{"bench pool of too many files", []string{"bench", "--workload", "pool", "--files", "1025"}},
		{"renew ids and --all", []string{"renew", "a", "--all"}},
		{"derive without resource", []string{"derive", "id"}},
		{"bad budget", []string{"derive", "id", "r", "--budget", "tokens"}},
		{"consume not a number", []string{"consume", "id", "tokens", "many"}},
		{"authorize nothing", []string{"authorize", "id"}},
		{"negative page size", []string{"ls", "--page-size", "-1"}},
		{"negative history limit", []string{"history", "r", "--limit", "-1"}},
		{"endpoint not host:port", []string{"ls", "--endpoints", "not a host"}},
		{"endpoint without a port", []string{"get", "x", "--endpoints", "localhost"}},
		{"endpoint with another scheme", []string{"cluster", "status", "--endpoints", "ftp://a:1"}},
		{"endpoint port out of range", []string{"acquire", "r", "--endpoints", "127.0.0.1:70000"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runTenure(t, tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, "usage") {
				t.Fatalf("exit %d, stderr %q; want 2 and a usage line", r.code, r.stderr)
			}
		})
	}
}

func TestCLIHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"acquire", "renew", "release", "get", "ls", "watch", "history", "verify", "revoke", "transfer", "derive", "consume", "authorize", "tree", "state", "fence", "cert", "cluster", "exec", "bench", "version"} {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			out := ok(t, c, "--help")
			if !strings.HasPrefix(out, "usage: tenure "+c) || !strings.Contains(out, "examples:") || !strings.Contains(out, "-endpoints") {
				t.Fatalf("help of %s:\n%s", c, out)
			}
		})
	}
}

// TestCLIErrorsAsJSON: with -o json a failed command writes its error to
// stdout as JSON (reason, code, message, metadata), as well as the text
// line to stderr; a command that printed its result prints only that.
func TestCLIErrorsAsJSON(t *testing.T) {
	t.Parallel()
	res := "jsonerr/" + uniq(t)
	id := acquire(t, res, "--holder", "w1").GetLeaseId()
	type body struct {
		Reason, Code, Message string
		Metadata              map[string]string
	}
	errorOf := func(wantCode int, args ...string) body {
		t.Helper()
		r := runTenure(t, args...)
		var out struct{ Error body }
		if r.code != wantCode || json.Unmarshal([]byte(r.stdout), &out) != nil || strings.Count(r.stdout, "\n") != 1 {
			t.Fatalf("tenure %s: exit %d, stdout %q; want exit %d and one JSON line", strings.Join(args, " "), r.code, r.stdout, wantCode)
		}
		// A usage error's text on stderr is the JSON message after its
		// reason ("tenure: …", as usage errors print).
		if msg := out.Error.Message; !strings.Contains(r.stderr, msg) && (wantCode != 2 || !strings.Contains(r.stderr, strings.TrimPrefix(msg, out.Error.Reason+": "))) {
			t.Errorf("tenure %s: stderr %q does not carry the message %q", strings.Join(args, " "), r.stderr, out.Error.Message)
		}
		return out.Error
	}
	if e := errorOf(1, "acquire", res, "-o", "json"); e.Reason != "LEASE_HELD" || e.Code != "failed_precondition" ||
		e.Metadata["holder"] != "w1" || e.Metadata["lease_id"] != id || !strings.HasPrefix(e.Message, "LEASE_HELD: ") {
		t.Errorf("held: %+v", e)
	}
	if e := errorOf(1, "get", "no-such-lease", "-o=json"); e.Reason != "LEASE_NOT_FOUND" || e.Code != "not_found" {
		t.Errorf("not found: %+v", e)
	}
	if e := errorOf(2, "ls", "-o", "json", "--page-size", "many"); e.Reason != "INVALID_ARGUMENT" || e.Code != "invalid_argument" ||
		!strings.Contains(e.Message, "--page-size") || strings.Contains(e.Message, "duration") {
		t.Errorf("usage: %+v", e)
	}
	if e := errorOf(1, "ls", "-o", "json", "--endpoints", "127.0.0.1:1"); e.Reason != "UNAVAILABLE" || e.Code != "unavailable" {
		t.Errorf("no server: %+v", e)
	}
	// Renew of several ids prints its response, failures included: that
	// is its JSON, and the only one.
	r := runTenure(t, "renew", id, "no-such-lease", "--holder", "w1", "-o", "json")
	if r.code != 1 || strings.Count(r.stdout, "\n") != 1 || strings.Contains(r.stdout, `"error"`) {
		t.Fatalf("renew of several ids: exit %d, stdout %q", r.code, r.stdout)
	}
	parse(t, r.stdout, &tenurev1.RenewResponse{})
	// As a table: the refusals on stderr in the order of the ids, and no
	// table of no lease.
	r = runTenure(t, "renew", "no-such-1", "no-such-2", "--holder", "w1")
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); r.code != 1 || r.stdout != "" || len(lines) != 2 ||
		!strings.Contains(lines[0], "no-such-1") || !strings.Contains(lines[1], "no-such-2") || !strings.Contains(lines[1], "2 of 2 renewals refused") {
		t.Fatalf("renew of two unknown ids: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// Without -o json, stdout stays empty.
	if r := runTenure(t, "get", "no-such-lease"); r.stdout != "" {
		t.Errorf("table output's error went to stdout: %q", r.stdout)
	}
}

func TestCLILeaseLifecycle(t *testing.T) {
	t.Parallel()
	res := "life/" + uniq(t)
	l := acquire(t, res, "--ttl", "30s", "--holder", "w1")
	if l.GetState() != tenurev1.State_STATE_ACTIVE || l.GetHolder() != "w1" || l.GetTtl().AsDuration() != 30*time.Second {
		t.Fatalf("acquired %v", l)
	}
	id := l.GetLeaseId()
	fails(t, "LEASE_HELD", "acquire", res, "--holder", "w2")
	fails(t, "TTL_OUT_OF_RANGE", "acquire", res+"/short", "--ttl", "100ms")

	if out := ok(t, "get", id); !strings.Contains(out, "active") || !strings.Contains(out, res) {
		t.Fatalf("get:\n%s", out)
	}
	fails(t, "LEASE_NOT_FOUND", "get", "no-such-lease")

	// Renewing is the holder's: another (here the default holder) is
	// refused, and changes nothing.
	fails(t, "NOT_HOLDER", "renew", id, "--ttl", "40s")
	fails(t, "NOT_HOLDER", "renew", id, "--holder", "w2")
	renewed := parse(t, ok(t, "renew", id, "--ttl", "40s", "--holder", "w1", "-o", "json"), &tenurev1.RenewResponse{})
	if len(renewed.GetLeases()) != 1 || renewed.GetLeases()[0].GetRenewalCount() != 1 {
		t.Fatalf("renew: %v", renewed)
	}
	fails(t, "LEASE_NOT_FOUND", "renew", "no-such-lease")
	fails(t, "LEASE_NOT_FOUND", "renew", id, "no-such-lease", "--holder", "w1") // several ids: failures listed, exit 1

	list := parse(t, ok(t, "ls", "--prefix", res, "--state", "active", "-o", "json"), &tenurev1.ListResponse{})
	if len(list.GetLeases()) != 1 || list.GetLeases()[0].GetLeaseId() != id {
		t.Fatalf("ls: %v", list)
	}
	if out := ok(t, "ls", "--prefix", res); !strings.Contains(out, "LEASE ID") || !strings.Contains(out, id) {
		t.Fatalf("ls table:\n%s", out)
	}
	// The lease is active: no expiry waits to be recorded.
	if unmarked := parse(t, ok(t, "ls", "--prefix", res, "--expired-unmarked", "-o", "json"), &tenurev1.ListResponse{}); len(unmarked.GetLeases()) != 0 {
		t.Fatalf("ls --expired-unmarked: %v", unmarked)
	}
	// --resource is exact: a resource that extends res is not listed.
	acquire(t, res+"0", "--ttl", "30s", "--holder", "w1")
	if l := parse(t, ok(t, "ls", "--resource", res, "-o", "json"), &tenurev1.ListResponse{}); len(l.GetLeases()) != 1 || l.GetLeases()[0].GetLeaseId() != id {
		t.Fatalf("ls --resource: %v", l)
	}
	fails(t, "INVALID_ARGUMENT", "ls", "--namespace", strings.Repeat("n", 200))
	// --resource names its queued acquires too.
	waiter, waiterOut, waiterErr := startTenure(t, "acquire", res, "--holder", "w9", "--wait", "20s", "--ttl", "5s", "-o", "json")
	waitFor(t, 10*time.Second, "the waiter in ls", func() bool {
		return len(parse(t, ok(t, "ls", "--resource", res, "-o", "json"), &tenurev1.ListResponse{}).GetWaiters()) == 1
	})
	if out := ok(t, "ls", "--resource", res); !strings.Contains(out, "WAITER") || !strings.Contains(out, "w9") || !strings.Contains(out, "exclusive") {
		t.Fatalf("ls --resource with a waiter:\n%s", out)
	}
	if out := ok(t, "ls", "--prefix", res); strings.Contains(out, "WAITER") {
		t.Fatalf("ls --prefix names waiters:\n%s", out)
	}

	vout := ok(t, "verify", id, "no-such-lease", "-o", "json")
	v := parse(t, vout, &tenurev1.VerifyResponse{})
	if len(v.GetResults()) != 2 || !v.GetResults()[0].GetFound() || v.GetResults()[1].GetFound() {
		t.Fatalf("verify: %v", v)
	}
	// Zero values are written out: scripts read results[].found.
	if !strings.Contains(vout, `"found":false`) {
		t.Fatalf("verify -o json leaves out found:false: %s", vout)
	}
	fails(t, "INVALID_ARGUMENT", "verify", strings.Repeat("x", 200))

	fails(t, "NOT_HOLDER", "transfer", id, "w2", "--holder", "w3")
	tr := parse(t, ok(t, "transfer", id, "w2", "--holder", "w1", "-o", "json"), &tenurev1.TransferResponse{})
	if tr.GetLease().GetHolder() != "w2" || tr.GetLease().GetFence() <= l.GetFence() {
		t.Fatalf("transfer: %v", tr)
	}
	id2, id2Fence := tr.GetLease().GetLeaseId(), tr.GetLease().GetFence()

	fails(t, "NOT_HOLDER", "release", id2, "--holder", "w1")
	rel := parse(t, ok(t, "release", id2, "--holder", "w2", "--reason", "completed", "-o", "json"), &tenurev1.ReleaseResponse{})
	if rel.GetLease().GetState() != tenurev1.State_STATE_RELEASED || rel.GetLease().GetReleaseReason() != tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED {
		t.Fatalf("release: %v", rel)
	}
	// The waiter is granted the resource on the release.
	if code, _ := waitExit(t, waiter, time.Now()); code != 0 {
		t.Fatalf("waiter: exit %d: %s", code, waiterErr)
	}
	if wl := parse(t, nextLine(t, waiterOut), &tenurev1.Lease{}); wl.GetHolder() != "w9" || wl.GetFence() <= id2Fence {
		t.Fatalf("waiter granted %v", wl)
	} else {
		ok(t, "release", wl.GetLeaseId(), "--holder", "w9")
	}

	h := parse(t, ok(t, "history", res, "-o", "json"), &tenurev1.HistoryResponse{})
	var types []string
	for _, e := range h.GetEvents() {
		types = append(types, e.GetType())
	}
	if got := strings.Join(types, ","); !strings.HasPrefix(got, "lease.issued,lease.renewed,") || !strings.Contains(got, "lease.released") {
		t.Fatalf("history: %s", got)
	}
	if out := ok(t, "history", res); !strings.Contains(out, "lease.issued") || !strings.Contains(out, "ACTOR") {
		t.Fatalf("history table:\n%s", out)
	}
	if hl := parse(t, ok(t, "history", res, "--latest", "--limit", "1", "-o", "json"), &tenurev1.HistoryResponse{}); len(hl.GetEvents()) != 1 ||
		hl.GetEvents()[0].GetIndex() != h.GetEvents()[len(h.GetEvents())-1].GetIndex() {
		t.Fatalf("history --latest --limit 1: %v", hl)
	}
	fails(t, "INVALID_ARGUMENT", "history", res, "--namespace", strings.Repeat("n", 200))

	l3 := acquire(t, res)
	rv := parse(t, ok(t, "revoke", l3.GetLeaseId(), "--reason", "test", "-o", "json"), &tenurev1.Lease{})
	if rv.GetState() != tenurev1.State_STATE_REVOKED {
		t.Fatalf("revoke: %v", rv)
	}
	fails(t, "LEASE_NOT_FOUND", "revoke", "no-such-lease")
}

func TestCLIStateFenceCert(t *testing.T) {
	t.Parallel()
	res := "state/" + uniq(t)
	l := acquire(t, res, "--certificate")
	id := l.GetLeaseId()
	if out := ok(t, "state", "put", res, "--lease", id, "--epoch", "0", "--data", "one"); !strings.Contains(out, "epoch  1") {
		t.Fatalf("state put: %s", out)
	}
	if r := tenureStdin(t, "two", "state", "put", res, "--lease", id, "--epoch", "1"); r.code != 0 {
		t.Fatalf("state put from stdin: %+v", r)
	}
	fails(t, "STALE_EPOCH", "state", "put", res, "--lease", id, "--epoch", "1", "--data", "three")
	st := parse(t, ok(t, "state", "get", res, "-o", "json"), &tenurev1.ReadStateResponse{})
	if st.GetEpoch() != 2 || string(st.GetData()) != "two" {
		t.Fatalf("state get: %v", st)
	}
	if out := ok(t, "state", "get", res, "--raw"); out != "two" {
		t.Fatalf("state get --raw: %q", out)
	}

	fence := fmt.Sprint(l.GetFence())
	fc := parse(t, ok(t, "fence", "check", res, fence, "-o", "json"), &tenurev1.CheckFenceResponse{})
	if !fc.GetCurrent() {
		t.Fatalf("fence check: %v", fc)
	}
	fails(t, "FENCE_STALE", "fence", "check", res, fmt.Sprint(l.GetFence()-1))

	// cert verify: with the key fetched from the cluster, with --public-key,
	// and a tampered lease.
	leaseJSON := ok(t, "get", id, "--certificate", "-o", "json")
	if r := tenureStdin(t, leaseJSON, "cert", "verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "VALID") {
		t.Fatalf("cert verify: %+v", r)
	}
	key := strings.TrimSpace(ok(t, "cluster", "public-key"))
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	leaseFile := filepath.Join(t.TempDir(), "lease.json")
	if err := os.WriteFile(leaseFile, []byte(leaseJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	out := ok(t, "cert", "verify", "--file", leaseFile, "--public-key", "@"+keyFile, "--skew", "2s", "-o", "json")
	var cv struct {
		Valid   bool   `json:"valid"`
		LeaseID string `json:"leaseId"`
	}
	if err := json.Unmarshal([]byte(out), &cv); err != nil || !cv.Valid || cv.LeaseID != id {
		t.Fatalf("cert verify -o json: %s (%v)", out, err)
	}
	tampered := strings.Replace(leaseJSON, `"fence":"`+fence+`"`, `"fence":"999999"`, 1)
	if r := tenureStdin(t, tampered, "cert", "verify", "--public-key", key); r.code != 1 || !strings.HasPrefix(r.stderr, "CERTIFICATE_INVALID: ") {
		t.Fatalf("tampered cert: %+v", r)
	}
	if r := tenureStdin(t, leaseJSON, "cert", "verify", "--skew", "1h"); r.code != 1 || !strings.HasPrefix(r.stderr, "LEASE_EXPIRED: ") {
		t.Fatalf("cert within skew of expiry: %+v", r)
	}
}

func TestCLIClusterAndVersion(t *testing.T) {
	t.Parallel()
	st := parse(t, ok(t, "cluster", "status", "-o", "json"), &tenurev1.StatusResponse{})
	if len(st.GetMembers()) != 1 || st.GetMembers()[0].GetRole() != tenurev1.Role_ROLE_LEADER || st.GetLeaderApiAddress() != apiAddr {
		t.Fatalf("cluster status: %v", st)
	}
	if out := ok(t, "cluster", "status"); !strings.Contains(out, "leader") || strings.Contains(out, "answered by a follower") {
		t.Fatalf("cluster status:\n%s", out)
	}
	snap := parse(t, ok(t, "cluster", "snapshot", "-o", "json"), &tenurev1.SnapshotResponse{})
	if snap.GetIndex() == 0 || snap.GetNodeId() == "" {
		t.Fatalf("cluster snapshot: %v", snap)
	}
	if out := ok(t, "cluster", "snapshot"); !strings.HasPrefix(out, snap.GetNodeId()+" took a snapshot at index ") {
		t.Fatalf("cluster snapshot: %q", out)
	}
	// Removing an id that is not a member changes nothing, and says so.
	if out := ok(t, "cluster", "remove", "nosuch"); out != "nosuch is not a member of the cluster (nothing to remove: removed already, or never one)\n" {
		t.Fatalf("cluster remove of a non-member: %q", out)
	}
	// transfer-leadership (the RPC's name) is transfer-leader: on a single
	// node there is no voter to hand over to.
	if r := runTenure(t, "cluster", "transfer-leadership"); r.code != 1 || !strings.Contains(r.stderr, "INVALID_ARGUMENT") {
		t.Fatalf("cluster transfer-leadership on one node: %d %q", r.code, r.stderr)
	}
	if out := ok(t, "version", "--server"); !strings.Contains(out, "tenure dev") || !strings.Contains(out, "server") {
		t.Fatalf("version:\n%s", out)
	}
	// A member that does not answer is an error (exit 1), not a usage error.
	r := runTenure(t, "cluster", "status", "--endpoints", freePort())
	if r.code != 1 || !strings.HasPrefix(r.stderr, "UNAVAILABLE: ") {
		t.Fatalf("cluster status on a closed port: %+v (want the code first, as a reason)", r)
	}
}

// fakeMember listens on loopback, as a member that misbehaves, and hands
// each connection to serve (on its own goroutine) until the test ends.
func fakeMember(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().String()
}

// blackHole accepts connections that it never answers, as a stopped or
// stalled member does.
func blackHole(t *testing.T) string {
	return fakeMember(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(io.Discard, c) // ends when the client gives up
	})
}

// A member that accepts connections and never answers does not hold a
// command: a read moves on to the next endpoint, and with no other one the
// command fails (exit 1, UNAVAILABLE) instead of hanging.
func TestCLIHungMember(t *testing.T) {
	t.Parallel()
	hung := blackHole(t)
	l := acquire(t, "hung/"+uniq(t))
	got := parse(t, ok(t, "get", l.GetLeaseId(), "--endpoints", hung+","+apiAddr, "-o", "json"), &tenurev1.Lease{})
	if got.GetLeaseId() != l.GetLeaseId() {
		t.Fatalf("get through a hung member first: %v", got)
	}
	r := runTenure(t, "ls", "--endpoints", hung)
	if r.code != 1 || !strings.Contains(strings.ToLower(r.stderr), "unavailable") {
		t.Fatalf("ls against a hung member alone: %+v", r)
	}
	// Writes move on too: the hung member does not answer the probe sent
	// before the first call, so nothing is sent to it.
	ok(t, "renew", l.GetLeaseId(), "--endpoints", hung+","+apiAddr)
	ok(t, "release", l.GetLeaseId(), "--endpoints", hung+","+apiAddr)
	if got := parse(t, ok(t, "get", l.GetLeaseId(), "-o", "json"), &tenurev1.Lease{}); got.GetState() != tenurev1.State_STATE_RELEASED {
		t.Fatalf("after a release through a hung member first: %v", got)
	}
	res := "hung/" + uniq(t) + "/2"
	if got := parse(t, ok(t, "acquire", res, "--endpoints", hung+","+apiAddr, "-o", "json"), &tenurev1.Lease{}); got.GetResource() != res {
		t.Fatalf("acquire through a hung member first: %v", got)
	}
	// With only hung members, a write that may not be sent twice is not
	// sent: UNAVAILABLE, its outcome known. Sent to a lone member, it is
	// what it is: its outcome is unknown.
	r = runTenure(t, "acquire", res+"/3", "--endpoints", hung+","+blackHole(t))
	if r.code != 1 || !strings.Contains(r.stderr, "UNAVAILABLE") || !strings.Contains(r.stderr, "nothing was sent") {
		t.Fatalf("acquire through hung members only: %+v", r)
	}
	fails(t, "OUTCOME_UNKNOWN", "acquire", res+"/4", "--endpoints", hung)

	// A watch from now past the hung member shows what comes after it.
	prefix := "hung/" + uniq(t) + "/watch/"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := tenureCmd(ctx, "watch", "--prefix", prefix, "--count", "1", "-o", "json", "--endpoints", hung+","+apiAddr)
	var out bytes.Buffer
	w.Stdout = &out
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- w.Wait() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ { // a lease at a time until the watch has shown one
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			if e := parse(t, strings.TrimSpace(out.String()), &tenurev1.Event{}); !strings.HasPrefix(e.GetResource(), prefix) || e.GetType() != "lease.issued" {
				t.Fatalf("watch showed %v", e)
			}
			return
		case <-tick.C:
			acquire(t, fmt.Sprintf("%s%d", prefix, i))
		}
	}
}

func TestCLIWatch(t *testing.T) {
	t.Parallel()
	res := "watch/" + uniq(t)
	st := parse(t, ok(t, "cluster", "status", "-o", "json"), &tenurev1.StatusResponse{})
	l := acquire(t, res)
	ok(t, "release", l.GetLeaseId())
	out := ok(t, "watch", "--prefix", res, "--after", fmt.Sprint(st.GetLedgerIndex()), "--count", "2", "-o", "json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("watch: want 2 NDJSON lines, got:\n%s", out)
	}
	for i, want := range []string{"lease.issued", "lease.released"} {
		e := parse(t, lines[i], &tenurev1.Event{})
		if e.GetType() != want || e.GetLeaseId() != l.GetLeaseId() {
			t.Fatalf("event %d: %v, want %s", i, e, want)
		}
	}
	fails(t, "INVALID_ARGUMENT", "watch", "--namespace", strings.Repeat("n", 200))
	// --all-namespaces follows every namespace; --namespace '' is the
	// default one, as for every other command.
	l2 := parse(t, ok(t, "acquire", res, "--namespace", "other-ns", "-o", "json"), &tenurev1.Lease{})
	out = ok(t, "watch", "--all-namespaces", "--prefix", res, "--after", fmt.Sprint(st.GetLedgerIndex()), "--count", "3", "-o", "json")
	if lines = strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || parse(t, lines[2], &tenurev1.Event{}).GetLeaseId() != l2.GetLeaseId() {
		t.Fatalf("watch --all-namespaces: want default's two events and other-ns's grant, got:\n%s", out)
	}
	out = ok(t, "watch", "--namespace", "", "--prefix", res, "--after", fmt.Sprint(st.GetLedgerIndex()), "--count", "2", "-o", "json")
	if lines = strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || parse(t, lines[0], &tenurev1.Event{}).GetLeaseId() != l.GetLeaseId() {
		t.Fatalf("watch --namespace '': want default's events, got:\n%s", out)
	}
	out = ok(t, "watch", "--all-namespaces", "--prefix", res, "--after", fmt.Sprint(st.GetLedgerIndex()), "--count", "3")
	if lines = strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "NAMESPACE") || !strings.HasPrefix(lines[3], "other-ns ") {
		t.Fatalf("watch --all-namespaces as a table: want a NAMESPACE column, got:\n%s", out)
	}
	if r := runTenure(t, "watch", "--all-namespaces", "--namespace", "x"); r.code != 2 {
		t.Fatalf("watch --all-namespaces --namespace x: %+v", r)
	}
	// --progress: a quiet watch prints, with -o json, how far it has got
	// (from now: past the release above).
	w, wout, werr := startTenure(t, "watch", "--prefix", res, "--progress", "200ms", "-o", "json")
	if p := parse(t, nextLine(t, wout), &tenurev1.WatchResponse{}); p.GetEvent() != nil || p.GetProgressIndex() <= st.GetLedgerIndex() {
		t.Fatalf("watch --progress printed %v, want a progress index past %d (%s)", p, st.GetLedgerIndex(), werr)
	}
	_ = w.Process.Kill()
	_ = w.Wait()
	if r := runTenure(t, "watch", "--progress", "10ms"); r.code != 2 || !strings.Contains(r.stderr, "--progress") {
		t.Fatalf("watch --progress 10ms: %+v", r)
	}
	// No server at all: an error, not a silent wait.
	if r := runTenure(t, "watch", "--endpoints", freePort()); r.code != 1 || !strings.HasPrefix(r.stderr, "UNAVAILABLE: ") {
		t.Fatalf("watch with no server: %+v", r)
	}
}

// startTenure starts the binary and returns its stdout lines as they come.
func startTenure(t *testing.T, args ...string) (*exec.Cmd, <-chan string, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := tenureCmd(ctx, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines, &stderr
}

// guardRuns reports whether the exec guard of process group pgid runs.
func guardRuns(pgid int) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	want := []byte(guardCommand + "\x00" + strconv.Itoa(pgid) + "\x00")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, want) {
			return true
		}
	}
	return false
}

// waitDead reports whether process pid ended (or is a zombie, killed and
// not reaped) before deadline.
func waitDead(pid int, deadline time.Time) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(pid, 0) == nil {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
			return true
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return false
		}
		<-tick.C
	}
	return true
}

func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("output ended")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no output within 20s")
	}
	return ""
}

// waitExit waits for cmd and returns its exit status and how long after
// since it exited.
func waitExit(t *testing.T, cmd *exec.Cmd, since time.Time) (int, time.Duration) {
	t.Helper()
	err := cmd.Wait()
	took := time.Since(since)
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), took
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, took
}

func TestCLIAcquireHold(t *testing.T) {
	t.Parallel()
	t.Run("released on SIGTERM", func(t *testing.T) {
		t.Parallel()
		cmd, lines, stderr := startTenure(t, "acquire", "hold/"+t.Name(), "--hold", "--ttl", "3s", "-o", "json")
		l := parse(t, nextLine(t, lines), &tenurev1.Lease{})
		if g := parse(t, ok(t, "get", l.GetLeaseId(), "-o", "json"), &tenurev1.Lease{}); g.GetState() != tenurev1.State_STATE_ACTIVE {
			t.Fatalf("held lease: %v", g)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if code, _ := waitExit(t, cmd, time.Now()); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if g := parse(t, ok(t, "get", l.GetLeaseId(), "-o", "json"), &tenurev1.Lease{}); g.GetState() != tenurev1.State_STATE_RELEASED {
			t.Fatalf("after SIGTERM: %v", g)
		}
	})
	t.Run("exit 1 when lost", func(t *testing.T) {
		t.Parallel()
		cmd, lines, stderr := startTenure(t, "acquire", "hold/"+t.Name(), "--hold", "--ttl", "3s", "-o", "json")
		l := parse(t, nextLine(t, lines), &tenurev1.Lease{})
		ok(t, "revoke", l.GetLeaseId())
		if code, _ := waitExit(t, cmd, time.Now()); code != 1 || !strings.HasPrefix(stderr.String(), "LEASE_TERMINAL: ") {
			t.Fatalf("exit %d, stderr %q; want 1 and LEASE_TERMINAL", code, stderr)
		}
	})
}

func TestCLIExec(t *testing.T) {
	t.Parallel()
	t.Run("runs while holding and passes on the exit status", func(t *testing.T) {
		t.Parallel()
		res := "exec/" + uniq(t)
		dir := t.TempDir()
		// The child records the lease's state as the registrar sees it.
		script := `"$TENURE_BIN" get "$TENURE_LEASE_ID" -o json > ` + filepath.Join(dir, "seen.json") + `; exit 7`
		r := runTenure(t, "exec", res, "--ttl", "5s", "--", "sh", "-c", script)
		if r.code != 7 {
			t.Fatalf("exit %d, want the child's 7: %+v", r.code, r)
		}
		b, err := os.ReadFile(filepath.Join(dir, "seen.json"))
		if err != nil {
			t.Fatal(err)
		}
		seen := parse(t, string(b), &tenurev1.Lease{})
		if seen.GetState() != tenurev1.State_STATE_ACTIVE || seen.GetResource() != res {
			t.Fatalf("the child saw %v; want the active lease on %s", seen, res)
		}
		if g := parse(t, ok(t, "get", seen.GetLeaseId(), "-o", "json"), &tenurev1.Lease{}); g.GetState() != tenurev1.State_STATE_RELEASED {
			t.Fatalf("after the command: %v", g)
		}
	})
	t.Run("does not start the command when the lease is held", func(t *testing.T) {
		t.Parallel()
		res := "exec/" + uniq(t)
		acquire(t, res)
		marker := filepath.Join(t.TempDir(), "ran")
		r := runTenure(t, "exec", res, "--", "touch", marker)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "LEASE_HELD: ") {
			t.Fatalf("%+v; want exit 1 with LEASE_HELD", r)
		}
		// flock's -E: a busy resource told apart from the command's own
		// exit status 1, also when a wait ran out.
		r = runTenure(t, "exec", res, "--conflict-exit-code", "75", "--", "touch", marker)
		if r.code != 75 || !strings.HasPrefix(r.stderr, "LEASE_HELD: ") {
			t.Fatalf("%+v; want exit 75 with LEASE_HELD", r)
		}
		r = runTenure(t, "exec", res, "--conflict-exit-code", "75", "--wait", "100ms", "--", "touch", marker)
		if r.code != 75 || !strings.HasPrefix(r.stderr, "LEASE_HELD: ") {
			t.Fatalf("%+v; want exit 75 with LEASE_HELD after the wait", r)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the command ran without the lease")
		}
		if r := runTenure(t, "exec", res, "--conflict-exit-code", "256", "--", "true"); r.code != 2 {
			t.Fatalf("--conflict-exit-code 256: %+v; want a usage error", r)
		}
	})
	t.Run("waits for the lease", func(t *testing.T) {
		t.Parallel()
		res := "exec/" + uniq(t)
		l := acquire(t, res, "--ttl", "30s")
		marker := filepath.Join(t.TempDir(), "ran")
		cmd, _, stderr := startTenure(t, "exec", res, "--wait", "20s", "--", "sh", "-c", "date +%s%N > "+marker)
		// The command must not run before the lease is free.
		hist := func() int {
			return len(parse(t, ok(t, "history", res, "-o", "json"), &tenurev1.HistoryResponse{}).GetEvents())
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the command ran while the resource was held")
		}
		n := hist()
		released := time.Now()
		ok(t, "release", l.GetLeaseId())
		if code, _ := waitExit(t, cmd, released); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		b, err := os.ReadFile(marker)
		if err != nil {
			t.Fatal(err)
		}
		var ns int64
		fmt.Sscan(string(b), &ns)
		if ran := time.Unix(0, ns); ran.Before(released) {
			t.Fatalf("the command ran at %v, before the lease was released at %v", ran, released)
		}
		if hist() <= n {
			t.Fatal("no new lease in the history")
		}
	})
	t.Run("stops the command when the lease is lost", func(t *testing.T) {
		t.Parallel()
		res := "exec/" + uniq(t)
		// The child ignores SIGTERM, so only SIGKILL after the grace ends it,
		// and its own child (sleep) must be killed with it.
		cmd, lines, stderr := startTenure(t, "exec", res, "--ttl", "5s", "--grace", "1s", "-o", "json", "--",
			"sh", "-c", `trap "" TERM; echo "$TENURE_LEASE_ID"; sleep 60; echo survived`)
		id := nextLine(t, lines)
		revoked := time.Now()
		ok(t, "revoke", id, "--reason", "test")
		code, took := waitExit(t, cmd, revoked)
		if code != 128+int(syscall.SIGKILL) {
			t.Fatalf("exit %d, want %d (killed); stderr: %s", code, 128+int(syscall.SIGKILL), stderr)
		}
		if took < time.Second || took > 6*time.Second {
			t.Fatalf("the command ended %v after the revoke; want after the 1s grace, within a few seconds", took)
		}
		if !strings.Contains(stderr.String(), "LEASE_TERMINAL") {
			t.Fatalf("stderr does not say why: %s", stderr)
		}
		for l := range lines {
			if l == "survived" {
				t.Fatal("the command's child survived")
			}
		}
	})
	t.Run("the command dies with tenure", func(t *testing.T) {
		t.Parallel()
		// Without tenure nothing renews the lease: a tenure killed with
		// SIGKILL must not leave the command running beside the next
		// holder, nor what it started (sh -c "a & b"; the guard).
		res := "exec/" + uniq(t)
		cmd, lines, _ := startTenure(t, "exec", res, "--ttl", "5s", "--", "sh", "-c", `echo $$; sleep 60 & echo $!; wait`)
		var pids []int
		for range 2 {
			pid, err := strconv.Atoi(nextLine(t, lines))
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		_ = cmd.Process.Kill()
		// Waited for last: the command holds tenure's stderr open.
		defer cmd.Wait()
		deadline := time.Now().Add(10 * time.Second)
		for _, pid := range pids {
			if !waitDead(pid, deadline) {
				t.Fatalf("pid %d of the command (sh, its sleep: %v) still runs 10s after tenure was killed", pid, pids)
			}
		}
	})
	t.Run("the command stops when tenure stalls", func(t *testing.T) {
		t.Parallel()
		// A tenure stopped (SIGSTOP, a debugger, a frozen cgroup) renews
		// nothing, and its command must not run on beside the next holder:
		// the guard stops it once the lease's trust window passes.
		res := "exec/" + uniq(t)
		cmd, lines, stderr := startTenure(t, "exec", res, "--ttl", "4s", "--", "sh", "-c", `echo $$; sleep 60`)
		pid, err := strconv.Atoi(nextLine(t, lines))
		if err != nil {
			t.Fatal(err)
		}
		// The command runs before tenure starts its guard: stop tenure
		// once the guard is there (a stall in that moment is not covered).
		waitFor(t, 10*time.Second, "the guard to start", func() bool { return guardRuns(pid) })
		stopped := time.Now()
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		dead := waitDead(pid, stopped.Add(10*time.Second))
		took := time.Since(stopped)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		if !dead {
			t.Fatalf("the command still runs 10s after tenure stopped (a 4s lease)")
		}
		// Trust ends at most ttl - margin (3.5s) after the stop; the
		// SIGTERM follows a moment after (a busy machine delays it).
		if took > 6*time.Second {
			t.Errorf("the command stopped %v after tenure did, well past its 4s lease", took)
		}
		if code, _ := waitExit(t, cmd, stopped); code != 128+int(syscall.SIGTERM) && code != 128+int(syscall.SIGKILL) {
			t.Fatalf("exit %d, want the command's (terminated); stderr: %s", code, stderr)
		}
		if !strings.Contains(stderr.String(), "did not confirm the lease") {
			t.Errorf("the guard did not say why it stopped the command: %s", stderr)
		}
	})
	t.Run("kills by the lease's safety margin by default", func(t *testing.T) {
		t.Parallel()
		res := "exec/" + uniq(t)
		cmd, lines, stderr := startTenure(t, "exec", res, "--ttl", "10s", "-o", "json", "--",
			"sh", "-c", `trap "" TERM; echo "$TENURE_LEASE_ID"; sleep 60`)
		id := nextLine(t, lines)
		revoked := time.Now()
		ok(t, "revoke", id, "--reason", "test")
		if code, _ := waitExit(t, cmd, revoked); code != 128+int(syscall.SIGKILL) {
			t.Fatalf("exit %d, want %d (killed); stderr: %s", code, 128+int(syscall.SIGKILL), stderr)
		}
		if !strings.Contains(stderr.String(), "SIGKILL after 1s") {
			t.Fatalf("the grace of a 10s lease is not its 1s safety margin: %s", stderr)
		}
	})
	t.Run("forwards SIGTERM", func(t *testing.T) {
		t.Parallel()
		res := "exec/" + uniq(t)
		cmd, lines, stderr := startTenure(t, "exec", res, "--ttl", "5s", "--",
			"sh", "-c", `trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
		if l := nextLine(t, lines); l != "ready" {
			t.Fatalf("first line %q", l)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if l := nextLine(t, lines); l != "got TERM" {
			t.Fatalf("after SIGTERM: %q", l)
		}
		if code, _ := waitExit(t, cmd, time.Now()); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		list := parse(t, ok(t, "ls", "--prefix", res, "--state", "active", "-o", "json"), &tenurev1.ListResponse{})
		if len(list.GetLeases()) != 0 {
			t.Fatalf("lease still active after the command ended: %v", list)
		}
	})
}

func TestCLIBench(t *testing.T) {
	t.Parallel()
	// 3s: the progress line comes every 2 s when stderr is not a terminal.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := tenureCmd(ctx, "bench", "--workload", "cycle", "--concurrency", "4", "--duration", "3s")
	cmd.Env = append(cmd.Env, "TENURE_NAMESPACE=") // no namespace named: its own
	r := runCmd(t, cmd)
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	for _, want := range []string{"cycle (pipeline)", "ops/s", "p50", "p99", "errors"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("bench table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "ops/s") {
		t.Fatalf("no progress line on stderr: %q", r.stderr)
	}
	// It ran in its own namespace.
	if l := parse(t, ok(t, "ls", "--namespace", "bench", "--prefix", "bench/", "--state", "released", "-o", "json"), &tenurev1.ListResponse{}); len(l.GetLeases()) == 0 {
		t.Fatal("no released bench leases in namespace bench")
	}
	for _, args := range [][]string{
		{"--workload", "renew", "--leases", "20", "--concurrency", "4", "--duration", "1s"},
		{"--workload", "renew", "--leases", "40", "--concurrency", "4", "--batch", "10", "--duration", "1s"},
		{"--workload", "queue", "--concurrency", "4", "--batch", "3", "--duration", "1s"},
		{"--workload", "queue", "--concurrency", "2", "--duration", "1s", "--unary"},
		{"--workload", "contended", "--resources", "1", "--concurrency", "4", "--duration", "1s", "--unary"},
		{"--workload", "keepalive", "--leases", "50", "--ttl", "1500ms", "--duration", "1500ms"},
		{"--workload", "pool", "--concurrency", "4", "--files", "2", "--pieces", "40", "--duration", "1500ms"},
		{"--workload", "pool", "--concurrency", "2", "--files", "1", "--pieces", "9", "--batch", "2", "--duration", "1s", "--unary"},
	} {
		out := ok(t, append([]string{"bench", "-o", "json"}, args...)...)
		var res benchResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("bench %v -o json: %v\n%s", args, err, out)
		}
		if res.Ops == 0 || res.OpsPerSec <= 0 {
			t.Fatalf("bench %v: %+v", args, res)
		}
		if res.Workload == "queue" {
			if len(res.Errors) != 0 {
				t.Errorf("queue: errors %v", res.Errors)
			}
			// The run drains what it left: nothing queued or leased.
			var st struct { // protojson: 64-bit counts are strings, zeros are left out
				Queued    int64 `json:"queued,string"`
				Leased    int64 `json:"leased,string"`
				Succeeded int64 `json:"succeeded,string"`
			}
			if err := json.Unmarshal([]byte(ok(t, "queue", "stats", res.Queue, "-o", "json")), &st); err != nil {
				t.Fatal(err)
			}
			if st.Queued != 0 || st.Leased != 0 || st.Succeeded < res.Ops {
				t.Errorf("queue %s after the run: %+v; want nothing queued or leased, at least %d succeeded", res.Queue, st, res.Ops)
			}
		}
		if res.Workload == "pool" {
			// Every piece granted was completed; the peers ran out of the
			// first files' pieces and went on to more.
			st := parse(t, ok(t, "pool", "status", res.Pool, "-o", "json"), &tenurev1.PoolStatusResponse{})
			var done uint64
			for _, f := range st.GetFiles() {
				if f.GetLeased() != 0 {
					t.Errorf("pool %s: file %d has %d pieces leased after the run", res.Pool, f.GetFileIndex(), f.GetLeased())
				}
				done += f.GetDone()
			}
			if len(res.Errors) != 0 || res.Pieces < res.Ops || done != uint64(res.Pieces) || len(st.GetFiles()) <= 2 {
				t.Errorf("pool %v: %+v; %d pieces done in %d files", args, res, done, len(st.GetFiles()))
			}
		}
		if res.Workload == "renew" && slices.Contains(args, "--batch") && (res.Ops%10 != 0 || len(res.Errors) != 0) {
			t.Errorf("renew --batch 10: %d renewals (not whole batches) or errors %v", res.Ops, res.Errors)
		}
		if res.Workload == "contended" && res.Errors["LEASE_HELD"] == 0 {
			t.Errorf("contended without --wait: no LEASE_HELD in %+v", res)
		}
		if res.Workload == "keepalive" && (res.LeasesLost != 0 || res.KeptAlivePerSec != 100) {
			t.Errorf("keepalive: %+v", res)
		}
	}
	// No server: an error at once (exit 1), not a run of failures.
	if r := runTenure(t, "bench", "--duration", "1s", "--concurrency", "2", "--endpoints", freePort()); r.code != 1 || !strings.HasPrefix(r.stderr, "UNAVAILABLE: ") {
		t.Fatalf("bench with no server: %+v", r)
	}
}

// uniq names a resource for this test and run (tests share one server, and
// -count may run them again).
func uniq(t *testing.T) string {
	return fmt.Sprintf("%s/%x", t.Name(), time.Now().UnixNano())
}

// TestStatusTable: the status table says why no leader is known when the
// member that answered is not in the configuration (removed, or not yet
// added) instead of suggesting an election, and points a follower's
// reader to the leader.
func TestStatusTable(t *testing.T) {
	t.Parallel()
	members := []*tenurev1.Member{{Id: "n2", Role: tenurev1.Role_ROLE_UNKNOWN}, {Id: "n3"}}
	heard := []*tenurev1.Member{{Id: "n2", AppliedIndex: 7}, {Id: "n3", AppliedIndex: 7}}
	tests := []struct {
		name string
		st   *tenurev1.StatusResponse
		want string
	}{
		{"removed", &tenurev1.StatusResponse{NodeId: "n1", Members: members},
			"none known: n1, which answered, is not in the cluster's configuration (removed, or not yet added)"},
		{"electing", &tenurev1.StatusResponse{NodeId: "n2", Members: members},
			"none known (an election may be under way; ask again shortly)"},
		{"electing for a moment", &tenurev1.StatusResponse{NodeId: "n2", Members: members, NoLeaderSince: timestamppb.New(time.Now().Add(-2 * time.Second))},
			"none known for 2s (an election may be under way"},
		{"lost quorum", &tenurev1.StatusResponse{NodeId: "n2", Members: members, NoLeaderSince: timestamppb.New(time.Now().Add(-5 * time.Minute))},
			"none known for 5m0s: elections do not succeed"},
		// A member removed while it was down still believes it votes:
		// the advice must not be --force-new-cluster alone.
		{"lost quorum, or removed while down", &tenurev1.StatusResponse{NodeId: "n2", Members: members, NoLeaderSince: timestamppb.New(time.Now().Add(-5 * time.Minute))},
			"or this member was removed while it was down"},
		{"follower", &tenurev1.StatusResponse{NodeId: "n2", LeaderId: "n3", LeaderApiAddress: "127.0.0.1:7072", Members: members},
			"ask it with --endpoints 127.0.0.1:7072"},
		// A follower that has not heard from the leader it names for a
		// while says so (found from outside: followers named a leader
		// that had stepped down after a stall, for 1.6 s).
		// During a rolling upgrade the leader says the cluster applies an
		// older member's rules.
		{"upgrade under way", &tenurev1.StatusResponse{NodeId: "n3", LeaderId: "n3", Version: "v2", Rules: 4, StampedRules: 3, Members: heard},
			"n3 (version v2, rules 4); the cluster applies rules 3: a member runs an older build (upgrade it)"},
		// A member the leader has not heard from counts as an older build
		// until it answers: status names it (found from outside: members
		// that could not reach each other over TLS read as an upgrade).
		{"a member unheard", &tenurev1.StatusResponse{NodeId: "n3", LeaderId: "n3", Version: "v2", Rules: 4, StampedRules: 3, Members: members},
			"the cluster applies rules 3: n2 did not answer the leader's asks for its rules"},
		{"follower of a silent leader", &tenurev1.StatusResponse{NodeId: "n2", LeaderId: "n3", LeaderApiAddress: "127.0.0.1:7072", Members: members,
			LeaderLastContact: timestamppb.New(time.Now().Add(-1600 * time.Millisecond))},
			"n3 (127.0.0.1:7072), last heard from 1.6s ago: it may have stopped or stepped down"},
		// The leader says which member cannot write its log, and how far
		// behind it is (found from outside: a follower whose disk filled
		// showed as healthy).
		{"follower with a failed log", &tenurev1.StatusResponse{NodeId: "n3", LeaderId: "n3", CommitIndex: 9000, Members: []*tenurev1.Member{
			{Id: "n2", Role: tenurev1.Role_ROLE_FOLLOWER, AppliedIndex: 5000, LogFailure: "no space left on device"},
			{Id: "n3", Role: tenurev1.Role_ROLE_LEADER, AppliedIndex: 9000}}},
			"n2 cannot write its Raft log: no space left on device"},
		{"follower with a failed log, its row", &tenurev1.StatusResponse{NodeId: "n3", LeaderId: "n3", CommitIndex: 9000, Members: []*tenurev1.Member{
			{Id: "n2", Role: tenurev1.Role_ROLE_FOLLOWER, AppliedIndex: 5000, LogFailure: "no space left on device"},
			{Id: "n3", Role: tenurev1.Role_ROLE_LEADER, AppliedIndex: 9000}}},
			"follower, not replicating"},
		{"follower behind", &tenurev1.StatusResponse{NodeId: "n3", LeaderId: "n3", CommitIndex: 9000, Members: []*tenurev1.Member{
			{Id: "n2", Role: tenurev1.Role_ROLE_FOLLOWER, AppliedIndex: 5000}}},
			"5000 (4000 behind)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := printStatus(&b, tt.st); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.want) {
				t.Errorf("status table lacks %q:\n%s", tt.want, b.String())
			}
		})
	}
	// A contact of a moment ago is not remarked on.
	var b strings.Builder
	if err := printStatus(&b, &tenurev1.StatusResponse{NodeId: "n2", LeaderId: "n3", LeaderApiAddress: "127.0.0.1:7072", Members: members,
		LeaderLastContact: timestamppb.New(time.Now().Add(-50 * time.Millisecond))}); err != nil || strings.Contains(b.String(), "last heard") {
		t.Errorf("a fresh contact remarked on (%v):\n%s", err, b.String())
	}
}

// TestCLIStale: --stale (before or after the command) asks for a stale
// read; without it none is asked for.
func TestCLIStale(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Tenure-Consistency")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":"not_found","message":"LEASE_NOT_FOUND: no lease x"}`)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	ep := ln.Addr().String()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "x", "--endpoints", ep}, ""},
		{[]string{"get", "x", "--stale", "--endpoints", ep}, "stale"},
		{[]string{"--stale", "get", "x", "--endpoints", ep}, "stale"},
	} {
		if r := runTenure(t, tc.args...); r.code != 1 || !strings.Contains(r.stderr, "LEASE_NOT_FOUND") {
			t.Fatalf("tenure %v: %+v", tc.args, r)
		}
		if h := <-got; h != tc.want {
			t.Errorf("tenure %v sent Tenure-Consistency %q, want %q", tc.args, h, tc.want)
		}
	}
}

// TestCLIBenchInterruptedReleasesItsLeases: Ctrl-C during a bench leaves
// no lease of its own behind (acquires in flight are waited for and
// released, the renew workload's leases released).
func TestCLIBenchInterruptedReleasesItsLeases(t *testing.T) {
	t.Parallel()
	for _, workload := range []string{"cycle", "renew"} {
		ns := "bench-int-" + uniq(t)
		cmd, _, _ := startTenure(t, "bench", "--namespace", ns, "--workload", workload, "--concurrency", "8",
			"--leases", "40", "--duration", "50s")
		waitFor(t, 20*time.Second, workload+" bench going", func() bool {
			l := parse(t, ok(t, "ls", "--namespace", ns, "-o", "json"), &tenurev1.ListResponse{})
			return l.GetCounts().GetReleased() > 0 || l.GetCounts().GetActive() >= 40
		})
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if l := parse(t, ok(t, "ls", "--namespace", ns, "--state", "active", "-o", "json"), &tenurev1.ListResponse{}); len(l.GetLeases()) != 0 {
			t.Errorf("%s: %d leases left active after Ctrl-C: %v", workload, len(l.GetLeases()), l.GetLeases())
		}
	}
}

// --routes (and TENURE_ROUTES) pick the endpoints by namespace: the
// routed namespace reaches the test server, another one the address its
// route names (where nothing listens); --endpoints on the command line
// wins over the routes, the routes over TENURE_ENDPOINTS.
func TestCLIRoutes(t *testing.T) {
	t.Parallel()
	const dead = "127.0.0.1:1" // nothing listens on port 1
	routes := "routed-*=" + apiAddr + ";*=" + dead
	run := func(env []string, args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := tenureCmd(ctx, args...)
		cmd.Env = append(cmd.Env, env...)
		return runCmd(t, cmd)
	}
	res := "routes/" + uniq(t)

	r := run(nil, "acquire", res, "--namespace", "routed-a", "--routes", routes, "--holder", "w1", "-o", "json")
	if r.code != 0 {
		t.Fatalf("acquire in a routed namespace: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := parse(t, r.stdout, &tenurev1.Lease{}).GetLeaseId()
	if out := ok(t, "get", id, "--namespace", "routed-a"); !strings.Contains(out, res) {
		t.Fatalf("the routed lease on the test server:\n%s", out)
	}

	env := []string{"TENURE_ROUTES=" + routes} // TENURE_ENDPOINTS (the test server) is set too
	if r := run(env, "get", id); r.code != 1 || !strings.Contains(r.stderr, dead) {
		t.Errorf("get in namespace default, routed by * to %s: exit %d\n%s", dead, r.code, r.stderr)
	}
	if r := run(env, "get", id, "--namespace", "routed-a"); r.code != 0 || !strings.Contains(r.stdout, res) {
		t.Errorf("get in a routed namespace, routes from the environment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(env, "get", id, "--endpoints", apiAddr); r.code != 0 {
		t.Errorf("--endpoints over TENURE_ROUTES: exit %d\n%s", r.code, r.stderr)
	}
	// policy goes to the cluster of the namespace it names.
	if r := run(env, "policy", "get", "routed-a"); r.code != 0 {
		t.Errorf("policy get of a routed namespace: exit %d\n%s", r.code, r.stderr)
	}
	if r := run(env, "policy", "get", "other"); r.code != 1 || !strings.Contains(r.stderr, dead) {
		t.Errorf("policy get of a namespace routed to %s: exit %d\n%s", dead, r.code, r.stderr)
	}
	// Routes that cover no namespace given stop no command that contacts
	// no server.
	if r := run([]string{"TENURE_ROUTES=orders=" + dead}, "version"); r.code != 0 {
		t.Errorf("version with routes that do not cover its namespace: exit %d\n%s", r.code, r.stderr)
	}

	for _, tc := range []struct{ routes, want string }{
		{"routed-*=" + apiAddr, `no route for namespace "default"`},
		{"a=" + apiAddr + ";a=" + dead, `"a" is routed twice`},
		{"a=nohost", "has no port"},
		{"a", "want NAMESPACE=ENDPOINT"},
	} {
		if r := run(nil, "get", id, "--routes", tc.routes); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("--routes %q: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.routes, r.code, r.stderr, tc.want)
		}
	}
}

// resetter resets every connection once a request has come in, as a
// member killed mid-call (kill -9) does.
func resetter(t *testing.T) string {
	return fakeMember(t, func(c net.Conn) {
		// The HTTP/2 preface, settings and a request's headers.
		_, _ = io.ReadFull(c, make([]byte, 100))
		_ = c.(*net.TCPConn).SetLinger(0) // close with RST
		c.Close()
	})
}

// A member whose connection is reset mid-call (a member killed while a
// call is in flight) is one that did not answer: a read, or a write that
// may be sent again, moves on to the next endpoint, and a write that may
// not fails as OUTCOME_UNKNOWN, as with a hung member, not as a plain
// UNAVAILABLE that reads as "nothing was done".
func TestCLIResetMember(t *testing.T) {
	t.Parallel()
	reset := resetter(t)
	l := acquire(t, "reset/"+uniq(t))
	got := parse(t, ok(t, "get", l.GetLeaseId(), "--endpoints", reset+","+apiAddr, "-o", "json"), &tenurev1.Lease{})
	if got.GetLeaseId() != l.GetLeaseId() {
		t.Fatalf("get through a resetting member first: %v", got)
	}
	ok(t, "release", l.GetLeaseId(), "--endpoints", reset+","+apiAddr)
	fails(t, "OUTCOME_UNKNOWN", "acquire", "reset/"+uniq(t)+"/2", "--endpoints", reset+","+apiAddr)
}

// A wait cut short by Ctrl-C exits 130 (128 + SIGINT), as a shell reports
// a command the signal killed, not 1 as a refusal; the queued acquire is
// withdrawn.
func TestCLIInterruptedWaitExits130(t *testing.T) {
	t.Parallel()
	res := "interrupted/" + uniq(t)
	acquire(t, res)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := tenureCmd(ctx, "acquire", res, "--wait", "50s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		l := parse(t, ok(t, "ls", "--resource", res, "-o", "json"), &tenurev1.ListResponse{})
		return len(l.GetWaiters())
	}
	waitFor(t, 30*time.Second, "the acquire to queue", func() bool { return waiting() == 1 })
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d (%v), want 130", code, err)
	}
	waitFor(t, 30*time.Second, "the queued acquire to be withdrawn", func() bool { return waiting() == 0 })
}
