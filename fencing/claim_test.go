package fencing

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// testSeed makes the test key pair deterministic, so signatures can be pinned.
var testSeed = bytes.Repeat([]byte{0x07}, ed25519.SeedSize)

type certBundle struct {
	pub   ed25519.PublicKey
	priv  ed25519.PrivateKey
	claim Claim
	sig   []byte
}

// setup returns a deterministic key pair, a fixed claim and its certificate.
func setup(t testing.TB) certBundle {
	t.Helper()
	priv := ed25519.NewKeyFromSeed(testSeed)
	c := fixedClaim()
	return certBundle{
		pub:   priv.Public().(ed25519.PublicKey),
		priv:  priv,
		claim: c,
		sig:   Sign(priv, c),
	}
}

func fixedClaim() Claim {
	issued := time.Date(2025, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	return Claim{
		LeaseID:      "01JGZ5Q3W8K9M2N4P6R8T0V2X4",
		Namespace:    "default",
		Resource:     "orders/42",
		Holder:       "w1",
		Mode:         ModeExclusive,
		Fence:        17,
		IssuedAt:     issued,
		ExpiresAt:    issued.Add(60 * time.Second),
		RenewalCount: 3,
	}
}

// The canonical bytes are a wire contract with the registrar: these constants
// must never change. A new encoding needs a new domain prefix, not an edit.
// The values were cross-checked with an independent implementation (Python's
// datetime and the cryptography package's Ed25519 over the same seed).
const (
	goldenCanonicalHex = "" +
		"74656e7572652e6c656173652e763100" + // "tenure.lease.v1" 0x00
		"1a" + "30314a475a35513357384b394d324e3450365238543056325834" + // lease id
		"07" + "64656661756c74" + // namespace
		"09" + "6f72646572732f3432" + // resource
		"02" + "7731" + // holder
		"01" + // mode
		"0000000000000011" + // fence 17
		"0000019424f8632e" + // issued_at ms 1735787045678
		"0000019424f94d8e" + // expires_at ms 1735787105678
		"00000003" // renewal count
	goldenSignatureHex = "" +
		"b68dd711f32b56497b159d8e54bdf34535d5834aa33a112e2d6da2afb2309d91" +
		"8923fb623242cd6a7cabad69f9c5469d65b439f8e7db01a9da9e642400ff9c04"
	goldenKeyID = "fe812c12f3ab4ce6"
)

func TestCanonicalGolden(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := hex.EncodeToString(b.claim.AppendCanonical(nil))
	if got != goldenCanonicalHex {
		t.Fatalf("canonical encoding changed:\n got %s\nwant %s", got, goldenCanonicalHex)
	}
	if got := hex.EncodeToString(b.sig); got != goldenSignatureHex {
		t.Errorf("signature changed:\n got %s\nwant %s", got, goldenSignatureHex)
	}
	if got := KeyID(b.pub); got != goldenKeyID {
		t.Errorf("KeyID = %s, want %s", got, goldenKeyID)
	}
}

func TestAppendCanonical(t *testing.T) {
	t.Parallel()
	base := fixedClaim()
	t.Run("appends to dst", func(t *testing.T) {
		t.Parallel()
		prefix := []byte("prefix")
		got := base.AppendCanonical(append([]byte(nil), prefix...))
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], base.AppendCanonical(nil)) {
			t.Fatalf("AppendCanonical did not append to dst: %x", got)
		}
	})
	t.Run("size hint is exact", func(t *testing.T) {
		t.Parallel()
		c := base
		c.Resource = strings.Repeat("r", 300)
		if got, want := len(c.AppendCanonical(nil)), c.canonicalSize(); got != want {
			t.Fatalf("len = %d, canonicalSize = %d", got, want)
		}
	})
	t.Run("parent, scope and budget: v2, each part signed", func(t *testing.T) {
		t.Parallel()
		ext := base
		ext.ParentLeaseID = "parent"
		ext.Scope = Scope{Namespaces: []string{"a"}, ResourcePrefixes: []string{"r/"}, Actions: []string{"read", "write"}}
		ext.Budget = map[string]int64{"tokens": 5, "calls": -1}
		enc := ext.AppendCanonical(nil)
		if !bytes.HasPrefix(enc, []byte(canonicalDomainV2)) || len(enc) != ext.canonicalSize() {
			t.Fatalf("encoding %x (size %d, hint %d)", enc, len(enc), ext.canonicalSize())
		}
		if !bytes.Equal(enc, ext.AppendCanonical(nil)) {
			t.Fatal("budget order changes the encoding")
		}
		seen := map[string]bool{string(enc): true}
		for _, alter := range []func(c *Claim){
			func(c *Claim) { c.ParentLeaseID = "" },
			func(c *Claim) { c.Scope.Namespaces = nil },
			func(c *Claim) { c.Scope.Actions = []string{"read"} },
			func(c *Claim) { c.Scope.Actions = []string{"readwrite"} },
			func(c *Claim) { c.Scope.ResourcePrefixes, c.Scope.Actions = []string{"r/", "read"}, []string{"write"} },
			func(c *Claim) { c.Budget = map[string]int64{"tokens": 6, "calls": -1} },
			func(c *Claim) { c.Budget = map[string]int64{"tokens": 5} },
			func(c *Claim) { c.ParentLeaseID, c.Scope, c.Budget = "", Scope{}, nil },
		} {
			c := ext
			c.Scope = Scope{Namespaces: ext.Scope.Namespaces, ResourcePrefixes: ext.Scope.ResourcePrefixes, Actions: ext.Scope.Actions}
			alter(&c)
			e := string(c.AppendCanonical(nil))
			if seen[e] {
				t.Fatalf("two claims encode alike: %+v", c)
			}
			seen[e] = true
		}
		// A plain claim keeps the v1 encoding (the golden bytes above).
		if plain := base.AppendCanonical(nil); !bytes.HasPrefix(plain, []byte(canonicalDomain)) {
			t.Fatalf("plain claim encoded as %x", plain)
		}
	})
	t.Run("multi-byte uvarint length", func(t *testing.T) {
		t.Parallel()
		c := Claim{Resource: strings.Repeat("r", 200)}
		enc := c.AppendCanonical(nil)
		// domain, then empty lease id and namespace, then 200 = 0xc8 0x01.
		off := len(canonicalDomain) + 2
		if got := enc[off : off+2]; !bytes.Equal(got, []byte{0xc8, 0x01}) {
			t.Fatalf("length prefix = %x, want c801", got)
		}
	})
	t.Run("times before 1970 are two's complement", func(t *testing.T) {
		t.Parallel()
		c := Claim{IssuedAt: time.UnixMilli(-1), ExpiresAt: time.UnixMilli(-2)}
		enc := c.AppendCanonical(nil)
		times := enc[len(enc)-4-16 : len(enc)-4]
		want := "ffffffffffffffff" + "fffffffffffffffe"
		if got := hex.EncodeToString(times); got != want {
			t.Fatalf("times = %s, want %s", got, want)
		}
	})
	t.Run("moving bytes between fields changes the encoding", func(t *testing.T) {
		t.Parallel()
		a := Claim{LeaseID: "ab", Namespace: "c"}
		b := Claim{LeaseID: "a", Namespace: "bc"}
		if bytes.Equal(a.AppendCanonical(nil), b.AppendCanonical(nil)) {
			t.Fatal("length prefixes do not separate fields")
		}
	})
}

func TestVerifyCertificateRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.claim.IssuedAt
	if err := VerifyCertificate(b.pub, b.claim, b.sig, now, 0); err != nil {
		t.Fatalf("VerifyCertificate = %v, want nil", err)
	}
	for _, m := range []Mode{ModeExclusive, ModeShared} {
		c := b.claim
		c.Mode = m
		if err := VerifyCertificate(b.pub, c, Sign(b.priv, c), now, time.Second); err != nil {
			t.Errorf("%v: VerifyCertificate = %v, want nil", m, err)
		}
	}
}

// Every signed field is covered: changing any one of them breaks the certificate.
func TestVerifyCertificateEveryFieldSigned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.claim.IssuedAt
	tests := []struct {
		name   string
		mutate func(*Claim)
	}{
		{"lease id", func(c *Claim) { c.LeaseID += "x" }},
		{"lease id emptied", func(c *Claim) { c.LeaseID = "" }},
		{"namespace", func(c *Claim) { c.Namespace = "other" }},
		{"resource", func(c *Claim) { c.Resource = "orders/43" }},
		{"holder", func(c *Claim) { c.Holder = "w2" }},
		{"mode", func(c *Claim) { c.Mode = ModeShared }},
		{"fence up", func(c *Claim) { c.Fence++ }},
		{"fence down", func(c *Claim) { c.Fence-- }},
		{"issued at by 1ms", func(c *Claim) { c.IssuedAt = c.IssuedAt.Add(time.Millisecond) }},
		{"expires at by 1ms", func(c *Claim) { c.ExpiresAt = c.ExpiresAt.Add(time.Millisecond) }},
		{"expires at extended", func(c *Claim) { c.ExpiresAt = c.ExpiresAt.Add(time.Hour) }},
		{"renewal count", func(c *Claim) { c.RenewalCount++ }},
		{"bytes moved between fields", func(c *Claim) {
			c.Namespace, c.Resource = c.Namespace+"/"+c.Resource[:6], c.Resource[7:]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := b.claim
			tt.mutate(&c)
			err := VerifyCertificate(b.pub, c, b.sig, now, 0)
			if !errors.Is(err, ErrCertificateInvalid) {
				t.Fatalf("VerifyCertificate = %v, want %s", err, ReasonCertificateInvalid)
			}
		})
	}
}

// Only whole milliseconds are signed; location is not part of the claim.
func TestVerifyCertificateIgnoresSubMillisecondAndZone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.claim
	c.IssuedAt = c.IssuedAt.Add(999 * time.Microsecond).In(time.FixedZone("X", 3600))
	c.ExpiresAt = c.ExpiresAt.Add(999_999 * time.Nanosecond)
	if err := VerifyCertificate(b.pub, c, b.sig, b.claim.IssuedAt, 0); err != nil {
		t.Fatalf("VerifyCertificate = %v, want nil", err)
	}
	// The expiry check uses the signed millisecond, not the unsigned remainder.
	err := VerifyCertificate(b.pub, c, b.sig, b.claim.ExpiresAt, 0)
	if !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("at the signed expiry: %v, want %s", err, ReasonLeaseExpired)
	}
}

func TestVerifyCertificateBadSignature(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.claim.IssuedAt
	flip := func(i int) []byte {
		s := bytes.Clone(b.sig)
		s[i] ^= 0x01
		return s
	}
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x08}, ed25519.SeedSize))
	otherPub := other.Public().(ed25519.PublicKey)
	tests := []struct {
		name   string
		pub    ed25519.PublicKey
		sig    []byte
		reason string
		field  string
	}{
		{"nil signature", b.pub, nil, ReasonInvalidArgument, "signature"},
		{"truncated by one byte", b.pub, b.sig[:63], ReasonInvalidArgument, "signature"},
		{"one byte too long", b.pub, append(bytes.Clone(b.sig), 0), ReasonInvalidArgument, "signature"},
		{"first bit of R flipped", b.pub, flip(0), ReasonCertificateInvalid, ""},
		{"last bit of S flipped", b.pub, flip(63), ReasonCertificateInvalid, ""},
		{"all zero", b.pub, make([]byte, 64), ReasonCertificateInvalid, ""},
		{"signed by another key", b.pub, Sign(other, b.claim), ReasonCertificateInvalid, ""},
		{"verified with another key", otherPub, b.sig, ReasonCertificateInvalid, ""},
		{"empty public key", nil, b.sig, ReasonInvalidArgument, "public_key"},
		{"short public key", b.pub[:31], b.sig, ReasonInvalidArgument, "public_key"},
		{"private key as public key", ed25519.PublicKey(b.priv), b.sig, ReasonInvalidArgument, "public_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := VerifyCertificate(tt.pub, b.claim, tt.sig, now, 0)
			var fe *Error
			if !errors.As(err, &fe) || fe.Reason != tt.reason {
				t.Fatalf("VerifyCertificate = %v, want reason %s", err, tt.reason)
			}
			if !strings.HasPrefix(fe.Error(), tt.reason+": ") {
				t.Errorf("message %q does not start with the reason", fe.Error())
			}
			if tt.field != "" && fe.Metadata["field"] != tt.field {
				t.Errorf("metadata field = %q, want %q", fe.Metadata["field"], tt.field)
			}
			if tt.reason == ReasonCertificateInvalid && fe.Metadata["key_id"] != KeyID(tt.pub) {
				t.Errorf("metadata key_id = %q, want %q", fe.Metadata["key_id"], KeyID(tt.pub))
			}
		})
	}
}

func TestVerifyCertificateExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exp := b.claim.ExpiresAt
	const skew = 2 * time.Second
	tests := []struct {
		name    string
		now     time.Time
		skew    time.Duration
		expired bool
	}{
		{"at issue", b.claim.IssuedAt, 0, false},
		{"1ns before expiry, no skew", exp.Add(-time.Nanosecond), 0, false},
		{"exactly at expiry, no skew", exp, 0, true},
		{"after expiry", exp.Add(time.Hour), 0, true},
		{"1ns before the skew margin", exp.Add(-skew - time.Nanosecond), skew, false},
		{"exactly at the skew margin", exp.Add(-skew), skew, true},
		{"inside the skew margin", exp.Add(-time.Millisecond), skew, true},
		{"skew longer than the lease", b.claim.IssuedAt, time.Hour, true},
		{"now in another zone", exp.Add(-time.Nanosecond).In(time.FixedZone("Y", -5*3600)), 0, false},
		{"now with monotonic clock at expiry", withMonotonic(exp), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := VerifyCertificate(b.pub, b.claim, b.sig, tt.now, tt.skew)
			if !tt.expired {
				if err != nil {
					t.Fatalf("VerifyCertificate = %v, want nil", err)
				}
				return
			}
			var fe *Error
			if !errors.As(err, &fe) || !errors.Is(err, ErrLeaseExpired) {
				t.Fatalf("VerifyCertificate = %v, want %s", err, ReasonLeaseExpired)
			}
			if got, want := fe.Metadata["expires_at"], "2025-01-02T03:05:05.678Z"; got != want {
				t.Errorf("metadata expires_at = %q, want %q", got, want)
			}
			if fe.Metadata["lease_id"] != b.claim.LeaseID {
				t.Errorf("metadata lease_id = %q", fe.Metadata["lease_id"])
			}
		})
	}
}

// withMonotonic returns t carrying a monotonic clock reading, as time.Now does.
func withMonotonic(t time.Time) time.Time {
	n := time.Now()
	return n.Add(t.Sub(n))
}

func TestVerifyCertificateArgumentsBeforeSignature(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name  string
		pub   ed25519.PublicKey
		sig   []byte
		skew  time.Duration
		field string
	}{
		{"negative skew", b.pub, b.sig, -time.Nanosecond, "skew"},
		{"empty key before short signature", nil, nil, 0, "public_key"},
		{"short signature before expiry", b.pub, b.sig[:10], 0, "signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// now is long after expiry: argument errors must still win.
			err := VerifyCertificate(tt.pub, b.claim, tt.sig, b.claim.ExpiresAt.Add(time.Hour), tt.skew)
			var fe *Error
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidArgument) || fe.Metadata["field"] != tt.field {
				t.Fatalf("VerifyCertificate = %v (%+v), want INVALID_ARGUMENT on %s", err, fe, tt.field)
			}
		})
	}
	t.Run("bad signature before expiry", func(t *testing.T) {
		t.Parallel()
		err := VerifyCertificate(b.pub, b.claim, make([]byte, 64), b.claim.ExpiresAt.Add(time.Hour), 0)
		if !errors.Is(err, ErrCertificateInvalid) {
			t.Fatalf("VerifyCertificate = %v, want %s", err, ReasonCertificateInvalid)
		}
	})
}

func TestKeyID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := KeyID(b.pub)
	if len(id) != 16 || strings.ToLower(id) != id {
		t.Fatalf("KeyID = %q, want 16 lowercase hex characters", id)
	}
	// SHA-256 of the empty input starts e3b0c44298fc1c14.
	if got := KeyID(nil); got != "e3b0c44298fc1c14" {
		t.Errorf("KeyID(nil) = %q", got)
	}
}

func TestModeString(t *testing.T) {
	t.Parallel()
	for m, want := range map[Mode]string{ModeExclusive: "MODE_EXCLUSIVE", ModeShared: "MODE_SHARED", 0: "MODE(0)", 7: "MODE(7)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", m, got, want)
		}
	}
}
