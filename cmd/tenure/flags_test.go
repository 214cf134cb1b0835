package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// usageFails runs the binary and checks it exits 2 with a usage line and
// every one of want in stderr.
func usageFails(t *testing.T, want []string, args ...string) {
	t.Helper()
	r := runTenure(t, args...)
	if r.code != 2 || !strings.Contains(r.stderr, "usage") {
		t.Fatalf("tenure %s: exit %d, stderr %q; want exit 2 and a usage line", strings.Join(args, " "), r.code, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("tenure %s: no %q in stderr %q", strings.Join(args, " "), w, r.stderr)
		}
	}
}

// TestCLIExplicitTTL checks that an explicit non-positive --ttl reaches
// the server (TTL_OUT_OF_RANGE) instead of being taken for "no ttl", and
// that a negative --wait is refused; nothing changes either way.
func TestCLIExplicitTTL(t *testing.T) {
	t.Parallel()
	res := "ttl/" + uniq(t)
	fails(t, "TTL_OUT_OF_RANGE", "acquire", res, "--ttl", "0s")
	fails(t, "TTL_OUT_OF_RANGE", "acquire", res, "--ttl", "-5s")
	usageFails(t, []string{"--wait"}, "acquire", res, "--wait", "-1s")
	// The Go client of --hold and exec cannot send a zero ttl: refused here.
	usageFails(t, []string{"--ttl"}, "acquire", res, "--ttl", "0s", "--hold")
	usageFails(t, []string{"--wait"}, "acquire", res, "--wait", "-1s", "--hold")
	usageFails(t, []string{"--ttl"}, "exec", res, "--ttl", "0s", "--", "true")
	usageFails(t, []string{"--wait"}, "exec", res, "--wait", "-1s", "--", "true")
	usageFails(t, []string{"--grace"}, "exec", res, "--grace", "-1s", "--", "true")
	usageFails(t, []string{"--ttl"}, "bench", "--ttl", "0s")
	usageFails(t, []string{"--wait"}, "bench", "--wait", "-1s")
	if ls := parse(t, ok(t, "ls", "--prefix", res, "-o", "json"), &tenurev1.ListResponse{}); len(ls.GetLeases()) != 0 {
		t.Fatalf("refused acquires left leases: %v", ls)
	}

	l := acquire(t, res, "--ttl", "30s", "--holder", "w1")
	id := l.GetLeaseId()
	fails(t, "TTL_OUT_OF_RANGE", "renew", id, "--holder", "w1", "--ttl", "0s")
	fails(t, "TTL_OUT_OF_RANGE", "transfer", id, "w2", "--holder", "w1", "--ttl", "0s")
	fails(t, "TTL_OUT_OF_RANGE", "derive", id, res+"/child", "--holder", "w1", "--new-holder", "a", "--ttl", "0s")
	got := parse(t, ok(t, "get", id, "-o", "json"), &tenurev1.Lease{})
	if got.GetState() != tenurev1.State_STATE_ACTIVE || got.GetHolder() != "w1" || got.GetRenewalCount() != 0 || got.GetTtl().AsDuration() != 30*time.Second {
		t.Fatalf("refused renew/transfer changed the lease: %v", got)
	}
	if ls := parse(t, ok(t, "ls", "--prefix", res+"/child", "-o", "json"), &tenurev1.ListResponse{}); len(ls.GetLeases()) != 0 {
		t.Fatalf("refused derive left a lease: %v", ls)
	}
	// An explicit, valid ttl still goes through.
	renewed := parse(t, ok(t, "renew", id, "--holder", "w1", "--ttl", "45s", "-o", "json"), &tenurev1.RenewResponse{})
	if len(renewed.GetLeases()) != 1 || renewed.GetLeases()[0].GetTtl().AsDuration() != 45*time.Second {
		t.Fatalf("renew --ttl 45s: %v", renewed)
	}
}

// TestCLIQueueExplicitFlags checks the queue flags that were silently
// ignored, wrapped or overridden: --ttl 0s, negative --wait and
// --retry-after, --holder against --worker, and integers past 32 bits.
func TestCLIQueueExplicitFlags(t *testing.T) {
	t.Parallel()
	q := fmt.Sprintf("cli-queue-flags-%d", time.Now().UnixNano())
	ok(t, "queue", "push", q, "--id", "a", "--data", "alpha", "--priority", "2147483647", "--max-attempts", "7")
	for _, args := range [][]string{
		{"--priority", "2147483648"},
		{"--priority", "-2147483649"},
		{"--priority", "4294967296"},
		{"--max-attempts", "4294967297"},
	} {
		usageFails(t, []string{"-" + strings.TrimLeft(args[0], "-"), "32 bits"}, append([]string{"queue", "push", q, "--data", "x"}, args...)...)
	}
	usageFails(t, []string{"-max", "32 bits"}, "queue", "claim", q, "--max", "4294967297")
	usageFails(t, []string{"-page-size", "32 bits"}, "queue", "ls", q, "--page-size", "4294967296")
	usageFails(t, []string{"--wait"}, "queue", "claim", q, "--wait", "-1s")
	usageFails(t, []string{"--max must be at least 1"}, "queue", "claim", q, "--max", "0")
	usageFails(t, []string{"--holder", "--worker"}, "queue", "claim", q, "--holder", "h1", "--worker", "w2")
	fails(t, "TTL_OUT_OF_RANGE", "queue", "claim", q, "--ttl", "0s")
	st := parse(t, ok(t, "queue", "stats", q, "-o", "json"), &tenurev1.QueueStatsResponse{})
	if st.GetQueued() != 1 || st.GetLeased() != 0 {
		t.Fatalf("refused pushes and claims changed the queue: %v", st)
	}
	a := parse(t, ok(t, "queue", "get", q, "a", "-o", "json"), &tenurev1.Task{})
	if a.GetPriority() != 2147483647 || a.GetMaxAttempts() != 7 {
		t.Fatalf("push at the int32 limit: %v", a)
	}

	// --holder and --worker agreeing is fine.
	cl := parse(t, ok(t, "queue", "claim", q, "--holder", "h1", "--worker", "h1", "-o", "json"), &tenurev1.ClaimResponse{})
	if len(cl.GetTasks()) != 1 || cl.GetTasks()[0].GetLease().GetHolder() != "h1" {
		t.Fatalf("claim --holder h1 --worker h1: %v", cl)
	}
	lease := cl.GetTasks()[0].GetLeaseId()
	usageFails(t, []string{"--retry-after"}, "queue", "fail", q, "a", "--lease", lease, "--error", "bad", "--retry-after", "-3s")
	if got := parse(t, ok(t, "queue", "get", q, "a", "-o", "json"), &tenurev1.Task{}); got.GetState() != tenurev1.TaskState_TASK_STATE_LEASED {
		t.Fatalf("refused fail changed the task: %v", got)
	}
	// An explicit --retry-after 0s retries at once (not after a backoff).
	failed := parse(t, ok(t, "queue", "fail", q, "a", "--lease", lease, "--error", "bad", "--retry-after", "0s", "-o", "json"), &tenurev1.Task{})
	if nb := failed.GetNotBefore(); nb != nil && time.Until(nb.AsTime()) > time.Second {
		t.Fatalf("fail --retry-after 0s: not before %v", nb.AsTime())
	}
}

// TestCLIInt32Flags checks the lease commands' 32-bit integer flags.
func TestCLIInt32Flags(t *testing.T) {
	t.Parallel()
	usageFails(t, []string{"-page-size", "32 bits"}, "ls", "--page-size", "2147483648")
	usageFails(t, []string{"-limit", "32 bits"}, "history", "r", "--limit", "4294967296")
	usageFails(t, []string{"-limit", "not an integer"}, "history", "r", "--limit", "many")
}

// TestCLIPoolFlags checks want --all on a file the pool knows (no --pieces
// needed) and the 32-bit pool flags.
func TestCLIPoolFlags(t *testing.T) {
	t.Parallel()
	pool := poolName()
	if out := ok(t, "pool", "want", pool, "--file", "0", "--pieces", "10", "--range", "0-3"); !strings.Contains(out, "4 pieces became wanted") {
		t.Fatalf("want --range:\n%s", out)
	}
	wr := parse(t, ok(t, "pool", "want", pool, "--file", "0", "--all", "-o", "json"), &tenurev1.WantResponse{})
	if wr.GetAdded() != 6 || wr.GetFile().GetWanted() != 10 || wr.GetFile().GetPieces() != 10 {
		t.Fatalf("want --all of a known file: %v", wr)
	}
	// An unknown file, or pool, still needs --pieces, and nothing is created.
	usageFails(t, []string{"--pieces"}, "pool", "want", pool, "--file", "1", "--all")
	other := poolName() + "x"
	usageFails(t, []string{"--pieces"}, "pool", "want", other, "--file", "0", "--all")
	fails(t, "POOL_NOT_FOUND", "pool", "status", other)
	st := parse(t, ok(t, "pool", "status", pool, "-o", "json"), &tenurev1.PoolStatusResponse{})
	if len(st.GetFiles()) != 1 {
		t.Fatalf("status: %v", st)
	}

	for _, args := range [][]string{
		{"pool", "create", pool, "--max-leases-per-peer", "4294967296"},
		{"pool", "want", pool, "--file", "4294967296", "--pieces", "1", "--all"},
		{"pool", "want", pool, "--file", "0", "--pieces", "4294967306", "--all"},
		{"pool", "request", pool, "--peer", "p", "--have", "0:0", "--max", "4294967297"},
		{"pool", "complete", pool, "--peer", "p", "--file", "0", "--piece", "4294967296", "--success"},
	} {
		usageFails(t, []string{"32 bits"}, args...)
	}
}

// TestCLIMistakesGetSuggestions: a mistyped command or flag names what
// was probably meant, a duration without a unit says it needs one, an
// environment variable's bad value is named as such, and `tenure help
// CMD` and `tenure --version` work.
// TestCLIUsageErrorsNameTheProblem: each local mistake is a usage error
// (exit 2) that says what is wrong, not a neighbouring complaint.
func TestCLIUsageErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"consume", "L1", "tokens", "-1"}, "AMOUNT must be a positive integer"}, // a negative number is an argument
		{[]string{"fence", "check", "r", "-1"}, `FENCE must be a number, got "-1"`},
		{[]string{"fence", "bogus"}, `unknown subcommand "bogus" (want check)`},
		{[]string{"fence", "check", "r"}, "fence check takes RESOURCE and FENCE"},
		{[]string{"queue", "bogus", "q"}, "stats, config or list"},
		{[]string{"exec", "r", "--"}, "missing COMMAND"},
		{[]string{"state", "put", "r", "--lease", "L1", "--epoch", "abc"}, `--epoch must be a whole number`},
		{[]string{"watch", "--count", "-1"}, "--count must not be negative"},
		{[]string{"watch", "--prefix", "\xff"}, "is not UTF-8"},
		{[]string{"bench", "--concurrency", "0"}, "--concurrency must be positive, got 0"},
		{[]string{"bench", "--pieces", "0"}, "--pieces must be positive, got 0"},
		{[]string{"cert", "verify", "--skew", "-5s"}, "--skew must not be negative"},
		{[]string{"policy", "set", "agents", "--max-ttl", "-5m"}, "--max-ttl: must not be negative"},
		{[]string{"policy", "set", "agents", "--max-state-bytes", "10XB"}, "is not a size"},
		{[]string{"acquire", "x", "--budget", "tokens=99999999999999999999999"}, "out of range"},
	} {
		usageFails(t, []string{tt.want}, tt.args...)
	}
	// An integer flag gets no hint about durations.
	if r := runTenure(t, "ls", "--page-size", "x"); r.code != 2 || strings.Contains(r.stderr, "duration") {
		t.Errorf("ls --page-size x: exit %d, %q", r.code, r.stderr)
	}
	if out := ok(t, "bench", "--help"); strings.Contains(out, "(default 4) (default 1)") {
		t.Errorf("bench --batch's help gives two defaults:\n%s", out)
	}
}

func TestCLIMistakesGetSuggestions(t *testing.T) {
	t.Parallel()
	usageFails(t, []string{`unknown command "aquire"; did you mean "acquire"?`}, "aquire", "x")
	usageFails(t, []string{"did you mean --ttl?"}, "acquire", "x", "--tll", "5s")
	usageFails(t, []string{`invalid value "bad" for flag --ttl`}, "acquire", "x", "--ttl", "bad")
	if r := runTenure(t, "transfer", "x", "--to", "w2"); r.code != 2 || strings.Contains(r.stderr, "did you mean") {
		t.Errorf("transfer --to: %d %q, want a usage error suggesting nothing (not -o)", r.code, r.stderr)
	}
	usageFails(t, []string{"a duration takes a unit"}, "acquire", "x", "--ttl", "5")
	usageFails(t, []string{"did you mean --data-dir?"}, "server", "--data-dirr", t.TempDir())
	usageFails(t, []string{`unknown subcommand "nope" (want get or put)`}, "state", "nope")
	if out := ok(t, "help", "acquire"); !strings.Contains(out, "usage: tenure acquire") {
		t.Errorf("tenure help acquire:\n%s", out)
	}
	if out := ok(t, "--version"); !strings.Contains(out, "tenure") {
		t.Errorf("tenure --version: %q", out)
	}
	cmd := tenureCmd(t.Context(), "server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "TENURE_MAX_TTL=abc")
	if r := runCmd(t, cmd); r.code != 2 || !strings.Contains(r.stderr, "TENURE_MAX_TTL (for --max-ttl)") {
		t.Errorf("a bad TENURE_MAX_TTL: %+v", r)
	}
}

func TestSuggestion(t *testing.T) {
	names := []string{"acquire", "release", "renew", "ls", "get", "watch"}
	for word, want := range map[string]string{"aquire": "acquire", "relase": "release", "lss": "ls", "gett": "get", "xyz": "", "wtch": "watch"} {
		if got := suggestion(word, names); got != want {
			t.Errorf("suggestion(%q) = %q, want %q", word, got, want)
		}
	}
}

// Task text that holds control characters (an escape sequence) is printed
// quoted, never raw to the terminal; plain text, newlines included, as is.
func TestCLIQueueTextIsTerminalSafe(t *testing.T) {
	t.Parallel()
	q := fmt.Sprintf("cli-queue-text-%d", time.Now().UnixNano())
	for _, out := range []string{
		ok(t, "queue", "push", q, "--id", "esc", "--data", "clear\x1b[2Jscreen"),
		ok(t, "queue", "get", q, "esc"),
		ok(t, "queue", "ls", q),
	} {
		if strings.ContainsRune(out, 0x1b) || !strings.Contains(out, `\x1b[2J`) {
			t.Fatalf("output with the payload raw, or not quoted:\n%q", out)
		}
	}
	ok(t, "queue", "push", q, "--id", "plain", "--data", "line one\nline two")
	if out := ok(t, "queue", "get", q, "plain"); !strings.Contains(out, "line one\nline two") {
		t.Fatalf("plain text quoted:\n%q", out)
	}
}

// tenure queue config prints a queue's defaults and sets its max attempts.
func TestCLIQueueConfig(t *testing.T) {
	t.Parallel()
	q := fmt.Sprintf("cli-queue-config-%d", time.Now().UnixNano())
	if out := ok(t, "queue", "config", q); !strings.Contains(out, "max attempts  5") {
		t.Fatalf("default config:\n%s", out)
	}
	if out := ok(t, "queue", "config", q, "--max-attempts", "8"); !strings.Contains(out, "max attempts  8") {
		t.Fatalf("set:\n%s", out)
	}
	ok(t, "queue", "push", q, "--id", "a", "--data", "x")
	if out := ok(t, "queue", "get", q, "a"); !strings.Contains(out, "0/8") {
		t.Fatalf("a task pushed without --max-attempts:\n%s", out)
	}
	fails(t, "INVALID_ARGUMENT", "queue", "config", q, "--max-attempts", "1001")
}

// TestUnknownServerEnv: tenure server names the TENURE_* variables nothing
// reads (a misspelt one left its setting at the default, unnoticed), and
// not those of its flags, of the CLI's client commands or of tenure exec.
func TestUnknownServerEnv(t *testing.T) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.String("max-ttl", "", "")
	fs.String("data-dir", "", "")
	got := unknownEnv(fs, []string{"TENURE_MAXTTL=3m", "TENURE_MAX_TTL=3m", "TENURE_DATA_DIR=/d", "TENURE_ENDPOINTS=x",
		"TENURE_LEASE_FENCE=4", "HOME=/root", "TENURE_DATADIR=/d"})
	if !slices.Equal(got, []string{"TENURE_MAXTTL", "TENURE_DATADIR"}) {
		t.Fatalf("unknownEnv: %v", got)
	}
	if s := suggestion("TENURE_MAXTTL", serverEnvNames(fs)); s != "TENURE_MAX_TTL" {
		t.Fatalf("suggestion for TENURE_MAXTTL: %q", s)
	}
}
