package main

import (
	"context"
	"fmt"
	"io"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const verifyHelp = `Ask the registrar for the current state of lease ids, in order: the
reality check of an agent that restarted. An id that is not found (never
issued, or pruned after it ended) is listed as such. Exits 0 whatever the
states; scripts read -o json (results[].found, results[].lease.state).`

const verifyExamples = `  tenure verify 01JD3… 01JD4…
  tenure verify 01JD3… -o json`

// runVerify is `tenure verify`.
func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure verify", "ID... [flags]", verifyHelp, verifyExamples, stdout, stderr)
	ids, err := c.parse(args, 1, -1)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Verify, &tenurev1.VerifyRequest{LeaseIds: ids})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "LEASE ID\tFOUND\tSTATE\tRESOURCE\tHOLDER\tFENCE\tLEFT")
	for _, v := range resp.GetResults() {
		if !v.GetFound() {
			fmt.Fprintf(tw, "%s\tno\t-\t-\t-\t-\t-\n", v.GetLeaseId())
			continue
		}
		l := v.GetLease()
		fmt.Fprintf(tw, "%s\tyes\t%s\t%s\t%s\t%d\t%s\n", v.GetLeaseId(), leaseState(l), l.GetResource(), l.GetHolder(), l.GetFence(), timeLeft(l))
	}
	return tw.Flush()
}
