package server

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/fencing"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// clusterService implements tenure.v1.ClusterService.
type clusterService struct{ s *Server }

var roles = map[cluster.Role]tenurev1.Role{
	cluster.RoleLeader:    tenurev1.Role_ROLE_LEADER,
	cluster.RoleFollower:  tenurev1.Role_ROLE_FOLLOWER,
	cluster.RoleCandidate: tenurev1.Role_ROLE_CANDIDATE,
	cluster.RoleNonvoter:  tenurev1.Role_ROLE_NONVOTER,
	cluster.RoleUnknown:   tenurev1.Role_ROLE_UNKNOWN, // no leader known
}

func (h *clusterService) Status(_ context.Context, _ *connect.Request[tenurev1.StatusRequest]) (*connect.Response[tenurev1.StatusResponse], error) {
	st, err := h.s.node.Status()
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	resp := &tenurev1.StatusResponse{
		LeaderId: st.LeaderID, LeaderApiAddress: st.LeaderAPIAddr, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Tick: int64(st.Tick),
		NodeId: st.NodeID, Version: h.s.cfg.Version, LedgerIndex: st.LedgerIndex,
		LastLogIndex: st.LastLogIndex, LastLogTerm: st.LastLogTerm, Rules: h.s.ownRules(),
		LogFailure: h.s.ownLogFailure(),
	}
	leads := st.LeaderID == st.NodeID
	if leads {
		resp.StampedRules = h.s.node.StampRules()
	}
	if !st.LeaderLastContact.IsZero() {
		resp.LeaderLastContact = timestamppb.New(st.LeaderLastContact)
	}
	if !st.NoLeaderSince.IsZero() {
		resp.NoLeaderSince = timestamppb.New(st.NoLeaderSince)
	}
	for _, m := range st.Members {
		pm := &tenurev1.Member{Id: m.ID, ApiAddress: m.APIAddress, RaftAddress: m.RaftAddress, Role: roles[m.Role]}
		if !m.UnreachableSince.IsZero() {
			pm.UnreachableSince = timestamppb.New(m.UnreachableSince)
		}
		switch {
		case !leads:
		case m.ID == st.NodeID:
			pm.AppliedIndex, pm.LogFailure = st.AppliedIndex, resp.LogFailure
		default:
			h.s.reports.fill(pm)
		}
		resp.Members = append(resp.Members, pm)
	}
	return connect.NewResponse(resp), nil
}

// AddVoter checks the addresses' form here (host:port; the Raft address
// one the other members can dial) and the node checks them against the
// configuration (cluster.Node.AddVoter): a bad one is INVALID_ARGUMENT
// and changes nothing. An unreachable voter would count in every quorum.
func (h *clusterService) AddVoter(ctx context.Context, req *connect.Request[tenurev1.AddVoterRequest]) (*connect.Response[tenurev1.AddVoterResponse], error) {
	m := req.Msg
	if err := registrar.CheckIdentifier("id", m.Id, true); err != nil {
		return nil, h.s.toConnect(err)
	}
	if err := registrar.CheckIdentifier("raft_address", m.RaftAddress, true); err != nil {
		return nil, h.s.toConnect(err)
	}
	if err := cluster.CheckRaftAddress("raft_address", m.RaftAddress); err != nil {
		return nil, h.s.toConnect(err)
	}
	if err := registrar.CheckIdentifier("api_address", m.ApiAddress, false); err != nil {
		return nil, h.s.toConnect(err)
	}
	if m.ApiAddress != "" {
		if err := cluster.CheckAddress("api_address", m.ApiAddress); err != nil {
			return nil, h.s.toConnect(err)
		}
	}
	if !m.Fresh && h.s.node.LeftOut(m.Id) {
		return nil, h.s.toConnect(&registrar.Error{Reason: registrar.ReasonInvalidArgument, Metadata: map[string]string{"field": "id"},
			Message: fmt.Sprintf("INVALID_ARGUMENT: member %s was left out by --force-new-cluster: it comes back only from an "+
				"empty data dir, started with tenure server --join (with its old data it would bring the old cluster's history)", m.Id)})
	}
	if err := h.s.node.AddVoter(ctx, m.Id, m.RaftAddress, m.ApiAddress, m.Force); err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.AddVoterResponse{}), nil
}

func (h *clusterService) RemoveServer(ctx context.Context, req *connect.Request[tenurev1.RemoveServerRequest]) (*connect.Response[tenurev1.RemoveServerResponse], error) {
	if err := registrar.CheckIdentifier("id", req.Msg.Id, true); err != nil {
		return nil, h.s.toConnect(err)
	}
	s := h.s
	if req.Msg.Id == s.node.ID() && s.node.IsLeader() {
		if err := s.node.CheckRemoval(req.Msg.Id, req.Msg.Force); err != nil {
			return nil, s.toConnect(err) // before handing leadership over for nothing
		}
		// The leader removing itself hands leadership over first, and the
		// new leader removes it: a leader that removed itself stepped down
		// only once the change committed, and nothing was written until an
		// election had passed (~3 s measured from outside).
		switch err := s.node.TransferLeadership(""); {
		case err == nil:
			return h.removeViaNewLeader(ctx, req)
		case registrar.ReasonOf(err) != registrar.ReasonInvalidArgument:
			return nil, s.toConnect(err)
		}
		// No other voter: RemoveServer below says why it cannot.
	}
	was, err := s.node.RemoveServer(ctx, req.Msg.Id, req.Msg.Force)
	if err != nil {
		return nil, s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.RemoveServerResponse{WasMember: was}), nil
}

// handOverWait bounds how long a leader that removes itself waits to know
// the address of the member it handed leadership over to.
const handOverWait = 5 * time.Second

// removeViaNewLeader asks the leader this member just handed over to to
// remove it.
func (h *clusterService) removeViaNewLeader(ctx context.Context, req *connect.Request[tenurev1.RemoveServerRequest]) (*connect.Response[tenurev1.RemoveServerResponse], error) {
	s := h.s
	next := s.node.NextLeader(ctx)
	s.node.AwaitLeader(ctx)
	// A member that never led publishes its address as it takes office,
	// and this one hears of it a round trip later: wait for it a while.
	id, addr := s.node.Leader()
	wait := time.NewTimer(handOverWait)
	defer wait.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for next != "" && (id != next || addr == "") {
		select {
		case <-tick.C:
		case <-wait.C:
			next = "" // not in time
		case <-ctx.Done():
			next = ""
		}
		id, addr = s.node.Leader()
	}
	if next == "" || id != next || addr == "" {
		return nil, s.toConnect(notLeader(id, addr, "leadership was handed over before removing this member, and the new leader is not known yet; nothing was removed, retry"))
	}
	proc := v1c.ClusterServiceRemoveServerProcedure
	resp, err := routes[proc].call(ctx, s, s.fwd.scheme+addr, req.Msg, req.Header())
	if err != nil {
		return nil, s.forwardError(ctx, err, true, id, addr)
	}
	return connect.NewResponse(resp.Any().(*tenurev1.RemoveServerResponse)), nil
}

func (h *clusterService) TransferLeadership(ctx context.Context, req *connect.Request[tenurev1.TransferLeadershipRequest]) (*connect.Response[tenurev1.TransferLeadershipResponse], error) {
	if err := registrar.CheckIdentifier("id", req.Msg.Id, false); err != nil {
		return nil, h.s.toConnect(err)
	}
	if err := h.s.node.TransferLeadership(req.Msg.Id); err != nil {
		return nil, h.s.toConnect(err)
	}
	if req.Msg.Id == h.s.node.ID() { // named itself: nothing moved
		return connect.NewResponse(&tenurev1.TransferLeadershipResponse{LeaderId: req.Msg.Id}), nil
	}
	// Not IsLeader: right after the transfer this member may not have
	// stepped down yet.
	return connect.NewResponse(&tenurev1.TransferLeadershipResponse{LeaderId: h.s.node.NextLeader(ctx)}), nil
}

func (h *clusterService) Snapshot(_ context.Context, _ *connect.Request[tenurev1.SnapshotRequest]) (*connect.Response[tenurev1.SnapshotResponse], error) {
	idx, term, err := h.s.node.Snapshot()
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(&tenurev1.SnapshotResponse{Index: idx, Term: term, NodeId: h.s.node.ID()}), nil
}

// backupChunk bounds the state's bytes in one SaveSnapshot message.
const backupChunk = 1 << 20

func (h *clusterService) SaveSnapshot(ctx context.Context, req *connect.Request[tenurev1.SaveSnapshotRequest], stream *connect.ServerStream[tenurev1.SaveSnapshotResponse]) error {
	// A stream's interceptor checks roles only: the target (every
	// namespace) is checked here, as Watch checks its namespace.
	if err := h.s.authorize(ctx, v1c.ClusterServiceSaveSnapshotProcedure, req.Msg); err != nil {
		return h.s.toConnect(err)
	}
	if !req.Msg.AllowStale && !h.s.node.IsLeader() {
		id, addr := h.s.node.Leader()
		return h.s.toConnect(notLeader(id, addr, "a backup is taken from the leader, which holds everything committed "+
			"(allow_stale, tenure backup save --stale: this member's applied state)"))
	}
	info, data, err := h.s.node.Backup(ctx)
	if err != nil {
		return h.s.toConnect(err)
	}
	if err := stream.Send(&tenurev1.SaveSnapshotResponse{Info: info}); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), backupChunk)
		if err := stream.Send(&tenurev1.SaveSnapshotResponse{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	h.s.log.Info("backup taken", "raft_index", info.RaftIndex, "bytes", info.Size, "leader", info.Leader)
	return nil
}

func (h *clusterService) PublicKey(ctx context.Context, _ *connect.Request[tenurev1.PublicKeyRequest]) (*connect.Response[tenurev1.PublicKeyResponse], error) {
	resp := &tenurev1.PublicKeyResponse{}
	err := h.s.node.Read(ctx, true, func(m *statemachine.Machine, _ registrar.Tick) error {
		if !m.Bootstrapped() {
			return &registrar.Error{Reason: registrar.ReasonNotBootstrapped, Message: "NOT_BOOTSTRAPPED: the registrar has no key yet"}
		}
		resp.PublicKey = append([]byte(nil), m.PublicKey()...)
		resp.KeyId = fencing.KeyID(m.PublicKey())
		return nil
	})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	return connect.NewResponse(resp), nil
}

func (h *clusterService) GetPolicy(ctx context.Context, req *connect.Request[tenurev1.GetPolicyRequest]) (*connect.Response[tenurev1.GetPolicyResponse], error) {
	ns := req.Msg.Namespace
	if ns != registrar.DefaultsNamespace {
		if err := registrar.CheckNamespace("namespace", ns, false); err != nil {
			return nil, h.s.toConnect(err)
		}
	}
	var p registrar.Policy
	err := h.s.read(ctx, func(r *registrar.Registrar, _ registrar.Tick) error {
		if ns == registrar.DefaultsNamespace {
			p = r.Defaults()
		} else {
			p = r.Policy(registrar.OrDefault(ns))
		}
		return nil
	})
	if err != nil {
		return nil, h.s.toConnect(err)
	}
	// Every field explicit, max_renewals too (Proto leaves 0 unset, which
	// a SetPolicy reads as the server-wide default): the answer sent back
	// unchanged must set the policy it read.
	return connect.NewResponse(&tenurev1.GetPolicyResponse{Policy: p.ProtoToSet()}), nil
}

func (h *clusterService) SetPolicy(ctx context.Context, req *connect.Request[tenurev1.SetPolicyRequest]) (*connect.Response[tenurev1.SetPolicyResponse], error) {
	s, m := h.s, req.Msg
	ns := m.Namespace
	if ns == "" {
		ns = registrar.DefaultNamespace
	}
	if ns != registrar.DefaultsNamespace {
		if err := registrar.CheckNamespace("namespace", ns, true); err != nil {
			return nil, s.toConnect(err)
		}
	}
	var base registrar.Policy
	_ = s.node.Read(ctx, true, func(mc *statemachine.Machine, _ registrar.Tick) error {
		base = mc.Registrar().Defaults()
		return nil
	})
	p := registrar.PolicyFromProto(base, m.Policy)
	if err := p.Validate(); err != nil {
		return nil, s.toConnect(err)
	}
	if _, err := s.propose(ctx, &logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: ns, Policy: m.Policy}}}); err != nil {
		return nil, s.toConnect(err)
	}
	// The policy as applied (this member applied it before answering).
	_ = s.node.Read(ctx, true, func(mc *statemachine.Machine, _ registrar.Tick) error {
		if ns == registrar.DefaultsNamespace {
			p = mc.Registrar().Defaults()
		} else {
			p = mc.Registrar().Policy(ns)
		}
		return nil
	})
	return connect.NewResponse(&tenurev1.SetPolicyResponse{Policy: p.ProtoToSet()}), nil
}
