package tenure

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// The tests in this file run in testing/synctest bubbles: time.Sleep advances
// the fake clock (it is how a test moves time, never how it synchronises),
// and synctest.Wait returns once every goroutine — client, transport, fake
// server — is idle, which is the synchronisation.

func isDone(l *Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

func TestHeartbeatRenewsAtThirdOfTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		t0 := time.Now()
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := l.TrustedUntil(), t0.Add(3*time.Second-500*time.Millisecond); !got.Equal(want) {
			t.Fatalf("TrustedUntil after grant = %v, want send time + ttl − margin = %v", got.Sub(t0), want.Sub(t0))
		}
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lease lost while renewals were confirmed: %v", l.Err())
		}
		log := fc.members["a:1"].keepalives()
		if len(log) != 10 {
			t.Fatalf("got %d renewals in 10s of a 3s lease, want 10 (one per ttl/3): %v", len(log), log)
		}
		for i, r := range log {
			if want := time.Duration(i+1) * time.Second; r.at.Sub(t0) != want {
				t.Errorf("renewal %d at %v, want %v", i, r.at.Sub(t0), want)
			}
			if len(r.ids) != 1 || r.ids[0] != l.ID() {
				t.Errorf("renewal %d ids = %v, want [%s]", i, r.ids, l.ID())
			}
		}
		last := log[len(log)-1].at
		if got, want := l.TrustedUntil(), last.Add(2500*time.Millisecond); !got.Equal(want) {
			t.Errorf("TrustedUntil = %v, want last renewal send + ttl − margin = %v", got.Sub(t0), want.Sub(t0))
		}
		if l.Proto().GetRenewalCount() != 10 {
			t.Errorf("renewal count = %d, want 10", l.Proto().GetRenewalCount())
		}
		if streams := fc.members["a:1"].streamCount(); streams != 1 {
			t.Errorf("%d KeepAlive streams opened, want 1", streams)
		}
	})
}

func TestHeartbeatBatchesLeasesDueTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		var leases []*Lease
		for _, r := range []string{"r1", "r2", "r3"} {
			l, err := c.Acquire(t.Context(), r, TTL(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
		// Due 0.4 s later than the others, within the ttl/6 coalescing window.
		time.Sleep(400 * time.Millisecond)
		l4, err := c.Acquire(t.Context(), "r4", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l4)
		time.Sleep(time.Second)
		synctest.Wait()
		log := fc.members["a:1"].keepalives()
		if len(log) != 1 || len(log[0].ids) != 4 {
			t.Fatalf("keepalive requests = %+v, want one request renewing all 4 leases", log)
		}
		for _, l := range leases {
			if isDone(l) {
				t.Errorf("lease %s lost: %v", l.ID(), l.Err())
			}
		}
	})
}

func TestDoneOnlyAfterTrustWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		t0 := time.Now()
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// Two renewals are confirmed, then the member stops answering.
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		fc.members["a:1"].set(func(m *fakeMember) { m.ka = kaSilent })
		lastConfirmed := l.TrustedUntil()
		if want := t0.Add(4500 * time.Millisecond); !lastConfirmed.Equal(want) {
			t.Fatalf("trusted until %v after the renewal at 2s, want 4.5s", lastConfirmed.Sub(t0))
		}
		time.Sleep(time.Until(lastConfirmed) - time.Millisecond)
		synctest.Wait()
		if isDone(l) || !l.Valid() {
			t.Fatalf("Done or not Valid 1ms before the trust window ended: %v", l.Err())
		}
		if len(fc.members["a:1"].keepalives()) <= 2 {
			t.Fatal("no renewal attempted after the member went silent")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !isDone(l) || l.Valid() {
			t.Fatal("Done not closed, or still Valid, when the trust window ended")
		}
		err = l.Err()
		if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrTrustWindowPassed) {
			t.Fatalf("Err = %v, want ErrLeaseLost caused by ErrTrustWindowPassed", err)
		}
		var lost *LostError
		if !errors.As(err, &lost) || lost.LeaseID != l.ID() || !lost.At.Equal(lastConfirmed) {
			t.Fatalf("LostError = %+v, want lease %s lost at %v", lost, l.ID(), lastConfirmed)
		}
	})
}

func TestDoneNotBeforeTrustWindowWhenServerNeverAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		for _, m := range fc.members {
			m.set(func(m *fakeMember) { m.ka = kaSilent })
		}
		c := fc.client([]string{"a:1", "b:1"})
		t0 := time.Now()
		l, err := c.Acquire(t.Context(), "job", TTL(6*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// margin = max(500ms, 600ms) = 600ms.
		deadline := t0.Add(6*time.Second - 600*time.Millisecond)
		time.Sleep(time.Until(deadline) - time.Millisecond)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("Done before the trust window ended: %v", l.Err())
		}
		// Unanswered renewals are presumed lost after ttl/6 and retried on
		// the other member.
		if len(fc.members["a:1"].keepalives()) == 0 || len(fc.members["b:1"].keepalives()) == 0 {
			t.Errorf("renewals a=%d b=%d, want attempts on both members",
				len(fc.members["a:1"].keepalives()), len(fc.members["b:1"].keepalives()))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !isDone(l) || !errors.Is(l.Err(), ErrTrustWindowPassed) {
			t.Fatalf("Done=%v Err=%v, want lost at the end of the trust window", isDone(l), l.Err())
		}
	})
}

func TestDoneOnRenewalFailure(t *testing.T) {
	tests := []struct {
		reason Reason
		want   error
	}{
		{ReasonLeaseExpired, ErrLeaseExpired},
		{ReasonLeaseTerminal, ErrLeaseTerminal},
		{ReasonLeaseNotFound, ErrLeaseNotFound},
		{ReasonNotHolder, ErrNotHolder},
		{ReasonRenewalLimitExceeded, ErrRenewalLimitExceeded},
		{ReasonLifetimeExceeded, ErrLifetimeExceeded},
	}
	for _, tt := range tests {
		t.Run(string(tt.reason), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fc := setup(t, "a:1")
				c := fc.client([]string{"a:1"})
				t0 := time.Now()
				l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				fc.members["a:1"].set(func(m *fakeMember) { m.fail[l.ID()] = tt.reason })
				time.Sleep(time.Second - time.Millisecond)
				synctest.Wait()
				if isDone(l) {
					t.Fatal("Done before the first renewal")
				}
				time.Sleep(time.Millisecond)
				synctest.Wait()
				if !isDone(l) {
					t.Fatal("Done not closed by a refused renewal")
				}
				err = l.Err()
				if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, tt.want) {
					t.Fatalf("Err = %v, want ErrLeaseLost and %v", err, tt.want)
				}
				var lost *LostError
				if errors.As(err, &lost); lost.At.Sub(t0) != time.Second {
					t.Errorf("lost at %v, want at the renewal (1s)", lost.At.Sub(t0))
				}
				if !errors.Is(lost.Cause, tt.want) {
					t.Errorf("cause = %v", lost.Cause)
				}
			})
		})
	}
}

func TestDoneOnRevoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		fc.reg.end(l.ID(), tenurev1.State_STATE_REVOKED)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if !isDone(l) || !errors.Is(l.Err(), ErrLeaseTerminal) {
			t.Fatalf("Done=%v Err=%v, want lost with LEASE_TERMINAL at the next renewal", isDone(l), l.Err())
		}
	})
}

func TestTransientRenewalFailureIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m := fc.members["a:1"]
		m.set(func(m *fakeMember) { m.fail[l.ID()] = ReasonQuotaExceeded })
		time.Sleep(time.Second + 300*time.Millisecond)
		m.set(func(m *fakeMember) { delete(m.fail, l.ID()) })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lease lost after a transient renewal failure: %v", l.Err())
		}
		if n := len(m.keepalives()); n < 8 {
			t.Errorf("%d renewals, want retries after the failure", n)
		}
	})
}

func TestFailoverWhenStreamBreaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if n := len(fc.members["a:1"].keepalives()); n != 1 {
			t.Fatalf("%d renewals on a, want 1", n)
		}
		fc.stop("a:1") // the member dies; its connections close
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lease lost across a failover: %v", l.Err())
		}
		if n := len(fc.members["b:1"].keepalives()); n < 9 {
			t.Fatalf("%d renewals on b after the failover, want ≥ 9", n)
		}
		if got := fc.reg.state(l.ID()); got != tenurev1.State_STATE_ACTIVE {
			t.Fatalf("registry state %v", got)
		}
	})
}

func TestFailoverWhenStreamStopsAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		fc.members["a:1"].set(func(m *fakeMember) { m.ka = kaSilent }) // hung, not dead
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lease lost: %v", l.Err())
		}
		b := fc.members["b:1"].keepalives()
		if len(b) == 0 {
			t.Fatal("no renewal moved to b")
		}
		// The renewal sent at 1s went unanswered; it was presumed lost after
		// ttl/6 = 0.5s and resent on b at once.
		if got := b[0].at.Sub(l.Proto().GetIssuedAt().AsTime()); got != 1500*time.Millisecond {
			t.Errorf("first renewal on b at %v, want 1.5s", got)
		}
	})
}

func TestFailoverFollowsNotLeaderHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1", "c:1")
		c := fc.client([]string{"a:1", "b:1", "c:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		// a loses leadership to c: its stream ends with NOT_LEADER.
		notLeader := tenureError(connect.CodeUnavailable, ReasonNotLeader, map[string]string{"leader": "c:1", "leader_id": "node3"}, "not the leader")
		fc.members["a:1"].set(func(m *fakeMember) { m.streamErr = notLeader })
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lease lost: %v", l.Err())
		}
		if n := len(fc.members["b:1"].keepalives()); n != 0 {
			t.Errorf("%d renewals went to b, want none: the hint named c", n)
		}
		if n := len(fc.members["c:1"].keepalives()); n < 4 {
			t.Errorf("%d renewals on c, want ≥ 4", n)
		}
	})
}

func TestFailoverAllMembersDownLosesLeaseAtTrustWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		trusted := l.TrustedUntil() // renewal at 1s: 3.5s
		fc.stop("a:1")
		fc.stop("b:1")
		time.Sleep(time.Until(trusted) - time.Millisecond)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("Done before the trust window ended: %v", l.Err())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !isDone(l) || !errors.Is(l.Err(), ErrTrustWindowPassed) {
			t.Fatalf("Done=%v Err=%v", isDone(l), l.Err())
		}
	})
}

func TestReleaseStopsHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if err := l.Release(t.Context(), ReleaseCompleted); err != nil {
			t.Fatal(err)
		}
		if !isDone(l) || !errors.Is(l.Err(), ErrReleased) || errors.Is(l.Err(), ErrLeaseLost) {
			t.Fatalf("after Release: Done=%v Err=%v, want ErrReleased", isDone(l), l.Err())
		}
		before := len(fc.members["a:1"].keepalives())
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if after := len(fc.members["a:1"].keepalives()); after != before {
			t.Errorf("%d renewals after Release", after-before)
		}
		if got := fc.reg.state(l.ID()); got != tenurev1.State_STATE_RELEASED {
			t.Errorf("registry state %v, want released", got)
		}
		// Idempotent.
		if err := l.Release(t.Context(), ReleaseCompleted); err != nil {
			t.Errorf("second Release: %v", err)
		}
	})
}

func TestCloseReleasesLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(l.Err(), ErrReleased) {
			t.Fatalf("Err after Close = %v", l.Err())
		}
		if got := fc.reg.state(l.ID()); got != tenurev1.State_STATE_RELEASED {
			t.Errorf("registry state %v, want released", got)
		}
		if _, err := c.Acquire(t.Context(), "x"); !errors.Is(err, ErrClientClosed) {
			t.Errorf("Acquire after Close: %v", err)
		}
	})
}

// TestCloseSaysWhichLeaseItCouldNotRelease: with the member gone, Close
// gives up after its timeout and names the lease left to expire and why.
func TestCloseSaysWhichLeaseItCouldNotRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"}, WithCloseTimeout(time.Second))
		l, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		fc.stop("a:1")
		err = c.Close()
		if err == nil || !strings.Contains(err.Error(), l.ID()) || !strings.Contains(err.Error(), "connection refused") ||
			strings.Count(err.Error(), "gave up after 1s") != 1 || strings.Count(err.Error(), "client closed") > 0 {
			t.Fatalf("Close: %v", err)
		}
		var lost *LostError
		if !errors.As(l.Err(), &lost) || !errors.Is(l.Err(), ErrClientClosed) {
			t.Fatalf("the lease Close could not release: Err = %v, want a LostError caused by ErrClientClosed", l.Err())
		}
	})
}

func TestExplicitRenewExtendsTrust(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		fc.members["a:1"].set(func(m *fakeMember) { m.ka = kaSilent })
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		sent := time.Now()
		if err := l.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got, want := l.TrustedUntil(), sent.Add(2500*time.Millisecond); !got.Equal(want) {
			t.Errorf("TrustedUntil after Renew = %v, want %v", got, want)
		}
		time.Sleep(2500*time.Millisecond - time.Millisecond)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lost before the extended trust window ended: %v", l.Err())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !isDone(l) {
			t.Fatal("not lost at the end of the trust window")
		}
	})
}

func TestGrantAfterTrustWindowIsRenewedFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		// The grant comes 4 s after the request (a wait in the queue), later
		// than request + ttl − margin = 2.5 s: it must be proven by a renewal.
		fc.members["a:1"].set(func(m *fakeMember) { m.acquireDelay = 4 * time.Second })
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second), Wait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if n := fc.members["a:1"].renewCount(); n != 1 {
			t.Fatalf("%d unary renewals, want 1 before Acquire returns", n)
		}
		if !l.TrustedUntil().After(time.Now()) {
			t.Fatalf("returned an untrusted lease: trusted until %v", l.TrustedUntil())
		}
	})
}

// lateGrant is a Client of a fake member that grants its first acquire 4 s
// late (past a 3 s lease's request + ttl − margin: a grant too late to be
// trusted) and refuses the first renewal with renewal; acquires counts
// the acquires it answered. Inside a synctest bubble.
func lateGrant(t *testing.T, renewal Reason) (*Client, *atomic.Int32) {
	fc := setup(t, "a:1")
	acquires := new(atomic.Int32)
	fc.members["a:1"].set(func(m *fakeMember) {
		m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
			if acquires.Add(1) == 1 {
				time.Sleep(4 * time.Second) // fake time: granted past request + ttl − margin
			}
			return false, nil
		}
		m.renewFail = []Reason{renewal}
	})
	return fc.client([]string{"a:1"}), acquires
}

// TestLockQueuesAgainAfterALateGrantIsLost: a Lock whose grant came after
// its trust window (the process paused while it waited: found from outside
// with SIGSTOP) and whose proving renewal is refused (the lease expired
// meanwhile) queues again and gets the lock, rather than returning an
// error that is neither its ctx's nor a reason to give up.
func TestLockQueuesAgainAfterALateGrantIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, acquires := lateGrant(t, ReasonLeaseExpired)
		m := NewMutex(c, "locks/late", TTL(3*time.Second))
		if err := m.Lock(t.Context()); err != nil {
			t.Fatalf("Lock: %v; want it to queue again after the late grant was lost", err)
		}
		if l := m.Lease(); l == nil || !l.Valid() {
			t.Fatalf("Lock returned without a valid lease: %v", l)
		}
		if n := acquires.Load(); n < 2 {
			t.Fatalf("%d acquires, want the late grant given up and a second one", n)
		}
	})
}

// TestAcquireAsksAgainAfterALateGrantIsFoundGone: a grant that came too
// late to be trusted, whose renewal finds it gone (given back: found from
// outside, LEASE_TERMINAL for a lease the caller never saw), is no lease:
// a plain Acquire asks once more rather than fail with the renewal's
// reason.
func TestAcquireAsksAgainAfterALateGrantIsFoundGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, acquires := lateGrant(t, ReasonLeaseTerminal)
		l, err := c.Acquire(t.Context(), "orders/late", TTL(3*time.Second), Wait(10*time.Second))
		if err != nil {
			t.Fatalf("Acquire: %v; want it to ask again after the late grant was found gone", err)
		}
		if !l.Valid() {
			t.Fatal("Acquire returned a lease that is not valid")
		}
		if n := acquires.Load(); n != 2 {
			t.Fatalf("%d acquires, want 2", n)
		}
	})
}

// TestGrantLateInTrustWindowIsRenewedFirst: a grant that leaves less than
// a third of the ttl of trust (a wait that ended late: trust counts from
// the request) is renewed before Acquire returns, not handed over with
// milliseconds left (found from outside: 11 ms of a 10 s lease).
func TestGrantLateInTrustWindowIsRenewedFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		// Request + ttl − margin = 9 s (ttl 10 s, margin 1 s); granted at
		// 8 s, it would have 1 s of trust left.
		fc.members["a:1"].set(func(m *fakeMember) { m.acquireDelay = 8 * time.Second })
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/43", TTL(10*time.Second), Wait(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if n := fc.members["a:1"].renewCount(); n != 1 {
			t.Fatalf("%d unary renewals, want 1 before Acquire returns", n)
		}
		if left := time.Until(l.TrustedUntil()); left < 8*time.Second {
			t.Fatalf("returned with %v of trust, want a whole window again", left)
		}
	})
}

// leaveStray has c's Acquire of resource end (its ctx) while member a:1
// holds it back, and a:1 grant it after: a lease nobody waits for.
func leaveStray(t *testing.T, fc *fakeCluster, c *Client, resource string) {
	t.Helper()
	fc.members["a:1"].set(func(m *fakeMember) { m.acquireDelay = 2 * time.Second })
	short, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := c.Acquire(short, resource, TTL(time.Minute)); err == nil {
		t.Fatal("an Acquire past its deadline succeeded")
	}
	time.Sleep(2 * time.Second) // fake time: the server grants the lease nobody waits for
	synctest.Wait()
	fc.members["a:1"].set(func(m *fakeMember) { m.acquireDelay = 0 })
}

// TestStrayGrantReleasedByNextAcquire: an Acquire whose ctx ended after its
// request went out may still be granted; the next Acquire of the resource
// by the same Client releases that lease and takes the resource, instead
// of meeting LEASE_HELD (naming its own holder) for a whole ttl.
func TestStrayGrantReleasedByNextAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"}, WithoutPipeline())
		leaveStray(t, fc, c, "orders/42")
		l, err := c.Acquire(t.Context(), "orders/42", TTL(time.Minute))
		if err != nil {
			t.Fatalf("the next Acquire: %v", err)
		}
		m := fc.members["a:1"]
		m.mu.Lock()
		rel := append([]string(nil), m.releases...)
		m.mu.Unlock()
		if len(rel) != 1 || rel[0] == l.ID() {
			t.Fatalf("released %v; want the stray lease, not %s", rel, l.ID())
		}
	})
}

// A lease due sooner than everything already tracked re-arms the loop's
// timer when it is added (Acquire hands it over without a full step).
func TestShortLeaseAfterLongOneIsRenewedOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		long, err := c.Acquire(t.Context(), "long", TTL(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the loop has armed its timer for the long lease
		t0 := time.Now()
		short, err := c.Acquire(t.Context(), "short", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3*time.Second + time.Millisecond)
		synctest.Wait()
		if isDone(short) || isDone(long) {
			t.Fatalf("lost a lease: short %v, long %v", short.Err(), long.Err())
		}
		var at []time.Duration
		for _, r := range fc.members["a:1"].keepalives() {
			if len(r.ids) == 1 && r.ids[0] == short.ID() {
				at = append(at, r.at.Sub(t0))
			}
		}
		if len(at) != 3 || at[0] != time.Second {
			t.Fatalf("the 3s lease was renewed at %v, want at 1s, 2s and 3s", at)
		}
	})
}

// pausedClock is the real (synctest) clock plus a jump that no timer
// sees: a process waking from a pause before its timers have run.
type pausedClock struct{ jump atomic.Int64 }

func (c *pausedClock) Now() time.Time                 { return time.Now().Add(time.Duration(c.jump.Load())) }
func (c *pausedClock) NewTimer(d time.Duration) Timer { return realClock{}.NewTimer(d) }

// TestValidWithoutWaitingForTimers: after a pause past the trust window,
// Valid answers false before the timer that closes Done has run.
func TestValidWithoutWaitingForTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		clock := &pausedClock{}
		c := fc.client([]string{"a:1"}, WithClock(clock))
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !l.Valid() {
			t.Fatal("a fresh lease is not Valid")
		}
		clock.jump.Store(int64(3 * time.Second))
		if isDone(l) || l.Valid() {
			t.Fatalf("after a pause past the window: Done %v, Valid %v; want Done still open and Valid false", isDone(l), l.Valid())
		}
	})
}

// TestWatchResumesOnAnotherMember: a member that refuses to resume after
// the index (one replaced with an empty data dir no longer holds the
// events) is not the end of the watch while another member may hold
// them; when every member refuses, the refusal is the answer.
func TestWatchResumesOnAnotherMember(t *testing.T) {
	refuse := tenureError(connect.CodeInvalidArgument, ReasonInvalidArgument,
		map[string]string{"field": "after_index", "fell_behind": "true"}, "the watch fell behind")
	t.Run("another member holds them", func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		fc.members["a:1"].set(func(m *fakeMember) { m.watchErr = refuse })
		fc.members["b:1"].set(func(m *fakeMember) {
			m.watchEvents = []*tenurev1.Event{{Index: 100, Type: "lease.issued"}, {Index: 101, Type: "lease.released"}}
		})
		c := fc.client([]string{"a:1", "b:1"})
		stop := errors.New("seen")
		var got []uint64
		err := c.Watch(ctxTimeout(t, 10*time.Second), "", 100, func(ev *tenurev1.Event) error {
			got = append(got, ev.GetIndex())
			return stop
		})
		if !errors.Is(err, stop) || !slices.Equal(got, []uint64{101}) {
			t.Fatalf("Watch: %v, events %v; want event 101 from the second member", err, got)
		}
	})
	t.Run("every member refuses", func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		for _, a := range []string{"a:1", "b:1"} {
			fc.members[a].set(func(m *fakeMember) { m.watchErr = refuse })
		}
		c := fc.client([]string{"a:1", "b:1"})
		err := c.Watch(ctxTimeout(t, 10*time.Second), "", 100, func(*tenurev1.Event) error { return nil })
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Watch refused by every member: %v", err)
		}
	})
}

// TestWatchLearnsMembers: a watch given one member's address learns the
// members it lists, as a unary call would, and resumes on another member
// when that one goes away, instead of retrying the dead member forever.
func TestWatchLearnsMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		members := []*tenurev1.Member{{Id: "a", ApiAddress: "a:1"}, {Id: "b", ApiAddress: "b:1"}}
		events := []*tenurev1.Event{{Index: 100, Type: "lease.issued"}, {Index: 101, Type: "lease.released"}}
		for _, a := range []string{"a:1", "b:1"} {
			fc.members[a].set(func(m *fakeMember) { m.members, m.watchEvents = members, events })
		}
		fc.members["a:1"].set(func(m *fakeMember) { m.watchEvents = events[:1] })
		c := fc.client([]string{"a:1"})
		stop := errors.New("seen")
		var got []uint64
		err := c.Watch(ctxTimeout(t, time.Minute), "", 99, func(ev *tenurev1.Event) error {
			got = append(got, ev.GetIndex())
			if ev.GetIndex() == 100 {
				waitFor(t, "the watch to learn the members", 10*time.Second, func() bool { return len(c.Endpoints()) == 2 })
				fc.stop("a:1")
				return nil
			}
			return stop
		})
		if !errors.Is(err, stop) || !slices.Equal(got, []uint64{100, 101}) {
			t.Fatalf("Watch: %v, events %v; want 100 from a:1, then 101 from b:1 after a:1 stopped", err, got)
		}
	})
}

// TestWatchProgress: WatchProgress asks for progress notifications, hands
// their index to its function, and a broken stream resumes from there.
func TestWatchProgress(t *testing.T) {
	fc := setup(t, "a:1")
	fc.members["a:1"].set(func(m *fakeMember) {
		m.watchEvents = []*tenurev1.Event{{Index: 101, Type: "lease.issued"}}
		m.watchProgress = 150
	})
	c := fc.client([]string{"a:1"})
	stop := errors.New("seen")
	var events, progress []uint64
	err := c.Watch(ctxTimeout(t, 10*time.Second), "", 100, func(ev *tenurev1.Event) error {
		events = append(events, ev.GetIndex())
		return nil
	}, WatchProgress(250*time.Millisecond, func(index uint64) error {
		if progress = append(progress, index); len(progress) == 2 {
			return stop
		}
		return nil
	}))
	if !errors.Is(err, stop) || !slices.Equal(events, []uint64{101}) || !slices.Equal(progress, []uint64{150, 150}) {
		t.Fatalf("Watch: %v, events %v, progress %v; want event 101, then progress 150 twice", err, events, progress)
	}
	var afters []uint64
	fc.members["a:1"].set(func(m *fakeMember) {
		for _, r := range m.watchReqs {
			afters = append(afters, r.GetAfterIndex())
			if r.GetProgressInterval().AsDuration() != 250*time.Millisecond {
				t.Errorf("progress_interval %v, want 250ms", r.GetProgressInterval())
			}
		}
	})
	if !slices.Equal(afters, []uint64{100, 150}) {
		t.Fatalf("watched after %v; want 100, then resumed after the progress index, 150", afters)
	}
}

// A lease is followed on the stream (follow_lease_ids) followAfter after
// its grant, so that its end is told before its first renewal; the follow
// pulls no renewal forward, and a lease released before then is never
// followed.
func TestLeaseFollowedBeforeItsFirstRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		t0 := time.Now()
		quick, err := c.Acquire(t.Context(), "quick", TTL(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := quick.Release(t.Context(), ReleaseCompleted); err != nil {
			t.Fatal(err)
		}
		l, err := c.Acquire(t.Context(), "kept", TTL(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(followAfter + time.Second)
		synctest.Wait()
		var follows, renewals []kaRecord
		for _, r := range fc.members["a:1"].keepalives() {
			if len(r.follow) > 0 {
				follows = append(follows, r)
			}
			if len(r.ids) > 0 {
				renewals = append(renewals, r)
			}
		}
		if len(follows) != 1 || !slices.Equal(follows[0].follow, []string{l.ID()}) || follows[0].at.Sub(t0) != followAfter {
			t.Fatalf("follows %+v; want one of %s at %v", follows, l.ID(), followAfter)
		}
		if len(renewals) != 0 {
			t.Fatalf("renewals %+v before the first was due", renewals)
		}
	})
}

// TestSlowRenewalsKeepTheLease: renewals answered 700 ms after they are
// sent (a slow link: more than ttl/6 of a 3 s lease, well within its
// trust window) keep the lease on one stream once the client has seen how
// long they take; a stream is presumed dead only past the round trips it
// has shown.
func TestSlowRenewalsKeepTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		m := fc.members["a:1"]
		m.set(func(m *fakeMember) { m.kaDelay = 700 * time.Millisecond })
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "slow/1", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lease lost on a slow link: %v", l.Err())
		}
		var streams, renewals int
		m.set(func(m *fakeMember) { streams, renewals = m.streams, len(m.kaLog) })
		if streams > 2 || renewals < 25 {
			t.Fatalf("%d streams and %d renewals in 30 s, want at most 2 streams (the first renewal may be presumed lost) and a renewal a second", streams, renewals)
		}
		c.Close()
	})
}
