package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/cluster"
)

// membersView is what a membership change would change: the leader and
// every member with its addresses and role, in a stable order.
func membersView(st *tenurev1.StatusResponse) string {
	var out []string
	for _, m := range st.Members {
		out = append(out, fmt.Sprintf("%s raft=%s api=%s %s", m.Id, m.RaftAddress, m.ApiAddress, m.Role))
	}
	slices.Sort(out)
	return "leader " + st.LeaderId + ": " + strings.Join(out, "; ")
}

// wantInvalid checks that err is invalid_argument with reason
// INVALID_ARGUMENT, metadata naming field, and a message containing say.
func wantInvalid(t *testing.T, err error, field, say string) {
	t.Helper()
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	if got := errorMeta(t, err)["field"]; got != field {
		t.Errorf("metadata field = %q, want %q (%v)", got, field, err)
	}
	if ce := err.(*connect.Error); !strings.Contains(ce.Message(), say) {
		t.Errorf("message %q does not say %q", ce.Message(), say)
	}
}

// stillServes checks that a single node's membership is as before, that
// it still leads and is ready, and that it serves a write.
func (b *bundle) stillServes(t *testing.T, before, name string) {
	t.Helper()
	if got := membersView(b.status(t)); got != before {
		t.Fatalf("membership changed:\n got  %s\n want %s", got, before)
	}
	if !b.srv.Node().IsLeader() {
		t.Fatal("the node no longer leads")
	}
	resp, err := b.http.Get(b.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz answers %d", resp.StatusCode)
	}
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "after/" + name, Holder: "w1"})
}

// TestClusterInputSingleNode: every bad AddVoter, RemoveServer and
// TransferLeadership on a one-node cluster is a definite INVALID_ARGUMENT
// naming the field (never OUTCOME_UNKNOWN) and changes nothing; repeating
// a change that is already in place succeeds and changes nothing.
func TestClusterInputSingleNode(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	self := b.srv.Node().ID()
	raftAddr := b.srv.Node().RaftAddr()
	before := membersView(b.status(t))

	addVoter := func(id, raftAddress, apiAddress string) func() error {
		return func() error {
			_, err := b.cluster.AddVoter(ctx, connect.NewRequest(&tenurev1.AddVoterRequest{Id: id, RaftAddress: raftAddress, ApiAddress: apiAddress}))
			return err
		}
	}
	remove := func(id string) func() error {
		return func() error {
			_, err := b.cluster.RemoveServer(ctx, connect.NewRequest(&tenurev1.RemoveServerRequest{Id: id}))
			return err
		}
	}
	transfer := func(id string) func() error {
		return func() error {
			_, err := b.cluster.TransferLeadership(ctx, connect.NewRequest(&tenurev1.TransferLeadershipRequest{Id: id}))
			return err
		}
	}
	refused := []struct {
		name       string
		call       func() error
		field, say string
	}{
		{"raft address not an address", addVoter("n2", "not an address", ""), "raft_address", "is not host:port"},
		{"raft address without port", addVoter("n2", "127.0.0.1", ""), "raft_address", "is not host:port"},
		{"raft address without host", addVoter("n2", ":7179", ""), "raft_address", "has no host"},
		{"raft address port 0", addVoter("n2", "127.0.0.1:0", ""), "raft_address", "port must be a number from 1 to 65535"},
		{"raft address port too high", addVoter("n2", "127.0.0.1:65536", ""), "raft_address", "port must be a number from 1 to 65535"},
		{"raft address named port", addVoter("n2", "127.0.0.1:raft", ""), "raft_address", "port must be a number from 1 to 65535"},
		{"raft address bad host", addVoter("n2", "no such host!:7179", ""), "raft_address", "neither an IP address nor a host name"},
		{"raft address unspecified", addVoter("n2", "0.0.0.0:7179", ""), "raft_address", "unspecified address"},
		{"raft address missing", addVoter("n2", "", ""), "raft_address", "is required"},
		{"api address malformed", addVoter("n2", "127.0.0.1:7179", "nope"), "api_address", "is not host:port"},
		{"id missing", addVoter("", "127.0.0.1:7179", ""), "id", "is required"},
		{"the leader, another address", addVoter(self, "127.0.0.1:7179", ""), "raft_address",
			fmt.Sprintf("member %s is this leader, at raft address %s; transfer the leadership", self, raftAddr)},
		{"address of another member", addVoter("n2", raftAddr, ""), "raft_address",
			fmt.Sprintf("is already the raft address of member %s", self)},
		{"API address as raft address", addVoter("n2", b.srv.Addr(), ""), "raft_address",
			fmt.Sprintf("is the API address of member %s", self)},
		{"remove the only voter", remove(self), "id", "is the only voter"},
		{"remove without id", remove(""), "id", "is required"},
		{"transfer with no other voter", transfer(""), "id", "no other voter"},
		{"transfer to a non-member", transfer("nosuch"), "id", `"nosuch" is not a member`},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			wantInvalid(t, tc.call(), tc.field, tc.say)
			b.stillServes(t, before, tc.name)
		})
	}

	// What is already so succeeds without a change, so a caller may retry
	// after an unknown outcome.
	done := []struct {
		name string
		call func() error
	}{
		{"add itself again", addVoter(self, raftAddr, "")},
		{"add itself again with its API address", addVoter(self, raftAddr, b.srv.Addr())},
		{"remove a non-member", remove("nosuch")},
		{"transfer to the leader", transfer(self)},
	}
	for _, tc := range done {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			b.stillServes(t, before, tc.name)
		})
	}
}

// TestClusterInputJSON is the audit's own call: Connect JSON, as curl
// sends it. It answers HTTP 400 with the error's code, reason and field,
// and the node keeps leading.
func TestClusterInputJSON(t *testing.T) {
	b := setup(t)
	before := membersView(b.status(t))
	resp, err := b.http.Post(b.base+tenurev1connect.ClusterServiceAddVoterProcedure, "application/json",
		strings.NewReader(`{"id":"n2","raftAddress":"not an address"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type  string `json:"type"`
			Debug struct {
				Reason   string            `json:"reason"`
				Domain   string            `json:"domain"`
				Metadata map[string]string `json:"metadata"`
			} `json:"debug"`
		} `json:"details"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
	}
	if resp.StatusCode != http.StatusBadRequest || body.Code != "invalid_argument" || !strings.HasPrefix(body.Message, "INVALID_ARGUMENT: raft_address: ") ||
		len(body.Details) != 1 || body.Details[0].Debug.Reason != "INVALID_ARGUMENT" || body.Details[0].Debug.Domain != ErrorDomain ||
		body.Details[0].Debug.Metadata["field"] != "raft_address" {
		t.Fatalf("AddVoter with a bad raft address: %d %s", resp.StatusCode, raw)
	}
	b.stillServes(t, before, "json")
}

// TestClusterInputThreeNodes: on a three-node cluster, through a follower
// (forwarded to the leader), a second address for a member or an address
// another member has is refused and changes nothing; a member's own
// request to be published again, and a transfer to the leader, succeed
// without a change; a real transfer still works.
func TestClusterInputThreeNodes(t *testing.T) {
	ms := startCluster(t, 3)
	leader := leaderOf(t, ms, 10*time.Second)
	for _, m := range ms {
		waitFor(t, m.id+" lists every member", 10*time.Second, func() bool { return published(m, "n1", "n2", "n3") })
	}
	f := followerOf(ms, leader)
	st, err := statusOf(leader)
	if err != nil {
		t.Fatal(err)
	}
	before := membersView(st)
	addr := map[string]string{}
	for _, m := range st.Members {
		addr[m.Id] = m.RaftAddress
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addVoter := func(id, raftAddress, apiAddress string) error {
		return whileNotLeader(func() error {
			_, err := f.cluster.AddVoter(ctx, connect.NewRequest(&tenurev1.AddVoterRequest{Id: id, RaftAddress: raftAddress, ApiAddress: apiAddress}))
			return err
		})
	}
	unchanged := func(what string) {
		t.Helper()
		st, err := statusOf(leader)
		if err != nil {
			t.Fatal(err)
		}
		if got := membersView(st); got != before {
			t.Fatalf("%s changed the membership:\n got  %s\n want %s", what, got, before)
		}
	}

	wantInvalid(t, addVoter(leader.id, "127.0.0.1:1", ""), "raft_address",
		fmt.Sprintf("member %s is this leader, at raft address %s; transfer the leadership", leader.id, addr[leader.id]))
	unchanged("another address for the leader")
	wantInvalid(t, addVoter("n4", addr[leader.id], ""), "raft_address",
		fmt.Sprintf("is already the raft address of member %s", leader.id))
	unchanged("the address of another member")
	wantInvalid(t, addVoter(f.id, "127.0.0.1:1", ""), "id",
		fmt.Sprintf("member %s is up at raft address %s (it answers this leader's heartbeats): start the new node with another --node-id", f.id, addr[f.id]))
	unchanged("a second node with a live member's id")
	if err := addVoter(f.id, addr[f.id], f.srv.Addr()); err != nil {
		t.Fatalf("a member's request to be published again: %v", err)
	}
	unchanged("a member's request to be published again")
	resp, err := f.cluster.TransferLeadership(ctx, connect.NewRequest(&tenurev1.TransferLeadershipRequest{Id: leader.id}))
	if err != nil || resp.Msg.LeaderId != leader.id {
		t.Fatalf("transfer to the leader: %v %v", resp, err)
	}
	unchanged("a transfer to the leader")

	// A real transfer, named, through the leader.
	resp, err = leader.cluster.TransferLeadership(ctx, connect.NewRequest(&tenurev1.TransferLeadershipRequest{Id: f.id}))
	if err != nil || resp.Msg.LeaderId != f.id {
		t.Fatalf("transfer to %s: %v %v (the answer names the new leader)", f.id, resp, err)
	}
	waitFor(t, f.id+" leads after the transfer", 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		return f.srv.WaitReady(ctx) == nil
	})
	acquireVia(t, leader, "after/transfer", 30*time.Second)
}

// TestEveryRoleIsNamed: Status names every member's role with a value
// other than ROLE_UNSPECIFIED (API.md: responses carry explicit enum
// values), an unknown one included.
func TestEveryRoleIsNamed(t *testing.T) {
	for r := cluster.RoleFollower; r <= cluster.RoleUnknown; r++ {
		if roles[r] == tenurev1.Role_ROLE_UNSPECIFIED {
			t.Errorf("cluster role %d has no Role", r)
		}
	}
}
