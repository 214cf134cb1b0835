package queue_test

import (
	"fmt"
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

func ids(ts []queue.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func TestPriorityThenFIFO(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("q", task("a", 0), task("b", 5), task("c", 0), task("d", 5), task("e", 9))
	out := e.claim("q", "w", 10)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if got, want := fmt.Sprint(ids(out.Tasks)), "[e b d a c]"; got != want {
		t.Fatalf("claim order %s, want %s", got, want)
	}
	for i, tk := range out.Tasks {
		l := out.Leases[i]
		if tk.State != queue.Leased || tk.Attempts != 1 || tk.LeaseID != l.ID || l.Holder != "w" ||
			l.Resource != queue.Resource("q", tk.ID) || l.MaxRenewals != registrar.DefaultPolicy().TaskMaxRenewals {
			t.Fatalf("claimed task %+v lease %+v", tk, l)
		}
	}
	if s := e.m.Queues().Stats("", "q", e.applied); s.Leased != 5 || s.Queued != 0 {
		t.Fatalf("stats %+v", s)
	}
	e.checkReplay()
}

func TestIdempotentEnqueueAndGeneratedIDs(t *testing.T) {
	e := setup(t)
	first := e.mustEnqueue("q", &logpb.NewTask{TaskId: "k", Payload: []byte("one")}, &logpb.NewTask{Payload: []byte("gen")})
	mark := len(e.log)
	again := e.mustEnqueue("q", &logpb.NewTask{TaskId: "k", Payload: []byte("two"), Priority: 7})
	if len(e.log) != mark {
		t.Fatalf("idempotent enqueue emitted %d records", len(e.log)-mark)
	}
	if string(again[0].Payload) != "one" || again[0].Seq != first[0].Seq || again[0].Priority != 0 {
		t.Fatalf("idempotent enqueue answered %+v", again[0])
	}
	if first[1].ID == "" || first[1].ID == "k" {
		t.Fatalf("generated id %q", first[1].ID)
	}
	// A client id that looks generated does not collide with later ones.
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "T3"})
	gen := e.mustEnqueue("q", &logpb.NewTask{})
	if gen[0].ID == "T3" {
		t.Fatal("generated id collides with a client id")
	}
	for id, want := range map[string]bool{"T3": true, "T12-1": true, "T": false, "T3-": false, "T-1": false, "t3": false, "T3x": false, "Tuesday": false, "T３": false} {
		if got := queue.IsGeneratedID(id); got != want {
			t.Errorf("IsGeneratedID(%q) = %v", id, got)
		}
	}
	// Duplicates inside one batch answer the first.
	b := e.mustEnqueue("q", task("x", 1), task("x", 2))
	if b[0].Seq != b[1].Seq || b[1].Priority != 1 {
		t.Fatalf("batch duplicate: %+v", b)
	}
	if n := e.m.Queues().Stats("", "q", e.applied).Queued; n != 5 {
		t.Fatalf("queued %d, want 5", n)
	}
	wantReason(t, e.enqueue("q", &logpb.NewTask{Payload: make([]byte, queue.MaxPayloadBytes+1)}).Err, registrar.ReasonInvalidArgument)
	wantReason(t, e.enqueue("", task("a", 0)).Err, registrar.ReasonInvalidArgument)
	e.checkReplay()
}

func TestDelayedTask(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "later", NotBefore: e.wall() + 5000}, task("now", 0))
	out := e.claim("q", "w", 5)
	if fmt.Sprint(ids(out.Tasks)) != "[now]" {
		t.Fatalf("claimed %v before not_before", ids(out.Tasks))
	}
	if at, ok := e.m.Queues().NextReady("", "q", e.wall()); !ok || at != e.wall()+5000 {
		t.Fatalf("NextReady = %d, %v", at, ok)
	}
	e.after(4999)
	if out := e.claim("q", "w", 5); len(out.Tasks) != 0 {
		t.Fatalf("claimed %v 1 ms early", ids(out.Tasks))
	}
	e.after(1)
	if out := e.claim("q", "w", 5); fmt.Sprint(ids(out.Tasks)) != "[later]" {
		t.Fatalf("claimed %v at not_before", ids(out.Tasks))
	}
	e.checkReplay()
}

func TestExpiryRequeuesAndZombieRejected(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "t", MaxAttempts: 2})
	c1 := e.claim("q", "w1", 1, 2000)
	l1 := c1.Leases[0]
	e.after(2000)
	e.advance() // the expirer
	got := e.get("q", "t")
	if got.State != queue.Queued || got.Attempts != 1 {
		t.Fatalf("after expiry: %+v", got)
	}
	c2 := e.claim("q", "w2", 1)
	if len(c2.Tasks) != 1 || c2.Tasks[0].Attempts != 2 {
		t.Fatalf("reclaim: %+v", c2)
	}
	// The zombie cannot complete or fail the new attempt.
	zombie := e.complete("q", "t", l1.ID, nil).Err
	wantReason(t, zombie, registrar.ReasonTaskNotLeased)
	if re := registrar.ToError(zombie); re.Metadata["current_lease_id"] != c2.Leases[0].ID || re.Metadata["lease_id"] != l1.ID {
		t.Fatalf("TASK_NOT_LEASED metadata %v, want the current lease %s", re.Metadata, c2.Leases[0].ID)
	}
	wantReason(t, e.fail("q", "t", l1.ID, "boom", nil).Err, registrar.ReasonTaskNotLeased)
	wantReason(t, e.complete("q", "nope", l1.ID, nil).Err, registrar.ReasonTaskNotFound)
	// The second attempt's lease expires too: attempts are used up → DEAD.
	e.after(60_000)
	e.advance()
	if got := e.get("q", "t"); got.State != queue.Dead || got.Attempts != 2 {
		t.Fatalf("after last expiry: %+v", got)
	}
	e.checkReplay()
}

// A lease given back (a draining worker's release, an admin's revoke)
// returns its attempt: the task is queued again even on its last attempt,
// keeping its last error (from rules 3: before, the requeue's reason
// became it, so that a task that never failed showed an error). Only an
// expiry (a worker that died or stalled) uses it up.
func TestGivenBackLeaseReturnsItsAttempt(t *testing.T) {
	for _, rules := range []uint32{statemachine.Rules, 2} {
		t.Run(fmt.Sprint("rules ", rules), func(t *testing.T) { givenBackLeaseReturnsItsAttempt(t, rules) })
	}
}

func givenBackLeaseReturnsItsAttempt(t *testing.T, rules uint32) {
	e := setup(t)
	e.rules = rules
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "t", MaxAttempts: 1})
	for _, how := range []string{"release", "revoke"} {
		c := e.claim("q", "w", 1, 2000)
		if len(c.Tasks) != 1 || c.Tasks[0].Attempts != 1 {
			t.Fatalf("claim before %s: %+v", how, c)
		}
		var out statemachine.Result
		if how == "release" {
			out = e.apply(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: c.Leases[0].ID, Holder: "w"}}})
		} else {
			out = e.apply(&logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: c.Leases[0].ID, Reason: "maintenance"}}})
		}
		if out.Outcome.Err != nil {
			t.Fatal(out.Outcome.Err)
		}
		got := e.get("q", "t")
		if got.State != queue.Queued || got.Attempts != 0 || (got.LastError == "") != (rules >= 3) ||
			rules < 3 && !strings.Contains(got.LastError, "not counted") {
			t.Fatalf("after %s: %+v", how, got)
		}
	}
	c := e.claim("q", "w", 1, 2000)
	if len(c.Tasks) != 1 || c.Tasks[0].Attempts != 1 {
		t.Fatalf("claim: %+v", c)
	}
	e.after(2000)
	e.advance()
	if got := e.get("q", "t"); got.State != queue.Dead || got.Attempts != 1 {
		t.Fatalf("after expiry on the last attempt: %+v", got)
	}
	e.checkReplay()
}

func TestExpiryDecidedByNextCommand(t *testing.T) {
	// No expirer: the next command's Advance requeues in the same step.
	e := setup(t)
	e.mustEnqueue("q", task("t", 0))
	c1 := e.claim("q", "w1", 1, 1000)
	e.after(1000)
	c2 := e.claim("q", "w2", 1)
	if len(c2.Tasks) != 1 || c2.Leases[0].ID == c1.Leases[0].ID {
		t.Fatalf("claim after expiry: %+v", c2)
	}
	e.checkReplay()
}

func TestCompleteFailRetryDead(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "t", MaxAttempts: 3})
	c := e.claim("q", "w", 1)
	l := c.Leases[0]
	out := e.fail("q", "t", l.ID, "boom", nil)
	if out.Err != nil || out.Task.State != queue.Failed || out.Task.LastError != "boom" {
		t.Fatalf("fail: %+v", out)
	}
	if lv, _ := e.m.Registrar().Get(l.ID, e.tick); lv.State != registrar.Released {
		t.Fatalf("lease after fail: %s", lv.State)
	}
	back := queue.Backoff("t", 1)
	if out.Task.NotBefore != e.wall()+back || back < queue.BackoffBase*3/4 || back >= queue.BackoffBase*5/4 {
		t.Fatalf("retry at %d, backoff %d", out.Task.NotBefore, back)
	}
	// attempt⁴ seconds, capped at an hour, within the jitter.
	for attempt, base := range map[uint32]int64{2: 16_000, 3: 81_000, 4: 256_000, 7: 2_401_000, 8: queue.BackoffMax, 1000: queue.BackoffMax} {
		if d := queue.Backoff("t", attempt); d < base*3/4 || d >= base*5/4 {
			t.Fatalf("backoff of attempt %d: %d ms, want %d ± 25%%", attempt, d, base)
		}
	}
	// Retrying the same Fail is a no-op answering the task.
	mark := len(e.log)
	if again := e.fail("q", "t", l.ID, "boom", nil); again.Err != nil || len(e.log) != mark {
		t.Fatalf("repeated fail: %v, %d records", again.Err, len(e.log)-mark)
	}
	if len(e.claim("q", "w", 1).Tasks) != 0 {
		t.Fatal("claimed during backoff")
	}
	e.after(back)
	c = e.claim("q", "w", 1)
	retry := int64(10)
	e.fail("q", "t", c.Leases[0].ID, "again", &retry)
	e.after(10)
	c = e.claim("q", "w", 1)
	if len(c.Tasks) != 1 || c.Tasks[0].Attempts != 3 {
		t.Fatalf("third claim: %+v", c)
	}
	out = e.fail("q", "t", c.Leases[0].ID, "last", nil)
	if out.Task.State != queue.Dead {
		t.Fatalf("after max attempts: %s", out.Task.State)
	}
	// Complete path, idempotent.
	e.mustEnqueue("q", task("ok", 0))
	c = e.claim("q", "w", 1)
	done := e.complete("q", "ok", c.Leases[0].ID, []byte("42"))
	if done.Err != nil || done.Task.State != queue.Succeeded || string(done.Task.Result) != "42" || done.Task.CompletedAt == 0 {
		t.Fatalf("complete: %+v", done)
	}
	if again := e.complete("q", "ok", c.Leases[0].ID, []byte("42")); again.Err != nil {
		t.Fatalf("repeated complete: %v", again.Err)
	}
	if s := e.m.Queues().Stats("", "q", e.applied); s.Dead != 1 || s.Succeeded != 1 || s.Leased != 0 {
		t.Fatalf("stats %+v", s)
	}
	e.checkReplay()
}

func TestTransferRefusedReleaseRequeuesCancelRevokes(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("q", task("a", 0), task("b", 0), task("c", 0))
	c := e.claim("q", "w", 2)
	// A task lease cannot be transferred: the task would stay with a lease
	// no worker may complete it under.
	tr := e.apply(&logpb.Command{Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{LeaseId: c.Leases[0].ID, Holder: "w", NewHolder: "w2"}}})
	wantReason(t, tr.Outcome.Err, registrar.ReasonInvalidArgument)
	if got := e.get("q", "a"); got.State != queue.Leased || got.LeaseID != c.Leases[0].ID {
		t.Fatalf("after the refused transfer: %+v", got)
	}
	// Releasing a task lease without completing returns the task.
	out := e.apply(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: c.Leases[0].ID, Holder: "w"}}})
	if out.Outcome.Err != nil || e.get("q", "a").State != queue.Queued {
		t.Fatalf("release: %v, %+v", out.Outcome.Err, e.get("q", "a"))
	}
	// Cancel a leased task: its lease is revoked, and no requeue follows.
	cc := e.cancel("q", "b")
	if cc.Err != nil || cc.Task.State != queue.Cancelled {
		t.Fatalf("cancel leased: %+v", cc)
	}
	if lv, _ := e.m.Registrar().Get(c.Leases[1].ID, e.tick); lv.State != registrar.Revoked {
		t.Fatalf("cancelled task's lease is %s", lv.State)
	}
	if cc := e.cancel("q", "c"); cc.Err != nil || cc.Task.State != queue.Cancelled {
		t.Fatalf("cancel queued: %+v", cc)
	}
	wantReason(t, e.complete("q", "b", c.Leases[1].ID, nil).Err, registrar.ReasonTaskNotLeased)
	if s := e.m.Queues().Stats("", "q", e.applied); s.Cancelled != 2 || s.Queued != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Finished tasks are pruned after the retention.
	e.after(registrar.DefaultPolicy().LeaseRetention)
	e.mustEnqueue("q", task("z", 0))
	if s := e.m.Queues().Stats("", "q", e.applied); s.Cancelled != 0 || s.Queued != 2 {
		t.Fatalf("after retention: %+v", s)
	}
	if _, err := e.m.Queues().Get("", "q", "b"); registrar.ReasonOf(err) != registrar.ReasonTaskNotFound {
		t.Fatalf("pruned task: %v", err)
	}
	e.checkReplay()
}

func TestTaskLeaseRenewalLimits(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("q", task("t", 0))
	c := e.claim("q", "w", 1, 60_000)
	id := c.Leases[0].ID
	for i := range registrar.DefaultPolicy().TaskMaxRenewals {
		e.after(1000)
		if out := e.renew(id); out.Err != nil {
			t.Fatalf("renewal %d: %v", i+1, out.Err)
		}
	}
	e.after(1000)
	err := e.renew(id).Err
	wantReason(t, err, registrar.ReasonRenewalLimitExceeded)
	if re := registrar.ToError(err); re.Metadata["renewal_count"] != "10" || re.Metadata["max_renewals"] != "10" {
		t.Fatalf("metadata %v", re.Metadata)
	}

	// The namespace's policy sets them: 3 renewals, or unlimited (0).
	for _, limit := range []uint32{3, 0} {
		p := registrar.DefaultPolicy()
		p.TaskMaxRenewals, p.TaskMaxLifetime = limit, 0
		e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default", Policy: p.Proto()}}})
		e.mustEnqueue("q", task(fmt.Sprintf("limit-%d", limit), 0))
		c := e.claim("q", "w", 1, 60_000)
		if len(c.Leases) != 1 || c.Leases[0].MaxRenewals != limit {
			t.Fatalf("limit %d: claimed %+v", limit, c.Leases)
		}
		for i := range 20 {
			e.after(1000)
			err := e.renew(c.Leases[0].ID).Err
			switch {
			case limit == 0 || uint32(i) < limit:
				if err != nil {
					t.Fatalf("limit %d: renewal %d: %v", limit, i+1, err)
				}
			case uint32(i) == limit:
				wantReason(t, err, registrar.ReasonRenewalLimitExceeded)
			}
		}
	}

	e.checkReplay()
}

func TestTaskLeaseLifetime(t *testing.T) {
	e := setup(t)
	// Max ttl 300 s and 10 renewals reach at most 55 min, short of 2 h, so
	// use a namespace whose max ttl is an hour.
	e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default",
		Policy: registrar.Policy{DefaultTTL: 60_000, MinTTL: 1000, MaxTTL: 3_600_000, MaxGrace: 15_000,
			MaxActivePerHolder: 100, MaxActivePerNamespace: 1000, MaxWaitersPerResource: 10,
			LeaseRetention: 3_600_000, HistoryRetention: 3_600_000, TaskMaxRenewals: 10, TaskMaxLifetime: 7_200_000}.Proto()}}})
	e.mustEnqueue("q", task("t", 0))
	c := e.claim("q", "w", 1, 3_600_000)
	id := c.Leases[0].ID
	e.after(3_000_000)
	if out := e.renew(id); out.Err != nil { // expiry capped at 2 h
		t.Fatal(out.Err)
	}
	e.after(3_000_000)
	if out := e.renew(id); out.Err != nil { // still short of 2 h: capped
		t.Fatal(out.Err)
	}
	err := e.renew(id).Err
	wantReason(t, err, registrar.ReasonLifetimeExceeded)
	if re := registrar.ToError(err); re.Metadata["max_lifetime"] != "7200" {
		t.Fatalf("metadata %v", re.Metadata)
	}
	e.checkReplay()
}

// TestQueueNamesWithSlashesKeepTasksApart: queue "col" task "x/y" and
// queue "col/x" task "y" have leases on different resources, so claiming
// one does not block the other.
func TestQueueNamesWithSlashesKeepTasksApart(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("col", task("x/y", 0))
	e.mustEnqueue("col/x", task("y", 0))
	e.mustEnqueue("50%", task("a", 0))
	a := e.claim("col", "w1", 1)
	b := e.claim("col/x", "w2", 1)
	c := e.claim("50%", "w3", 1)
	if len(a.Leases) != 1 || len(b.Leases) != 1 || len(c.Leases) != 1 {
		t.Fatalf("claims: %+v / %+v / %+v", a, b, c)
	}
	got := map[string]bool{}
	for _, l := range []registrar.Lease{a.Leases[0], b.Leases[0], c.Leases[0]} {
		got[l.Resource] = true
	}
	for _, want := range []string{"queue/col/x/y", "queue/col%2Fx/y", "queue/50%25/a"} {
		if !got[want] {
			t.Errorf("no lease on %s: %v", want, got)
		}
	}
	e.checkReplay()
}

// TestFinishedTasksCapFavoursQuietQueues: past the cap, the queue keeping
// the most finished tasks gives one up, whichever queue finished one: a
// quiet queue's only dead task outlives a busy queue's completions, also
// when a third queue finishes its first task.
func TestFinishedTasksCapFavoursQuietQueues(t *testing.T) {
	e := setup(t)
	e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default",
		Policy: &tenurev1.NamespacePolicy{MaxRetainedTasks: 3}}}})
	e.mustEnqueue("quiet", &logpb.NewTask{TaskId: "dead", MaxAttempts: 1})
	e.claim("quiet", "w", 1, 1000)
	e.after(1000).advance()
	if got := e.get("quiet", "dead"); got.State != queue.Dead {
		t.Fatalf("quiet: %+v", got)
	}
	finish := func(queueName, id string) {
		e.after(10).mustEnqueue(queueName, task(id, 0))
		c := e.claim(queueName, "w", 1)
		if out := e.complete(queueName, id, c.Leases[0].ID, nil); out.Err != nil {
			t.Fatalf("complete %s: %v", id, out.Err)
		}
	}
	for i := range 8 {
		finish("busy", fmt.Sprint("b", i))
	}
	finish("third", "x")
	if s := e.m.Queues().Stats("", "quiet", e.applied); s.Dead != 1 {
		t.Fatalf("quiet's dead task pruned: %+v", s)
	}
	if s := e.m.Queues().Stats("", "busy", e.applied); s.Succeeded != 1 {
		t.Fatalf("busy keeps %+v, want its newest only", s)
	}
	if _, err := e.m.Queues().Get("", "busy", "b7"); err != nil {
		t.Fatalf("busy's newest: %v", err)
	}
	e.checkReplay()
}

// TestFinishedTasksCap: a namespace keeps at most max_retained_tasks
// finished tasks; finishing one more prunes the oldest finished task of
// the queue keeping the most (the oldest of all among equals); other
// namespaces and unfinished tasks are untouched, and a pruned id may be
// enqueued again.
func TestFinishedTasksCap(t *testing.T) {
	e := setup(t)
	e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default",
		Policy: &tenurev1.NamespacePolicy{MaxRetainedTasks: 2}}}})
	finish := func(queueName, id string) {
		e.after(10).mustEnqueue(queueName, task(id, 0))
		c := e.claim(queueName, "w", 1)
		if len(c.Leases) != 1 {
			t.Fatalf("claim %s: %+v", id, c)
		}
		if out := e.complete(queueName, id, c.Leases[0].ID, nil); out.Err != nil {
			t.Fatalf("complete %s: %v", id, out.Err)
		}
	}
	kept := func(queueName, id string) bool {
		_, err := e.m.Queues().Get("", queueName, id)
		if err != nil && registrar.ReasonOf(err) != registrar.ReasonTaskNotFound {
			t.Fatalf("get %s: %v", id, err)
		}
		return err == nil
	}
	e.mustEnqueue("idle", task("waiting", 0)) // queued: never pruned
	e.apply(&logpb.Command{Op: &logpb.Command_Enqueue{Enqueue: &logpb.Enqueue{Namespace: "other", Queue: "q",
		Tasks: []*logpb.NewTask{task("x", 0)}}}})
	finish("q", "a")
	finish("r", "b")
	if !kept("q", "a") || !kept("r", "b") {
		t.Fatal("pruned within the cap")
	}
	finish("q", "c")
	if kept("q", "a") || !kept("r", "b") || !kept("q", "c") {
		t.Fatalf("after a third: a kept %v (want false), b %v, c %v", kept("q", "a"), kept("r", "b"), kept("q", "c"))
	}
	finish("r", "d")
	if kept("r", "b") || !kept("q", "c") || !kept("r", "d") || !kept("idle", "waiting") {
		t.Fatal("after a fourth: want b pruned, c, d and the queued task kept")
	}
	if s := e.m.Queues().Stats("", "q", e.applied); s.Succeeded != 1 || s.Queued != 0 {
		t.Fatalf("stats of q: %+v", s)
	}
	if n := e.m.Queues().Finished(); n != 2 {
		t.Fatalf("Finished() = %d, want the cap, 2", n)
	}
	if _, err := e.m.Queues().Get("other", "q", "x"); err != nil {
		t.Fatalf("another namespace's task: %v", err)
	}
	finish("q", "a") // a pruned id is new again
	if got := e.get("q", "a"); got.State != queue.Succeeded {
		t.Fatalf("re-enqueued a: %+v", got)
	}
	// A busy queue gives up its own finished tasks, not a quiet queue's.
	// Its first, with every queue keeping one, takes the namespace's
	// oldest (r's d); then q's a stays however many more finish in "busy".
	finish("busy", "e0")
	if kept("r", "d") || !kept("q", "a") {
		t.Fatalf("busy's first: d kept %v (want false), a %v", kept("r", "d"), kept("q", "a"))
	}
	for i := 1; i < 20; i++ {
		finish("busy", fmt.Sprint("e", i))
		if !kept("q", "a") {
			t.Fatalf("q's a pruned by busy's task %d", i)
		}
	}
	if !kept("busy", "e19") || kept("busy", "e18") {
		t.Fatalf("busy kept e19 %v (want true), e18 %v (want false)", kept("busy", "e19"), kept("busy", "e18"))
	}
	e.checkReplay()
}

// TestRetry: a dead, cancelled or succeeded task runs again from its first
// attempt, claimable now; a failed one waiting for its backoff becomes
// claimable now; a queued or leased one is left as it is; the lease of the
// run before cannot complete the new one.
func TestRetry(t *testing.T) {
	e := setup(t)
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "dead", MaxAttempts: 1}, task("done", 0), task("gone", 0), task("later", 0), task("busy", 0))
	// dead: its only lease expires.
	c := e.claim("q", "w", 1, 1000)
	if len(c.Tasks) != 1 || c.Tasks[0].ID != "dead" {
		t.Fatalf("claim: %+v", c)
	}
	old := c.Leases[0].ID
	e.after(1000).advance()
	if got := e.get("q", "dead"); got.State != queue.Dead {
		t.Fatalf("dead: %+v", got)
	}
	// done: succeeded with a result.
	c = e.claim("q", "w", 1)
	if out := e.complete("q", "done", c.Leases[0].ID, []byte("r")); out.Err != nil {
		t.Fatal(out.Err)
	}
	if out := e.cancel("q", "gone"); out.Err != nil {
		t.Fatal(out.Err)
	}
	// later: failed, waiting an hour for its retry.
	c = e.claim("q", "w", 1)
	hour := int64(3_600_000)
	if out := e.fail("q", "later", c.Leases[0].ID, "boom", &hour); out.Err != nil {
		t.Fatal(out.Err)
	}
	busy := e.claim("q", "w", 1)
	if len(busy.Tasks) != 1 || busy.Tasks[0].ID != "busy" {
		t.Fatalf("claim busy: %+v", busy)
	}

	for _, id := range []string{"dead", "done", "gone", "later"} {
		out := e.retry("q", id)
		if out.Err != nil || out.Task.State != queue.Queued || out.Task.Attempts != 0 || len(out.Task.Result) != 0 || out.Task.CompletedAt != 0 {
			t.Fatalf("retry %s: %+v %v", id, out.Task, out.Err)
		}
	}
	if got := e.get("q", "dead"); !strings.Contains(got.LastError, "expired") {
		t.Fatalf("the last error is kept: %+v", got)
	}
	// Unchanged: a leased task (and a queued one: the retried ones now).
	n := len(e.log)
	if out := e.retry("q", "busy"); out.Err != nil || out.Task.State != queue.Leased || out.Task.Attempts != 1 {
		t.Fatalf("retry of a leased task: %+v %v", out.Task, out.Err)
	}
	if out := e.retry("q", "dead"); out.Err != nil || out.Task.State != queue.Queued {
		t.Fatalf("retry of a queued task: %+v %v", out.Task, out.Err)
	}
	if len(e.log) != n {
		t.Fatalf("retries that change nothing emitted %d records", len(e.log)-n)
	}
	wantReason(t, e.retry("q", "nope").Err, registrar.ReasonTaskNotFound)
	if s := e.m.Queues().Stats("", "q", e.applied); s.Queued != 4 || s.Leased != 1 || s.Dead+s.Succeeded+s.Cancelled+s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
	// All four are claimable now, and run under new leases only.
	c = e.claim("q", "w2", 4)
	if len(c.Tasks) != 4 {
		t.Fatalf("claim after retry: %+v", c.Tasks)
	}
	for i, tk := range c.Tasks {
		if tk.Attempts != 1 {
			t.Fatalf("%s attempt %d", tk.ID, tk.Attempts)
		}
		if tk.ID == "dead" {
			wantReason(t, e.complete("q", "dead", old, nil).Err, registrar.ReasonTaskNotLeased)
			if out := e.complete("q", "dead", c.Leases[i].ID, nil); out.Err != nil {
				t.Fatal(out.Err)
			}
		}
	}
	e.checkReplay()
}

// A namespace's unfinished tasks are bounded in number and payload bytes:
// an Enqueue past either is QUOTA_EXCEEDED and enqueues nothing; ids the
// queue has already add nothing; finished tasks free their share, and a
// restored replica counts as the live one does.
func TestPendingTasksQuota(t *testing.T) {
	e := setup(t)
	if res := e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default",
		Policy: &tenurev1.NamespacePolicy{MaxPendingTasks: 3, MaxPendingTaskBytes: 100}}}}); res.Outcome.Err != nil {
		t.Fatal(res.Outcome.Err)
	}
	e.mustEnqueue("a", task("t1", 0), task("t2", 0))
	out := e.enqueue("b", task("u1", 0), task("u2", 0))
	wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
	if !strings.Contains(out.Err.Error(), "max_pending_tasks") {
		t.Fatalf("message: %v", out.Err)
	}
	if st := e.m.Queues().Stats("", "b", e.applied); st.Queued != 0 {
		t.Fatalf("the refused batch enqueued %d tasks", st.Queued)
	}
	// An id the queue has adds nothing, even beside a new one.
	e.mustEnqueue("a", task("t1", 0), task("t3", 0))
	big := &logpb.NewTask{TaskId: "big", Payload: make([]byte, 101)}
	wantReason(t, e.enqueue("c", big).Err, registrar.ReasonQuotaExceeded)
	// Finishing a task frees its share.
	claimed := e.claim("a", "w", 1)
	if len(claimed.Tasks) != 1 {
		t.Fatalf("claim: %+v", claimed)
	}
	if c := e.complete("a", claimed.Tasks[0].ID, claimed.Leases[0].ID, nil); c.Err != nil {
		t.Fatal(c.Err)
	}
	e.mustEnqueue("b", &logpb.NewTask{TaskId: "u1", Payload: make([]byte, 100)})
	// Full again: 3 tasks, 100 bytes.
	wantReason(t, e.enqueue("b", task("u2", 0)).Err, registrar.ReasonQuotaExceeded)
	// Running the completed task again would be a fourth.
	wantReason(t, e.retry("a", claimed.Tasks[0].ID).Err, registrar.ReasonQuotaExceeded)
	rm := e.restored()
	res := rm.Apply(&logpb.Command{Tick: int64(e.tick), Wall: e.wall(), Op: &logpb.Command_Enqueue{Enqueue: &logpb.Enqueue{Queue: "b", Tasks: []*logpb.NewTask{task("u2", 0)}}}})
	if res.Queue == nil || registrar.ReasonOf(res.Queue.Err) != registrar.ReasonQuotaExceeded {
		t.Fatalf("a restored replica accepted what the live one refused: %+v", res.Queue)
	}
	e.checkReplay()
}

// A queue's default max_attempts (ConfigureQueue) applies to the tasks
// enqueued without their own; theirs wins; 0 goes back to the registrar's
// default; a restored replica and a replay of the ledger agree.
func TestQueueDefaultMaxAttempts(t *testing.T) {
	e := setup(t)
	configure := func(queueName string, n uint32) queue.Outcome {
		return e.q(&logpb.Command{Op: &logpb.Command_ConfigureQueue{ConfigureQueue: &logpb.ConfigureQueue{Queue: queueName, MaxAttempts: n}}})
	}
	if out := configure("q", 2); out.Err != nil || out.MaxAttempts != 2 {
		t.Fatalf("configure: %+v", out)
	}
	wantReason(t, configure("q", queue.MaxAttemptsLimit+1).Err, registrar.ReasonInvalidArgument)
	ts := e.mustEnqueue("q", task("a", 0), &logpb.NewTask{TaskId: "b", MaxAttempts: 7})
	if ts[0].MaxAttempts != 2 || ts[1].MaxAttempts != 7 {
		t.Fatalf("max attempts %d and %d, want the queue's 2 and the task's 7", ts[0].MaxAttempts, ts[1].MaxAttempts)
	}
	if other := e.mustEnqueue("other", task("c", 0)); other[0].MaxAttempts != queue.DefaultMaxAttempts {
		t.Fatalf("another queue's task: %d attempts", other[0].MaxAttempts)
	}
	// The same again records nothing.
	before := len(e.log)
	configure("q", 2)
	if len(e.log) != before {
		t.Fatal("setting the same default again recorded an event")
	}
	if got := e.restored().Queues().MaxAttemptsOf("", "q"); got != 2 {
		t.Fatalf("restored: %d", got)
	}
	e.checkReplay()
	if out := configure("q", 0); out.MaxAttempts != queue.DefaultMaxAttempts {
		t.Fatalf("back to the default: %+v", out)
	}
	if ts := e.mustEnqueue("q", task("d", 0)); ts[0].MaxAttempts != queue.DefaultMaxAttempts {
		t.Fatalf("after the reset: %d attempts", ts[0].MaxAttempts)
	}
	e.checkReplay()
}

// TestEnqueueAfterRetention: a finished task whose retention has passed is
// gone, though no queue record has pruned it yet: enqueuing its id again
// enqueues a new task (a daily job with a fixed id runs again), Retry and
// GetAt do not find it, List and Stats leave it out. An Enqueue stamped with the rules before that
// change (0) still answers the old task, as it did when written.
func TestEnqueueAfterRetention(t *testing.T) {
	for _, rules := range []uint32{statemachine.Rules, 0} {
		e := setup(t)
		e.rules = rules
		e.mustEnqueue("nightly", task("report", 0))
		c := e.claim("nightly", "w", 1)
		if c.Err != nil || len(c.Leases) != 1 {
			t.Fatalf("claim: %+v", c)
		}
		if out := e.complete("nightly", "report", c.Leases[0].ID, []byte("done")); out.Err != nil {
			t.Fatal(out.Err)
		}
		e.after(registrar.DefaultPolicy().LeaseRetention + 1)
		e.advance() // time passes; no queue record prunes the task
		_, err := e.m.Queues().GetAt("", "nightly", "report", e.applied)
		wantReason(t, err, registrar.ReasonTaskNotFound)
		// Lists and counts as of now leave it out too.
		if ts, _ := e.m.Queues().List("", "nightly", nil, 0, 10, e.applied); len(ts) != 0 {
			t.Fatalf("listed after retention: %+v", ts)
		}
		if s := e.m.Queues().Stats("", "nightly", e.applied); s != (queue.Counts{}) {
			t.Fatalf("counted after retention: %+v", s)
		}
		// Retry does not find it, whatever the rules (it stopped the
		// state machine: its record named the task its apply pruned).
		wantReason(t, e.retry("nightly", "report").Err, registrar.ReasonTaskNotFound)
		if rules == 0 {
			out := e.enqueue("nightly", task("report", 0))
			if out.Err != nil || !out.Existed[0] || out.Tasks[0].State != queue.Succeeded {
				t.Fatalf("rules 0: enqueue again: %+v", out)
			}
			e.checkReplay()
			continue
		}
		out := e.enqueue("nightly", task("report", 0))
		if out.Err != nil || out.Existed[0] || out.Tasks[0].State != queue.Queued || len(out.Tasks[0].Result) != 0 {
			t.Fatalf("enqueue again after retention: %+v", out)
		}
		if s := e.m.Queues().Stats("", "nightly", e.applied); s.Queued != 1 || s.Succeeded != 0 {
			t.Fatalf("stats: %+v", s)
		}
		e.checkReplay()
	}
}

// TestClaimCutShortByAQuotaSaysSo: a claim that a holder's quota stops
// after some tasks answers those with a message naming the quota; the
// next claim answers the error.
func TestClaimCutShortByAQuotaSaysSo(t *testing.T) {
	e := setup(t)
	p := registrar.DefaultPolicy()
	p.MaxActivePerHolder = 3
	e.setPolicy(p)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		e.mustEnqueue("q", task(id, 0))
	}
	c := e.claim("q", "w", 5)
	if c.Err != nil || len(c.Tasks) != 3 {
		t.Fatalf("claim: %d tasks, %v", len(c.Tasks), c.Err)
	}
	if want := "claimed 3 of the 5 asked for: QUOTA_EXCEEDED: "; !strings.HasPrefix(c.Message, want) || !strings.Contains(c.Message, "max_active_per_holder") {
		t.Fatalf("message %q, want it to start %q and name the quota", c.Message, want)
	}
	wantReason(t, e.claim("q", "w", 5).Err, registrar.ReasonQuotaExceeded)
	if full := e.claim("q", "w2", 2); full.Err != nil || len(full.Tasks) != 2 || full.Message != "" {
		t.Fatalf("a claim that got all it asked for: %d tasks, message %q, %v", len(full.Tasks), full.Message, full.Err)
	}
	e.checkReplay()
}

// TestDeadTasksOutliveOtherFinishedTasks: a dead task (by Fail or by an
// expiry on its last attempt) is kept a day (rules 4 on), or its
// namespace's dead task retention when the policy sets one; succeeded and
// cancelled ones for the lease retention (1 h). Commands of rules before
// 4 kept dead tasks the lease retention too, unless the policy said.
func TestDeadTasksOutliveOtherFinishedTasks(t *testing.T) {
	for _, tc := range []struct {
		rules      uint32
		keep, kept int64 // the policy's dead task retention; how long dead tasks are kept (0: 1 h)
	}{
		{statemachine.Rules, 0, queue.DeadRetention},
		{statemachine.Rules, 2 * 3_600_000, 2 * 3_600_000},
		{3, 0, 0},
		{3, 2 * 3_600_000, 2 * 3_600_000},
	} {
		t.Run(fmt.Sprint("rules ", tc.rules, ", policy ", tc.keep), func(t *testing.T) {
			e := setup(t)
			e.rules = tc.rules
			if tc.keep != 0 {
				p := registrar.DefaultPolicy()
				p.DeadTaskRetention = tc.keep
				e.setPolicy(p)
			}
			e.mustEnqueue("q", &logpb.NewTask{TaskId: "failed", MaxAttempts: 1}, &logpb.NewTask{TaskId: "expired", MaxAttempts: 1},
				task("done", 0), task("cancelled", 0))
			c := e.claim("q", "w", 3, 2000)
			for i, tk := range c.Tasks {
				switch tk.ID {
				case "failed":
					if out := e.fail("q", tk.ID, c.Leases[i].ID, "boom", nil); out.Err != nil || out.Task.State != queue.Dead {
						t.Fatalf("fail: %+v", out)
					}
				case "done":
					if out := e.complete("q", tk.ID, c.Leases[i].ID, nil); out.Err != nil {
						t.Fatal(out.Err)
					}
				}
			}
			if out := e.cancel("q", "cancelled"); out.Err != nil {
				t.Fatal(out.Err)
			}
			e.after(2000)
			e.advance()
			if got := e.get("q", "expired"); got.State != queue.Dead {
				t.Fatalf("expired on its last attempt: %+v", got)
			}
			kept := func() map[string]bool {
				out := map[string]bool{}
				for _, id := range []string{"failed", "expired", "done", "cancelled"} {
					_, err := e.m.Queues().GetAt("", "q", id, e.tick)
					out[id] = err == nil
				}
				return out
			}
			e.after(3_600_000)
			e.advance()
			got := kept()
			if got["done"] || got["cancelled"] {
				t.Fatalf("an hour on, succeeded and cancelled tasks are still kept: %v", got)
			}
			if dead := got["failed"] && got["expired"]; dead != (tc.kept != 0) {
				t.Fatalf("an hour on: dead tasks kept %v, want %v (%v)", dead, tc.kept != 0, got)
			}
			if tc.kept != 0 {
				if s := e.m.Queues().Stats("", "q", e.applied); s.Dead != 2 {
					t.Fatalf("stats %+v, want 2 dead", s)
				}
				e.after(tc.kept - 3_600_000)
				e.advance()
				if got := kept(); got["failed"] || got["expired"] {
					t.Fatalf("%d ms on, dead tasks still kept: %v", tc.kept, got)
				}
			}
			e.checkReplay()
		})
	}
}

// TestDeadTaskRetentionPolicy: a namespace's policy sets how long its
// dead tasks are kept.
func TestDeadTaskRetentionPolicy(t *testing.T) {
	e := setup(t)
	p := registrar.DefaultPolicy()
	p.DeadTaskRetention = 10_000
	e.setPolicy(p)
	if e.m.Registrar().Policy("default").DeadTaskRetention != 10_000 {
		t.Fatalf("policy %+v", e.m.Registrar().Policy("default"))
	}
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "t", MaxAttempts: 1})
	c := e.claim("q", "w", 1)
	if out := e.fail("q", "t", c.Leases[0].ID, "boom", nil); out.Err != nil {
		t.Fatal(out.Err)
	}
	e.after(9_999)
	e.advance()
	if got := e.get("q", "t"); got.State != queue.Dead {
		t.Fatalf("%+v", got)
	}
	e.after(1)
	e.advance()
	if _, err := e.m.Queues().GetAt("", "q", "t", e.tick); registrar.ReasonOf(err) != registrar.ReasonTaskNotFound {
		t.Fatalf("10 s on: %v", err)
	}
	p.DeadTaskRetention = -1
	res := e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default", Policy: p.Proto()}}})
	wantReason(t, res.Outcome.Err, registrar.ReasonInvalidArgument)
	e.checkReplay()
}

// TestOldestReady: a queue's latency is the earliest ready time among the
// tasks claimable now, whatever their priority; tasks not yet due, leased
// or finished do not count.
func TestOldestReady(t *testing.T) {
	e := setup(t)
	qs := e.m.Queues()
	if _, ok := qs.OldestReady("", "q", e.wall()); ok {
		t.Fatal("a queue that does not exist has a claimable task")
	}
	start := e.wall()
	e.mustEnqueue("q", task("low-old", -5))
	e.after(1000)
	e.mustEnqueue("q", task("high", 7), task("mid", 0))
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "later", NotBefore: e.wall() + 60_000})
	e.after(1000)
	if at, ok := qs.OldestReady("", "q", e.wall()); !ok || at != start {
		t.Fatalf("oldest ready at %d (%v), want %d: the low-priority task enqueued first", at, ok, start)
	}
	// Claimed, the oldest no longer waits: the next oldest does.
	c := e.claim("q", "w", 3)
	if len(c.Tasks) != 3 {
		t.Fatalf("claimed %+v", c.Tasks)
	}
	if at, ok := qs.OldestReady("", "q", e.wall()); ok {
		t.Fatalf("nothing is claimable, but oldest ready at %d", at)
	}
	// A task whose not_before has come is claimable from then, before any
	// command moves it into the claim order.
	if at, ok := qs.OldestReady("", "q", start+61_000+500); !ok || at != start+61_000 {
		t.Fatalf("oldest ready at %d (%v), want the delayed task's not_before %d", at, ok, start+61_000)
	}
}
