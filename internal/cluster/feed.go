package cluster

import (
	"fmt"
	"slices"
	"sync"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// DefaultFeedSize is how many recent records the feed keeps, and
// DefaultFeedBytes about how much memory they may take: a registrar whose
// records carry large blobs (guarded state of 64 KiB, task payloads of
// 256 KiB) keeps fewer of them.
const (
	DefaultFeedSize  = 100_000
	DefaultFeedBytes = 256 << 20
)

// Feed is an in-memory ring of the most recently applied ledger records,
// in index order, with a broadcast of changes. Watch resumes from it and
// History reads it; records older than the ring are gone from memory
// (they remain in the ledger files). A restarted node refills it from its
// ledger files (durableLedger.tail), so that history and Watch resumption
// reach back past the snapshot it restored.
type Feed struct {
	mu    sync.RWMutex
	ring  []statemachine.Sealed
	start int    // position of the oldest record in ring
	n     int    // records held
	next  uint64 // ledger index of the next record to arrive (0 = none seen yet)
	// bytes is the recordCost of the records held, at most maxBytes
	// (but for the latest record).
	bytes, maxBytes int
	changed         chan struct{}
	observe         func([]statemachine.Sealed)

	// With scope set, the records held are indexed by namespace and
	// resource: keys is parallel to ring, byKey lists each key's record
	// indexes in order (records leave the ring oldest first, so the one
	// leaving is always the first of its key's list).
	scope func(*logpb.Record) (ns, resource string)
	keys  []feedKey
	byKey map[feedKey][]uint64
}

type feedKey struct{ ns, resource string }

// Observe has fn called with every batch of records as it is appended,
// on the apply path: fn must be quick and must not call the feed.
func (f *Feed) Observe(fn func([]statemachine.Sealed)) {
	f.mu.Lock()
	f.observe = fn
	f.mu.Unlock()
}

// NewFeed returns a feed keeping up to size records, indexed by scope
// when it is not nil.
func NewFeed(size int, scope func(*logpb.Record) (ns, resource string)) *Feed {
	if size <= 0 {
		size = DefaultFeedSize
	}
	f := &Feed{ring: make([]statemachine.Sealed, size), changed: make(chan struct{}), scope: scope, maxBytes: DefaultFeedBytes}
	if scope != nil {
		f.keys = make([]feedKey, size)
		f.byKey = map[feedKey][]uint64{}
	}
	return f
}

func (f *Feed) append(recs []statemachine.Sealed) {
	if len(recs) == 0 {
		return
	}
	f.mu.Lock()
	f.push(recs)
	close(f.changed)
	f.changed = make(chan struct{})
	if f.observe != nil {
		f.observe(recs)
	}
	f.mu.Unlock()
}

// empty reports whether no record has reached the feed yet.
func (f *Feed) empty() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.next == 0
}

// prime fills an empty feed with records read back from the ledger files
// at a restart: the history before the snapshot the node restored, which
// the records applied from then on continue. Nobody is told: nothing
// changed.
func (f *Feed) prime(recs []statemachine.Sealed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == 0 {
		f.push(recs)
	}
}

// size is how many records the feed keeps.
func (f *Feed) size() int { return len(f.ring) }

// push appends recs to the ring. Called with mu held.
func (f *Feed) push(recs []statemachine.Sealed) {
	for _, s := range recs {
		if f.n > 0 && s.Record.Index != f.next {
			// A gap (after a snapshot restore): the ring restarts.
			f.start, f.n, f.bytes = 0, 0, 0
			clear(f.ring)
			if f.byKey != nil {
				clear(f.byKey)
			}
		}
		pos := (f.start + f.n) % len(f.ring)
		if f.n == len(f.ring) {
			f.bytes -= recordCost(len(f.ring[pos].Bytes))
			f.start = (f.start + 1) % len(f.ring)
			f.unindex(pos)
		} else {
			f.n++
		}
		f.ring[pos] = s
		f.bytes += recordCost(len(s.Bytes))
		f.next = s.Record.Index + 1
		if f.scope != nil {
			ns, res := f.scope(s.Record)
			k := feedKey{ns, res}
			f.keys[pos] = k
			f.byKey[k] = append(f.byKey[k], s.Record.Index)
		}
		// Large records (guarded state, task payloads) leave sooner: the
		// ring holds at most maxBytes of them, whatever their number.
		for f.bytes > f.maxBytes && f.n > 1 {
			old := f.start
			f.bytes -= recordCost(len(f.ring[old].Bytes))
			f.unindex(old)
			f.ring[old] = statemachine.Sealed{}
			f.start = (f.start + 1) % len(f.ring)
			f.n--
		}
	}
}

// recordCost is about the memory a record of n encoded bytes holds in the
// ring: its encoding and its decoded form.
func recordCost(n int) int { return 2*n + 256 }

// unindex drops the record at pos, the oldest, from the index.
func (f *Feed) unindex(pos int) {
	if f.byKey == nil {
		return
	}
	k := f.keys[pos]
	if idx := f.byKey[k]; len(idx) > 1 {
		f.byKey[k] = idx[1:]
	} else {
		delete(f.byKey, k)
	}
}

// History calls fn for each record held of namespace ns and resource,
// with index > after, oldest first, until fn returns false. It reads only
// that resource's records (the feed must have been given a scope).
func (f *Feed) History(ns, resource string, after uint64, fn func(statemachine.Sealed) bool) {
	f.HistoryLast(ns, resource, after, 0, fn)
}

// HistoryLast is History over the last n such records only (n > 0).
func (f *Feed) HistoryLast(ns, resource string, after uint64, n int, fn func(statemachine.Sealed) bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	idx := f.byKey[feedKey{ns, resource}]
	if len(idx) == 0 {
		return
	}
	oldest := f.ring[f.start].Record.Index
	i, _ := slices.BinarySearch(idx, after+1)
	if n > 0 {
		i = max(i, len(idx)-n)
	}
	for _, x := range idx[i:] {
		if !fn(f.ring[(f.start+int(x-oldest))%len(f.ring)]) {
			return
		}
	}
}

// At returns the record at index, or false when it is not in the ring
// (compacted, or not yet appended).
func (f *Feed) At(index uint64) (statemachine.Sealed, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.n == 0 {
		return statemachine.Sealed{}, false
	}
	oldest := f.ring[f.start].Record.Index
	if index < oldest || index >= f.next {
		return statemachine.Sealed{}, false
	}
	return f.ring[(f.start+int(index-oldest))%len(f.ring)], true
}

// OldestRecord returns the oldest record held, if any.
func (f *Feed) OldestRecord() (statemachine.Sealed, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.n == 0 {
		return statemachine.Sealed{}, false
	}
	return f.ring[f.start], true
}

// Oldest returns the index of the oldest record held (0 if none).
func (f *Feed) Oldest() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.n == 0 {
		return 0
	}
	return f.ring[f.start].Record.Index
}

// Compacted is the error for an afterIndex older than the feed keeps.
func Compacted(after, oldest uint64) error {
	return &registrar.Error{Reason: registrar.ReasonInvalidArgument,
		Message: fmt.Sprintf("%s: after_index %d was compacted; the oldest event this member holds (in memory or in its ledger files) is %d",
			registrar.ReasonInvalidArgument, after, oldest),
		Metadata: map[string]string{"field": "after_index", "oldest_index": fmt.Sprint(oldest)}}
}

// Head returns the index of the last record appended (0 if none).
func (f *Feed) Head() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.next == 0 {
		return 0
	}
	return f.next - 1
}

// Read returns up to limit records with index > after, and a channel that
// is closed when more records arrive. It fails with INVALID_ARGUMENT when
// records after `after` have already left the ring.
func (f *Feed) Read(after uint64, limit int) ([]statemachine.Sealed, <-chan struct{}, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.n == 0 {
		if f.next != 0 && after+1 < f.next {
			return nil, nil, Compacted(after, f.next)
		}
		return nil, f.changed, nil
	}
	oldest := f.ring[f.start].Record.Index
	if after+1 < oldest {
		return nil, nil, Compacted(after, oldest)
	}
	skip := int(after + 1 - oldest)
	var out []statemachine.Sealed
	for i := skip; i < f.n && len(out) < limit; i++ {
		out = append(out, f.ring[(f.start+i)%len(f.ring)])
	}
	return out, f.changed, nil
}
