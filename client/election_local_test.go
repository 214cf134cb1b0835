package tenure

import (
	"context"
	"errors"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Goroutines campaigning on one Election take turns in this process, as
// with a Mutex: a Campaign waits locally (not in the registrar's queue,
// behind its own client's lease) until the leadership before it is resigned
// or lost. Real server, real time.
func TestElectionLocalTurn(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithHolder("candidate"))
	probe := s.client(t, WithHolder("probe"))

	t.Run("concurrent campaigns", func(t *testing.T) {
		t.Parallel()
		ctx := ctxTimeout(t, 40*time.Second)
		const resource = "election-local/concurrent"
		e := NewElection(c, resource, TTL(3*time.Second))
		start := make(chan struct{})
		won := make(chan campaigned, 2)
		for _, v := range []string{"a", "b"} {
			go func() {
				<-start
				won <- campaigned{v, e.Campaign(ctx, v)}
			}()
		}
		close(start)
		first := awaitCampaign(t, won)
		second := map[string]string{"a": "b", "b": "a"}[first]
		l1 := e.Lease()
		expectLeader(ctx, t, e, first, l1)

		expectWaitingLocally(ctx, t, probe, resource, l1, won)

		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if got := awaitCampaign(t, won); got != second {
			t.Fatalf("second Campaign won with %q, want %q", got, second)
		}
		l2 := e.Lease()
		if l2 == nil || l2 == l1 || l2.Err() != nil || l2.Fence() <= l1.Fence() {
			t.Fatalf("second leadership lease %v (first %s)", l2, l1.ID())
		}
		expectLeader(ctx, t, e, second, l2)
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("campaign while leading", func(t *testing.T) {
		t.Parallel()
		ctx := ctxTimeout(t, 40*time.Second)
		const resource = "election-local/leading"
		e := NewElection(c, resource, TTL(3*time.Second))
		if err := e.Campaign(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		l1 := e.Lease()
		won := make(chan campaigned, 1)
		go func() { won <- campaigned{"two", e.Campaign(ctx, "two")} }()

		expectWaitingLocally(ctx, t, probe, resource, l1, won)
		expectLeader(ctx, t, e, "one", l1)

		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		awaitCampaign(t, won)
		l2 := e.Lease()
		if l2 == nil || l2 == l1 || l2.Err() != nil {
			t.Fatalf("second leadership lease %v (first %s)", l2, l1.ID())
		}
		expectLeader(ctx, t, e, "two", l2)
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) {
			t.Fatalf("Leader after the last Resign: %v, want ErrNoLeader", err)
		}
	})

	t.Run("lost leadership passes the turn", func(t *testing.T) {
		t.Parallel()
		ctx := ctxTimeout(t, 40*time.Second)
		e := NewElection(c, "election-local/lost", TTL(3*time.Second))
		if err := e.Campaign(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		l1 := e.Lease()
		won := make(chan campaigned, 1)
		go func() { won <- campaigned{"two", e.Campaign(ctx, "two")} }()
		select {
		case r := <-won:
			t.Fatalf("Campaign(%q) returned (%v) while the first leadership stands", r.value, r.err)
		default:
		}

		if _, err := c.Revoke(ctx, l1.ID(), "test"); err != nil {
			t.Fatal(err)
		}
		waitLeaseEnded(t, l1, 10*time.Second)
		awaitCampaign(t, won)
		l2 := e.Lease()
		if l2 == nil || l2 == l1 || l2.Err() != nil || l2.Fence() <= l1.Fence() {
			t.Fatalf("leadership after the loss: %v (lost %s)", l2, l1.ID())
		}

		// The first leader's late Resign: the loss, the new leader untouched.
		err := e.Resign(ctx)
		if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrLeaseTerminal) {
			t.Fatalf("Resign of the lost leadership = %v, want ErrLeaseLost caused by LEASE_TERMINAL", err)
		}
		if err := l2.Err(); err != nil {
			t.Fatalf("the new leader's lease ended: %v", err)
		}
		if pb, err := c.Get(ctx, l2.ID()); err != nil || pb.GetState() != tenurev1.State_STATE_ACTIVE {
			t.Fatalf("the new leader's lease at the registrar: %v, %v, want ACTIVE", pb.GetState(), err)
		}
		expectLeader(ctx, t, e, "two", l2)

		if err := e.Resign(ctx); err != nil {
			t.Fatalf("Resign of the new leader: %v", err)
		}
		if pb, err := c.Get(ctx, l2.ID()); err != nil || pb.GetState() != tenurev1.State_STATE_RELEASED {
			t.Fatalf("the new leader's lease after Resign: %v, %v, want RELEASED", pb.GetState(), err)
		}
	})
}

// campaigned is what a Campaign of value returned.
type campaigned struct {
	value string
	err   error
}

// awaitCampaign returns the value of the next Campaign to return, which
// must have won.
func awaitCampaign(t *testing.T, won <-chan campaigned) string {
	t.Helper()
	select {
	case r := <-won:
		if r.err != nil {
			t.Fatalf("Campaign(%q): %v", r.value, r.err)
		}
		return r.value
	case <-time.After(10 * time.Second):
		t.Fatal("no Campaign won within 10s")
		return ""
	}
}

// expectLeader checks that the election's leader is this client with value,
// on lease l.
func expectLeader(ctx context.Context, t *testing.T, e *Election, value string, l *Lease) {
	t.Helper()
	info, err := e.Leader(ctx)
	if err != nil || info.Value != value || info.LeaseID != l.ID() {
		t.Fatalf("Leader = %+v, %v; want %q on lease %s", info, err, value, l.ID())
	}
}

// expectWaitingLocally checks that a Campaign blocked behind leadership l
// neither returns nor queues at the registrar while l is renewed once more
// (time enough for it to do either).
func expectWaitingLocally(ctx context.Context, t *testing.T, probe *Client, resource string, l *Lease, won <-chan campaigned) {
	t.Helper()
	waitRenewals(t, l, l.Proto().GetRenewalCount()+1)
	select {
	case r := <-won:
		t.Fatalf("Campaign(%q) returned (%v) while the leadership on %s stands", r.value, r.err, l.ID())
	default:
	}
	_, err := probe.Acquire(ctx, resource)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("probe Acquire while %s leads: %v, want a HeldError", l.ID(), err)
	}
	if held.LeaseID != l.ID() || held.Waiters != 0 {
		t.Fatalf("registrar: held by %s with %d waiters; want %s with none (the Campaign waits in this process)", held.LeaseID, held.Waiters, l.ID())
	}
}
