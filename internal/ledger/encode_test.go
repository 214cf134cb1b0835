package ledger

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

func randString(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return ""
	}
	const chars = "abcxyz/-:é漢0123456789"
	rs := []rune(chars)
	n := r.IntN(200)
	out := make([]rune, n)
	for i := range out {
		out[i] = rs[r.IntN(len(rs))]
	}
	return string(out)
}

func randInt(r *rand.Rand) int64 {
	switch r.IntN(5) {
	case 0:
		return 0
	case 1:
		return -r.Int64()
	case 2:
		return int64(r.IntN(300))
	}
	return r.Int64()
}

func randRef(r *rand.Rand) *logpb.LeaseRef {
	if r.IntN(6) == 0 {
		return nil
	}
	return &logpb.LeaseRef{Seq: uint64(randInt(r)), LeaseId: randString(r), Namespace: randString(r), Resource: randString(r), Holder: randString(r)}
}

func randTaskRef(r *rand.Rand) *logpb.TaskRef {
	if r.IntN(6) == 0 {
		return nil
	}
	return &logpb.TaskRef{Namespace: randString(r), Queue: randString(r), TaskId: randString(r), Seq: uint64(randInt(r))}
}

func randBytes(r *rand.Rand) []byte {
	if r.IntN(4) == 0 {
		return nil
	}
	b := make([]byte, r.IntN(300))
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

func randRecord(r *rand.Rand) *logpb.Record {
	rec := &logpb.Record{Index: uint64(randInt(r)), Tick: randInt(r), Wall: randInt(r), Actor: randString(r)}
	if r.IntN(5) != 0 {
		rec.PrevHash = make([]byte, 32)
		for i := range rec.PrevHash {
			rec.PrevHash[i] = byte(r.IntN(256))
		}
	}
	switch r.IntN(9) {
	case 6:
		rec.Body = &logpb.Record_TaskEnqueued{TaskEnqueued: &logpb.TaskEnqueued{Task: randTaskRef(r), Payload: randBytes(r),
			Priority: int32(randInt(r)), NotBefore: randInt(r), MaxAttempts: uint32(randInt(r))}}
	case 7:
		rec.Body = &logpb.Record_TaskClaimed{TaskClaimed: &logpb.TaskClaimed{Task: randTaskRef(r), LeaseSeq: uint64(randInt(r)),
			LeaseId: randString(r), Worker: randString(r), Attempt: uint32(randInt(r))}}
	case 8:
		rec.Body = &logpb.Record_TaskCompleted{TaskCompleted: &logpb.TaskCompleted{Task: randTaskRef(r), Result: randBytes(r),
			PruneTick: randInt(r)}}
	case 4:
		rec.Body = &logpb.Record_Pool{Pool: &logpb.PoolRecord{Namespace: randString(r), Pool: randString(r),
			Event: &logpb.PoolRecord_Leased{Leased: &logpb.PieceLeased{Peer: randString(r), FileIndex: uint32(randInt(r)),
				PieceIndex: uint32(randInt(r)), LeaseSeq: uint64(randInt(r)), LeaseId: randString(r)}}}}
	case 5:
		score := float64(randInt(r)) / 1e18
		if r.IntN(8) == 0 {
			score = math.Copysign(0, -1)
		}
		rec.Body = &logpb.Record_Pool{Pool: &logpb.PoolRecord{Namespace: randString(r), Pool: randString(r),
			Event: &logpb.PoolRecord_Done{Done: &logpb.PieceDone{Peer: randString(r), FileIndex: uint32(randInt(r)),
				PieceIndex: uint32(randInt(r)), LeaseSeq: uint64(randInt(r)), Result: tenurev1.CompletionResult(r.IntN(3)),
				FailureReason: tenurev1.FailureReason(r.IntN(5)), LeaseState: tenurev1.State(r.IntN(6)), Ranked: r.IntN(2) == 0,
				Score: score, Successes: uint64(randInt(r)), Failures: uint64(randInt(r))}}}}
	case 0:
		rec.Body = &logpb.Record_Issued{Issued: &logpb.LeaseIssued{
			Seq: uint64(randInt(r)), Namespace: randString(r), Resource: randString(r), Holder: randString(r),
			Mode: tenurev1.Mode(r.IntN(4)), TtlMs: randInt(r), ExpiresTick: randInt(r), ExpiresWall: randInt(r),
			MaxRenewals: uint32(randInt(r)), MaxLifetimeMs: randInt(r), WaiterId: uint64(randInt(r)),
			TransferredFrom: uint64(randInt(r)), LeaseId: randString(r),
		}}
	case 3:
		rec.Body = &logpb.Record_Consumed{Consumed: &logpb.LeaseConsumed{Lease: randRef(r), Counter: randString(r), Amount: randInt(r)}}
	case 1:
		rec.Body = &logpb.Record_Renewed{Renewed: &logpb.LeaseRenewed{Lease: randRef(r), ExpiresTick: randInt(r), ExpiresWall: randInt(r), TtlMs: randInt(r)}}
	default:
		rec.Body = &logpb.Record_Ended{Ended: &logpb.LeaseEnded{Lease: randRef(r), State: tenurev1.State(r.IntN(6)),
			Reason: tenurev1.ReleaseReason(r.IntN(6)), RevokeReason: randString(r), TransferredTo: uint64(randInt(r)),
			EndedBy: uint64(randInt(r))}}
	}
	return rec
}

// TestHandEncodingMatchesProto pins the hand-written encoder of the hot
// records to deterministic protobuf marshalling, byte for byte.
func TestHandEncodingMatchesProto(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20_000 {
		rec := randRecord(r)
		want, err := marshal.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendRecord(nil, &scratch{}, rec)
		if !ok {
			t.Fatalf("case %d: hot record not hand-encoded", i)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: hand encoding differs\n got %x\nwant %x\nrecord %v", i, got, want, rec)
		}
		back := &logpb.Record{}
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, rec) {
			t.Fatalf("case %d: round trip: %v", i, err)
		}
	}
}

func TestHandEncodingDeclinesOtherRecords(t *testing.T) {
	t.Parallel()
	for _, rec := range []*logpb.Record{
		{Body: &logpb.Record_Grace{Grace: &logpb.LeaseGrace{}}},
		{Body: &logpb.Record_Checkpoint{Checkpoint: &logpb.Checkpoint{}}},
		// Pool records other than a piece leased or done go through proto.
		{Body: &logpb.Record_Pool{Pool: &logpb.PoolRecord{Event: &logpb.PoolRecord_Have{Have: &logpb.PeerHave{Peer: "a"}}}}},
		{Body: &logpb.Record_Pool{Pool: &logpb.PoolRecord{Pool: "p"}}},
		// Task records other than enqueued, claimed and completed go through proto.
		{Body: &logpb.Record_TaskFailed{TaskFailed: &logpb.TaskFailed{Error: "x"}}},
		{Body: &logpb.Record_TaskRequeued{TaskRequeued: &logpb.TaskRequeued{}}},
		// Derived leases go through proto (and so are byte-identical by definition).
		{Body: &logpb.Record_Issued{Issued: &logpb.LeaseIssued{Seq: 2, Derivation: &logpb.Derivation{ParentSeq: 1}}}},
		{},
	} {
		if _, ok := appendRecord(nil, &scratch{}, rec); ok {
			t.Fatalf("%v: hand-encoded a record it does not know", rec)
		}
	}
}

func BenchmarkSealEnded(b *testing.B) {
	c := NewChain()
	b.ReportAllocs()
	for b.Loop() {
		rec := &logpb.Record{Tick: 12345, Wall: 1764000000000, Actor: "registrar", Body: &logpb.Record_Ended{Ended: &logpb.LeaseEnded{
			Lease: &logpb.LeaseRef{Seq: 123456, LeaseId: "01KAXR8ZQD0000000000003S5T", Namespace: "default", Resource: "orders/12345", Holder: "w1"},
			State: tenurev1.State_STATE_EXPIRED}}}
		if _, _, err := c.Seal(rec); err != nil {
			b.Fatal(err)
		}
	}
}
