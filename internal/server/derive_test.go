package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

func (b *bundle) derive(t *testing.T, req *tenurev1.DeriveRequest) *tenurev1.Lease {
	t.Helper()
	resp, err := b.leases.Derive(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Derive(%v): %v", req, err)
	}
	return resp.Msg.Lease
}

func (b *bundle) get(t *testing.T, id string) *tenurev1.Lease {
	t.Helper()
	resp, err := b.leases.Get(context.Background(), connect.NewRequest(&tenurev1.GetRequest{LeaseId: id}))
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return resp.Msg.Lease
}

func (b *bundle) consume(id, counter string, n int64) (*tenurev1.ConsumeResponse, error) {
	resp, err := b.leases.Consume(context.Background(), connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: id, Counter: counter, Amount: n}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// threeLevels builds root (agent) → mid (sub) → leaf (subsub).
func threeLevels(t *testing.T, b *bundle, rootTTL time.Duration) (root, mid, leaf *tenurev1.Lease) {
	root = b.acquire(t, &tenurev1.AcquireRequest{Resource: "job/7", Holder: "agent", Ttl: durationpb.New(rootTTL),
		Scope:  &tenurev1.Scope{ResourcePrefixes: []string{"job/7/", "repo/"}, Actions: []string{"read", "write", "exec"}},
		Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 1000, "tool_calls": 20}}})
	mid = b.derive(t, &tenurev1.DeriveRequest{ParentLeaseId: root.LeaseId, Holder: "agent", NewHolder: "sub",
		Resource: "job/7/a", Ttl: durationpb.New(4 * time.Minute),
		Scope:  &tenurev1.Scope{Actions: []string{"read", "write"}},
		Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 300, "tool_calls": 5}}})
	leaf = b.derive(t, &tenurev1.DeriveRequest{ParentLeaseId: mid.LeaseId, Holder: "sub", NewHolder: "subsub",
		Resource: "job/7/a/1", Scope: &tenurev1.Scope{ResourcePrefixes: []string{"job/7/a/"}},
		Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 100}}})
	return root, mid, leaf
}

func TestDeriveThreeLevelTree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	root, mid, leaf := threeLevels(t, b, 30*time.Second)
	if mid.ParentLeaseId != root.LeaseId || leaf.ParentLeaseId != mid.LeaseId {
		t.Fatalf("parents: mid %q, leaf %q", mid.ParentLeaseId, leaf.ParentLeaseId)
	}
	// The child's 4 minutes were shortened to the parent's expiry, not refused.
	if !mid.ExpiresAt.AsTime().Equal(root.ExpiresAt.AsTime()) {
		t.Errorf("mid expires %v, root %v", mid.ExpiresAt.AsTime(), root.ExpiresAt.AsTime())
	}
	if mid.Fence <= root.Fence || leaf.Fence <= mid.Fence || mid.LeaseId == root.LeaseId {
		t.Errorf("children need their own ids and fences: %d %d %d", root.Fence, mid.Fence, leaf.Fence)
	}
	// Empty lists inherit, non-empty ones narrow.
	if got := leaf.Scope.GetActions(); strings.Join(got, ",") != "read,write" {
		t.Errorf("leaf actions %v, want inherited [read write]", got)
	}
	if got := mid.Scope.GetResourcePrefixes(); strings.Join(got, ",") != "job/7/,repo/" {
		t.Errorf("mid prefixes %v, want inherited", got)
	}
	if _, err := b.consume(leaf.LeaseId, "tokens", 40); err != nil {
		t.Fatal(err)
	}
	resp, err := b.consume(mid.LeaseId, "tool_calls", 2)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Remaining["tool_calls"] != 3 || resp.Remaining["tokens"] != 200 {
		t.Errorf("mid remaining %v, want tool_calls 3, tokens 200 (300 - 100 carved)", resp.Remaining)
	}
	g := b.get(t, root.LeaseId)
	if g.Budget.GetLimits()["tokens"] != 1000 || g.Reserved["tokens"] != 300 || g.Used["tokens"] != 0 {
		t.Errorf("root budget %v used %v reserved %v", g.Budget.GetLimits(), g.Used, g.Reserved)
	}
	tr, err := b.leases.Tree(ctx, connect.NewRequest(&tenurev1.TreeRequest{LeaseId: root.LeaseId}))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range tr.Msg.Leases {
		ids = append(ids, l.LeaseId)
	}
	if strings.Join(ids, " ") != strings.Join([]string{root.LeaseId, mid.LeaseId, leaf.LeaseId}, " ") {
		t.Fatalf("tree %v", ids)
	}
	if tr.Msg.Leases[2].Used["tokens"] != 40 {
		t.Errorf("leaf used %v", tr.Msg.Leases[2].Used)
	}
	// List shows the tree fields too.
	list, err := b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Prefix: "job/7/a/"}))
	if err != nil || len(list.Msg.Leases) != 1 || list.Msg.Leases[0].ParentLeaseId != mid.LeaseId ||
		list.Msg.Leases[0].Budget.GetLimits()["tokens"] != 100 {
		t.Fatalf("List: %v %v", list, err)
	}
	// Releasing the middle returns its budget: its and the leaf's use is
	// added to the root's used, the rest is free again.
	if _, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: mid.LeaseId, Holder: "sub"})); err != nil {
		t.Fatal(err)
	}
	if l := b.get(t, leaf.LeaseId); l.State != tenurev1.State_STATE_RELEASED || l.EndedByLeaseId != mid.LeaseId {
		t.Errorf("leaf after its parent's release: %v ended by %q", l.State, l.EndedByLeaseId)
	}
	g = b.get(t, root.LeaseId)
	if g.Used["tokens"] != 40 || g.Used["tool_calls"] != 2 || g.Reserved["tokens"] != 0 {
		t.Errorf("root after release: used %v reserved %v", g.Used, g.Reserved)
	}
}

func TestDeriveBudgetExhaustedAtTheMiddle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, mid, leaf := threeLevels(t, b, 30*time.Second)
	// The middle has 300 − 100 carved = 200 tokens of its own.
	if _, err := b.consume(mid.LeaseId, "tokens", 150); err != nil {
		t.Fatal(err)
	}
	_, err := b.consume(mid.LeaseId, "tokens", 51)
	wantReason(t, err, connect.CodeResourceExhausted, "BUDGET_EXHAUSTED")
	md := errorMeta(t, err)
	if md["counter"] != "tokens" || md["used"] != "150" || md["limit"] != "300" || md["lease"] != mid.LeaseId || md["reserved"] != "100" {
		t.Errorf("metadata %v", md)
	}
	// Nothing was charged.
	if g := b.get(t, mid.LeaseId); g.Used["tokens"] != 150 {
		t.Errorf("used after a refused consume: %v", g.Used)
	}
	// Carving more than is left is refused the same way, at the middle.
	_, err = b.leases.Derive(context.Background(), connect.NewRequest(&tenurev1.DeriveRequest{
		ParentLeaseId: mid.LeaseId, Holder: "sub", Resource: "job/7/a/2", Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 51}}}))
	wantReason(t, err, connect.CodeResourceExhausted, "BUDGET_EXHAUSTED")
	if md := errorMeta(t, err); md["lease"] != mid.LeaseId || md["counter"] != "tokens" {
		t.Errorf("derive metadata %v", md)
	}
	// The leaf still spends what was carved to it; a counter limited above
	// but not carved to it is not spendable.
	if _, err := b.consume(leaf.LeaseId, "tokens", 100); err != nil {
		t.Fatal(err)
	}
	_, err = b.consume(leaf.LeaseId, "tool_calls", 1)
	wantReason(t, err, connect.CodeResourceExhausted, "BUDGET_EXHAUSTED")
	if md := errorMeta(t, err); md["lease"] != leaf.LeaseId || md["limit"] != "0" {
		t.Errorf("uncarved metadata %v", md)
	}
}

func TestDeriveCascadeOnExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	root, mid, leaf := threeLevels(t, b, time.Second)
	waitFor(t, "the root to expire", 10*time.Second, func() bool {
		return b.get(t, root.LeaseId).State == tenurev1.State_STATE_EXPIRED
	})
	for _, l := range []*tenurev1.Lease{mid, leaf} {
		if g := b.get(t, l.LeaseId); g.State != tenurev1.State_STATE_EXPIRED {
			t.Errorf("%s: %v under an expired root", l.Resource, g.State)
		}
	}
	// One expiry event per lease, the children naming the root.
	waitFor(t, "expiry events", 10*time.Second, func() bool {
		for _, l := range []*tenurev1.Lease{root, mid, leaf} {
			h, err := b.leases.History(context.Background(), connect.NewRequest(&tenurev1.HistoryRequest{Resource: l.Resource}))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, ev := range h.Msg.Events {
				if ev.Type == EventLeaseExpired && ev.LeaseId == l.LeaseId {
					found = l == root || ev.Details["ended_by_fence"] == utoa(root.Fence)
				}
			}
			if !found {
				return false
			}
		}
		return true
	})
	_, err := b.consume(leaf.LeaseId, "tokens", 1)
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_EXPIRED")
}

func TestDeriveCascadeOnRevokeAndTransfer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	root, mid, leaf := threeLevels(t, b, 30*time.Second)
	// Transfer of the middle ends the leaf; the successor keeps its place.
	tr, err := b.leases.Transfer(ctx, connect.NewRequest(&tenurev1.TransferRequest{LeaseId: mid.LeaseId, Holder: "sub", NewHolder: "sub2"}))
	if err != nil {
		t.Fatal(err)
	}
	if g := b.get(t, leaf.LeaseId); g.State != tenurev1.State_STATE_RELEASED || g.EndedByLeaseId != mid.LeaseId {
		t.Errorf("leaf after transfer of its parent: %v by %q", g.State, g.EndedByLeaseId)
	}
	nm := tr.Msg.Lease
	if nm.ParentLeaseId != root.LeaseId || nm.Budget.GetLimits()["tokens"] != 300 {
		t.Errorf("successor: parent %q budget %v", nm.ParentLeaseId, nm.Budget.GetLimits())
	}
	// Revoke of the root ends everything below, with the same state.
	if _, err := b.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: root.LeaseId, Reason: "runaway agent"})); err != nil {
		t.Fatal(err)
	}
	if g := b.get(t, nm.LeaseId); g.State != tenurev1.State_STATE_REVOKED || g.RevokeReason != "runaway agent" || g.EndedByLeaseId != root.LeaseId {
		t.Errorf("successor after the root's revoke: %v %q by %q", g.State, g.RevokeReason, g.EndedByLeaseId)
	}
	_, err = b.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: root.LeaseId, Holder: "agent", Resource: "job/7/z"}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_TERMINAL")
}

func TestDeriveScopeViolations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, mid, leaf := threeLevels(t, b, 30*time.Second)
	for name, req := range map[string]*tenurev1.DeriveRequest{
		"wider action":   {Scope: &tenurev1.Scope{Actions: []string{"exec"}}, Resource: "job/7/a/9"},
		"wider prefix":   {Scope: &tenurev1.Scope{ResourcePrefixes: []string{"job/"}}, Resource: "job/7/a/9"},
		"resource out":   {Resource: "other/1"},
		"namespace out":  {Namespace: "elsewhere", Resource: "job/7/a/9", Scope: &tenurev1.Scope{Namespaces: []string{"x"}}},
		"wider than mid": {Scope: &tenurev1.Scope{Actions: []string{"read", "exec"}}, Resource: "job/7/a/9"},
	} {
		req.ParentLeaseId, req.Holder = mid.LeaseId, "sub"
		_, err := b.leases.Derive(ctx, connect.NewRequest(req))
		if name == "namespace out" {
			// The middle's namespaces are unrestricted; so is its child's.
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		wantReason(t, err, connect.CodePermissionDenied, "SCOPE_VIOLATION")
		if md := errorMeta(t, err); md["rule"] == "" {
			t.Errorf("%s: no rule in %v", name, md)
		}
	}
	// Only the parent's holder derives.
	_, err := b.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: mid.LeaseId, Holder: "agent", Resource: "job/7/a/8"}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")

	authz := func(req *tenurev1.AuthorizeRequest) *tenurev1.AuthorizeResponse {
		t.Helper()
		resp, err := b.leases.Authorize(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("Authorize(%v): %v", req, err)
		}
		return resp.Msg
	}
	if a := authz(&tenurev1.AuthorizeRequest{LeaseId: leaf.LeaseId, Resource: "job/7/a/1/out.txt"}); !a.Allowed || a.Reason != "" {
		t.Errorf("in scope: %v", a)
	}
	if a := authz(&tenurev1.AuthorizeRequest{LeaseId: leaf.LeaseId, Resource: "repo/main"}); a.Allowed || !strings.HasPrefix(a.Reason, "SCOPE_VIOLATION") {
		t.Errorf("outside the leaf's prefixes: %v", a)
	}
	if a := authz(&tenurev1.AuthorizeRequest{LeaseId: leaf.LeaseId, Action: "exec"}); a.Allowed || !strings.Contains(a.Reason, "exec") {
		t.Errorf("exec for the leaf: %v", a)
	}
	if a := authz(&tenurev1.AuthorizeRequest{LeaseId: leaf.LeaseId, Action: "write"}); !a.Allowed {
		t.Errorf("write for the leaf: %v", a)
	}
	_, err = b.leases.Authorize(ctx, connect.NewRequest(&tenurev1.AuthorizeRequest{LeaseId: leaf.LeaseId}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
}

// TestDeriveJSON checks the JSON field names of the contract, as curl sees them.
func TestDeriveJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, body := b.postJSON(t, "LeaseService/Acquire",
		`{"resource":"j/1","holder":"a","scope":{"actions":["read"]},"budget":{"limits":{"tokens":"10"}}}`)
	if code != 200 {
		t.Fatalf("acquire: %d %v", code, body)
	}
	root := body["lease"].(map[string]any)["leaseId"].(string)
	code, body = b.postJSON(t, "LeaseService/Derive",
		`{"parentLeaseId":"`+root+`","holder":"a","newHolder":"b","resource":"j/1/x","budget":{"limits":{"tokens":"4"}}}`)
	if code != 200 {
		t.Fatalf("derive: %d %v", code, body)
	}
	child := body["lease"].(map[string]any)
	if child["parentLeaseId"] != root || child["scope"].(map[string]any)["actions"].([]any)[0] != "read" {
		t.Errorf("child %v", child)
	}
	code, body = b.postJSON(t, "LeaseService/Consume", `{"leaseId":"`+child["leaseId"].(string)+`","counter":"tokens","amount":"5"}`)
	if code != 429 || errorReason(t, body) != "BUDGET_EXHAUSTED" {
		t.Errorf("over-consume: %d %v", code, body)
	}
	code, body = b.postJSON(t, "LeaseService/Get", `{"leaseId":"`+root+`"}`)
	l := body["lease"].(map[string]any)
	if code != 200 || l["reserved"].(map[string]any)["tokens"] != "4" || l["used"].(map[string]any)["tokens"] != "0" {
		t.Errorf("root: %d %v", code, l)
	}
}

// chains builds n four-level lease trees and returns their leaves.
func chains(t testing.TB, bd *bundle, n int) []string {
	ctx := context.Background()
	leaves := make([]string, n)
	for c := range n {
		res := fmt.Sprintf("chain/%d", c)
		l, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: res, Holder: "h",
			Ttl: durationpb.New(5 * time.Minute), Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 1 << 50}}}))
		if err != nil {
			t.Fatal(err)
		}
		id := l.Msg.Lease.LeaseId
		for depth := 1; depth <= 3; depth++ {
			res += "/x"
			d, err := bd.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: id, Holder: "h", Resource: res,
				Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 1<<50 - int64(depth)}}}))
			if err != nil {
				t.Fatal(err)
			}
			id = d.Msg.Lease.LeaseId
		}
		leaves[c] = id
	}
	return leaves
}

func TestDeriveConsumeOverPipeline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, mid, _ := threeLevels(t, b, 30*time.Second)
	p := newPipeliner(t.Context(), t, b)
	r, err := p.do(&tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Consume{Consume: &tenurev1.ConsumeRequest{
		LeaseId: mid.LeaseId, Counter: "tokens", Amount: 150}}})
	if err != nil || r.GetConsume().GetRemaining()["tokens"] != 50 {
		t.Fatalf("consume over the pipeline: %v %v", r, err)
	}
	_, err = p.do(&tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Consume{Consume: &tenurev1.ConsumeRequest{
		LeaseId: mid.LeaseId, Counter: "tokens", Amount: 51}}})
	if err == nil || !strings.HasPrefix(err.Error(), "BUDGET_EXHAUSTED") {
		t.Fatalf("over budget over the pipeline: %v", err)
	}
}

// BenchmarkConsumeDepth4 charges the leaves of four-level lease trees
// through a durable single node: unary calls from 1 and 64 concurrent
// callers, and 64 callers sharing one Pipeline stream.
func BenchmarkConsumeDepth4(b *testing.B) {
	unary := func(bd *bundle) func(string) error {
		return func(leaf string) error {
			_, err := bd.leases.Consume(context.Background(), connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: leaf, Counter: "tokens", Amount: 1}))
			return err
		}
	}
	pipelined := func(bd *bundle) func(string) error {
		p := newPipeliner(b.Context(), b, bd)
		return func(leaf string) error {
			_, err := p.do(&tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Consume{Consume: &tenurev1.ConsumeRequest{LeaseId: leaf, Counter: "tokens", Amount: 1}}})
			return err
		}
	}
	for _, bc := range []struct {
		name    string
		clients int
		mk      func(*bundle) func(string) error
	}{{"unary/clients=1", 1, unary}, {"unary/clients=64", 64, unary}, {"pipeline/clients=64", 64, pipelined}} {
		b.Run(bc.name, func(b *testing.B) {
			bd := setup(b)
			leaves := chains(b, bd, bc.clients)
			consume := bc.mk(bd)
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range bc.clients {
				n := b.N / bc.clients
				if c < b.N%bc.clients {
					n++
				}
				wg.Go(func() {
					for range n {
						if err := consume(leaves[c]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// TestClusterLeaseTreeFailover builds a lease tree through a follower
// (every write forwarded), stops the leader, and finds the tree, its
// budgets and its cascade intact on the new leader.
func TestClusterLeaseTreeFailover(t *testing.T) {
	t.Parallel()
	ms := startCluster(t, 3)
	leader := leaderOf(t, ms, 15*time.Second)
	f := followerOf(ms, leader)
	ctx := context.Background()
	var root, child *tenurev1.Lease
	if err := whileNotLeader(func() error {
		resp, err := f.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "ha/job", Holder: "agent",
			Ttl: durationpb.New(time.Minute), Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 100}}}))
		if err == nil {
			root = resp.Msg.Lease
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: root.LeaseId, Holder: "agent",
		NewHolder: "sub", Resource: "ha/job/a", Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 60}}}))
	if err != nil {
		t.Fatal(err)
	}
	child = resp.Msg.Lease
	if _, err := f.leases.Consume(ctx, connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: child.LeaseId, Counter: "tokens", Amount: 25})); err != nil {
		t.Fatal(err)
	}

	leader.stop(t)
	nl := leaderOf(t, ms, 15*time.Second)
	var tree []*tenurev1.Lease
	if err := whileNotLeader(func() error {
		tr, err := nl.leases.Tree(ctx, connect.NewRequest(&tenurev1.TreeRequest{LeaseId: root.LeaseId}))
		if err == nil {
			tree = tr.Msg.Leases
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(tree) != 2 || tree[0].Reserved["tokens"] != 60 || tree[1].Used["tokens"] != 25 || tree[1].ParentLeaseId != root.LeaseId {
		t.Fatalf("tree on the new leader: %v", tree)
	}
	// The carve still binds: the root has 40 left.
	_, err = nl.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: root.LeaseId, Holder: "agent",
		Resource: "ha/job/b", Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 41}}}))
	wantReason(t, err, connect.CodeResourceExhausted, "BUDGET_EXHAUSTED")
	if _, err := nl.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: root.LeaseId, Reason: "failover test"})); err != nil {
		t.Fatal(err)
	}
	if g, err := getVia(nl, child.LeaseId, false); err != nil || g.State != tenurev1.State_STATE_REVOKED || g.EndedByLeaseId != root.LeaseId {
		t.Fatalf("child after the root's revoke on the new leader: %v %v", g, err)
	}
	// And the surviving follower applied the same cascade.
	other := followerOf(ms, nl)
	waitFor(t, "the follower to apply the revoke", 10*time.Second, func() bool {
		g, err := getVia(other, child.LeaseId, true)
		return err == nil && g.State == tenurev1.State_STATE_REVOKED
	})
	if g, _ := getVia(other, root.LeaseId, true); g.Used["tokens"] != 25 || g.Reserved["tokens"] != 0 {
		t.Fatalf("root on the follower: used %v reserved %v", g.Used, g.Reserved)
	}
}
