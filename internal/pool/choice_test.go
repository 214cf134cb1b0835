package pool_test

import (
	"bytes"
	"slices"
	"testing"

	"pgregory.net/rapid"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

// choiceModel is a plain model of what a pool has seen, from which a
// reference picker computes the pieces a request must get.
type choiceModel struct {
	counts []uint32                     // piece count by file (0: not wanted yet)
	wanted map[[2]uint32]bool           // wanted pieces
	held   map[[2]uint32]string         // leased pieces and their peer
	haves  map[string]map[uint32][]byte // latest have-map by peer and file
}

func (m *choiceModel) has(peer string, f, x uint32) bool {
	b := m.haves[peer][f]
	return int(x/8) < len(b) && b[x/8]>>(x%8)&1 != 0
}

// pick is the reference picker, spelled out: wanted pieces the request's
// have-maps contain, lowest availability (peers whose latest have-map
// contains the piece) first; within one availability, round robin across
// files by ascending index, lowest piece first.
func (m *choiceModel) pick(peer string, files []uint32, need int) [][2]uint32 {
	byLevel := map[int]map[uint32][]uint32{}
	for _, f := range files {
		for x := range m.counts[f] {
			if !m.wanted[[2]uint32{f, x}] || !m.has(peer, f, x) {
				continue
			}
			lv := 0
			for p := range m.haves {
				if m.has(p, f, x) {
					lv++
				}
			}
			if byLevel[lv] == nil {
				byLevel[lv] = map[uint32][]uint32{}
			}
			byLevel[lv][f] = append(byLevel[lv][f], x) // ascending: x grows
		}
	}
	var levels []int
	for lv := range byLevel {
		levels = append(levels, lv)
	}
	slices.Sort(levels)
	fs := slices.Sorted(slices.Values(files))
	var out [][2]uint32
	for _, lv := range levels {
		for round := 0; len(out) < need; round++ {
			took := false
			for _, f := range fs {
				if xs := byLevel[lv][f]; round < len(xs) && len(out) < need {
					out = append(out, [2]uint32{f, xs[round]})
					took = true
				}
			}
			if !took {
				break
			}
		}
	}
	return out
}

// TestChoicesMatchReferencePicker drives a pool with random wants,
// requests (have-maps new, repeated byte for byte, changed or emptied) and
// completions, and checks that every request is granted exactly the
// pieces, in the order, that the reference picker chooses from a model of
// everything the pool has seen. One file is large enough that a choose
// tests more than scanLimit members against one have-map.
func TestChoicesMatchReferencePicker(t *testing.T) {
	peers := []string{"a", "b", "c", "d"}
	rapid.Check(t, func(rt *rapid.T) {
		e := setup(t)
		e.t = rt
		capN := rapid.Uint32Range(1, 8).Draw(rt, "cap")
		zero := 0.0
		e.create("p", &tenurev1.PoolConfig{MaxLeasesPerPeer: capN, MinPeerScore: &zero})
		sizes := []uint32{rapid.Uint32Range(1, 40).Draw(rt, "size0"), rapid.Uint32Range(1, 300).Draw(rt, "size1"),
			rapid.Uint32Range(1500, 5000).Draw(rt, "size2")}
		m := &choiceModel{counts: make([]uint32, len(sizes)), wanted: map[[2]uint32]bool{}, held: map[[2]uint32]string{},
			haves: map[string]map[uint32][]byte{}}
		current := map[string]uint32{}
		// bits draws a set of pieces: a few ranges, some points, maybe
		// complemented.
		bits := func(label string, n uint32) []byte {
			b := make([]byte, (n+7)/8)
			set := func(x uint32) { b[x/8] |= 1 << (x % 8) }
			for range rapid.IntRange(0, 2).Draw(rt, label+"-ranges") {
				lo := rapid.Uint32Range(0, n-1).Draw(rt, label+"-lo")
				hi := rapid.Uint32Range(lo+1, min(n, lo+1+rapid.Uint32Range(0, n).Draw(rt, label+"-len"))).Draw(rt, label+"-hi")
				for x := lo; x < hi; x++ {
					set(x)
				}
			}
			for range rapid.IntRange(0, 12).Draw(rt, label+"-points") {
				set(rapid.Uint32Range(0, n-1).Draw(rt, label+"-point"))
			}
			if rapid.IntRange(0, 3).Draw(rt, label+"-flip") == 0 {
				for x := range n {
					b[x/8] ^= 1 << (x % 8)
				}
			}
			return bytes.TrimRight(b, "\x00")
		}
		for range rapid.IntRange(1, 50).Draw(rt, "steps") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0:
				f := uint32(rapid.IntRange(0, len(sizes)-1).Draw(rt, "file"))
				n := sizes[f]
				b := bits("want", n)
				out := e.do(&logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Want{Want: &logpb.PoolWant{
					FileIndex: f, PieceCount: n, Bits: b}}})
				if out.Err != nil {
					rt.Fatalf("want: %v", out.Err)
				}
				m.counts[f] = n
				for x := range n {
					k := [2]uint32{f, x}
					if int(x/8) < len(b) && b[x/8]>>(x%8)&1 != 0 && m.held[k] == "" {
						m.wanted[k] = m.wanted[k] || !doneIn(m, k)
					}
				}
			case 1, 2, 3:
				peer := rapid.SampledFrom(peers).Draw(rt, "peer")
				var hs []*logpb.PoolHave
				var files []uint32
				for f, n := range m.counts {
					if n == 0 || !rapid.Bool().Draw(rt, "hasfile") {
						continue
					}
					var b []byte
					switch old := m.haves[peer][uint32(f)]; {
					case old != nil && rapid.Bool().Draw(rt, "same"):
						b = bytes.Clone(old) // the same bytes again (the cache's case)
					case rapid.IntRange(0, 5).Draw(rt, "empty") == 0:
						b = nil
					default:
						b = bits("have", n)
					}
					hs = append(hs, &logpb.PoolHave{FileIndex: uint32(f), Bits: b})
					files = append(files, uint32(f))
				}
				max := rapid.Uint32Range(1, 6).Draw(rt, "max")
				out := e.do(&logpb.PoolCommand{Pool: "p", Op: &logpb.PoolCommand_Request{Request: &logpb.PoolRequest{
					Peer: peer, Have: hs, Max: max}}})
				if out.Err != nil {
					rt.Fatalf("request: %v", out.Err)
				}
				if m.haves[peer] == nil {
					m.haves[peer] = map[uint32][]byte{}
				}
				for _, h := range hs {
					if len(h.Bits) == 0 {
						delete(m.haves[peer], h.FileIndex)
					} else {
						m.haves[peer][h.FileIndex] = h.Bits
					}
				}
				var want [][2]uint32
				if current[peer] < capN {
					want = m.pick(peer, files, int(min(max, capN-current[peer])))
				}
				var got [][2]uint32
				for _, g := range out.Leases {
					got = append(got, [2]uint32{g.File, g.Piece})
				}
				if !slices.Equal(got, want) {
					rt.Fatalf("peer %s max %d (holds %d of %d): granted %v, reference picks %v", peer, max, current[peer], capN, got, want)
				}
				wantReason := tenurev1.RejectedReason_REJECTED_REASON_UNSPECIFIED
				switch {
				case current[peer] >= capN:
					wantReason = tenurev1.RejectedReason_REJECTED_REASON_PEER_AT_CAPACITY
				case len(want) == 0:
					wantReason = tenurev1.RejectedReason_REJECTED_REASON_NO_AVAILABLE_PIECES
				}
				if out.Rejected != wantReason {
					rt.Fatalf("rejected %v, want %v", out.Rejected, wantReason)
				}
				for _, k := range got {
					delete(m.wanted, k)
					m.held[k] = peer
					current[peer]++
				}
			case 4:
				var held [][2]uint32
				for k := range m.held {
					held = append(held, k)
				}
				if len(held) == 0 {
					continue
				}
				slices.SortFunc(held, func(a, b [2]uint32) int { return cmpPiece(a, b) })
				k := rapid.SampledFrom(held).Draw(rt, "piece")
				ok := rapid.Bool().Draw(rt, "success")
				why := tenurev1.FailureReason_FAILURE_REASON_UNSPECIFIED
				if !ok {
					why = tenurev1.FailureReason_FAILURE_REASON_NETWORK_ERROR
				}
				peer := m.held[k]
				if out := e.complete("p", peer, k[0], k[1], ok, why); out.Err != nil {
					rt.Fatalf("complete: %v", out.Err)
				}
				delete(m.held, k)
				current[peer]--
				if ok {
					m.wanted[k] = false // done for good
				} else {
					m.wanted[k] = true
				}
			}
			if err := e.m.Pools().Check(); err != nil {
				rt.Fatal(err)
			}
		}
		e.checkReplay()
	})
}

// doneIn reports whether the model has the piece done: it was wanted once
// (an entry exists) and is neither wanted nor held now.
func doneIn(m *choiceModel, k [2]uint32) bool {
	w, ok := m.wanted[k]
	return ok && !w && m.held[k] == ""
}

func cmpPiece(a, b [2]uint32) int {
	if a[0] != b[0] {
		return int(a[0]) - int(b[0])
	}
	return int(a[1]) - int(b[1])
}

// TestChooseCrossesScanLimit: a choose that tests scanLimit (1024)
// members bit by bit against a have-map, having found some, and goes on
// by intersecting bitmaps must neither repeat nor skip a piece.
func TestChooseCrossesScanLimit(t *testing.T) {
	e := setup(t)
	e.wantRange("p", 0, 3000, 0, 3000)
	// a: [0, 1020) and [1025, 2000); b: 1020, 1022 and [2000, 3000).
	// Availability: 1021, 1023, 1024 at 0; every other piece at 1.
	aHas := append(span(0, 1020), span(1025, 2000)...)
	if out := e.request("p", "a", 1, have(0, aHas...)); len(out.Leases) != 1 || out.Leases[0].Piece != 0 {
		t.Fatalf("a: %+v", out)
	}
	// b tests the 3 pieces at level 0, then 1..1019 at level 1 (1022 in
	// all), finds 1020 and 1022, and passes the limit at 1025.
	out := e.request("p", "b", 4, have(0, append([]uint32{1020, 1022}, span(2000, 3000)...)...))
	var got []uint32
	for _, g := range out.Leases {
		got = append(got, g.Piece)
	}
	if want := []uint32{1020, 1022, 2000, 2001}; !slices.Equal(got, want) {
		t.Fatalf("b granted %v, want %v", got, want)
	}
	e.checkReplay()
}
