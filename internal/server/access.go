package server

import (
	"reflect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Access control: the one place that says who may call what
// (docs/security.md). Each procedure needs one of its roles (admin
// passes every check) and names, through its request, what it touches:
//
//   - namespace: must match one of the caller's namespace patterns
//     (an empty namespace is "default", except where anyNamespace says
//     that it means "all of them": then the handler restricts the answer,
//     or the holder check does);
//   - acting: the field naming who acts (holder, worker, peer). Empty, it
//     is filled with the caller's principal; naming anyone else is
//     PERMISSION_DENIED, except for an admin;
//   - leases: lease ids the request acts on, which must be the caller's
//     own and in its namespaces. That needs state, so it is checked by
//     the member that runs the request (after forwarding), just before
//     the handler: see checkLeases;
//   - reads by lease id (Get, Verify) are filtered after the handler: a
//     lease outside the caller's namespaces reads as not found; reads of
//     one lease's relations (Authorize, Tree) are checked before it, the
//     same way (reads), and Tree's answer is filtered too.

// any role at all (an authenticated principal with no role gets nothing).
var anyRole = []auth.Role{auth.RoleHolder, auth.RoleWorker, auth.RoleReader}

var (
	holderOnly = []auth.Role{auth.RoleHolder}
	workerOnly = []auth.Role{auth.RoleWorker}
	readerOnly = []auth.Role{auth.RoleReader}
	adminOnly  = []auth.Role{auth.RoleAdmin}
	workerRead = []auth.Role{auth.RoleWorker, auth.RoleReader}
	// holderWorker may renew: a worker keeps its task and piece leases
	// alive (Renew, KeepAlive) as a holder does its own.
	holderWorker = []auth.Role{auth.RoleHolder, auth.RoleWorker}
)

// target is what a request names, for the checks above.
type target struct {
	namespace    string
	hasNamespace bool
	anyNamespace bool // "" means every namespace
	// holderWide: the request acts on every lease of a holder (Renew with
	// all_of_holder, DeclareRestart), in every namespace when it names
	// none; nsField is its namespace field, which a principal confined to
	// one namespace gets filled in (see authorize).
	holderWide bool
	nsField    *string
	// acting points at the request field naming who acts, and field is its name.
	acting *string
	field  string
	leases []string
	// byIDs: the request acts on leases it names by id that its handler
	// checks (Renew): an admin's empty acting field stays empty, for the
	// leases' own holders.
	byIDs bool
	// reads: lease ids the request reads, which must be in the caller's
	// namespaces (held by anyone); checked like leases.
	reads []string
	// whole names what the request acts on when it reaches past any one
	// namespace (the server-wide policy defaults, the cluster's
	// membership, a snapshot of every namespace's state): only an admin
	// of every namespace (namespace "*") may. "" for none.
	whole string
}

// rule is one procedure's access rule.
type rule struct {
	// roles: the caller needs one of them (none listed: any
	// authenticated principal may call).
	roles  []auth.Role
	target func(msg any) target
}

// checkNamespaceOf refuses a request that names a namespace no one may
// use (registrar.CheckNamespace: a '*', white space at either end). It is
// checked where requests come in, with or without authentication, and not
// where commands apply: a log written before the check replays as it did
// (found from outside: a member upgraded in a cluster, or restarted on its
// data dir, applied such an entry differently from the others). A
// RequestLeases answers it as its other invalid requests (invalidRequest).
func checkNamespaceOf(proc string, msg any) error {
	ru, ok := rules[proc]
	if !ok || msg == nil || reflect.ValueOf(msg).IsNil() || proc == v1c.PoolServiceRequestLeasesProcedure {
		return nil
	}
	if t := ru.target(msg); t.hasNamespace && t.namespace != "" {
		return registrar.CheckNamespace("namespace", t.namespace, false)
	}
	return nil
}

func ns(n string) target { return target{namespace: n, hasNamespace: true} }

func nsActing(n string, acting *string, field string) target {
	return target{namespace: n, hasNamespace: true, acting: acting, field: field}
}

func none(any) target { return target{} }

// rules maps every procedure to its rule. A procedure missing here is
// refused (PERMISSION_DENIED) when authentication is on: a new RPC must
// be given a rule before anyone can call it.
var rules = map[string]rule{
	// LeaseService.
	v1c.LeaseServiceAcquireProcedure: {holderOnly, func(m any) target {
		r := m.(*tenurev1.AcquireRequest)
		return nsActing(r.Namespace, &r.Holder, "holder")
	}},
	v1c.LeaseServiceRenewProcedure: {holderWorker, func(m any) target {
		r := m.(*tenurev1.RenewRequest)
		// Its lease ids are checked by the handler (ownLeases), one by one.
		byIDs := len(r.LeaseIds) > 0 && !r.AllOfHolder
		return target{namespace: r.Namespace, hasNamespace: true, anyNamespace: true, acting: &r.Holder, field: "holder",
			byIDs: byIDs, holderWide: !byIDs, nsField: &r.Namespace}
	}},
	// A worker gives back its task and piece leases (a draining Worker
	// returns its tasks), as it renews them.
	v1c.LeaseServiceReleaseProcedure: {holderWorker, func(m any) target {
		r := m.(*tenurev1.ReleaseRequest)
		return target{acting: &r.Holder, field: "holder", leases: []string{r.LeaseId}}
	}},
	v1c.LeaseServiceRevokeProcedure: {adminOnly, func(m any) target {
		return target{leases: []string{m.(*tenurev1.RevokeRequest).LeaseId}}
	}},
	v1c.LeaseServiceTransferProcedure: {holderOnly, func(m any) target {
		r := m.(*tenurev1.TransferRequest)
		return target{acting: &r.Holder, field: "holder", leases: []string{r.LeaseId}}
	}},
	v1c.LeaseServiceDeclareRestartProcedure: {holderOnly, func(m any) target {
		r := m.(*tenurev1.DeclareRestartRequest)
		return target{namespace: r.Namespace, hasNamespace: true, anyNamespace: true, acting: &r.Holder, field: "holder",
			holderWide: true, nsField: &r.Namespace}
	}},
	v1c.LeaseServiceVerifyProcedure: {anyRole, none},
	v1c.LeaseServiceGetProcedure:    {anyRole, none},
	// A worker lists leases as it lists tasks: a peer finds its piece
	// leases (PieceLeases).
	v1c.LeaseServiceListProcedure: {workerRead, func(m any) target { return ns(m.(*tenurev1.ListRequest).Namespace) }},
	v1c.LeaseServiceCheckFenceProcedure: {anyRole, func(m any) target {
		return ns(m.(*tenurev1.CheckFenceRequest).Namespace)
	}},
	v1c.LeaseServiceReadStateProcedure: {anyRole, func(m any) target {
		return ns(m.(*tenurev1.ReadStateRequest).Namespace)
	}},
	v1c.LeaseServiceWriteStateProcedure: {holderOnly, func(m any) target {
		r := m.(*tenurev1.WriteStateRequest)
		return target{namespace: r.Namespace, hasNamespace: true, leases: []string{r.LeaseId}}
	}},
	v1c.LeaseServiceHistoryProcedure: {readerOnly, func(m any) target { return ns(m.(*tenurev1.HistoryRequest).Namespace) }},
	v1c.LeaseServiceWatchProcedure: {readerOnly, func(m any) target {
		return target{namespace: m.(*tenurev1.WatchRequest).Namespace, hasNamespace: true, anyNamespace: true}
	}},
	// Derived leases: deriving and consuming act on one's own lease (the
	// child may be held by another principal: that is delegation);
	// Authorize and Tree read a lease of one's namespaces.
	v1c.LeaseServiceDeriveProcedure: {holderOnly, func(m any) target {
		r := m.(*tenurev1.DeriveRequest)
		return target{namespace: r.Namespace, hasNamespace: r.Namespace != "", acting: &r.Holder, field: "holder",
			leases: []string{r.ParentLeaseId}}
	}},
	v1c.LeaseServiceConsumeProcedure: {holderOnly, func(m any) target {
		r := m.(*tenurev1.ConsumeRequest)
		return target{acting: &r.Holder, field: "holder", leases: []string{r.LeaseId}}
	}},
	v1c.LeaseServiceAuthorizeProcedure: {anyRole, func(m any) target {
		return target{reads: []string{m.(*tenurev1.AuthorizeRequest).LeaseId}}
	}},
	v1c.LeaseServiceTreeProcedure: {anyRole, func(m any) target {
		return target{reads: []string{m.(*tenurev1.TreeRequest).LeaseId}}
	}},
	// Streams of operations: each message is checked with the rule of
	// the unary RPC it stands for (KeepAlive: Renew; Pipeline: its op).
	v1c.LeaseServiceKeepAliveProcedure: {holderWorker, none},
	v1c.LeaseServicePipelineProcedure:  {anyRole, none},

	// QueueService.
	v1c.QueueServiceEnqueueProcedure: {workerOnly, func(m any) target { return ns(m.(*tenurev1.EnqueueRequest).Namespace) }},
	v1c.QueueServiceClaimProcedure: {workerOnly, func(m any) target {
		r := m.(*tenurev1.ClaimRequest)
		return nsActing(r.Namespace, &r.Worker, "worker")
	}},
	v1c.QueueServiceCompleteProcedure: {workerOnly, func(m any) target {
		r := m.(*tenurev1.CompleteRequest)
		return target{namespace: r.Namespace, hasNamespace: true, leases: []string{r.LeaseId}}
	}},
	v1c.QueueServiceFailProcedure: {workerOnly, func(m any) target {
		r := m.(*tenurev1.FailRequest)
		return target{namespace: r.Namespace, hasNamespace: true, leases: []string{r.LeaseId}}
	}},
	v1c.QueueServiceCancelProcedure: {workerOnly, func(m any) target { return ns(m.(*tenurev1.CancelRequest).Namespace) }},
	v1c.QueueServiceRetryProcedure:  {workerOnly, func(m any) target { return ns(m.(*tenurev1.RetryRequest).Namespace) }},
	v1c.QueueServiceSetQueueConfigProcedure: {workerOnly, func(m any) target {
		return ns(m.(*tenurev1.SetQueueConfigRequest).Namespace)
	}},
	v1c.QueueServiceGetTaskProcedure:    {workerRead, func(m any) target { return ns(m.(*tenurev1.GetTaskRequest).Namespace) }},
	v1c.QueueServiceListTasksProcedure:  {workerRead, func(m any) target { return ns(m.(*tenurev1.ListTasksRequest).Namespace) }},
	v1c.QueueServiceStatsProcedure:      {workerRead, func(m any) target { return ns(m.(*tenurev1.QueueStatsRequest).Namespace) }},
	v1c.QueueServiceListQueuesProcedure: {workerRead, func(m any) target { return ns(m.(*tenurev1.ListQueuesRequest).Namespace) }},
	// Each operation is checked with its unary RPC's rule.
	v1c.QueueServicePipelineProcedure: {anyRole, none},

	// PoolService.
	v1c.PoolServiceCreatePoolProcedure: {workerOnly, func(m any) target { return ns(m.(*tenurev1.CreatePoolRequest).Namespace) }},
	v1c.PoolServiceWantProcedure:       {workerOnly, func(m any) target { return ns(m.(*tenurev1.WantRequest).Namespace) }},
	v1c.PoolServiceRequestLeasesProcedure: {workerOnly, func(m any) target {
		r := m.(*tenurev1.RequestLeasesRequest)
		return nsActing(r.Namespace, &r.Peer, "peer")
	}},
	v1c.PoolServiceCompletePieceProcedure: {workerOnly, func(m any) target {
		r := m.(*tenurev1.CompletePieceRequest)
		return nsActing(r.Namespace, &r.Peer, "peer")
	}},
	v1c.PoolServiceRankingsProcedure: {workerRead, func(m any) target { return ns(m.(*tenurev1.RankingsRequest).Namespace) }},
	v1c.PoolServiceStatusProcedure:   {workerRead, func(m any) target { return ns(m.(*tenurev1.PoolStatusRequest).Namespace) }},
	v1c.PoolServiceStatsProcedure:    {workerRead, func(m any) target { return ns(m.(*tenurev1.PoolStatsRequest).Namespace) }},
	// Each operation is checked with its unary RPC's rule.
	v1c.PoolServicePipelineProcedure:  {anyRole, none},
	v1c.PoolServiceListPoolsProcedure: {workerRead, func(m any) target { return ns(m.(*tenurev1.ListPoolsRequest).Namespace) }},
	// Deleting a pool ends every peer's piece leases in it.
	v1c.PoolServiceDeletePoolProcedure: {adminOnly, func(m any) target { return ns(m.(*tenurev1.DeletePoolRequest).Namespace) }},
	v1c.PoolServiceResetPeerProcedure:  {adminOnly, func(m any) target { return ns(m.(*tenurev1.ResetPeerRequest).Namespace) }},

	// ClusterService.
	v1c.ClusterServiceStatusProcedure:    {anyRole, none},
	v1c.ClusterServicePublicKeyProcedure: {anyRole, none},
	v1c.ClusterServiceGetPolicyProcedure: {anyRole, func(m any) target { return policyTarget(m.(*tenurev1.GetPolicyRequest).Namespace, false) }},
	v1c.ClusterServiceSetPolicyProcedure: {adminOnly, func(m any) target { return policyTarget(m.(*tenurev1.SetPolicyRequest).Namespace, true) }},
	// Membership and snapshots reach every namespace: a member holds all
	// of the state (and the registrar's key seed), and removing or
	// moving members can stop the whole cluster.
	v1c.ClusterServiceAddVoterProcedure:           {adminOnly, wholeCluster("change the cluster's membership")},
	v1c.ClusterServiceRemoveServerProcedure:       {adminOnly, wholeCluster("change the cluster's membership")},
	v1c.ClusterServiceTransferLeadershipProcedure: {adminOnly, wholeCluster("move the cluster's leadership")},
	v1c.ClusterServiceSnapshotProcedure:           {adminOnly, wholeCluster("snapshot every namespace's state")},
	v1c.ClusterServiceSaveSnapshotProcedure:       {adminOnly, wholeCluster("back up every namespace's state and the registrar's key")},
	// Any authenticated principal, even one with no role.
	v1c.ClusterServiceWhoAmIProcedure: {nil, none},
}

// policyTarget: the defaults ("*") are readable by anyone and writable
// only by an admin of every namespace; a namespace's policy is in scope
// like anything else of the namespace.
func policyTarget(n string, write bool) target {
	if n == registrar.DefaultsNamespace {
		if write {
			return target{whole: "change the server-wide policy defaults"}
		}
		return target{}
	}
	return ns(n)
}

// wholeCluster is the target of a request that acts on the whole cluster.
func wholeCluster(what string) func(any) target {
	return func(any) target { return target{whole: what} }
}
