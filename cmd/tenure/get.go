package main

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const getHelp = `Print a lease by id, in any state. With --certificate the registrar signs
an active lease's current state (verify it offline with tenure cert verify);
a lease that has ended gets no certificate (a note on stderr says so).`

const getExamples = `  tenure get 01JD3…
  tenure get 01JD3… --certificate -o json | tenure cert verify`

// runGet is `tenure get`.
func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure get", "ID [flags]", getHelp, getExamples, stdout, stderr)
	cert := c.fs.Bool("certificate", false, "include a lease certificate")
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
		res, err := l.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: pos[0], Certificate: *cert}))
		if err == nil {
			lease = res.Msg.GetLease()
		}
		return err
	})
	if err != nil {
		return err
	}
	if *cert && len(lease.GetSignature()) == 0 {
		fmt.Fprintf(stderr, "note: no certificate: lease %s is %s, and only an active lease gets one\n", lease.GetLeaseId(), leaseState(lease))
	}
	if c.json() {
		return writeJSON(stdout, lease)
	}
	return writeLeaseDetail(stdout, lease)
}
