package statemachine

import (
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Queues gives read access to the work-queue domain for queries. Callers
// must not call its command methods directly.
func (m *Machine) Queues() *queue.Queues { return m.q }

// dispatchQueue runs a work-queue command; its answer goes to Result.Queue
// and its rejection, if any, to the outcome's Err as well.
func (m *Machine) dispatchQueue(tx *registrar.Tx, cmd *logpb.Command) registrar.Outcome {
	var out queue.Outcome
	switch op := cmd.Op.(type) {
	case *logpb.Command_Enqueue:
		out = m.q.Enqueue(tx, op.Enqueue)
	case *logpb.Command_Claim:
		out = m.q.Claim(tx, op.Claim)
	case *logpb.Command_CompleteTask:
		out = m.q.Complete(tx, op.CompleteTask)
	case *logpb.Command_FailTask:
		out = m.q.Fail(tx, op.FailTask)
	case *logpb.Command_CancelTask:
		out = m.q.Cancel(tx, op.CancelTask)
	case *logpb.Command_RetryTask:
		out = m.q.Retry(tx, op.RetryTask)
	case *logpb.Command_ConfigureQueue:
		out = m.q.Configure(tx, op.ConfigureQueue)
	}
	m.qout = &out
	return registrar.Outcome{Err: out.Err}
}
