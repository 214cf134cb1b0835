package main

import (
	"context"
	"io"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const revokeHelp = `Revoke any lease (admin): it ends at once, and its holder's heartbeats are
refused from then on. The reason is free text kept in the ledger.`

const revokeExamples = `  tenure revoke 01JD3… --reason "stuck worker w7"`

// runRevoke is `tenure revoke`.
func runRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure revoke", "ID [flags]", revokeHelp, revokeExamples, stdout, stderr)
	reason := c.fs.String("reason", "", "why (free text, recorded in the ledger)")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	var lease *tenurev1.Lease
	err = r.lease(func(l tenurev1connect.LeaseServiceClient) error {
		res, err := l.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: pos[0], Reason: *reason}))
		if err == nil {
			lease = res.Msg.GetLease()
		}
		return err
	})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, lease)
	}
	return writeLeaseDetail(stdout, lease)
}
