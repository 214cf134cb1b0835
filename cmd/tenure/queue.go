package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const queueUsage = `usage: tenure queue <subcommand> QUEUE [flags]   (tenure queue <subcommand> --help for more)

The work queue: tasks are claimed under leases; a task whose lease expires
returns to the queue by itself (the attempt counts: on its last attempt the
task is dead; a lease released or revoked returns it without counting). A task lease renews at most 10 times
and lives at most 2h by default (tenure policy set NS --task-max-renewals
--task-max-lifetime): renewing every ttl/3, as the Go Worker does, a handler
has about 11/3 of the lease ttl; claim with a longer --ttl for longer tasks.

subcommands:
  push      enqueue a task (data from --data, --file or stdin)
  claim     claim tasks, each under its own lease
  complete  complete a claimed task, with an optional result
  fail      fail an attempt of a claimed task (retried until max attempts)
  cancel    cancel a queued or leased task
  retry     run a dead, cancelled, succeeded or failed task again
  get       print a task
  ls        list a queue's tasks
  stats     count a queue's tasks by state
  config    print or set a queue's defaults (--max-attempts)
  list      list the namespace's queues with their counts
`

// queueSubcommands are the `tenure queue` subcommands.
var queueSubcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"push":     queuePush,
	"claim":    queueClaim,
	"complete": queueComplete,
	"fail":     queueFail,
	"cancel":   queueCancel,
	"retry":    queueRetry,
	"list":     queueList,
	"get":      queueGet,
	"ls":       queueLs,
	"stats":    queueStats,
	"config":   queueConfig,
}

// runQueue is `tenure queue`.
func runQueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, queueUsage)
		return usagef("queue: missing subcommand")
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, queueUsage)
		return nil
	}
	sub, ok := queueSubcommands[args[0]]
	if !ok {
		fmt.Fprint(stderr, queueUsage)
		return usagef("queue: %s", unknownSubcommand(args[0], "push", "claim", "complete", "fail", "cancel", "retry", "get", "ls", "stats", "config", "list"))
	}
	return sub(ctx, args[1:], stdout, stderr)
}

// queueCall makes one unary QueueService call (a method expression such as
// tenurev1connect.QueueServiceClient.GetTask) against each endpoint in turn,
// moving on only when the request cannot have been processed (see
// remote.lease). The error is parsed into the Go client's typed errors.
func queueCall[Req, Resp any](ctx context.Context, c *cliCommand,
	method func(tenurev1connect.QueueServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	req *Req) (*Resp, error) {
	r, err := c.remote()
	if err != nil {
		return nil, err
	}
	return call(ctx, r.queues, method, req)
}

const queuePushHelp = `Enqueue a task into QUEUE (created on first use) and print it. The payload
is --data, the contents of --file, or stdin. --id makes the push idempotent:
pushing an id that exists answers the existing task, unchanged (and says so
on stderr), for as long as the task is kept: finished tasks are pruned after
the namespace's lease retention (1h), or sooner when the namespace keeps more
than its --max-retained-tasks (100000; the queue keeping the most gives up
its oldest first), and a pruned id may be pushed again. Ids of the form T<number> are
the server's generated ones and cannot be chosen.
--not-before takes an RFC 3339 time or a delay from now (30s, 5m).`

const queuePushExamples = `  tenure queue push emails --data '{"to":"a@example.com"}'
  tenure queue push emails --id order-42 --priority 10 --file job.json
  echo hello | tenure queue push jobs --not-before 5m --max-attempts 3 -o json`

func queuePush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue push", "QUEUE [flags]", queuePushHelp, queuePushExamples, stdout, stderr)
	id := c.fs.String("id", "", "task id (idempotency key; default: generated)")
	priority := c.int32Flag("priority", 0, "priority: higher is claimed first")
	notBefore := c.fs.String("not-before", "", "not claimable before this RFC 3339 time or delay from now")
	maxAttempts := c.uint32Flag("max-attempts", 0, "attempts before the task is dead (default: the queue's, 5)")
	data := c.fs.String("data", "", "the payload")
	file := c.fs.String("file", "", "read the payload from this file")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	nt := &tenurev1.NewTask{TaskId: *id, Priority: *priority, MaxAttempts: *maxAttempts}
	if *notBefore != "" {
		if d, err := time.ParseDuration(*notBefore); err == nil {
			nt.NotBefore = timestamppb.New(time.Now().Add(d))
		} else if t, err := time.Parse(time.RFC3339Nano, *notBefore); err == nil {
			nt.NotBefore = timestamppb.New(t)
		} else {
			return c.usageError("--not-before: want an RFC 3339 time or a duration, got %q", *notBefore)
		}
	}
	switch {
	case *data != "" && *file != "":
		return c.usageError("give --data or --file, not both")
	case *data != "":
		nt.Payload = []byte(*data)
	case *file != "":
		if nt.Payload, err = os.ReadFile(*file); err != nil {
			return err
		}
	default:
		if nt.Payload, err = io.ReadAll(os.Stdin); err != nil {
			return err
		}
	}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Enqueue,
		&tenurev1.EnqueueRequest{Namespace: c.namespace, Queue: pos[0], Tasks: []*tenurev1.NewTask{nt}})
	if err != nil {
		return err
	}
	if len(resp.GetTasks()) != 1 {
		return fmt.Errorf("the server answered %d tasks for one", len(resp.GetTasks()))
	}
	if ex := resp.GetExisted(); len(ex) == 1 && ex[0] {
		fmt.Fprintf(stderr, "task %s already existed in %s: answered as it is (nothing was enqueued)\n", resp.GetTasks()[0].GetTaskId(), pos[0])
	}
	if c.json() {
		return writeJSON(stdout, resp.GetTasks()[0])
	}
	return writeTasks(stdout, resp.GetTasks()...)
}

const queueClaimHelp = `Claim up to --max tasks of QUEUE for --holder, each under its own lease
(renew it with tenure renew; finish with tenure queue complete or fail), and
print them with their lease ids. --wait long-polls for a claimable task.
Nothing claimable is not an error: the answer is empty.`

const queueClaimExamples = `  tenure queue claim emails
  tenure queue claim emails --max 10 --ttl 2m --wait 30s -o json
  tenure queue claim emails --worker mailer-1`

func queueClaim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue claim", "QUEUE [flags]", queueClaimHelp, queueClaimExamples, stdout, stderr)
	maxN := c.uint32Flag("max", 1, "claim up to this many tasks")
	ttl := c.fs.Duration("ttl", 0, "ttl of each task lease (default: the namespace's)")
	wait := c.fs.Duration("wait", 0, "wait up to this long for a claimable task")
	c.holderFlag(stableHolder(), "user@host")
	worker := c.fs.String("worker", "", "the same as --holder (the API's name for it)")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if c.given("worker") {
		if c.given("holder") && c.holder != *worker {
			return c.usageError("--holder %q and --worker %q differ (--worker is another name for --holder: give one)", c.holder, *worker)
		}
		c.holder, c.principalHolder = *worker, false
	}
	if err := c.notNegative("wait", *wait); err != nil {
		return err
	}
	if *maxN == 0 {
		return c.usageError("--max must be at least 1")
	}
	req := &tenurev1.ClaimRequest{Namespace: c.namespace, Queue: pos[0], Worker: c.holder, Max: *maxN,
		LeaseTtl: c.durationIfGiven("ttl", *ttl), Wait: c.durationIfGiven("wait", *wait)}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Claim, req)
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "TASK ID\tLEASE ID\tATTEMPT\tEXPIRES\tPAYLOAD")
	for _, t := range resp.GetTasks() {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", t.GetTaskId(), t.GetLeaseId(), t.GetAttempts(), t.GetMaxAttempts(),
			fmtTime(t.GetLease().GetExpiresAt()), short(t.GetPayload()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(resp.GetTasks()) == 0 {
		fmt.Fprintln(stderr, "no claimable task")
	}
	if m := resp.GetMessage(); m != "" {
		fmt.Fprintln(stderr, m)
	}
	return nil
}

const queueCompleteHelp = `Complete TASK of QUEUE by its current lease (--lease), recording --result.
A lease that is no longer the task's (expired and re-claimed, cancelled) is
refused with TASK_NOT_LEASED. Completing twice by the same lease is harmless.`

const queueCompleteExamples = `  tenure queue complete emails 01JD5… --lease 01JD6…
  tenure queue complete emails 01JD5… --lease 01JD6… --result sent -o json`

func queueComplete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue complete", "QUEUE TASK --lease ID [flags]", queueCompleteHelp, queueCompleteExamples, stdout, stderr)
	lease := c.fs.String("lease", "", "the task's current lease (required)")
	result := c.fs.String("result", "", "the task's result")
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	if *lease == "" {
		return c.usageError("--lease is required")
	}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Complete, &tenurev1.CompleteRequest{
		Namespace: c.namespace, Queue: pos[0], TaskId: pos[1], LeaseId: *lease, Result: []byte(*result)})
	if err != nil {
		return err
	}
	return writeTask(c, resp.GetTask())
}

const queueFailHelp = `Fail the current attempt of TASK of QUEUE by its lease (--lease) with an
error message. The task is retried after --retry-after, or by default after
a backoff of attempt⁴ seconds (1s, 16s, 81s, 256s, …, at most 1h, with
jitter); once its attempts are used up it is dead (tenure queue retry runs it
again).`

const queueFailExamples = `  tenure queue fail emails 01JD5… --lease 01JD6… --error "smtp: 451"
  tenure queue fail emails 01JD5… --lease 01JD6… --error timeout --retry-after 1m`

func queueFail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue fail", "QUEUE TASK --lease ID --error MSG [flags]", queueFailHelp, queueFailExamples, stdout, stderr)
	lease := c.fs.String("lease", "", "the task's current lease (required)")
	msg := c.fs.String("error", "", "what went wrong (required)")
	retryAfter := c.fs.Duration("retry-after", 0, "retry after this delay (default: attempt⁴ seconds, at most 1h)")
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	if *lease == "" || *msg == "" {
		return c.usageError("--lease and --error are required")
	}
	if err := c.notNegative("retry-after", *retryAfter); err != nil {
		return err
	}
	req := &tenurev1.FailRequest{Namespace: c.namespace, Queue: pos[0], TaskId: pos[1], LeaseId: *lease, Error: *msg,
		RetryAfter: c.durationIfGiven("retry-after", *retryAfter)}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Fail, req)
	if err != nil {
		return err
	}
	return writeTask(c, resp.GetTask())
}

const queueCancelHelp = `Cancel TASK of QUEUE: a queued task is never claimed; a leased task's lease
is revoked. A finished task is printed unchanged.`

const queueCancelExamples = `  tenure queue cancel emails 01JD5…`

func queueCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue cancel", "QUEUE TASK [flags]", queueCancelHelp, queueCancelExamples, stdout, stderr)
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Cancel,
		&tenurev1.CancelRequest{Namespace: c.namespace, Queue: pos[0], TaskId: pos[1]})
	if err != nil {
		return err
	}
	return writeTask(c, resp.GetTask())
}

const queueRetryHelp = `Run TASK of QUEUE again from its first attempt: a dead, cancelled or
succeeded task is queued again, claimable now, its attempts reset (its last
error kept, its result dropped); a failed task waiting for its retry becomes
claimable now, its attempts reset. A queued or leased task is printed
unchanged.`

const queueRetryExamples = `  tenure queue retry emails order-42
  tenure queue ls emails --state dead -o json   # what there is to retry`

func queueRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue retry", "QUEUE TASK [flags]", queueRetryHelp, queueRetryExamples, stdout, stderr)
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Retry,
		&tenurev1.RetryRequest{Namespace: c.namespace, Queue: pos[0], TaskId: pos[1]})
	if err != nil {
		return err
	}
	return writeTask(c, resp.GetTask())
}

const queueListHelp = `List the namespace's queues with their tasks by state.`

func queueList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue list", "[flags]", queueListHelp, "  tenure queue list --namespace jobs", stdout, stderr)
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.ListQueues, &tenurev1.ListQueuesRequest{Namespace: c.namespace})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "QUEUE\tQUEUED\tLEASED\tSUCCEEDED\tFAILED\tDEAD\tCANCELLED\tOLDEST READY")
	for _, q := range resp.GetQueues() {
		st := q.GetStats()
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", q.GetQueue(), st.GetQueued(), st.GetLeased(), st.GetSucceeded(),
			st.GetFailed(), st.GetDead(), st.GetCancelled(), oldestReady(st))
	}
	return tw.Flush()
}

const queueGetHelp = `Print TASK of QUEUE field by field (with its lease while it is leased).`

const queueGetExamples = `  tenure queue get emails 01JD5…
  tenure queue get emails order-42 -o json`

func queueGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue get", "QUEUE TASK [flags]", queueGetHelp, queueGetExamples, stdout, stderr)
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.GetTask,
		&tenurev1.GetTaskRequest{Namespace: c.namespace, Queue: pos[0], TaskId: pos[1]})
	if err != nil {
		return err
	}
	return writeTask(c, resp.GetTask())
}

const queueLsHelp = `List the tasks of QUEUE in enqueue order, optionally only those in some
--state (queued, leased, succeeded, failed, dead, cancelled). Prints one page
(see --page-size and --page-token) or, with --all, every page.`

const queueLsExamples = `  tenure queue ls emails
  tenure queue ls emails --state failed,dead --all -o json`

func queueLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue ls", "QUEUE [flags]", queueLsHelp, queueLsExamples, stdout, stderr)
	states := c.fs.String("state", "", "comma-separated states (default: all)")
	pageSize := c.uint32Flag("page-size", 0, "tasks per page (default: the server's, 100)")
	pageToken := c.fs.String("page-token", "", "continue from a previous page")
	all := c.fs.Bool("all", false, "fetch every page")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	req := &tenurev1.ListTasksRequest{Namespace: c.namespace, Queue: pos[0], PageSize: *pageSize, PageToken: *pageToken}
	for s := range strings.SplitSeq(*states, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		v, ok := tenurev1.TaskState_value["TASK_STATE_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			return c.usageError("--state: unknown state %q (want queued, leased, succeeded, failed, dead or cancelled)", s)
		}
		req.States = append(req.States, tenurev1.TaskState(v))
	}
	out := &tenurev1.ListTasksResponse{}
	for {
		page, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.ListTasks, req)
		if err != nil {
			return err
		}
		out.Tasks = append(out.Tasks, page.GetTasks()...)
		out.NextPageToken = page.GetNextPageToken()
		if !*all || out.NextPageToken == "" {
			break
		}
		req.PageToken = out.NextPageToken
	}
	if c.json() {
		return writeJSON(stdout, out)
	}
	if err := writeTasks(stdout, out.GetTasks()...); err != nil {
		return err
	}
	if out.GetNextPageToken() != "" {
		fmt.Fprintf(stderr, "more tasks: --page-token %s (or --all)\n", out.GetNextPageToken())
	}
	return nil
}

const queueStatsHelp = `Count the tasks of QUEUE by state, and say how long the task claimable
longest has waited since it became claimable (OLDEST READY: the queue's
latency; - when none is claimable).`

const queueStatsExamples = `  tenure queue stats emails
  tenure queue stats emails -o json`

func queueStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue stats", "QUEUE [flags]", queueStatsHelp, queueStatsExamples, stdout, stderr)
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Stats,
		&tenurev1.QueueStatsRequest{Namespace: c.namespace, Queue: pos[0]})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "QUEUED\tLEASED\tSUCCEEDED\tFAILED\tDEAD\tCANCELLED\tOLDEST READY")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%s\n", resp.GetQueued(), resp.GetLeased(), resp.GetSucceeded(),
		resp.GetFailed(), resp.GetDead(), resp.GetCancelled(), oldestReady(resp))
	return tw.Flush()
}

// oldestReady is how long a queue's task claimable longest has waited,
// or "-" when none is claimable.
func oldestReady(st *tenurev1.QueueStatsResponse) string {
	if st.GetOldestReadyAge() == nil {
		return "-"
	}
	return fmtDuration(st.GetOldestReadyAge().AsDuration().Round(time.Millisecond))
}

const queueConfigHelp = `Print QUEUE's defaults, or set them: --max-attempts N is how many attempts a
task pushed without its own --max-attempts gets (0: back to the registrar's
default, 5; at most 1000). Tasks already in the queue keep theirs.`

const queueConfigExamples = `  tenure queue config emails
  tenure queue config emails --max-attempts 10`

func queueConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure queue config", "QUEUE [--max-attempts N] [flags]", queueConfigHelp, queueConfigExamples, stdout, stderr)
	maxAttempts := c.uint32Flag("max-attempts", 0, "attempts of a task pushed without its own (0: the registrar's default, 5)")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	var cfg *tenurev1.QueueConfig
	if c.given("max-attempts") {
		resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.SetQueueConfig,
			&tenurev1.SetQueueConfigRequest{Namespace: c.namespace, Queue: pos[0], MaxAttempts: *maxAttempts})
		if err != nil {
			return err
		}
		cfg = resp.GetConfig()
	} else {
		resp, err := queueCall(ctx, c, tenurev1connect.QueueServiceClient.Stats,
			&tenurev1.QueueStatsRequest{Namespace: c.namespace, Queue: pos[0]})
		if err != nil {
			return err
		}
		cfg = resp.GetConfig()
	}
	if c.json() {
		return writeJSON(stdout, cfg)
	}
	tw := newTable(stdout)
	fmt.Fprintf(tw, "max attempts\t%d\n", cfg.GetMaxAttempts())
	return tw.Flush()
}

// ---- output ----

func taskState(t *tenurev1.Task) string { return enumName(t.GetState().String(), "TASK_STATE_") }

// terminalSafe reports whether s can be printed as it is: valid UTF-8
// without control characters other than newlines and tabs (an escape
// sequence in a payload or an error must not drive the terminal).
func terminalSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// short prints a payload for a table cell: text up to 40 characters, else quoted.
func short(b []byte) string {
	if !terminalSafe(string(b)) {
		s := strconv.Quote(string(b))
		if len(s) > 42 {
			s = s[:40] + "…"
		}
		return s
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if utf8.RuneCountInString(s) > 40 {
		s = string([]rune(s)[:40]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

// writeTasks prints tasks as a table.
func writeTasks(w io.Writer, tasks ...*tenurev1.Task) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TASK ID\tSTATE\tPRIORITY\tATTEMPTS\tNOT BEFORE\tLEASE ID\tWORKER\tPAYLOAD")
	for _, t := range tasks {
		lease := t.GetLeaseId()
		if lease == "" || t.GetState() != tenurev1.TaskState_TASK_STATE_LEASED {
			lease = "-" // the last lease of a task no longer leased is history (tenure queue get)
		}
		worker := t.GetWorker()
		if worker == "" {
			worker = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\t%s\t%s\t%s\n", t.GetTaskId(), taskState(t), t.GetPriority(),
			t.GetAttempts(), t.GetMaxAttempts(), fmtTime(t.GetNotBefore()), lease, worker, short(t.GetPayload()))
	}
	return tw.Flush()
}

// writeTask prints one task, field by field (or as JSON with -o json).
func writeTask(c *cliCommand, t *tenurev1.Task) error {
	if c.json() {
		return writeJSON(c.stdout, t)
	}
	tw := newTable(c.stdout)
	row := func(k, v string) {
		if v != "" && v != "-" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	text := func(b []byte) string {
		if len(b) == 0 || terminalSafe(string(b)) {
			return string(b)
		}
		return strconv.Quote(string(b))
	}
	row("task id", t.GetTaskId())
	row("namespace", t.GetNamespace())
	row("queue", t.GetQueue())
	row("state", taskState(t))
	row("priority", strconv.Itoa(int(t.GetPriority())))
	row("attempts", fmt.Sprintf("%d/%d", t.GetAttempts(), t.GetMaxAttempts()))
	row("not before", fmtTime(t.GetNotBefore()))
	row("created", fmtTime(t.GetCreatedAt()))
	row("claimed", fmtTime(t.GetClaimedAt()))
	row("completed", fmtTime(t.GetCompletedAt()))
	if t.GetState() == tenurev1.TaskState_TASK_STATE_LEASED {
		row("lease id", t.GetLeaseId())
		row("worker", t.GetWorker())
	} else {
		row("last lease id", t.GetLeaseId())
		row("last worker", t.GetWorker())
	}
	if l := t.GetLease(); l != nil {
		row("lease expires", fmtTime(l.GetExpiresAt()))
	}
	row("last error", text([]byte(t.GetLastError())))
	row("payload", text(t.GetPayload()))
	row("result", text(t.GetResult()))
	return tw.Flush()
}
