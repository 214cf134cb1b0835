package main

import (
	"context"
	"fmt"
	"io"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const treeHelp = `Print the lease ID and its derived leases as an indented tree: each lease's
resource, holder, state, time left and budget (used/limit per counter, and
what is reserved for its children). -o json prints the leases, parents
before children, one per line.`

const treeExamples = `  tenure tree 01JD3…
  tenure tree 01JD3… -o json`

// runTree is `tenure tree`.
func runTree(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure tree", "ID [flags]", treeHelp, treeExamples, stdout, stderr)
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Tree, &tenurev1.TreeRequest{LeaseId: pos[0]})
	if err != nil {
		return err
	}
	if c.json() {
		for _, l := range resp.GetLeases() {
			if err := writeJSON(stdout, l); err != nil {
				return err
			}
		}
		return nil
	}
	return writeTree(stdout, resp.GetLeases())
}

// writeTree prints leases (parents before children) as a tree: each
// child under its parent, joined by ├─ and └─ (the last child), with │
// carrying a branch down past a child's own subtree.
func writeTree(w io.Writer, leases []*tenurev1.Lease) error {
	present := make(map[string]bool, len(leases))
	for _, l := range leases {
		present[l.GetLeaseId()] = true
	}
	children := map[string][]*tenurev1.Lease{}
	var roots []*tenurev1.Lease
	for _, l := range leases {
		if p := l.GetParentLeaseId(); p != "" && present[p] {
			children[p] = append(children[p], l)
		} else {
			roots = append(roots, l)
		}
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "LEASE\tHOLDER\tSTATE\tLEFT\tBUDGET (used/limit)")
	var walk func(l *tenurev1.Lease, lead, branch string)
	walk = func(l *tenurev1.Lease, lead, branch string) {
		fmt.Fprintf(tw, "%s%s%s %s\t%s\t%s\t%s\t%s\n", lead, branch, l.GetResource(), l.GetLeaseId(),
			l.GetHolder(), leaseState(l), timeLeft(l), budgetText(l))
		switch branch {
		case "├─ ":
			lead += "│  "
		case "└─ ":
			lead += "   "
		}
		cs := children[l.GetLeaseId()]
		for i, c := range cs {
			b := "├─ "
			if i == len(cs)-1 {
				b = "└─ "
			}
			walk(c, lead, b)
		}
	}
	for _, l := range roots {
		walk(l, "", "")
	}
	return tw.Flush()
}
