package cluster

import (
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// TestFeedBoundedByBytes: records carrying large blobs leave the feed by
// its byte budget before its count is reached (found from outside: state
// writes of 60 KB kept ~2 GB in the feed), and what stays is still
// indexed and read in order.
func TestFeedBoundedByBytes(t *testing.T) {
	scope := func(r *logpb.Record) (string, string) { return "ns", []string{"even", "odd"}[r.Index%2] }
	f := NewFeed(100, scope)
	f.maxBytes = 10 * recordCost(1000)
	for i := uint64(1); i <= 30; i++ {
		size := 10
		if i > 10 {
			size = 1000
		}
		f.append([]statemachine.Sealed{{Record: &logpb.Record{Index: i}, Bytes: make([]byte, size)}})
	}
	if f.bytes > f.maxBytes {
		t.Fatalf("holds %d bytes; the budget is %d", f.bytes, f.maxBytes)
	}
	if got := f.Oldest(); got != 21 {
		t.Fatalf("oldest record %d; want 21 (ten records of 1000 bytes fit)", got)
	}
	recs, _, err := f.Read(20, 100)
	if err != nil || len(recs) != 10 || recs[0].Record.Index != 21 || recs[9].Record.Index != 30 {
		t.Fatalf("read after 20: %d records, %v", len(recs), err)
	}
	if _, _, err := f.Read(5, 100); err == nil {
		t.Fatal("read after 5: no error; want compacted")
	}
	var odd []uint64
	f.History("ns", "odd", 0, func(s statemachine.Sealed) bool { odd = append(odd, s.Record.Index); return true })
	if len(odd) != 5 || odd[0] != 21 || odd[4] != 29 {
		t.Fatalf("history of odd: %v", odd)
	}
	// Small records again: as many stay as the budget holds.
	for i := uint64(31); i <= 200; i++ {
		f.append([]statemachine.Sealed{{Record: &logpb.Record{Index: i}, Bytes: make([]byte, 10)}})
	}
	small := recordCost(10)
	if want := f.maxBytes / small; f.n != want || f.Oldest() != 200-uint64(want)+1 || f.bytes != want*small {
		t.Fatalf("oldest %d, %d records, %d bytes; want %d records", f.Oldest(), f.n, f.bytes, want)
	}
	// Without a byte budget in the way, the count bounds the ring.
	f.maxBytes = DefaultFeedBytes
	for i := uint64(201); i <= 400; i++ {
		f.append([]statemachine.Sealed{{Record: &logpb.Record{Index: i}, Bytes: make([]byte, 10)}})
	}
	if f.Oldest() != 301 || f.n != 100 || f.bytes != 100*small {
		t.Fatalf("oldest %d, %d records, %d bytes; want 301, 100", f.Oldest(), f.n, f.bytes)
	}
}
