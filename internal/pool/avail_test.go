package pool

import (
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"pgregory.net/rapid"
)

// TestAvailabilityIndex drives the availability index directly with random
// have-map changes (whole sets at once), wanted additions and removals, on
// files small and large (past one roaring container), and checks after
// every step that it equals the index recomputed piece by piece from the
// have-maps and the wanted sets (Check).
func TestAvailabilityIndex(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := newPool(key{"default", "p"}, DefaultConfig())
		ps := &Pools{pools: map[key]*pool{p.key: p}, byLease: map[uint64]*pieceLease{}, pieces: map[string]uint64{}}
		counts := []uint32{rapid.Uint32Range(1, 40).Draw(rt, "small"), rapid.Uint32Range(65_000, 70_000).Draw(rt, "large")}
		for i, n := range counts {
			p.files[uint32(i)] = newFile(uint32(i), n)
			ps.pieces[p.ns] += uint64(n)
		}
		// set draws a random set of a file's pieces: a few ranges and points.
		set := func(f *file, label string) *roaring.Bitmap {
			b := roaring.New()
			for range rapid.IntRange(0, 3).Draw(rt, label+"-ranges") {
				lo := rapid.Uint32Range(0, f.count-1).Draw(rt, label+"-lo")
				hi := rapid.Uint32Range(lo+1, f.count).Draw(rt, label+"-hi")
				b.AddRange(uint64(lo), uint64(hi))
			}
			for range rapid.IntRange(0, 20).Draw(rt, label+"-points") {
				b.Add(rapid.Uint32Range(0, f.count-1).Draw(rt, label+"-point"))
			}
			if rapid.Bool().Draw(rt, label+"-flip") {
				b.Flip(0, uint64(f.count))
			}
			return b
		}
		names := []string{"a", "b", "c", "d"}
		for range rapid.IntRange(1, 25).Draw(rt, "steps") {
			f := p.files[uint32(rapid.IntRange(0, len(counts)-1).Draw(rt, "file"))]
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				s := set(f, "want")
				s.AndNot(f.wanted)
				p.addWantedSet(f, s)
			case 1, 2:
				pe := p.peer(rapid.SampledFrom(names).Draw(rt, "peer"), 0)
				p.replaceHave(f, pe, set(f, "have"))
			case 3:
				if !f.wanted.IsEmpty() {
					x, _ := f.wanted.Select(uint32(rapid.Uint64Range(0, f.wanted.GetCardinality()-1).Draw(rt, "nth")))
					p.removeWanted(f, x)
				}
			}
			if err := ps.Check(); err != nil {
				rt.Fatal(err)
			}
		}
	})
}
