package cluster

import (
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// segFilters remembers, for ledger segments, which resources their
// records concern (a Bloom filter of the records' (namespace, resource),
// as Config.EventScope names them), so that a History search for a
// resource's events older than the feed reads only the segments that may
// hold them. A filter is built as the writer appends a segment from its
// first line, or when a search first reads a whole segment (one written
// before this process started). A segment without a filter is always
// read: the writer went on with it after a restore or a refill from the
// feed (records it did not see, or a break in the chain, a filter must
// not hide).
type segFilters struct {
	scope func(*logpb.Record) (ns, resource string)
	seed  maphash.Seed
	// bits is the size of each filter, from the segment size.
	bits uint64
	mu   sync.RWMutex
	by   map[string]*segFilter
}

// segFilter is one segment's filter, and the index of the last record
// it has seen: the segment's records run unbroken from its first index
// up to it.
type segFilter struct {
	bits []uint64
	last uint64
}

// segFilterHashes is the number of bits a key sets.
const segFilterHashes = 4

func newSegFilters(scope func(*logpb.Record) (ns, resource string), segSize int64) *segFilters {
	if segSize <= 0 {
		segSize = ledger.DefaultSegmentSize
	}
	// About a bit per 32 bytes of segment, ten per record of ~300 bytes
	// (a 64 MiB segment: 256 KiB of filter, ~1% false positives).
	x := max(uint64(segSize)/32, 1024)
	n := uint64(1) << (bits.Len64(x) - 1) // a power of two, at most x
	return &segFilters{scope: scope, seed: maphash.MakeSeed(), bits: n, by: map[string]*segFilter{}}
}

func (f *segFilters) hash(ns, resource string) (uint64, uint64) {
	var h maphash.Hash
	h.SetSeed(f.seed)
	h.WriteString(ns)
	h.WriteByte(0)
	h.WriteString(resource)
	x := h.Sum64()
	return x, x>>32 | 1
}

// note records that the record at index was appended to segment seg,
// which begins at first: it starts the segment's filter at its first
// record and adds to it after.
func (f *segFilters) note(seg string, first uint64, rec *logpb.Record) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.by[seg]
	if b == nil {
		if rec.Index != first {
			return
		}
		b = &segFilter{bits: make([]uint64, f.bits/64)}
		f.by[seg] = b
	} else if rec.Index != b.last+1 {
		delete(f.by, seg) // not a run: no filter stands for it
		return
	}
	f.set(b, rec)
}

// set adds rec to filter b: its resource, and its index as the last.
func (f *segFilters) set(b *segFilter, rec *logpb.Record) {
	b.last = rec.Index
	ns, res := f.scope(rec)
	if res == "" {
		return
	}
	h1, h2 := f.hash(registrar.OrDefault(ns), res)
	for i := range uint64(segFilterHashes) {
		x := (h1 + i*h2) % f.bits
		b.bits[x/64] |= 1 << (x % 64)
	}
}

// learn builds a filter for segment seg from the records a search reads
// (ledger.Query.Learn): keep installs it, unless the segment has one.
func (f *segFilters) learn(seg string) (add func(*logpb.Record), keep func()) {
	if f == nil {
		return nil, nil
	}
	f.mu.RLock()
	has := f.by[seg] != nil
	f.mu.RUnlock()
	if has {
		return nil, nil
	}
	b := &segFilter{bits: make([]uint64, f.bits/64)}
	return func(rec *logpb.Record) { f.set(b, rec) }, func() {
		f.mu.Lock()
		if f.by[seg] == nil {
			f.by[seg] = b
		}
		f.mu.Unlock()
	}
}

// spoil drops the filter of segment seg: the writer went on with it in a
// way the filter did not see.
func (f *segFilters) spoil(seg string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	delete(f.by, seg)
	f.mu.Unlock()
}

// absent reports whether segment seg surely holds no record of the
// resource (it has a filter, and the filter does not have it), and the
// index of the segment's last record.
func (f *segFilters) absent(seg, ns, resource string) (last uint64, ok bool) {
	if f == nil {
		return 0, false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	b := f.by[seg]
	if b == nil {
		return 0, false
	}
	h1, h2 := f.hash(ns, resource)
	for i := range uint64(segFilterHashes) {
		x := (h1 + i*h2) % f.bits
		if b.bits[x/64]&(1<<(x%64)) == 0 {
			return b.last, true
		}
	}
	return 0, false
}

// keep drops the filters of segments no longer among segs (pruned).
func (f *segFilters) keep(segs []string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.by) == 0 {
		return
	}
	live := make(map[string]bool, len(segs))
	for _, s := range segs {
		live[s] = true
	}
	for s := range f.by {
		if !live[s] {
			delete(f.by, s)
		}
	}
}
