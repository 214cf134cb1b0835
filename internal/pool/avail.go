package pool

import (
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
)

// The availability index. Per file, avail[i] counts the peers whose latest
// have-map contains piece i, and byLevel[a] holds the wanted pieces whose
// availability is a; per pool, levels and levelN list the availabilities
// of wanted pieces (all files) and count them. A have-map changes
// availability of whole sets of pieces at once, so the index moves pieces
// between levels a bucket at a time (bitmap operations), never one piece
// at a time.

// addLevel changes by d the number of wanted pieces at availability lv.
func (p *pool) addLevel(lv uint32, d int) {
	if d == 0 {
		return
	}
	n := p.levelN[lv]
	if n == 0 {
		i, _ := slices.BinarySearch(p.levels, lv)
		p.levels = slices.Insert(p.levels, i, lv)
	}
	if n += d; n != 0 {
		p.levelN[lv] = n
		return
	}
	delete(p.levelN, lv)
	if i, ok := slices.BinarySearch(p.levels, lv); ok {
		p.levels = slices.Delete(p.levels, i, i+1)
	}
}

// addWanted puts a piece in wanted (and its availability bucket).
func (p *pool) addWanted(f *file, x uint32) {
	if !f.wanted.CheckedAdd(x) {
		return
	}
	lv := f.avail[x]
	b := f.byLevel[lv]
	if b == nil {
		b = roaring.New()
		f.byLevel[lv] = b
	}
	b.Add(x)
	p.addLevel(lv, 1)
}

// addWantedSet puts the pieces of set, none of them wanted yet, in wanted
// (and their availability buckets).
func (p *pool) addWantedSet(f *file, set *roaring.Bitmap) {
	if set.IsEmpty() {
		return
	}
	byLv := map[uint32][]uint32{}
	forEach(set, func(xs []uint32) {
		// Member by member rather than Or: set may hold run containers
		// (decoded records), which make the piece-by-piece edits of
		// leasing and the intersections of choose slow.
		f.wanted.AddMany(xs)
		for _, x := range xs {
			byLv[f.avail[x]] = append(byLv[f.avail[x]], x)
		}
	})
	for lv, xs := range byLv { // order does not matter: the result is the same
		b := f.byLevel[lv]
		if b == nil {
			b = roaring.New()
			f.byLevel[lv] = b
		}
		b.AddMany(xs)
		p.addLevel(lv, len(xs))
	}
}

// removeWanted takes a piece out of wanted.
func (p *pool) removeWanted(f *file, x uint32) {
	if !f.wanted.CheckedRemove(x) {
		return
	}
	lv := f.avail[x]
	if b := f.byLevel[lv]; b != nil {
		b.Remove(x)
		if b.IsEmpty() {
			delete(f.byLevel, lv)
		}
	}
	p.addLevel(lv, -1)
}

// replaceHave installs a peer's new have-map of f, adjusting availability
// by the difference only. It forgets the bytes seen for the old one.
func (p *pool) replaceHave(f *file, pe *peer, nw *roaring.Bitmap) {
	if delete(pe.seen, f.index); len(pe.seen) == 0 {
		pe.seen = nil
	}
	if old := pe.have[f.index]; old == nil {
		p.shiftAvail(f, nw, true)
	} else {
		p.shiftAvail(f, roaring.AndNot(nw, old), true)
		p.shiftAvail(f, roaring.AndNot(old, nw), false)
	}
	switch {
	case !nw.IsEmpty():
		if pe.have == nil {
			pe.have = map[uint32]*roaring.Bitmap{}
		}
		pe.have[f.index] = nw
	case len(pe.have) == 1 && pe.have[f.index] != nil:
		pe.have = nil // its last
	default:
		delete(pe.have, f.index)
	}
}

// shiftAvail raises (up) or lowers by one the availability of every piece
// of set, moving the wanted ones to the next bucket. Only the buckets the
// moving pieces are in are visited (a have-map that gains one piece costs
// one bucket), away from the direction of the move (down from the highest
// when raising), so a piece moved into a bucket is never moved again. set
// is not changed.
func (p *pool) shiftAvail(f *file, set *roaring.Bitmap, up bool) {
	if set.IsEmpty() {
		return
	}
	if moving := roaring.And(set, f.wanted); !moving.IsEmpty() {
		lo, hi := ^uint32(0), uint32(0)
		forEach(moving, func(xs []uint32) {
			for _, x := range xs {
				lo, hi = min(lo, f.avail[x]), max(hi, f.avail[x])
			}
		})
		for _, lv := range f.levelsWithin(lo, hi, up) {
			b := f.byLevel[lv]
			moved := roaring.And(b, moving)
			n := moved.GetCardinality()
			if n == 0 {
				continue
			}
			if n == b.GetCardinality() {
				delete(f.byLevel, lv)
			} else {
				b.AndNot(moved)
			}
			to := lv - 1
			if up {
				to = lv + 1
			}
			if d := f.byLevel[to]; d != nil {
				d.Or(moved)
			} else {
				f.byLevel[to] = moved
			}
			p.addLevel(lv, -int(n))
			p.addLevel(to, int(n))
		}
	}
	forEach(set, func(xs []uint32) {
		if up {
			for _, x := range xs {
				f.avail[x]++
			}
		} else {
			for _, x := range xs {
				f.avail[x]--
			}
		}
	})
}

// levelsWithin lists the file's bucket levels within [lo, hi], ascending
// or descending.
func (f *file) levelsWithin(lo, hi uint32, descending bool) []uint32 {
	var lvs []uint32
	if uint64(hi-lo) < uint64(len(f.byLevel)) {
		for lv := lo; ; lv++ {
			if f.byLevel[lv] != nil {
				lvs = append(lvs, lv)
			}
			if lv == hi {
				break
			}
		}
	} else {
		for lv := range f.byLevel {
			if lv >= lo && lv <= hi {
				lvs = append(lvs, lv)
			}
		}
		slices.Sort(lvs)
	}
	if descending {
		slices.Reverse(lvs)
	}
	return lvs
}

// forEach calls fn with the members of b, ascending, a batch at a time.
func forEach(b *roaring.Bitmap, fn func(xs []uint32)) {
	var buf [256]uint32
	it := b.ManyIterator()
	for n := it.NextMany(buf[:]); n > 0; n = it.NextMany(buf[:]) {
		fn(buf[:n])
	}
}
