package main

import (
	"context"
	"fmt"
	"io"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const historyHelp = `Print the ledger events of one resource (issued, renewed, released,
expired, revoked, transferred, …), oldest first, as kept by the history
retention policy (24 h by default): the member's in-memory history (the last
100,000 events of the registrar) and, for older events, its ledger files
(those that may hold the resource, up to 256 MiB of them per call). When neither reaches back far enough
(files pruned, a member that joined from a snapshot) a note on stderr says
from which index it holds events; other members' files may hold the rest
(tenure audit export).`

const historyExamples = `  tenure history orders/42
  tenure history orders/42 --after 1200 --limit 50 -o json
  tenure history orders/42 --latest --limit 20`

// runHistory is `tenure history`.
func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure history", "RESOURCE [flags]", historyHelp, historyExamples, stdout, stderr)
	after := c.fs.Uint64("after", 0, "only events after this ledger index")
	limit := c.int32Flag("limit", 0, "at most this many events (default: the server's)")
	latest := c.fs.Bool("latest", false, "the newest --limit events instead of the oldest (still printed oldest first)")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return c.usageError("--limit must not be negative, got %d", *limit)
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.History, &tenurev1.HistoryRequest{Namespace: c.namespace, Resource: pos[0], AfterIndex: *after, Limit: *limit, Latest: *latest})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, eventHeader)
	for _, e := range resp.GetEvents() {
		fmt.Fprintln(tw, eventRow(e))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o := resp.GetOldestIndex(); o != 0 {
		fmt.Fprintf(stderr, "note: the member's in-memory history starts at index %d (%s); older events are not shown. "+
			"The ledger files in each member's data dir hold them: tenure audit export --data-dir DIR --after %d, then filter by resource\n",
			o, fmtTime(resp.GetOldestTime()), *after)
	}
	return nil
}
