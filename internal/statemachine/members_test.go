package statemachine_test

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// TestMembersReplayAndSnapshot: published members survive replay of the
// ledger and snapshot/restore byte for byte; a no-op SetMember emits
// nothing; removal forgets the member; snapshot bytes do not depend on
// the order members were published in.
func TestMembersReplayAndSnapshot(t *testing.T) {
	cfg := statemachine.DefaultConfig()
	seed := make([]byte, 32)
	seed[0] = 9
	m := statemachine.New(cfg)
	tick := int64(1000)
	var log [][]byte
	snaps := map[int][]byte{}
	do := func(cmd *logpb.Command) statemachine.Result {
		t.Helper()
		tick += 10
		cmd.Tick, cmd.Wall = tick, 1_764_000_000_000+tick
		res := m.Apply(cmd)
		if res.Outcome.Err != nil {
			t.Fatalf("%v: %v", cmd, res.Outcome.Err)
		}
		for _, s := range res.Records {
			log = append(log, s.Bytes)
		}
		b, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		snaps[len(log)] = b
		return res
	}
	set := func(id, api, raft string, removed bool) statemachine.Result {
		return do(&logpb.Command{Op: &logpb.Command_SetMember{SetMember: &logpb.SetMember{Id: id, ApiAddress: api, RaftAddress: raft, Removed: removed}}})
	}
	do(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: seed}}})
	set("n2", "127.0.0.1:8002", "127.0.0.1:9002", false)
	set("n1", "127.0.0.1:8001", "127.0.0.1:9001", false)
	if res := set("n1", "127.0.0.1:8001", "127.0.0.1:9001", false); len(res.Records) != 0 {
		t.Fatalf("republishing the same addresses emitted %d records", len(res.Records))
	}
	do(&logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "r", Holder: "h"}}})
	set("n3", "127.0.0.1:8003", "127.0.0.1:9003", false)
	set("n1", "127.0.0.1:7001", "127.0.0.1:9001", false) // moved
	set("n4", "127.0.0.1:8004", "127.0.0.1:9004", false)
	if res := set("n4", "", "", true); len(res.Records) != 1 {
		t.Fatalf("removal emitted %d records", len(res.Records))
	}
	if res := set("n9", "", "", true); len(res.Records) != 0 {
		t.Fatal("removing an unknown member emitted a record")
	}
	if out := m.Apply(&logpb.Command{Tick: tick, Op: &logpb.Command_SetMember{SetMember: &logpb.SetMember{}}}); registrar.ReasonOf(out.Outcome.Err) != registrar.ReasonInvalidArgument {
		t.Fatalf("SetMember without id: %v", out.Outcome.Err)
	}

	want := []statemachine.Member{
		{ID: "n1", APIAddress: "127.0.0.1:7001", RaftAddress: "127.0.0.1:9001"},
		{ID: "n2", APIAddress: "127.0.0.1:8002", RaftAddress: "127.0.0.1:9002"},
		{ID: "n3", APIAddress: "127.0.0.1:8003", RaftAddress: "127.0.0.1:9003"},
	}
	check := func(what string, got *statemachine.Machine) {
		t.Helper()
		ms := got.Members()
		if len(ms) != len(want) {
			t.Fatalf("%s: members %v, want %v", what, ms, want)
		}
		for i := range ms {
			if ms[i] != want[i] {
				t.Fatalf("%s: members %v, want %v", what, ms, want)
			}
		}
	}
	check("applied", m)
	final, _ := m.Snapshot()

	// Replay of the whole ledger, and of every prefix at a command boundary.
	for n, snap := range snaps {
		r := statemachine.New(cfg)
		r.SetKeySeed(seed)
		for i, b := range log[:n] {
			if _, err := r.Replay(b); err != nil {
				t.Fatalf("replay record %d: %v", i+1, err)
			}
		}
		if got, _ := r.Snapshot(); !bytes.Equal(got, snap) {
			t.Fatalf("replay of %d records differs from the state then", n)
		}
		// Restore at that point and replay the rest: the final state.
		rs, err := statemachine.Restore(cfg, snap)
		if err != nil {
			t.Fatalf("restore at %d: %v", n, err)
		}
		for _, b := range log[n:] {
			if _, err := rs.Replay(b); err != nil {
				t.Fatalf("restored at %d: %v", n, err)
			}
		}
		if got, _ := rs.Snapshot(); !bytes.Equal(got, final) {
			t.Fatalf("restored at %d and replayed: state differs", n)
		}
		if n == len(log) {
			check("restored", rs)
		}
	}

	// Snapshots list members sorted by id whatever the publication order,
	// and members may be published before the registrar has its key.
	mm := statemachine.New(cfg)
	for _, id := range []string{"z", "x", "y"} {
		if out := mm.Apply(&logpb.Command{Tick: 5, Op: &logpb.Command_SetMember{SetMember: &logpb.SetMember{Id: id, ApiAddress: id + ":1", RaftAddress: id + ":2"}}}); out.Outcome.Err != nil {
			t.Fatal(out.Outcome.Err)
		}
	}
	b, err := mm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s := &logpb.Snapshot{}
	if err := proto.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range s.Members {
		ids = append(ids, x.Id)
	}
	if !slices.Equal(ids, []string{"x", "y", "z"}) {
		t.Fatalf("snapshot members in order %v", ids)
	}
}
