package registrar_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// wallBase is the wall time (unix ms) at tick 0 in tests.
const wallBase = 1_764_000_000_000

// env is a machine driven by hand-stamped commands.
type env struct {
	t    *testing.T
	m    *statemachine.Machine
	tick registrar.Tick
	seed []byte
	// rules stamp the commands (statemachine.Rules unless a test sets
	// earlier ones).
	rules uint32
	// log keeps every sealed record, for replay checks.
	log [][]byte
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, m: statemachine.New(statemachine.DefaultConfig()), tick: 1000, rules: statemachine.Rules}
	e.seed = make([]byte, 32)
	for i := range e.seed {
		e.seed[i] = byte(i + 1)
	}
	out := e.do(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: e.seed}}})
	if out.Err != nil {
		t.Fatalf("bootstrap: %v", out.Err)
	}
	return e
}

func (e *env) do(cmd *logpb.Command) registrar.Outcome {
	e.t.Helper()
	cmd.Tick = int64(e.tick)
	cmd.Wall = wallBase + int64(e.tick)
	cmd.Rules = e.rules
	res := e.m.Apply(cmd)
	for _, s := range res.Records {
		e.log = append(e.log, s.Bytes)
	}
	return res.Outcome
}

func (e *env) at(t registrar.Tick) *env { e.tick = t; return e }
func (e *env) after(ms int64) *env      { e.tick += registrar.Tick(ms); return e }

func ms(v int64) *int64 { return &v }

func (e *env) acquire(res, holder string, opts ...func(*logpb.Acquire)) registrar.Outcome {
	e.t.Helper()
	a := &logpb.Acquire{Resource: res, Holder: holder}
	for _, o := range opts {
		o(a)
	}
	return e.do(&logpb.Command{Actor: holder, Op: &logpb.Command_Acquire{Acquire: a}})
}

func (e *env) mustAcquire(res, holder string, opts ...func(*logpb.Acquire)) registrar.Lease {
	e.t.Helper()
	out := e.acquire(res, holder, opts...)
	if out.Err != nil || out.Lease == nil {
		e.t.Fatalf("acquire %s by %s: %v (waiter %d)", res, holder, out.Err, out.WaiterID)
	}
	return *out.Lease
}

func ttl(v int64) func(*logpb.Acquire)    { return func(a *logpb.Acquire) { a.TtlMs = &v } }
func wait(v int64) func(*logpb.Acquire)   { return func(a *logpb.Acquire) { a.WaitMs = v } }
func shared(a *logpb.Acquire)             { a.Mode = tenurev1.Mode_MODE_SHARED }
func inNS(ns string) func(*logpb.Acquire) { return func(a *logpb.Acquire) { a.Namespace = ns } }

func (e *env) renew(id string, ttlMs *int64) registrar.Outcome {
	return e.do(&logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{id}, TtlMs: ttlMs}}})
}

func (e *env) release(id, holder string) registrar.Outcome {
	return e.do(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id, Holder: holder}}})
}

func (e *env) advance() registrar.Outcome {
	return e.do(&logpb.Command{Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}})
}

func (e *env) get(id string) registrar.Lease {
	e.t.Helper()
	l, err := e.m.Registrar().Get(id, e.tick)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return l
}

func wantReason(t *testing.T, err error, want registrar.Reason) {
	t.Helper()
	if got := registrar.ReasonOf(err); got != want {
		t.Fatalf("got reason %q (%v), want %q", got, err, want)
	}
}

// Command helpers for the remaining operations.

func (e *env) renewWith(r *logpb.Renew) registrar.Outcome {
	return e.do(&logpb.Command{Actor: r.Holder, Op: &logpb.Command_Renew{Renew: r}})
}

func (e *env) releaseWith(r *logpb.Release) registrar.Outcome {
	return e.do(&logpb.Command{Actor: r.Holder, Op: &logpb.Command_Release{Release: r}})
}

func (e *env) revoke(id, reason string) registrar.Outcome {
	return e.do(&logpb.Command{Actor: "admin", Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: id, Reason: reason}}})
}

func (e *env) transfer(id, holder, newHolder string, ttlMs *int64) registrar.Outcome {
	return e.do(&logpb.Command{Actor: holder, Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{
		LeaseId: id, Holder: holder, NewHolder: newHolder, TtlMs: ttlMs}}})
}

func (e *env) expire(ids ...string) registrar.Outcome {
	return e.do(&logpb.Command{Op: &logpb.Command_Expire{Expire: &logpb.Expire{LeaseIds: ids}}})
}

func (e *env) declareRestart(holder string, graceMs *int64) registrar.Outcome {
	return e.do(&logpb.Command{Actor: holder, Op: &logpb.Command_DeclareRestart{DeclareRestart: &logpb.DeclareRestart{
		Holder: holder, GraceMs: graceMs}}})
}

func (e *env) writeState(res, leaseID string, expected uint64, data []byte) registrar.Outcome {
	return e.do(&logpb.Command{Op: &logpb.Command_WriteState{WriteState: &logpb.WriteState{
		Resource: res, LeaseId: leaseID, ExpectedEpoch: expected, Data: data}}})
}

func (e *env) setPolicy(ns string, p *tenurev1.NamespacePolicy) {
	e.t.Helper()
	out := e.do(&logpb.Command{Actor: "admin", Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: ns, Policy: p}}})
	if out.Err != nil {
		e.t.Fatalf("set policy %s: %v", ns, out.Err)
	}
}

// next is the ledger index the next record will get.
func (e *env) next() uint64 { return e.m.Chain().Next }

// mark and since capture the records emitted after a point, decoded.
func (e *env) mark() int { return len(e.log) }

func (e *env) since(mark int) []*logpb.Record {
	e.t.Helper()
	var out []*logpb.Record
	for _, b := range e.log[mark:] {
		rec := &logpb.Record{}
		if err := proto.Unmarshal(b, rec); err != nil {
			e.t.Fatalf("decode record: %v", err)
		}
		out = append(out, rec)
	}
	return out
}

func (e *env) declareRestartIn(holder, ns string, graceMs *int64) registrar.Outcome {
	return e.do(&logpb.Command{Actor: holder, Op: &logpb.Command_DeclareRestart{DeclareRestart: &logpb.DeclareRestart{
		Holder: holder, Namespace: ns, GraceMs: graceMs}}})
}
