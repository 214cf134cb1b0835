package ledger

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tenurehq/tenure/internal/logpb"
)

// The hottest records (a lease issued, renewed, ended or charged) are encoded by
// hand: the same bytes as deterministic protobuf marshalling (fields in
// number order, zero values omitted), at a fraction of the cost. Tests
// compare the two on random records; anything else goes through proto.

// scratch holds reusable buffers for nested messages.
type scratch struct{ body, ref []byte }

func appendRecord(b []byte, s *scratch, rec *logpb.Record) ([]byte, bool) {
	var num protowire.Number
	switch x := rec.Body.(type) {
	case *logpb.Record_Issued:
		if x.Issued == nil || x.Issued.Derivation != nil {
			// A lease in a lease tree is rare: proto encodes it.
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
