package server

import (
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// queuePipe is one QueueService.Pipeline stream in a test: send ops,
// collect results by id.
type queuePipe struct {
	t      testing.TB
	stream *connect.BidiStreamForClient[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse]
	got    map[uint64]*tenurev1.QueueResult
}

func openQueuePipe(t testing.TB, qc interface {
	Pipeline(context.Context) *connect.BidiStreamForClient[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse]
}) *queuePipe {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &queuePipe{t: t, stream: qc.Pipeline(ctx), got: map[uint64]*tenurev1.QueueResult{}}
	t.Cleanup(func() {
		_ = p.stream.CloseRequest()
		_ = p.stream.CloseResponse()
	})
	return p
}

func (p *queuePipe) send(ops ...*tenurev1.QueueOp) {
	p.t.Helper()
	if err := p.stream.Send(&tenurev1.QueuePipelineRequest{Ops: ops}); err != nil {
		p.t.Fatalf("send: %v", err)
	}
}

// result waits for the result of op id.
func (p *queuePipe) result(id uint64) *tenurev1.QueueResult {
	p.t.Helper()
	for p.got[id] == nil {
		resp, err := p.stream.Receive()
		if err != nil {
			p.t.Fatalf("receive (waiting for op %d): %v", id, err)
		}
		for _, r := range resp.Results {
			p.got[r.Id] = r
		}
	}
	return p.got[id]
}

func wantOpError(t *testing.T, r *tenurev1.QueueResult, code, reason string) {
	t.Helper()
	if e := r.GetError(); e == nil || e.Code != code || e.Reason != reason {
		t.Errorf("op %d: %v; want %s %s", r.Id, r, code, reason)
	}
}

// TestQueuePipeline: every queue operation works over one stream with
// its unary RPC's answers and errors, and a waiting Claim does not hold up
// the operations behind it.
func TestQueuePipeline(t *testing.T) {
	bd := setup(t)
	p := openQueuePipe(t, bd.queueClient())

	// A claim that long-polls an empty queue, then the enqueue that feeds
	// it, on the same stream.
	p.send(&tenurev1.QueueOp{Id: 1, Op: &tenurev1.QueueOp_Claim{Claim: &tenurev1.ClaimRequest{
		Queue: "later", Worker: "w1", Max: 1, Wait: durationpb.New(10 * time.Second)}}})
	p.send(&tenurev1.QueueOp{Id: 2, Op: &tenurev1.QueueOp_Enqueue{Enqueue: &tenurev1.EnqueueRequest{
		Queue: "later", Tasks: []*tenurev1.NewTask{{TaskId: "l1", Payload: []byte("x")}}}}})
	if e := p.result(2).GetEnqueue(); e == nil || len(e.Tasks) != 1 {
		t.Fatalf("enqueue: %v", p.result(2))
	}
	if c := p.result(1).GetClaim(); c == nil || len(c.Tasks) != 1 || c.Tasks[0].TaskId != "l1" || c.Tasks[0].Lease.Holder != "w1" {
		t.Fatalf("waiting claim: %v", p.result(1))
	}

	p.send(&tenurev1.QueueOp{Id: 3, Op: &tenurev1.QueueOp_Enqueue{Enqueue: &tenurev1.EnqueueRequest{Queue: "q", Tasks: []*tenurev1.NewTask{
		{TaskId: "low", Payload: []byte("1")}, {TaskId: "high", Payload: []byte("2"), Priority: 5}, {TaskId: "gone", Payload: []byte("3")},
	}}}})
	p.result(3)
	p.send(&tenurev1.QueueOp{Id: 4, Op: &tenurev1.QueueOp_Claim{Claim: &tenurev1.ClaimRequest{Queue: "q", Worker: "w1", Max: 2}}})
	c := p.result(4).GetClaim()
	if c == nil || len(c.Tasks) != 2 || c.Tasks[0].TaskId != "high" || c.Tasks[1].TaskId != "low" {
		t.Fatalf("claim 2 by priority: %v", p.result(4))
	}
	high, low := c.Tasks[0], c.Tasks[1]
	p.send(
		&tenurev1.QueueOp{Id: 5, Op: &tenurev1.QueueOp_Complete{Complete: &tenurev1.CompleteRequest{Queue: "q", TaskId: "high", LeaseId: high.LeaseId, Result: []byte("done")}}},
		&tenurev1.QueueOp{Id: 6, Op: &tenurev1.QueueOp_Fail{Fail: &tenurev1.FailRequest{Queue: "q", TaskId: "low", LeaseId: low.LeaseId, Error: "boom"}}},
		&tenurev1.QueueOp{Id: 7, Op: &tenurev1.QueueOp_Cancel{Cancel: &tenurev1.CancelRequest{Queue: "q", TaskId: "gone"}}},
		&tenurev1.QueueOp{Id: 9, Op: &tenurev1.QueueOp_GetTask{GetTask: &tenurev1.GetTaskRequest{Queue: "q", TaskId: "nope"}}},
		&tenurev1.QueueOp{Id: 10, Op: &tenurev1.QueueOp_Enqueue{Enqueue: &tenurev1.EnqueueRequest{Queue: "q"}}},
		&tenurev1.QueueOp{Id: 11},
	)
	if r := p.result(5).GetComplete(); r == nil || r.Task.State != tenurev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Errorf("complete: %v", p.result(5))
	}
	if r := p.result(6).GetFail(); r == nil || r.Task.State != tenurev1.TaskState_TASK_STATE_FAILED || r.Task.LastError != "boom" {
		t.Errorf("fail: %v", p.result(6))
	}
	if r := p.result(7).GetCancel(); r == nil || r.Task.State != tenurev1.TaskState_TASK_STATE_CANCELLED {
		t.Errorf("cancel: %v", p.result(7))
	}
	// Operations of one message run concurrently: the zombie goes after
	// the failure that ended low's lease has been answered.
	p.send(&tenurev1.QueueOp{Id: 8, Op: &tenurev1.QueueOp_Complete{Complete: &tenurev1.CompleteRequest{Queue: "q", TaskId: "low", LeaseId: low.LeaseId}}})
	wantOpError(t, p.result(8), "failed_precondition", "TASK_NOT_LEASED")
	wantOpError(t, p.result(9), "not_found", "TASK_NOT_FOUND")
	wantOpError(t, p.result(10), "invalid_argument", "INVALID_ARGUMENT")
	wantOpError(t, p.result(11), "invalid_argument", "INVALID_ARGUMENT")
	p.send(&tenurev1.QueueOp{Id: 12, Op: &tenurev1.QueueOp_GetTask{GetTask: &tenurev1.GetTaskRequest{Queue: "q", TaskId: "high"}}})
	if r := p.result(12).GetGetTask(); r == nil || string(r.Task.Result) != "done" {
		t.Errorf("get: %v", p.result(12))
	}
}

// TestQueuePipelineAuthorizesEachOp: over a Pipeline stream, a worker may
// neither claim as another worker (PERMISSION_DENIED) nor complete or fail
// another's task (NOT_HOLDER).
func TestQueuePipelineAuthorizesEachOp(t *testing.T) {
	b := startSecure(t, nil)
	q1, q2 := b.as("tok-q1"), b.as("tok-q2")
	p1, p2 := openQueuePipe(t, q1.queues), openQueuePipe(t, q2.queues)
	p1.send(&tenurev1.QueueOp{Id: 1, Op: &tenurev1.QueueOp_Enqueue{Enqueue: &tenurev1.EnqueueRequest{Namespace: "jobs", Queue: "q",
		Tasks: []*tenurev1.NewTask{{TaskId: "t1", Payload: []byte("p")}}}}})
	p1.result(1)
	p2.send(&tenurev1.QueueOp{Id: 1, Op: &tenurev1.QueueOp_Claim{Claim: &tenurev1.ClaimRequest{Namespace: "jobs", Queue: "q", Worker: "q1", Max: 1}}})
	wantOpError(t, p2.result(1), "permission_denied", "PERMISSION_DENIED")
	p1.send(&tenurev1.QueueOp{Id: 2, Op: &tenurev1.QueueOp_Claim{Claim: &tenurev1.ClaimRequest{Namespace: "jobs", Queue: "q", Max: 1}}})
	c := p1.result(2).GetClaim()
	if c == nil || len(c.Tasks) != 1 || c.Tasks[0].Worker != "q1" {
		t.Fatalf("claim as the principal: %v", p1.result(2))
	}
	task := c.Tasks[0]
	p2.send(
		&tenurev1.QueueOp{Id: 2, Op: &tenurev1.QueueOp_Complete{Complete: &tenurev1.CompleteRequest{Namespace: "jobs", Queue: "q", TaskId: "t1", LeaseId: task.LeaseId}}},
		&tenurev1.QueueOp{Id: 3, Op: &tenurev1.QueueOp_Fail{Fail: &tenurev1.FailRequest{Namespace: "jobs", Queue: "q", TaskId: "t1", LeaseId: task.LeaseId}}},
		// Another namespace.
		&tenurev1.QueueOp{Id: 4, Op: &tenurev1.QueueOp_Enqueue{Enqueue: &tenurev1.EnqueueRequest{Namespace: "default", Queue: "q",
			Tasks: []*tenurev1.NewTask{{Payload: []byte("p")}}}}},
	)
	// Another's task lease: not its holder; another namespace: out of scope.
	wantOpError(t, p2.result(2), "permission_denied", "NOT_HOLDER")
	wantOpError(t, p2.result(3), "permission_denied", "NOT_HOLDER")
	wantOpError(t, p2.result(4), "permission_denied", "PERMISSION_DENIED")
	p1.send(&tenurev1.QueueOp{Id: 3, Op: &tenurev1.QueueOp_Complete{Complete: &tenurev1.CompleteRequest{Namespace: "jobs", Queue: "q", TaskId: "t1", LeaseId: task.LeaseId}}})
	if r := p1.result(3).GetComplete(); r == nil || r.Task.State != tenurev1.TaskState_TASK_STATE_SUCCEEDED {
		t.Fatalf("own complete: %v", p1.result(3))
	}
}

// TestQueueMetrics: /metrics has every queue's tasks by state, read from the
// state, and counts Pipeline operations by the RPC each stands for (the Go
// client sends its Completes and Fails that way).
func TestQueueMetrics(t *testing.T) {
	b := setup(t)
	qc := b.queueClient()
	ctx := context.Background()
	if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "mq", Tasks: []*tenurev1.NewTask{{TaskId: "a"}, {TaskId: "b"}}})); err != nil {
		t.Fatal(err)
	}
	p := openQueuePipe(t, qc)
	p.send(&tenurev1.QueueOp{Id: 1, Op: &tenurev1.QueueOp_Claim{Claim: &tenurev1.ClaimRequest{Queue: "mq", Worker: "w", Max: 1}}})
	claimed := p.result(1).GetClaim().GetTasks()
	if len(claimed) != 1 {
		t.Fatalf("claim: %v", p.result(1))
	}
	p.send(&tenurev1.QueueOp{Id: 2, Op: &tenurev1.QueueOp_Complete{Complete: &tenurev1.CompleteRequest{Queue: "mq",
		TaskId: claimed[0].TaskId, LeaseId: claimed[0].LeaseId}}},
		&tenurev1.QueueOp{Id: 3, Op: &tenurev1.QueueOp_Complete{Complete: &tenurev1.CompleteRequest{Queue: "mq", TaskId: "nope", LeaseId: claimed[0].LeaseId}}})
	if p.result(2).GetComplete() == nil {
		t.Fatalf("complete: %v", p.result(2))
	}
	wantOpError(t, p.result(3), "not_found", "TASK_NOT_FOUND")
	resp, err := b.http.Get(b.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{
		`tenure_queue_tasks{namespace="default",queue="mq",state="queued"} 1`,
		`tenure_queue_tasks{namespace="default",queue="mq",state="succeeded"} 1`,
		`tenure_queue_tasks{namespace="default",queue="mq",state="dead"} 0`,
		`tenure_queue_tasks_unreported 0`,
		`tenure_pipeline_operations_total{code="ok",procedure="/tenure.v1.QueueService/Claim"} 1`,
		`tenure_pipeline_operations_total{code="ok",procedure="/tenure.v1.QueueService/Complete"} 1`,
		`tenure_pipeline_operations_total{code="not_found",procedure="/tenure.v1.QueueService/Complete"} 1`,
	} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	// Task b has waited since it was enqueued: the queue's latency.
	m := regexp.MustCompile(`tenure_queue_oldest_ready_seconds\{namespace="default",queue="mq"\} (\S+)`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics lacks tenure_queue_oldest_ready_seconds of mq")
	}
	if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || v <= 0 || v > 60 {
		t.Errorf("tenure_queue_oldest_ready_seconds of mq is %s", m[1])
	}
	st, err := qc.Stats(ctx, connect.NewRequest(&tenurev1.QueueStatsRequest{Queue: "mq"}))
	if err != nil {
		t.Fatal(err)
	}
	if age := st.Msg.GetOldestReadyAge(); age == nil || age.AsDuration() <= 0 || age.AsDuration() > time.Minute {
		t.Errorf("Stats' oldest ready age %v with task b waiting", age)
	}
	p.send(&tenurev1.QueueOp{Id: 4, Op: &tenurev1.QueueOp_Claim{Claim: &tenurev1.ClaimRequest{Queue: "mq", Worker: "w", Max: 1}}})
	if len(p.result(4).GetClaim().GetTasks()) != 1 {
		t.Fatalf("claim: %v", p.result(4))
	}
	if st, err = qc.Stats(ctx, connect.NewRequest(&tenurev1.QueueStatsRequest{Queue: "mq"})); err != nil || st.Msg.OldestReadyAge != nil {
		t.Errorf("nothing claimable, yet Stats' oldest ready age is %v (%v)", st.Msg.GetOldestReadyAge(), err)
	}
}
