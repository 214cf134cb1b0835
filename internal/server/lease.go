package server

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// leaseService implements tenure.v1.LeaseService.
type leaseService struct{ s *Server }

// propose replicates a command and returns its outcome; a registrar
// rejection comes back as the error too.
func (s *Server) propose(ctx context.Context, cmd *logpb.Command) (registrar.Outcome, error) {
	stampActor(ctx, cmd)
	res, err := s.node.Propose(ctx, cmd)
	if err != nil {
		logUnexpected(s.log, "proposal broke off", err)
		return registrar.Outcome{}, err
	}
	return res.Outcome, res.Outcome.Err
}

// read runs a query: linearizable, unless the caller asked for a stale
// read (HeaderConsistency).
func (s *Server) read(ctx context.Context, fn func(r *registrar.Registrar, t registrar.Tick) error) error {
	return s.node.Read(ctx, staleRead(ctx), func(m *statemachine.Machine, t registrar.Tick) error {
		return fn(m.Registrar(), t)
	})
}

// policy returns a namespace's policy from local state (for validation
// before proposing; the state machine decides again on apply).
func (s *Server) policy(ns string) registrar.Policy {
	var p registrar.Policy
	_ = s.node.Read(context.Background(), true, func(m *statemachine.Machine, _ registrar.Tick) error {
		p = m.Registrar().Policy(ns)
		return nil
	})
	return p
}

// leaseProto renders a lease, signing a certificate when asked or when
// the namespace's policy says so. Signing happens here, outside the FSM.
func (s *Server) leaseProto(l registrar.Lease, certificate bool) (*tenurev1.Lease, error) {
	pb := l.Proto()
	if certificate || s.policy(l.Namespace).AlwaysCertify {
		sig, keyID, err := s.node.Certify(l)
		if err != nil {
			return nil, err
		}
		pb.Signature, pb.KeyId = sig, keyID
	}
	return pb, nil
}

func (s *Server) leaseProtos(ls []registrar.Lease, certificate bool) ([]*tenurev1.Lease, error) {
	out := make([]*tenurev1.Lease, len(ls))
	for i, l := range ls {
		var err error
		if out[i], err = s.leaseProto(l, certificate); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkTTL answers TTL_OUT_OF_RANGE before proposing when a ttl lies
// outside the namespace's policy.
func (s *Server) checkTTL(ns, field string, ttl *int64) error {
	if ttl == nil {
		return nil
	}
	p := s.policy(registrar.OrDefault(ns))
	if *ttl >= p.MinTTL && *ttl <= p.MaxTTL {
		return nil
	}
	return ttlOutOfRange(field, *ttl, p.MinTTL, p.MaxTTL)
}

func ttlOutOfRange(field string, ttl, lo, hi int64) error {
	return &registrar.Error{Reason: registrar.ReasonTTLOutOfRange,
		Message: fmt.Sprintf("%s: %s %s is outside [%s, %s]", registrar.ReasonTTLOutOfRange, field,
			registrar.Dur(ttl), registrar.Dur(lo), registrar.Dur(hi)),
		Metadata: map[string]string{"field": field, "ttl_ms": strconv.FormatInt(ttl, 10),
			"min_ttl_ms": strconv.FormatInt(lo, 10), "max_ttl_ms": strconv.FormatInt(hi, 10)}}
}

func positiveTTL(field string, ttl *int64) error {
	if ttl != nil && *ttl <= 0 {
		return &registrar.Error{Reason: registrar.ReasonTTLOutOfRange,
			Message:  fmt.Sprintf("%s: %s must be positive, got %s", registrar.ReasonTTLOutOfRange, field, registrar.Dur(*ttl)),
			Metadata: map[string]string{"field": field, "ttl_ms": strconv.FormatInt(*ttl, 10)}}
	}
	return nil
}

func (h *leaseService) Acquire(ctx context.Context, req *connect.Request[tenurev1.AcquireRequest]) (*connect.Response[tenurev1.AcquireResponse], error) {
	s, m := h.s, req.Msg
	out, err := s.acquire(ctx, m)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.AcquireResponse{Lease: out}), nil
}

func (s *Server) acquire(ctx context.Context, m *tenurev1.AcquireRequest) (*tenurev1.Lease, error) {
	c, err := s.acquireCommand(m)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pctx, cancel := detach(ctx)
	out, err := s.propose(pctx, &logpb.Command{Op: &logpb.Command_Acquire{Acquire: c}})
	cancel()
	if ctx.Err() != nil {
		// The caller went away while the acquire committed: nobody would
		// hold what it was granted, or be told when its wait ends.
		if err == nil {
			go s.abandonAcquire(c.Holder, out)
		}
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	l := out.Lease
	if out.WaiterID != 0 {
		// The wait ends with the caller, or when the server starts to shut
		// down: then the caller is answered (below) before the drain.
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.ctx, cancel)()
		res, err := s.node.AwaitWaiter(wctx, out.WaiterID)
		switch {
		case ctx.Err() != nil:
			go s.abandonWait(out.WaiterID, c.Holder, res)
			return nil, ctx.Err()
		case wctx.Err() != nil && res.Lease.ID != "":
			// Granted as the shutdown began: the caller gets its lease.
		case wctx.Err() != nil:
			if res, err = s.withdrawWait(out.WaiterID, c.Holder); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, err
		}
		if res.Err != nil {
			return nil, res.Err
		}
		l = &res.Lease
	}
	if l == nil {
		return nil, fmt.Errorf("acquire answered neither a lease nor a waiter")
	}
	return s.leaseProto(*l, m.Certificate)
}

// acquireCommand validates an Acquire and builds its command.
func (s *Server) acquireCommand(m *tenurev1.AcquireRequest) (*logpb.Acquire, error) {
	ttl, err := durationMs("ttl", m.Ttl)
	if err != nil {
		return nil, err
	}
	wait, err := durationMs("wait", m.Wait)
	if err != nil {
		return nil, err
	}
	if wait != nil && *wait < 0 {
		return nil, invalidArg("wait", "must not be negative")
	}
	deriv, err := derivation(m.Scope, m.Budget)
	if err != nil {
		return nil, err
	}
	c := &logpb.Acquire{Namespace: m.Namespace, Resource: m.Resource, Holder: m.Holder, TtlMs: ttl, Mode: m.Mode, Derivation: deriv}
	if wait != nil {
		c.WaitMs = *wait
	}
	if err := registrar.ValidateAcquire(c); err != nil {
		return nil, err
	}
	if err := checkPlainResource("resource", m.Resource); err != nil {
		return nil, err
	}
	if err := s.checkTTL(m.Namespace, "ttl", ttl); err != nil {
		return nil, err
	}
	return c, nil
}

// checkPlainResource refuses a resource under the prefix of task or
// piece leases: a plain lease there would block the task or piece it
// names (Claim and RequestLeases pass over a held resource) with nothing
// to tell why.
func checkPlainResource(field, res string) error {
	for _, r := range reservedPrefixes {
		if strings.HasPrefix(res, r.prefix) {
			return invalidArg(field, "resources under "+r.prefix+" are reserved for the leases of "+r.owner)
		}
	}
	return nil
}

var reservedPrefixes = []struct{ prefix, owner string }{
	{queue.ResourcePrefix, "tasks (QueueService.Claim)"},
	{pool.ResourcePrefix, "pieces (PoolService.RequestLeases)"},
}

// abandonWait withdraws the queued acquire of a caller that went away, and
// releases the lease it was granted if the grant won the race, so that no
// resource stays blocked by a lease nobody holds.
func (s *Server) abandonWait(id uint64, holder string, res cluster.WaitResult) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	if res.Lease.ID == "" {
		var err error
		if res, err = s.cancelWait(ctx, id, holder); err != nil {
			s.log.Warn("withdrawing an abandoned wait", "waiter", id, "err", err)
			return
		}
		if res.Lease.ID == "" {
			return
		}
	}
	s.releaseAbandoned(ctx, holder, res.Lease.ID, "a wait")
}

// abandonAcquire gives back what an acquire whose caller went away was
// granted: its lease, or its place in the resource's queue.
func (s *Server) abandonAcquire(holder string, out registrar.Outcome) {
	if out.WaiterID != 0 {
		s.abandonWait(out.WaiterID, holder, cluster.WaitResult{})
		return
	}
	if out.Lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
		defer cancel()
		s.releaseAbandoned(ctx, holder, out.Lease.ID, "an acquire")
	}
}

// detach is the context of a proposal made for ctx's caller that runs to
// its outcome even if the caller goes away meanwhile (within
// abandonTimeout), so that what it granted can be given back.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
}

// abandonTimeout bounds the work done for a caller that went away: the
// outcome of its proposal, and the release of what it was granted.
const abandonTimeout = 10 * time.Second

// releaseAbandoned releases a lease granted to a caller that went away
// (what names the call), so that nothing stays held by no one.
func (s *Server) releaseAbandoned(ctx context.Context, holder, leaseID, what string) {
	if _, err := s.propose(ctx, &logpb.Command{Actor: holder, Op: &logpb.Command_Release{Release: &logpb.Release{
		LeaseId: leaseID, Holder: holder, Reason: tenurev1.ReleaseReason_RELEASE_REASON_ABORTED,
	}}}); err != nil {
		s.log.Warn("releasing the lease of "+what+" whose caller went away", "lease", leaseID, "err", err)
	}
}

// withdrawWait ends the queued acquire of a caller still waiting when the
// server starts to shut down: withdrawn, it is UNAVAILABLE (nothing was
// granted: retry elsewhere); granted meanwhile, the caller gets its lease.
// A withdrawal whose outcome is unknown is OUTCOME_UNKNOWN.
func (s *Server) withdrawWait(id uint64, holder string) (cluster.WaitResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := s.cancelWait(ctx, id, holder)
	switch {
	case err != nil:
		return res, &registrar.Error{Reason: registrar.ReasonOutcomeUnknown, Metadata: map[string]string{"cause": "member_shutdown"},
			Message: string(registrar.ReasonOutcomeUnknown) +
				": the server is shutting down and withdrawing the wait failed (" + err.Error() + "); the acquire may still be granted"}
	case res.Lease.ID == "": // withdrawn (answered as a wait that ended)
		return res, &registrar.Error{Reason: registrar.ReasonUnavailable, Message: string(registrar.ReasonUnavailable) +
			": the server is shutting down; the wait was withdrawn and nothing was granted, retry on another member"}
	}
	return res, nil
}

// cancelWait proposes the withdrawal of waiter id and returns how its wait
// ended: withdrawn (no lease), or granted before the withdrawal applied.
func (s *Server) cancelWait(ctx context.Context, id uint64, holder string) (cluster.WaitResult, error) {
	if _, err := s.propose(ctx, &logpb.Command{Actor: holder, Op: &logpb.Command_CancelWait{CancelWait: &logpb.CancelWait{
		WaiterId: id, Holder: holder,
	}}}); err != nil {
		return cluster.WaitResult{}, err
	}
	// The wait is resolved now, one way or the other.
	return s.node.AwaitWaiter(ctx, id)
}

func validateRenew(c *logpb.Renew) error {
	if len(c.LeaseIds) > registrar.MaxBatchIDs {
		return invalidArg("lease_ids", fmt.Sprintf("lists %d ids; the limit is %d", len(c.LeaseIds), registrar.MaxBatchIDs))
	}
	if err := validateRenewOptions(c); err != nil {
		return err
	}
	switch {
	case len(c.LeaseIds) == 0 && !c.AllOfHolder:
		return invalidArg("lease_ids", "name at least one lease, or set all_of_holder")
	case len(c.LeaseIds) > 0 && c.AllOfHolder:
		return invalidArg("lease_ids", "name leases or set all_of_holder, not both")
	}
	for i, id := range c.LeaseIds {
		if err := registrar.CheckLeaseIDText("lease_ids["+strconv.Itoa(i)+"]", id); err != nil {
			return err
		}
	}
	return nil
}

// validateRenewOptions checks what a Renew asks besides its lease ids.
func validateRenewOptions(c *logpb.Renew) error {
	if err := registrar.CheckIdentifier("holder", c.Holder, c.AllOfHolder); err != nil {
		return err
	}
	if err := registrar.CheckNamespace("namespace", c.Namespace, false); err != nil {
		return err
	}
	return positiveTTL("ttl", c.TtlMs)
}

func failures(fs []registrar.Failure) []*tenurev1.RenewFailure {
	out := make([]*tenurev1.RenewFailure, len(fs))
	for i, f := range fs {
		e := registrar.ToError(f.Err)
		out[i] = &tenurev1.RenewFailure{LeaseId: f.LeaseID, Reason: string(e.Reason), Message: e.Message}
	}
	return out
}

func (h *leaseService) Renew(ctx context.Context, req *connect.Request[tenurev1.RenewRequest]) (*connect.Response[tenurev1.RenewResponse], error) {
	s, m := h.s, req.Msg
	ttl, err := durationMs("ttl", m.Ttl)
	if err != nil {
		return nil, s.toConnect(err)
	}
	c := &logpb.Renew{LeaseIds: m.LeaseIds, Holder: m.Holder, AllOfHolder: m.AllOfHolder, Namespace: m.Namespace, TtlMs: ttl}
	// With several ids every failure is listed (API.md), a malformed id
	// too, as KeepAlive does; with one, it is the call's error.
	several := len(m.LeaseIds) > 1
	var bad []registrar.Failure
	if several && !m.AllOfHolder && len(m.LeaseIds) <= registrar.MaxBatchIDs {
		c.LeaseIds, bad = splitLeaseIDs(m.LeaseIds)
	}
	var out registrar.Outcome
	if len(c.LeaseIds) > 0 || len(bad) == 0 {
		if err := validateRenew(c); err != nil {
			return nil, s.toConnect(err)
		}
		if out, err = s.renewOwn(ctx, c, several); err != nil {
			return nil, s.toConnect(err)
		}
	} else if err := validateRenewOptions(c); err != nil {
		// Every id is malformed: the rest of the request is still checked.
		return nil, s.toConnect(err)
	}
	out.Failures = inRequestOrder(append(bad, out.Failures...), m.LeaseIds)
	leases, err := s.leaseProtos(out.Leases, m.Certificate)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.RenewResponse{Leases: leases, Failures: failures(out.Failures)}), nil
}

// inRequestOrder sorts a batch's failures by where their ids first come
// in the request (malformed ids are found before the rest, and leases the
// caller may not renew before those it may).
func inRequestOrder(fs []registrar.Failure, ids []string) []registrar.Failure {
	if len(fs) < 2 {
		return fs
	}
	// An id asked for twice has a place for each time: its failures take
	// them in turn.
	places := make(map[string][]int, len(ids))
	for i, id := range ids {
		places[id] = append(places[id], i)
	}
	at := make([]int, len(fs))
	for i, f := range fs {
		if p := places[f.LeaseID]; len(p) > 0 {
			at[i], places[f.LeaseID] = p[0], p[1:]
		} else {
			at[i] = len(ids)
		}
	}
	order := make([]int, len(fs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(at[a], at[b]) })
	out := make([]registrar.Failure, len(fs))
	for i, j := range order {
		out[i] = fs[j]
	}
	return out
}

// renewOwn renews c's leases that the caller may renew (all of them
// without authentication) and lists the others as failures. A renewal of
// one id (the caller did not ask about several) answers its failure as
// the error, as the registrar does.
func (s *Server) renewOwn(ctx context.Context, c *logpb.Renew, several bool) (registrar.Outcome, error) {
	own, denied, err := s.ownLeases(ctx, c.LeaseIds)
	if err != nil {
		return registrar.Outcome{}, err
	}
	if len(denied) > 0 && !several && !c.AllOfHolder {
		return registrar.Outcome{}, denied[0].Err
	}
	var out registrar.Outcome
	if len(own) > 0 || c.AllOfHolder {
		rc := &logpb.Renew{LeaseIds: own, Holder: c.Holder, AllOfHolder: c.AllOfHolder, Namespace: c.Namespace, TtlMs: c.TtlMs}
		cmd := &logpb.Command{Op: &logpb.Command_Renew{Renew: rc}}
		stampActor(ctx, cmd)
		res, err := s.node.Propose(ctx, cmd)
		if err != nil {
			logUnexpected(s.log, "proposal broke off", err)
			return registrar.Outcome{}, err
		}
		out = res.Outcome
		if out.Err != nil {
			if len(own) != 1 || c.AllOfHolder || !several {
				return registrar.Outcome{}, out.Err
			}
			// The one remaining id's failure came back as the call's
			// error; the caller asked about several.
			out.Failures, out.Err = append(out.Failures, registrar.Failure{LeaseID: own[0], Err: out.Err}), nil
		}
	}
	out.Failures = append(denied, out.Failures...)
	return out, nil
}

func (h *leaseService) Release(ctx context.Context, req *connect.Request[tenurev1.ReleaseRequest]) (*connect.Response[tenurev1.ReleaseResponse], error) {
	s, m := h.s, req.Msg
	c, err := releaseCommand(m)
	if err != nil {
		return nil, s.toConnect(err)
	}
	out, err := s.propose(ctx, &logpb.Command{Op: &logpb.Command_Release{Release: c}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(releaseResponse(out)), nil
}

// releaseCommand validates a Release and builds its command.
func releaseCommand(m *tenurev1.ReleaseRequest) (*logpb.Release, error) {
	if err := registrar.CheckLeaseIDText("lease_id", m.LeaseId); err != nil {
		return nil, err
	}
	if err := registrar.CheckIdentifier("holder", m.Holder, true); err != nil {
		return nil, err
	}
	if _, err := registrar.CheckReleaseReason(m.Reason); err != nil {
		return nil, err
	}
	return &logpb.Release{LeaseId: m.LeaseId, Holder: m.Holder, Reason: m.Reason}, nil
}

func releaseResponse(out registrar.Outcome) *tenurev1.ReleaseResponse {
	resp := &tenurev1.ReleaseResponse{AlreadyTerminal: out.AlreadyTerminal}
	if out.Lease != nil {
		resp.Lease = out.Lease.Proto()
	}
	return resp
}

func (h *leaseService) Revoke(ctx context.Context, req *connect.Request[tenurev1.RevokeRequest]) (*connect.Response[tenurev1.RevokeResponse], error) {
	s, m := h.s, req.Msg
	if err := registrar.CheckLeaseIDText("lease_id", m.LeaseId); err != nil {
		return nil, s.toConnect(err)
	}
	if err := registrar.CheckReason("reason", m.Reason); err != nil {
		return nil, s.toConnect(err)
	}
	out, err := s.propose(ctx, &logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: m.LeaseId, Reason: m.Reason}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.RevokeResponse{Lease: out.Lease.Proto()}), nil
}

func (h *leaseService) Transfer(ctx context.Context, req *connect.Request[tenurev1.TransferRequest]) (*connect.Response[tenurev1.TransferResponse], error) {
	s, m := h.s, req.Msg
	ttl, err := durationMs("ttl", m.Ttl)
	if err != nil {
		return nil, s.toConnect(err)
	}
	for _, check := range []error{
		registrar.CheckLeaseIDText("lease_id", m.LeaseId),
		registrar.CheckIdentifier("holder", m.Holder, true),
		registrar.CheckIdentifier("new_holder", m.NewHolder, true),
		positiveTTL("ttl", ttl),
	} {
		if check != nil {
			return nil, s.toConnect(check)
		}
	}
	out, err := s.propose(ctx, &logpb.Command{Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{
		LeaseId: m.LeaseId, Holder: m.Holder, NewHolder: m.NewHolder, TtlMs: ttl, CarryLimits: true,
	}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	nl, err := s.leaseProto(*out.Lease, m.Certificate)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.TransferResponse{Released: out.Released.Proto(), Lease: nl}), nil
}

func (h *leaseService) Verify(ctx context.Context, req *connect.Request[tenurev1.VerifyRequest]) (*connect.Response[tenurev1.VerifyResponse], error) {
	s := h.s
	if len(req.Msg.LeaseIds) == 0 {
		return nil, s.toConnect(invalidArg("lease_ids", "name at least one lease"))
	}
	var results []registrar.VerifyResult
	err := s.read(ctx, func(r *registrar.Registrar, t registrar.Tick) error {
		var err error
		results, err = r.Verify(req.Msg.LeaseIds, t)
		return err
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	resp := &tenurev1.VerifyResponse{Results: make([]*tenurev1.VerifyResult, len(results))}
	for i, v := range results {
		resp.Results[i] = &tenurev1.VerifyResult{LeaseId: v.LeaseID, Found: v.Found}
		if v.Found {
			resp.Results[i].Lease = v.Lease.Proto()
		}
	}
	return connect.NewResponse(resp), nil
}

func (h *leaseService) DeclareRestart(ctx context.Context, req *connect.Request[tenurev1.DeclareRestartRequest]) (*connect.Response[tenurev1.DeclareRestartResponse], error) {
	s, m := h.s, req.Msg
	grace, err := durationMs("grace", m.Grace)
	if err != nil {
		return nil, s.toConnect(err)
	}
	if grace != nil && *grace <= 0 {
		return nil, s.toConnect(invalidArg("grace", "must be positive"))
	}
	if err := registrar.CheckIdentifier("holder", m.Holder, true); err != nil {
		return nil, s.toConnect(err)
	}
	if err := registrar.CheckNamespace("namespace", m.Namespace, false); err != nil {
		return nil, s.toConnect(err)
	}
	out, err := s.propose(ctx, &logpb.Command{Op: &logpb.Command_DeclareRestart{DeclareRestart: &logpb.DeclareRestart{
		Holder: m.Holder, Namespace: m.Namespace, GraceMs: grace,
	}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	leases, err := s.leaseProtos(out.Leases, false)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.DeclareRestartResponse{Leases: leases}), nil
}

func (h *leaseService) Get(ctx context.Context, req *connect.Request[tenurev1.GetRequest]) (*connect.Response[tenurev1.GetResponse], error) {
	s := h.s
	var l registrar.Lease
	err := s.read(ctx, func(r *registrar.Registrar, t registrar.Tick) error {
		var err error
		l, err = r.Get(req.Msg.LeaseId, t)
		return err
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	pb, err := s.leaseProto(l, req.Msg.Certificate && l.State == registrar.Active)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.GetResponse{Lease: pb}), nil
}

func (h *leaseService) List(ctx context.Context, req *connect.Request[tenurev1.ListRequest]) (*connect.Response[tenurev1.ListResponse], error) {
	s, m := h.s, req.Msg
	q := registrar.ListQuery{Namespace: m.Namespace, Prefix: m.Prefix, Resource: m.Resource, Holder: m.Holder,
		ExpiredUnmarked: m.ExpiredUnmarked, PageSize: int(m.PageSize), PageToken: m.PageToken}
	for _, st := range m.States {
		q.States = append(q.States, registrar.StateFromProto(st))
	}
	resp := &tenurev1.ListResponse{Counts: &tenurev1.LeaseCounts{}}
	err := s.read(ctx, func(r *registrar.Registrar, t registrar.Tick) error {
		leases, next, err := r.List(q, t)
		if err != nil {
			return err
		}
		resp.NextPageToken = next
		for _, l := range leases {
			resp.Leases = append(resp.Leases, l.Proto())
		}
		c := resp.Counts
		c.Active, c.Released, c.Expired, c.Revoked, c.Waiters = r.Counts(registrar.OrDefault(m.Namespace))
		if m.Resource != "" {
			for _, w := range r.Waiters(registrar.OrDefault(m.Namespace), m.Resource) {
				if m.Holder != "" && w.Holder != m.Holder {
					continue // the holder filter narrows the queue too
				}
				resp.Waiters = append(resp.Waiters, &tenurev1.Waiter{WaiterId: strconv.FormatUint(w.ID, 10), Holder: w.Holder,
					Mode: tenurev1.Mode(w.Mode), WaitRemaining: durationpb.New(time.Duration(max(int64(w.Deadline-t), 0)) * time.Millisecond)})
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}

func (h *leaseService) CheckFence(ctx context.Context, req *connect.Request[tenurev1.CheckFenceRequest]) (*connect.Response[tenurev1.CheckFenceResponse], error) {
	s, m := h.s, req.Msg
	resp := &tenurev1.CheckFenceResponse{}
	err := s.read(ctx, func(r *registrar.Registrar, t registrar.Tick) error {
		var err error
		resp.Current, resp.ActiveFence, err = r.Fence(m.Namespace, m.Resource, m.Fence, t)
		return err
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}

func (h *leaseService) ReadState(ctx context.Context, req *connect.Request[tenurev1.ReadStateRequest]) (*connect.Response[tenurev1.ReadStateResponse], error) {
	s, m := h.s, req.Msg
	resp := &tenurev1.ReadStateResponse{}
	err := s.read(ctx, func(r *registrar.Registrar, _ registrar.Tick) error {
		var err error
		resp.Data, resp.Epoch, err = r.ReadState(m.Namespace, m.Resource)
		return err
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}

func (h *leaseService) WriteState(ctx context.Context, req *connect.Request[tenurev1.WriteStateRequest]) (*connect.Response[tenurev1.WriteStateResponse], error) {
	s, m := h.s, req.Msg
	for _, check := range []error{
		registrar.CheckNamespace("namespace", m.Namespace, false),
		registrar.CheckResource("resource", m.Resource),
		registrar.CheckLeaseIDText("lease_id", m.LeaseId),
	} {
		if check != nil {
			return nil, s.toConnect(check)
		}
	}
	if len(m.Data) > registrar.MaxStateBytes {
		return nil, s.toConnect(invalidArg("data", fmt.Sprintf("is %d bytes; the limit is %d", len(m.Data), registrar.MaxStateBytes)))
	}
	out, err := s.propose(ctx, &logpb.Command{Op: &logpb.Command_WriteState{WriteState: &logpb.WriteState{
		Namespace: m.Namespace, Resource: m.Resource, LeaseId: m.LeaseId, ExpectedEpoch: m.ExpectedEpoch, Data: m.Data,
	}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.WriteStateResponse{Epoch: out.Epoch}), nil
}

// History answers a resource's events from the in-memory feed (the most
// recent cluster.DefaultFeedSize records of the whole registrar, read back
// from the ledger files at a restart), through its index by resource: the
// resource's own events, not a scan of the feed. Events within the
// retention that the feed no longer holds are searched for in the
// member's ledger files (historyFromLedger).
func (h *leaseService) History(ctx context.Context, req *connect.Request[tenurev1.HistoryRequest]) (*connect.Response[tenurev1.HistoryResponse], error) {
	s, m := h.s, req.Msg
	if err := registrar.CheckNamespace("namespace", m.Namespace, false); err != nil {
		return nil, s.toConnect(err)
	}
	if err := registrar.CheckResource("resource", m.Resource); err != nil {
		return nil, s.toConnect(err)
	}
	limit := int(m.Limit)
	switch {
	case limit < 0 || limit > registrar.MaxPageSize:
		return nil, s.toConnect(invalidArg("limit", fmt.Sprintf("must be between 0 and %d", registrar.MaxPageSize)))
	case limit == 0:
		limit = registrar.DefaultPageSize
	}
	ns := registrar.OrDefault(m.Namespace)
	// History older than the namespace's history retention is not shown.
	// The read is linearizable unless the caller asked for a stale one:
	// once it returns, the feed holds every event acknowledged before the
	// call.
	var cutoff registrar.Tick
	if err := s.node.Read(ctx, staleRead(ctx), func(mc *statemachine.Machine, t registrar.Tick) error {
		cutoff = t - registrar.Tick(mc.Registrar().Policy(ns).HistoryRetention)
		return nil
	}); err != nil {
		return nil, s.toConnect(err)
	}
	resp := &tenurev1.HistoryResponse{}
	feed := s.node.Feed()
	last := 0
	if m.Latest {
		last = limit
	}
	var events []statemachine.Sealed
	feed.HistoryLast(ns, m.Resource, m.AfterIndex, last, func(sl statemachine.Sealed) bool {
		if registrar.Tick(sl.Record.Tick) >= cutoff {
			events = append(events, sl)
		}
		return len(events) < limit
	})
	from := max(m.AfterIndex+1, 1)
	oldest, ok := feed.OldestRecord()
	if ok {
		// Records may have left the feed since it was read: the events
		// before its oldest now are the files' to answer (as the ones
		// that left before it was read), so that none is answered twice.
		events = slices.DeleteFunc(events, func(sl statemachine.Sealed) bool { return sl.Record.Index < oldest.Record.Index })
	}
	if ok && oldest.Record.Index > from && registrar.Tick(oldest.Record.Tick) >= cutoff {
		// The feed no longer reaches back as far as asked, within the
		// retention: the ledger files hold the events before it.
		var complete uint64
		events, complete = s.historyFromLedger(ctx, ns, m.Resource, from, oldest, cutoff, limit, m.Latest, events)
		// Say so when the answer may still lack older events.
		if complete > from {
			at := oldest
			if complete < oldest.Record.Index {
				at, _ = s.ledgerRecordAt(ctx, complete)
			}
			resp.OldestIndex = complete
			if at.Record != nil {
				resp.OldestTime = timestamppb.New(time.UnixMilli(at.Record.Wall))
			}
		}
	}
	for _, sl := range events {
		resp.Events = append(resp.Events, renderEvent(sl))
	}
	return connect.NewResponse(resp), nil
}

// historyScanBytes bounds the ledger files one History call reads (about
// a second of one core): a call whose answer lies further back answers
// what the feed holds and says how far back that reaches.
const historyScanBytes = 256 << 20

// historyFromLedger completes a History answer whose events (feed, from
// the feed: oldest is the feed's oldest record) may begin before the
// feed: it searches this member's ledger files from index from up to the
// feed, for the resource's events since cutoff. It returns the answer's
// events and the index from which the answer is complete (from itself
// when nothing is missing). When the files cannot bridge the range up to
// the feed (a start marker, damage, the byte budget), it answers the
// events of the run it could read if they already make a page of the
// oldest events (after_index paging resumes there), else the feed's
// alone, complete from the feed's oldest record.
func (s *Server) historyFromLedger(ctx context.Context, ns, resource string, from uint64, oldest statemachine.Sealed,
	cutoff registrar.Tick, limit int, latest bool, feed []statemachine.Sealed) ([]statemachine.Sealed, uint64) {
	to := oldest.Record.Index
	if latest && len(feed) >= limit {
		return feed, from // the newest are all in the feed
	}
	literal := []byte(literalOf(resource))
	q := ledger.Query{
		From: from, To: to, MinTick: int64(cutoff), MaxBytes: historyScanBytes,
		Match: func(enc []byte) bool { return bytes.Contains(enc, literal) },
		Keep: func(rec *logpb.Record) bool {
			n, r := eventScope(rec)
			return r == resource && registrar.OrDefault(n) == ns
		},
	}
	if latest {
		q.Last = limit - len(feed)
	} else {
		q.First = limit
	}
	found, err := s.node.FindInLedger(ctx, ns, resource, q)
	if err != nil {
		s.log.Debug("history: reading the ledger files", "resource", resource, "err", err)
	}
	older := make([]statemachine.Sealed, len(found.Records))
	for i, r := range found.Records {
		older[i] = statemachine.Sealed{Record: r.Record, Bytes: r.Bytes, Hash: r.Hash}
	}
	switch {
	case err == nil && found.Next == to:
		out := append(older, feed...)
		if !latest && len(out) > limit {
			out = out[:limit]
		}
		return out, found.From
	case err == nil && !latest && len(older) == limit:
		return older, found.From
	}
	return feed, to
}

// literalOf is a part of a resource name that every record of the
// resource holds as is: the name itself, but for the resources of task
// and piece leases, which their records name by their parts (a queue's or
// pool's name, then the task id or file and piece numbers).
func literalOf(resource string) string {
	for _, p := range []string{queue.ResourcePrefix, pool.ResourcePrefix} {
		if rest, ok := strings.CutPrefix(resource, p); ok {
			name, _, _ := strings.Cut(rest, "/")
			return name
		}
	}
	return resource
}

// ledgerRecordAt reads one record from this member's ledger files.
func (s *Server) ledgerRecordAt(ctx context.Context, index uint64) (statemachine.Sealed, bool) {
	found, err := s.node.FindInLedger(ctx, "", "", ledger.Query{From: index, To: index + 1, First: 1,
		Keep: func(*logpb.Record) bool { return true }})
	if err != nil || len(found.Records) == 0 || found.From != index {
		return statemachine.Sealed{}, false
	}
	r := found.Records[0]
	return statemachine.Sealed{Record: r.Record, Bytes: r.Bytes, Hash: r.Hash}, true
}
