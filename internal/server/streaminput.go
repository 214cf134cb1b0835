package server

import (
	"context"
	"errors"
	"io"
	"strings"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/registrar"
)

// streamInput gives a stream's message that does not decode the answer
// every other bad input gets: INVALID_ARGUMENT with its ErrorInfo (field
// "body") and a message that starts with the reason. Connect answers such
// a message with a bare invalid_argument, one past the size limit with
// resource_exhausted (a unary body past it is INVALID_ARGUMENT), and a
// body that is not a sequence of enveloped messages (plain JSON posted to
// a streaming RPC) with internal, or with resource_exhausted when its
// first bytes read as a huge length.
type streamInput struct{}

func (streamInput) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (streamInput) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (streamInput) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, inputConn{conn})
		// A server stream (Watch) takes exactly one request message;
		// Connect answers none or two as unimplemented.
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeUnimplemented && len(ce.Details()) == 0 &&
			(strings.Contains(ce.Message(), "zero messages") || strings.Contains(ce.Message(), "multiple messages")) {
			return wireError(connect.CodeInvalidArgument, registrar.ReasonInvalidArgument, map[string]string{"field": "body"},
				"INVALID_ARGUMENT: "+ce.Message()+" (this RPC takes exactly one request message)")
		}
		return err
	}
}

type inputConn struct{ connect.StreamingHandlerConn }

func (c inputConn) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	var ce *connect.Error
	if err == nil || errors.Is(err, io.EOF) || !errors.As(err, &ce) || len(ce.Details()) > 0 {
		return err
	}
	switch code, msg := ce.Code(), ce.Message(); {
	case code == connect.CodeInvalidArgument,
		code == connect.CodeInternal && strings.Contains(msg, "protocol error"),
		code == connect.CodeResourceExhausted && strings.Contains(msg, "larger than configured max"):
		return wireError(connect.CodeInvalidArgument, registrar.ReasonInvalidArgument, map[string]string{"field": "body"},
			"INVALID_ARGUMENT: a message of the stream does not decode: "+msg+" (each message of a Connect stream "+
				"is a 5-byte envelope, a flag byte and a big-endian length, then the message)")
	}
	return err
}
