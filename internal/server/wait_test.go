package server

import (
	"context"
	"strings"
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

// A waiting Acquire on a node that shuts down (with no member to hand the
// leadership to) is withdrawn and answered UNAVAILABLE at once, rather
// than held through the drain and cut off unanswered; the withdrawal is
// durable.
func TestWaitWithdrawnOnShutdown(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	ctx := context.Background()
	held, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Holder: "w1", Ttl: durationpb.New(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{
			Resource: "r", Holder: "w2", Wait: durationpb.New(time.Minute)}))
		errc <- err
	}()
	waiters := func(b *bundle) uint64 {
		resp, err := b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Counts.GetWaiters()
	}
	waitFor(t, "w2 to queue", 10*time.Second, func() bool { return waiters(bd) == 1 })
	bd.stop(t)
	err = <-errc
	wantReason(t, err, connect.CodeUnavailable, "UNAVAILABLE")
	if !strings.Contains(err.Error(), "nothing was granted") {
		t.Fatalf("UNAVAILABLE without saying nothing was granted: %v", err)
	}
	again := setup(t, bd.dir)
	if n := waiters(again); n != 0 {
		t.Fatalf("%d waiters after the restart, want the withdrawn one gone", n)
	}
	got, err := again.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: held.Msg.Lease.LeaseId}))
	if err != nil || got.Msg.Lease.State != tenurev1.State_STATE_ACTIVE {
		t.Fatalf("w1's lease after the restart: %v, %v", got, err)
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

// An Acquire whose caller goes away while it commits gives back what it
// was granted: the lease, or its place in the resource's queue.
func TestAcquireForAGoneCallerGivesBack(t *testing.T) {
	t.Parallel()
	bd := setup(t)
	ctx := context.Background()
	counts := func() *tenurev1.LeaseCounts {
		resp, err := bd.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Counts
	}
	// Granted at once: released.
	if _, err := bd.srv.acquire(&goneAfterLook{Context: ctx}, &tenurev1.AcquireRequest{Resource: "free", Holder: "ghost"}); err != context.Canceled {
		t.Fatalf("acquire for a gone caller: %v", err)
	}
	waitFor(t, "the gone caller's lease to be released", 10*time.Second, func() bool {
		c := counts()
		return c.GetActive() == 0 && c.GetReleased() == 1
	})
	// Queued behind a holder: withdrawn, so the holder's release frees it.
	held, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "busy", Holder: "w1"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bd.srv.acquire(&goneAfterLook{Context: ctx}, &tenurev1.AcquireRequest{Resource: "busy", Holder: "ghost",
		Wait: durationpb.New(time.Minute)}); err != context.Canceled {
		t.Fatalf("waiting acquire for a gone caller: %v", err)
	}
	waitFor(t, "the gone caller's wait to be withdrawn", 10*time.Second, func() bool {
		h, err := bd.leases.History(ctx, connect.NewRequest(&tenurev1.HistoryRequest{Resource: "busy"}))
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, ev := range h.Msg.Events {
			types = append(types, ev.Type)
		}
		return strings.Join(types, " ") == "lease.issued lease.waiting lease.wait_ended" && counts().GetWaiters() == 0
	})
	if _, err := bd.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: held.Msg.Lease.LeaseId, Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "busy", Holder: "w2"})); err != nil {
		t.Fatalf("resource not free after the holder released and the ghost left: %v", err)
	}
}
