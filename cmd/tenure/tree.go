package main

import (
	"context"
	"fmt"
	"io"
	"strings"

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

// writeTree prints leases (parents before children) indented by depth.
func writeTree(w io.Writer, leases []*tenurev1.Lease) error {
	depth := map[string]int{}
	tw := newTable(w)
	fmt.Fprintln(tw, "LEASE\tHOLDER\tSTATE\tLEFT\tBUDGET (used/limit)")
	for _, l := range leases {
		d := 0
		if pd, ok := depth[l.GetParentLeaseId()]; ok {
			d = pd + 1
		}
		depth[l.GetLeaseId()] = d
		name := strings.Repeat("  ", d)
		if d > 0 {
			name = strings.Repeat("  ", d-1) + "└─ "
		}
		name += l.GetResource() + " " + l.GetLeaseId()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, l.GetHolder(), leaseState(l), timeLeft(l), budgetText(l))
	}
	return tw.Flush()
}
