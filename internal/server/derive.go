package server

import (
	"context"
	"strings"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Derived leases (DESIGN §1.6; API.md, Derive/Consume/Authorize/Tree):
// the handlers validate what they can without state, propose, and render.
// The registrar decides scopes and budgets.

// derivation turns a wire scope and budget into the registrar's form
// (nil when both are empty), validated.
func derivation(sc *tenurev1.Scope, b *tenurev1.Budget) (*logpb.Derivation, error) {
	if len(sc.GetNamespaces())+len(sc.GetResourcePrefixes())+len(sc.GetActions())+len(b.GetLimits()) == 0 {
		return nil, nil
	}
	d := &logpb.Derivation{
		Namespaces: sc.GetNamespaces(), ResourcePrefixes: sc.GetResourcePrefixes(), Actions: sc.GetActions(),
	}
	for name, limit := range b.GetLimits() {
		d.Limits = append(d.Limits, &logpb.CounterLimit{Counter: name, Limit: limit})
	}
	return registrar.ValidateDerivation(d)
}

func (h *leaseService) Derive(ctx context.Context, req *connect.Request[tenurev1.DeriveRequest]) (*connect.Response[tenurev1.DeriveResponse], error) {
	s, m := h.s, req.Msg
	ttl, err := durationMs("ttl", m.Ttl)
	if err != nil {
		return nil, s.toConnect(err)
	}
	d, err := derivation(m.Scope, m.Budget)
	if err != nil {
		return nil, s.toConnect(err)
	}
	for _, check := range []error{
		registrar.CheckLeaseIDText("parent_lease_id", m.ParentLeaseId),
		registrar.CheckIdentifier("holder", m.Holder, true),
		registrar.CheckIdentifier("new_holder", m.NewHolder, false),
		registrar.CheckNamespace("namespace", m.Namespace, false),
		registrar.CheckResource("resource", m.Resource),
		checkPlainResource("resource", m.Resource),
		positiveTTL("ttl", ttl),
	} {
		if check != nil {
			return nil, s.toConnect(check)
		}
	}
	if m.Namespace != "" {
		if err := s.checkTTL(m.Namespace, "ttl", ttl); err != nil {
			return nil, s.toConnect(err)
		}
	}
	out, err := s.propose(ctx, &logpb.Command{Actor: m.Holder, Op: &logpb.Command_Derive{Derive: &logpb.Derive{
		ParentLeaseId: m.ParentLeaseId, Holder: m.Holder, NewHolder: m.NewHolder, Namespace: m.Namespace,
		Resource: m.Resource, TtlMs: ttl, Mode: m.Mode, Derivation: d,
	}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	l, err := s.leaseProto(*out.Lease, m.Certificate)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.DeriveResponse{Lease: l}), nil
}

func (h *leaseService) Consume(ctx context.Context, req *connect.Request[tenurev1.ConsumeRequest]) (*connect.Response[tenurev1.ConsumeResponse], error) {
	s, m := h.s, req.Msg
	for _, check := range []error{
		registrar.CheckLeaseIDText("lease_id", m.LeaseId),
		registrar.CheckIdentifier("counter", m.Counter, true),
		registrar.CheckIdentifier("holder", m.Holder, false),
	} {
		if check != nil {
			return nil, s.toConnect(check)
		}
	}
	if m.Amount <= 0 || m.Amount > registrar.MaxAmount {
		return nil, s.toConnect(invalidArg("amount", "must be positive and at most 2^53"))
	}
	out, err := s.propose(ctx, &logpb.Command{Actor: m.Holder, Op: &logpb.Command_Consume{Consume: &logpb.Consume{
		LeaseId: m.LeaseId, Counter: m.Counter, Amount: m.Amount, Holder: m.Holder,
	}}})
	if err != nil {
		return nil, s.toConnect(err)
	}
	resp := &tenurev1.ConsumeResponse{Remaining: map[string]int64{}, Lease: out.Lease.Proto()}
	for _, c := range out.Lease.Counters {
		if c.Limited {
			resp.Remaining[c.Name] = c.Remaining()
		}
	}
	return connect.NewResponse(resp), nil
}

func (h *leaseService) Authorize(ctx context.Context, req *connect.Request[tenurev1.AuthorizeRequest]) (*connect.Response[tenurev1.AuthorizeResponse], error) {
	s, m := h.s, req.Msg
	var denied *registrar.Error
	err := s.read(ctx, func(r *registrar.Registrar, t registrar.Tick) error {
		var err error
		denied, err = r.Authorize(m.LeaseId, m.Namespace, m.Resource, m.Action, t)
		return err
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	if denied != nil {
		// A denial is an answer, not an error (API.md).
		return connect.NewResponse(&tenurev1.AuthorizeResponse{Reason: denied.Message}), nil
	}
	return connect.NewResponse(&tenurev1.AuthorizeResponse{Allowed: true}), nil
}

func (h *leaseService) Tree(ctx context.Context, req *connect.Request[tenurev1.TreeRequest]) (*connect.Response[tenurev1.TreeResponse], error) {
	s := h.s
	var ls []registrar.Lease
	err := s.read(ctx, func(r *registrar.Registrar, t registrar.Tick) error {
		var err error
		ls, err = r.Tree(req.Msg.LeaseId, t)
		return err
	})
	if err != nil {
		return nil, s.toConnect(err)
	}
	resp := &tenurev1.TreeResponse{Leases: make([]*tenurev1.Lease, len(ls))}
	for i, l := range ls {
		resp.Leases[i] = l.Proto()
	}
	return connect.NewResponse(resp), nil
}

// renderTreeEvent adds what a lease tree record says to an event.
func renderTreeEvent(d map[string]string, dv *logpb.Derivation) {
	if dv == nil {
		return
	}
	if dv.ParentSeq != 0 {
		d["parent_fence"] = utoa(dv.ParentSeq)
		d["parent_lease_id"] = dv.ParentLeaseId
	}
	if len(dv.Namespaces) > 0 {
		d["scope_namespaces"] = strings.Join(dv.Namespaces, ",")
	}
	if len(dv.ResourcePrefixes) > 0 {
		d["scope_resource_prefixes"] = strings.Join(dv.ResourcePrefixes, ",")
	}
	if len(dv.Actions) > 0 {
		d["scope_actions"] = strings.Join(dv.Actions, ",")
	}
	for _, cl := range dv.Limits {
		d["budget_"+cl.Counter] = itoa(cl.Limit)
	}
}
