package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// httpMember serves handler as a member's API (HTTP/1.1 and h2c) on a
// free port, until the test ends, and returns its address.
func httpMember(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", freePort())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// answerError answers a call with a Tenure error of reason (UNAVAILABLE,
// its ErrorInfo naming reason), message starting with it.
func answerError(w http.ResponseWriter, r *http.Request, reason, message string) {
	e := connect.NewError(connect.CodeUnavailable, errors.New(reason+": "+message))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: "tenure"}); err == nil {
		e.AddDetail(d)
	}
	_ = connect.NewErrorWriter().Write(w, r, e)
}

// forwardBreaker is a member whose forwards to the leader break off: it
// answers every call OUTCOME_UNKNOWN (unavailable), as a follower does
// when the leader is killed while it forwards a write.
func forwardBreaker(t *testing.T) string {
	return httpMember(t, func(w http.ResponseWriter, r *http.Request) {
		answerError(w, r, "OUTCOME_UNKNOWN", "the write forwarded to the leader broke off")
	})
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

// lateBreaker is a follower whose leader hung: its first call is answered
// OUTCOME_UNKNOWN only after hang (once it sees another leader elected: it
// became the leader itself); the calls after it go through, to the test
// server.
func lateBreaker(t *testing.T, hang time.Duration) string {
	t.Helper()
	target, err := url.Parse("http://" + apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var first sync.Once
	return httpMember(t, func(w http.ResponseWriter, r *http.Request) {
		broke := false
		first.Do(func() { broke = true })
		if !broke {
			proxy.ServeHTTP(w, r)
			return
		}
		select { // the leader the forward went to hangs
		case <-time.After(hang):
		case <-r.Context().Done():
			return
		}
		answerError(w, r, "OUTCOME_UNKNOWN", "the write was forwarded to the leader n2, which lost the leadership before answering")
	})
}

// notLeader is a member that knows no leader yet (an election under way).
func notLeader(t *testing.T) string {
	return httpMember(t, func(w http.ResponseWriter, r *http.Request) {
		answerError(w, r, "NOT_LEADER", "no leader known: an election is under way")
	})
}

// A member that answers OUTCOME_UNKNOWN only once the CLI's retry budget
// is spent (its forward went to a leader that hung, and it answered when
// it saw the next one elected) leaves a push --id another round: the
// cluster has a leader again by then (found from outside: 2 of 90 pushes
// with --id exited 1 OUTCOME_UNKNOWN, unenqueued, with the leader paused).
func TestCLIResendsAfterLateOutcomeUnknown(t *testing.T) {
	t.Parallel()
	eps := lateBreaker(t, retryFor+300*time.Millisecond) + "," + notLeader(t)
	q := fmt.Sprintf("cli-late-%d", time.Now().UnixNano())
	task := parse(t, ok(t, "queue", "push", q, "--id", "a", "--data", "x", "-o", "json", "--endpoints", eps), &tenurev1.Task{})
	if task.GetTaskId() != "a" || task.GetState() != tenurev1.TaskState_TASK_STATE_QUEUED {
		t.Fatalf("push --id after a late OUTCOME_UNKNOWN: %v", task)
	}
}
