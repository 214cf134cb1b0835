package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

func issued(index uint64, ns, res string) statemachine.Sealed {
	return statemachine.Sealed{Record: &logpb.Record{Index: index,
		Body: &logpb.Record_Issued{Issued: &logpb.LeaseIssued{Namespace: ns, Resource: res}}}}
}

// The hub offers each record to exactly the watchers whose namespace and
// prefix it matches, once each, and forgets removed watchers.
func TestWatchHubOffersMatchingRecords(t *testing.T) {
	h := newWatchHub()
	all := h.add("", "")
	jobs := h.add("a", "jobs/")
	jobsAny := h.add("", "jobs/")
	exact := h.add("b", "jobs/1")
	other := h.add("c", "")
	h.observe([]statemachine.Sealed{
		issued(1, "a", "jobs/1"),
		issued(2, "b", "jobs/1"),
		issued(3, "b", "jobs/10"),
		issued(4, "a", "locks/x"),
		issued(5, "a", "jobs"),
	})
	for name, tc := range map[string]struct {
		w    *watcher
		want []uint64
	}{
		"every namespace, no prefix": {all, []uint64{1, 2, 3, 4, 5}},
		"a, jobs/":                   {jobs, []uint64{1}},
		"every namespace, jobs/":     {jobsAny, []uint64{1, 2, 3}},
		"b, jobs/1":                  {exact, []uint64{2, 3}},
		"c":                          {other, nil},
	} {
		got, over := tc.w.take()
		if !slices.Equal(got, tc.want) || over {
			t.Errorf("%s: offered %v (overflow %v), want %v", name, got, over, tc.want)
		}
		select {
		case <-tc.w.wake:
			if len(tc.want) == 0 {
				t.Errorf("%s: woken with nothing offered", name)
			}
		default:
			if len(tc.want) > 0 {
				t.Errorf("%s: not woken", name)
			}
		}
	}
	for _, w := range []*watcher{all, jobs, jobsAny, exact, other} {
		h.remove(w)
	}
	if len(h.subs) != 0 || len(h.lens) != 0 || len(h.refs) != 0 {
		t.Fatalf("after removing every watcher: %d keys, lens %v, refs %v", len(h.subs), h.lens, h.refs)
	}
	h.observe([]statemachine.Sealed{issued(6, "a", "jobs/1")})
	if got, _ := all.take(); got != nil {
		t.Fatalf("a removed watcher was offered %v", got)
	}
}

func TestWatchHubOverflow(t *testing.T) {
	h := newWatchHub()
	w := h.add("", "")
	recs := make([]statemachine.Sealed, maxWatchPending+10)
	for i := range recs {
		recs[i] = issued(uint64(i+1), "a", "r")
	}
	h.observe(recs)
	got, over := w.take()
	if len(got) != maxWatchPending || !over {
		t.Fatalf("%d pending, overflow %v; want %d and overflow", len(got), over, maxWatchPending)
	}
}

// Many watchers of other prefixes stay asleep while one watcher gets
// every event of its prefix, in order, resumed from an index or live.
func TestWatchManyWatchers(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	from := b.status(t).LedgerIndex
	open := func(req *tenurev1.WatchRequest) *connect.ServerStreamForClient[tenurev1.WatchResponse] {
		s, err := b.leases.Watch(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for i := range 100 {
		open(&tenurev1.WatchRequest{Prefix: fmt.Sprintf("idle/%d/", i)})
	}
	resumed := open(&tenurev1.WatchRequest{Prefix: "hot/", AfterIndex: from})
	live := open(&tenurev1.WatchRequest{Namespace: "default", Prefix: "hot/"})
	// The live watch is open once its headers came; the hub has it.
	waitFor(t, "102 watchers registered", 10*time.Second, func() bool {
		b.srv.watchers.mu.Lock()
		defer b.srv.watchers.mu.Unlock()
		n := 0
		for _, set := range b.srv.watchers.subs {
			n += len(set)
		}
		return n == 102
	})
	var want []string
	for i := range 20 {
		b.acquire(t, &tenurev1.AcquireRequest{Resource: fmt.Sprintf("cold/%d", i), Holder: "w1"})
		l := b.acquire(t, &tenurev1.AcquireRequest{Resource: fmt.Sprintf("hot/%d", i), Holder: "w1"})
		want = append(want, l.LeaseId)
	}
	for name, s := range map[string]*connect.ServerStreamForClient[tenurev1.WatchResponse]{"resumed": resumed, "live": live} {
		var last uint64
		for i, id := range want {
			if !s.Receive() {
				t.Fatalf("%s: stream ended after %d events: %v", name, i, s.Err())
			}
			ev := s.Msg().Event
			if ev.LeaseId != id || ev.Type != "lease.issued" || ev.Index <= last {
				t.Fatalf("%s: event %d is %s %s at %d, want lease.issued of %s after %d", name, i, ev.Type, ev.LeaseId, ev.Index, id, last)
			}
			last = ev.Index
		}
	}
}
