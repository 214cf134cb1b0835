package tenure

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// startRealCluster starts three `tenure server` processes bootstrapped
// with --peers and waits until each answers /readyz (a leader is known).
func startRealCluster(t *testing.T) []*realServer {
	t.Helper()
	ms := make([]*realServer, 3)
	var peers []string
	for i := range ms {
		ms[i] = &realServer{t: t, bin: tenureBinary(t), dir: t.TempDir(), api: freePort(t), raft: freePort(t)}
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, ms[i].raft))
	}
	for i, s := range ms {
		s.extra = []string{"--node-id", fmt.Sprintf("n%d", i+1), "--peers", strings.Join(peers, ",")}
		s.log = nil
		t.Cleanup(func() {
			s.kill()
			if t.Failed() && s.log != nil {
				t.Logf("n%d log:\n%s", i+1, s.log.String())
			}
		})
	}
	// Start all before waiting: no member is ready until a quorum runs.
	for _, s := range ms {
		s.startAsync()
	}
	for _, s := range ms {
		s.waitReady()
	}
	return ms
}

// A lease held through a client that knows every member survives a kill -9
// of the leader: the client moves to the new leader and keeps renewing
// within the trust window, so Done never fires.
func TestIntegrationLeaseSurvivesLeaderFailover(t *testing.T) {
	ms := startRealCluster(t)
	var endpoints []string
	for _, s := range ms {
		endpoints = append(endpoints, s.api)
	}
	c, err := New(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxTimeout(t, time.Minute)
	l, err := c.Acquire(ctx, "integration/failover", TTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitRenewals(t, l, 2)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var leader *realServer
	for _, s := range ms {
		if s.api == st.GetLeaderApiAddress() {
			leader = s
		}
	}
	if leader == nil {
		t.Fatalf("leader %q is none of the members", st.GetLeaderApiAddress())
	}
	killed := time.Now()
	leader.kill()
	before := l.Proto().GetRenewalCount()
	waitRenewals(t, l, before+3)
	t.Logf("renewed %d times through the new leader within %v of the kill", l.Proto().GetRenewalCount()-before, time.Since(killed))
	select {
	case <-l.Done():
		t.Fatalf("lease lost across the failover: %v", l.Err())
	default:
	}
	pb, err := c.Get(ctx, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if pb.GetFence() != l.Fence() || pb.GetState().String() != "STATE_ACTIVE" {
		t.Fatalf("after failover the lease reads %v", pb)
	}
	if err := l.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatal(err)
	}
}

// A member that hangs (SIGSTOP: the kernel still holds its connections
// open, so TCP alone notices nothing) is left after a few seconds of
// silence, not for as long as it hangs: a read with no deadline is
// answered by another member. Before, the connection's health check waited
// 10 s of silence and then 5 s for a ping, and callers stalled with it.
func TestIntegrationHungMemberIsLeft(t *testing.T) {
	ms := startRealCluster(t)
	var leader *realServer
	var endpoints []string
	c0 := ms[0].client(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	var st *tenurev1.StatusResponse
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for st.GetLeaderApiAddress() == "" { // published once the leader's term begins
		var err error
		if st, err = c0.Status(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("no member published the leader's address")
		}
	}
	for _, s := range ms {
		if s.api == st.GetLeaderApiAddress() {
			leader = s
			endpoints = append([]string{s.api}, endpoints...) // the hung member first
		} else {
			endpoints = append(endpoints, s.api)
		}
	}
	if leader == nil {
		t.Fatalf("leader %q is none of the members", st.GetLeaderApiAddress())
	}
	c, err := New(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Acquire(ctx, "integration/hung", TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leader.cmd.Process.Signal(syscall.SIGCONT) })
	stopped := time.Now()
	got, err := c.Get(ctx, l.ID())
	if err != nil {
		t.Fatalf("Get while the leader hangs: %v", err)
	}
	if got.GetFence() != l.Fence() {
		t.Fatalf("Get answered fence %d, want %d", got.GetFence(), l.Fence())
	}
	// Liveness, not speed: the hung member would have held the call for
	// 15 s before; an election and the health check take well under that.
	if waited := time.Since(stopped); waited > 12*time.Second {
		t.Fatalf("Get waited %v on the hung member", waited)
	}
}

// A client given one member's address learns the others from it (a
// follower forwards every call, so no NOT_LEADER names them) and goes on
// when that member is killed.
func TestIntegrationClientLearnsMembers(t *testing.T) {
	ms := startRealCluster(t)
	ctx := ctxTimeout(t, time.Minute)
	// Every member lists every member's address (a member fills in its
	// own: ask each) once all have published theirs.
	var st *tenurev1.StatusResponse
	for _, s := range ms {
		probe, err := New([]string{s.api})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = probe.Close() })
		waitFor(t, "every member's API address published", 20*time.Second, func() bool {
			st, err = probe.Status(ctx)
			if err != nil {
				return false
			}
			n := 0
			for _, m := range st.GetMembers() {
				if m.GetApiAddress() != "" {
					n++
				}
			}
			return n == 3
		})
	}
	var follower *realServer
	for _, s := range ms {
		if s.api != st.GetLeaderApiAddress() {
			follower = s
		}
	}
	c, err := New([]string{follower.api})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client to learn every member", 10*time.Second, func() bool { return len(c.Endpoints()) == 3 })
	follower.kill()
	if _, err := c.Acquire(ctx, "integration/learned", TTL(10*time.Second)); err != nil {
		t.Fatalf("Acquire after the only given member was killed: %v", err)
	}
}

// waitFor polls cond every 10 ms until it holds, failing the test after
// timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
