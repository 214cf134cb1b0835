package registrar

import "github.com/tenurehq/tenure/internal/logpb"

// The records every acquire, release, expiry and renewal emits are
// allocated in one piece each: the record, its body's oneof wrapper, the
// body and the lease reference share one struct, which saves three
// allocations per record on the apply path. The messages are the same
// (fields, encoding, hashes); only their memory is shared, and they live
// as long as the record does anyway.

type issuedRecord struct {
	rec  logpb.Record
	body logpb.Record_Issued
	msg  logpb.LeaseIssued
}

type endedRecord struct {
	rec  logpb.Record
	body logpb.Record_Ended
	ref  logpb.LeaseRef
}

type renewedRecord struct {
	rec  logpb.Record
	body logpb.Record_Renewed
	msg  logpb.LeaseRenewed
	ref  logpb.LeaseRef
}

// setRef fills x with the reference to l (see ref).
func (r *Registrar) setRef(x *logpb.LeaseRef, l *lease) {
	x.Seq = l.seq
	x.LeaseId = FormatLeaseID(l.issuedWall, r.tag, l.seq)
	x.Namespace = l.res.ns.name
	x.Resource = l.res.name
	x.Holder = l.holder.name
}

// endedRec returns a record ending l with e.
func (r *Registrar) endedRec(l *lease, e *logpb.LeaseEnded) *logpb.Record {
	x := &endedRecord{}
	r.setRef(&x.ref, l)
	e.Lease = &x.ref
	x.body.Ended = e
	x.rec.Body = &x.body
	return &x.rec
}
