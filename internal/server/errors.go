package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/registrar"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every Tenure error.
const ErrorDomain = "tenure"

// codes is the one table mapping registrar reasons to Connect codes
// (API.md "Errors"). A reason missing here answers Unknown and is logged
// once.
var codes = map[registrar.Reason]connect.Code{
	registrar.ReasonInvalidArgument:      connect.CodeInvalidArgument,
	registrar.ReasonTTLOutOfRange:        connect.CodeInvalidArgument,
	registrar.ReasonLeaseHeld:            connect.CodeFailedPrecondition,
	registrar.ReasonLeaseExpired:         connect.CodeFailedPrecondition,
	registrar.ReasonLeaseTerminal:        connect.CodeFailedPrecondition,
	registrar.ReasonRenewalDoesNotExtend: connect.CodeFailedPrecondition,
	registrar.ReasonRenewalLimitExceeded: connect.CodeFailedPrecondition,
	registrar.ReasonLifetimeExceeded:     connect.CodeFailedPrecondition,
	registrar.ReasonLeaseViolation:       connect.CodeFailedPrecondition,
	registrar.ReasonTaskNotLeased:        connect.CodeFailedPrecondition,
	registrar.ReasonPieceNotLeased:       connect.CodeFailedPrecondition,
	registrar.ReasonExpiryTooEarly:       connect.CodeFailedPrecondition,
	registrar.ReasonNotBootstrapped:      connect.CodeFailedPrecondition,
	registrar.ReasonAlreadyBootstrapped:  connect.CodeFailedPrecondition,
	registrar.ReasonLeaseNotFound:        connect.CodeNotFound,
	registrar.ReasonTaskNotFound:         connect.CodeNotFound,
	pool.ReasonPoolNotFound:              connect.CodeNotFound,
	registrar.ReasonNotHolder:            connect.CodePermissionDenied,
	registrar.ReasonPermissionDenied:     connect.CodePermissionDenied,
	registrar.ReasonScopeViolation:       connect.CodePermissionDenied,
	registrar.ReasonStaleEpoch:           connect.CodeAborted,
	registrar.ReasonFutureEpoch:          connect.CodeAborted,
	registrar.ReasonQuotaExceeded:        connect.CodeResourceExhausted,
	registrar.ReasonBudgetExhausted:      connect.CodeResourceExhausted,
	registrar.ReasonNotLeader:            connect.CodeUnavailable,
	registrar.ReasonOutcomeUnknown:       connect.CodeUnavailable,
	registrar.ReasonUnavailable:          connect.CodeUnavailable,
	registrar.ReasonUnauthenticated:      connect.CodeUnauthenticated,
	registrar.ReasonInternal:             connect.CodeInternal,
	registrar.ReasonDeadlineExceeded:     connect.CodeDeadlineExceeded,
	registrar.ReasonCanceled:             connect.CodeCanceled,
	registrar.ReasonUnimplemented:        connect.CodeUnimplemented,
}

// CodeOf returns the Connect code the API answers reason with (Unknown for
// a reason it does not know).
func CodeOf(reason registrar.Reason) connect.Code {
	if c, ok := codes[reason]; ok {
		return c
	}
	return connect.CodeUnknown
}

var unmappedLogged sync.Map // registrar.Reason → struct{}

// toConnect turns any error into a Connect error with an ErrorInfo detail
// (domain "tenure", the reason, its metadata) and a message that starts
// with the reason. Context errors keep their own codes.
func (s *Server) toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	switch {
	case errors.Is(err, context.Canceled):
		return wireError(connect.CodeCanceled, registrar.ReasonCanceled, nil,
			"CANCELED: the call was cancelled before its answer; a write may or may not have been applied")
	case errors.Is(err, context.DeadlineExceeded):
		return wireError(connect.CodeDeadlineExceeded, registrar.ReasonDeadlineExceeded, nil,
			"DEADLINE_EXCEEDED: the call's deadline passed before its answer; a write may or may not have been applied "+
				"(a lease granted meanwhile is given back)")
	}
	e := registrar.ToError(err)
	code, ok := codes[e.Reason]
	if !ok {
		code = connect.CodeUnknown
		if _, seen := unmappedLogged.LoadOrStore(e.Reason, struct{}{}); !seen {
			s.log.Error("error reason has no Connect code; answering unknown", "reason", e.Reason, "err", err)
		}
	}
	if e.Reason == registrar.ReasonInternal {
		s.log.Error("internal error", "err", err)
	}
	s.metrics.rejections.WithLabelValues(string(e.Reason)).Inc()
	return wireError(code, e.Reason, e.Metadata, e.Message)
}

// wireError is a Connect error with Tenure's ErrorInfo detail (domain
// "tenure", the reason and its metadata); msg starts with the reason.
func wireError(code connect.Code, reason registrar.Reason, meta map[string]string, msg string) *connect.Error {
	out := connect.NewError(code, errors.New(msg))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: string(reason), Domain: ErrorDomain, Metadata: meta}); err == nil {
		out.AddDetail(d)
	}
	return out
}

// invalidArg builds an INVALID_ARGUMENT error naming the field.
func invalidArg(field, msg string) error {
	return &registrar.Error{Reason: registrar.ReasonInvalidArgument,
		Message:  string(registrar.ReasonInvalidArgument) + ": " + field + ": " + msg,
		Metadata: map[string]string{"field": field}}
}

// logUnexpected is for errors that are answered but also worth a line.
func logUnexpected(log *slog.Logger, what string, err error) {
	if registrar.ReasonOf(err) == registrar.ReasonOutcomeUnknown {
		log.Warn(what, "err", err)
	}
}
