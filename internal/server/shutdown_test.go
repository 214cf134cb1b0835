package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
	"github.com/tenurehq/tenure/internal/testlog"
)

// TestLeaderShutdownHandsOver: a leader asked to shut down (SIGTERM)
// hands leadership to another voter first and ends its idle streams at
// once with UNAVAILABLE, so its drain neither holds the cluster without a
// serving leader nor waits for clients to speak again.
func TestLeaderShutdownHandsOver(t *testing.T) {
	var logs testlog.Buffer
	ms := startClusterWith(t, 3, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil)).With("member", c.Cluster.NodeID)
	})
	leader := leaderOf(t, ms, 10*time.Second)
	a := acquireVia(t, leader, "shutdown/held", time.Minute)

	// Idle streams on the leader: a KeepAlive that has renewed once and a
	// Pipeline that has acquired once, both now waiting for the client.
	ka := leader.leases.KeepAlive(context.Background())
	if err := ka.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{a.lease.LeaseId}, RequestId: 1}); err != nil {
		t.Fatal(err)
	}
	if r, err := ka.Receive(); err != nil || len(r.Leases) != 1 {
		t.Fatalf("KeepAlive: %v %v", r, err)
	}
	pipe := leader.leases.Pipeline(context.Background())
	if err := pipe.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{{Id: 1, Op: &tenurev1.PipelineOp_Acquire{
		Acquire: &tenurev1.AcquireRequest{Resource: "shutdown/pipe", Holder: "p", Ttl: durationpb.New(time.Minute)}}}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := pipe.Receive(); err != nil || r.Results[0].GetAcquire().GetLease() == nil {
		t.Fatalf("Pipeline: %v %v", r, err)
	}

	// Shut the leader down with all the time in the world: it must not
	// need it (before, Close waited for the streams until ctx ended).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- leader.srv.Close(ctx) }()
	for name, recv := range map[string]func() error{
		"KeepAlive": func() error { _, err := ka.Receive(); return err },
		"Pipeline":  func() error { _, err := pipe.Receive(); return err },
	} {
		err := recv()
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || !strings.HasPrefix(ce.Message(), "UNAVAILABLE: the server is shutting down") {
			t.Errorf("idle %s stream on the leader ended with %v, want UNAVAILABLE: the server is shutting down", name, err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Close used up its context")
	}
	leader.srv = nil
	if !strings.Contains(logs.String(), "handed leadership over before shutting down") {
		t.Errorf("the leader did not hand leadership over; logs:\n%s", logs.String())
	}

	// The others serve, with the lease still held.
	rest := []*member{}
	for _, m := range ms {
		if m.srv != nil {
			rest = append(rest, m)
		}
	}
	next := leaderOf(t, rest, 10*time.Second)
	l, err := getVia(next, a.lease.LeaseId, false)
	if err != nil || l.State != tenurev1.State_STATE_ACTIVE || l.Fence != a.lease.Fence {
		t.Fatalf("the held lease after the hand-over: %v %v", l, err)
	}
}

// TestWaitsOfAnEarlierTermAreWithdrawn: an Acquire waiting on a leader
// that loses office answers OUTCOME_UNKNOWN (the client retries), and the
// new leader withdraws the wait before serving, so that the release of
// the resource grants no lease that nobody would receive.
func TestWaitsOfAnEarlierTermAreWithdrawn(t *testing.T) {
	ms := startCluster(t, 3)
	leader := leaderOf(t, ms, 10*time.Second)
	held := acquireVia(t, leader, "orphan/r", time.Minute)

	waited := make(chan error, 1)
	go func() {
		_, err := leader.leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{
			Resource: "orphan/r", Holder: "waiter", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)}))
		waited <- err
	}()
	queued := func(m *member) int {
		var n int
		_ = m.srv.Node().Read(context.Background(), true, func(mc *statemachine.Machine, _ registrar.Tick) error {
			n = len(mc.Registrar().QueuedWaits())
			return nil
		})
		return n
	}
	waitFor(t, "the acquire to queue", 10*time.Second, func() bool { return queued(leader) == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := leader.srv.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	leader.srv = nil
	wantReason(t, <-waited, connect.CodeUnavailable, "OUTCOME_UNKNOWN")

	var rest []*member
	for _, m := range ms {
		if m.srv != nil {
			rest = append(rest, m)
		}
	}
	next := leaderOf(t, rest, 10*time.Second)
	if n := queued(next); n != 0 {
		t.Fatalf("the new leader serves with %d waits of the earlier term queued", n)
	}
	if _, err := next.leases.Release(context.Background(), connect.NewRequest(&tenurev1.ReleaseRequest{
		LeaseId: held.lease.LeaseId, Holder: held.lease.Holder})); err != nil {
		t.Fatal(err)
	}
	resp, err := next.leases.List(context.Background(), connect.NewRequest(&tenurev1.ListRequest{
		Prefix: "orphan/r", States: []tenurev1.State{tenurev1.State_STATE_ACTIVE}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.Leases) != 0 {
		t.Fatalf("after the release, a lease nobody asked for: %v", resp.Msg.Leases)
	}
	hist, err := next.leases.History(context.Background(), connect.NewRequest(&tenurev1.HistoryRequest{Resource: "orphan/r"}))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range hist.Msg.Events {
		types = append(types, ev.Type)
	}
	if !slices.Contains(types, "lease.wait_ended") {
		t.Errorf("history %v has no lease.wait_ended", types)
	}
}
