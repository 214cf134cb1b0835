package fault

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// A write forwarded by a follower to a leader that is then paused
// (SIGSTOP) is answered once the follower sees another leader, not when
// the old one wakes: OUTCOME_UNKNOWN, and the next attempt through the
// same follower reaches the new leader.
// throughFollower starts a 3-member cluster and returns its leader, a
// follower and an Acquire sent through that follower, after one forward
// (so that the follower's connection to the leader is open when the
// leader stops: the next write goes out on it).
func throughFollower(t *testing.T) (l, f *Member, acquire func(ctx context.Context, res string) (*connect.Response[tenurev1.AcquireResponse], error)) {
	t.Helper()
	c := StartCluster(t, tenureBin, 3)
	l = c.WaitLeader(30 * time.Second)
	f = c.Other(l)
	lc := tenurev1connect.NewLeaseServiceClient(h2c(), "http://"+f.API, connect.WithGRPC())
	acquire = func(ctx context.Context, res string) (*connect.Response[tenurev1.AcquireResponse], error) {
		return lc.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: res, Holder: "h", Ttl: durationpb.New(30 * time.Second)}))
	}
	if _, err := Retry(t, 20*time.Second, func(ctx context.Context) (*connect.Response[tenurev1.AcquireResponse], error) {
		return acquire(ctx, "fwd/warm")
	}); err != nil {
		t.Fatal(err)
	}
	return l, f, acquire
}

// pauseFor pauses m (SIGSTOP) and resumes it after d, or when the test
// ends.
func pauseFor(t *testing.T, m *Member, d time.Duration) {
	m.Pause()
	resumed := time.AfterFunc(d, m.Resume)
	t.Cleanup(func() {
		if resumed.Stop() {
			m.Resume()
		}
	})
}

func TestForwardToPausedLeaderEndsWhenLeadershipMoves(t *testing.T) {
	l, _, acquire := throughFollower(t)
	const pause = 20 * time.Second
	pauseFor(t, l, pause)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*pause)
	defer cancel()
	_, err := acquire(ctx, "fwd/paused")
	took := time.Since(start)
	t.Logf("the write forwarded to the paused leader was answered after %v: %v", took, err)
	if took >= pause {
		t.Fatalf("answered only after the old leader woke (%v): %v", took, err)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || reasonOf(ce) != "OUTCOME_UNKNOWN" {
		t.Fatalf("answer %v, want OUTCOME_UNKNOWN", err)
	}
	// Through the same follower, the retry reaches the new leader.
	if _, err := Retry(t, 20*time.Second, func(ctx context.Context) (*connect.Response[tenurev1.AcquireResponse], error) {
		return acquire(ctx, "fwd/after")
	}); err != nil {
		t.Fatalf("a write through the follower after the new election: %v", err)
	}
}

// reasonOf returns the ErrorInfo reason of a Connect error.
func reasonOf(ce *connect.Error) string {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Reason
			}
		}
	}
	return ""
}

// A read forwarded by a follower to a leader that is then paused, where
// that follower is elected in its place, is answered by it (it leads now,
// and nothing was proposed) rather than NOT_LEADER naming itself (found
// from outside: "this node is not the leader and cannot forward to leader
// "n3"" answered by n3, the leader).
func TestForwardedReadAnsweredByFollowerElectedInPlace(t *testing.T) {
	c := StartCluster(t, tenureBin, 3)
	l := c.WaitLeader(30 * time.Second)
	var fs []*Member
	for _, m := range c.Members {
		if m != l {
			fs = append(fs, m)
		}
	}
	check := func(ctx context.Context, m *Member) (*connect.Response[tenurev1.CheckFenceResponse], error) {
		lc := tenurev1connect.NewLeaseServiceClient(h2c(), "http://"+m.API, connect.WithGRPC())
		return lc.CheckFence(ctx, connect.NewRequest(&tenurev1.CheckFenceRequest{Resource: "fwd/read", Fence: 1}))
	}
	for _, f := range fs { // open each follower's connection to the leader
		if _, err := Retry(t, 20*time.Second, func(ctx context.Context) (*connect.Response[tenurev1.CheckFenceResponse], error) {
			return check(ctx, f)
		}); err != nil {
			t.Fatal(err)
		}
	}
	const pause = 20 * time.Second
	pauseFor(t, l, pause)
	errs := make([]chan error, len(fs))
	for i, f := range fs {
		errs[i] = make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*pause)
			defer cancel()
			_, err := check(ctx, f)
			errs[i] <- err
		}()
	}
	n := c.WaitLeader(pause, l)
	for i, f := range fs {
		err := <-errs[i]
		t.Logf("read through %s (new leader %s): %v", f.ID, n.ID, err)
		if f == n && err != nil {
			t.Fatalf("the read through %s, elected meanwhile, was refused: %v", f.ID, err)
		}
	}
}
