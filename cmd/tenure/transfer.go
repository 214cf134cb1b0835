package main

import (
	"context"
	"io"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const transferHelp = `Hand a lease over to NEW_HOLDER without a gap: the old lease ends (released,
reason transferred) and a new lease with a higher fence is granted to
NEW_HOLDER in the same step. Prints the new lease.`

const transferExamples = `  tenure transfer 01JD3… w2
  tenure transfer 01JD3… w2 --ttl 1m --holder w1 -o json`

// runTransfer is `tenure transfer`.
func runTransfer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure transfer", "ID NEW_HOLDER [flags]", transferHelp, transferExamples, stdout, stderr)
	ttl := c.fs.Duration("ttl", 0, "ttl of the new lease (default: the old lease's)")
	cert := c.fs.Bool("certificate", false, "ask for a certificate of the new lease")
	c.holderFlag(stableHolder(), "user@host")
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	req := &tenurev1.TransferRequest{LeaseId: pos[0], Holder: c.holder, NewHolder: pos[1], Certificate: *cert}
	req.Ttl = c.durationIfGiven("ttl", *ttl)
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Transfer, req)
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	return writeLeaseDetail(stdout, resp.GetLease())
}
