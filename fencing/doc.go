// Package fencing is what a downstream service uses to check Tenure leases on its
// own side, offline: without calling the registrar, and with only the standard
// library.
//
// # Three checks, for three questions
//
// Lease certificates answer "did the registrar grant this claim, and is it still
// within its time?". A certificate is the registrar's Ed25519 signature over a
// Claim (lease id, namespace, resource, holder, mode, fence, issued and expiry
// times, renewal count). Anyone holding the registrar's public key checks it with
// VerifyCertificate; KeyID names the key. Use certificates at a trust boundary: a
// worker presents its claim and certificate to a service that has never talked to
// Tenure. A certificate cannot be recalled: until its expiry it still verifies
// after the lease was released, revoked or transferred. It proves a grant, not
// that the grant is still the current one.
//
// Fences answer "is this writer the latest holder?". Every lease carries a fence,
// strictly increasing per resource and never reused, so storage that remembers the
// highest fence it has seen refuses writes from a deposed holder (one that paused,
// lost its lease and woke up still believing it holds it). FenceGuard does this per
// resource. Use a fence wherever a write must not be accepted from a superseded
// holder, even before the old lease's expiry; with a certificate, the fence in the
// verified claim is the one to admit.
//
// Epochs answer "is this the next step of the workflow, and has it been done
// already?". In a single-writer workflow (Tenure's guarded state, seed 001) the
// orchestrator stamps each action with its lease id and an epoch that increases by
// one per step. A Validator accepts actions of one lease, in epoch order, each
// exactly once: a replayed or older epoch is STALE_EPOCH, a gap is FUTURE_EPOCH,
// another lease is LEASE_VIOLATION. Handoff moves it to a successor lease with a
// higher fence (never back to a deposed one); epochs continue, as the guarded
// state outlives the leases that write it.
//
// # Errors
//
// Every error is an *Error whose Reason is one of the Reason… constants, the same
// codes the Tenure server returns (INVALID_ARGUMENT, LEASE_VIOLATION, STALE_EPOCH,
// FUTURE_EPOCH, LEASE_EXPIRED) plus FENCE_STALE and CERTIFICATE_INVALID for checks
// only made here. Its message starts with the reason; its Metadata gives the
// values involved. Test with errors.Is against the Err… sentinels.
//
// # Canonical encoding
//
// The signed bytes are a wire contract shared with the registrar, versioned by
// their prefix; changing them needs a new prefix, never an edit:
//
//	"tenure.lease.v1" 0x00
//	uvarint length + bytes of LeaseID, Namespace, Resource, Holder (in that order)
//	Mode (1 byte: 1 exclusive, 2 shared, as tenure.v1.Mode)
//	Fence (uint64 big-endian)
//	IssuedAt, ExpiresAt (Unix milliseconds, int64 big-endian, two's complement)
//	RenewalCount (uint32 big-endian)
//
// Times are signed at millisecond precision, the precision of registrar time, so
// a claim rebuilt from the API's RFC 3339 timestamps verifies; sub-millisecond
// parts of a Claim's times are ignored.
// Every field is signed: a renewal changes ExpiresAt and RenewalCount and comes
// with a new certificate; the previous one stays valid until its own expiry.
//
// # Clock skew
//
// Expiry in Tenure is decided by registrar time. The verifying service only has
// its own clock, which may run behind the registrar's; a lease that looks alive
// locally may already be over. VerifyCertificate therefore takes a skew margin and
// treats the lease as expired from ExpiresAt − skew on (exactly at that instant
// included). Choose skew at least as large as the clock error you tolerate between
// the registrar and the verifier (seed 002: "use a conservative local expiry"),
// plus the time the verified work may take to commit if it must finish within the
// lease. A skew of zero trusts both clocks to agree exactly; a negative skew is
// refused, since it would extend leases.
package fencing
