package queue

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// SnapshotInto copies the queue state into s, tasks in no particular
// order (statemachine.EncodeSnapshot sorts them by seq).
func (qs *Queues) SnapshotInto(s *logpb.Snapshot) {
	s.NextTaskSeq = qs.nextSeq
	s.QueueConfigs = nil
	for k, m := range qs.configs {
		s.QueueConfigs = append(s.QueueConfigs, &logpb.QueueConfigured{Namespace: k.ns, Queue: k.name, MaxAttempts: m})
	}
	slices.SortFunc(s.QueueConfigs, func(a, b *logpb.QueueConfigured) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Queue, b.Queue))
	})
	s.Tasks = nil
	if len(qs.bySeq) == 0 {
		return
	}
	// One allocation for every task: a snapshot runs while applies wait.
	snaps := make([]logpb.TaskSnap, len(qs.bySeq))
	s.Tasks = make([]*logpb.TaskSnap, 0, len(qs.bySeq))
	for _, t := range qs.bySeq {
		ts := &snaps[len(s.Tasks)]
		ts.Seq, ts.Namespace, ts.Queue, ts.TaskId, ts.Payload, ts.Priority = t.seq, t.q.ns, t.q.name, t.id, t.payload, t.priority
		ts.State, ts.Attempts, ts.MaxAttempts, ts.NotBefore = int32(t.state), t.attempts, t.maxAttempts, t.notBefore
		ts.ReadyAt, ts.CreatedWall, ts.ClaimedWall, ts.CompletedWall = t.readyAt, t.createdWall, t.claimedWall, t.finishedWall
		ts.LastError, ts.Result, ts.LeaseSeq, ts.LeaseId, ts.Worker = t.lastError, t.result, t.leaseSeq, t.leaseID, t.worker
		ts.PruneTick, ts.Outcome = int64(t.pruneTick), int32(t.outcome)
		s.Tasks = append(s.Tasks, ts)
	}
}

// Restore rebuilds the queue domain from a snapshot, beside reg (already
// restored from the same snapshot), and hooks it to reg's lease ends.
func Restore(reg *registrar.Registrar, s *logpb.Snapshot) (*Queues, error) {
	qs := New(reg)
	if s.NextTaskSeq != 0 {
		qs.nextSeq = s.NextTaskSeq
	}
	for _, c := range s.QueueConfigs {
		if err := ValidateQueue(c.Namespace, c.Queue); err != nil || c.Namespace == "" || c.MaxAttempts == 0 || c.MaxAttempts > MaxAttemptsLimit {
			return nil, fmt.Errorf("snapshot: bad queue configuration %s/%s", c.Namespace, c.Queue)
		}
		qs.configure(c)
	}
	for _, ts := range s.Tasks {
		if ts.Seq == 0 || ts.Seq >= qs.nextSeq || qs.bySeq[ts.Seq] != nil {
			return nil, fmt.Errorf("snapshot: bad task sequence %d", ts.Seq)
		}
		st := State(ts.State)
		if st < Queued || st > Cancelled {
			return nil, fmt.Errorf("snapshot: task %d has bad state %d", ts.Seq, ts.State)
		}
		if err := ValidateTaskRef(ts.Namespace, ts.Queue, ts.TaskId); err != nil || ts.Namespace == "" {
			return nil, fmt.Errorf("snapshot: task %d: bad name", ts.Seq)
		}
		q := qs.queue(ts.Namespace, ts.Queue, true)
		if q.tasks[ts.TaskId] != nil {
			return nil, fmt.Errorf("snapshot: task %s listed twice", ts.TaskId)
		}
		t := &task{seq: ts.Seq, q: q, id: ts.TaskId, payload: ts.Payload, priority: ts.Priority, state: st,
			attempts: ts.Attempts, maxAttempts: ts.MaxAttempts, notBefore: ts.NotBefore, readyAt: ts.ReadyAt,
			createdWall: ts.CreatedWall, claimedWall: ts.ClaimedWall, finishedWall: ts.CompletedWall,
			lastError: ts.LastError, result: ts.Result, leaseSeq: ts.LeaseSeq, leaseID: ts.LeaseId, worker: ts.Worker,
			pruneTick: registrar.Tick(ts.PruneTick), outcome: uint8(ts.Outcome), delayIdx: -1, pruneIdx: -1, nsIdx: -1, qIdx: -1}
		qs.add(q, t)
		switch {
		case st.claimable():
			q.makeReady(t, s.Wall)
		case st == Leased:
			if t.leaseSeq == 0 || qs.byLease[t.leaseSeq] != nil {
				return nil, fmt.Errorf("snapshot: task %s leased by a bad or shared lease", t.id)
			}
			qs.byLease[t.leaseSeq] = t
		default: // finished: the cap applies as tasks finish, not here
			qs.keepFinished(t)
		}
	}
	return qs, nil
}
