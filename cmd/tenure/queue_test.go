package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestCLIQueue runs every `tenure queue` subcommand's happy path and one
// error each against the shared test server.
func TestCLIQueue(t *testing.T) {
	t.Parallel()
	q := fmt.Sprintf("cli-queue-%d", time.Now().UnixNano()) // the shared server outlives one run
	// push: --data, --file and stdin; idempotent by --id.
	a := parse(t, ok(t, "queue", "push", q, "--id", "a", "--data", "alpha", "--priority", "1", "-o", "json"), &tenurev1.Task{})
	if a.GetTaskId() != "a" || string(a.GetPayload()) != "alpha" || a.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("push a: %v", a)
	}
	file := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(file, []byte("beta"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := parse(t, ok(t, "queue", "push", q, "--id", "b", "--file", file, "--priority", "5", "--max-attempts", "2", "-o", "json"), &tenurev1.Task{})
	if string(b.GetPayload()) != "beta" || b.GetMaxAttempts() != 2 {
		t.Fatalf("push b: %v", b)
	}
	r := tenureStdin(t, "gamma", "queue", "push", q, "--id", "c", "--not-before", "1h")
	if r.code != 0 || !strings.Contains(r.stdout, "TASK ID") || !strings.Contains(r.stdout, "gamma") {
		t.Fatalf("push from stdin: %+v", r)
	}
	again := parse(t, ok(t, "queue", "push", q, "--id", "a", "--data", "other", "-o", "json"), &tenurev1.Task{})
	if string(again.GetPayload()) != "alpha" {
		t.Fatalf("re-push: %v", again)
	}

	// claim (--worker: the API's name for --holder): priority first; the
	// delayed task is not claimable.
	cl := parse(t, ok(t, "queue", "claim", q, "--max", "5", "--ttl", "1m", "--worker", "cli-worker", "-o", "json"), &tenurev1.ClaimResponse{})
	if len(cl.GetTasks()) != 2 || cl.GetTasks()[0].GetTaskId() != "b" || cl.GetTasks()[0].GetLease().GetHolder() != "cli-worker" {
		t.Fatalf("claim: %v", cl)
	}
	leaseA, leaseB := cl.GetTasks()[1].GetLeaseId(), cl.GetTasks()[0].GetLeaseId()
	if out := ok(t, "queue", "claim", q); !strings.Contains(out, "TASK ID") {
		t.Fatalf("empty claim table: %q", out)
	}

	// complete: by the current lease only.
	fails(t, "TASK_NOT_LEASED", "queue", "complete", q, "a", "--lease", leaseB)
	done := parse(t, ok(t, "queue", "complete", q, "b", "--lease", leaseB, "--result", "ok", "-o", "json"), &tenurev1.Task{})
	if done.GetState() != tenurev1.TaskState_TASK_STATE_SUCCEEDED || string(done.GetResult()) != "ok" {
		t.Fatalf("complete: %v", done)
	}

	// fail: retried later; a second fail by the same lease is a retry, a
	// fail by another lease is refused.
	failed := ok(t, "queue", "fail", q, "a", "--lease", leaseA, "--error", "smtp 451", "--retry-after", "1h")
	if !strings.Contains(failed, "failed") || !strings.Contains(failed, "smtp 451") {
		t.Fatalf("fail:\n%s", failed)
	}
	fails(t, "TASK_NOT_LEASED", "queue", "fail", q, "a", "--lease", leaseB, "--error", "x")

	// get
	got := ok(t, "queue", "get", q, "b")
	for _, want := range []string{"succeeded", "cli-worker", "beta", "result", "last lease id", "last worker"} {
		if !strings.Contains(got, want) {
			t.Fatalf("get: no %q in\n%s", want, got)
		}
	}
	// A task no longer leased shows no lease in the list (its last one
	// is history, in get).
	if out := ok(t, "queue", "ls", q, "--state", "succeeded"); strings.Contains(out, leaseB) {
		t.Fatalf("ls shows the lease of a finished task:\n%s", out)
	}
	fails(t, "TASK_NOT_FOUND", "queue", "get", q, "nope")

	// cancel
	cancelled := parse(t, ok(t, "queue", "cancel", q, "c", "-o", "json"), &tenurev1.Task{})
	if cancelled.GetState() != tenurev1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("cancel: %v", cancelled)
	}
	fails(t, "TASK_NOT_FOUND", "queue", "cancel", q, "nope")
	// retry runs it again, and cancel once more.
	retried := parse(t, ok(t, "queue", "retry", q, "c", "-o", "json"), &tenurev1.Task{})
	if retried.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED || retried.GetAttempts() != 0 {
		t.Fatalf("retry: %v", retried)
	}
	fails(t, "TASK_NOT_FOUND", "queue", "retry", q, "nope")
	ok(t, "queue", "cancel", q, "c")
	if out := ok(t, "queue", "list"); !strings.Contains(out, "QUEUE") || !strings.Contains(out, q+" ") {
		t.Fatalf("queue list:\n%s", out)
	}

	// ls: paging with --all, state filter.
	ls := parse(t, ok(t, "queue", "ls", q, "--page-size", "1", "--all", "-o", "json"), &tenurev1.ListTasksResponse{})
	if len(ls.GetTasks()) != 3 || ls.GetNextPageToken() != "" {
		t.Fatalf("ls --all: %v", ls)
	}
	r = runTenure(t, "queue", "ls", q, "--page-size", "1")
	if r.code != 0 || !strings.Contains(r.stderr, "--page-token") {
		t.Fatalf("ls one page: %+v", r)
	}
	if out := ok(t, "queue", "ls", q, "--state", "failed,cancelled"); strings.Contains(out, "succeeded") || !strings.Contains(out, "cancelled") {
		t.Fatalf("ls --state:\n%s", out)
	}
	fails(t, "INVALID_ARGUMENT", "queue", "ls", strings.Repeat("q", 1000))

	// stats
	st := parse(t, ok(t, "queue", "stats", q, "-o", "json"), &tenurev1.QueueStatsResponse{})
	if st.GetSucceeded() != 1 || st.GetFailed() != 1 || st.GetCancelled() != 1 {
		t.Fatalf("stats: %v", st)
	}
	if out := ok(t, "queue", "stats", q); !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("stats table:\n%s", out)
	}
	fails(t, "INVALID_ARGUMENT", "queue", "stats", "")
	fails(t, "INVALID_ARGUMENT", "queue", "push", "", "--data", "x")
	fails(t, "INVALID_ARGUMENT", "queue", "claim", "")
}

func TestCLIQueueUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"queue"},
		{"queue", "explode"},
		{"queue", "push"},
		{"queue", "push", "q", "--data", "x", "--file", "y"},
		{"queue", "push", "q", "--not-before", "someday"},
		{"queue", "complete", "q", "t"},
		{"queue", "fail", "q", "t", "--lease", "l"},
		{"queue", "get", "q"},
		{"queue", "ls", "q", "--state", "sleeping"},
		{"queue", "stats", "q", "extra"},
		{"queue", "claim", "q", "--max", "lots"},
	} {
		r := runTenure(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "usage") {
			t.Errorf("tenure %s: exit %d, stderr %q; want 2 and a usage line", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if out := ok(t, "queue", "--help"); !strings.Contains(out, "claim") {
		t.Fatalf("queue --help:\n%s", out)
	}
	for _, sub := range []string{"push", "claim", "complete", "fail", "cancel", "retry", "get", "ls", "stats", "list"} {
		out := ok(t, "queue", sub, "--help")
		if !strings.HasPrefix(out, "usage: tenure queue "+sub) || !strings.Contains(out, "examples:") || !strings.Contains(out, "-endpoints") {
			t.Errorf("help of queue %s:\n%s", sub, out)
		}
	}
}
