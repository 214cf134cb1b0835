package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/fencing"
)

const fenceHelp = `Ask the registrar whether FENCE belongs to an active lease of RESOURCE.
Prints the answer and the resource's active fence; exits 1 (FENCE_STALE) when
the fence is not current.`

const fenceExamples = `  tenure fence check orders/42 17 && write-with-fence 17`

// runFence is `tenure fence check`.
func runFence(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure fence", "check RESOURCE FENCE [flags]", fenceHelp, fenceExamples, stdout, stderr)
	pos, err := c.parse(args, 1, 3)
	if err != nil {
		return err
	}
	if pos[0] != "check" {
		return c.usageError("%s", unknownSubcommand(pos[0], "check"))
	}
	if len(pos) < 3 {
		return c.usageError("missing argument: fence check takes RESOURCE and FENCE")
	}
	fence, err := strconv.ParseUint(pos[2], 10, 64)
	if err != nil {
		return c.usageError("FENCE must be a number, got %q", pos[2])
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.CheckFence, &tenurev1.CheckFenceRequest{Namespace: c.namespace, Resource: pos[1], Fence: fence})
	if err != nil {
		return err
	}
	if c.json() {
		err = writeJSON(stdout, resp)
	} else {
		tw := newTable(stdout)
		fmt.Fprintf(tw, "current\t%v\nactive fence\t%d\n", resp.GetCurrent(), resp.GetActiveFence())
		err = tw.Flush()
	}
	if err != nil {
		return err
	}
	if !resp.GetCurrent() {
		return fmt.Errorf("%s: fence %d is not current for %s (active fence %d)", fencing.ReasonFenceStale, fence, pos[1], resp.GetActiveFence())
	}
	return nil
}
