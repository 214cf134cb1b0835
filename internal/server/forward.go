package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Forwarding (DESIGN §3: followers forward writes).
//
// A member that does not lead calls the same RPC on the leader's API
// address (from the replicated members map) with a Connect client over
// h2c, passing the original request message; the leader's answer, error
// or not, goes back unchanged. Writes and linearizable reads are
// forwarded; reads that ask for stale consistency (request header
// Tenure-Consistency: stale) are answered from local state. History is
// such a read: a member that is behind (or still replaying its log after a
// restart) must not answer "no events" for events it has not applied yet.
// Watch reads the member's own feed; KeepAlive and Pipeline forward each
// operation through the same unary path; Status, Snapshot and PublicKey
// are answered locally.
//
// Failure answers: no leader known (or its API address not yet
// published), or the forward could not be started (the leader could not
// be dialled): NOT_LEADER, metadata leader (API address, when known) and
// leader_id — nothing was proposed. A write whose forward broke off after
// it was sent, or that the leader did not answer before this member saw
// the leadership move (the leader paused or cut off): OUTCOME_UNKNOWN (a
// read: NOT_LEADER). A request that was itself forwarded is
// never forwarded again (no loops while leadership moves): a member that
// lost leadership in between answers NOT_LEADER, which travels back.
const (
	// HeaderForwardedBy names the member that forwarded a request.
	HeaderForwardedBy = "Tenure-Forwarded-By"
	// HeaderConsistency set to "stale" lets a read answer from the local
	// state of whichever member receives it.
	HeaderConsistency = "Tenure-Consistency"
)

// forwarder calls one procedure on base (http(s)://leader) with msg, on
// behalf of the caller whose request headers are hdr.
type forwarder func(ctx context.Context, s *Server, base string, msg any, hdr http.Header) (connect.AnyResponse, error)

type route struct {
	write bool
	call  forwarder
}

// routes lists the procedures a follower forwards to the leader.
var routes = map[string]route{
	v1c.LeaseServiceAcquireProcedure:        {true, via[tenurev1.AcquireRequest, tenurev1.AcquireResponse](v1c.LeaseServiceAcquireProcedure)},
	v1c.LeaseServiceRenewProcedure:          {true, via[tenurev1.RenewRequest, tenurev1.RenewResponse](v1c.LeaseServiceRenewProcedure)},
	v1c.LeaseServiceReleaseProcedure:        {true, via[tenurev1.ReleaseRequest, tenurev1.ReleaseResponse](v1c.LeaseServiceReleaseProcedure)},
	v1c.LeaseServiceRevokeProcedure:         {true, via[tenurev1.RevokeRequest, tenurev1.RevokeResponse](v1c.LeaseServiceRevokeProcedure)},
	v1c.LeaseServiceTransferProcedure:       {true, via[tenurev1.TransferRequest, tenurev1.TransferResponse](v1c.LeaseServiceTransferProcedure)},
	v1c.LeaseServiceDeclareRestartProcedure: {true, via[tenurev1.DeclareRestartRequest, tenurev1.DeclareRestartResponse](v1c.LeaseServiceDeclareRestartProcedure)},
	v1c.LeaseServiceWriteStateProcedure:     {true, via[tenurev1.WriteStateRequest, tenurev1.WriteStateResponse](v1c.LeaseServiceWriteStateProcedure)},
	v1c.LeaseServiceVerifyProcedure:         {false, via[tenurev1.VerifyRequest, tenurev1.VerifyResponse](v1c.LeaseServiceVerifyProcedure)},
	v1c.LeaseServiceGetProcedure:            {false, via[tenurev1.GetRequest, tenurev1.GetResponse](v1c.LeaseServiceGetProcedure)},
	v1c.LeaseServiceListProcedure:           {false, via[tenurev1.ListRequest, tenurev1.ListResponse](v1c.LeaseServiceListProcedure)},
	v1c.LeaseServiceCheckFenceProcedure:     {false, via[tenurev1.CheckFenceRequest, tenurev1.CheckFenceResponse](v1c.LeaseServiceCheckFenceProcedure)},
	v1c.LeaseServiceReadStateProcedure:      {false, via[tenurev1.ReadStateRequest, tenurev1.ReadStateResponse](v1c.LeaseServiceReadStateProcedure)},
	v1c.LeaseServiceDeriveProcedure:         {true, via[tenurev1.DeriveRequest, tenurev1.DeriveResponse](v1c.LeaseServiceDeriveProcedure)},
	v1c.LeaseServiceConsumeProcedure:        {true, via[tenurev1.ConsumeRequest, tenurev1.ConsumeResponse](v1c.LeaseServiceConsumeProcedure)},
	v1c.LeaseServiceAuthorizeProcedure:      {false, via[tenurev1.AuthorizeRequest, tenurev1.AuthorizeResponse](v1c.LeaseServiceAuthorizeProcedure)},
	v1c.LeaseServiceTreeProcedure:           {false, via[tenurev1.TreeRequest, tenurev1.TreeResponse](v1c.LeaseServiceTreeProcedure)},
	v1c.LeaseServiceHistoryProcedure:        {false, via[tenurev1.HistoryRequest, tenurev1.HistoryResponse](v1c.LeaseServiceHistoryProcedure)},
	v1c.ClusterServiceGetPolicyProcedure:    {false, via[tenurev1.GetPolicyRequest, tenurev1.GetPolicyResponse](v1c.ClusterServiceGetPolicyProcedure)},
	v1c.ClusterServiceSetPolicyProcedure:    {true, via[tenurev1.SetPolicyRequest, tenurev1.SetPolicyResponse](v1c.ClusterServiceSetPolicyProcedure)},
	v1c.ClusterServiceAddVoterProcedure:     {true, via[tenurev1.AddVoterRequest, tenurev1.AddVoterResponse](v1c.ClusterServiceAddVoterProcedure)},
	v1c.ClusterServiceRemoveServerProcedure: {true, via[tenurev1.RemoveServerRequest, tenurev1.RemoveServerResponse](v1c.ClusterServiceRemoveServerProcedure)},
	v1c.ClusterServiceTransferLeadershipProcedure: {true,
		via[tenurev1.TransferLeadershipRequest, tenurev1.TransferLeadershipResponse](v1c.ClusterServiceTransferLeadershipProcedure)},
}

// forwardClients caches one Connect client per leader address and
// procedure. Members talk HTTP/2: over TLS with the PeerTLS config when
// the members serve TLS, else h2c.
type forwardClients struct {
	http   *http.Client
	scheme string // "http://" or "https://"
	// token is the member's own bearer token (for its own calls).
	token string
	mu    sync.Mutex
	m     map[string]any
}

func newForwardClients(tlsCfg *tls.Config, token string) *forwardClients {
	var p http.Protocols
	tr := &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 64}
	scheme := "http://"
	if tlsCfg != nil {
		p.SetHTTP2(true)
		tr.TLSClientConfig = tlsCfg.Clone()
		scheme = "https://"
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &forwardClients{http: &http.Client{Transport: tr}, scheme: scheme, token: token, m: map[string]any{}}
}

// own sets this member's credentials on a request it makes for itself.
func (f *forwardClients) own(h http.Header) {
	if f.token != "" {
		h.Set("Authorization", "Bearer "+f.token)
	}
}

func (f *forwardClients) get(url string, mk func(connect.HTTPClient, string) any) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.m[url]
	if !ok {
		c = mk(f.http, url)
		f.m[url] = c
	}
	return c
}

func (f *forwardClients) close() { f.http.CloseIdleConnections() }

// via builds the forwarder of one procedure.
func via[Req, Res any](proc string) forwarder {
	mk := func(hc connect.HTTPClient, url string) any { return connect.NewClient[Req, Res](hc, url) }
	return func(ctx context.Context, s *Server, base string, msg any, hdr http.Header) (connect.AnyResponse, error) {
		c := s.fwd.get(base+proc, mk).(*connect.Client[Req, Res])
		req := connect.NewRequest(msg.(*Req))
		req.Header().Set(HeaderForwardedBy, s.node.ID())
		// The leader authenticates and authorizes the caller again.
		if a := hdr.Get("Authorization"); a != "" {
			req.Header().Set("Authorization", a)
		}
		resp, err := c.CallUnary(ctx, req)
		if err != nil {
			return nil, err
		}
		// A fresh response: the leader's HTTP headers (content type,
		// length) must not leak into this member's answer.
		return connect.NewResponse(resp.Msg), nil
	}
}

type staleKey struct{}

// withConsistency notes in ctx that the caller accepts a stale read.
func withConsistency(ctx context.Context, hdr http.Header) context.Context {
	if strings.EqualFold(hdr.Get(HeaderConsistency), "stale") {
		return context.WithValue(ctx, staleKey{}, true)
	}
	return ctx
}

// checkConsistency refuses a HeaderConsistency value other than "stale"
// or "linearizable" (the default): a misspelt "stale" must not pass for
// the default unnoticed.
func checkConsistency(hdr http.Header) error {
	switch v := hdr.Get(HeaderConsistency); {
	case v == "", strings.EqualFold(v, "stale"), strings.EqualFold(v, "linearizable"):
		return nil
	default:
		return invalidArg(HeaderConsistency, fmt.Sprintf("%q is neither \"stale\" nor \"linearizable\"", v))
	}
}

func staleRead(ctx context.Context) bool { v, _ := ctx.Value(staleKey{}).(bool); return v }

// forwardInterceptor forwards unary calls to the leader (see routes).
func (s *Server) forwardInterceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if err := checkConsistency(req.Header()); err != nil {
				return nil, s.toConnect(err)
			}
			ctx = withConsistency(ctx, req.Header())
			if resp, ok, err := s.forward(ctx, req.Spec().Procedure, req.Any(), req.Header()); ok {
				return resp, err
			}
			if err := s.checkLeases(ctx, req.Spec().Procedure, req.Any()); err != nil {
				return nil, s.toConnect(err)
			}
			return next(ctx, req)
		}
	}
}

// forward sends one call to the leader when this member should not answer
// it itself; ok is false when the caller should run it locally (this node
// leads, the read may be stale, the call was already forwarded, or no
// leader is known — then the local path answers NOT_LEADER).
func (s *Server) forward(ctx context.Context, proc string, msg any, hdr http.Header) (resp connect.AnyResponse, ok bool, err error) {
	r, found := routes[proc]
	if !found || (!r.write && staleRead(ctx)) {
		return nil, false, nil
	}
	// Right after a start, while the first leader is elected; and on a
	// member just elected, until its term has begun: a call forwarded to
	// it then (a leader that removes itself asks the member it handed
	// over to at once) would be answered NOT_LEADER naming this member.
	s.node.AwaitLeader(ctx)
	if hdr.Get(HeaderForwardedBy) != "" || s.node.IsLeader() {
		return nil, false, nil
	}
	changed := s.node.LeaderChange() // before Leader: a change after the read ends it
	id, addr := s.node.Leader()
	if id == "" && s.node.LogFailure() != nil {
		// This member cannot write its log (a full disk): it cannot
		// follow, and its elections keep it from knowing the leader,
		// which still leads the others: the call goes there (found from
		// outside: writes to such a member failed while a leader served).
		id, addr = s.node.LastLeader()
	}
	if id == "" || id == s.node.ID() {
		// No leader, or this node was just elected and is not serving yet.
		return nil, false, nil
	}
	if addr == "" {
		return nil, true, s.toConnect(notLeader(id, "", "the leader's API address is not published yet"))
	}
	if p := principalOf(ctx); p != nil && p.Certificate {
		// The leader could not authenticate the caller: its certificate
		// ends at this member. Nothing was proposed; ask the leader.
		return nil, true, s.toConnect(notLeader(id, addr, "a caller authenticated by a client certificate must call the leader itself"))
	}
	// A call forwarded when this member starts to shut down gets a moment
	// to finish; a long one (a Claim or Acquire that waits) is then cut
	// and answered, rather than holding the shutdown and being dropped.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cutOff atomic.Bool
	defer context.AfterFunc(s.ctx, func() {
		select {
		case <-time.After(forwardDrain):
			cutOff.Store(true)
			cancel()
		case <-fctx.Done():
		}
	})()
	// A leader that stops answering (paused, cut off) is replaced within
	// an election; a call forwarded to it would wait for it as long as it
	// stays away. It is cut once this member has seen another leader (or
	// none) for forwardMovedGrace, and answered so that the caller asks
	// again: a leader that stepped down but still answers gets that long
	// to do so. Calls that move the leadership themselves are not cut.
	var moved atomic.Bool
	if !movesLeader[proc] {
		defer context.AfterFunc(changed, func() {
			select {
			case <-time.After(forwardMovedGrace):
			case <-fctx.Done():
				return
			}
			if now, _ := s.node.Leader(); now != id {
				moved.Store(true)
				cancel()
			}
		})()
	}
	// A grant forwarded for a caller that goes away meanwhile is given
	// back. The leader does so when the forwarded call is cut before it
	// answers; but its answer may already be on the way (this member
	// paused, or slow to read), and cutting the call then loses it, with
	// the lease or the tasks held by no one until they expire (found from
	// outside, with a follower paused). So the call outlives its caller
	// for forwardGiveBackGrace, and what it brings back is given back.
	callCtx, giveBack := fctx, giveBacks[proc]
	if giveBack != nil {
		var ccancel context.CancelFunc
		callCtx, ccancel = context.WithCancel(context.WithValue(context.WithoutCancel(fctx), callerKey{}, ctx))
		defer ccancel()
		defer context.AfterFunc(fctx, func() {
			if ctx.Err() != nil && !cutOff.Load() && !moved.Load() {
				t := time.NewTimer(forwardGiveBackGrace)
				defer t.Stop()
				select {
				case <-t.C:
				case <-callCtx.Done():
				}
			}
			ccancel()
		})()
	}
	resp, err = r.call(callCtx, s, s.fwd.scheme+addr, msg, hdr)
	if err == nil && ctx.Err() != nil && giveBack != nil {
		go s.giveBack(proc, hdr, giveBack(resp.Any()))
		return nil, true, s.toConnect(ctx.Err())
	}
	if err != nil {
		if ce := (*connect.Error)(nil); !errors.As(err, &ce) || !connect.IsWireError(ce) {
			s.metrics.forwardErrors.Inc() // failed in transit: not the leader's own answer (LEASE_HELD, …)
		}
		switch {
		case ctx.Err() != nil:
		case cutOff.Load():
			return nil, true, s.shutdownForwardError(r.write, id)
		case moved.Load():
			if !r.write && s.node.IsLeader() {
				// This member is the leader now: the read the old one never
				// answered is answered here (nothing was proposed).
				return nil, false, nil
			}
			return nil, true, s.movedForwardError(r.write, id)
		}
		return nil, true, s.forwardError(ctx, err, r.write, id, addr)
	}
	return resp, true, nil
}

// outcomeMeta is the metadata of an OUTCOME_UNKNOWN for a write this
// member forwarded to the leader forwardedTo: what broke off (cause) and
// the leader as known now (leader_id, leader: its API address; empty when
// that is still the one the forward broke off from), where to ask what
// became of the write.
func (s *Server) outcomeMeta(cause, forwardedTo string) map[string]string {
	id, addr := s.node.Leader()
	if id == forwardedTo && cause != "member_shutdown" {
		// The leader that broke off, still named until an election ends
		// (it may have died): no leader to point to yet.
		id, addr = "", ""
	}
	return map[string]string{"cause": cause, "forwarded_to": forwardedTo, "leader_id": id, "leader": addr}
}

// movedForwardError answers a forwarded call cut because the leader it
// went to lost the leadership before answering: a read was not answered
// (NOT_LEADER, naming the new leader when known: nothing was proposed); a
// write may have been applied (OUTCOME_UNKNOWN).
func (s *Server) movedForwardError(write bool, old string) error {
	if !write {
		id, addr := s.node.Leader()
		return s.toConnect(notLeader(id, addr, "the read was forwarded to "+old+", which lost the leadership before answering"))
	}
	return s.toConnect(&registrar.Error{Reason: registrar.ReasonOutcomeUnknown,
		Message: fmt.Sprintf("%s: the write was forwarded to the leader %s, which lost the leadership before answering; it may or may not have been applied",
			registrar.ReasonOutcomeUnknown, old),
		Metadata: s.outcomeMeta("leadership_moved", old)})
}

// callerKey holds, in the context of a forwarded call that outlives its
// caller (giveBacks), the caller's own context.
type callerKey struct{}

// forwardGiveBackGrace is how long a forwarded call that grants (an
// Acquire, a Claim) may go on once its caller went away, for what it
// grants to be given back.
const forwardGiveBackGrace = 2 * time.Second

// giveBacks give back what a forwarded call granted to a caller that
// went away: an Acquire's lease, a Claim's tasks (released ABORTED, as
// the leader gives back what it grants to a caller gone: the tasks go
// back to their queue without using an attempt).
var giveBacks = map[string]func(resp any) []*tenurev1.Lease{
	v1c.LeaseServiceAcquireProcedure: func(resp any) []*tenurev1.Lease {
		if l := resp.(*tenurev1.AcquireResponse).GetLease(); l != nil {
			return []*tenurev1.Lease{l}
		}
		return nil
	},
	v1c.QueueServiceClaimProcedure: func(resp any) []*tenurev1.Lease {
		var out []*tenurev1.Lease
		for _, t := range resp.(*tenurev1.ClaimResponse).GetTasks() {
			out = append(out, t.GetLease())
		}
		return out
	},
}

// giveBack releases (ABORTED) the leases a forwarded call granted to a
// caller that went away: through the leader, as the caller, or here if
// this member leads now.
func (s *Server) giveBack(proc string, hdr http.Header, leases []*tenurev1.Lease) {
	ctx, cancel := context.WithTimeout(s.ctx, abandonTimeout)
	defer cancel()
	for _, l := range leases {
		req := &tenurev1.ReleaseRequest{LeaseId: l.GetLeaseId(), Holder: l.GetHolder(), Reason: tenurev1.ReleaseReason_RELEASE_REASON_ABORTED}
		_, forwarded, err := s.forward(ctx, v1c.LeaseServiceReleaseProcedure, req, hdr)
		if !forwarded {
			s.releaseAbandoned(ctx, l.GetHolder(), l.GetLeaseId(), "a forwarded "+shortProc(proc))
			continue
		}
		if err != nil {
			s.log.Warn("releasing the lease of a forwarded "+shortProc(proc)+" whose caller went away", "lease", l.GetLeaseId(), "err", err)
		}
	}
}

// forwardDrain is how long a forwarded call may go on once its member
// starts to shut down.
const forwardDrain = time.Second

// forwardMovedGrace is how long a forwarded call may go on once its
// member has seen the leader it went to lose the leadership.
const forwardMovedGrace = 500 * time.Millisecond

// movesLeader lists the calls whose leader hands the leadership over
// before it answers.
var movesLeader = map[string]bool{
	v1c.ClusterServiceTransferLeadershipProcedure: true,
	v1c.ClusterServiceRemoveServerProcedure:       true,
}

// shutdownForwardError answers a forwarded call cut by this member's
// shutdown: a read was not answered (ask another member); a write may
// have been applied by the leader.
func (s *Server) shutdownForwardError(write bool, id string) error {
	if !write {
		return s.toConnect(&registrar.Error{Reason: registrar.ReasonUnavailable,
			Message: string(registrar.ReasonUnavailable) + ": this member is shutting down; ask another member"})
	}
	return s.toConnect(&registrar.Error{Reason: registrar.ReasonOutcomeUnknown,
		Metadata: s.outcomeMeta("member_shutdown", id),
		Message: fmt.Sprintf("%s: this member is shutting down and cut off the write it forwarded to the leader %s; it may or may not have been applied",
			registrar.ReasonOutcomeUnknown, id)})
}

// forwardError classifies a failed forward (see the package comment above).
func (s *Server) forwardError(ctx context.Context, err error, write bool, id, addr string) error {
	var ce *connect.Error
	if errors.As(err, &ce) && connect.IsWireError(ce) {
		// The leader's own answer: same code, message and details, without
		// the leader's transport headers.
		out := connect.NewError(ce.Code(), errors.New(ce.Message()))
		for _, d := range ce.Details() {
			out.AddDetail(d)
			// Counted here too: the rejections this member answered
			// (tenure_rejections_total, its dashboard) include those of
			// the calls it forwarded.
			if v, err := d.Value(); err == nil {
				if info, ok := v.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
					s.metrics.rejections.WithLabelValues(info.GetReason()).Inc()
				}
			}
		}
		return out
	}
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		// The leader's address is not offered: a client would go there
		// next, and most likely find it down too (it is named in the
		// message).
		return s.toConnect(notLeader(id, "", "the leader at "+addr+" could not be reached"))
	case !write && ctx.Err() != nil:
		return s.toConnect(ctx.Err())
	case !write:
		return s.toConnect(notLeader(id, addr, "the forwarded read broke off: "+err.Error()))
	}
	return s.toConnect(&registrar.Error{Reason: registrar.ReasonOutcomeUnknown,
		Metadata: s.outcomeMeta("forward_broke", id),
		Message: fmt.Sprintf("%s: the write forwarded to the leader %s broke off (%v); it may or may not have been applied",
			registrar.ReasonOutcomeUnknown, id, err)})
}

func notLeader(id, addr, why string) error {
	msg := fmt.Sprintf("%s: this node is not the leader and cannot forward to leader %q: %s", registrar.ReasonNotLeader, id, why)
	if id == "" {
		msg = fmt.Sprintf("%s: this node is not the leader and knows no leader: %s", registrar.ReasonNotLeader, why)
	}
	return &registrar.Error{Reason: registrar.ReasonNotLeader, Message: msg, Metadata: map[string]string{"leader": addr, "leader_id": id}}
}

// callOp runs one operation of a stream: forwarded to the leader like its
// unary RPC, or through the local handler.
func callOp[Req, Res any](ctx context.Context, s *Server, hdr http.Header, proc string, req *Req,
	local func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*Res, error) {
	if resp, ok, err := s.forward(ctx, proc, req, hdr); ok {
		if err != nil {
			return nil, err
		}
		return resp.Any().(*Res), nil
	}
	if err := s.checkLeases(ctx, proc, req); err != nil {
		return nil, err
	}
	r, err := local(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}
