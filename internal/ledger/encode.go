package ledger

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tenurehq/tenure/internal/logpb"
)

// The hottest records (a lease issued, renewed, ended or charged; a pool
// piece leased or done; a task enqueued, claimed or completed) are encoded
// by hand: the same bytes as deterministic protobuf marshalling (fields in
// number order, zero values omitted), at a fraction of the cost. Tests
// compare the two on random records; anything else goes through proto.

// scratch holds reusable buffers for nested messages.
type scratch struct{ body, ref, event []byte }

func appendRecord(b []byte, s *scratch, rec *logpb.Record) ([]byte, bool) {
	var num protowire.Number
	switch x := rec.Body.(type) {
	case *logpb.Record_Issued:
		if x.Issued == nil || x.Issued.Derivation != nil || x.Issued.RenewalCount != 0 || x.Issued.LifetimeFromTick != 0 {
			// A lease in a lease tree, or one that carries its
			// predecessor's limits, is rare: proto encodes it.
			return b, false
		}
		num, s.body = 11, appendIssued(s.body[:0], x.Issued)
	case *logpb.Record_Renewed:
		if x.Renewed == nil {
			return b, false
		}
		num, s.body = 12, appendRenewed(s.body[:0], s, x.Renewed)
	case *logpb.Record_Ended:
		if x.Ended == nil {
			return b, false
		}
		num, s.body = 13, appendEnded(s.body[:0], s, x.Ended)
	case *logpb.Record_Consumed:
		if x.Consumed == nil {
			return b, false
		}
		num, s.body = 21, appendConsumed(s.body[:0], s, x.Consumed)
	case *logpb.Record_Pool:
		var ok bool
		if s.body, ok = appendPool(s.body[:0], s, x.Pool); !ok {
			return b, false
		}
		num = 50
	case *logpb.Record_TaskEnqueued:
		m := x.TaskEnqueued
		if m == nil {
			return b, false
		}
		body := appendTaskRef(s.body[:0], s, m.Task)
		body = appendBytes(body, 2, m.Payload)
		body = appendUint(body, 3, uint64(m.Priority)) // int32: sign-extended, as proto
		body = appendUint(body, 4, uint64(m.NotBefore))
		num, s.body = 40, appendUint(body, 5, uint64(m.MaxAttempts))
	case *logpb.Record_TaskClaimed:
		m := x.TaskClaimed
		if m == nil {
			return b, false
		}
		body := appendTaskRef(s.body[:0], s, m.Task)
		body = appendUint(body, 2, m.LeaseSeq)
		body = appendString(body, 3, m.LeaseId)
		body = appendString(body, 4, m.Worker)
		num, s.body = 41, appendUint(body, 5, uint64(m.Attempt))
	case *logpb.Record_TaskCompleted:
		m := x.TaskCompleted
		if m == nil {
			return b, false
		}
		body := appendTaskRef(s.body[:0], s, m.Task)
		body = appendBytes(body, 2, m.Result)
		num, s.body = 42, appendUint(body, 3, uint64(m.PruneTick))
	default:
		return b, false
	}
	if len(rec.ProtoReflect().GetUnknown()) != 0 {
		return b, false
	}
	b = appendUint(b, 1, rec.Index)
	b = appendUint(b, 2, uint64(rec.Tick))
	b = appendUint(b, 3, uint64(rec.Wall))
	b = appendString(b, 4, rec.Actor)
	b = appendBytes(b, 5, rec.PrevHash)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendBytes(b, s.body)
	return b, true
}

func appendUint(b []byte, n protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, n protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendBytes(b []byte, n protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendIssued(b []byte, m *logpb.LeaseIssued) []byte {
	b = appendUint(b, 1, m.Seq)
	b = appendString(b, 2, m.Namespace)
	b = appendString(b, 3, m.Resource)
	b = appendString(b, 4, m.Holder)
	b = appendUint(b, 5, uint64(m.Mode))
	b = appendUint(b, 6, uint64(m.TtlMs))
	b = appendUint(b, 7, uint64(m.ExpiresTick))
	b = appendUint(b, 8, uint64(m.ExpiresWall))
	b = appendUint(b, 9, uint64(m.MaxRenewals))
	b = appendUint(b, 10, uint64(m.MaxLifetimeMs))
	b = appendUint(b, 11, m.WaiterId)
	b = appendUint(b, 12, m.TransferredFrom)
	return appendString(b, 13, m.LeaseId)
}

func appendRef(b []byte, s *scratch, n protowire.Number, m *logpb.LeaseRef) []byte {
	if m == nil {
		return b
	}
	ref := appendUint(s.ref[:0], 1, m.Seq)
	ref = appendString(ref, 2, m.LeaseId)
	ref = appendString(ref, 3, m.Namespace)
	ref = appendString(ref, 4, m.Resource)
	ref = appendString(ref, 5, m.Holder)
	s.ref = ref
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, ref)
}

// appendTaskRef encodes a task record's field 1.
func appendTaskRef(b []byte, s *scratch, m *logpb.TaskRef) []byte {
	if m == nil {
		return b
	}
	ref := appendString(s.ref[:0], 1, m.Namespace)
	ref = appendString(ref, 2, m.Queue)
	ref = appendString(ref, 3, m.TaskId)
	ref = appendUint(ref, 4, m.Seq)
	s.ref = ref
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, ref)
}

func appendRenewed(b []byte, s *scratch, m *logpb.LeaseRenewed) []byte {
	b = appendRef(b, s, 1, m.Lease)
	b = appendUint(b, 2, uint64(m.ExpiresTick))
	b = appendUint(b, 3, uint64(m.ExpiresWall))
	return appendUint(b, 4, uint64(m.TtlMs))
}

func appendEnded(b []byte, s *scratch, m *logpb.LeaseEnded) []byte {
	b = appendRef(b, s, 1, m.Lease)
	b = appendUint(b, 2, uint64(m.State))
	b = appendUint(b, 3, uint64(m.Reason))
	b = appendString(b, 4, m.RevokeReason)
	b = appendUint(b, 5, m.TransferredTo)
	return appendUint(b, 6, m.EndedBy)
}

func appendConsumed(b []byte, s *scratch, m *logpb.LeaseConsumed) []byte {
	b = appendRef(b, s, 1, m.Lease)
	b = appendString(b, 2, m.Counter)
	return appendUint(b, 3, uint64(m.Amount))
}

// appendPool encodes a pool record whose event is a piece leased or done;
// it declines the others (rare: creation, wanted sets, have-maps).
func appendPool(b []byte, s *scratch, m *logpb.PoolRecord) ([]byte, bool) {
	if m == nil || len(m.ProtoReflect().GetUnknown()) != 0 {
		return b, false
	}
	var num protowire.Number
	switch x := m.Event.(type) {
	case *logpb.PoolRecord_Leased:
		e := x.Leased
		if e == nil || len(e.ProtoReflect().GetUnknown()) != 0 {
			return b, false
		}
		ev := appendString(s.event[:0], 1, e.Peer)
		ev = appendUint(ev, 2, uint64(e.FileIndex))
		ev = appendUint(ev, 3, uint64(e.PieceIndex))
		ev = appendUint(ev, 4, e.LeaseSeq)
		num, s.event = 13, appendString(ev, 5, e.LeaseId)
	case *logpb.PoolRecord_Done:
		e := x.Done
		if e == nil || len(e.ProtoReflect().GetUnknown()) != 0 {
			return b, false
		}
		ev := appendString(s.event[:0], 1, e.Peer)
		ev = appendUint(ev, 2, uint64(e.FileIndex))
		ev = appendUint(ev, 3, uint64(e.PieceIndex))
		ev = appendUint(ev, 4, e.LeaseSeq)
		ev = appendUint(ev, 5, uint64(e.Result))
		ev = appendUint(ev, 6, uint64(e.FailureReason))
		ev = appendUint(ev, 7, uint64(e.LeaseState))
		if e.Ranked {
			ev = appendUint(ev, 8, 1)
		}
		if bits := math.Float64bits(e.Score); bits != 0 {
			ev = protowire.AppendTag(ev, 9, protowire.Fixed64Type)
			ev = protowire.AppendFixed64(ev, bits)
		}
		ev = appendUint(ev, 10, e.Successes)
		num, s.event = 14, appendUint(ev, 11, e.Failures)
	default:
		return b, false
	}
	b = appendString(b, 1, m.Namespace)
	b = appendString(b, 2, m.Pool)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, s.event), true
}
