package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestHolderIsThePrincipal: the holder (worker, peer) of a request is the
// caller; naming another is refused, and another principal's lease can
// be neither renewed, released, transferred, written with nor completed
// — in unary calls, KeepAlive and Pipeline alike. An admin may act for
// anyone.
func TestHolderIsThePrincipal(t *testing.T) {
	b := startSecure(t, nil)
	w1, w2, root := b.as("tok-w1"), b.as("tok-w2"), b.as("tok-root")
	ctx := context.Background()

	// An empty holder is filled with the principal.
	resp, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "orders/1", Ttl: ttl(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	l := resp.Msg.Lease
	if l.Holder != "w1" {
		t.Fatalf("holder = %q, want the principal w1", l.Holder)
	}
	_, err = w2.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "orders/2", Holder: "w1"}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")
	if md := errorMeta(t, err); md["principal"] != "w2" || md["holder"] != "w1" {
		t.Errorf("metadata %v", md)
	}

	// Acting as another holder is beyond the principal's scope
	// (PERMISSION_DENIED); acting on another's lease is NOT_HOLDER.
	impersonating := map[string]func() error{
		"renew naming the holder": func() error {
			_, err := w2.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{l.LeaseId}, Holder: "w1"}))
			return err
		},
		"declare restart for another": func() error {
			_, err := w2.leases.DeclareRestart(ctx, connect.NewRequest(&tenurev1.DeclareRestartRequest{Holder: "w1"}))
			return err
		},
	}
	for name, call := range impersonating {
		t.Run(name, func(t *testing.T) { wantReason(t, call(), connect.CodePermissionDenied, "PERMISSION_DENIED") })
	}
	notHolder := map[string]func() error{
		"renew": func() error {
			_, err := w2.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{l.LeaseId}}))
			return err
		},
		"release": func() error {
			_, err := w2.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: l.LeaseId}))
			return err
		},
		"transfer": func() error {
			_, err := w2.leases.Transfer(ctx, connect.NewRequest(&tenurev1.TransferRequest{LeaseId: l.LeaseId, NewHolder: "w2"}))
			return err
		},
		"write state": func() error {
			_, err := w2.leases.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: "orders/1", LeaseId: l.LeaseId, Data: []byte("x")}))
			return err
		},
	}
	for name, call := range notHolder {
		t.Run(name, func(t *testing.T) {
			err := call()
			wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
			if md := errorMeta(t, err); md["principal"] != "w2" || md["holder"] != "w1" || md["lease_id"] != l.LeaseId {
				t.Errorf("metadata %v", md)
			}
		})
	}

	// A batch renews the caller's own leases and lists the other's as a
	// failure, in Renew and KeepAlive alike.
	own, err := w2.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "orders/w2", Ttl: ttl(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	batch := []string{l.LeaseId, own.Msg.Lease.LeaseId}
	br, err := w2.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: batch}))
	if err != nil {
		t.Fatalf("batch renew: %v", err)
	}
	if len(br.Msg.Leases) != 1 || br.Msg.Leases[0].LeaseId != own.Msg.Lease.LeaseId || len(br.Msg.Failures) != 1 ||
		br.Msg.Failures[0].LeaseId != l.LeaseId || br.Msg.Failures[0].Reason != "NOT_HOLDER" {
		t.Errorf("batch renew: %v", br.Msg)
	}
	kb := w2.leases.KeepAlive(ctx)
	if err := kb.Send(&tenurev1.KeepAliveRequest{LeaseIds: batch, RequestId: 1}); err != nil {
		t.Fatal(err)
	}
	kbr, err := kb.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if len(kbr.Leases) != 1 || kbr.Leases[0].LeaseId != own.Msg.Lease.LeaseId || len(kbr.Failures) != 1 ||
		kbr.Failures[0].LeaseId != l.LeaseId || kbr.Failures[0].Reason != "NOT_HOLDER" {
		t.Errorf("batch KeepAlive: %v", kbr)
	}
	_ = kb.CloseRequest()
	_ = kb.CloseResponse()

	// KeepAlive: the other's lease is listed as a failure, not renewed.
	ka := w2.leases.KeepAlive(ctx)
	if err := ka.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{l.LeaseId}, RequestId: 7}); err != nil {
		t.Fatal(err)
	}
	kr, err := ka.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if len(kr.Leases) != 0 || len(kr.Failures) != 1 || kr.Failures[0].Reason != "NOT_HOLDER" {
		t.Errorf("KeepAlive of another's lease: %v", kr)
	}
	_ = ka.CloseRequest()
	_ = ka.CloseResponse()

	// Pipeline: each operation is authorized on its own.
	ps := w2.leases.Pipeline(ctx)
	if err := ps.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{
		{Id: 1, Op: &tenurev1.PipelineOp_Release{Release: &tenurev1.ReleaseRequest{LeaseId: l.LeaseId}}},
		{Id: 2, Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{Resource: "orders/3", Holder: "w1"}}},
		{Id: 3, Op: &tenurev1.PipelineOp_Revoke{Revoke: &tenurev1.RevokeRequest{LeaseId: l.LeaseId}}},
		{Id: 4, Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{Resource: "orders/4"}}},
		{Id: 5, Op: &tenurev1.PipelineOp_Consume{Consume: &tenurev1.ConsumeRequest{LeaseId: l.LeaseId, Counter: "c", Amount: 1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*tenurev1.PipelineResult{}
	for len(got) < 5 {
		pr, err := ps.Receive()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range pr.Results {
			got[r.Id] = r
		}
	}
	for id, reason := range map[uint64]string{1: "NOT_HOLDER", 2: "PERMISSION_DENIED", 3: "PERMISSION_DENIED", 5: "NOT_HOLDER"} {
		if e := got[id].GetError(); e == nil || e.Reason != reason || e.Code != "permission_denied" {
			t.Errorf("pipeline op %d: %v, want %s", id, got[id], reason)
		}
	}
	if a := got[4].GetAcquire(); a == nil || a.Lease.Holder != "w2" {
		t.Errorf("pipeline op 4 (own acquire): %v", got[4])
	}
	_ = ps.CloseRequest()
	_ = ps.CloseResponse()

	// The lease is untouched, and its holder still renews and releases it.
	if _, err := w1.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{l.LeaseId}})); err != nil {
		t.Fatalf("holder's own renew: %v", err)
	}
	// An admin may act for anyone, naming the holder or not: without a
	// holder it acts for the lease's own, over unary calls, KeepAlive and
	// Pipeline alike.
	if _, err := root.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{l.LeaseId}})); err != nil {
		t.Fatalf("admin renew without a holder: %v", err)
	}
	ra := root.leases.KeepAlive(ctx)
	if err := ra.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{l.LeaseId}, RequestId: 1}); err != nil {
		t.Fatal(err)
	}
	if r, err := ra.Receive(); err != nil || len(r.Leases) != 1 || len(r.Failures) != 0 {
		t.Fatalf("admin KeepAlive: %v %v", r, err)
	}
	_ = ra.CloseRequest()
	_ = ra.CloseResponse()
	tr, err := root.leases.Transfer(ctx, connect.NewRequest(&tenurev1.TransferRequest{LeaseId: l.LeaseId, NewHolder: "w2"}))
	if err != nil || tr.Msg.Released.Holder != "w1" || tr.Msg.Lease.Holder != "w2" {
		t.Fatalf("admin transfer without a holder: %v %v", tr, err)
	}
	if _, err := root.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: tr.Msg.Lease.LeaseId, Holder: "w2"})); err != nil {
		t.Fatalf("admin release naming the holder: %v", err)
	}
	l2, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "orders/admin", Ttl: ttl(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	rp := root.leases.Pipeline(ctx)
	if err := rp.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{
		{Id: 1, Op: &tenurev1.PipelineOp_Release{Release: &tenurev1.ReleaseRequest{LeaseId: l2.Msg.Lease.LeaseId}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if r, err := rp.Receive(); err != nil || len(r.Results) != 1 || r.Results[0].GetRelease() == nil {
		t.Fatalf("admin pipelined release without a holder: %v %v", r, err)
	}
	_ = rp.CloseRequest()
	_ = rp.CloseResponse()
	// An unknown lease is still LEASE_NOT_FOUND for an admin.
	_, err = root.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: "01ZZZZZZZZZZZZZZZZZZZZZZZZ"}))
	wantReason(t, err, connect.CodeNotFound, "LEASE_NOT_FOUND")
}

// TestWorkerCompletesOnlyItsOwnTask: another worker of the namespace
// cannot complete or fail a task under someone else's lease, nor claim
// as someone else.
func TestWorkerCompletesOnlyItsOwnTask(t *testing.T) {
	b := startSecure(t, nil)
	q1, q2 := b.as("tok-q1"), b.as("tok-q2")
	ctx := context.Background()
	if _, err := q1.queues.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: "jobs", Queue: "q",
		Tasks: []*tenurev1.NewTask{{TaskId: "t1", Payload: []byte("p")}}})); err != nil {
		t.Fatal(err)
	}
	_, err := q2.queues.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Namespace: "jobs", Queue: "q", Worker: "q1", Max: 1}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")
	cr, err := q1.queues.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Namespace: "jobs", Queue: "q", Max: 1}))
	if err != nil || len(cr.Msg.Tasks) != 1 {
		t.Fatalf("claim: %v %v", cr, err)
	}
	task := cr.Msg.Tasks[0]
	if task.Worker != "q1" || task.Lease.Holder != "q1" {
		t.Fatalf("task claimed for %q (lease holder %q), want q1", task.Worker, task.Lease.Holder)
	}
	// A worker keeps its task lease alive (Renew, KeepAlive), and only its own.
	if _, err := q1.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{task.LeaseId}})); err != nil {
		t.Fatalf("the worker's renewal of its task lease: %v", err)
	}
	ka := q1.leases.KeepAlive(ctx)
	if err := ka.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{task.LeaseId}, RequestId: 1}); err != nil {
		t.Fatal(err)
	}
	if r, err := ka.Receive(); err != nil || len(r.Leases) != 1 {
		t.Fatalf("the worker's KeepAlive of its task lease: %v %v", r, err)
	}
	_ = ka.CloseRequest()
	_ = ka.CloseResponse()
	_, err = q2.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{task.LeaseId}}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
	_, err = q2.queues.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{Namespace: "jobs", Queue: "q", TaskId: "t1", LeaseId: task.LeaseId}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
	_, err = q2.queues.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{Namespace: "jobs", Queue: "q", TaskId: "t1", LeaseId: task.LeaseId}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
	// It gives its task back (as a draining Worker does), and only its own:
	// the task is queued again, its attempt returned.
	_, err = q2.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: task.LeaseId}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
	if _, err := q1.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: task.LeaseId})); err != nil {
		t.Fatalf("the worker's release of its task lease: %v", err)
	}
	got, err := q1.queues.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{Namespace: "jobs", Queue: "q", TaskId: "t1"}))
	if err != nil || got.Msg.Task.State != tenurev1.TaskState_TASK_STATE_QUEUED || got.Msg.Task.Attempts != 0 {
		t.Fatalf("task after its release: %v %v", got, err)
	}
	// A worker lists the leases of its namespaces (a peer finds its piece leases).
	if _, err := q1.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Namespace: "jobs"})); err != nil {
		t.Fatalf("the worker's List: %v", err)
	}
	_, err = q1.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Namespace: "default"}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")
	cr, err = q1.queues.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Namespace: "jobs", Queue: "q", Max: 1}))
	if err != nil || len(cr.Msg.Tasks) != 1 {
		t.Fatalf("claim again: %v %v", cr, err)
	}
	task = cr.Msg.Tasks[0]
	if _, err := q1.queues.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{Namespace: "jobs", Queue: "q", TaskId: "t1", LeaseId: task.LeaseId})); err != nil {
		t.Fatalf("own complete: %v", err)
	}
	// Pool peers are principals too.
	_, err = q2.pools.RequestLeases(ctx, connect.NewRequest(&tenurev1.RequestLeasesRequest{Namespace: "jobs", Pool: "p", Peer: "q1", Max: 1}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")
}

// TestQuotasAndRateLimits: policy quotas (set at run time by an admin
// only) and per-principal rate limits answer QUOTA_EXCEEDED with the
// limit in the metadata.
func TestQuotasAndRateLimits(t *testing.T) {
	b := startSecure(t, nil)
	w1, w2, root, slow := b.as("tok-w1"), b.as("tok-w2"), b.as("tok-root"), b.as("tok-slow")
	ctx := context.Background()
	setPolicy := func(c clients, p *tenurev1.NamespacePolicy) error {
		_, err := c.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "default", Policy: p}))
		return err
	}
	wantReason(t, setPolicy(w1, &tenurev1.NamespacePolicy{MaxActivePerHolder: 1}), connect.CodePermissionDenied, "PERMISSION_DENIED")
	if err := setPolicy(root, &tenurev1.NamespacePolicy{MaxActivePerHolder: 1, MaxActivePerNamespace: 2, MaxWaitersPerResource: 1}); err != nil {
		t.Fatalf("admin SetPolicy: %v", err)
	}
	acq := func(c clients, res string, wait time.Duration) error {
		r := &tenurev1.AcquireRequest{Resource: res, Ttl: ttl(time.Minute)}
		if wait > 0 {
			r.Wait = ttl(wait)
		}
		_, err := c.leases.Acquire(ctx, connect.NewRequest(r))
		return err
	}
	if err := acq(w1, "a", 0); err != nil {
		t.Fatal(err)
	}
	err := acq(w1, "b", 0)
	wantReason(t, err, connect.CodeResourceExhausted, "QUOTA_EXCEEDED")
	if md := errorMeta(t, err); md["quota"] != "max_active_per_holder" || md["limit"] != "1" {
		t.Errorf("holder quota metadata %v", md)
	}
	if err := acq(w2, "b", 0); err != nil {
		t.Fatal(err)
	}
	err = acq(root, "c", 0)
	wantReason(t, err, connect.CodeResourceExhausted, "QUOTA_EXCEEDED")
	if md := errorMeta(t, err); md["quota"] != "max_active_per_namespace" || md["limit"] != "2" {
		t.Errorf("namespace quota metadata %v", md)
	}

	// Rate limit: slow has a bucket of 2 that refills in ~17 minutes.
	status := func() error {
		_, err := slow.cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		return err
	}
	for i := range 2 {
		if err := status(); err != nil {
			t.Fatalf("request %d within the burst: %v", i+1, err)
		}
	}
	err = status()
	wantReason(t, err, connect.CodeResourceExhausted, "QUOTA_EXCEEDED")
	if md := errorMeta(t, err); md["quota"] != "requests_per_second" || md["limit"] != "0.001" || md["burst"] != "2" || md["principal"] != "slow" {
		t.Errorf("rate limit metadata %v", md)
	}
	// Other principals have their own budget.
	if _, err := w1.cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{})); err != nil {
		t.Errorf("another principal is limited too: %v", err)
	}
}

// TestWaiterQuota: the per-resource waiter limit of the policy holds end
// to end.
func TestWaiterQuota(t *testing.T) {
	b := startSecure(t, nil)
	w1, w2, root := b.as("tok-w1"), b.as("tok-w2"), b.as("tok-root")
	ctx := context.Background()
	if _, err := root.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "default",
		Policy: &tenurev1.NamespacePolicy{MaxWaitersPerResource: 1}})); err != nil {
		t.Fatal(err)
	}
	if _, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Ttl: ttl(time.Minute)})); err != nil {
		t.Fatal(err)
	}
	// w2 waits; an admin's wait on the same resource is one too many.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 1)
	go func() {
		_, err := w2.leases.Acquire(wctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Wait: ttl(time.Minute)}))
		waiting <- err
	}()
	waitFor(t, "w2 to queue", 10*time.Second, func() bool {
		resp, err := root.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{}))
		return err == nil && resp.Msg.Counts.Waiters == 1
	})
	_, err := root.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Wait: ttl(time.Minute)}))
	wantReason(t, err, connect.CodeResourceExhausted, "QUOTA_EXCEEDED")
	if md := errorMeta(t, err); md["quota"] != "max_waiters_per_resource" || md["limit"] != "1" {
		t.Errorf("waiter quota metadata %v", md)
	}
	cancel()
	<-waiting
}

// TestAuthReload: a rewritten auth file takes effect on ReloadAuth (what
// SIGHUP calls) without a restart; an invalid one changes nothing.
func TestAuthReload(t *testing.T) {
	b := startSecure(t, nil)
	ctx := context.Background()
	status := func(token string) error {
		_, err := b.as(token).cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		return err
	}
	if err := status("tok-w1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.authPath, []byte(`{"tokens":[{"token":"tok-new","principal":"w1","roles":["reader"],"namespaces":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	wantReason(t, status("tok-w1"), connect.CodeUnauthenticated, "UNAUTHENTICATED")
	if err := status("tok-new"); err != nil {
		t.Fatalf("new token: %v", err)
	}
	// Roles changed too: w1 is a reader now.
	_, err := b.as("tok-new").leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "x"}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")

	if err := os.WriteFile(b.authPath, []byte(`{"tokens":[{"token":"bad token"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.ReloadAuth(); err == nil {
		t.Fatal("an invalid auth file was accepted")
	}
	if err := status("tok-new"); err != nil {
		t.Fatalf("a failed reload locked out a valid token: %v", err)
	}
}

// TestRateLimitCountsStreamMessages: every Pipeline operation and every
// KeepAlive message takes a token from the caller's bucket, not only the
// HTTP request that opens the stream.
func TestRateLimitCountsStreamMessages(t *testing.T) {
	b := startSecure(t, nil)
	slow := b.as("tok-slow") // burst 2, refills in ~17 minutes
	ctx := context.Background()
	ps := slow.leases.Pipeline(ctx) // opening the stream: the first token
	if err := ps.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{
		{Id: 1, Op: &tenurev1.PipelineOp_Get{Get: &tenurev1.GetRequest{LeaseId: "01M8APPNBHV260000000000001"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	first, err := ps.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if e := first.Results[0].GetError(); e == nil || e.Reason != "LEASE_NOT_FOUND" {
		t.Fatalf("first op (the second token): %v", first.Results[0])
	}
	if err := ps.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{
		{Id: 2, Op: &tenurev1.PipelineOp_Get{Get: &tenurev1.GetRequest{LeaseId: "01M8APPNBHV260000000000001"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	second, err := ps.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if e := second.Results[0].GetError(); e == nil || e.Reason != "QUOTA_EXCEEDED" || e.Metadata["burst"] != "2" {
		t.Fatalf("op past the budget: %v", second.Results[0])
	}
	_ = ps.CloseRequest()
	_ = ps.CloseResponse()

	// KeepAlive: the stream and one message fit; the next ends the
	// stream with QUOTA_EXCEEDED.
	ka := b.as("tok-slowholder").leases.KeepAlive(ctx)
	if err := ka.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{"01M8APPNBHV260000000000001"}, RequestId: 1}); err != nil {
		t.Fatal(err)
	}
	kr, err := ka.Receive()
	if err != nil || len(kr.Failures) != 1 || kr.Failures[0].Reason != "LEASE_NOT_FOUND" {
		t.Fatalf("first KeepAlive message: %v %v", kr, err)
	}
	if err := ka.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{"01M8APPNBHV260000000000001"}, RequestId: 2}); err != nil {
		t.Fatal(err)
	}
	_, err = ka.Receive()
	wantReason(t, err, connect.CodeResourceExhausted, "QUOTA_EXCEEDED")
	_ = ka.CloseRequest()
	_ = ka.CloseResponse()
}

// TestRateLimitCountsWatchReadsOfTheFiles: a Watch resumed from records
// that only the ledger files hold takes one request of the caller's rate
// limit per read of the files after the first (a read may send nothing:
// found from outside, readers of an empty namespace kept the member
// reading every file for free).
func TestRateLimitCountsWatchReadsOfTheFiles(t *testing.T) {
	b := startSecure(t, func(c *Config) {
		c.Cluster.FeedSize, c.Cluster.LedgerSegmentSize, c.WatchReadBytes = 10, 4096, 1024
	})
	root, slow := b.as("tok-root"), b.as("tok-slow") // slow: burst 2, refills in ~17 minutes
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 40 {
		if _, err := root.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: fmt.Sprintf("r/%d", i), Holder: "h"})); err != nil {
			t.Fatal(err)
		}
	}
	// Opening the stream takes the first token, the first read of the
	// files none, the second the last token: the third is refused.
	stream, err := slow.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Namespace: "nobody-here", AfterIndex: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if stream.Receive() {
		t.Fatalf("a watch of an empty namespace received %v", stream.Msg())
	}
	wantReason(t, stream.Err(), connect.CodeResourceExhausted, "QUOTA_EXCEEDED")
	// Another principal's budget is its own.
	all, err := root.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{AfterIndex: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if !all.Receive() {
		t.Fatalf("root's watch from the files: %v", all.Err())
	}
}

// TestHolderWideCallsStayInTheCallersNamespaces: a Renew of every lease of
// a holder, or a DeclareRestart, without a namespace reaches no namespace
// the caller may not use (found from outside: an admin of team-* renewed
// w1's lease in default, and got a certificate for it). A principal of
// one namespace gets it filled in; one of several names it.
func TestHolderWideCallsStayInTheCallersNamespaces(t *testing.T) {
	b := startSecure(t, nil)
	ctx := context.Background()
	w1, teamadmin, root := b.as("tok-w1"), b.as("tok-teamadmin"), b.as("tok-root")
	l, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "mine", Ttl: durationpb.New(30 * time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = teamadmin.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{Holder: "w1", AllOfHolder: true, Certificate: true}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")
	_, err = teamadmin.leases.DeclareRestart(ctx, connect.NewRequest(&tenurev1.DeclareRestartRequest{Holder: "w1"}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")
	if got, err := root.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: l.Msg.Lease.LeaseId})); err != nil ||
		got.Msg.Lease.RenewalCount != 0 || got.Msg.Lease.GraceUntil != nil {
		t.Fatalf("w1's lease after the refused calls: %v, %v", got, err)
	}
	// In its own namespace, the team admin may.
	if _, err := teamadmin.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{Namespace: "team-a", Holder: "w1", AllOfHolder: true})); err != nil {
		t.Fatalf("renew in team-a: %v", err)
	}
	// w1 has one namespace: it is filled in, and the renewal goes through.
	r, err := w1.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{AllOfHolder: true}))
	if err != nil || len(r.Msg.Leases) != 1 || r.Msg.Leases[0].Namespace != "default" {
		t.Fatalf("w1's renewal of all its leases: %v, %v", r, err)
	}
	// An admin of every namespace reaches every namespace, as before.
	if r, err := root.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{Holder: "w1", AllOfHolder: true})); err != nil || len(r.Msg.Leases) != 1 {
		t.Fatalf("root's renewal of w1's leases: %v, %v", r, err)
	}
}

// TestRevokedTokenEndsOpenStreams: a token an auth file reload revoked
// stops working on the streams already open with it too: a Pipeline or a
// KeepAlive at its next message, a Watch within a second.
func TestRevokedTokenEndsOpenStreams(t *testing.T) {
	b := startSecure(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w1 := b.as("tok-w1")
	l, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "revoked/token", Ttl: durationpb.New(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	ps := w1.leases.Pipeline(ctx)
	ka := w1.leases.KeepAlive(ctx)
	wa, err := b.as("tok-r1").leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Namespace: "team-a"}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ps.CloseRequest()
		ps.CloseResponse()
		ka.CloseRequest()
		ka.CloseResponse()
		wa.Close()
	}()
	get := &tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{{Id: 1, Op: &tenurev1.PipelineOp_Get{Get: &tenurev1.GetRequest{LeaseId: l.Msg.Lease.LeaseId}}}}}
	if err := ps.Send(get); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Receive(); err != nil {
		t.Fatalf("pipeline before the reload: %v", err)
	}
	renew := &tenurev1.KeepAliveRequest{RequestId: 1, LeaseIds: []string{l.Msg.Lease.LeaseId}}
	if err := ka.Send(renew); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Receive(); err != nil {
		t.Fatalf("keepalive before the reload: %v", err)
	}
	if err := os.WriteFile(b.authPath, []byte(`{"tokens":[{"token":"tok-root","principal":"root","roles":["admin"],"namespaces":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	_ = ps.Send(get)
	if _, err := ps.Receive(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("pipeline after the token was revoked: %v", err)
	}
	renew.RequestId = 2
	_ = ka.Send(renew)
	if _, err := ka.Receive(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("keepalive after the token was revoked: %v", err)
	}
	for wa.Receive() {
	}
	if err := wa.Err(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("watch after the token was revoked: %v", err)
	}
}

// TestExpiredTokenIsRefused: a token whose entry sets "expires" stops
// working then: new calls are UNAUTHENTICATED (problem "expired", with
// expired_at), and a Watch open with it ends within a second.
func TestExpiredTokenIsRefused(t *testing.T) {
	b := startSecure(t, nil)
	at := time.Now().Add(1500 * time.Millisecond).UTC()
	if err := os.WriteFile(b.authPath, []byte(`{"tokens":[{"token":"tok-temp","principal":"temp","roles":["reader","holder"],"namespaces":["*"],"expires":"`+
		at.Format(time.RFC3339Nano)+`"},{"token":"tok-root","principal":"root","roles":["admin"],"namespaces":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	temp := b.as("tok-temp")
	if _, err := temp.cluster.WhoAmI(ctx, connect.NewRequest(&tenurev1.WhoAmIRequest{})); err != nil {
		t.Fatalf("before the token expires: %v", err)
	}
	wa, err := temp.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	// An Acquire queued with the token ends with it, and leaves the
	// queue: it would be granted to a caller no longer let in.
	root := b.as("tok-root")
	if _, err := root.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "expiring/held", Ttl: durationpb.New(time.Minute)})); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := temp.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "expiring/held",
			Ttl: durationpb.New(time.Minute), Wait: durationpb.New(20 * time.Second)}))
		waited <- err
	}()
	for wa.Receive() {
	}
	if time.Now().Before(at) {
		t.Fatalf("the watch ended before the token expired: %v", wa.Err())
	}
	wantReason(t, wa.Err(), connect.CodeUnauthenticated, "UNAUTHENTICATED")
	wantReason(t, <-waited, connect.CodeUnauthenticated, "UNAUTHENTICATED") // at the expiry, not the 20 s wait
	waitFor(t, "the queued Acquire to leave the queue", 10*time.Second, func() bool {
		l, err := root.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Resource: "expiring/held"}))
		return err == nil && len(l.Msg.GetWaiters()) == 0
	})
	_, err = temp.cluster.WhoAmI(ctx, connect.NewRequest(&tenurev1.WhoAmIRequest{}))
	wantReason(t, err, connect.CodeUnauthenticated, "UNAUTHENTICATED")
	if md := metadataOf(err); md["problem"] != "expired" || md["expired_at"] != at.Format(time.RFC3339) {
		t.Fatalf("metadata of an expired token's refusal: %v", md)
	}
}

// TestActorIsThePrincipal: the ledger records who acted, the
// authenticated principal — the holder for its own calls, the admin for a
// revocation — not the registrar.
func TestActorIsThePrincipal(t *testing.T) {
	b := startSecure(t, nil)
	w1, root := b.as("tok-w1"), b.as("tok-root")
	ctx := context.Background()
	resp, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "orders/act", Ttl: ttl(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Msg.Lease.LeaseId
	// A longer ttl, so that the renewal extends the lease even in the
	// acquire's tick (a renewal to the same expiry records nothing).
	if _, err := w1.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{id}, Ttl: ttl(2 * time.Minute)})); err != nil {
		t.Fatal(err)
	}
	if _, err := root.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: id, Reason: "drill"})); err != nil {
		t.Fatal(err)
	}
	hist, err := root.leases.History(ctx, connect.NewRequest(&tenurev1.HistoryRequest{Resource: "orders/act"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range hist.Msg.Events {
		got = append(got, e.Type+" by "+e.Actor)
	}
	want := []string{"lease.issued by w1", "lease.renewed by w1", "lease.revoked by root"}
	if !slices.Equal(got, want) {
		t.Errorf("history %q, want %q", got, want)
	}
}

// TestMetricsShowQueuesToAllNamespacePrincipalsOnly: a queue's name and
// its namespace's are in /metrics (tenure_queue_tasks) for a principal of
// every namespace; a principal of some namespaces sees the cluster-wide
// series only.
func TestMetricsShowQueuesToAllNamespacePrincipalsOnly(t *testing.T) {
	b := startSecure(t, nil)
	q1 := b.as("tok-q1")
	if _, err := q1.queues.Enqueue(context.Background(), connect.NewRequest(&tenurev1.EnqueueRequest{
		Namespace: "jobs", Queue: "payroll-secret", Tasks: []*tenurev1.NewTask{{Payload: []byte("x")}}})); err != nil {
		t.Fatal(err)
	}
	scrape := func(token string) string {
		req, err := http.NewRequest(http.MethodGet, b.base+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := h2cClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics as %s: %d %s", token, resp.StatusCode, body)
		}
		return string(body)
	}
	if body := scrape("tok-root"); !strings.Contains(body, `queue="payroll-secret"`) {
		t.Errorf("a principal of every namespace does not see the queue:\n%s", body)
	}
	body := scrape("tok-r1")
	if strings.Contains(body, "payroll-secret") || strings.Contains(body, `namespace="jobs"`) {
		t.Errorf("a principal of team-* sees another namespace's queue in /metrics")
	}
	if !strings.Contains(body, "tenure_grants_total") {
		t.Errorf("a principal of team-* lacks the cluster-wide series:\n%s", body)
	}
}
