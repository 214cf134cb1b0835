package ledger

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/logpb"
)

// Sealed is a record read back from the ledger files: decoded, with its
// canonical encoding and its hash.
type Sealed struct {
	Record *logpb.Record
	Bytes  []byte
	Hash   Hash
}

// Tail reads back the last records of the ledger in dir up to and
// including index last, whose hash must be head: at most max of them and
// at most maxBytes by cost (each record's cost(len of its encoding)),
// oldest first, an unbroken run of the chain (each record's hash is the
// SHA-256 of its encoding and the next record's predecessor hash). It
// reads only the segments that may hold them: from the end back, about
// as many bytes of files as the budget allows. When the files do not end
// that run at last with that head (pruned, cut by a crash, or written by
// another history) it returns the part of the run it can vouch for, or
// nothing; an error is only for files it cannot read.
func Tail(dir string, last uint64, head Hash, max, maxBytes int, cost func(int) int) ([]Sealed, error) {
	if last == 0 || max <= 0 {
		return nil, nil
	}
	from := uint64(1)
	if last > uint64(max) {
		from = last - uint64(max) + 1
	}
	segs, err := Segments(dir)
	if err != nil {
		return nil, err
	}
	// The segments that may hold records from..last, then from the end
	// back only as many as hold about maxBytes of records (a line holds
	// its record in base64 and two hashes in hex: a cost of about 1.5 its
	// length).
	end := len(segs)
	for end > 0 && firstIndexOf(segs[end-1]) > last {
		end--
	}
	start := 0
	for i := range segs[:end] {
		if firstIndexOf(segs[i]) <= from {
			start = i
		}
	}
	var onDisk int64
	for i := end - 1; i > start; i-- {
		if fi, err := os.Stat(segs[i]); err == nil {
			onDisk += fi.Size()
		}
		if onDisk*3/2 >= int64(maxBytes) {
			start = i
			break
		}
	}
	t := tail{from: from, last: last, maxBytes: maxBytes, cost: cost}
	for _, seg := range segs[start:end] {
		if err := t.read(seg); err != nil {
			return nil, err
		}
	}
	run := t.run
	if len(run) == 0 || run[len(run)-1].Record.Index != last || run[len(run)-1].Hash != head {
		return nil, nil
	}
	// Keep the longest suffix whose links hold.
	for i := len(run) - 1; i > 0; i-- {
		if !bytes.Equal(run[i].Record.PrevHash, run[i-1].Hash[:]) {
			return run[i:], nil
		}
	}
	return run, nil
}

// tail is the run Tail collects, within its byte budget.
type tail struct {
	from, last uint64
	maxBytes   int
	cost       func(int) int
	run        []Sealed
	bytes      int
}

// reset starts the run over.
func (t *tail) reset() { t.run, t.bytes = nil, 0 }

// add appends s, dropping the oldest records past the budget.
func (t *tail) add(s Sealed) {
	t.run = append(t.run, s)
	t.bytes += t.cost(len(s.Bytes))
	for t.bytes > t.maxBytes && len(t.run) > 1 {
		t.bytes -= t.cost(len(t.run[0].Bytes))
		t.run[0] = Sealed{} // let it go
		t.run = t.run[1:]
	}
}

// read adds the records of one segment with index in [from, last],
// starting the run over at a start marker, a line it cannot read or a
// jump in the indexes.
func (t *tail) read(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		b, err := r.ReadBytes('\n')
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		var e Entry
		switch {
		case parseLine(b, &e) != nil, e.Index == 0: // garbled, or a start marker: what follows is another run
			t.reset()
			continue
		case e.Index < t.from:
			continue
		case e.Index > t.last:
			return nil
		}
		if n := len(t.run); n > 0 && t.run[n-1].Record.Index+1 != e.Index {
			t.reset()
		}
		rec := &logpb.Record{}
		if proto.Unmarshal(e.Record, rec) != nil || rec.Index != e.Index {
			t.reset()
			continue
		}
		t.add(Sealed{Record: rec, Bytes: e.Record, Hash: sha256.Sum256(e.Record)})
	}
}
