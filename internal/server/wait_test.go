package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// A waiting Acquire whose caller goes away withdraws its wait, so that
// the resource is not later granted to a lease nobody holds.
func TestAbandonedWaitIsWithdrawn(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	ctx := context.Background()
	held, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Holder: "w1"}))
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := bd.leases.Acquire(gone, connect.NewRequest(&tenurev1.AcquireRequest{
			Resource: "r", Holder: "ghost", Wait: durationpb.New(time.Minute)}))
		errc <- err
	}()
	waiters := func() uint64 {
		resp, err := bd.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Counts.GetWaiters()
	}
	waitFor(t, "the ghost to queue", 10*time.Second, func() bool { return waiters() == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("abandoned acquire succeeded")
	}
	waitFor(t, "the abandoned wait to be withdrawn", 10*time.Second, func() bool { return waiters() == 0 })
	if _, err := bd.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: held.Msg.Lease.LeaseId, Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Holder: "w3"})); err != nil {
		t.Fatalf("resource not free after the holder released and the ghost left: %v", err)
	}
}

// History shows a resource's events only within the namespace's history
// retention.
func TestHistoryRetention(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	ctx := context.Background()
	if _, err := bd.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{
		Namespace: "short", Policy: &tenurev1.NamespacePolicy{HistoryRetention: durationpb.New(time.Second)}})); err != nil {
		t.Fatal(err)
	}
	if _, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Namespace: "short", Resource: "r", Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	events := func() int {
		resp, err := bd.leases.History(ctx, connect.NewRequest(&tenurev1.HistoryRequest{Namespace: "short", Resource: "r"}))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Msg.Events)
	}
	if n := events(); n != 1 {
		t.Fatalf("history right after the grant has %d events, want 1", n)
	}
	waitFor(t, "the grant to leave the history", 10*time.Second, func() bool { return events() == 0 })
}
