package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const consumeHelp = `Charge AMOUNT of COUNTER to the lease ID's budget and print what it has left
of each counter it limits. Over budget → BUDGET_EXHAUSTED (exit 1), and
nothing is charged. A counter limited by an ancestor but not carved to the
lease cannot be spent; one limited nowhere in its tree is only counted.`

const consumeExamples = `  tenure consume 01JD3… tokens 1200
  tenure consume 01JD3… tool_calls 1 -o json`

// runConsume is `tenure consume`.
func runConsume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure consume", "ID COUNTER AMOUNT [flags]", consumeHelp, consumeExamples, stdout, stderr)
	c.holderFlag("", "none: any caller")
	pos, err := c.parse(args, 3, 3)
	if err != nil {
		return err
	}
	amount, err := strconv.ParseInt(pos[2], 10, 64)
	if err != nil || amount <= 0 {
		return c.usageError("AMOUNT must be a positive integer, got %q", pos[2])
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Consume, &tenurev1.ConsumeRequest{
		LeaseId: pos[0], Counter: pos[1], Amount: amount, Holder: c.holder,
	})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "COUNTER\tUSED\tLIMIT\tRESERVED\tREMAINING")
	l := resp.GetLease()
	names := []string{}
	for k := range l.GetUsed() {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		limit, rem := "-", "unlimited"
		if v, ok := l.GetBudget().GetLimits()[k]; ok {
			limit, rem = strconv.FormatInt(v, 10), strconv.FormatInt(resp.GetRemaining()[k], 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", k, l.GetUsed()[k], limit, l.GetReserved()[k], rem)
	}
	return tw.Flush()
}
