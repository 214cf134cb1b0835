package queue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"pgregory.net/rapid"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
)

func countsOf(c [7]uint64) queue.Counts {
	return queue.Counts{Queued: c[queue.Queued], Leased: c[queue.Leased], Succeeded: c[queue.Succeeded],
		Failed: c[queue.Failed], Dead: c[queue.Dead], Cancelled: c[queue.Cancelled]}
}

// TestProperties drives the queue through statemachine.Machine with random
// enqueues, claims, completions and failures (by current and stale
// leases), cancels, lease releases, renewals and time passing, and checks
// after every step:
//   - every kept task is in exactly one state, and Stats and List agree,
//     as of now too (leaving out tasks past their retention, as GetAt);
//   - a LEASED task has exactly one live lease, held by its worker, and no
//     live task lease exists without its LEASED task (none lost, none doubled);
//   - attempts only grow and never pass max_attempts; DEAD only at max_attempts;
//   - finished states are final, and no more finished tasks are kept
//     than the namespace's max_retained_tasks;
//   - replaying the ledger and restoring the snapshot give the same bytes.
func TestProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		e := setup(rt)
		type seen struct {
			attempts uint32
			state    queue.State
		}
		hist := map[uint64]seen{}
		var leases []string // every task lease id handed out
		taskIDs := []string{"a", "b", "c", "d", "e", ""}
		workers := []string{"w0", "w1", "w2"}
		queues := []string{"q", "r"}
		limit := registrar.DefaultPolicy().MaxRetainedTasks
		pol := &tenurev1.NamespacePolicy{}
		if rapid.Bool().Draw(rt, "cap") { // few finished tasks kept: the cap prunes
			limit = rapid.Uint64Range(1, 3).Draw(rt, "max_retained")
			pol.MaxRetainedTasks = limit
		}
		if rapid.Bool().Draw(rt, "short") { // finished tasks pass their retention between queue records
			pol.LeaseRetention = durationpb.New(time.Duration(rapid.IntRange(1, 20).Draw(rt, "retention_s")) * time.Second)
		}
		if pol.MaxRetainedTasks != 0 || pol.LeaseRetention != nil {
			e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default", Policy: pol}}})
		}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			qn := rapid.SampledFrom(queues).Draw(rt, "queue")
			retried := map[uint64]bool{} // tasks this step ran again (Retry)
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1:
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				var ts []*logpb.NewTask
				for j := 0; j < n; j++ {
					nt := &logpb.NewTask{TaskId: rapid.SampledFrom(taskIDs).Draw(rt, "id"),
						Priority:    int32(rapid.IntRange(0, 2).Draw(rt, "prio")),
						MaxAttempts: uint32(rapid.IntRange(0, 3).Draw(rt, "max"))}
					if rapid.Bool().Draw(rt, "delayed") {
						nt.NotBefore = e.wall() + int64(rapid.IntRange(0, 3000).Draw(rt, "nb"))
					}
					ts = append(ts, nt)
				}
				if out := e.enqueue(qn, ts...); out.Err != nil {
					rt.Fatalf("enqueue: %v", out.Err)
				}
			case 2, 3:
				out := e.claim(qn, rapid.SampledFrom(workers).Draw(rt, "worker"), uint32(rapid.IntRange(1, 3).Draw(rt, "max")),
					int64(rapid.IntRange(1000, 4000).Draw(rt, "ttl")))
				if out.Err != nil {
					rt.Fatalf("claim: %v", out.Err)
				}
				for _, l := range out.Leases {
					leases = append(leases, l.ID)
				}
			case 4, 5:
				if len(leases) == 0 {
					continue
				}
				id := rapid.SampledFrom(leases).Draw(rt, "lease")
				l, err := e.m.Registrar().Get(id, e.tick)
				if err != nil {
					continue
				}
				parts := strings.SplitN(strings.TrimPrefix(l.Resource, queue.ResourcePrefix), "/", 2)
				cur, ok := e.m.Queues().TaskOfLease(l.Fence)
				var out queue.Outcome
				if rapid.Bool().Draw(rt, "complete") {
					out = e.complete(parts[0], parts[1], id, []byte("r"))
				} else {
					var retry *int64
					if rapid.Bool().Draw(rt, "retry") {
						v := int64(rapid.IntRange(0, 2000).Draw(rt, "retryMs"))
						retry = &v
					}
					out = e.fail(parts[0], parts[1], id, "err", retry)
				}
				if ok && cur.State == queue.Leased && l.State == registrar.Active && l.ExpiresTick > e.tick {
					if out.Err != nil {
						rt.Fatalf("complete/fail by the current lease: %v", out.Err)
					}
				} else if out.Err != nil {
					if r := registrar.ReasonOf(out.Err); r != registrar.ReasonTaskNotLeased && r != registrar.ReasonTaskNotFound {
						rt.Fatalf("stale complete/fail: %v", out.Err)
					}
				}
			case 6:
				id := rapid.SampledFrom(taskIDs[:5]).Draw(rt, "cancel")
				if out := e.cancel(qn, id); out.Err != nil {
					wantReason(rt, out.Err, registrar.ReasonTaskNotFound)
				}
			case 7:
				if len(leases) == 0 {
					continue
				}
				id := rapid.SampledFrom(leases).Draw(rt, "lease")
				if rapid.Bool().Draw(rt, "renew") {
					e.renew(id)
				} else if l, err := e.m.Registrar().Get(id, e.tick); err == nil {
					e.apply(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id, Holder: l.Holder}}})
				}
			case 9:
				id := rapid.SampledFrom(taskIDs[:5]).Draw(rt, "retry")
				before, err := e.m.Queues().Get("", qn, id)
				out := e.retry(qn, id)
				if err != nil {
					wantReason(rt, out.Err, registrar.ReasonTaskNotFound)
					continue
				}
				if out.Err != nil {
					// What is due happens first, in the same command: a
					// finished task past its retention is pruned, and a
					// lease past its expiry ends, making its task DEAD and
					// maybe pruned at once by the namespace's cap.
					if before.State != queue.Queued && registrar.ReasonOf(out.Err) == registrar.ReasonTaskNotFound {
						continue
					}
					rt.Fatalf("retry of %s (%s): %v", id, before.State, out.Err)
				}
				after, _ := e.m.Queues().Get("", qn, id)
				switch before.State {
				case queue.Queued, queue.Leased:
					// Unchanged by the retry; but a lease past its expiry
					// ends first, in the same command, and a task it
					// made DEAD is then retried.
					if before.State == queue.Leased && after.State == queue.Queued && after.Attempts == 0 {
						retried[after.Seq] = true
					} else if after.Attempts != before.Attempts {
						rt.Fatalf("retry changed %s task %s: %+v", before.State, id, after)
					}
				default:
					if after.State != queue.Queued || after.Attempts != 0 {
						rt.Fatalf("retry of %s task %s: %+v", before.State, id, after)
					}
					retried[after.Seq] = true
				}
			case 8:
				e.after(int64(rapid.IntRange(1, 5000).Draw(rt, "ms")))
				if rapid.Bool().Draw(rt, "advance") {
					e.advance()
				}
			}
			// Invariants, as of the last applied command.
			now := e.applied
			kept, finished := 0, uint64(0)
			for _, qn := range queues {
				// Time 0: every task kept, those past their retention too.
				all, _ := e.m.Queues().List("", qn, nil, 0, 1<<30, 0)
				kept += len(all)
				var counts, shown [7]uint64
				for _, tk := range all {
					counts[tk.State]++
					if tk.State.Finished() {
						finished++
					}
					h, had := hist[tk.Seq]
					// Attempts only grow, but for a lease given back (a
					// release): the task is queued again with its attempt
					// returned.
					returned := had && h.state == queue.Leased && tk.State == queue.Queued && tk.Attempts == h.attempts-1
					if had && tk.Attempts < h.attempts && !returned && !retried[tk.Seq] {
						rt.Fatalf("task %s attempts went %d → %d", tk.ID, h.attempts, tk.Attempts)
					}
					if had && h.state.Finished() && tk.State != h.state && !retried[tk.Seq] {
						rt.Fatalf("task %s left finished state %s for %s", tk.ID, h.state, tk.State)
					}
					if tk.Attempts > tk.MaxAttempts || (tk.State == queue.Dead && tk.Attempts != tk.MaxAttempts) {
						rt.Fatalf("task %s: %s with %d/%d attempts", tk.ID, tk.State, tk.Attempts, tk.MaxAttempts)
					}
					hist[tk.Seq] = seen{tk.Attempts, tk.State}
					if tk.State == queue.Leased {
						l, err := e.m.Registrar().Get(tk.LeaseID, now)
						if err != nil || l.State != registrar.Active || l.Holder != tk.Worker || l.Resource != queue.Resource(qn, tk.ID) {
							rt.Fatalf("leased task %s has lease %+v (%v)", tk.ID, l, err)
						}
					}
				}
				if s := e.m.Queues().Stats("", qn, 0); s != countsOf(counts) {
					rt.Fatalf("stats %+v disagree with list %v", s, counts)
				}
				// As of now: what GetAt finds, Stats counts.
				now, _ := e.m.Queues().List("", qn, nil, 0, 1<<30, e.applied)
				for _, tk := range now {
					shown[tk.State]++
				}
				for _, tk := range all {
					_, err := e.m.Queues().GetAt("", qn, tk.ID, e.applied)
					if found := slices.ContainsFunc(now, func(x queue.Task) bool { return x.Seq == tk.Seq }); found != (err == nil) {
						rt.Fatalf("task %s: listed %v as of now, GetAt: %v", tk.ID, found, err)
					}
				}
				if s := e.m.Queues().Stats("", qn, e.applied); s != countsOf(shown) {
					rt.Fatalf("stats as of now %+v disagree with list %v", s, shown)
				}
			}
			if kept != e.m.Queues().Len() {
				rt.Fatalf("lists hold %d tasks, the domain %d", kept, e.m.Queues().Len())
			}
			if finished > limit {
				rt.Fatalf("%d finished tasks kept, over the cap %d", finished, limit)
			}
			// Every live task lease belongs to a LEASED task (no orphans, no doubles).
			for _, id := range leases {
				l, err := e.m.Registrar().Get(id, now)
				if err != nil || l.State != registrar.Active {
					continue
				}
				tk, ok := e.m.Queues().TaskOfLease(l.Fence)
				if !ok || tk.LeaseID != id || tk.State != queue.Leased {
					rt.Fatalf("live lease %s on %s has no leased task", id, l.Resource)
				}
			}
		}
		e.checkReplay()
	})
}
