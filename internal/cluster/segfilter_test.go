package cluster

import (
	"fmt"
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
)

// TestSegFilters: a segment's filter starts at its first record and says
// which resources it surely lacks (never one it holds); a segment without
// a filter (begun before, spoiled, pruned) is never said to lack one.
func TestSegFilters(t *testing.T) {
	scope := func(r *logpb.Record) (string, string) {
		is := r.GetIssued()
		return is.GetNamespace(), is.GetResource()
	}
	f := newSegFilters(scope, 1<<20)
	absent := func(seg, ns, res string) bool {
		_, ok := f.absent(seg, ns, res)
		return ok
	}
	issued := func(index uint64, ns, res string) *logpb.Record {
		return &logpb.Record{Index: index, Body: &logpb.Record_Issued{Issued: &logpb.LeaseIssued{Namespace: ns, Resource: res}}}
	}
	// seg-a began before (its first record, 1, was not seen): no filter.
	f.note("seg-a", 1, issued(5, "", "x"))
	if absent("seg-a", "default", "y") {
		t.Fatal("a segment begun before the filters says it lacks a resource")
	}
	for i := range uint64(500) {
		f.note("seg-b", 100, issued(100+i, "", fmt.Sprintf("held/%d", i)))
	}
	for i := range 500 {
		if absent("seg-b", "default", fmt.Sprintf("held/%d", i)) {
			t.Fatalf("held/%d said absent from the segment holding it", i)
		}
	}
	lacking := 0
	for i := range 1000 {
		if absent("seg-b", "default", fmt.Sprintf("other/%d", i)) {
			lacking++
		}
	}
	if last, ok := f.absent("seg-b", "default", "other/0"); ok && last != 599 {
		t.Fatalf("seg-b's last record: %d; want 599", last)
	}
	// A record that does not follow the last one (a gap in the segment)
	// drops the filter: none stands for the segment.
	f.note("seg-d", 10, issued(10, "", "d"))
	f.note("seg-d", 10, issued(12, "", "d"))
	if absent("seg-d", "default", "zzz") {
		t.Fatal("a segment with a gap keeps its filter")
	}
	if lacking < 900 {
		t.Fatalf("only %d of 1000 resources not in the segment said absent", lacking)
	}
	f.spoil("seg-b")
	if absent("seg-b", "default", "other/1") {
		t.Fatal("a spoiled segment says it lacks a resource")
	}
	f.note("seg-c", 700, issued(700, "", "c"))
	f.keep([]string{"seg-a"})
	if absent("seg-c", "default", "zzz") {
		t.Fatal("a pruned segment's filter kept")
	}
	var none *segFilters
	none.note("s", 1, issued(1, "", "x"))
	if _, ok := none.absent("s", "default", "x"); ok {
		t.Fatal("no filters said a segment lacks a resource")
	}
}
