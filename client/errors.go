package tenure

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/tenurehq/tenure/internal/wire"
)

// Reason is the machine-readable code of a Tenure error (API.md, "Errors").
type Reason string

// Reasons answered by the registrar.
const (
	ReasonInvalidArgument      Reason = "INVALID_ARGUMENT"
	ReasonTTLOutOfRange        Reason = "TTL_OUT_OF_RANGE"
	ReasonLeaseHeld            Reason = "LEASE_HELD"
	ReasonLeaseNotFound        Reason = "LEASE_NOT_FOUND"
	ReasonLeaseExpired         Reason = "LEASE_EXPIRED"
	ReasonLeaseTerminal        Reason = "LEASE_TERMINAL"
	ReasonNotHolder            Reason = "NOT_HOLDER"
	ReasonRenewalDoesNotExtend Reason = "RENEWAL_DOES_NOT_EXTEND"
	ReasonRenewalLimitExceeded Reason = "RENEWAL_LIMIT_EXCEEDED"
	ReasonLifetimeExceeded     Reason = "LIFETIME_EXCEEDED"
	ReasonLeaseViolation       Reason = "LEASE_VIOLATION"
	ReasonStaleEpoch           Reason = "STALE_EPOCH"
	ReasonFutureEpoch          Reason = "FUTURE_EPOCH"
	ReasonQuotaExceeded        Reason = "QUOTA_EXCEEDED"
	ReasonUnauthenticated      Reason = "UNAUTHENTICATED"
	ReasonPermissionDenied     Reason = "PERMISSION_DENIED"
	ReasonNotLeader            Reason = "NOT_LEADER"
	ReasonOutcomeUnknown       Reason = "OUTCOME_UNKNOWN"
	// ReasonUnavailable: the member could not take the call at all (it is
	// shutting down, or stopped) and nothing was proposed; the client
	// moves on to another member. A call that reached no member within its
	// retry budget (every dial refused) ends with it too, the dial's error
	// as its cause.
	ReasonUnavailable     Reason = "UNAVAILABLE"
	ReasonBudgetExhausted Reason = "BUDGET_EXHAUSTED"
	ReasonScopeViolation  Reason = "SCOPE_VIOLATION"
	ReasonTaskNotFound    Reason = "TASK_NOT_FOUND"
	ReasonTaskNotLeased   Reason = "TASK_NOT_LEASED"
	ReasonPieceNotLeased  Reason = "PIECE_NOT_LEASED"
	ReasonPoolNotFound    Reason = "POOL_NOT_FOUND"
	// ReasonDeadlineExceeded and ReasonCanceled: the server saw the call's
	// deadline pass, or the call cancelled, before it answered; a write
	// may or may not have been applied.
	ReasonDeadlineExceeded Reason = "DEADLINE_EXCEEDED"
	ReasonCanceled         Reason = "CANCELED"
)

// errorDomain is the ErrorInfo domain of Tenure's errors.
const errorDomain = "tenure"

// Error is an error answered by the registrar: its Reason, the message
// (which starts with the reason), the ErrorInfo metadata giving the context,
// and the Connect code. errors.Is(err, ErrX) holds for every error of X's
// reason; errors.As(err, &connectErr) reaches the *connect.Error.
type Error struct {
	Reason   Reason
	Message  string
	Metadata map[string]string
	Code     connect.Code

	cause error
}

// Error returns the message, or the reason for a sentinel.
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Reason)
	}
	return e.Message
}

// Is matches any *Error with the same reason, sentinels included. A
// DEADLINE_EXCEEDED or CANCELED from the server (the deadline the call
// carried passed there first, or the call was cancelled) also matches
// context.DeadlineExceeded or context.Canceled, as the call's own ctx
// ending would.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrCompacted:
		return e.Reason == ReasonInvalidArgument && e.Metadata["field"] == "after_index" && e.Metadata["oldest_index"] != ""
	case context.DeadlineExceeded:
		return e.Reason == ReasonDeadlineExceeded
	case context.Canceled:
		return e.Reason == ReasonCanceled
	}
	t, ok := target.(*Error)
	return ok && t != nil && t.Reason == e.Reason
}

// Unwrap returns the *connect.Error the Error was parsed from, if any.
func (e *Error) Unwrap() error { return e.cause }

// Sentinels, one per reason, for errors.Is. They carry no message or metadata.
var (
	ErrInvalidArgument      = &Error{Reason: ReasonInvalidArgument, Code: connect.CodeInvalidArgument}
	ErrTTLOutOfRange        = &Error{Reason: ReasonTTLOutOfRange, Code: connect.CodeInvalidArgument}
	ErrLeaseHeld            = &Error{Reason: ReasonLeaseHeld, Code: connect.CodeFailedPrecondition}
	ErrLeaseNotFound        = &Error{Reason: ReasonLeaseNotFound, Code: connect.CodeNotFound}
	ErrLeaseExpired         = &Error{Reason: ReasonLeaseExpired, Code: connect.CodeFailedPrecondition}
	ErrLeaseTerminal        = &Error{Reason: ReasonLeaseTerminal, Code: connect.CodeFailedPrecondition}
	ErrNotHolder            = &Error{Reason: ReasonNotHolder, Code: connect.CodePermissionDenied}
	ErrRenewalDoesNotExtend = &Error{Reason: ReasonRenewalDoesNotExtend, Code: connect.CodeFailedPrecondition}
	ErrRenewalLimitExceeded = &Error{Reason: ReasonRenewalLimitExceeded, Code: connect.CodeFailedPrecondition}
	ErrLifetimeExceeded     = &Error{Reason: ReasonLifetimeExceeded, Code: connect.CodeFailedPrecondition}
	ErrLeaseViolation       = &Error{Reason: ReasonLeaseViolation, Code: connect.CodeFailedPrecondition}
	ErrStaleEpoch           = &Error{Reason: ReasonStaleEpoch, Code: connect.CodeAborted}
	ErrFutureEpoch          = &Error{Reason: ReasonFutureEpoch, Code: connect.CodeAborted}
	ErrQuotaExceeded        = &Error{Reason: ReasonQuotaExceeded, Code: connect.CodeResourceExhausted}
	ErrUnauthenticated      = &Error{Reason: ReasonUnauthenticated, Code: connect.CodeUnauthenticated}
	ErrPermissionDenied     = &Error{Reason: ReasonPermissionDenied, Code: connect.CodePermissionDenied}
	ErrNotLeader            = &Error{Reason: ReasonNotLeader, Code: connect.CodeUnavailable}
	ErrOutcomeUnknown       = &Error{Reason: ReasonOutcomeUnknown, Code: connect.CodeUnavailable}
	ErrBudgetExhausted      = &Error{Reason: ReasonBudgetExhausted, Code: connect.CodeResourceExhausted}
	ErrScopeViolation       = &Error{Reason: ReasonScopeViolation, Code: connect.CodePermissionDenied}
	ErrTaskNotFound         = &Error{Reason: ReasonTaskNotFound, Code: connect.CodeNotFound}
	ErrTaskNotLeased        = &Error{Reason: ReasonTaskNotLeased, Code: connect.CodeFailedPrecondition}
	ErrPieceNotLeased       = &Error{Reason: ReasonPieceNotLeased, Code: connect.CodeFailedPrecondition}
	ErrPoolNotFound         = &Error{Reason: ReasonPoolNotFound, Code: connect.CodeNotFound}
	ErrUnavailable          = &Error{Reason: ReasonUnavailable, Code: connect.CodeUnavailable}
	ErrDeadlineExceeded     = &Error{Reason: ReasonDeadlineExceeded, Code: connect.CodeDeadlineExceeded}
	ErrCanceled             = &Error{Reason: ReasonCanceled, Code: connect.CodeCanceled}
)

// sentinels is the one table mapping reasons to sentinels (and so to the
// Connect code API.md gives each).
var sentinels = func() map[Reason]*Error {
	m := make(map[Reason]*Error)
	for _, e := range []*Error{
		ErrInvalidArgument, ErrTTLOutOfRange, ErrLeaseHeld, ErrLeaseNotFound,
		ErrLeaseExpired, ErrLeaseTerminal, ErrNotHolder, ErrRenewalDoesNotExtend,
		ErrRenewalLimitExceeded, ErrLifetimeExceeded, ErrLeaseViolation,
		ErrStaleEpoch, ErrFutureEpoch, ErrQuotaExceeded, ErrUnauthenticated,
		ErrPermissionDenied, ErrNotLeader, ErrOutcomeUnknown, ErrBudgetExhausted,
		ErrScopeViolation, ErrTaskNotFound, ErrTaskNotLeased, ErrPieceNotLeased,
		ErrPoolNotFound, ErrUnavailable, ErrDeadlineExceeded, ErrCanceled,
	} {
		m[e.Reason] = e
	}
	return m
}()

// Sentinel returns the sentinel of reason r, or nil for a reason this
// version of the client does not know (such an error is still an *Error).
func Sentinel(r Reason) *Error { return sentinels[r] }

// Errors of the client itself.
var (
	// ErrLeaseLost matches Lease.Err() once the lease was lost: revoked,
	// expired, refused on renewal, or its trust window passed without a
	// confirmed renewal. The *LostError says which.
	ErrLeaseLost = errors.New("tenure: lease lost")
	// ErrTrustWindowPassed is the cause of a LostError when no renewal was
	// confirmed in time; the registrar may still hold the lease for a little
	// longer, but the client can no longer prove it.
	ErrTrustWindowPassed = errors.New("tenure: trust window passed without a confirmed renewal")
	// ErrReleased is Lease.Err() after Release (or Close) released the lease.
	ErrReleased = errors.New("tenure: lease released")
	// ErrTransferred is Lease.Err() after Transfer handed the lease over.
	ErrTransferred = errors.New("tenure: lease transferred")
	// ErrClientClosed is returned by calls on a closed Client, and is the
	// cause of a LostError for leases Close could not release.
	ErrClientClosed = errors.New("tenure: client closed")
	// ErrNotLocked is returned by Mutex.Unlock when the Mutex is not
	// locked (never, or unlocked already).
	ErrNotLocked = errors.New("tenure: unlock of a Mutex that is not locked")
	// ErrNoLeader is returned by Election.Leader when no leader is elected.
	ErrNoLeader = errors.New("tenure: no leader elected")
	// ErrCompacted matches (errors.Is) a Watch refused because the events
	// after its index are no longer held by the member: neither in its
	// in-memory feed nor in its ledger files (pruned, or a member that
	// began from a snapshot; etcd's ErrCompacted): read the state again
	// and watch from the present. The *Error's Metadata["oldest_index"] is
	// the oldest event the member still holds.
	ErrCompacted = errors.New("tenure: the events after the watch's index were compacted")
)

// HeldError answers an Acquire of a busy resource: the lease in the way.
// errors.Is(err, ErrLeaseHeld) holds for it; errors.As reaches it and the
// underlying *Error.
type HeldError struct {
	Namespace string
	Resource  string
	LeaseID   string
	Holder    string
	Fence     uint64
	Mode      Mode
	// Remaining is the blocking lease's time left at the registrar.
	Remaining time.Duration
	// Waiters is the length of the resource's wait queue.
	Waiters int
	// WaitEnded is true when the request waited in the queue and its wait ran out.
	WaitEnded bool

	Err *Error
}

func (e *HeldError) Error() string { return e.Err.Error() }

// Unwrap returns the generic *Error (reason LEASE_HELD).
func (e *HeldError) Unwrap() error { return e.Err }

// LostError is Lease.Err() once a lease is lost. It matches ErrLeaseLost and
// unwraps to its Cause: the registrar's *Error (ErrLeaseExpired,
// ErrLeaseTerminal for a revoked lease, ErrRenewalLimitExceeded, …),
// ErrTrustWindowPassed, or ErrClientClosed.
type LostError struct {
	LeaseID  string
	Resource string
	// At is when the client decided the lease was lost (its clock).
	At    time.Time
	Cause error
}

func (e *LostError) Error() string {
	return "tenure: lease " + e.LeaseID + " on " + strconv.Quote(e.Resource) + " lost: " + e.Cause.Error()
}

// Is matches ErrLeaseLost.
func (e *LostError) Is(target error) bool { return target == ErrLeaseLost }

// Unwrap returns the cause.
func (e *LostError) Unwrap() error { return e.Cause }

// ReasonOf returns the reason of a Tenure error anywhere in err's chain, or "".
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// fromConnect turns a connect error carrying a Tenure ErrorInfo into an
// *Error (a *HeldError for LEASE_HELD). Other errors (transport failures,
// context errors) are returned unchanged.
func fromConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		info, ok := v.(*errdetails.ErrorInfo)
		if !ok || info.GetReason() == "" || (info.GetDomain() != "" && info.GetDomain() != errorDomain) {
			continue
		}
		return newError(Reason(info.GetReason()), ce.Message(), info.GetMetadata(), ce.Code(), ce)
	}
	if ce.Code() == connect.CodeCanceled && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		// connect-go reports a connection the server reset (a member
		// killed mid-call) as canceled, which reads as the caller's own
		// cancellation and is not retried: it is the connection breaking.
		return connect.NewError(connect.CodeUnavailable, ce.Unwrap())
	}
	return err
}

// invalidArgument is a request refused before it was sent, as the
// registrar would refuse it (INVALID_ARGUMENT, metadata field).
func invalidArgument(field, why string) error {
	return newError(ReasonInvalidArgument, string(ReasonInvalidArgument)+": "+field+" "+why,
		map[string]string{"field": field}, connect.CodeInvalidArgument, nil)
}

// newError is the registrar's answer as an *Error (a *HeldError for
// LEASE_HELD), from a unary call's error or a pipelined operation's.
func newError(reason Reason, msg string, md map[string]string, code connect.Code, cause error) error {
	e := &Error{Reason: reason, Message: msg, Metadata: md, Code: code, cause: cause}
	if e.Message == "" {
		e.Message = string(e.Reason)
	}
	if e.Reason == ReasonLeaseHeld {
		return heldFrom(e)
	}
	return e
}

// heldFrom reads LEASE_HELD metadata (keys namespace, resource, lease_id,
// holder, fence, mode, remaining_ms, waiters, wait_ended).
func heldFrom(e *Error) *HeldError {
	md := e.Metadata
	h := &HeldError{
		Namespace: md["namespace"],
		Resource:  md["resource"],
		LeaseID:   md["lease_id"],
		Holder:    md["holder"],
		Mode:      Exclusive,
		Err:       e,
	}
	h.Fence, _ = strconv.ParseUint(md["fence"], 10, 64)
	if ms, err := strconv.ParseInt(md["remaining_ms"], 10, 64); err == nil {
		h.Remaining = time.Duration(ms) * time.Millisecond
	}
	h.Waiters, _ = strconv.Atoi(md["waiters"])
	h.WaitEnded, _ = strconv.ParseBool(md["wait_ended"])
	switch md["mode"] {
	case "SHARED", "MODE_SHARED", "shared":
		h.Mode = Shared
	}
	return h
}

// notSent reports whether err proves the request never reached a server
// (the connection could not be made), so that repeating it elsewhere is
// safe even for a write.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || wire.TLSRefused(err)
}

// leaderHint returns the leader API address named by a NOT_LEADER or an
// OUTCOME_UNKNOWN error.
func leaderHint(err error) string {
	var e *Error
	// OUTCOME_UNKNOWN names the leader when a follower cut off a call it
	// forwarded to a leader that lost office: the retry goes there, not
	// to the next endpoint (which may be the old leader, hung).
	if errors.As(err, &e) && (e.Reason == ReasonNotLeader || e.Reason == ReasonOutcomeUnknown) {
		return e.Metadata["leader"]
	}
	return ""
}

// ParseError returns err as this package's typed error when it is a Connect
// error carrying Tenure's ErrorInfo: an *Error, or a *HeldError for
// LEASE_HELD. Any other error (a transport failure, a context error, nil) is
// returned unchanged. It is for programs that also call the generated
// tenurev1connect clients directly, as the tenure command line does.
func ParseError(err error) error { return fromConnect(err) }
