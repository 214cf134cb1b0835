package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	tenure "github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/fencing"
)

// claimOf is the Go client's reading of a lease's certificate claim.
var claimOf = tenure.ClaimOf

// TestCertificatesEndToEnd: with authentication on, Acquire, Renew and a
// pipelined Acquire that ask for a certificate return an Ed25519
// certificate that verifies offline with the key ClusterService serves;
// a forged certificate (another key) or an altered claim (holder, fence,
// expiry, renewal count) is rejected offline, and so is one within the
// skew margin of its expiry.
func TestCertificatesEndToEnd(t *testing.T) {
	b := startSecure(t, nil)
	w1 := b.as("tok-w1")
	ctx := context.Background()
	pk, err := w1.cluster.PublicKey(ctx, connect.NewRequest(&tenurev1.PublicKeyRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.PublicKey(pk.Msg.PublicKey)
	verify := func(l *tenurev1.Lease, c fencing.Claim, sig []byte, at time.Time) error {
		t.Helper()
		if l.KeyId != pk.Msg.KeyId {
			t.Errorf("key id %q, want %q", l.KeyId, pk.Msg.KeyId)
		}
		return fencing.VerifyCertificate(pub, c, sig, at, time.Second)
	}

	ar, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "certs/1", Ttl: ttl(time.Minute), Certificate: true}))
	if err != nil {
		t.Fatal(err)
	}
	l := ar.Msg.Lease
	if len(l.Signature) != ed25519.SignatureSize {
		t.Fatalf("no certificate on the grant: %v", l)
	}
	now := l.IssuedAt.AsTime()
	if err := verify(l, claimOf(l), l.Signature, now); err != nil {
		t.Fatalf("grant certificate: %v", err)
	}

	rr, err := w1.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{l.LeaseId}, Ttl: ttl(2 * time.Minute), Certificate: true}))
	if err != nil || len(rr.Msg.Leases) != 1 {
		t.Fatalf("renew: %v %v", rr, err)
	}
	rl := rr.Msg.Leases[0]
	if rl.RenewalCount != 1 || bytes.Equal(rl.Signature, l.Signature) {
		t.Fatalf("renewal certificate not refreshed: %v", rl)
	}
	if err := verify(rl, claimOf(rl), rl.Signature, now); err != nil {
		t.Fatalf("renewal certificate: %v", err)
	}

	ps := w1.leases.Pipeline(ctx)
	if err := ps.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{{Id: 1, Op: &tenurev1.PipelineOp_Acquire{
		Acquire: &tenurev1.AcquireRequest{Resource: "certs/2", Certificate: true}}}}}); err != nil {
		t.Fatal(err)
	}
	pr, err := ps.Receive()
	if err != nil {
		t.Fatal(err)
	}
	pl := pr.Results[0].GetAcquire().GetLease()
	if pl == nil || verify(pl, claimOf(pl), pl.Signature, pl.IssuedAt.AsTime()) != nil {
		t.Fatalf("pipelined grant certificate: %v", pr.Results[0])
	}
	_ = ps.CloseRequest()
	_ = ps.CloseResponse()

	// A lease with a scope and a budget: they are signed too, so that a
	// certificate cannot be made to claim more.
	sr, err := w1.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "certs/3", Certificate: true,
		Scope:  &tenurev1.Scope{ResourcePrefixes: []string{"certs/3/"}, Actions: []string{"read"}},
		Budget: &tenurev1.Budget{Limits: map[string]int64{"tokens": 5, "calls": 2}}}))
	if err != nil {
		t.Fatal(err)
	}
	sl := sr.Msg.Lease
	if err := verify(sl, claimOf(sl), sl.Signature, sl.IssuedAt.AsTime()); err != nil {
		t.Fatalf("scoped grant certificate: %v", err)
	}
	for name, alter := range map[string]func(c *fencing.Claim){
		"scope widened":    func(c *fencing.Claim) { c.Scope.Actions = append(c.Scope.Actions, "write") },
		"scope dropped":    func(c *fencing.Claim) { c.Scope = fencing.Scope{} },
		"budget raised":    func(c *fencing.Claim) { c.Budget = map[string]int64{"tokens": 999999, "calls": 2} },
		"budget dropped":   func(c *fencing.Claim) { c.Budget, c.Scope = nil, fencing.Scope{} },
		"parent made up":   func(c *fencing.Claim) { c.ParentLeaseID = l.LeaseId },
		"prefix rewritten": func(c *fencing.Claim) { c.Scope.ResourcePrefixes = []string{""} },
	} {
		c := claimOf(sl)
		alter(&c)
		if err := fencing.VerifyCertificate(pub, c, sl.Signature, sl.IssuedAt.AsTime(), time.Second); !errors.Is(err, fencing.ErrCertificateInvalid) {
			t.Errorf("%s: VerifyCertificate = %v, want CERTIFICATE_INVALID", name, err)
		}
	}

	forger := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	for _, tc := range []struct {
		name   string
		base   *tenurev1.Lease // the claim's lease (nil: the renewed one)
		claim  func(c *fencing.Claim)
		sig    []byte
		at     time.Time
		reason error
	}{
		{"forged by another key", nil, nil, fencing.Sign(forger, claimOf(rl)), now, fencing.ErrCertificateInvalid},
		{"forged claim for another holder", nil, func(c *fencing.Claim) { c.Holder = "w2" }, fencing.Sign(forger, fencing.Claim{}), now, fencing.ErrCertificateInvalid},
		{"holder altered", nil, func(c *fencing.Claim) { c.Holder = "w2" }, rl.Signature, now, fencing.ErrCertificateInvalid},
		{"fence altered", nil, func(c *fencing.Claim) { c.Fence++ }, rl.Signature, now, fencing.ErrCertificateInvalid},
		{"expiry extended", nil, func(c *fencing.Claim) { c.ExpiresAt = c.ExpiresAt.Add(time.Hour) }, rl.Signature, now, fencing.ErrCertificateInvalid},
		{"renewal count altered", nil, func(c *fencing.Claim) { c.RenewalCount = 0 }, rl.Signature, now, fencing.ErrCertificateInvalid},
		{"old certificate with the renewed expiry", l, func(c *fencing.Claim) { c.ExpiresAt = rl.ExpiresAt.AsTime() }, l.Signature, now, fencing.ErrCertificateInvalid},
		{"within the skew margin of expiry", nil, nil, rl.Signature, rl.ExpiresAt.AsTime().Add(-500 * time.Millisecond), fencing.ErrLeaseExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := rl
			if tc.base != nil {
				base = tc.base
			}
			c := claimOf(base)
			if tc.claim != nil {
				tc.claim(&c)
			}
			if err := fencing.VerifyCertificate(pub, c, tc.sig, tc.at, time.Second); !errors.Is(err, tc.reason) {
				t.Fatalf("VerifyCertificate = %v, want %v", err, tc.reason)
			}
		})
	}
}
