package queue

import (
	"container/heap"
	"fmt"
	"slices"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// SnapshotInto writes the queue state into s canonically (tasks by seq).
func (qs *Queues) SnapshotInto(s *logpb.Snapshot) {
	s.NextTaskSeq = qs.nextSeq
	s.Tasks = make([]*logpb.TaskSnap, 0, len(qs.bySeq))
	for _, t := range qs.bySeq {
		s.Tasks = append(s.Tasks, &logpb.TaskSnap{
			Seq: t.seq, Namespace: t.q.ns, Queue: t.q.name, TaskId: t.id, Payload: t.payload, Priority: t.priority,
			State: int32(t.state), Attempts: t.attempts, MaxAttempts: t.maxAttempts, NotBefore: t.notBefore,
			ReadyAt: t.readyAt, CreatedWall: t.createdWall, ClaimedWall: t.claimedWall, CompletedWall: t.finishedWall,
			LastError: t.lastError, Result: t.result, LeaseSeq: t.leaseSeq, LeaseId: t.leaseID, Worker: t.worker,
			PruneTick: int64(t.pruneTick), Outcome: int32(t.outcome),
		})
	}
	slices.SortFunc(s.Tasks, func(a, b *logpb.TaskSnap) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	if len(s.Tasks) == 0 {
		s.Tasks = nil
	}
}

// Restore rebuilds the queue domain from a snapshot, beside reg (already
// restored from the same snapshot), and hooks it to reg's lease ends.
func Restore(reg *registrar.Registrar, s *logpb.Snapshot) (*Queues, error) {
	qs := New(reg)
	if s.NextTaskSeq != 0 {
		qs.nextSeq = s.NextTaskSeq
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
			pruneTick: registrar.Tick(ts.PruneTick), outcome: uint8(ts.Outcome), delayIdx: -1, pruneIdx: -1}
		qs.add(q, t)
		switch {
		case st.claimable():
			q.makeReady(t, s.Wall)
		case st == Leased:
			if t.leaseSeq == 0 || qs.byLease[t.leaseSeq] != nil {
				return nil, fmt.Errorf("snapshot: task %s leased by a bad or shared lease", t.id)
			}
			qs.byLease[t.leaseSeq] = t
		default:
			heap.Push(&qs.prune, t)
		}
	}
	return qs, nil
}
