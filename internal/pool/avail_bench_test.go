package pool

import (
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

// availBench is a file of 10,000 wanted pieces that 200 peers each have a
// random half of.
func availBench(b *testing.B) (*pool, *file, func() *roaring.Bitmap) {
	const pieces, peers = 10_000, 200
	rng := rand.New(rand.NewPCG(3, 4))
	half := func() *roaring.Bitmap {
		s := roaring.New()
		for x := range uint32(pieces) {
			if rng.IntN(2) == 0 {
				s.Add(x)
			}
		}
		return s
	}
	p := newPool(key{"default", "p"}, DefaultConfig())
	f := newFile(0, pieces)
	p.files[0] = f
	for x := range uint32(pieces) {
		p.addWanted(f, x)
	}
	for i := range peers {
		p.replaceHave(f, p.peer(string(rune('A'+i)), 0), half())
	}
	return p, f, half
}

// BenchmarkHaveNewPeer: a new peer's have-map of half the file, installed
// and then withdrawn (two have-map changes of ~5,000 pieces per op).
func BenchmarkHaveNewPeer(b *testing.B) {
	p, f, half := availBench(b)
	pe := p.peer("new", 0)
	h := half()
	for b.Loop() {
		p.replaceHave(f, pe, h)
		p.replaceHave(f, pe, roaring.New())
	}
}

// BenchmarkHaveGainsOnePiece: a peer's have-map gains one piece, then
// loses it again (two one-piece changes per op).
func BenchmarkHaveGainsOnePiece(b *testing.B) {
	p, f, half := availBench(b)
	pe := p.peer("new", 0)
	h := half()
	p.replaceHave(f, pe, h)
	var x uint32
	for !h.Contains(x) {
		x++
	}
	without := h.Clone()
	without.Remove(x)
	for b.Loop() {
		p.replaceHave(f, pe, without)
		p.replaceHave(f, pe, h)
	}
}
