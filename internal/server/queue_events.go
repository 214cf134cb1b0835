package server

import (
	"strconv"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
)

// Work-queue event types (DESIGN §1.2).
const (
	EventTaskEnqueued  = "task.enqueued"
	EventTaskClaimed   = "task.claimed"
	EventTaskCompleted = "task.completed"
	EventTaskFailed    = "task.failed"
	EventTaskRequeued  = "task.requeued"
	EventTaskDead      = "task.dead"
	EventTaskCancelled = "task.cancelled"
	EventTaskRetried   = "task.retried"
	// EventQueueConfigured: a queue's defaults were set (SetQueueConfig).
	EventQueueConfigured = "queue.configured"
)

func taskRefOf(rec *logpb.Record) *logpb.TaskRef {
	switch b := rec.Body.(type) {
	case *logpb.Record_TaskEnqueued:
		return b.TaskEnqueued.GetTask()
	case *logpb.Record_TaskClaimed:
		return b.TaskClaimed.GetTask()
	case *logpb.Record_TaskCompleted:
		return b.TaskCompleted.GetTask()
	case *logpb.Record_TaskFailed:
		return b.TaskFailed.GetTask()
	case *logpb.Record_TaskRequeued:
		return b.TaskRequeued.GetTask()
	case *logpb.Record_TaskDead:
		return b.TaskDead.GetTask()
	case *logpb.Record_TaskCancelled:
		return b.TaskCancelled.GetTask()
	case *logpb.Record_TaskRetried:
		return b.TaskRetried.GetTask()
	}
	return nil
}

// renderTaskEvent fills the wire event of a work-queue record: the
// namespace, the task lease's resource, and the task in the details.
func renderTaskEvent(ev *tenurev1.Event, d map[string]string, rec *logpb.Record) {
	ref := taskRefOf(rec)
	ev.Namespace, ev.Resource = ref.GetNamespace(), queue.Resource(ref.GetQueue(), ref.GetTaskId())
	d["queue"], d["task_id"] = ref.GetQueue(), ref.GetTaskId()
	switch b := rec.Body.(type) {
	case *logpb.Record_TaskEnqueued:
		ev.Type = EventTaskEnqueued
		d["priority"] = strconv.Itoa(int(b.TaskEnqueued.Priority))
		d["max_attempts"] = utoa(uint64(b.TaskEnqueued.MaxAttempts))
		d["bytes"] = strconv.Itoa(len(b.TaskEnqueued.Payload))
		if b.TaskEnqueued.NotBefore != 0 {
			d["not_before"] = wallString(b.TaskEnqueued.NotBefore)
		}
	case *logpb.Record_TaskClaimed:
		ev.Type = EventTaskClaimed
		ev.LeaseId, ev.Holder, ev.Fence = b.TaskClaimed.LeaseId, b.TaskClaimed.Worker, b.TaskClaimed.LeaseSeq
		d["attempt"] = utoa(uint64(b.TaskClaimed.Attempt))
	case *logpb.Record_TaskCompleted:
		ev.Type = EventTaskCompleted
		d["result_bytes"] = strconv.Itoa(len(b.TaskCompleted.Result))
	case *logpb.Record_TaskFailed:
		ev.Type = EventTaskFailed
		d["error"] = b.TaskFailed.Error
		d["retry_at"] = wallString(b.TaskFailed.ReadyAt)
	case *logpb.Record_TaskRequeued:
		ev.Type = EventTaskRequeued
		d["reason"] = b.TaskRequeued.Reason
	case *logpb.Record_TaskDead:
		ev.Type = EventTaskDead
		d["error"] = b.TaskDead.Error
	case *logpb.Record_TaskCancelled:
		ev.Type = EventTaskCancelled
	case *logpb.Record_TaskRetried:
		ev.Type = EventTaskRetried
	}
}
