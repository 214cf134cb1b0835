package server

import (
	"slices"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/internal/statemachine"
)

// maxWatchPending bounds the indexes a watcher may have waiting; past it
// the watcher reads the feed in order instead (watcher.overflow).
const maxWatchPending = 4096

// watchHub tells each Watch stream which new records it matches, so that
// an applied entry wakes only the watchers it concerns. (Waking every
// watcher on every entry to read and filter the feed made 1,000 idle
// watchers cut write throughput eightfold.) Watchers are indexed by
// namespace and prefix: a record is offered to those registered under its
// namespace or under none, with a prefix of its resource among the
// prefix lengths registered, a handful of map lookups however many
// watchers there are.
type watchHub struct {
	mu   sync.Mutex
	subs map[watchKey]map[*watcher]struct{}
	lens []int       // distinct prefix lengths registered, ascending
	refs map[int]int // watchers per prefix length
}

type watchKey struct{ ns, prefix string }

// watcher is one Watch stream's registration.
type watcher struct {
	key  watchKey
	wake chan struct{} // one token: records are pending

	mu       sync.Mutex
	pending  []uint64 // indexes of matching records, ascending
	overflow bool     // pending ran over: read the feed in order
}

func newWatchHub() *watchHub {
	return &watchHub{subs: map[watchKey]map[*watcher]struct{}{}, refs: map[int]int{}}
}

// add registers a watcher of namespace ns ("" = every namespace) and
// resource prefix.
func (h *watchHub) add(ns, prefix string) *watcher {
	w := &watcher{key: watchKey{ns, prefix}, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[w.key]
	if set == nil {
		set = map[*watcher]struct{}{}
		h.subs[w.key] = set
	}
	set[w] = struct{}{}
	if h.refs[len(prefix)]++; h.refs[len(prefix)] == 1 {
		i, _ := slices.BinarySearch(h.lens, len(prefix))
		h.lens = slices.Insert(h.lens, i, len(prefix))
	}
	return w
}

func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[w.key]
	delete(set, w)
	if len(set) == 0 {
		delete(h.subs, w.key)
	}
	n := len(w.key.prefix)
	if h.refs[n]--; h.refs[n] == 0 {
		delete(h.refs, n)
		i, _ := slices.BinarySearch(h.lens, n)
		h.lens = slices.Delete(h.lens, i, i+1)
	}
}

// observe offers newly applied records to the watchers they match. It
// runs on the apply path (the feed's observer), so it only records
// indexes and wakes.
func (h *watchHub) observe(recs []statemachine.Sealed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) == 0 {
		return
	}
	for _, sl := range recs {
		ns, res := eventScope(sl.Record)
		for _, n := range h.lens {
			if n > len(res) {
				break
			}
			p := res[:n]
			h.offer(watchKey{"", p}, sl.Record.Index)
			if ns != "" {
				h.offer(watchKey{ns, p}, sl.Record.Index)
			}
		}
	}
}

func (h *watchHub) offer(k watchKey, index uint64) {
	for w := range h.subs[k] {
		w.mu.Lock()
		if len(w.pending) < maxWatchPending {
			w.pending = append(w.pending, index)
		} else {
			w.overflow = true
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// matches reports whether a record of namespace ns on resource res is
// one the watcher asked for (what the index offers it, checked again).
func (w *watcher) matches(ns, res string) bool {
	return (w.key.ns == "" || w.key.ns == ns) && strings.HasPrefix(res, w.key.prefix)
}

// take returns the pending indexes and whether they ran over.
func (w *watcher) take() ([]uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, o := w.pending, w.overflow
	w.pending, w.overflow = nil, false
	return p, o
}
