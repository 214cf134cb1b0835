package statemachine_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"google.golang.org/protobuf/proto"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

var updateCompat = flag.Bool("update-compat", false, "rewrite testdata/compat (only for a deliberate change of what the log derives)")

// compatScript drives a machine through a fixed history touching every
// kind of command: leases (wait, shared, renew, guarded state, transfer,
// revoke, policy, derived leases and budgets, restart grace, expiry), the
// queue and the pool. Part 1 runs before the snapshot, part 2 after.
type compatScript struct {
	t    *testing.T
	m    *statemachine.Machine
	tick int64
	sum  [2]*bytes.Buffer // the records of each part, length-prefixed
	part int
	ids  map[string]string // name → lease id
}

func (s *compatScript) do(name string, op any) statemachine.Result {
	s.t.Helper()
	c := &logpb.Command{Tick: s.tick, Wall: 1_767_000_000_000 + s.tick, Actor: "compat"}
	switch o := op.(type) {
	case *logpb.Bootstrap:
		c.Op = &logpb.Command_Bootstrap{Bootstrap: o}
	case *logpb.Acquire:
		c.Op = &logpb.Command_Acquire{Acquire: o}
	case *logpb.Renew:
		c.Op = &logpb.Command_Renew{Renew: o}
	case *logpb.Release:
		c.Op = &logpb.Command_Release{Release: o}
	case *logpb.Revoke:
		c.Op = &logpb.Command_Revoke{Revoke: o}
	case *logpb.Transfer:
		c.Op = &logpb.Command_Transfer{Transfer: o}
	case *logpb.Expire:
		c.Op = &logpb.Command_Expire{Expire: o}
	case *logpb.DeclareRestart:
		c.Op = &logpb.Command_DeclareRestart{DeclareRestart: o}
	case *logpb.WriteState:
		c.Op = &logpb.Command_WriteState{WriteState: o}
	case *logpb.SetPolicy:
		c.Op = &logpb.Command_SetPolicy{SetPolicy: o}
	case *logpb.Advance:
		c.Op = &logpb.Command_Advance{Advance: o}
	case *logpb.SetMember:
		c.Op = &logpb.Command_SetMember{SetMember: o}
	case *logpb.Derive:
		c.Op = &logpb.Command_Derive{Derive: o}
	case *logpb.Consume:
		c.Op = &logpb.Command_Consume{Consume: o}
	case *logpb.Enqueue:
		c.Op = &logpb.Command_Enqueue{Enqueue: o}
	case *logpb.Claim:
		c.Op = &logpb.Command_Claim{Claim: o}
	case *logpb.CompleteTask:
		c.Op = &logpb.Command_CompleteTask{CompleteTask: o}
	case *logpb.FailTask:
		c.Op = &logpb.Command_FailTask{FailTask: o}
	case *logpb.CancelTask:
		c.Op = &logpb.Command_CancelTask{CancelTask: o}
	case *logpb.PoolCommand:
		c.Op = &logpb.Command_Pool{Pool: o}
	default:
		s.t.Fatalf("%s: unknown op %T", name, op)
	}
	res := s.m.Apply(c)
	b := s.sum[s.part]
	fmt.Fprintf(b, "%s %d\n", name, len(res.Records))
	for _, r := range res.Records {
		fmt.Fprintf(b, "%d %x\n", len(r.Bytes), r.Bytes)
		if is := r.Record.GetIssued(); is != nil { // also a waiter's grant
			s.ids[is.Holder+"@"+is.Resource] = is.LeaseId
		}
	}
	if l := res.Outcome.Lease; l != nil {
		s.ids[name] = l.ID
	}
	if q := res.Queue; q != nil {
		for i, l := range q.Leases {
			s.ids[fmt.Sprintf("%s.%d", name, i)] = l.ID
			s.ids[fmt.Sprintf("%s.task%d", name, i)] = q.Tasks[i].ID
		}
	}
	if p := res.Pool; p != nil {
		for i, g := range p.Leases {
			s.ids[fmt.Sprintf("%s.%d", name, i)] = g.LeaseID
		}
	}
	return res
}

func (s *compatScript) id(name string) string {
	s.t.Helper()
	id, ok := s.ids[name]
	if !ok {
		s.t.Fatalf("no lease %s", name)
	}
	return id
}

func ms(v int64) *int64 { return &v }

func (s *compatScript) part1() {
	s.do("bootstrap", &logpb.Bootstrap{KeySeed: bytes.Repeat([]byte{42}, 32)})
	s.do("a1", &logpb.Acquire{Resource: "orders/1", Holder: "h1", TtlMs: ms(10_000)})
	s.tick += 5
	s.do("a1-wait", &logpb.Acquire{Resource: "orders/1", Holder: "h2", TtlMs: ms(10_000), WaitMs: 5_000})
	s.do("s1", &logpb.Acquire{Resource: "shared/1", Holder: "h1", Mode: tenurev1.Mode_MODE_SHARED})
	s.do("s2", &logpb.Acquire{Resource: "shared/1", Holder: "h2", Mode: tenurev1.Mode_MODE_SHARED})
	s.tick += 100
	s.do("renew", &logpb.Renew{LeaseIds: []string{s.id("a1")}, Holder: "h1"})
	s.do("write", &logpb.WriteState{Resource: "orders/1", LeaseId: s.id("a1"), Data: []byte("state")})
	s.do("write-stale", &logpb.WriteState{Resource: "orders/1", LeaseId: s.id("a1"), ExpectedEpoch: 7, Data: []byte("x")})
	s.tick += 100
	s.do("release", &logpb.Release{LeaseId: s.id("a1"), Holder: "h1", Reason: tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED})
	s.do("held", &logpb.Acquire{Resource: "orders/1", Holder: "h9"})
	s.do("policy", &logpb.SetPolicy{Namespace: "ns2", Policy: &tenurev1.NamespacePolicy{
		MaxRenewals: proto.Uint32(2), DefaultTtl: durationpb.New(30e9), MaxActivePerHolder: 5}})
	s.do("b1", &logpb.Acquire{Namespace: "ns2", Resource: "b/1", Holder: "h1"})
	for i := range 3 {
		s.tick += 1_000
		s.do(fmt.Sprintf("b1-renew%d", i), &logpb.Renew{LeaseIds: []string{s.id("b1")}, Holder: "h1", Namespace: "ns2"})
	}
	s.do("derive", &logpb.Derive{ParentLeaseId: s.id("b1"), Holder: "h1", NewHolder: "agent", Namespace: "ns2",
		Resource: "b/1/sub", TtlMs: ms(5_000), Derivation: &logpb.Derivation{
			ResourcePrefixes: []string{"b/1/"}, Actions: []string{"read"},
			Limits: []*logpb.CounterLimit{{Counter: "calls", Limit: 10}}}})
	s.do("consume", &logpb.Consume{LeaseId: s.id("derive"), Counter: "calls", Amount: 3, Holder: "agent"})
	s.do("consume-over", &logpb.Consume{LeaseId: s.id("derive"), Counter: "calls", Amount: 30, Holder: "agent"})
	s.do("member", &logpb.SetMember{Id: "n1", ApiAddress: "127.0.0.1:7070", RaftAddress: "127.0.0.1:7071"})
	s.do("enqueue", &logpb.Enqueue{Queue: "jobs", Tasks: []*logpb.NewTask{
		{TaskId: "t1", Payload: []byte("one")}, {TaskId: "t2", Priority: 5}, {TaskId: "t3", MaxAttempts: 1}}})
	s.do("claim", &logpb.Claim{Queue: "jobs", Worker: "w1", Max: 2, LeaseTtlMs: ms(20_000)})
	s.do("pool", &logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Create{Create: &logpb.PoolCreate{}}})
	s.do("want", &logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{
		FileIndex: 0, PieceCount: 16, Ranges: []*tenurev1.PieceRange{{Start: 0, End: 16}}}}})
	s.do("want1", &logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{
		FileIndex: 1, PieceCount: 8, Bits: []byte{0b1010_1010}}}})
	s.do("req-a", &logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{
		Peer: "a", Max: 3, Have: []*logpb.PoolHave{{FileIndex: 0, Bits: []byte{0xff, 0x0f}}, {FileIndex: 1, Bits: []byte{0xff}}}}}})
	s.do("req-b", &logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{
		Peer: "b", Max: 2, Have: []*logpb.PoolHave{{FileIndex: 0, Bits: []byte{0xf0, 0xff}}}}}})
}

func (s *compatScript) part2() {
	s.tick += 500
	s.do("complete", &logpb.CompleteTask{Queue: "jobs", TaskId: s.id("claim.task0"), LeaseId: s.id("claim.0"), Result: []byte("ok")})
	s.do("fail", &logpb.FailTask{Queue: "jobs", TaskId: s.id("claim.task1"), LeaseId: s.id("claim.1"), Error: "boom", RetryAfterMs: ms(1_000)})
	s.do("cancel", &logpb.CancelTask{Queue: "jobs", TaskId: "t3"})
	s.do("piece-ok", &logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Complete{Complete: &logpb.PoolComplete{
		Peer: "a", FileIndex: 0, PieceIndex: 0, Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS}}})
	s.do("transfer", &logpb.Transfer{LeaseId: s.id("h2@orders/1"), Holder: "h2", NewHolder: "h3"})
	s.do("revoke", &logpb.Revoke{LeaseId: s.id("transfer"), Reason: "compat"})
	s.do("restart", &logpb.DeclareRestart{Holder: "h1", GraceMs: ms(2_000)})
	s.tick += 400_000 // past every ttl
	s.do("advance", &logpb.Advance{})
	var due []string
	for _, n := range []string{"s1", "s2", "b1", "derive", "claim.1", "req-a.1", "req-a.2", "req-b.0", "req-b.1"} {
		if id, ok := s.ids[n]; ok {
			due = append(due, id)
		}
	}
	s.do("expire", &logpb.Expire{LeaseIds: due})
	s.do("claim2", &logpb.Claim{Queue: "jobs", Worker: "w2", Max: 1})
	s.do("req-c", &logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{
		Peer: "c", Max: 4, Have: []*logpb.PoolHave{{FileIndex: 0, Bits: []byte{0xff, 0xff}}}}}})
}

func digest(b *bytes.Buffer) string {
	h := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(h[:])
}

// TestCompatibility pins the records that a fixed history derives, and
// that a snapshot taken by an earlier binary restores to the same state.
// Nodes compare the records they derive on every restart with their
// ledger (and an upgraded member must write the same history as the
// others), so a change in what the same commands derive makes every
// existing data dir stop writing its ledger after an upgrade: new fields
// must keep old commands' records byte for byte (see
// registrar.Policy.ProtoOver). testdata/compat was written by the
// release the check holds to (-update-compat rewrites it; a deliberate
// change needs a migration, not just that).
func TestCompatibility(t *testing.T) {
	cfg := statemachine.DefaultConfig()
	cfg.CheckpointEvery = 16 // signed checkpoints too
	s := &compatScript{t: t, m: statemachine.New(cfg), tick: 1_000, ids: map[string]string{},
		sum: [2]*bytes.Buffer{{}, {}}}
	s.part1()
	snap, err := s.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	tick1, ids1 := s.tick, maps.Clone(s.ids)
	s.part = 1
	s.part2()
	dir := filepath.Join("testdata", "compat")
	got := digest(s.sum[0]) + "\n" + digest(s.sum[1]) + "\n"
	if *updateCompat {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"digests": []byte(got), "snapshot.bin": snap,
			"records1.txt": s.sum[0].Bytes(), "records2.txt": s.sum[1].Bytes()} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	want, err := os.ReadFile(filepath.Join(dir, "digests"))
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		old, _ := os.ReadFile(filepath.Join(dir, "records1.txt"))
		old2, _ := os.ReadFile(filepath.Join(dir, "records2.txt"))
		t.Fatalf("the fixed history derives other records than the pinned release did (upgrades would stop the ledger):\n%s",
			firstDiff(string(old)+string(old2), s.sum[0].String()+s.sum[1].String()))
	}
	// The earlier release's snapshot, restored here, goes on alike.
	old, err := os.ReadFile(filepath.Join(dir, "snapshot.bin"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := statemachine.Restore(cfg, old)
	if err != nil {
		t.Fatalf("restoring the earlier release's snapshot: %v", err)
	}
	r := &compatScript{t: t, m: m, tick: tick1, ids: ids1, sum: [2]*bytes.Buffer{{}, {}}, part: 1}
	r.part2()
	if digest(r.sum[1]) != digest(s.sum[1]) {
		t.Fatalf("after restoring the earlier release's snapshot the history derives other records:\n%s",
			firstDiff(s.sum[1].String(), r.sum[1].String()))
	}
}

// firstDiff shows the first line where two record listings part.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range min(len(w), len(g)) {
		if w[i] != g[i] {
			return fmt.Sprintf("line %d:\n pinned: %.300s\n   now:  %.300s", i+1, w[i], g[i])
		}
	}
	return fmt.Sprintf("the pinned listing has %d lines, now %d", len(w), len(g))
}
