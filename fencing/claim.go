package fencing

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Mode is how a lease holds its resource. The numbers are those of tenure.v1.Mode.
type Mode uint8

const (
	// ModeExclusive: one holder at a time (writes).
	ModeExclusive Mode = 1
	// ModeShared: any number of shared holders, never alongside an exclusive one.
	ModeShared Mode = 2
)

// String returns the tenure.v1 enum name ("MODE_EXCLUSIVE", "MODE_SHARED"), or
// "MODE(n)" for a number outside the enum.
func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "MODE_EXCLUSIVE"
	case ModeShared:
		return "MODE_SHARED"
	}
	return "MODE(" + strconv.Itoa(int(m)) + ")"
}

// Claim is what a lease certificate attests: the lease, its resource, holder, mode
// and fence, and its validity window as of its last grant or renewal.
//
// IssuedAt and ExpiresAt are UTC wall times at millisecond precision (the
// registrar's issued_at / expires_at). Only whole milliseconds are signed: the
// encoding uses UnixMilli, so sub-millisecond parts are ignored everywhere,
// including by the expiry check of VerifyCertificate.
type Claim struct {
	LeaseID, Namespace, Resource, Holder string
	Mode                                 Mode
	Fence                                uint64
	IssuedAt, ExpiresAt                  time.Time
	RenewalCount                         uint32
	// A derived lease's parent, and what a lease may do (its scope) and
	// spend (its budget's limits): signed too when any is set, so that a
	// certificate cannot be made to claim a wider scope or budget.
	ParentLeaseID string
	Scope         Scope
	Budget        map[string]int64
}

// Scope is what a lease authorizes (tenure.v1.Scope): each list empty
// means unrestricted of that kind.
type Scope struct {
	Namespaces, ResourcePrefixes, Actions []string
}

// extended reports whether the claim has a parent, a scope or a budget,
// which the v2 encoding adds to v1's fields.
func (c Claim) extended() bool {
	return c.ParentLeaseID != "" || len(c.Scope.Namespaces) > 0 || len(c.Scope.ResourcePrefixes) > 0 ||
		len(c.Scope.Actions) > 0 || len(c.Budget) > 0
}

// canonicalDomain starts every canonical encoding. It separates lease
// certificates from anything else the registrar key signs (ledger checkpoints)
// and names the version of the encoding: v1 for a plain lease, v2 for one
// with a parent, a scope or a budget.
const (
	canonicalDomain   = "tenure.lease.v1\x00"
	canonicalDomainV2 = "tenure.lease.v2\x00"
)

// AppendCanonical appends the canonical encoding of c to dst and returns the
// extended slice. This is the wire contract signed by the registrar:
//
//	"tenure.lease.v1" 0x00
//	uvarint(len(LeaseID))   LeaseID
//	uvarint(len(Namespace)) Namespace
//	uvarint(len(Resource))  Resource
//	uvarint(len(Holder))    Holder
//	Mode                    1 byte
//	Fence                   8 bytes big-endian
//	IssuedAt.UnixMilli()    8 bytes big-endian (int64, two's complement)
//	ExpiresAt.UnixMilli()   8 bytes big-endian (int64, two's complement)
//	RenewalCount            4 bytes big-endian
//
// A claim with a parent, a scope or a budget is encoded as v2: the domain
// "tenure.lease.v2" 0x00, the fields above, then
//
//	uvarint(len(ParentLeaseID)) ParentLeaseID
//	for Scope.Namespaces, Scope.ResourcePrefixes, Scope.Actions in turn:
//	    uvarint(count), then each: uvarint(len(s)) s
//	uvarint(len(Budget)), then by name ascending: uvarint(len(name)) name,
//	    limit 8 bytes big-endian (int64, two's complement)
//
// Every variable-length field is length-prefixed, so two different claims never
// encode to the same bytes. Strings are encoded as their bytes, unvalidated.
func (c Claim) AppendCanonical(dst []byte) []byte {
	ext := c.extended()
	if ext {
		dst = append(dst, canonicalDomainV2...)
	} else {
		dst = append(dst, canonicalDomain...)
	}
	for _, s := range [...]string{c.LeaseID, c.Namespace, c.Resource, c.Holder} {
		dst = appendString(dst, s)
	}
	dst = append(dst, byte(c.Mode))
	dst = binary.BigEndian.AppendUint64(dst, c.Fence)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.IssuedAt.UnixMilli()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.ExpiresAt.UnixMilli()))
	dst = binary.BigEndian.AppendUint32(dst, c.RenewalCount)
	if !ext {
		return dst
	}
	dst = appendString(dst, c.ParentLeaseID)
	for _, list := range [...][]string{c.Scope.Namespaces, c.Scope.ResourcePrefixes, c.Scope.Actions} {
		dst = binary.AppendUvarint(dst, uint64(len(list)))
		for _, s := range list {
			dst = appendString(dst, s)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(c.Budget)))
	for _, name := range slices.Sorted(maps.Keys(c.Budget)) {
		dst = appendString(dst, name)
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.Budget[name]))
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func stringSize(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

// canonicalSize is the exact length of c's canonical encoding.
func (c Claim) canonicalSize() int {
	n := len(canonicalDomain) + 1 + 8 + 8 + 8 + 4
	for _, s := range [...]string{c.LeaseID, c.Namespace, c.Resource, c.Holder} {
		n += stringSize(s)
	}
	if !c.extended() {
		return n
	}
	n += stringSize(c.ParentLeaseID)
	for _, list := range [...][]string{c.Scope.Namespaces, c.Scope.ResourcePrefixes, c.Scope.Actions} {
		n += uvarintLen(uint64(len(list)))
		for _, s := range list {
			n += stringSize(s)
		}
	}
	n += uvarintLen(uint64(len(c.Budget)))
	for name := range c.Budget {
		n += stringSize(name) + 8
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// Sign returns the Ed25519 signature of c's canonical encoding: the lease
// certificate. Ed25519 is deterministic, so every replica signing the same claim
// with the same key produces the same 64 bytes. Like ed25519.Sign it panics if
// priv is not ed25519.PrivateKeySize bytes long.
func Sign(priv ed25519.PrivateKey, c Claim) []byte {
	return ed25519.Sign(priv, c.AppendCanonical(make([]byte, 0, c.canonicalSize())))
}

// KeyID identifies a registrar public key: the first 8 bytes of SHA-256(pub) in
// lowercase hex (16 characters). Use it to pick the key among several (rotation)
// and in logs; it is not a secret and proves nothing by itself.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// VerifyCertificate checks a lease certificate offline: that sig is the
// registrar's signature (key pub) over c, and that the lease has not expired at
// now, allowing skew for the difference between the local and the registrar
// clocks.
//
// The checks, in order, each returning an *Error:
//   - pub must be ed25519.PublicKeySize bytes and skew must not be negative,
//     else INVALID_ARGUMENT (metadata "field": "public_key" or "skew");
//   - sig must be ed25519.SignatureSize (64) bytes, else INVALID_ARGUMENT
//     ("field": "signature");
//   - the signature must verify over c.AppendCanonical, else CERTIFICATE_INVALID
//     (metadata "lease_id", "key_id");
//   - the lease must not be expired: it is expired when
//     !now.Before(ExpiresAt - skew), and then the error is LEASE_EXPIRED
//     (metadata "lease_id", "expires_at", "skew"). ExpiresAt is taken at the
//     millisecond precision that was signed. Being exactly at the margin counts
//     as expired, as the registrar never honours a lease at its expiry.
//
// skew shortens the lease: a positive skew makes the check conservative when the
// local clock may run behind the registrar's. VerifyCertificate does not reject a
// claim whose IssuedAt is in the local future: a local clock behind the
// registrar's sees that legitimately.
//
// A valid certificate proves the registrar granted (or renewed) this claim; it
// cannot show a later release, revocation or transfer. Pair it with a fence
// check (FenceGuard) where a deposed holder must be refused before the expiry.
func VerifyCertificate(pub ed25519.PublicKey, c Claim, sig []byte, now time.Time, skew time.Duration) error {
	if len(pub) != ed25519.PublicKeySize {
		return invalidArgument("public_key", "must be "+strconv.Itoa(ed25519.PublicKeySize)+" bytes, got "+strconv.Itoa(len(pub)))
	}
	if skew < 0 {
		return invalidArgument("skew", "must not be negative, got "+skew.String())
	}
	if len(sig) != ed25519.SignatureSize {
		return invalidArgument("signature", "must be "+strconv.Itoa(ed25519.SignatureSize)+" bytes, got "+strconv.Itoa(len(sig)))
	}
	if !ed25519.Verify(pub, c.AppendCanonical(make([]byte, 0, c.canonicalSize())), sig) {
		kid := KeyID(pub)
		return newError(ReasonCertificateInvalid,
			"signature of lease "+strconv.Quote(c.LeaseID)+" does not verify with key "+kid,
			"lease_id", c.LeaseID, "key_id", kid)
	}
	expires := time.UnixMilli(c.ExpiresAt.UnixMilli()).UTC()
	if !now.Before(expires.Add(-skew)) {
		exp := expires.Format(time.RFC3339Nano)
		return newError(ReasonLeaseExpired,
			"lease "+strconv.Quote(c.LeaseID)+" expired at "+exp+" (skew "+skew.String()+")",
			"lease_id", c.LeaseID, "expires_at", exp, "skew", skew.String())
	}
	return nil
}
