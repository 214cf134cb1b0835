package fencing

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// parseCanonical decodes AppendCanonical's output. It exists to show the encoding
// is injective: every encoding decodes back to exactly its claim.
func parseCanonical(b []byte) (Claim, bool) {
	var c Claim
	rest, ok := bytes.CutPrefix(b, []byte(canonicalDomain))
	if !ok {
		return c, false
	}
	var fields [4]string
	for i := range fields {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return c, false
		}
		fields[i] = string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
	}
	if len(rest) != 1+8+8+8+4 {
		return c, false
	}
	c.LeaseID, c.Namespace, c.Resource, c.Holder = fields[0], fields[1], fields[2], fields[3]
	c.Mode = Mode(rest[0])
	c.Fence = binary.BigEndian.Uint64(rest[1:])
	c.IssuedAt = time.UnixMilli(int64(binary.BigEndian.Uint64(rest[9:]))).UTC()
	c.ExpiresAt = time.UnixMilli(int64(binary.BigEndian.Uint64(rest[17:]))).UTC()
	c.RenewalCount = binary.BigEndian.Uint32(rest[25:])
	return c, true
}

func sameClaim(a, b Claim) bool {
	return a.LeaseID == b.LeaseID && a.Namespace == b.Namespace && a.Resource == b.Resource &&
		a.Holder == b.Holder && a.Mode == b.Mode && a.Fence == b.Fence &&
		a.IssuedAt.UnixMilli() == b.IssuedAt.UnixMilli() &&
		a.ExpiresAt.UnixMilli() == b.ExpiresAt.UnixMilli() && a.RenewalCount == b.RenewalCount
}

var knownReasons = map[string]bool{
	ReasonInvalidArgument: true, ReasonLeaseViolation: true, ReasonStaleEpoch: true,
	ReasonFutureEpoch: true, ReasonFenceStale: true, ReasonCertificateInvalid: true,
	ReasonLeaseExpired: true,
}

// checkError fails unless err is nil or a well-formed *Error.
func checkError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not an *Error", err)
	}
	if !knownReasons[fe.Reason] {
		t.Fatalf("unknown reason %q", fe.Reason)
	}
	if msg := fe.Error(); len(msg) <= len(fe.Reason)+2 || msg[:len(fe.Reason)+2] != fe.Reason+": " {
		t.Fatalf("message %q does not start with the reason", msg)
	}
}

func FuzzVerifyCertificate(f *testing.F) {
	b := setup(f)
	c := b.claim
	f.Add(c.LeaseID, c.Namespace, c.Resource, c.Holder, uint8(c.Mode), c.Fence,
		c.IssuedAt.UnixMilli(), c.ExpiresAt.UnixMilli(), c.RenewalCount, b.sig,
		c.IssuedAt.UnixMilli(), int64(0), false)
	f.Add("", "", "", "", uint8(0), uint64(0), int64(0), int64(0), uint32(0), []byte{},
		int64(0), int64(0), true)
	f.Add("a\x00b", "ns", "r", "h", uint8(2), uint64(math.MaxUint64), int64(math.MinInt64),
		int64(math.MaxInt64), uint32(math.MaxUint32), make([]byte, 64), int64(math.MaxInt64),
		int64(math.MaxInt64), false)

	f.Fuzz(func(t *testing.T, leaseID, ns, res, holder string, mode uint8, fence uint64,
		issuedMs, expiresMs int64, renewals uint32, sig []byte, nowMs, skewUs int64, otherKey bool) {
		c := Claim{
			LeaseID: leaseID, Namespace: ns, Resource: res, Holder: holder,
			Mode: Mode(mode), Fence: fence,
			IssuedAt: time.UnixMilli(issuedMs).UTC(), ExpiresAt: time.UnixMilli(expiresMs).UTC(),
			RenewalCount: renewals,
		}
		now := time.UnixMilli(nowMs)
		skew := time.Duration(skewUs) * time.Microsecond // wraps freely; may be negative

		// Arbitrary signature bytes: never panics, only well-formed errors.
		checkError(t, VerifyCertificate(b.pub, c, sig, now, skew))

		enc := c.AppendCanonical(nil)
		if len(enc) != c.canonicalSize() {
			t.Fatalf("len %d != canonicalSize %d", len(enc), c.canonicalSize())
		}
		if back, ok := parseCanonical(enc); !ok || !sameClaim(back, c) {
			t.Fatalf("encoding does not decode back to the claim: %x", enc)
		}

		// A genuine certificate verifies unless the lease has expired.
		good := Sign(b.priv, c)
		err := VerifyCertificate(b.pub, c, good, now, skew)
		switch {
		case skew < 0:
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("negative skew: %v", err)
			}
		case now.Before(c.ExpiresAt.Add(-skew)):
			if err != nil {
				t.Fatalf("genuine, unexpired certificate: %v", err)
			}
		default:
			if !errors.Is(err, ErrLeaseExpired) {
				t.Fatalf("genuine, expired certificate: %v", err)
			}
		}
		// Another key never verifies it.
		if otherKey && skew >= 0 {
			other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x09}, ed25519.SeedSize))
			if err := VerifyCertificate(other.Public().(ed25519.PublicKey), c, good, now, skew); !errors.Is(err, ErrCertificateInvalid) {
				t.Fatalf("certificate verified with the wrong key: %v", err)
			}
		}
		// The fuzzed signature verifies only if it is valid for the claim.
		if len(sig) == ed25519.SignatureSize && skew >= 0 && !bytes.Equal(sig, good) {
			err := VerifyCertificate(b.pub, c, sig, now, skew)
			if err == nil || errors.Is(err, ErrLeaseExpired) {
				if !ed25519.Verify(b.pub, enc, sig) {
					t.Fatalf("accepted a signature that ed25519 rejects: %v", err)
				}
			}
		}
	})
}

// FuzzValidator drives a Validator and a FenceGuard with a random sequence of
// operations and checks them against a simple model: epochs accepted in order,
// each exactly once; Check never changes anything; only the lease of the highest
// fence handed off is accepted; the guard admits fences in non-decreasing order.
func FuzzValidator(f *testing.F) {
	f.Add(uint64(0), []byte{1, 2, 1, 2, 1, 1, 3, 5, 1, 2})
	f.Add(uint64(math.MaxUint64-1), []byte{1, 2, 1, 2, 1, 2, 5, 0, 1, 2})
	f.Add(uint64(5), []byte{0, 0, 1, 4, 3, 1, 3, 0, 4, 9, 2, 7})

	f.Fuzz(func(t *testing.T, start uint64, ops []byte) {
		leases := [...]string{"", "lease-0", "lease-1", "lease-2"}
		v := NewValidator("lease-0", 1)
		v.SetEpoch(start)

		// The model.
		lease, fence := "lease-0", uint64(1)
		next, exhausted := start, false
		var g FenceGuard
		var highest uint64

		for i := 0; i+1 < len(ops); i += 2 {
			kind, arg := ops[i]%6, ops[i+1]
			who := leases[arg%4]
			// An epoch near next: next-2 … next+2, clamped to uint64.
			epoch := next
			switch d := int(arg%5) - 2; {
			case d < 0 && next >= uint64(-d):
				epoch = next - uint64(-d)
			case d > 0 && next <= math.MaxUint64-uint64(d):
				epoch = next + uint64(d)
			}
			want := ""
			switch {
			case who == "" || who != lease:
				want = ReasonLeaseViolation
			case exhausted || epoch < next:
				want = ReasonStaleEpoch
			case epoch > next:
				want = ReasonFutureEpoch
			}

			switch kind {
			case 0: // Check twice: same answer, nothing recorded.
				e1, e2 := v.Check(who, epoch), v.Check(who, epoch)
				checkError(t, e1)
				if reasonOf(e1) != want || reasonOf(e2) != want {
					t.Fatalf("op %d: Check(%q, %d) = %v then %v, want %q", i, who, epoch, e1, e2, want)
				}
			case 1, 2: // Accept (twice as likely).
				err := v.Accept(who, epoch)
				checkError(t, err)
				if reasonOf(err) != want {
					t.Fatalf("op %d: Accept(%q, %d) = %v, want %q", i, who, epoch, err, want)
				}
				if err == nil {
					if epoch == math.MaxUint64 {
						exhausted = true
					} else {
						next = epoch + 1
					}
					if again := v.Accept(who, epoch); !errors.Is(again, ErrStaleEpoch) {
						t.Fatalf("op %d: second Accept of epoch %d = %v", i, epoch, again)
					}
				}
			case 3: // Handoff to a fence around the current one.
				nf := fence + uint64(arg%3) - 1
				if fence == 0 && arg%3 == 0 {
					nf = 0
				}
				err := v.Handoff(who, nf)
				checkError(t, err)
				hw := ""
				switch {
				case who == "":
					hw = ReasonInvalidArgument
				case nf <= fence:
					hw = ReasonFenceStale
				}
				if reasonOf(err) != hw {
					t.Fatalf("op %d: Handoff(%q, %d) from fence %d = %v, want %q", i, who, nf, fence, err, hw)
				}
				if err == nil {
					lease, fence = who, nf
				}
			case 4: // SetEpoch near the current position.
				next, exhausted = epoch, false
				v.SetEpoch(next)
			case 5: // FenceGuard.Admit.
				ff := uint64(arg)
				err := g.Admit("r", ff)
				checkError(t, err)
				gw := ""
				switch {
				case ff == 0:
					gw = ReasonInvalidArgument
				case ff < highest:
					gw = ReasonFenceStale
				}
				if reasonOf(err) != gw {
					t.Fatalf("op %d: Admit(%d) with highest %d = %v, want %q", i, ff, highest, err, gw)
				}
				if err == nil {
					highest = ff
				}
				if h, _ := g.Highest("r"); h != highest {
					t.Fatalf("op %d: Highest = %d, want %d", i, h, highest)
				}
			}
		}
	})
}
