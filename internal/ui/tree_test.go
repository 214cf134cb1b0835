package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// leaseTree is a three-level lease tree: root job/42 (agent) with children
// a (sub) and b (helper), and a's child a1 (subsub), each with a share of
// the root's tokens, some of them spent.
type leaseTree struct {
	root, a, b, a1 *tenurev1.Lease
}

func seedTree(t *testing.T, e *env) leaseTree {
	t.Helper()
	ctx := context.Background()
	var tr leaseTree
	r, err := e.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "job/42", Holder: "agent", Ttl: durationpb.New(2 * time.Minute),
		Scope:  &tenurev1.Scope{ResourcePrefixes: []string{"job/42"}, Actions: []string{"read", "write", "exec"}},
		Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 1000, "calls": 50}}}))
	if err != nil {
		t.Fatalf("Acquire job/42: %v", err)
	}
	tr.root = r.Msg.Lease
	derive := func(parent *tenurev1.Lease, newHolder, resource string, tokens int64, scope *tenurev1.Scope) *tenurev1.Lease {
		r, err := e.leases.Derive(ctx, connect.NewRequest(&tenurev1.DeriveRequest{ParentLeaseId: parent.LeaseId, Holder: parent.Holder,
			NewHolder: newHolder, Resource: resource, Ttl: durationpb.New(2 * time.Minute), Scope: scope,
			Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": tokens}}}))
		if err != nil {
			t.Fatalf("Derive %s: %v", resource, err)
		}
		return r.Msg.Lease
	}
	tr.a = derive(tr.root, "sub", "job/42/a", 400, &tenurev1.Scope{Actions: []string{"read", "write"}})
	tr.b = derive(tr.root, "helper", "job/42/b", 200, nil)
	tr.a1 = derive(tr.a, "subsub", "job/42/a/1", 100, &tenurev1.Scope{ResourcePrefixes: []string{"job/42/a/"}})
	for _, c := range []struct {
		l       *tenurev1.Lease
		counter string
		n       int64
	}{{tr.a1, "tokens", 60}, {tr.a, "tokens", 240}, {tr.root, "tokens", 50}, {tr.root, "calls", 7}} {
		consume(t, e, c.l, c.counter, c.n)
	}
	return tr
}

func consume(t *testing.T, e *env, l *tenurev1.Lease, counter string, n int64) {
	t.Helper()
	if _, err := e.leases.Consume(context.Background(), connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: l.LeaseId, Counter: counter, Amount: n, Holder: l.Holder})); err != nil {
		t.Fatalf("Consume %s %s %d: %v", l.Resource, counter, n, err)
	}
}

// tree answers what the dashboard's tree under root should show.
func (e *env) tree(t *testing.T, root string) []*tenurev1.Lease {
	t.Helper()
	r, err := e.leases.Tree(context.Background(), connect.NewRequest(&tenurev1.TreeRequest{LeaseId: root}))
	if err != nil {
		t.Fatalf("Tree: %v", err)
	}
	return r.Msg.Leases
}

// barsMatch is a JS expression: every node's budget bars carry the API's
// figures for every counter the lease limits, and the used segment's
// width is its share of the limit.
func barsMatch(leases []*tenurev1.Lease) string {
	expr := "true"
	for _, l := range leases {
		for c, limit := range l.Budget.GetLimits() {
			sel := fmt.Sprintf(`document.querySelector('li[data-lease=%s] > .node .budget[data-counter=%s]')`, q(l.LeaseId), q(c))
			expr += fmt.Sprintf(` && ((b) => b !== null && b.dataset.used === "%d" && b.dataset.reserved === "%d" && b.dataset.limit === "%d" &&
				Math.abs(parseFloat(b.querySelector(".used").style.width) - %f) < 0.01 &&
				Math.abs(parseFloat(b.querySelector(".reserved").style.width) - %f) < 0.01)(%s)`,
				l.Used[c], l.Reserved[c], limit, float64(l.Used[c])/float64(limit)*100, float64(l.Reserved[c])/float64(limit)*100, sel)
		}
	}
	return expr
}

// parentIs is a JS expression: the node of child sits in the subtree list
// of the node of parent.
func parentIs(child, parent *tenurev1.Lease) string {
	return fmt.Sprintf(`document.querySelector('li[data-lease=%s]')?.parentElement.closest("li.tree-node")?.dataset.lease === %s`, q(child.LeaseId), q(parent.LeaseId))
}

// testTree: a lease tree renders nested with the API's budget figures,
// follows consumption live, and a revoke of its root from the dashboard
// ends (and greys) the whole tree.
func testTree(t *testing.T, e *env) {
	tr := seedTree(t, e)
	ctx := context.Background()

	// From the leases table: a derived lease is marked and links to its
	// page, which names its parent and scope and shows the tree from the root.
	e.open(t, "/leases?prefix=job/42")
	e.waitJS(t, "the tree's rows", `document.querySelectorAll("#lease-table tbody tr .tree-mark").length === 4`)
	e.step(t, "open job/42/a", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-lease=%s] a.lease-link`, q(tr.a.LeaseId)))))
	e.waitJS(t, "job/42/a's page", fmt.Sprintf(`document.querySelector("#lease-id")?.textContent === %s &&
		document.querySelector("#lease-parent a")?.getAttribute("href") === %s &&
		document.querySelector("#scope-actions").textContent === "read, write" && document.querySelector("#scope-prefixes").textContent === "job/42"`,
		q(tr.a.LeaseId), q("#/lease/"+tr.root.LeaseId)))
	e.waitJS(t, "the tree from the root, a marked", fmt.Sprintf(`document.querySelector("#tree > li")?.dataset.lease === %s &&
		document.querySelector("li.tree-node.current")?.dataset.lease === %s`, q(tr.root.LeaseId), q(tr.a.LeaseId)))
	e.step(t, "go to the parent", chromedp.Click(chromedp.CSS(`#lease-parent a`)))
	e.waitJS(t, "the root's page", fmt.Sprintf(`location.hash === %s && document.querySelector("#lease-id")?.textContent === %s &&
		document.querySelector("#lease-parent").textContent.includes("none")`, q("#/lease/"+tr.root.LeaseId), q(tr.root.LeaseId)))

	// Nesting, order and depth as Tree answers.
	want := e.tree(t, tr.root.LeaseId)
	if len(want) != 4 {
		t.Fatalf("Tree answered %d leases, want 4", len(want))
	}
	e.waitJS(t, "the nesting", parentIs(tr.a, tr.root)+" && "+parentIs(tr.b, tr.root)+" && "+parentIs(tr.a1, tr.a)+
		fmt.Sprintf(` && document.querySelector('li[data-lease=%s]').dataset.depth === "2" && document.querySelectorAll("#tree li.tree-node").length === 4`, q(tr.a1.LeaseId)))
	e.waitJS(t, "each node's holder, resource, state and time left", `[...document.querySelectorAll("#tree li.tree-node")].every(li =>
		li.querySelector(":scope > .node .holder").textContent === li.dataset.holder && li.querySelector(":scope > .node .res").textContent === li.dataset.resource &&
		li.dataset.state === "active" && Number(li.querySelector(":scope > .node .timeleft")?.dataset.left) > 0)`)
	e.waitJS(t, "the budget bars", barsMatch(want))
	// A counter only the root limits is shown on the root alone.
	e.waitJS(t, "calls on the root", fmt.Sprintf(`document.querySelectorAll(".budget[data-counter=calls]").length === 1 &&
		document.querySelector('li[data-lease=%s] > .node .budget[data-counter=calls]')?.dataset.used === "7"`, q(tr.root.LeaseId)))

	// Consumption through the Go API shows without a reload.
	consume(t, e, tr.a1, "tokens", 15)
	e.waitJS(t, "the consumption", fmt.Sprintf(`document.querySelector('li[data-lease=%s] > .node .budget[data-counter=tokens]')?.dataset.used === "75"`, q(tr.a1.LeaseId)))
	e.waitJS(t, "the budget bars after Consume", barsMatch(e.tree(t, tr.root.LeaseId)))
	e.screenshot(t, "lease-tree")

	// Revoking the root from the dashboard ends its subtree: greyed. The
	// dialog says so first; Enter in its reason field confirms.
	btn := chromedp.CSS(fmt.Sprintf(`li[data-lease=%s] > .node button.revoke`, q(tr.root.LeaseId)))
	e.step(t, "ask to revoke the root", chromedp.WaitVisible(btn), chromedp.Click(btn), chromedp.WaitVisible(chromedp.ID("confirm-ok")))
	e.waitJS(t, "the dialog naming the derived leases", `document.querySelector("#confirm-text").textContent.includes("also ends the 3 active leases derived from it")`)
	e.step(t, "confirm with Enter", chromedp.SendKeys(chromedp.ID("confirm-reason"), "\r"))
	e.waitJS(t, "the server's answer", `document.querySelector("#lease-message .notice")?.textContent.includes("Revoked job/42")`)
	e.waitJS(t, "when and why it ended", `document.querySelector("#lease-ended")?.textContent.includes("revoked: revoked from the dashboard")`)
	e.waitJS(t, "the ended tree", `(() => { const n = [...document.querySelectorAll("#tree li.tree-node")];
		return n.length === 4 && n.every(li => li.dataset.state === "revoked" && li.classList.contains("ended") &&
			getComputedStyle(li.querySelector(":scope > .node")).opacity === "0.5" && li.querySelector("button.revoke") === null) })()`)
	for _, l := range []*tenurev1.Lease{tr.a, tr.b, tr.a1} {
		r, err := e.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: l.LeaseId}))
		if err != nil {
			t.Fatal(err)
		}
		if r.Msg.Lease.State != tenurev1.State_STATE_REVOKED || r.Msg.Lease.EndedByLeaseId != tr.root.LeaseId {
			t.Errorf("%s after the root's revoke: %v, ended by %q", l.Resource, r.Msg.Lease.State, r.Msg.Lease.EndedByLeaseId)
		}
		e.waitJS(t, l.Resource+" ended by the root", fmt.Sprintf(`document.querySelector('li[data-lease=%s] > .node .ended-at a')?.getAttribute("href") === %s`,
			q(l.LeaseId), q("#/lease/"+tr.root.LeaseId)))
	}
}
