package registrar

// timerHeap is a binary min-heap that keeps each item's position in the
// item itself, so that any item can be removed or re-keyed in O(log n).
// Finding everything due at a tick costs O(k log n) for k due items.
type timerHeap[T any] struct {
	items []T
	less  func(a, b T) bool
	index func(T) *int32
}

func (h *timerHeap[T]) Len() int { return len(h.items) }

func (h *timerHeap[T]) peek() (T, bool) {
	if len(h.items) == 0 {
		var zero T
		return zero, false
	}
	return h.items[0], true
}

func (h *timerHeap[T]) push(x T) {
	*h.index(x) = int32(len(h.items))
	h.items = append(h.items, x)
	h.up(len(h.items) - 1)
}

func (h *timerHeap[T]) remove(x T) {
	i := int(*h.index(x))
	if i < 0 || i >= len(h.items) {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	h.items[last] = zero
	h.items = h.items[:last]
	*h.index(x) = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h *timerHeap[T]) fix(x T) {
	i := int(*h.index(x))
	if i < 0 {
		h.push(x)
		return
	}
	if !h.down(i) {
		h.up(i)
	}
}

func (h *timerHeap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.index(h.items[i]) = int32(i)
	*h.index(h.items[j]) = int32(j)
}

func (h *timerHeap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *timerHeap[T]) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && h.less(h.items[j2], h.items[j]) {
			j = j2
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

func newLeaseHeap() timerHeap[*lease] {
	return timerHeap[*lease]{
		less: func(a, b *lease) bool {
			da, db := a.deadline(), b.deadline()
			return da < db || da == db && a.seq < b.seq
		},
		index: func(l *lease) *int32 { return &l.heapIdx },
	}
}

func newWaiterHeap() timerHeap[*waiter] {
	return timerHeap[*waiter]{
		less: func(a, b *waiter) bool {
			return a.deadline < b.deadline || a.deadline == b.deadline && a.id < b.id
		},
		index: func(w *waiter) *int32 { return &w.heapIdx },
	}
}

// newNamespaceHeap orders namespaces by when their oldest terminal lease
// is due for pruning.
func newNamespaceHeap() timerHeap[*namespace] {
	return timerHeap[*namespace]{
		less: func(a, b *namespace) bool {
			return a.pruneDue < b.pruneDue || a.pruneDue == b.pruneDue && a.name < b.name
		},
		index: func(ns *namespace) *int32 { return &ns.pruneIdx },
	}
}
