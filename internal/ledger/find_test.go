package ledger_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// TestFind: Find answers the records of a range that a filter keeps,
// across segments, with the range it is complete for: all of it; up to
// where First or the byte budget stopped it; from a start marker or a
// damaged line on; past segments wholly before MinTick without reading
// them.
func TestFind(t *testing.T) {
	recs, _ := history(t, 60, 0)
	last := recs[len(recs)-1].Record.Index
	wanted := []string{"r/3", "r/33", "r/50"}
	keep := func(r *logpb.Record) bool { return slices.Contains(wanted, r.GetIssued().GetResource()) }
	match := func(enc []byte) bool { return bytes.Contains(enc, []byte("r/")) }
	indexes := func(f ledger.Found) []uint64 {
		var out []uint64
		for _, s := range f.Records {
			out = append(out, s.Record.Index)
		}
		return out
	}
	var all []uint64 // the indexes of the wanted records
	var want []statemachine.Sealed
	for _, s := range recs {
		if keep(s.Record) {
			all = append(all, s.Record.Index)
			want = append(want, s)
		}
	}
	if len(all) != 3 {
		t.Fatalf("history holds %d wanted records", len(all))
	}
	find := func(t *testing.T, dir string, q ledger.Query) ledger.Found {
		t.Helper()
		if q.Keep == nil {
			q.Keep = keep
		}
		f, err := ledger.Find(context.Background(), dir, q)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	dir := t.TempDir()
	write(t, dir, 2048, recs)
	if segs, _ := ledger.Segments(dir); len(segs) < 3 {
		t.Fatalf("%d segments; the test wants several", len(segs))
	}
	f := find(t, dir, ledger.Query{From: 1, To: last + 1, Match: match})
	if !slices.Equal(indexes(f), all) || f.From != 1 || f.Next != last+1 {
		t.Fatalf("all: %v from %d next %d; want %v from 1 next %d", indexes(f), f.From, f.Next, all, last+1)
	}
	for i, s := range f.Records {
		if s.Hash != want[i].Hash || !bytes.Equal(s.Bytes, want[i].Bytes) {
			t.Fatalf("record %d read back differs", s.Record.Index)
		}
	}
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1, First: 2}); !slices.Equal(indexes(f), all[:2]) || f.Next != all[1]+1 {
		t.Fatalf("first 2: %v next %d", indexes(f), f.Next)
	}
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1, Last: 2}); !slices.Equal(indexes(f), all[1:]) || f.Next != last+1 {
		t.Fatalf("last 2: %v next %d", indexes(f), f.Next)
	}
	if f := find(t, dir, ledger.Query{From: all[0] + 1, To: all[2]}); !slices.Equal(indexes(f), all[1:2]) || f.From != all[0]+1 || f.Next != all[2] {
		t.Fatalf("between: %v from %d next %d", indexes(f), f.From, f.Next)
	}
	// Learn is offered the segments read from their first line, but the
	// last, and keeps those read whole: all of them from index 1; none
	// but those after the first from inside the first.
	learned := func(from uint64) (offered, kept []string) {
		find(t, dir, ledger.Query{From: from, To: last + 1, Learn: func(seg string) (func(*logpb.Record), func()) {
			offered = append(offered, seg)
			n := 0
			return func(*logpb.Record) { n++ }, func() {
				if n > 0 {
					kept = append(kept, seg)
				}
			}
		}})
		return offered, kept
	}
	all3 := mustSegments(t, dir)
	if offered, kept := learned(1); !slices.Equal(offered, all3[:len(all3)-1]) || !slices.Equal(kept, offered) {
		t.Fatalf("learning from 1: offered %v, kept %v; segments %v", offered, kept, all3)
	}
	if offered, kept := learned(ledger.FirstIndex(all3[1]) + 1); !slices.Equal(offered, all3[2:len(all3)-1]) || !slices.Equal(kept, offered) {
		t.Fatalf("learning from inside the second segment: offered %v, kept %v; segments %v", offered, kept, all3)
	}

	// Records before MinTick are left out, and the segments wholly before
	// it not read: a garbled first segment does not show.
	minTick := want[1].Record.Tick
	seg0 := mustSegments(t, dir)[0]
	b, _ := os.ReadFile(seg0)
	if err := os.WriteFile(seg0, append([]byte("garbage\n"), b[8:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1, MinTick: minTick}); !slices.Equal(indexes(f), all[1:]) || f.From != 1 || f.Next != last+1 {
		t.Fatalf("from tick %d: %v from %d next %d", minTick, indexes(f), f.From, f.Next)
	}
	// Segments skipped (said to hold nothing wanted) are not read, and the
	// answer is complete past them: here all but the one holding the
	// second wanted record and the last (the garbled first segment is not
	// read either).
	segs := mustSegments(t, dir)
	holding := func(i uint64) string {
		s := segs[0]
		for _, seg := range segs {
			if ledger.FirstIndex(seg) <= i {
				s = seg
			}
		}
		return s
	}
	lastSeg, second := segs[len(segs)-1], holding(all[1])
	if second == lastSeg || holding(all[2]) == lastSeg || holding(all[2]) == second {
		t.Fatalf("the wanted records %v are not in segments apart: %v", all, segs)
	}
	lastOf := func(seg string) uint64 { // the files hold an unbroken run
		i := slices.Index(segs, seg)
		if i+1 == len(segs) {
			return last
		}
		return ledger.FirstIndex(segs[i+1]) - 1
	}
	skipAll := func(seg string) (uint64, bool) { return lastOf(seg), true }
	skip := func(seg string) (uint64, bool) { return lastOf(seg), seg != second }
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1, Skip: skip}); !slices.Equal(indexes(f), all[1:2]) || f.From != 1 || f.Next != last+1 {
		t.Fatalf("skipping all but one segment: %v from %d next %d; want %v", indexes(f), f.From, f.Next, all[1:2])
	}
	// Skipping up to a segment past the range: complete up to its end.
	if f := find(t, dir, ledger.Query{From: 1, To: all[1] + 1, Skip: skip}); !slices.Equal(indexes(f), all[1:2]) || f.Next != all[1]+1 {
		t.Fatalf("a range ending in the segment kept: %v next %d", indexes(f), f.Next)
	}
	if f := find(t, dir, ledger.Query{From: 1, To: ledger.FirstIndex(second), Skip: skip}); len(f.Records) != 0 || f.From != 1 || f.Next != ledger.FirstIndex(second) {
		t.Fatalf("a range ending in skipped segments: %v from %d next %d", indexes(f), f.From, f.Next)
	}
	// The last segment is read even when Skip says otherwise (the writer
	// may be adding to it).
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1, Skip: skipAll}); len(f.Records) != 0 || f.Next != last+1 {
		t.Fatalf("skipping every segment: %v next %d", indexes(f), f.Next)
	}
	// A segment missing after a skipped one: the skip ends at the skipped
	// one's last record, and the next file read shows the gap.
	if len(segs) < 5 {
		t.Fatalf("%d segments; the test wants five", len(segs))
	}
	gapDir := t.TempDir()
	for i, seg := range segs {
		if i == 3 {
			continue
		}
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(gapDir, filepath.Base(seg)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	skipGap := func(seg string) (uint64, bool) { return lastOf(filepath.Join(dir, filepath.Base(seg))), true }
	if f := find(t, gapDir, ledger.Query{From: 1, To: last + 1, Skip: skipGap}); f.From != ledger.FirstIndex(segs[4]) || f.Next != last+1 {
		t.Fatalf("a segment missing after skipped ones: from %d next %d; want complete from %d", f.From, f.Next, ledger.FirstIndex(segs[4]))
	}
	// The byte budget stops it early: complete up to Next only.
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1, MaxBytes: 4096}); f.Next >= last || f.Next < 2 {
		t.Fatalf("a budget of 4 KiB: next %d", f.Next)
	}

	// Files pruned (here: the first two segments removed, and by Prune,
	// which leaves a marker): complete from where they begin.
	dir = t.TempDir()
	write(t, dir, 2048, recs)
	segs = mustSegments(t, dir)
	for _, s := range segs[:2] {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	begin := ledger.FirstIndex(segs[2])
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1}); f.From != begin || f.Next != last+1 || slices.Contains(indexes(f), all[0]) {
		t.Fatalf("segments removed: %v from %d next %d; want from %d", indexes(f), f.From, f.Next, begin)
	}
	if _, err := ledger.Prune(dir, ledger.FirstIndex(segs[3])); err != nil {
		t.Fatal(err)
	}
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1}); f.From != ledger.FirstIndex(segs[3]) || f.Next != last+1 {
		t.Fatalf("pruned: from %d next %d; want from %d", f.From, f.Next, ledger.FirstIndex(segs[3]))
	}

	// A start marker: complete from where the chain resumes.
	dir = t.TempDir()
	write(t, dir, 0, recs[:20])
	w, _, err := ledger.OpenWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Resume(recs[40].Record.Index, recs[39].Hash); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	write(t, dir, 0, recs[40:])
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1}); !slices.Equal(indexes(f), all[2:]) || f.From != recs[40].Record.Index || f.Next != last+1 {
		t.Fatalf("after a start marker: %v from %d next %d", indexes(f), f.From, f.Next)
	}

	// A damaged line: complete from the record after it.
	dir = t.TempDir()
	write(t, dir, 0, recs)
	seg, ls := lines(t, dir)
	ls[45] = "{\"index\":garbled\n"
	if err := os.WriteFile(seg, []byte(strings.Join(ls, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if f := find(t, dir, ledger.Query{From: 1, To: last + 1}); !slices.Equal(indexes(f), all[2:]) || f.From != recs[45].Record.Index+1 || f.Next != last+1 {
		t.Fatalf("after a damaged line: %v from %d next %d", indexes(f), f.From, f.Next)
	}
}

func mustSegments(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := ledger.Segments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}
