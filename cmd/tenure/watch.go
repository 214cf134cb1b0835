package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
)

const watchHelp = `Follow the ledger: print every event of the namespace (optionally only of
resources starting with --prefix) as it happens, one line each (NDJSON with
-o json), until Ctrl-C or --count events. --after INDEX starts after that
ledger index instead of now, so nothing is missed between a history and a
watch. A broken stream is resumed, on any endpoint, from the last event;
no endpoint answering at the start is an error (exit 1). --progress INTERVAL
asks the server, when it has sent nothing for that long (100ms to 1h), how
far the watch has got: it keeps a quiet stream open through proxies, moves
the point a broken stream resumes from, and with -o json prints
{"progressIndex":"N"} (every event up to index N has been printed).
--all-namespaces follows every namespace (with authentication, every one
the caller may read) instead of --namespace's.`

const watchExamples = `  tenure watch --prefix orders/
  tenure watch --after 1200 -o json | jq .type
  tenure watch --progress 30s -o json
  tenure watch --all-namespaces`

// errWatchDone ends a watch after --count events.
var errWatchDone = errors.New("watch done")

// runWatch is `tenure watch`.
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure watch", "[flags]", watchHelp, watchExamples, stdout, stderr)
	prefix := c.fs.String("prefix", "", "only resources starting with this")
	after := c.fs.Uint64("after", 0, "start after this ledger index (0, the default: from now; index 1, the first record, is the registrar's initialization, so --after 1 reads from the first event after it)")
	count := c.fs.Int("count", 0, "exit after this many events (default: follow until interrupted)")
	progress := c.fs.Duration("progress", 0, "ask for a progress notification after this long without events, 100ms to 1h (default: none)")
	all := c.fs.Bool("all-namespaces", false, "follow every namespace (that the caller may read), not only --namespace's")
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	switch {
	case *all && c.given("namespace"):
		return c.usageError("--all-namespaces and --namespace exclude each other")
	case *count < 0:
		return c.usageError("--count must not be negative, got %d", *count)
	case !utf8.ValidString(*prefix):
		return c.usageError("--prefix %q is not UTF-8", *prefix)
	case *progress != 0 && (*progress < 100*time.Millisecond || *progress > time.Hour):
		return c.usageError("--progress must be between 100ms and 1h, got %s", *progress)
	}
	var opts []tenure.CallOption
	if *all {
		opts = append(opts, tenure.Namespace("")) // a WatchRequest without a namespace
	}
	if *progress != 0 {
		opts = append(opts, tenure.WatchProgress(*progress, func(index uint64) error {
			if !c.json() {
				return nil // the table is of events only
			}
			return writeJSON(stdout, &tenurev1.WatchResponse{ProgressIndex: proto.Uint64(index)})
		}))
	}
	// A watch resumes a broken stream for as long as it runs; but a first
	// contact that fails is an error, as for every other command, not a
	// silent wait for a server that may never come. From now, that first
	// contact is also what pins "now", asked of every member at once: a
	// hung member must not make it seconds later (what was committed
	// meanwhile would never be shown).
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	if *after == 0 {
		// A member that does not listen yet (started a moment ago) is
		// tried again, for as long as firstAnswer would.
		deadline := time.Now().Add(retryFor)
		for *after, err = cl.LedgerIndex(ctx); err != nil; *after, err = cl.LedgerIndex(ctx) {
			if !tryNext(err) || time.Now().After(deadline) {
				return err
			}
			if pause(ctx, 100*time.Millisecond); ctx.Err() != nil {
				return ctx.Err()
			}
		}
	} else {
		r, err := c.remote()
		if err != nil {
			return err
		}
		if _, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.WhoAmI, &tenurev1.WhoAmIRequest{}); err != nil {
			return err
		}
	}
	n := 0
	err = cl.Watch(ctx, *prefix, *after, func(e *tenurev1.Event) error {
		if c.json() {
			if err := writeJSON(stdout, e); err != nil {
				return err
			}
		} else {
			if n == 0 { // with the first event: a refused watch prints only its error
				if *all {
					fmt.Fprintf(stdout, "%-16s ", "NAMESPACE")
				}
				fmt.Fprintf(stdout, "%-8s %-20s %-18s %-24s %-28s %-20s %-8s %s\n", "INDEX", "TIME", "TYPE", "RESOURCE", "LEASE ID", "HOLDER", "FENCE", "ACTOR")
			}
			if *all {
				fmt.Fprintf(stdout, "%-16s ", e.GetNamespace())
			}
			fmt.Fprintf(stdout, "%-8d %-20s %-18s %-24s %-28s %-20s %-8d %s\n", e.GetIndex(), fmtTime(e.GetTime()), e.GetType(), e.GetResource(), e.GetLeaseId(), e.GetHolder(), e.GetFence(), e.GetActor())
		}
		if n++; *count > 0 && n >= *count {
			return errWatchDone
		}
		return nil
	}, opts...)
	if errors.Is(err, errWatchDone) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		return nil // interrupted: a normal end of a watch
	}
	return err
}
