package tenure

// Every test here runs in a testing/synctest bubble: time.Sleep advances
// fake time deterministically; nothing waits on the real clock.

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

func TestAcquireHeldReturnsHeldError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c1 := fc.client([]string{"a:1"})
		c2 := fc.client([]string{"a:1"}, WithHolder("other"))
		l, err := c1.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		_, err = c2.Acquire(t.Context(), "orders/42")
		if !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("err = %v, want ErrLeaseHeld", err)
		}
		var held *HeldError
		if !errors.As(err, &held) {
			t.Fatalf("%T is not a *HeldError", err)
		}
		if held.LeaseID != l.ID() || held.Holder != "tester" || held.Fence != l.Fence() ||
			held.Resource != "orders/42" || held.Remaining != 29*time.Second {
			t.Errorf("HeldError = %+v", held)
		}
	})
}

// TestStaleReads: a read made with a StaleReads context asks for a stale
// read; others do not.
func TestStaleReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, ctx := range []context.Context{t.Context(), StaleReads(t.Context())} {
			if _, err := c.Get(ctx, l.ID()); err != nil {
				t.Fatal(err)
			}
		}
		m := fc.members["a:1"]
		m.mu.Lock()
		defer m.mu.Unlock()
		if !slices.Equal(m.consistency, []string{"", "stale"}) {
			t.Errorf("Tenure-Consistency of the two Gets: %q", m.consistency)
		}
	})
}

func TestAcquireLeaseAccessors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"}, WithNamespace("team-a"))
		l, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second), Shared, Namespace("team-b"), RequestCertificate())
		if err != nil {
			t.Fatal(err)
		}
		if l.Namespace() != "team-b" || l.Resource() != "orders/42" || l.Holder() != "tester" ||
			l.Mode() != Shared || l.TTL() != 30*time.Second || l.Fence() != 1 || l.SafetyMargin() != 3*time.Second {
			t.Errorf("lease = %v %v %v %v %v %v %v", l.Namespace(), l.Resource(), l.Holder(), l.Mode(), l.TTL(), l.Fence(), l.SafetyMargin())
		}
		if !l.ExpiresAt().Equal(time.Now().Add(30 * time.Second)) {
			t.Errorf("ExpiresAt = %v", l.ExpiresAt())
		}
		cert := l.Certificate()
		if cert == nil || cert.KeyID != "k1" || cert.Claim.LeaseID != l.ID() || cert.Claim.Fence != l.Fence() ||
			!cert.Claim.ExpiresAt.Equal(l.ExpiresAt()) || len(cert.Signature) != 64 {
			t.Errorf("certificate = %+v", cert)
		}
		pb := l.Proto()
		pb.Holder = "changed"
		if l.Proto().GetHolder() != "tester" {
			t.Error("Proto does not return a copy")
		}
		if l.Err() != nil || isDone(l) {
			t.Error("fresh lease is done")
		}
	})
}

func TestAcquireFollowsNotLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1", "d:1")
		fc.members["a:1"].set(func(m *fakeMember) {
			m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
				return false, tenureError(connect.CodeUnavailable, ReasonNotLeader, map[string]string{"leader": "d:1", "leader_id": "n4"}, "not the leader")
			}
		})
		// d is not among the client's endpoints: it learns of it.
		c := fc.client([]string{"a:1", "b:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if fc.members["b:1"].acquireCount() != 0 || fc.members["d:1"].acquireCount() != 1 {
			t.Errorf("acquires: b=%d d=%d, want the hint followed to d",
				fc.members["b:1"].acquireCount(), fc.members["d:1"].acquireCount())
		}
		if eps := c.Endpoints(); len(eps) != 3 || eps[2] != "http://d:1" {
			t.Errorf("Endpoints = %v", eps)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := len(fc.members["d:1"].keepalives()); n != 2 {
			t.Errorf("%d renewals on the leader d, want 2", n)
		}
		if isDone(l) {
			t.Error(l.Err())
		}
	})
}

func TestAcquireAdoptsOwnLeaseAfterUnknownOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		// a applies the grant, then loses the answer.
		fc.members["a:1"].set(func(m *fakeMember) {
			m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
				return true, tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "commit broke off")
			}
		})
		c := fc.client([]string{"a:1", "b:1"})
		t0 := time.Now()
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatalf("Acquire = %v, want the lease granted to the lost attempt", err)
		}
		if l.ID() != "L001" || l.Fence() != 1 {
			t.Errorf("adopted lease %s fence %d, want L001 fence 1", l.ID(), l.Fence())
		}
		if got, want := l.TrustedUntil(), t0.Add(2500*time.Millisecond); !got.Equal(want) {
			t.Errorf("trusted until %v, want from the first attempt's send time %v", got, want)
		}
		fc.reg.mu.Lock()
		n := len(fc.reg.leases)
		fc.reg.mu.Unlock()
		if n != 1 {
			t.Errorf("%d leases in the registry, want 1", n)
		}
	})
}

func TestAcquireDoesNotAdoptOthersLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		other := fc.client([]string{"b:1"}, WithHolder("other"))
		if _, err := other.Acquire(t.Context(), "orders/42", TTL(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		fc.members["a:1"].set(func(m *fakeMember) {
			m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
				return false, tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "commit broke off")
			}
		})
		c := fc.client([]string{"a:1", "b:1"})
		_, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		var held *HeldError
		if !errors.As(err, &held) || held.Holder != "other" {
			t.Fatalf("err = %v, want LEASE_HELD by other", err)
		}
	})
}

func TestAcquireDoesNotAdoptLeaseItAlreadyHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"})
		first, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		fc.members["a:1"].set(func(m *fakeMember) {
			m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
				return false, tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "commit broke off")
			}
		})
		_, err = c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		var held *HeldError
		if !errors.As(err, &held) || held.LeaseID != first.ID() {
			t.Fatalf("err = %v, want LEASE_HELD naming the lease already held", err)
		}
	})
}

func TestWriteNotRetriedOnUnknownOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"})
		tests := []struct {
			name string
			kind callKind
			err  error
			want int
		}{
			{"write OUTCOME_UNKNOWN", writeCall, tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "x"), 1},
			{"read OUTCOME_UNKNOWN", readCall, tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "x"), 0},
			{"write NOT_LEADER", writeCall, tenureError(connect.CodeUnavailable, ReasonNotLeader, nil, "x"), 0},
			{"write LEASE_VIOLATION", writeCall, tenureError(connect.CodeFailedPrecondition, ReasonLeaseViolation, nil, "x"), 1},
		}
		for _, tt := range tests {
			n := 0
			start := time.Now()
			err := c.call(t.Context(), tt.kind, func(context.Context, *endpoint) error {
				n++
				return tt.err
			})
			if tt.want == 1 && n != 1 {
				t.Errorf("%s: %d attempts, want 1", tt.name, n)
			}
			if tt.want == 0 && n < 3 {
				t.Errorf("%s: %d attempts, want retries", tt.name, n)
			}
			if tt.want == 0 && time.Since(start) < DefaultRetryBudget {
				t.Errorf("%s: gave up after %v, before the retry budget", tt.name, time.Since(start))
			}
			if err == nil || errors.Is(err, context.Canceled) {
				t.Errorf("%s: err = %v", tt.name, err)
			}
		}
	})
}

func TestTrustNotExtendedByUnmatchedResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		t0 := time.Now()
		l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// The member renews the lease but answers with a request id the
		// client never sent: the send time is unknown, so no trust.
		fc.members["a:1"].set(func(m *fakeMember) { m.kaWrongID = true })
		time.Sleep(2500*time.Millisecond - time.Millisecond)
		synctest.Wait()
		if isDone(l) {
			t.Fatalf("lost early: %v", l.Err())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !isDone(l) || !errors.Is(l.Err(), ErrTrustWindowPassed) {
			t.Fatalf("Done=%v Err=%v: a response without a known send time extended trust", isDone(l), l.Err())
		}
		if !l.TrustedUntil().Equal(t0.Add(2500 * time.Millisecond)) {
			t.Errorf("TrustedUntil moved to %v", l.TrustedUntil().Sub(t0))
		}
	})
}

func TestMutexTryLockWithFake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c1 := fc.client([]string{"a:1"})
		c2 := fc.client([]string{"a:1"}, WithHolder("other"))
		m1 := NewMutex(c1, "locks/x", TTL(3*time.Second))
		m2 := NewMutex(c2, "locks/x", TTL(3*time.Second))
		if ok, err := m1.TryLock(t.Context()); !ok || err != nil {
			t.Fatalf("m1.TryLock = %v, %v", ok, err)
		}
		if ok, err := m1.TryLock(t.Context()); ok || err != nil {
			t.Fatalf("second TryLock on a locked Mutex = %v, %v", ok, err)
		}
		if ok, err := m2.TryLock(t.Context()); ok || err != nil {
			t.Fatalf("m2.TryLock while m1 holds = %v, %v", ok, err)
		}
		if m1.Lease() == nil || m2.Lease() != nil {
			t.Fatal("Lease() wrong")
		}
		time.Sleep(10 * time.Second) // held across several ttls by heartbeats
		if err := m1.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := m1.Unlock(t.Context()); err == nil {
			t.Error("Unlock of an unlocked Mutex succeeded")
		}
		if ok, err := m2.TryLock(t.Context()); !ok || err != nil {
			t.Fatalf("m2.TryLock after Unlock = %v, %v", ok, err)
		}
	})
}

func TestBearerTokenOnUnaryAndStream(t *testing.T) {
	for _, grpc := range []bool{false, true} {
		name := "connect"
		if grpc {
			name = "grpc"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fc := setup(t, "a:1")
				opts := []Option{WithToken("s3cret")}
				if grpc {
					opts = append(opts, WithGRPC())
				}
				c := fc.client([]string{"a:1"}, opts...)
				l, err := c.Acquire(t.Context(), "orders/42", TTL(3*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Second)
				synctest.Wait()
				if isDone(l) {
					t.Fatal(l.Err())
				}
				got := fc.members["a:1"].auth()
				if len(got) != 2 || got[0] != "Bearer s3cret" || got[1] != "Bearer s3cret" {
					t.Errorf("Authorization headers (acquire, keepalive) = %q", got)
				}
			})
		})
	}
}

func TestDefaultHolder(t *testing.T) {
	t.Parallel()
	// Two Clients of one process never share a default holder (one would
	// take the other's leases for its own after an unknown outcome).
	a, b := defaultHolder(), defaultHolder()
	base, _, _ := strings.Cut(a, "#")
	if !strings.Contains(a, "@") || !strings.HasSuffix(base, ":"+strconv.Itoa(os.Getpid())) || a == b ||
		!strings.HasPrefix(b, base+"#") {
		t.Errorf("default holders %q and %q, want user@host:pid, each Client its own", a, b)
	}
}

// TestSharedHolderLeavesStraysAlone: with a holder other Clients may
// share, an Acquire never releases or adopts a lease of the holder that
// it cannot tell from another Client's: the stray and the lost attempt's
// grant are left to expire (a Client sharing the holder may hold them).
func TestSharedHolderLeavesStraysAlone(t *testing.T) {
	for _, opt := range []Option{WithSharedHolder(), WithToken("shared-token")} {
		synctest.Test(t, func(t *testing.T) {
			fc := setup(t, "a:1", "b:1")
			c := fc.client([]string{"a:1"}, WithoutPipeline(), opt)
			leaveStray(t, fc, c, "orders/42")
			_, err := c.Acquire(t.Context(), "orders/42", TTL(time.Minute))
			var held *HeldError
			if !errors.As(err, &held) || held.Holder != "tester" {
				t.Fatalf("the next Acquire: %v, want LEASE_HELD naming the holder", err)
			}
			if rel := fc.members["a:1"].releaseCount(); rel != 0 {
				t.Fatalf("released %d leases; want none", rel)
			}
			// Nor is a lost attempt's grant adopted.
			fc.members["b:1"].set(func(m *fakeMember) {
				m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
					return true, tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "commit broke off")
				}
			})
			c2 := fc.client([]string{"b:1", "a:1"}, opt)
			if _, err := c2.Acquire(t.Context(), "orders/43", TTL(3*time.Second)); !errors.As(err, &held) || held.Holder != "tester" {
				t.Fatalf("Acquire after an unknown outcome: %v, want LEASE_HELD naming the holder", err)
			}
		})
	}
}

// TestEndpointWithoutPipelineGetsUnaryCalls: the fake serves no Pipeline;
// the first call finds out (nothing ran), is made again as a unary call,
// and so are the calls after it.
func TestEndpointWithoutPipelineGetsUnaryCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/1", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ep, _ := c.pick()
		ep.leasePipe.mu.Lock()
		off := ep.leasePipe.off
		ep.leasePipe.mu.Unlock()
		if !off {
			t.Error("the endpoint still counts as serving Pipeline")
		}
		if _, err := c.Acquire(t.Context(), "orders/2"); err != nil {
			t.Fatal(err)
		}
		if n := fc.members["a:1"].acquireCount(); n != 2 {
			t.Errorf("%d unary Acquire calls reached the fake, want 2 (one per Acquire)", n)
		}
		if err := l.Release(t.Context(), ReleaseCompleted); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDeadlineWhileRetrying: a call whose deadline passes while it retries
// an unreachable member returns the last attempt's error (what went
// wrong), matching context.DeadlineExceeded too.
func TestDeadlineWhileRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		fc.stop("a:1")
		c := fc.client([]string{"a:1"})
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := c.Get(ctx, "L1")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("Get past its deadline: %v", err)
		}
	})
}

// TestNoMemberReachedIsUnavailable: a call that reached no member for its
// whole retry budget is UNAVAILABLE (errors.Is(err, ErrUnavailable),
// ReasonOf), with the dial's error as its cause; a write is not called
// OUTCOME_UNKNOWN, as nothing was sent.
func TestNoMemberReachedIsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		fc.stop("a:1")
		fc.stop("b:1")
		c := fc.client([]string{"a:1", "b:1"})
		_, rerr := c.Get(t.Context(), "L1")
		_, werr := c.Acquire(t.Context(), "r", TTL(time.Minute))
		for name, err := range map[string]error{"Get": rerr, "Acquire": werr} {
			var op *net.OpError
			if !errors.Is(err, ErrUnavailable) || ReasonOf(err) != ReasonUnavailable || !errors.As(err, &op) ||
				errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("%s with no member up: %v; want UNAVAILABLE caused by the refused dial", name, err)
			}
		}
	})
}

// TestAcquireRefusesNegativeOptions: a negative ttl or wait is refused
// before anything is sent, as the registrar would refuse it.
func TestAcquireRefusesNegativeOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		for _, opt := range []AcquireOption{TTL(-time.Second), Wait(-time.Second)} {
			if _, err := c.Acquire(t.Context(), "orders/42", opt); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("Acquire with %v: %v, want INVALID_ARGUMENT", opt, err)
			}
		}
		if n := fc.members["a:1"].acquireCount(); n != 0 {
			t.Errorf("%d acquires sent", n)
		}
	})
}

// TestDeadlineWithASilentMember: a call whose deadline passes while its
// member says nothing names the member it waited for.
func TestDeadlineWithASilentMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		fc.members["a:1"].set(func(m *fakeMember) { m.acquireDelay = 10 * time.Second })
		c := fc.client([]string{"a:1"}, WithoutPipeline())
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := c.Acquire(ctx, "orders/42")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for http://a:1") {
			t.Errorf("Acquire past its deadline: %v", err)
		}
		time.Sleep(10 * time.Second) // fake time: the member's handler ends
		synctest.Wait()
	})
}

// TestBrokenWriteIsOutcomeUnknown: a write whose connection broke after
// the request went out (a member killed mid-call) is ErrOutcomeUnknown,
// as the server's own OUTCOME_UNKNOWN is, and still the transport's error
// underneath; one that never left (a refused dial) is retried, and the
// error of a read or an idempotent write (retried) stays as it is.
func TestBrokenWriteIsOutcomeUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"})
		reset := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
		for _, kind := range []callKind{writeCall, idempotentCall, readCall} {
			n := 0
			err := c.call(t.Context(), kind, func(context.Context, *endpoint) error {
				n++
				return reset
			})
			var ce *connect.Error
			if !errors.As(err, &ce) || !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("kind %d: %v does not keep the transport's error", kind, err)
			}
			if got := errors.Is(err, ErrOutcomeUnknown); got != (kind == writeCall) {
				t.Errorf("kind %d: errors.Is(%v, ErrOutcomeUnknown) = %v", kind, err, got)
			}
			if kind == writeCall && (n != 1 || !strings.HasPrefix(err.Error(), "OUTCOME_UNKNOWN: ")) {
				t.Errorf("write: %d attempts, err %q; want 1, OUTCOME_UNKNOWN first", n, err)
			}
		}
		n := 0
		refused := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
		err := c.call(t.Context(), writeCall, func(context.Context, *endpoint) error {
			if n++; n < 3 {
				return refused
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Errorf("a write whose dial was refused: %v after %d attempts, want retried to success", err, n)
		}
	})
}

// TestAcquireDoesNotAdoptLeaseBeingReleased: an Acquire whose first
// attempt's outcome was unknown meets LEASE_HELD naming a lease of this
// Client's holder that another goroutine is releasing (gone from the
// Client's set, its release not yet applied). That lease is not the one
// granted to the lost attempt: adopting it would give two goroutines the
// same lease, one of them about to release it.
func TestAcquireDoesNotAdoptLeaseBeingReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"})
		other, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fc.members {
			m.set(func(m *fakeMember) { m.releaseDelay = time.Second })
		}
		released := make(chan error, 1)
		go func() { released <- other.Release(context.Background(), ReleaseVoluntary) }()
		synctest.Wait() // the release is on its way, the lease out of the Client's set
		fc.members["a:1"].set(func(m *fakeMember) {
			m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
				return false, tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "commit broke off")
			}
		})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		var held *HeldError
		if err == nil || !errors.As(err, &held) || held.LeaseID != other.ID() {
			t.Fatalf("Acquire = %v, %v; want LEASE_HELD naming the lease being released, %s", l, err, other.ID())
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}
	})
}

// TestLongWaitThenFailoverRetries: an Acquire that waited in the
// registrar's queue for longer than the retry budget, and then lost its
// leader (the connection broke), still retries and is granted: the budget
// counts from the first failure (a Mutex.Lock on a standby lost to a
// routine failover otherwise).
func TestLongWaitThenFailoverRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1", "b:1")
		c := fc.client([]string{"a:1", "b:1"}, WithoutPipeline())
		const wait, queued = time.Minute, DefaultRetryBudget + 5*time.Second
		fc.members["a:1"].set(func(m *fakeMember) {
			m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) {
				time.Sleep(queued) // queued, then the leader dies
				return false, connect.NewError(connect.CodeUnavailable, errors.New("unexpected EOF"))
			}
		})
		var retried *tenurev1.AcquireRequest
		fc.members["b:1"].set(func(m *fakeMember) {
			m.acquireHook = func(req *tenurev1.AcquireRequest) (bool, error) { retried = req; return false, nil }
		})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second), Wait(wait))
		if err != nil {
			t.Fatalf("Acquire after a long wait and a failover: %v", err)
		}
		if got := fc.members["b:1"].acquireCount(); got != 1 {
			t.Errorf("%d acquires on the other member, want the retry", got)
		}
		// The retry waits for what is left of the wait.
		if got := retried.GetWait().AsDuration(); got <= 0 || got > wait-queued {
			t.Errorf("the retry waits %v, want at most the %v left", got, wait-queued)
		}
		_ = l.Release(t.Context(), ReleaseVoluntary)
	})
}

// TestAcquireOutcomeUnknownAfterRetries: an Acquire whose attempts all
// went unanswered fails with OUTCOME_UNKNOWN (with or without the
// pipeline); a grant that comes after it gave up is released by this
// Client's next Acquire of the resource, which then gets it.
func TestAcquireOutcomeUnknownAfterRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"}, WithoutPipeline(), WithRetryBudget(500*time.Millisecond))
		lost := connect.NewError(connect.CodeUnavailable, errors.New("read: connection reset by peer"))
		fc.members["a:1"].set(func(m *fakeMember) {
			m.acquireHook = func(*tenurev1.AcquireRequest) (bool, error) { return false, lost }
		})
		_, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Acquire = %v, want ErrOutcomeUnknown", err)
		}
		// The registrar grants the lost request after all.
		late, err := fc.reg.acquire(&tenurev1.AcquireRequest{Namespace: "default", Resource: "orders/42", Holder: "tester", Ttl: durationpb.New(30 * time.Second)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		fc.members["a:1"].set(func(m *fakeMember) { m.acquireHook = nil })
		l, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		if err != nil {
			t.Fatalf("the next Acquire: %v", err)
		}
		if l.ID() == late.GetLeaseId() {
			t.Fatalf("the next Acquire adopted the late grant %s instead of releasing it", late.GetLeaseId())
		}
		if rel := fc.members["a:1"].releaseCount(); rel != 1 {
			t.Errorf("%d releases, want the late grant's", rel)
		}
	})
}

// TestReleaseWithEndedContext: a Release whose ctx has already ended
// still gets the lease released (in the background), instead of leaving
// the resource taken, unrenewed, until its ttl runs out.
func TestReleaseWithEndedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := setup(t, "a:1")
		c := fc.client([]string{"a:1"})
		l, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := l.Release(ctx, ReleaseVoluntary); !errors.Is(err, context.Canceled) {
			t.Fatalf("Release = %v, want context.Canceled", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		pb, err := c.Get(t.Context(), l.ID())
		if err != nil || pb.GetState() != tenurev1.State_STATE_RELEASED {
			t.Fatalf("lease after a cancelled Release: %v, %v; want released", pb.GetState(), err)
		}
		if _, err := c.Acquire(t.Context(), "orders/42", TTL(30*time.Second)); err != nil {
			t.Fatalf("Acquire after: %v", err)
		}
	})
}

// TestServerDeadlineMatchesContext: a DEADLINE_EXCEEDED or CANCELED from
// the server matches the context error it stands for.
func TestServerDeadlineMatchesContext(t *testing.T) {
	for _, tt := range []struct {
		reason Reason
		code   connect.Code
		target error
	}{{ReasonDeadlineExceeded, connect.CodeDeadlineExceeded, context.DeadlineExceeded}, {ReasonCanceled, connect.CodeCanceled, context.Canceled}} {
		err := fromConnect(tenureError(tt.code, tt.reason, nil, "x"))
		if !errors.Is(err, tt.target) || !errors.Is(unknownOutcome(err), tt.target) {
			t.Errorf("%s does not match %v", tt.reason, tt.target)
		}
		if errors.Is(err, ErrLeaseHeld) || errors.Is(fromConnect(tenureError(connect.CodeFailedPrecondition, ReasonLeaseHeld, nil, "x")), tt.target) {
			t.Errorf("%s: unrelated errors match", tt.reason)
		}
	}
}
