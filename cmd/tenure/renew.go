package main

import (
	"context"
	"fmt"
	"io"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const renewHelp = `Renew leases by id as their holder (--holder; or every active lease of the
holder with --all) and print them: a lease of another holder is refused
(NOT_HOLDER). Without --ttl each lease is renewed for its own ttl. With one
id a refusal is the command's error; with several, every refusal is printed
to stderr and the command exits 1 if there was any.`

const renewExamples = `  tenure renew 01JD3…
  tenure renew 01JD3… 01JD4… --ttl 2m --holder w1
  tenure renew --all --holder w1`

// runRenew is `tenure renew`.
func runRenew(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure renew", "ID... [flags]", renewHelp, renewExamples, stdout, stderr)
	ttl := c.fs.Duration("ttl", 0, "new ttl (default: each lease's own)")
	all := c.fs.Bool("all", false, "renew every active lease of --holder instead of ids")
	cert := c.fs.Bool("certificate", false, "ask for new lease certificates")
	c.holderFlag(stableHolder(), "user@host")
	ids, err := c.parse(args, 0, -1)
	if err != nil {
		return err
	}
	switch {
	case *all && len(ids) > 0:
		return c.usageError("give lease ids or --all, not both")
	case !*all && len(ids) == 0:
		return c.usageError("missing argument")
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	req := &tenurev1.RenewRequest{LeaseIds: ids, Holder: c.holder, AllOfHolder: *all, Certificate: *cert, Namespace: c.namespace}
	req.Ttl = c.durationIfGiven("ttl", *ttl)
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Renew, req)
	if err != nil {
		return err
	}
	switch {
	case c.json():
		err = writeJSON(stdout, resp)
	case len(resp.GetLeases()) > 0: // no table of none
		err = writeLeases(stdout, resp.GetLeases()...)
	}
	if err != nil {
		return err
	}
	fs := resp.GetFailures()
	if len(fs) == 0 {
		return nil
	}
	// In the order of the ids; each message starts with its reason and
	// names the lease. The last stands first on its line as the
	// command's error.
	last := fs[len(fs)-1]
	for _, f := range fs[:len(fs)-1] {
		fmt.Fprintln(stderr, f.GetMessage())
	}
	return fmt.Errorf("%s (%d of %d renewals refused)", last.GetMessage(), len(fs), len(fs)+len(resp.GetLeases()))
}
