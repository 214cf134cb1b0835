package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const lsHelp = `List the leases of a namespace, optionally only those of one --resource, those
whose resource starts with --prefix, of one --holder, or in some --state. Prints one page (see
--page-size and --page-token) or, with --all, every page. With --resource it also
lists the resource's queued acquires (acquire --wait), first in line first.`

const lsExamples = `  tenure ls
  tenure ls --prefix orders/ --state active
  tenure ls --resource orders/42 --state active
  tenure ls --holder w1 --state active,expired --all -o json`

// runLs is `tenure ls`.
func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure ls", "[flags]", lsHelp, lsExamples, stdout, stderr)
	prefix := c.fs.String("prefix", "", "only resources starting with this")
	resource := c.fs.String("resource", "", "only this resource (exactly), and its queued acquires")
	holder := c.fs.String("holder", "", "only leases of this holder")
	states := c.fs.String("state", "", "comma-separated states: active, released, expired, revoked (default: all)")
	unmarked := c.fs.Bool("expired-unmarked", false, "only leases past their expiry whose expiry no lease.expired event has recorded yet")
	pageSize := c.int32Flag("page-size", 0, "leases per page (default: the server's)")
	pageToken := c.fs.String("page-token", "", "continue from a previous page")
	all := c.fs.Bool("all", false, "fetch every page")
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	if *pageSize < 0 {
		return c.usageError("--page-size must not be negative, got %d", *pageSize)
	}
	req := &tenurev1.ListRequest{Namespace: c.namespace, Prefix: *prefix, Resource: *resource, Holder: *holder, PageSize: *pageSize, PageToken: *pageToken,
		ExpiredUnmarked: *unmarked}
	for s := range strings.SplitSeq(*states, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		v, ok := tenurev1.State_value["STATE_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			return c.usageError("--state: unknown state %q (want active, released, expired or revoked)", s)
		}
		req.States = append(req.States, tenurev1.State(v))
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	out := &tenurev1.ListResponse{}
	for {
		page, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.List, req)
		if err != nil {
			return err
		}
		out.Leases = append(out.Leases, page.GetLeases()...)
		out.Counts, out.NextPageToken = page.GetCounts(), page.GetNextPageToken()
		if out.Waiters == nil {
			out.Waiters = page.GetWaiters() // the resource's queue, on every page alike
		}
		if !*all || page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	if c.json() {
		return writeJSON(stdout, out)
	}
	if err := writeLeases(stdout, out.GetLeases()...); err != nil {
		return err
	}
	if len(out.GetWaiters()) > 0 {
		if err := writeWaiters(stdout, out.GetWaiters()); err != nil {
			return err
		}
	}
	if out.GetNextPageToken() != "" {
		fmt.Fprintf(stderr, "more leases: --page-token %s (or --all)\n", out.GetNextPageToken())
	}
	return nil
}
