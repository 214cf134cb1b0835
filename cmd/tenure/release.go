package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const releaseHelp = `Release a lease (as its holder) and print it. Releasing a lease that has
already ended succeeds and says so.`

const releaseExamples = `  tenure release 01JD3…
  tenure release 01JD3… --reason aborted --holder w1`

// runRelease is `tenure release`.
func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure release", "ID [flags]", releaseHelp, releaseExamples, stdout, stderr)
	reason := c.fs.String("reason", "voluntary", "completed, aborted or voluntary")
	c.holderFlag(stableHolder(), "user@host")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	rr, ok := tenurev1.ReleaseReason_value["RELEASE_REASON_"+strings.ToUpper(*reason)]
	if !ok || rr == int32(tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED) || rr == 0 {
		return c.usageError("--reason must be completed, aborted or voluntary, got %q", *reason)
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Release, &tenurev1.ReleaseRequest{LeaseId: pos[0], Holder: c.holder, Reason: tenurev1.ReleaseReason(rr)})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	if resp.GetAlreadyTerminal() {
		fmt.Fprintf(stderr, "lease %s had already ended\n", pos[0])
	}
	return writeLeaseDetail(stdout, resp.GetLease())
}
