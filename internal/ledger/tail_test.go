package ledger_test

import (
	"bytes"
	"os"

	"google.golang.org/protobuf/proto"
	"testing"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// TestTail: the records read back are the run ending at the index and
// head asked for, byte for byte, across segments; nothing when the files
// hold another history; only the part after a start marker or a gap.
func TestTail(t *testing.T) {
	recs, _ := history(t, 60, 0)
	last := recs[len(recs)-1].Record.Index
	cost := func(n int) int { return n }
	same := func(t *testing.T, got []ledger.Sealed, want []statemachine.Sealed) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("read back %d records; want %d", len(got), len(want))
		}
		for i, g := range got {
			w := want[i]
			if g.Record.Index != w.Record.Index || g.Hash != w.Hash || !bytes.Equal(g.Bytes, w.Bytes) || !proto.Equal(g.Record, w.Record) {
				t.Fatalf("record %d read back as %d (hash %x); want %d (hash %x)", i, g.Record.Index, g.Hash, w.Record.Index, w.Hash)
			}
		}
	}

	dir := t.TempDir()
	write(t, dir, 2048, recs) // several segments
	if segs, _ := ledger.Segments(dir); len(segs) < 3 {
		t.Fatalf("%d segments; the test wants several", len(segs))
	}
	got, _, err := ledger.Tail(dir, last, recs[len(recs)-1].Hash, 1000, 1<<30, cost)
	if err != nil {
		t.Fatal(err)
	}
	same(t, got, recs)
	got, _, _ = ledger.Tail(dir, last, recs[len(recs)-1].Hash, 7, 1<<30, cost) // the last 7 only
	same(t, got, recs[len(recs)-7:])
	got, _, _ = ledger.Tail(dir, 40, recs[39].Hash, 10, 1<<30, cost) // ending before the files do
	same(t, got, recs[30:40])
	// A byte budget: the latest records whose costs fit.
	budget := 0
	for _, r := range recs[len(recs)-5:] {
		budget += len(r.Bytes)
	}
	got, _, _ = ledger.Tail(dir, last, recs[len(recs)-1].Hash, 1000, budget, cost)
	same(t, got, recs[len(recs)-5:])
	if got, _, _ := ledger.Tail(dir, last, recs[0].Hash, 1000, 1<<30, cost); got != nil {
		t.Fatalf("another head: read back %d records; want none", len(got))
	}
	if got, _, _ := ledger.Tail(dir, last+5, recs[len(recs)-1].Hash, 1000, 1<<30, cost); got != nil {
		t.Fatalf("past the files: read back %d records; want none", len(got))
	}

	// A start marker (the ledger resumed at a snapshot) ends the run.
	dir = t.TempDir()
	write(t, dir, 0, recs[:20])
	w, _, err := ledger.OpenWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Resume(31, recs[29].Hash); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	write(t, dir, 0, recs[30:])
	got, damaged, _ := ledger.Tail(dir, last, recs[len(recs)-1].Hash, 1000, 1<<30, cost)
	same(t, got, recs[30:])
	if damaged != 0 {
		t.Errorf("a start marker reported as damage at %d", damaged)
	}

	// A record altered in place: only the run after it is vouched for.
	dir = t.TempDir()
	write(t, dir, 0, recs)
	seg, ls := lines(t, dir)
	ls[9] = string(bytes.Replace([]byte(ls[9]), []byte(`"record":"`), []byte(`"record":"AA`), 1))
	var b bytes.Buffer
	for _, l := range ls {
		b.WriteString(l)
	}
	if err := os.WriteFile(seg, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	got, damaged, _ = ledger.Tail(dir, last, recs[len(recs)-1].Hash, 1000, 1<<30, cost)
	same(t, got, recs[10:])
	if damaged != 10 {
		t.Errorf("damaged at %d, want the altered record 10", damaged)
	}
	// Another one later (the records are decoded in parallel chunks):
	// the run after the later one.
	ls[47] = string(bytes.Replace([]byte(ls[47]), []byte(`"record":"`), []byte(`"record":"AA`), 1))
	b.Reset()
	for _, l := range ls {
		b.WriteString(l)
	}
	if err := os.WriteFile(seg, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	got, damaged, _ = ledger.Tail(dir, last, recs[len(recs)-1].Hash, 1000, 1<<30, cost)
	same(t, got, recs[48:])
	if damaged != 48 {
		t.Errorf("damaged at %d, want the later altered record 48", damaged)
	}
}

// TestTailLongRecord: a record whose line is longer than the reader's
// buffer (a pool's have-map of a large file) is read back whole.
func TestTailLongRecord(t *testing.T) {
	c := ledger.NewChain()
	var recs []statemachine.Sealed
	for i := range 3 {
		pieces := []byte{byte(i)}
		if i == 1 {
			pieces = bytes.Repeat([]byte{0xa5}, 3<<20) // 4 MiB in base64
		}
		rec := &logpb.Record{Tick: int64(i + 1), Body: &logpb.Record_Pool{Pool: &logpb.PoolRecord{
			Namespace: "default", Pool: "p", Event: &logpb.PoolRecord_Have{Have: &logpb.PeerHave{Peer: "a", Pieces: pieces}}}}}
		b, h, err := c.Seal(rec)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, statemachine.Sealed{Record: rec, Bytes: b, Hash: h})
	}
	dir := t.TempDir()
	write(t, dir, 0, recs)
	got, _, err := ledger.Tail(dir, 3, recs[2].Hash, 10, 1<<30, func(n int) int { return n })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !bytes.Equal(got[1].Bytes, recs[1].Bytes) || got[1].Hash != recs[1].Hash {
		t.Fatalf("read back %d records; want all 3, the long one intact", len(got))
	}
}
