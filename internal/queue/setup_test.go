package queue_test

import (
	"bytes"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

const wallBase = 1_764_000_000_000

type tb interface {
	Helper()
	Fatalf(string, ...any)
}

// env is a machine driven by hand-stamped commands.
type env struct {
	t    tb
	m    *statemachine.Machine
	tick registrar.Tick
	// applied is the tick of the last applied command (state is as of it).
	applied registrar.Tick
	seed    []byte
	log     [][]byte
	// rules stamp the commands (statemachine.Rules unless a test sets
	// earlier ones).
	rules uint32
}

func setup(t tb) *env {
	t.Helper()
	e := &env{t: t, m: statemachine.New(statemachine.DefaultConfig()), tick: 1000, seed: make([]byte, 32), rules: statemachine.Rules}
	for i := range e.seed {
		e.seed[i] = byte(i + 7)
	}
	if res := e.apply(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: e.seed}}}); res.Outcome.Err != nil {
		t.Fatalf("bootstrap: %v", res.Outcome.Err)
	}
	return e
}

func (e *env) apply(cmd *logpb.Command) statemachine.Result {
	cmd.Tick, cmd.Wall, cmd.Rules = int64(e.tick), wallBase+int64(e.tick), e.rules
	e.applied = e.tick
	res := e.m.Apply(cmd)
	for _, s := range res.Records {
		e.log = append(e.log, s.Bytes)
	}
	return res
}

// setPolicy sets the default namespace's policy to p.
func (e *env) setPolicy(p registrar.Policy) {
	e.t.Helper()
	if res := e.apply(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default", Policy: p.Proto()}}}); res.Outcome.Err != nil {
		e.t.Fatalf("set policy: %v", res.Outcome.Err)
	}
}

func (e *env) q(cmd *logpb.Command) queue.Outcome {
	e.t.Helper()
	res := e.apply(cmd)
	if res.Queue == nil {
		e.t.Fatalf("no queue answer for %T", cmd.Op)
	}
	return *res.Queue
}

func (e *env) after(ms int64) *env { e.tick += registrar.Tick(ms); return e }

func (e *env) wall() int64 { return wallBase + int64(e.tick) }

func (e *env) enqueue(queueName string, tasks ...*logpb.NewTask) queue.Outcome {
	return e.q(&logpb.Command{Op: &logpb.Command_Enqueue{Enqueue: &logpb.Enqueue{Queue: queueName, Tasks: tasks}}})
}

func (e *env) mustEnqueue(queueName string, tasks ...*logpb.NewTask) []queue.Task {
	e.t.Helper()
	out := e.enqueue(queueName, tasks...)
	if out.Err != nil {
		e.t.Fatalf("enqueue: %v", out.Err)
	}
	return out.Tasks
}

func (e *env) claim(queueName, worker string, max uint32, ttlMs ...int64) queue.Outcome {
	c := &logpb.Claim{Queue: queueName, Worker: worker, Max: max}
	if len(ttlMs) > 0 {
		c.LeaseTtlMs = &ttlMs[0]
	}
	return e.q(&logpb.Command{Actor: worker, Op: &logpb.Command_Claim{Claim: c}})
}

func (e *env) complete(queueName, id, lease string, result []byte) queue.Outcome {
	return e.q(&logpb.Command{Op: &logpb.Command_CompleteTask{CompleteTask: &logpb.CompleteTask{
		Queue: queueName, TaskId: id, LeaseId: lease, Result: result}}})
}

func (e *env) fail(queueName, id, lease, msg string, retryMs *int64) queue.Outcome {
	return e.q(&logpb.Command{Op: &logpb.Command_FailTask{FailTask: &logpb.FailTask{
		Queue: queueName, TaskId: id, LeaseId: lease, Error: msg, RetryAfterMs: retryMs}}})
}

func (e *env) cancel(queueName, id string) queue.Outcome {
	return e.q(&logpb.Command{Op: &logpb.Command_CancelTask{CancelTask: &logpb.CancelTask{Queue: queueName, TaskId: id}}})
}

func (e *env) retry(queueName, id string) queue.Outcome {
	return e.q(&logpb.Command{Op: &logpb.Command_RetryTask{RetryTask: &logpb.RetryTask{Queue: queueName, TaskId: id}}})
}

func (e *env) advance() {
	e.apply(&logpb.Command{Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}})
}

func (e *env) renew(id string) registrar.Outcome {
	return e.apply(&logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{id}}}}).Outcome
}

func (e *env) get(queueName, id string) queue.Task {
	e.t.Helper()
	t, err := e.m.Queues().Get("", queueName, id)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return t
}

func task(id string, prio int32) *logpb.NewTask { return &logpb.NewTask{TaskId: id, Priority: prio} }

func wantReason(t tb, err error, want registrar.Reason) {
	t.Helper()
	if got := registrar.ReasonOf(err); got != want {
		t.Fatalf("got reason %q (%v), want %q", got, err, want)
	}
}

// restored is a machine restored from a snapshot of m now.
func (e *env) restored() *statemachine.Machine {
	e.t.Helper()
	snap, err := e.m.Snapshot()
	if err != nil {
		e.t.Fatalf("snapshot: %v", err)
	}
	rm, err := statemachine.Restore(statemachine.DefaultConfig(), snap)
	if err != nil {
		e.t.Fatalf("restore: %v", err)
	}
	return rm
}

// checkReplay replays the ledger into a fresh machine and compares
// snapshots, then restores the snapshot and compares again.
func (e *env) checkReplay() {
	e.t.Helper()
	want, err := e.m.Snapshot()
	if err != nil {
		e.t.Fatalf("snapshot: %v", err)
	}
	r := statemachine.New(statemachine.DefaultConfig())
	r.SetKeySeed(e.seed)
	for i, b := range e.log {
		if _, err := r.Replay(b); err != nil {
			e.t.Fatalf("replay record %d: %v", i, err)
		}
	}
	got, err := r.Snapshot()
	if err != nil {
		e.t.Fatalf("replica snapshot: %v", err)
	}
	if !bytes.Equal(got, want) {
		e.t.Fatalf("replayed snapshot differs (%d vs %d bytes)", len(got), len(want))
	}
	rm, err := statemachine.Restore(statemachine.DefaultConfig(), want)
	if err != nil {
		e.t.Fatalf("restore: %v", err)
	}
	again, err := rm.Snapshot()
	if err != nil || !bytes.Equal(again, want) {
		e.t.Fatalf("restored snapshot differs: %v", err)
	}
}
