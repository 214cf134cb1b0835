package registrar

import (
	"math/rand/v2"
	"testing"
)

// TestLessResourceOrdersByName checks that the prefix words of an entry
// never change the order of names: short, long, sharing prefixes, with
// zero bytes and high bytes.
func TestLessResourceOrdersByName(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0, 1, '/', '0', '9', 'a', 'p', 0x7f, 0x80, 0xff}
	gen := func() string {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	names := []string{"", "\x00", "a", "a\x00", "pool/p/1/2", "pool/p/1/10", "pool/p/1/100000000", "pool/p/1/10000000", "pool/p/1/1000000\x00"}
	for range 2000 {
		names = append(names, gen())
	}
	for _, a := range names {
		for _, b := range names[:200] {
			if got, want := lessResource(nameKey(a), nameKey(b)), a < b; got != want {
				t.Fatalf("lessResource(%q, %q) = %v, want %v", a, b, got, want)
			}
			if got, want := lessResource(nameKey(b), nameKey(a)), b < a; got != want {
				t.Fatalf("lessResource(%q, %q) = %v, want %v", b, a, got, want)
			}
		}
	}
}
