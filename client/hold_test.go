package tenure

import (
	"testing"
)

// Once the holder's lease has ended, tryTake takes the turn whichever of it
// and set's watcher gets there first: the watcher frees the turn between
// tryTake's first try and its look at the lease in some runs of this loop.
func TestLocalHoldTryTakeAfterLeaseEnded(t *testing.T) {
	for i := range 20000 {
		h := newLocalHold()
		if !h.tryTake() {
			t.Fatal("tryTake of a free hold = false")
		}
		l := &Lease{done: make(chan struct{})}
		h.set(l)
		close(l.done)
		for range i % 64 {
			_ = leaseEnded(l) // a varying head start for set's watcher
		}
		if !h.tryTake() {
			t.Fatalf("run %d: tryTake after the holder's lease ended = false, want true", i)
		}
		if _, lost := h.end(); lost != l {
			t.Fatalf("run %d: end = lost %v, want the ended lease", i, lost)
		}
	}
}
