package fencing

// Reasons are the machine-readable codes carried by every *Error. They are the
// same strings the Tenure server puts in google.rpc.ErrorInfo.reason (API.md), so a
// downstream service can report a rejection in the registrar's own vocabulary.
const (
	// ReasonInvalidArgument: a malformed input (empty key, negative skew, a
	// signature of the wrong length, ...). Metadata "field" names the input.
	ReasonInvalidArgument = "INVALID_ARGUMENT"
	// ReasonLeaseViolation: the work carries a lease that is not the one accepted.
	ReasonLeaseViolation = "LEASE_VIOLATION"
	// ReasonStaleEpoch: the epoch was already processed (or skipped over).
	ReasonStaleEpoch = "STALE_EPOCH"
	// ReasonFutureEpoch: the epoch is ahead of the next expected one; an earlier
	// epoch has not been processed yet.
	ReasonFutureEpoch = "FUTURE_EPOCH"
	// ReasonFenceStale: a fence lower than one already seen, i.e. a deposed holder.
	ReasonFenceStale = "FENCE_STALE"
	// ReasonCertificateInvalid: the signature does not verify for the claim and key.
	ReasonCertificateInvalid = "CERTIFICATE_INVALID"
	// ReasonLeaseExpired: the certificate's lease has expired (within the skew margin).
	ReasonLeaseExpired = "LEASE_EXPIRED"
)

// Error is the error type returned by every function of this package.
//
// Reason is one of the Reason… constants, Message is human readable and starts with
// the reason followed by ": ", and Metadata gives the context as the server's
// ErrorInfo would (keys are snake_case, values are decimal numbers, ids or RFC 3339
// times). Use errors.Is with the Err… sentinels, or errors.As to read Metadata;
// never match on Message.
type Error struct {
	Reason   string
	Message  string
	Metadata map[string]string
}

// Error returns the message, which starts with the reason. An Error with no message
// (such as a sentinel) returns its reason.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Reason
	}
	return e.Message
}

// Is reports whether target is an *Error with the same Reason, so that
// errors.Is(err, ErrStaleEpoch) holds for every STALE_EPOCH error whatever its
// message or metadata.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e != nil && t.Reason == e.Reason
}

// Sentinels, one per reason, for use with errors.Is. They carry no message or
// metadata; the errors returned by this package are distinct values.
var (
	ErrInvalidArgument    = &Error{Reason: ReasonInvalidArgument}
	ErrLeaseViolation     = &Error{Reason: ReasonLeaseViolation}
	ErrStaleEpoch         = &Error{Reason: ReasonStaleEpoch}
	ErrFutureEpoch        = &Error{Reason: ReasonFutureEpoch}
	ErrFenceStale         = &Error{Reason: ReasonFenceStale}
	ErrCertificateInvalid = &Error{Reason: ReasonCertificateInvalid}
	ErrLeaseExpired       = &Error{Reason: ReasonLeaseExpired}
)

// newError builds an *Error whose message is reason + ": " + detail.
// kv is alternating metadata keys and values.
func newError(reason, detail string, kv ...string) *Error {
	e := &Error{Reason: reason, Message: reason + ": " + detail}
	if len(kv) > 0 {
		e.Metadata = make(map[string]string, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			e.Metadata[kv[i]] = kv[i+1]
		}
	}
	return e
}

func invalidArgument(field, detail string) *Error {
	return newError(ReasonInvalidArgument, field+": "+detail, "field", field)
}
