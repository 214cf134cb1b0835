package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestDerivedLeasesUnderAuth: only the holder of a parent derives from it
// or spends its budget; the child may be delegated to another principal,
// who then spends its own share; Authorize and Tree of a lease outside the
// caller's namespaces read as not found, and Tree leaves out descendants
// in other namespaces.
func TestDerivedLeasesUnderAuth(t *testing.T) {
	b := startSecure(t, nil)
	w1, w2, r1, root, teamadmin := b.as("tok-w1"), b.as("tok-w2"), b.as("tok-r1"), b.as("tok-root"), b.as("tok-teamadmin")
	ctx := context.Background()

	parent, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{
		Resource: "jobs/1", Ttl: ttl(time.Minute), Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 100}}}))
	if err != nil {
		t.Fatal(err)
	}
	pid := parent.Msg.Lease.LeaseId

	_, err = w2.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: pid, NewHolder: "w2", Resource: "jobs/1/a"}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
	_, err = w2.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: pid, Holder: "w1", NewHolder: "w2", Resource: "jobs/1/a"}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")
	_, err = w2.leases.Consume(ctx, connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: pid, Counter: "tokens", Amount: 1}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")

	// Delegation: w1 hands w2 a child with 10 tokens; w2 spends them.
	child, err := w1.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: pid, NewHolder: "w2",
		Resource: "jobs/1/a", Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 10}}}))
	if err != nil {
		t.Fatalf("derive by the parent's holder: %v", err)
	}
	cid := child.Msg.Lease.LeaseId
	if _, err := w2.leases.Consume(ctx, connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: cid, Counter: "tokens", Amount: 4})); err != nil {
		t.Fatalf("consume by the child's holder: %v", err)
	}
	_, err = w1.leases.Consume(ctx, connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: cid, Counter: "tokens", Amount: 1}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")

	// A reader of team-* cannot see into default.
	_, err = r1.leases.Tree(ctx, connect.NewRequest(&tenurev1.TreeRequest{LeaseId: pid}))
	wantReason(t, err, connect.CodeNotFound, "LEASE_NOT_FOUND")
	_, err = r1.leases.Authorize(ctx, connect.NewRequest(&tenurev1.AuthorizeRequest{LeaseId: pid, Resource: "jobs/1/x"}))
	wantReason(t, err, connect.CodeNotFound, "LEASE_NOT_FOUND")
	// Its own holder can.
	tree, err := w1.leases.Tree(ctx, connect.NewRequest(&tenurev1.TreeRequest{LeaseId: pid}))
	if err != nil || len(tree.Msg.Leases) != 2 {
		t.Fatalf("tree by the holder: %v, %d leases", err, len(tree.Msg.Leases))
	}

	// A tree spanning namespaces: an admin of team-* sees the part in team-a.
	top, err := root.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Namespace: "team-a", Resource: "plan", Ttl: ttl(time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: top.Msg.Lease.LeaseId,
		Namespace: "default", NewHolder: "w1", Resource: "secret/step"})); err != nil {
		t.Fatalf("derive into another namespace: %v", err)
	}
	resp, err := teamadmin.leases.Tree(ctx, connect.NewRequest(&tenurev1.TreeRequest{LeaseId: top.Msg.Lease.LeaseId}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.Leases) != 1 || resp.Msg.Leases[0].Namespace != "team-a" {
		t.Fatalf("tree for an admin of team-*: %v", resp.Msg.Leases)
	}
}
