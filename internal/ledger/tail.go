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
// including index last, whose hash must be head: at most max of them,
// oldest first, an unbroken run of the chain (each record's hash is the
// SHA-256 of its encoding and the next record's predecessor hash). It
// reads only the segments that may hold them. When the files do not end
// that run at last with that head (pruned, cut by a crash, or written by
// another history) it returns the part of the run it can vouch for, or
// nothing; an error is only for files it cannot read.
func Tail(dir string, last uint64, head Hash, max int) ([]Sealed, error) {
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
	start := 0
	for i, s := range segs {
		if firstIndexOf(s) <= from {
			start = i
		}
	}
	var run []Sealed
	for _, seg := range segs[start:] {
		if firstIndexOf(seg) > last {
			break
		}
		more, err := readRun(seg, from, last, run)
		if err != nil {
			return nil, err
		}
		run = more
	}
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

// readRun appends to run the records of one segment with index in
// [from, last], starting the run over at a start marker, a line it
// cannot read or a jump in the indexes.
func readRun(path string, from, last uint64, run []Sealed) ([]Sealed, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		b, err := r.ReadBytes('\n')
		if err == io.EOF {
			return run, nil
		}
		if err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		var e Entry
		switch {
		case parseLine(b, &e) != nil, e.Index == 0: // garbled, or a start marker: what follows is another run
			run = run[:0]
			continue
		case e.Index < from:
			continue
		case e.Index > last:
			return run, nil
		}
		if n := len(run); n > 0 && run[n-1].Record.Index+1 != e.Index {
			run = run[:0]
		}
		rec := &logpb.Record{}
		if proto.Unmarshal(e.Record, rec) != nil || rec.Index != e.Index {
			run = run[:0]
			continue
		}
		run = append(run, Sealed{Record: rec, Bytes: e.Record, Hash: sha256.Sum256(e.Record)})
	}
}
