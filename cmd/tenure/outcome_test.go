package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// forwardBreaker is a member whose forwards to the leader break off: it
// answers every call OUTCOME_UNKNOWN (unavailable), as a follower does
// when the leader is killed while it forwards a write.
func forwardBreaker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", freePort())
	if err != nil {
		t.Fatal(err)
	}
	ew := connect.NewErrorWriter()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := connect.NewError(connect.CodeUnavailable, errors.New("OUTCOME_UNKNOWN: the write forwarded to the leader broke off"))
		if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "OUTCOME_UNKNOWN", Domain: "tenure"}); err == nil {
			e.AddDetail(d)
		}
		_ = ew.Write(w, r, e)
	})}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// A write that is safe to repeat is sent to the next member when a member
// answers OUTCOME_UNKNOWN (its forward to a lost leader broke off), as
// when the member itself does not answer: a push with --id and a
// complete (a fail, a cancel) go through during a failover; a push without --id, which
// would enqueue a second task, fails as OUTCOME_UNKNOWN.
func TestCLIResendsAfterForwardBrokeOff(t *testing.T) {
	t.Parallel()
	broken := forwardBreaker(t)
	eps := broken + "," + apiAddr
	q := fmt.Sprintf("cli-resend-%d", time.Now().UnixNano())
	task := parse(t, ok(t, "queue", "push", q, "--id", "a", "--data", "x", "-o", "json", "--endpoints", eps), &tenurev1.Task{})
	if task.GetTaskId() != "a" || task.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("push --id through a member whose forward broke off: %v", task)
	}
	fails(t, "OUTCOME_UNKNOWN", "queue", "push", q, "--data", "y", "--endpoints", eps)

	out := ok(t, "queue", "claim", q, "--ttl", "30s", "-o", "json")
	claimed := parse(t, out, &tenurev1.ClaimResponse{})
	if len(claimed.GetTasks()) != 1 {
		t.Fatalf("claim: %s", out)
	}
	lease := claimed.GetTasks()[0].GetLeaseId()
	done := parse(t, ok(t, "queue", "complete", q, "a", "--lease", lease, "--result", "r", "-o", "json", "--endpoints", eps), &tenurev1.Task{})
	if done.GetState() != tenurev1.TaskState_TASK_STATE_SUCCEEDED || !strings.HasPrefix(string(done.GetResult()), "r") {
		t.Fatalf("complete through a member whose forward broke off: %v", done)
	}
	// fail and cancel are safe to repeat too.
	ok(t, "queue", "push", q, "--id", "b", "--data", "x")
	claimed = parse(t, ok(t, "queue", "claim", q, "--ttl", "30s", "-o", "json"), &tenurev1.ClaimResponse{})
	if len(claimed.GetTasks()) != 1 || claimed.GetTasks()[0].GetTaskId() != "b" {
		t.Fatalf("claim: %v", claimed)
	}
	failed := parse(t, ok(t, "queue", "fail", q, "b", "--lease", claimed.GetTasks()[0].GetLeaseId(), "--error", "boom", "-o", "json", "--endpoints", eps), &tenurev1.Task{})
	if failed.GetState() != tenurev1.TaskState_TASK_STATE_FAILED {
		t.Fatalf("fail through a member whose forward broke off: %v", failed)
	}
	cancelled := parse(t, ok(t, "queue", "cancel", q, "b", "-o", "json", "--endpoints", eps), &tenurev1.Task{})
	if cancelled.GetState() != tenurev1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("cancel through a member whose forward broke off: %v", cancelled)
	}
}
