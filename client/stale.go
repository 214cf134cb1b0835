package tenure

import (
	"context"

	"connectrpc.com/connect"
)

// HeaderConsistency is the request header that asks for a stale read
// (value "stale"); StaleReads sets it.
const HeaderConsistency = "Tenure-Consistency"

type staleKey struct{}

// StaleReads returns a context whose reads (Get, VerifyAll, CheckFence,
// ReadState, GetTask, ListTasks, PoolStatus, Rankings…) are answered
// by the member the client calls from its own state, without asking the
// leader: served while no leader is known and without the leader's round
// trip, but possibly behind the cluster (a member cut off answers what it
// last knew). Reads are linearizable without it. Writes made with the
// context are unaffected.
func StaleReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, staleKey{}, true)
}

func staleRead(ctx context.Context) bool { v, _ := ctx.Value(staleKey{}).(bool); return v }

// consistency sets HeaderConsistency on the calls made with a StaleReads
// context.
type consistency struct{}

func (consistency) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if staleRead(ctx) {
			req.Header().Set(HeaderConsistency, "stale")
		}
		return next(ctx, req)
	}
}

func (consistency) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (consistency) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
