package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestListQueuesAndPools: the dashboard's queue and pool lists name what
// each namespace holds, by name, with the queues' counts; a bad namespace
// is INVALID_ARGUMENT.
func TestListQueuesAndPools(t *testing.T) {
	b := setup(t)
	qc, pc := b.queueClient(), poolClient(b)
	ctx := context.Background()

	lq, err := qc.ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{}))
	if err != nil || len(lq.Msg.Queues) != 0 {
		t.Fatalf("empty ListQueues: %v %v", lq, err)
	}
	for _, q := range []struct{ ns, name string }{{"", "mail"}, {"", "builds"}, {"other", "x"}} {
		if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: q.ns, Queue: q.name,
			Tasks: []*tenurev1.NewTask{{Payload: []byte("a")}, {Payload: []byte("b")}}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := qc.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Queue: "mail", Worker: "w1"})); err != nil {
		t.Fatal(err)
	}
	lq, err = qc.ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{Namespace: "default"}))
	if err != nil {
		t.Fatal(err)
	}
	got := lq.Msg.Queues
	if len(got) != 2 || got[0].Queue != "builds" || got[1].Queue != "mail" ||
		got[0].Stats.Queued != 2 || got[1].Stats.Queued != 1 || got[1].Stats.Leased != 1 {
		t.Fatalf("ListQueues = %v", got)
	}
	_, err = qc.ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{Namespace: "bad\x00ns"}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")

	for _, name := range []string{"swarm", "alpha"} {
		if _, err := pc.CreatePool(ctx, connect.NewRequest(&tenurev1.CreatePoolRequest{Pool: name})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pc.CreatePool(ctx, connect.NewRequest(&tenurev1.CreatePoolRequest{Pool: "elsewhere", Namespace: "other"})); err != nil {
		t.Fatal(err)
	}
	lp, err := pc.ListPools(ctx, connect.NewRequest(&tenurev1.ListPoolsRequest{}))
	if err != nil || len(lp.Msg.Pools) != 2 || lp.Msg.Pools[0] != "alpha" || lp.Msg.Pools[1] != "swarm" {
		t.Fatalf("ListPools = %v %v", lp, err)
	}
	lp, err = pc.ListPools(ctx, connect.NewRequest(&tenurev1.ListPoolsRequest{Namespace: "other"}))
	if err != nil || len(lp.Msg.Pools) != 1 || lp.Msg.Pools[0] != "elsewhere" {
		t.Fatalf("ListPools(other) = %v %v", lp, err)
	}
	_, err = pc.ListPools(ctx, connect.NewRequest(&tenurev1.ListPoolsRequest{Namespace: "bad\x00ns"}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
}
