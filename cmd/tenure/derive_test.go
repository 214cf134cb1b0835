package main

import (
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

func TestCLILeaseTree(t *testing.T) {
	t.Parallel()
	job := "tree/" + uniq(t)
	root := acquire(t, job, "--ttl", "60s", "--holder", "agent",
		"--scope-prefix", job+"/", "--scope-action", "read,write", "--budget", "tokens=100,calls=5")
	if root.GetBudget().GetLimits()["tokens"] != 100 || strings.Join(root.GetScope().GetActions(), ",") != "read,write" {
		t.Fatalf("root: %v", root)
	}
	mid := parse(t, ok(t, "derive", root.GetLeaseId(), job+"/a", "--holder", "agent", "--new-holder", "sub",
		"--budget", "tokens=40", "--scope-action", "read", "-o", "json"), &tenurev1.Lease{})
	if mid.GetParentLeaseId() != root.GetLeaseId() || mid.GetHolder() != "sub" {
		t.Fatalf("mid: %v", mid)
	}
	leaf := parse(t, ok(t, "derive", mid.GetLeaseId(), job+"/a/1", "--holder", "sub", "--new-holder", "subsub",
		"--budget", "tokens=10", "-o", "json"), &tenurev1.Lease{})
	ok(t, "derive", root.GetLeaseId(), job+"/b", "--holder", "agent", "--new-holder", "other")
	fails(t, "SCOPE_VIOLATION", "derive", mid.GetLeaseId(), job+"/a/2", "--holder", "sub", "--scope-action", "write")
	fails(t, "BUDGET_EXHAUSTED", "derive", mid.GetLeaseId(), job+"/a/2", "--holder", "sub", "--budget", "tokens=31")
	fails(t, "NOT_HOLDER", "derive", mid.GetLeaseId(), job+"/a/2", "--holder", "agent")

	cr := parse(t, ok(t, "consume", leaf.GetLeaseId(), "tokens", "7", "-o", "json"), &tenurev1.ConsumeResponse{})
	if cr.GetRemaining()["tokens"] != 3 {
		t.Fatalf("consume: %v", cr)
	}
	if out := ok(t, "consume", mid.GetLeaseId(), "tokens", "5"); !strings.Contains(out, "REMAINING") || !strings.Contains(out, "25") {
		t.Fatalf("consume table:\n%s", out)
	}
	fails(t, "BUDGET_EXHAUSTED", "consume", leaf.GetLeaseId(), "tokens", "4")
	fails(t, "BUDGET_EXHAUSTED", "consume", leaf.GetLeaseId(), "calls", "1")

	if out := ok(t, "authorize", leaf.GetLeaseId(), "--resource", job+"/a/1/x"); strings.TrimSpace(out) != "allowed" {
		t.Fatalf("authorize: %q", out)
	}
	fails(t, "SCOPE_VIOLATION", "authorize", leaf.GetLeaseId(), "--action", "write")

	out := ok(t, "tree", root.GetLeaseId())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], job+" ") || !strings.HasPrefix(lines[2], "├─ "+job+"/a ") ||
		!strings.HasPrefix(lines[3], "│  └─ "+job+"/a/1 ") || !strings.HasPrefix(lines[4], "└─ "+job+"/b ") {
		t.Fatalf("tree:\n%s", out)
	}
	if !strings.Contains(lines[1], "tokens 0/100 (+40 reserved)") || !strings.Contains(lines[2], "tokens 5/40 (+10 reserved)") ||
		!strings.Contains(lines[3], "tokens 7/10") {
		t.Fatalf("tree budgets:\n%s", out)
	}
	js := strings.Split(strings.TrimSpace(ok(t, "tree", root.GetLeaseId(), "-o", "json")), "\n")
	if len(js) != 4 || parse(t, js[2], &tenurev1.Lease{}).GetUsed()["tokens"] != 7 {
		t.Fatalf("tree json:\n%s", strings.Join(js, "\n"))
	}

	// Releasing the root ends the tree; its budget shows what the tree spent.
	ok(t, "release", root.GetLeaseId(), "--holder", "agent")
	g := parse(t, ok(t, "get", leaf.GetLeaseId(), "-o", "json"), &tenurev1.Lease{})
	if g.GetState() != tenurev1.State_STATE_RELEASED || g.GetEndedByLeaseId() != root.GetLeaseId() {
		t.Fatalf("leaf after the root's release: %v", g)
	}
	if out := ok(t, "get", root.GetLeaseId()); !strings.Contains(out, "tokens 12/100") {
		t.Fatalf("root after release:\n%s", out)
	}
}
