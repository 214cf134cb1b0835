package cluster

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// checkDecode compares decodeBatch with proto.Unmarshal on data and
// reports whether the hand decoder took it.
func checkDecode(t *testing.T, data []byte) (fast bool) {
	t.Helper()
	want := &logpb.Batch{}
	wantErr := proto.Unmarshal(data, want)
	got, err := decodeBatch(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decodeBatch error %v, proto.Unmarshal %v (entry %x)", err, wantErr, data)
	}
	if err == nil && !proto.Equal(got, want) {
		t.Fatalf("decodeBatch gave\n%v\nproto.Unmarshal\n%v\n(entry %x)", got, want, data)
	}
	_, fast = decodeBatchFast(data)
	return fast
}

func batchOf(cmds ...*logpb.Command) []byte {
	b, err := proto.Marshal(&logpb.Batch{Commands: cmds})
	if err != nil {
		panic(err)
	}
	return b
}

// rawCommand wraps hand-built command fields into a one-command batch.
func rawCommand(fields []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), fields)
}

// rawOp is a command holding op field num with body.
func rawOp(num protowire.Number, body []byte) []byte {
	return rawCommand(protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body))
}

func TestDecodeBatchMatchesProto(t *testing.T) {
	t.Parallel()
	ttl, zero, neg := int64(30_000), int64(0), int64(-5)
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	cat := func(parts ...[]byte) (b []byte) {
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	cases := []struct {
		name string
		data []byte
		fast bool // the hand decoder takes it
	}{
		{"acquire", batchOf(&logpb.Command{Tick: 7, Wall: 1_700_000_000_000, Actor: "alice", Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			Namespace: "ns", Resource: "orders/1", Holder: "w1", TtlMs: &ttl, Mode: tenurev1.Mode_MODE_SHARED, WaitMs: 500}}}), true},
		{"acquire with zero optional ttl", batchOf(&logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{TtlMs: &zero}}}), true},
		{"acquire with negative values", batchOf(&logpb.Command{Tick: -1, Wall: math.MinInt64, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			TtlMs: &neg, WaitMs: -3, Mode: tenurev1.Mode(-2)}}}), true},
		{"empty acquire", batchOf(&logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{}}}), true},
		// Every entry the leader writes has its rules stamped.
		{"stamped rules", batchOf(&logpb.Command{Tick: 7, Rules: 5, Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: "x"}}}), true},
		{"rules above uint32", rawCommand(varint(4, 1<<32|5)), false},
		{"cluster tag", cat(batchOf(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: "x"}}}), str(2, "\x01\x02\x03\x04\x05\x06\x07\x08")), true},
		{"empty cluster tag", cat(rawCommand(nil), str(2, "")), true},
		{"release", batchOf(&logpb.Command{Tick: 3, Op: &logpb.Command_Release{Release: &logpb.Release{
			LeaseId: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Holder: "w1", Reason: tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED}}}), true},
		{"renew", batchOf(&logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{
			LeaseIds: []string{"a", "", "ü"}, Holder: "w", AllOfHolder: true, Namespace: "n", TtlMs: &ttl}}}), true},
		{"mixed", batchOf(
			&logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "r", Holder: "h"}}},
			&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: "x", Holder: "h"}}},
			&logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{"x"}}}}), true},
		{"command without op", batchOf(&logpb.Command{Tick: 1}), true},
		{"empty command", rawCommand(nil), true},
		{"repeated scalars: the last wins", rawOp(11, cat(str(2, "first"), str(2, "second"), varint(4, 10), varint(4, 20), varint(5, 1), varint(5, 2))), true},
		{"non-minimal varint", rawCommand(cat([]byte{0x08, 0x81, 0x80, 0x00})), true},
		{"bool above one", rawOp(12, varint(3, 2)), true},
		{"enum above int32", rawOp(13, varint(3, 1<<40|3)), true},

		{"empty entry", nil, false},
		{"acquire with derivation", batchOf(&logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			Resource: "r", Derivation: &logpb.Derivation{ResourcePrefixes: []string{"r/"}}}}}), false},
		{"bootstrap", batchOf(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: make([]byte, 32)}}}), false},
		{"hot then other", batchOf(
			&logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "r"}}},
			&logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: "x"}}}), false},
		{"two ops in one command", rawCommand(cat(rawOp(11, str(2, "a"))[2:], rawOp(13, str(1, "b"))[2:])), false},
		{"the same op twice (merged)", rawCommand(cat(rawOp(11, str(2, "a"))[2:], rawOp(11, str(3, "h"))[2:])), false},
		{"unknown command field", rawCommand(varint(99, 1)), false},
		{"unknown acquire field", rawOp(11, varint(98, 1)), false},
		{"unknown batch field", cat(rawCommand(nil), varint(3, 1)), false},
		{"cluster tag of the wrong wire type", cat(rawCommand(nil), varint(2, 1)), false},
		{"cluster tag before a command", cat(str(2, "tag"), rawCommand(nil)), false},
		{"two cluster tags", cat(rawCommand(nil), str(2, "a"), str(2, "b")), false},
		{"wrong wire type", rawCommand(str(1, "tick")), false},
		{"invalid UTF-8", rawOp(13, str(2, "\xff")), false},
		{"truncated", batchOf(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: "abc"}}})[:5], false},
		{"garbage", []byte{0xff, 0xff, 0xff}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if fast := checkDecode(t, tc.data); fast != tc.fast {
				t.Fatalf("hand decoder took it: %v, want %v", fast, tc.fast)
			}
		})
	}
}

// TestDecodeBatchRandom compares the decoders on random batches of the
// commands the hand decoder takes, with other commands mixed in.
func TestDecodeBatchRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "orders/42", "ü-ñ", "01ARZ3NDEKTSV4RRFFQ69G5FAV", string(make([]byte, 200))}
	s := func() string { return strs[rng.IntN(len(strs))] }
	i64 := func() int64 {
		switch rng.IntN(3) {
		case 0:
			return 0
		case 1:
			return rng.Int64N(1 << 20)
		}
		return int64(rng.Uint64())
	}
	opt := func() *int64 {
		if rng.IntN(2) == 0 {
			return nil
		}
		v := i64()
		return &v
	}
	fastSeen := 0
	for range 2000 {
		n := 1 + rng.IntN(60)
		cmds := make([]*logpb.Command, n)
		hotOnly := rng.IntN(4) != 0
		for i := range cmds {
			c := &logpb.Command{Tick: i64(), Wall: i64(), Actor: s()}
			switch k := rng.IntN(4); {
			case k == 0:
				c.Op = &logpb.Command_Acquire{Acquire: &logpb.Acquire{Namespace: s(), Resource: s(), Holder: s(),
					TtlMs: opt(), Mode: tenurev1.Mode(rng.IntN(4)), WaitMs: i64()}}
			case k == 1:
				c.Op = &logpb.Command_Release{Release: &logpb.Release{LeaseId: s(), Holder: s(), Reason: tenurev1.ReleaseReason(rng.IntN(5))}}
			case k == 2:
				ids := make([]string, rng.IntN(4))
				for j := range ids {
					ids[j] = s()
				}
				c.Op = &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: ids, Holder: s(), AllOfHolder: rng.IntN(2) == 0, Namespace: s(), TtlMs: opt()}}
			case !hotOnly:
				c.Op = &logpb.Command_CancelWait{CancelWait: &logpb.CancelWait{WaiterId: rng.Uint64()}}
			}
			cmds[i] = c
		}
		b := &logpb.Batch{Commands: cmds}
		if rng.IntN(2) == 0 {
			b.Cluster = []byte(s())
		}
		data, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if checkDecode(t, data) {
			fastSeen++
		}
	}
	if fastSeen < 1000 {
		t.Fatalf("the hand decoder took %d of 2000 batches; most hold only its commands", fastSeen)
	}
}

// FuzzDecodeBatch: whatever the entry, decodeBatch agrees with
// proto.Unmarshal.
func FuzzDecodeBatch(f *testing.F) {
	ttl := int64(1000)
	f.Add(batchOf(&logpb.Command{Tick: 5, Wall: 9, Actor: "a", Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "r", Holder: "h", TtlMs: &ttl, WaitMs: 3}}}))
	f.Add(batchOf(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: "x", Holder: "h", Reason: 2}}},
		&logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{"x", "y"}, AllOfHolder: true, TtlMs: &ttl}}}))
	f.Add(batchOf(&logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: "x"}}}))
	f.Add([]byte{0x0a, 0x02, 0x5a, 0x00})
	f.Add(batchOf(&logpb.Command{Tick: 5, Rules: 5, Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: "x"}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}

// BenchmarkDecodeBatch compares the hand decoder with proto.Unmarshal on
// an entry of 46 acquires (one op: the whole entry).
func BenchmarkDecodeBatch(b *testing.B) {
	cmds := make([]*logpb.Command, 46)
	for i := range cmds {
		cmds[i] = &logpb.Command{Tick: 123456, Wall: 1_700_000_000_000, Actor: "bench", Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			Resource: "bench/" + strconv.Itoa(i), Holder: "w" + strconv.Itoa(i)}}}
	}
	data := batchOf(cmds...)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeBatch(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(data, &logpb.Batch{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// An entry stamped with newer rules than this build applies halts the
// FSM (and, through onDiverged, the node) rather than be applied by rules
// it does not know: a member put back on an older build drifted from the
// others unseen.
func TestEntryOfNewerRulesHalts(t *testing.T) {
	f := newFSM(statemachine.DefaultConfig(), NewFeed(0, nil))
	var told error
	f.onDiverged = func(err error) { told = err }
	entry := func(index uint64, rules uint32) []any {
		data := batchOf(&logpb.Command{Tick: int64(index), Wall: 1_700_000_000_000, Rules: rules,
			Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: make([]byte, 32)}}})
		return f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})
	}
	if out := entry(1, statemachine.Rules); told != nil {
		t.Fatalf("an entry of this build's rules: %v, %v", out, told)
	}
	out := entry(2, statemachine.Rules+1)
	if out[0] != errHalted || told == nil || !strings.Contains(told.Error(), "stamped with rules") {
		t.Fatalf("an entry of newer rules: %v, told %v", out, told)
	}
	if out := entry(3, statemachine.Rules); out[0] != errHalted {
		t.Fatalf("an entry after the halt: %v", out)
	}
}
