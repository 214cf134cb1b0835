package tenure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestErrorMappingEveryReason(t *testing.T) {
	t.Parallel()
	all := []*Error{
		ErrInvalidArgument, ErrTTLOutOfRange, ErrLeaseHeld, ErrLeaseNotFound,
		ErrLeaseExpired, ErrLeaseTerminal, ErrNotHolder, ErrRenewalDoesNotExtend,
		ErrRenewalLimitExceeded, ErrLifetimeExceeded, ErrLeaseViolation,
		ErrStaleEpoch, ErrFutureEpoch, ErrQuotaExceeded, ErrUnauthenticated,
		ErrPermissionDenied, ErrNotLeader, ErrOutcomeUnknown, ErrBudgetExhausted,
		ErrScopeViolation, ErrTaskNotFound, ErrTaskNotLeased, ErrPieceNotLeased,
		ErrPoolNotFound, ErrUnavailable, ErrDeadlineExceeded, ErrCanceled,
	}
	if len(sentinels) != len(all) {
		t.Fatalf("table has %d reasons, want %d", len(sentinels), len(all))
	}
	for _, s := range all {
		t.Run(string(s.Reason), func(t *testing.T) {
			t.Parallel()
			md := map[string]string{"field": "ttl"}
			ce := tenureError(s.Code, s.Reason, md, "something happened")
			err := fromConnect(fmt.Errorf("wrapped: %w", ce))
			if !errors.Is(err, s) {
				t.Fatalf("errors.Is(%v, %v) = false", err, s)
			}
			for _, other := range all {
				if other != s && errors.Is(err, other) {
					t.Errorf("also matches %v", other.Reason)
				}
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("errors.As *Error failed for %T", err)
			}
			if e.Reason != s.Reason || e.Code != s.Code || e.Metadata["field"] != "ttl" {
				t.Errorf("Error = %+v", e)
			}
			if want := string(s.Reason) + ": something happened"; e.Error() != want {
				t.Errorf("message %q, want %q", e.Error(), want)
			}
			var back *connect.Error
			if !errors.As(err, &back) || back != ce {
				t.Error("the *connect.Error is not reachable with errors.As")
			}
			if ReasonOf(err) != s.Reason {
				t.Errorf("ReasonOf = %q", ReasonOf(err))
			}
			if Sentinel(s.Reason) != s {
				t.Errorf("Sentinel(%s) = %v", s.Reason, Sentinel(s.Reason))
			}
		})
	}
}

func TestHeldErrorFromMetadata(t *testing.T) {
	t.Parallel()
	ce := tenureError(connect.CodeFailedPrecondition, ReasonLeaseHeld, map[string]string{
		"namespace":    "team-a",
		"resource":     "orders/42",
		"lease_id":     "01JABC",
		"holder":       "w1",
		"fence":        "17",
		"mode":         "SHARED",
		"remaining_ms": "41200",
		"waiters":      "3",
		"wait_ended":   "true",
	}, "orders/42 is held by lease 01JABC (holder w1, fence 17, 41.2s left)")
	err := fromConnect(ce)
	if !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("not ErrLeaseHeld: %v", err)
	}
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("errors.As HeldError failed for %T", err)
	}
	want := HeldError{Namespace: "team-a", Resource: "orders/42", LeaseID: "01JABC", Holder: "w1", Fence: 17,
		Mode: Shared, Remaining: 41200 * time.Millisecond, Waiters: 3, WaitEnded: true}
	got := *held
	got.Err = nil
	if got != want {
		t.Errorf("HeldError = %+v\nwant        %+v", got, want)
	}
	if held.Error() != "LEASE_HELD: orders/42 is held by lease 01JABC (holder w1, fence 17, 41.2s left)" {
		t.Errorf("message %q", held.Error())
	}
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonLeaseHeld {
		t.Error("the *Error is not reachable from a HeldError")
	}
}

func TestFromConnectLeavesOtherErrorsAlone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
	}{
		{"plain", io.ErrUnexpectedEOF},
		{"connect without detail", connect.NewError(connect.CodeUnavailable, errors.New("no route"))},
		{"context", context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := fromConnect(tt.err); got != tt.err {
				t.Errorf("fromConnect changed %v into %v", tt.err, got)
			}
		})
	}
	if fromConnect(nil) != nil {
		t.Error("fromConnect(nil) != nil")
	}
	unknown := fromConnect(tenureError(connect.CodeUnknown, "SOMETHING_NEW", nil, "from a newer server"))
	var e *Error
	if !errors.As(unknown, &e) || e.Reason != "SOMETHING_NEW" {
		t.Errorf("an unknown reason should still be an *Error: %v", unknown)
	}
}

func TestLostError(t *testing.T) {
	t.Parallel()
	cause := fromConnect(tenureError(connect.CodeFailedPrecondition, ReasonLeaseTerminal, nil, "lease L1 was revoked"))
	err := error(&LostError{LeaseID: "L1", Resource: "orders/42", Cause: cause})
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrLeaseTerminal) || errors.Is(err, ErrReleased) {
		t.Errorf("LostError matching is wrong: %v", err)
	}
	if ReasonOf(err) != ReasonLeaseTerminal {
		t.Errorf("ReasonOf = %q", ReasonOf(err))
	}
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	notLeader := fromConnect(tenureError(connect.CodeUnavailable, ReasonNotLeader, map[string]string{"leader": "b:1"}, "x"))
	unknown := fromConnect(tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, nil, "x"))
	held := fromConnect(tenureError(connect.CodeFailedPrecondition, ReasonLeaseHeld, nil, "x"))
	shutting := fromConnect(tenureError(connect.CodeUnavailable, ReasonUnavailable, nil, "the node is shutting down; nothing was proposed"))
	dial := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "dial", Err: errors.New("refused")})
	broke := connect.NewError(connect.CodeUnavailable, io.ErrUnexpectedEOF)
	// What connect-go makes of a connection the server reset mid-call.
	reset := fromConnect(connect.NewError(connect.CodeCanceled, &net.OpError{Op: "read", Net: "tcp",
		Err: os.NewSyscallError("read", syscall.ECONNRESET)}))
	tests := []struct {
		name                   string
		err                    error
		read, write, idempoten bool
		unknownOutcome         bool
	}{
		{"NOT_LEADER", notLeader, true, true, true, false},
		{"UNAVAILABLE", shutting, true, true, true, false},
		{"OUTCOME_UNKNOWN", unknown, true, false, true, true},
		{"dial failure", dial, true, true, true, false},
		{"broken connection", broke, true, false, true, true},
		{"connection reset", reset, true, false, true, true},
		{"canceled by the caller", connect.NewError(connect.CodeCanceled, context.Canceled), false, false, false, true},
		{"LEASE_HELD", held, false, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := retryable(readCall, tt.err); got != tt.read {
				t.Errorf("read: %v", got)
			}
			if got := retryable(writeCall, tt.err); got != tt.write {
				t.Errorf("write: %v", got)
			}
			if got := retryable(idempotentCall, tt.err); got != tt.idempoten {
				t.Errorf("idempotent: %v", got)
			}
			if got := outcomeUnknown(tt.err); got != tt.unknownOutcome {
				t.Errorf("outcomeUnknown: %v", got)
			}
		})
	}
	if leaderHint(notLeader) != "b:1" {
		t.Errorf("leaderHint = %q", leaderHint(notLeader))
	}
	// A follower that cut off a forwarded write names the new leader.
	moved := fromConnect(tenureError(connect.CodeUnavailable, ReasonOutcomeUnknown, map[string]string{"leader": "c:1"}, "x"))
	if leaderHint(moved) != "c:1" || leaderHint(unknown) != "" {
		t.Errorf("leaderHint of OUTCOME_UNKNOWN = %q, %q", leaderHint(moved), leaderHint(unknown))
	}
}

func TestSafetyMargin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fixed time.Duration
		ttl   time.Duration
		want  time.Duration
	}{
		{"floor", 0, 3 * time.Second, 500 * time.Millisecond},
		{"ten percent", 0, time.Minute, 6 * time.Second},
		{"capped at half the ttl", 0, 800 * time.Millisecond, 400 * time.Millisecond},
		{"fixed", 2 * time.Second, time.Minute, 2 * time.Second},
		{"fixed capped", 2 * time.Second, 3 * time.Second, 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := defaultConfig()
			cfg.safetyMargin = tt.fixed
			if got := cfg.marginFor(tt.ttl); got != tt.want {
				t.Errorf("marginFor(%v) = %v, want %v", tt.ttl, got, tt.want)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		endpoints []string
		opts      []Option
	}{
		{"no endpoints", nil, nil},
		{"empty endpoint", []string{" "}, nil},
		{"empty holder", []string{"a:1"}, []Option{WithHolder("")}},
		{"long holder", []string{"a:1"}, []Option{WithHolder(string(make([]byte, 129)))}},
		{"negative margin", []string{"a:1"}, []Option{WithSafetyMargin(-time.Second)}},
		{"empty namespace", []string{"a:1"}, []Option{WithNamespace("")}},
		{"two endpoints in one", []string{"127.0.0.1:7070,127.0.0.1:7071"}, nil},
		{"not a host", []string{"not a host"}, nil},
		{"no port", []string{"127.0.0.1"}, nil},
		{"port out of range", []string{"127.0.0.1:70000"}, nil},
		{"other scheme", []string{"ftp://a:1"}, nil},
		{"path", []string{"http://a:1/api"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if c, err := New(tt.endpoints, tt.opts...); err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
		})
	}
	c, err := New([]string{"10.0.0.1:7070", "http://10.0.0.2:7070/", "10.0.0.1:7070"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Endpoints(); len(got) != 2 || got[0] != "http://10.0.0.1:7070" || got[1] != "http://10.0.0.2:7070" {
		t.Errorf("Endpoints = %v", got)
	}
	if c.Holder() == "" || c.Namespace() != "default" {
		t.Errorf("holder %q namespace %q", c.Holder(), c.Namespace())
	}
}

func TestParseError(t *testing.T) {
	t.Parallel()
	ce := tenureError(connect.CodeNotFound, ReasonLeaseNotFound, nil, "lease x is unknown")
	err := ParseError(ce)
	if !errors.Is(err, ErrLeaseNotFound) || err.Error() != "LEASE_NOT_FOUND: lease x is unknown" {
		t.Fatalf("ParseError = %v", err)
	}
	held := ParseError(tenureError(connect.CodeFailedPrecondition, ReasonLeaseHeld, map[string]string{"holder": "w1"}, "r is held"))
	var he *HeldError
	if !errors.As(held, &he) || he.Holder != "w1" {
		t.Fatalf("ParseError(LEASE_HELD) = %#v", held)
	}
	plain := connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	if got := ParseError(plain); got != error(plain) {
		t.Fatalf("ParseError of a plain connect error = %v", got)
	}
	if ParseError(nil) != nil {
		t.Fatal("ParseError(nil) != nil")
	}
}

func TestErrCompacted(t *testing.T) {
	compacted := &Error{Reason: ReasonInvalidArgument, Metadata: map[string]string{"field": "after_index", "oldest_index": "238708"}}
	if !errors.Is(compacted, ErrCompacted) || !errors.Is(compacted, ErrInvalidArgument) {
		t.Error("a refused watch index is not ErrCompacted (and INVALID_ARGUMENT)")
	}
	ahead := &Error{Reason: ReasonInvalidArgument, Metadata: map[string]string{"field": "after_index", "head_index": "12"}}
	other := &Error{Reason: ReasonInvalidArgument, Metadata: map[string]string{"field": "ttl"}}
	for _, e := range []*Error{ahead, other, ErrLeaseHeld} {
		if errors.Is(e, ErrCompacted) {
			t.Errorf("%+v is ErrCompacted", e)
		}
	}
}

// A Lock whose context ends while no member can be reached says why, not
// only that the context ended (found from outside: a Lock against a wrong
// address ended with a bare "context deadline exceeded").
func TestLockEndedSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err = NewMutex(c, "why/lock").Lock(ctx)
	t.Logf("Lock ended after %v: %v", time.Since(start), err)
	// Nothing was sent: no grant can have been left behind for Close to
	// give back (it spent its whole timeout trying).
	c.mu.Lock()
	strays := len(c.strays)
	c.mu.Unlock()
	if strays != 0 {
		t.Fatalf("an Acquire refused at the dial left %d possible strays", strays)
	}
	if !errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Lock against a closed port: %v", err)
	}
}
