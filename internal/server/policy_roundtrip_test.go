package server

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestGetPolicyRoundTrip checks that GetPolicy's answer, sent back
// unchanged with SetPolicy (read, change a field, write: what SetPolicy
// setting a whole policy asks of a client), sets the policy it read: a
// namespace's unlimited renewals (0) over a server-wide limit stay
// unlimited, and the answers say max_renewals outright.
func TestGetPolicyRoundTrip(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	set := func(ns string, p *tenurev1.NamespacePolicy) *tenurev1.NamespacePolicy {
		t.Helper()
		resp, err := b.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: ns, Policy: p}))
		if err != nil {
			t.Fatalf("SetPolicy %s: %v", ns, err)
		}
		return resp.Msg.GetPolicy()
	}
	get := func(ns string) *tenurev1.NamespacePolicy {
		t.Helper()
		resp, err := b.cluster.GetPolicy(ctx, connect.NewRequest(&tenurev1.GetPolicyRequest{Namespace: ns}))
		if err != nil {
			t.Fatalf("GetPolicy %s: %v", ns, err)
		}
		return resp.Msg.GetPolicy()
	}
	set("*", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(20)})
	if p := set("agents", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(0)}); p.MaxRenewals == nil || p.GetMaxRenewals() != 0 {
		t.Fatalf("SetPolicy answered max_renewals %v, want 0 said outright", p.MaxRenewals)
	}
	read := get("agents")
	if read.MaxRenewals == nil || read.GetMaxRenewals() != 0 {
		t.Fatalf("GetPolicy answered max_renewals %v, want 0 said outright", read.MaxRenewals)
	}
	set("agents", read) // written back as read
	if p := get("agents"); p.GetMaxRenewals() != 0 {
		t.Fatalf("max_renewals after writing back what GetPolicy answered: %d, want 0 (unlimited) as before", p.GetMaxRenewals())
	}
	// A namespace with a limit of its own, and the defaults, read back as set.
	set("bounded", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(7)})
	if p := get("bounded"); p.GetMaxRenewals() != 7 {
		t.Fatalf("bounded: max_renewals %d, want 7", p.GetMaxRenewals())
	}
	if p := get("*"); p.GetMaxRenewals() != 20 {
		t.Fatalf("defaults: max_renewals %d, want 20", p.GetMaxRenewals())
	}
	// The same for dead_task_retention: 0 (the default, a day) in a
	// namespace under a "*" policy that sets an hour.
	set("*", &tenurev1.NamespacePolicy{DeadTaskRetention: durationpb.New(time.Hour)})
	set("dead", &tenurev1.NamespacePolicy{DeadTaskRetention: durationpb.New(0)})
	read = get("dead")
	if read.DeadTaskRetention == nil || read.GetDeadTaskRetention().AsDuration() != 0 {
		t.Fatalf("GetPolicy answered dead_task_retention %v, want 0s said outright", read.DeadTaskRetention)
	}
	set("dead", read)
	if p := get("dead"); p.GetDeadTaskRetention().AsDuration() != 0 {
		t.Fatalf("dead_task_retention after writing back what GetPolicy answered: %v, want 0s (the default) as before", p.GetDeadTaskRetention().AsDuration())
	}
}
