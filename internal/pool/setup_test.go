package pool_test

import (
	"bytes"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

const wallBase = 1_764_000_000_000

// tb is what env needs of *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// env drives a statemachine.Machine with hand-stamped pool commands.
type env struct {
	t    tb
	m    *statemachine.Machine
	tick int64
	seed []byte
	log  [][]byte
	// twin, when set, is a machine restored from a snapshot of m that is
	// given every later command too: apply checks that it emits the same
	// records (a restored replica decides exactly as the live one).
	twin *statemachine.Machine
	// last is the records of the last command applied.
	last []statemachine.Sealed
}

func setup(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, m: statemachine.New(statemachine.DefaultConfig()), tick: 1000, seed: bytes.Repeat([]byte{7}, 32)}
	res := e.m.Apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: e.seed}}})
	if res.Outcome.Err != nil {
		t.Fatalf("bootstrap: %v", res.Outcome.Err)
	}
	e.keep(res)
	return e
}

func (e *env) keep(res statemachine.Result) {
	for _, s := range res.Records {
		e.log = append(e.log, s.Bytes)
	}
}

func (e *env) after(ms int64) *env { e.tick += ms; return e }

// apply applies cmd (and to the twin, comparing what they emit) and keeps
// its records.
func (e *env) apply(cmd *logpb.Command) statemachine.Result {
	e.t.Helper()
	res := e.m.Apply(cmd)
	e.keep(res)
	e.last = res.Records
	if e.twin != nil {
		got := e.twin.Apply(cmd)
		if len(got.Records) != len(res.Records) {
			e.t.Fatalf("restored twin emitted %d records, live %d", len(got.Records), len(res.Records))
		}
		for i := range got.Records {
			if !bytes.Equal(got.Records[i].Bytes, res.Records[i].Bytes) {
				e.t.Fatalf("restored twin's record %d differs:\n%s\nlive:\n%s", i, got.Records[i].Bytes, res.Records[i].Bytes)
			}
		}
	}
	return res
}

// fork sets the twin: a machine restored from a snapshot of m now.
func (e *env) fork() {
	e.t.Helper()
	b, err := e.m.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	if e.twin, err = statemachine.Restore(statemachine.DefaultConfig(), b); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) do(c *logpb.PoolCommand) pool.Outcome {
	e.t.Helper()
	res := e.apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Op: &logpb.Command_Pool{Pool: c}})
	if res.Pool == nil {
		return pool.Outcome{Err: res.Outcome.Err}
	}
	return *res.Pool
}

func (e *env) advance() {
	e.apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick, Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}})
}

// setPolicy sets the default namespace's policy.
func (e *env) setPolicy(pol *tenurev1.NamespacePolicy) {
	e.t.Helper()
	if res := e.apply(&logpb.Command{Tick: e.tick, Wall: wallBase + e.tick,
		Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "default", Policy: pol}}}); res.Outcome.Err != nil {
		e.t.Fatal(res.Outcome.Err)
	}
}

func (e *env) create(name string, cfg *tenurev1.PoolConfig) pool.Outcome {
	e.t.Helper()
	return e.do(&logpb.PoolCommand{Pool: name, Op: &logpb.PoolCommand_Create{Create: &logpb.PoolCreate{Config: cfg}}})
}

func (e *env) wantRange(name string, file, count, start, end uint32) pool.Outcome {
	e.t.Helper()
	out := e.do(&logpb.PoolCommand{Pool: name, Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{
		FileIndex: file, PieceCount: count, Ranges: []*tenurev1.PieceRange{{Start: start, End: end}}}}})
	if out.Err != nil {
		e.t.Fatalf("want: %v", out.Err)
	}
	return out
}

func have(file uint32, pieces ...uint32) *logpb.PoolHave {
	h := &logpb.PoolHave{FileIndex: file}
	for _, p := range pieces {
		for uint32(len(h.Bits)) <= p/8 {
			h.Bits = append(h.Bits, 0)
		}
		h.Bits[p/8] |= 1 << (p % 8)
	}
	return h
}

func span(lo, hi uint32) []uint32 {
	var out []uint32
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

func (e *env) request(name, peer string, max uint32, hs ...*logpb.PoolHave) pool.Outcome {
	e.t.Helper()
	return e.do(&logpb.PoolCommand{Pool: name, Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{Peer: peer, Have: hs, Max: max}}})
}

func (e *env) complete(name, peer string, file, piece uint32, ok bool, why tenurev1.FailureReason) pool.Outcome {
	e.t.Helper()
	return e.completeLease(name, peer, "", file, piece, ok, why)
}

// completeLease is complete naming the lease reported on.
func (e *env) completeLease(name, peer, leaseID string, file, piece uint32, ok bool, why tenurev1.FailureReason) pool.Outcome {
	e.t.Helper()
	r := tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS
	if !ok {
		r = tenurev1.CompletionResult_COMPLETION_RESULT_FAILURE
	}
	return e.do(&logpb.PoolCommand{Pool: name, Op: &logpb.PoolCommand_Complete{Complete: &logpb.PoolComplete{
		Peer: peer, FileIndex: file, PieceIndex: piece, Result: r, FailureReason: why, LeaseId: leaseID}}})
}

func (e *env) ranking(name, peer string) pool.Ranking {
	e.t.Helper()
	rs, err := e.m.Pools().Rankings("", name)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range rs {
		if r.Peer == peer {
			return r
		}
	}
	e.t.Fatalf("no ranking for %s", peer)
	return pool.Ranking{}
}

// checkReplay replays the ledger into a fresh machine and restores the
// snapshot; both must give the same snapshot bytes.
func (e *env) checkReplay() {
	e.t.Helper()
	want, err := e.m.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	fresh := statemachine.New(statemachine.DefaultConfig())
	fresh.SetKeySeed(e.seed)
	for _, b := range e.log {
		if _, err := fresh.Replay(b); err != nil {
			e.t.Fatalf("replay: %v", err)
		}
	}
	got, err := fresh.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		e.t.Fatalf("replayed snapshot differs (%d vs %d bytes)", len(got), len(want))
	}
	if err := fresh.Pools().Check(); err != nil {
		e.t.Fatalf("replayed: %v", err)
	}
	restored, err := statemachine.Restore(statemachine.DefaultConfig(), want)
	if err != nil {
		e.t.Fatal(err)
	}
	got, err = restored.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		e.t.Fatalf("restored snapshot differs")
	}
	if err := restored.Pools().Check(); err != nil {
		e.t.Fatalf("restored: %v", err)
	}
}

var _ = registrar.Tick(0)
