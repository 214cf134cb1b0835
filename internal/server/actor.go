package server

import (
	"context"
	"net/http"

	"github.com/tenurehq/tenure/internal/logpb"
)

// anonymousActor is the actor of a client's command when the server does
// not authenticate callers and the request names no holder or worker.
const anonymousActor = "anonymous"

// stampActor names in cmd who it is proposed for, the actor of its
// records (DESIGN §1.2): the authenticated principal; without
// authentication the holder, worker or peer the request names, else
// anonymousActor. A command the server proposes on its own (no client
// request in ctx: the expirer, the policy given at start) keeps no actor,
// and its records read as the registrar's.
func stampActor(ctx context.Context, cmd *logpb.Command) {
	if p := principalOf(ctx); p != nil {
		cmd.Actor = p.Name
		return
	}
	if cmd.Actor != "" || ctx.Value(http.ServerContextKey) == nil {
		return
	}
	switch op := cmd.Op.(type) {
	case *logpb.Command_Acquire:
		cmd.Actor = op.Acquire.GetHolder()
	case *logpb.Command_Renew:
		cmd.Actor = op.Renew.GetHolder()
	case *logpb.Command_Release:
		cmd.Actor = op.Release.GetHolder()
	case *logpb.Command_Transfer:
		cmd.Actor = op.Transfer.GetHolder()
	case *logpb.Command_DeclareRestart:
		cmd.Actor = op.DeclareRestart.GetHolder()
	}
	if cmd.Actor == "" {
		cmd.Actor = anonymousActor
	}
}
