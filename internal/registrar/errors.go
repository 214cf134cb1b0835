package registrar

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Reason is the machine-readable code of a rejection. The names are the
// wire contract of API.md; the server maps each to a Connect code.
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
	ReasonExpiryTooEarly       Reason = "EXPIRY_TOO_EARLY"
	ReasonNotBootstrapped      Reason = "NOT_BOOTSTRAPPED"
	ReasonPermissionDenied     Reason = "PERMISSION_DENIED"
	ReasonUnauthenticated      Reason = "UNAUTHENTICATED"
	ReasonNotLeader            Reason = "NOT_LEADER"
	ReasonOutcomeUnknown       Reason = "OUTCOME_UNKNOWN"
	ReasonBudgetExhausted      Reason = "BUDGET_EXHAUSTED"
	ReasonScopeViolation       Reason = "SCOPE_VIOLATION"
	ReasonTaskNotFound         Reason = "TASK_NOT_FOUND"
	ReasonTaskNotLeased        Reason = "TASK_NOT_LEASED"
	ReasonPieceNotLeased       Reason = "PIECE_NOT_LEASED"
	ReasonInternal             Reason = "INTERNAL"
	ReasonUnavailable          Reason = "UNAVAILABLE"
	ReasonCertificateInvalid   Reason = "CERTIFICATE_INVALID"
	ReasonLedgerCorrupt        Reason = "LEDGER_CORRUPT"
	ReasonUnsupportedSnapshot  Reason = "UNSUPPORTED_SNAPSHOT"
	ReasonAlreadyBootstrapped  Reason = "ALREADY_BOOTSTRAPPED"
	// ReasonDeadlineExceeded and ReasonCanceled: the caller's deadline
	// passed, or it cancelled the call, before the answer; a write may
	// or may not have been applied.
	ReasonDeadlineExceeded Reason = "DEADLINE_EXCEEDED"
	ReasonCanceled         Reason = "CANCELED"
	// ReasonUnimplemented: no such RPC.
	ReasonUnimplemented Reason = "UNIMPLEMENTED"
)

// Error is a typed rejection: a reason, a message that starts with the
// reason, and metadata giving the context needed to act on it.
type Error struct {
	Reason   Reason
	Message  string
	Metadata map[string]string
}

func (e *Error) Error() string { return e.Message }

// Is matches any *Error with the same reason, so that
// errors.Is(err, registrar.ErrLeaseExpired) works.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Reason == e.Reason && t.Message == ""
	}
	return false
}

// Sentinels for errors.Is; each matches every error of its reason.
var (
	ErrInvalidArgument      = &Error{Reason: ReasonInvalidArgument}
	ErrTTLOutOfRange        = &Error{Reason: ReasonTTLOutOfRange}
	ErrLeaseHeld            = &Error{Reason: ReasonLeaseHeld}
	ErrLeaseNotFound        = &Error{Reason: ReasonLeaseNotFound}
	ErrLeaseExpired         = &Error{Reason: ReasonLeaseExpired}
	ErrLeaseTerminal        = &Error{Reason: ReasonLeaseTerminal}
	ErrNotHolder            = &Error{Reason: ReasonNotHolder}
	ErrRenewalDoesNotExtend = &Error{Reason: ReasonRenewalDoesNotExtend}
	ErrRenewalLimitExceeded = &Error{Reason: ReasonRenewalLimitExceeded}
	ErrLifetimeExceeded     = &Error{Reason: ReasonLifetimeExceeded}
	ErrLeaseViolation       = &Error{Reason: ReasonLeaseViolation}
	ErrStaleEpoch           = &Error{Reason: ReasonStaleEpoch}
	ErrFutureEpoch          = &Error{Reason: ReasonFutureEpoch}
	ErrQuotaExceeded        = &Error{Reason: ReasonQuotaExceeded}
	ErrExpiryTooEarly       = &Error{Reason: ReasonExpiryTooEarly}
)

// newError builds an *Error whose message starts with the reason.
func newError(r Reason, meta map[string]string, format string, args ...any) *Error {
	return &Error{Reason: r, Message: string(r) + ": " + fmt.Sprintf(format, args...), Metadata: meta}
}

// invalid reports a malformed field; the metadata names it.
func invalid(field, format string, args ...any) *Error {
	return newError(ReasonInvalidArgument, map[string]string{"field": field}, "%s: "+format, append([]any{field}, args...)...)
}

// HeldError answers an acquire of a busy resource. It carries the lease
// in the way, so a client retrying after an unknown outcome can recognise
// and adopt its own lease.
type HeldError struct {
	Namespace string
	Resource  string
	LeaseID   string
	Holder    string
	Fence     uint64
	Mode      Mode
	Remaining time.Duration
	// Waiters is the length of the resource's wait queue.
	Waiters int
	// WaitEnded is true when the request waited in the queue and its wait ran out.
	WaitEnded bool
	// QueuedAhead is true when the holders alone would have admitted the
	// request (shared beside shared), but requests queued before it come
	// first.
	QueuedAhead bool
}

func (e *HeldError) Error() string {
	msg := fmt.Sprintf("%s: %s is held by lease %s (holder %s, fence %d, %.1fs left)",
		ReasonLeaseHeld, e.Resource, e.LeaseID, e.Holder, e.Fence, e.Remaining.Seconds())
	if e.QueuedAhead {
		msg += fmt.Sprintf("; %d queued request(s) ahead of this one come first (an exclusive one blocks shared leases behind it)", e.Waiters)
	}
	if e.WaitEnded {
		msg += "; the wait ran out"
	}
	return msg
}

// Is matches ErrLeaseHeld.
func (e *HeldError) Is(target error) bool { return target == ErrLeaseHeld }

// AsError converts the held error to the generic form with metadata.
func (e *HeldError) AsError() *Error {
	return &Error{Reason: ReasonLeaseHeld, Message: e.Error(), Metadata: map[string]string{
		"namespace":      e.Namespace,
		"resource":       e.Resource,
		"lease_id":       e.LeaseID,
		"holder":         e.Holder,
		"fence":          strconv.FormatUint(e.Fence, 10),
		"mode":           e.Mode.String(),
		"remaining_ms":   strconv.FormatInt(e.Remaining.Milliseconds(), 10),
		"time_remaining": e.Remaining.String(),
		"waiters":        strconv.Itoa(e.Waiters),
		"wait_ended":     strconv.FormatBool(e.WaitEnded),
		"queued_ahead":   strconv.FormatBool(e.QueuedAhead),
	}}
}

// ReasonOf extracts the reason of any registrar error ("" if none).
func ReasonOf(err error) Reason {
	var he *HeldError
	if errors.As(err, &he) {
		return ReasonLeaseHeld
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// ToError turns any registrar error into an *Error (HeldError included).
func ToError(err error) *Error {
	var he *HeldError
	if errors.As(err, &he) {
		return he.AsError()
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Reason: ReasonInternal, Message: string(ReasonInternal) + ": " + err.Error()}
}
