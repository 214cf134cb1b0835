package tenure

import (
	"errors"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestIntegrationLeaseTree derives a three-level tree through the client
// against a real server: scopes, carved budgets, Authorize, and a child's
// Done closing when its parent ends (released here, or revoked elsewhere).
func TestIntegrationLeaseTree(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithHolder("agent"))
	ctx := ctxTimeout(t, 30*time.Second)
	root, err := c.Acquire(ctx, "job/1", TTL(6*time.Second),
		WithScope(Scope{ResourcePrefixes: []string{"job/1/"}, Actions: []string{"read", "write"}}),
		WithBudget(Budget{"tokens": 100}))
	if err != nil {
		t.Fatal(err)
	}
	mid, err := root.Derive(ctx, "job/1/a", DeriveFor("sub"), TTL(time.Minute),
		WithScope(Scope{Actions: []string{"read"}}), WithBudget(Budget{"tokens": 40}))
	if err != nil {
		t.Fatal(err)
	}
	if mid.Holder() != "sub" || mid.Proto().GetParentLeaseId() != root.ID() {
		t.Fatalf("mid: holder %s parent %s", mid.Holder(), mid.Proto().GetParentLeaseId())
	}
	// Capped at the parent: the minute was shortened, and the client's
	// trust window follows the registrar's expiry, not the asked ttl.
	if mid.ExpiresAt().After(root.ExpiresAt()) || mid.TrustedUntil().After(root.TrustedUntil().Add(time.Second)) {
		t.Errorf("mid expires %v / trusted %v, root %v / %v", mid.ExpiresAt(), mid.TrustedUntil(), root.ExpiresAt(), root.TrustedUntil())
	}
	leaf, err := mid.Derive(ctx, "job/1/a/1", WithBudget(Budget{"tokens": 10}))
	if err != nil {
		t.Fatal(err)
	}
	left, err := leaf.Consume(ctx, "tokens", 7)
	if err != nil || left["tokens"] != 3 {
		t.Fatalf("Consume: %v %v", left, err)
	}
	_, err = leaf.Consume(ctx, "tokens", 4)
	var te *Error
	if !errors.Is(err, ErrBudgetExhausted) || !errors.As(err, &te) || te.Metadata["lease"] != leaf.ID() || te.Metadata["limit"] != "10" {
		t.Fatalf("over budget: %v", err)
	}
	_, err = mid.Derive(ctx, "job/1/a/2", WithBudget(Budget{"tokens": 31}))
	if !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("carving past the middle's remaining: %v", err)
	}
	_, err = mid.Derive(ctx, "job/1/a/2", WithScope(Scope{Actions: []string{"write"}}))
	if !errors.Is(err, ErrScopeViolation) {
		t.Fatalf("widening the scope: %v", err)
	}
	if err := leaf.Authorize(ctx, Access{Resource: "job/1/a/1/x"}); err != nil {
		t.Errorf("in scope: %v", err)
	}
	if err := leaf.Authorize(ctx, Access{Action: "write"}); !errors.Is(err, ErrScopeViolation) {
		t.Errorf("write for a read-only leaf: %v", err)
	}
	tree, err := c.Tree(ctx, root.ID())
	if err != nil || len(tree) != 3 || tree[2].GetUsed()["tokens"] != 7 || tree[0].GetReserved()["tokens"] != 40 {
		t.Fatalf("Tree: %v %v", tree, err)
	}

	// Ending the middle ends the leaf: here at once.
	if err := mid.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leaf.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("leaf's Done not closed after its parent's release")
	}
	if !errors.Is(leaf.Err(), ErrLeaseLost) || !errors.Is(leaf.Err(), ErrParentEnded) {
		t.Errorf("leaf Err = %v", leaf.Err())
	}
	if pb, err := c.Get(ctx, leaf.ID()); err != nil || pb.GetState() != tenurev1.State_STATE_RELEASED || pb.GetEndedByLeaseId() != mid.ID() {
		t.Errorf("leaf at the registrar: %v %v", pb, err)
	}

	// Revoked by someone else: the child learns it from its heartbeat.
	other, err := root.Derive(ctx, "job/1/b", TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	admin := s.client(t, WithHolder("admin"))
	if _, err := admin.Revoke(ctx, root.ID(), "stop"); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Lease{root, other} {
		select {
		case <-l.Done():
		case <-time.After(7 * time.Second):
			t.Fatalf("%s: Done not closed within a ttl of the root's revoke", l.Resource())
		}
	}
	if !errors.Is(other.Err(), ErrLeaseLost) {
		t.Errorf("child Err = %v", other.Err())
	}
}
