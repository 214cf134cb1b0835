package ledger

import (
	"crypto/sha256"
	"testing"
)

// A write error stops the writer for good (nothing is written after a
// hole); reopening resumes after the last line on disk.
func TestWriterStopsAtWriteError(t *testing.T) {
	dir := t.TempDir()
	w, _, err := OpenWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	var prev Hash
	rec := func(i uint64) (uint64, []byte, Hash, []byte) {
		b := []byte{byte(i)}
		h := sha256.Sum256(b)
		p := prev
		prev = h
		return i, p[:], h, b
	}
	if err := w.Append(rec(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	w.f.Close() // the disk goes away
	if err := w.Append(rec(2)); err != nil {
		t.Fatal(err) // buffered only
	}
	if err := w.Flush(); err == nil {
		t.Fatal("Flush to a closed file succeeded")
	}
	if err := w.Append(rec(3)); err == nil || w.Err() == nil {
		t.Fatal("the writer went on after a write error")
	}
	if err := w.Sync(); err == nil {
		t.Fatal("Sync succeeded after a write error")
	}
	w2, got, err := OpenWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if got.Last != 1 {
		t.Fatalf("reopened at %d, want 1", got.Last)
	}
}
