package fencing_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/fencing"
)

func ExampleVerifyCertificate() {
	// The registrar's key pair; a downstream service only has the public half.
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)

	issued := time.Date(2025, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	claim := fencing.Claim{
		LeaseID:   "01JGZ5Q3W8K9M2N4P6R8T0V2X4",
		Namespace: "default",
		Resource:  "orders/42",
		Holder:    "w1",
		Mode:      fencing.ModeExclusive,
		Fence:     17,
		IssuedAt:  issued,
		ExpiresAt: issued.Add(time.Minute),
	}
	sig := fencing.Sign(priv, claim) // done by the registrar

	const skew = 2 * time.Second
	fmt.Println("key", fencing.KeyID(pub))
	fmt.Println("at issue:", fencing.VerifyCertificate(pub, claim, sig, issued, skew))

	late := claim.ExpiresAt.Add(-time.Second) // within the skew margin
	err := fencing.VerifyCertificate(pub, claim, sig, late, skew)
	fmt.Println("1s before expiry:", errors.Is(err, fencing.ErrLeaseExpired))

	forged := claim
	forged.Fence = 18
	err = fencing.VerifyCertificate(pub, forged, sig, issued, skew)
	fmt.Println(err)
	// Output:
	// key fe812c12f3ab4ce6
	// at issue: <nil>
	// 1s before expiry: true
	// CERTIFICATE_INVALID: signature of lease "01JGZ5Q3W8K9M2N4P6R8T0V2X4" does not verify with key fe812c12f3ab4ce6
}

func ExampleValidator() {
	// A processor accepting the actions of lease-a (fence 17), from epoch 0.
	v := fencing.NewValidator("lease-a", 17)

	fmt.Println(v.Accept("lease-a", 0))
	fmt.Println(v.Accept("lease-a", 1))
	fmt.Println(v.Accept("lease-a", 1)) // redelivered
	fmt.Println(v.Accept("lease-a", 3)) // epoch 2 is missing
	fmt.Println(v.Accept("lease-x", 2)) // another orchestrator

	// The lease is transferred: the successor has a higher fence and continues
	// the epochs; the old holder is locked out.
	fmt.Println(v.Handoff("lease-b", 18))
	fmt.Println(v.Accept("lease-b", 2))
	fmt.Println(errors.Is(v.Accept("lease-a", 3), fencing.ErrLeaseViolation))
	fmt.Println(v.Handoff("lease-a", 17))
	// Output:
	// <nil>
	// <nil>
	// STALE_EPOCH: epoch 1 < 2, the next expected epoch
	// FUTURE_EPOCH: epoch 3 > 2, the next expected epoch
	// LEASE_VIOLATION: lease "lease-x" is not the accepted lease "lease-a"
	// <nil>
	// <nil>
	// true
	// FENCE_STALE: fence 17 of lease "lease-a" <= 18, the current fence
}

func ExampleFenceGuard() {
	var g fencing.FenceGuard // per storage; the zero value is ready

	fmt.Println(g.Admit("default/orders/42", 17)) // holder with fence 17 writes
	fmt.Println(g.Admit("default/orders/42", 18)) // a successor took over
	err := g.Admit("default/orders/42", 17)       // the deposed holder wakes up
	var fe *fencing.Error
	if errors.As(err, &fe) {
		fmt.Println(fe.Reason, "highest", fe.Metadata["highest_fence"])
	}
	// Output:
	// <nil>
	// <nil>
	// FENCE_STALE highest 18
}
