package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	tenure "github.com/tenurehq/tenure/client"
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
		{"malformed peers", []string{"server", "--peers", "a127.0.0.1:1"}, 2, "--peers"},
		{"peers without node id", []string{"server", "--peers", "a=127.0.0.1:1"}, 2, "--node-id"},
		{"peers and join", []string{"server", "--node-id", "a", "--peers", "a=127.0.0.1:1", "--join", "127.0.0.1:7070"}, 2, "exclude"},
		{"malformed join", []string{"server", "--join", "nowhere"}, 2, "--join"},
		{"unknown log level", []string{"server", "--log-level", "verbose"}, 2, `--log-level: "verbose" is not a level: debug, info, warn or error`},
		{"public listen without insecure", []string{"server", "--listen", "0.0.0.0:7070"}, 2, "--insecure"},
		{"unusable data dir", []string{"server", "--data-dir", "", "--listen", "127.0.0.1:0"}, 1, "DataDir"},
		// A file named on the command line that cannot be read fails with
		// a reason, as text and in -o json (with its code).
		{"unreadable file", []string{"queue", "push", "q", "--file", "/nonexistent/task"}, 1, "INVALID_ARGUMENT: open /nonexistent/task"},
		{"unreadable file, json", []string{"cert", "verify", "--file", "/nonexistent/lease.json", "-o", "json"}, 1,
			`{"error":{"reason":"INVALID_ARGUMENT","code":"invalid_argument","message":"INVALID_ARGUMENT: open /nonexistent/lease.json`},
		{"unreadable key file", []string{"audit", "verify", "--data-dir", ".", "--public-key", "@/nonexistent/key"}, 1, "INVALID_ARGUMENT: --public-key: open"},
		{"bad key", []string{"audit", "verify", "--data-dir", ".", "--public-key", "zz"}, 2, "--public-key: not hex"},
		{"unknown audit subcommand", []string{"audit", "bogus", "--data-dir", "/nonexistent"}, 2, `unknown subcommand "bogus"`},
		{"export with a key", []string{"audit", "export", "--data-dir", ".", "--public-key", "@k"}, 2, "--public-key is for verify and prune"},
		{"unreadable CA", []string{"get", "x", "--tls-ca", "/nonexistent/ca.pem"}, 1, "INVALID_ARGUMENT: --tls-ca: open /nonexistent/ca.pem"},
		// The key before the lease: stdin is not read for a key that fails.
		{"cert with an unreadable key", []string{"cert", "verify", "--public-key", "@/nonexistent/key"}, 1, "INVALID_ARGUMENT: --public-key: open"},
		{"reason's code in json", []string{"backup", "inspect", "/nonexistent/x.backup", "-o", "json"}, 1, `"reason":"INVALID_ARGUMENT","code":"invalid_argument"`},
		// A usage error in json: its message starts with the reason, as
		// every other error's does.
		{"usage error in json", []string{"acquire", "-o", "json"}, 2, `"message":"INVALID_ARGUMENT: acquire: `},
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

// startServer runs `tenure server args…` until the test ends.
func startServer(t *testing.T, ready chan *server.Server, args ...string) *server.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out bytes.Buffer
	go func() { done <- run(ctx, append([]string{"server"}, args...), &out, &out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("exit %d", code)
			}
		case <-time.After(15 * time.Second):
			t.Error("server did not stop")
		}
	})
	select {
	case s := <-ready:
		return s
	case code := <-done:
		t.Fatalf("server exited with %d: %s", code, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return nil
}

// TestServerJoin: `tenure server --join` adds a node to a running one as
// a voter, and TENURE_PEERS is read like --peers.
func TestServerJoin(t *testing.T) {
	ready := make(chan *server.Server, 2)
	onServerReady = func(s *server.Server) { ready <- s }
	defer func() { onServerReady = nil }()
	a := startServer(t, ready, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0")
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := a.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	b := startServer(t, ready, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0",
		"--node-id", "node2", "--join", a.Addr())
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := a.Node().Status()
		if err == nil && len(st.Members) == 2 && st.Members[1].APIAddress == b.Addr() {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("node2 not a published member: %+v %v", st, err)
		case <-tick.C:
		}
	}
}

func TestPeersMustListThisNode(t *testing.T) {
	var out bytes.Buffer
	dir := filepath.Join(t.TempDir(), "data")
	code := run(context.Background(), []string{"server", "--data-dir", dir, "--node-id", "c",
		"--peers", "a=127.0.0.1:1,b=127.0.0.1:2", "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"}, &out, &out)
	if code != 2 || !strings.Contains(out.String(), "does not list this node") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	// A refused start leaves the data dir alone (a start with the id
	// corrected then works on it).
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused start made the data dir: %v", err)
	}
}

func TestPeersFromEnv(t *testing.T) {
	t.Setenv("TENURE_PEERS", "a=127.0.0.1:1,a=127.0.0.1:2")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"server", "--node-id", "a"}, &out, &out); code != 2 || !strings.Contains(out.String(), "twice") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}

// TestFirstAnswerRetriesWhileNothingListens: a command started a moment
// before its server (connection refused) goes through the endpoints again
// until one answers, within retryFor; any other error ends it at once.
func TestFirstAnswerRetriesWhileNothingListens(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	calls := 0
	err := firstAnswer([]int{1, 2}, func(int) error {
		calls++
		if calls <= 4 { // both endpoints, twice
			return refused
		}
		return nil
	})
	if err != nil || calls != 5 {
		t.Fatalf("got %v after %d calls, want success on the 5th", err, calls)
	}

	calls = 0
	err = firstAnswer([]int{1}, func(int) error {
		calls++
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("LEASE_HELD: held"))
	})
	if calls != 1 || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("got %v after %d calls, want the refusal at once", err, calls)
	}

	old := retryFor
	retryFor = 200 * time.Millisecond
	defer func() { retryFor = old }()
	calls = 0
	err = firstAnswer([]int{1}, func(int) error { calls++; return refused })
	if !errors.As(err, new(*net.OpError)) || calls < 2 {
		t.Fatalf("got %v after %d calls, want the dial error after a few tries", err, calls)
	}

	// One member answers NOT_LEADER (no leader: a lost quorum), the next
	// is down: the member's answer is the one reported.
	noLeader := withInfo(connect.NewError(connect.CodeUnavailable, errors.New("NOT_LEADER: no leader is known")), "NOT_LEADER")
	err = firstAnswer([]int{1, 2}, func(i int) error {
		if i == 1 {
			return noLeader
		}
		return refused
	})
	if tenure.ReasonOf(err) != tenure.ReasonNotLeader {
		t.Fatalf("got %v, want the member's NOT_LEADER over the other's dial error", err)
	}
}

// TestHint: transport errors that do not name their usual cause get a
// hint; others get none.
func TestHint(t *testing.T) {
	for msg, want := range map[string]string{
		`unavailable: unexpected EOF`: "--tls-ca or an https:// endpoint",
		`unavailable: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer`:         "--tls-ca or an https:// endpoint",
		`tls: failed to verify certificate: x509: certificate signed by unknown authority`:       "with --tls-ca",
		`x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs`: "subjectAltName",
		`LEASE_HELD: orders/42 is held by lease 01J…`:                                            "",
		`unavailable: dial tcp 127.0.0.1:7070: connect: connection refused`:                      "is a tenure server running",
		`unavailable: http2: frame too large`:                                                    "does not speak Tenure's API",
		`canceled: write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe`:                       "not its Raft one",
		`unavailable: http: server gave HTTP response to HTTPS client`:                           "use an http:// endpoint",
	} {
		got := hint(errors.New(msg))
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("hint(%q) = %q, want one containing %q", msg, got, want)
		}
	}
}

// TestReasonHint: an OUTCOME_UNKNOWN made from a transport's error gets
// its hint; one a server gave (a follower whose forward to the leader
// broke) gets none: a server did answer.
func TestReasonHint(t *testing.T) {
	const msg = "OUTCOME_UNKNOWN: the write forwarded to the leader n3 broke off (unavailable: unexpected EOF)"
	if h := reasonHint(tenure.ParseError(connect.NewError(connect.CodeUnavailable, errors.New(msg)))); !strings.Contains(h, "--tls-ca") {
		t.Errorf("a transport's error: hint %q", h)
	}
	ce := withInfo(connect.NewError(connect.CodeUnavailable, errors.New(msg)), "OUTCOME_UNKNOWN")
	if h := reasonHint(tenure.ParseError(ce)); h != "" {
		t.Errorf("a server's answer: hint %q", h)
	}
}

// TestLostLease: a lease lost because its trust window passed says so
// (LEASE_LOST), with the last renewal's error after it, even when that
// error is a registrar's (NOT_LEADER during an election); a lease the
// registrar ended says the registrar's reason first.
func TestLostLease(t *testing.T) {
	notLeader := tenure.ParseError(withInfo(connect.NewError(connect.CodeUnavailable, errors.New("NOT_LEADER: no leader is known")), "NOT_LEADER"))
	trust := &tenure.LostError{LeaseID: "L1", Resource: "r", Cause: fmt.Errorf("%w (last error: %w)", tenure.ErrTrustWindowPassed, notLeader)}
	if got := lostLease("L1", "r", trust).Error(); !strings.HasPrefix(got, "LEASE_LOST: lease L1 on r: trust window passed") || !strings.Contains(got, "NOT_LEADER") {
		t.Errorf("trust window passed: %q", got)
	}
	revoked := tenure.ParseError(withInfo(connect.NewError(connect.CodeFailedPrecondition, errors.New("LEASE_TERMINAL: revoked")), "LEASE_TERMINAL"))
	if got := lostLease("L1", "r", &tenure.LostError{LeaseID: "L1", Resource: "r", Cause: revoked}).Error(); !strings.HasPrefix(got, "LEASE_TERMINAL: revoked (lease L1 on r lost)") {
		t.Errorf("revoked: %q", got)
	}
}

// withInfo adds Tenure's ErrorInfo with reason to ce, as a server does.
func withInfo(ce *connect.Error, reason string) *connect.Error {
	d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: "tenure"})
	if err != nil {
		panic(err)
	}
	ce.AddDetail(d)
	return ce
}

// TestHoistFlags: client flags before the command move after it (after
// a subcommand); anything else stays where it is.
func TestHoistFlags(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"--endpoints a:1 ls", "ls --endpoints a:1"},
		{"--endpoints=a:1 -o json get X", "get --endpoints=a:1 -o json X"},
		{"--namespace n queue stats q", "queue stats --namespace n q"},
		{"--token t cluster status", "cluster --token t status"},
		{"ls --endpoints a:1", "ls --endpoints a:1"},
		{"--help", "--help"},
		{"--holder h ls", "--holder h ls"},
		{"--endpoints", "--endpoints"},
		{"--endpoints a:1", "--endpoints a:1"},
		{"--stale get X", "get --stale X"},
		{"--stale --endpoints a:1 ls", "ls --stale --endpoints a:1"},
	} {
		if got := strings.Join(hoistFlags(strings.Fields(c.in)), " "); got != c.want {
			t.Errorf("hoistFlags(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// leaderFirst puts the endpoint naming the leader first, whatever its
// form, and leaves the list alone when none does.
func TestLeaderFirst(t *testing.T) {
	for _, c := range []struct {
		eps          []string
		leader, want string
	}{
		{[]string{"127.0.0.1:1", "127.0.0.1:2"}, "127.0.0.1:2", "127.0.0.1:2,127.0.0.1:1"},
		{[]string{"a:1", "http://b:2/", "c:3"}, "b:2", "http://b:2/,a:1,c:3"},
		{[]string{"a:1", "b:2"}, "a:1", "a:1,b:2"},
		{[]string{"a:1", "b:2"}, "c:3", "a:1,b:2"},
		{[]string{"a:1", "b:2"}, "", "a:1,b:2"},
	} {
		if got := leaderFirst(c.eps, c.leader); got != c.want {
			t.Errorf("leaderFirst(%v, %q) = %q, want %q", c.eps, c.leader, got, c.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "123": 123, "10B": 10, "500MB": 500e6, "2kB": 2000,
		"4GiB": 4 << 30, "1 TiB": 1 << 40, "3KiB": 3072, "7GB": 7e9} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseSize("18446744073709551615"); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("parseSize of 2^64-1: %v, want too large", err)
	}
	for _, in := range []string{"", "x", "-1", "4gb", "4 PB", "1.5GiB", "9999999TiB", "GiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestUsageNamesEverySubcommand: the top-level help's summaries of queue
// and pool list every subcommand they have.
func TestUsageNamesEverySubcommand(t *testing.T) {
	for group, subs := range map[string]map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"queue": queueSubcommands, "pool": poolSubcommands,
	} {
		i := strings.Index(usage, "\n  "+group+" ")
		if i < 0 {
			t.Fatalf("usage does not list %s", group)
		}
		line, _, _ := strings.Cut(usage[i+1:], "\n")
		for name := range subs {
			if !regexp.MustCompile(`\b` + name + `\b`).MatchString(line) {
				t.Errorf("usage's %s line lacks %s: %q", group, name, line)
			}
		}
	}
}

func TestBenchNamespaceFor(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		want     string
	}{
		{[]string{"*"}, "bench"},
		{[]string{"be*"}, "bench"},
		{[]string{"default"}, "default"},
		{[]string{"team-*", "jobs"}, "jobs"},
		{[]string{"team-*"}, "team-bench"},
		{nil, "bench"},
	} {
		if got := benchNamespaceFor(c.patterns); got != c.want {
			t.Errorf("benchNamespaceFor(%q) = %q, want %q", c.patterns, got, c.want)
		}
	}
}

func TestParseBool(t *testing.T) {
	for v, want := range map[string]bool{"": false, "1": true, "true": true, "TRUE": true, "yes": true, "on": true, "0": false, "no": false, "off": false, "False": false} {
		if got, err := parseBool(v); err != nil || got != want {
			t.Errorf("parseBool(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	if _, err := parseBool("maybe"); err == nil {
		t.Error(`parseBool("maybe") is not an error`)
	}
}

// A file the disk failed (full, read-only, an I/O error) is UNAVAILABLE;
// one named wrongly on the command line, INVALID_ARGUMENT.
func TestFileReason(t *testing.T) {
	for _, tc := range []struct {
		errno error
		want  string
	}{
		{syscall.ENOSPC, "UNAVAILABLE: "},
		{syscall.EROFS, "UNAVAILABLE: "},
		{syscall.EIO, "UNAVAILABLE: "},
		{syscall.ENOENT, "INVALID_ARGUMENT: "},
		{syscall.EACCES, "INVALID_ARGUMENT: "},
	} {
		err := fileReason(fmt.Errorf("shutting down: ledger: %w", &fs.PathError{Op: "write", Path: "d/ledger/1.ndjson", Err: tc.errno}))
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v, want the reason %q", tc.errno, err, tc.want)
		}
	}
}
