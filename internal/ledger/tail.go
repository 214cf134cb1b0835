package ledger

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"

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
// nothing; damaged is then the index of the last record within the run it
// read that does not decode or whose successor does not chain to it (an
// altered or damaged file, which an honest ledger never has: it breaks
// its chain only at start markers), 0 when none. An error is only for
// files it cannot read.
func Tail(dir string, last uint64, head Hash, max, maxBytes int, cost func(int) int) (recs []Sealed, damaged uint64, err error) {
	if last == 0 || max <= 0 {
		return nil, 0, nil
	}
	from := uint64(1)
	if last > uint64(max) {
		from = last - uint64(max) + 1
	}
	segs, err := Segments(dir)
	if err != nil {
		return nil, 0, err
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
			return nil, 0, err
		}
	}
	run, damaged := decodeRun(t.run)
	if damaged == 0 {
		damaged = t.damaged // a garbled line comes before the run kept
	}
	if len(run) == 0 || run[len(run)-1].Record.Index != last || run[len(run)-1].Hash != head {
		return nil, damaged, nil
	}
	// Keep the longest suffix whose links hold.
	for i := len(run) - 1; i > 0; i-- {
		if !bytes.Equal(run[i].Record.PrevHash, run[i-1].Hash[:]) {
			return run[i:], run[i-1].Record.Index, nil // later than any record that failed to decode
		}
	}
	return run, damaged, nil
}

// line is a record of the run Tail collects, not yet decoded.
type line struct {
	index uint64
	bytes []byte
}

// tail is the run Tail collects, within its byte budget.
type tail struct {
	from, last uint64
	maxBytes   int
	cost       func(int) int
	run        []line
	bytes      int
	// damaged is the index of the last garbled line read (0: none).
	damaged uint64
}

// reset starts the run over.
func (t *tail) reset() { t.run, t.bytes = nil, 0 }

// add appends l, dropping the oldest records past the budget.
func (t *tail) add(l line) {
	t.run = append(t.run, l)
	t.bytes += t.cost(len(l.bytes))
	for t.bytes > t.maxBytes && len(t.run) > 1 {
		t.bytes -= t.cost(len(t.run[0].bytes))
		t.run[0] = line{} // let it go
		t.run = t.run[1:]
	}
}

// read adds the records of one segment with index in [from, last],
// starting the run over at a start marker, a line it cannot read or a
// jump in the indexes. The records are decoded afterwards (decodeRun),
// only those of the run kept.
func (t *tail) read(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	r := newLines(f)
	for {
		b, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if i, ok := lineIndex(b); ok && i != 0 && i < t.from && len(t.run) == 0 {
			continue // before the run: not worth decoding
		}
		var e Entry
		if parseLine(b, &e) != nil { // garbled: altered or damaged; what follows is another run
			if i, ok := lineIndex(b); ok && i >= t.from && i <= t.last {
				t.damaged = i
			} else if n := len(t.run); n > 0 {
				t.damaged = t.run[n-1].index + 1
			}
			t.reset()
			continue
		}
		switch {
		case e.Index == 0: // a start marker: what follows is another run
			t.reset()
			continue
		case e.Index < t.from:
			continue
		case e.Index > t.last:
			return nil
		}
		if n := len(t.run); n > 0 && t.run[n-1].index+1 != e.Index {
			t.reset()
		}
		t.add(line{index: e.Index, bytes: e.Record})
	}
}

// lines reads a segment's lines, each whole however long (a record line
// may be longer than the buffer: a pool's have-map of a large file).
type lines struct {
	r    *bufio.Reader
	long []byte
}

func newLines(f *os.File) *lines { return &lines{r: bufio.NewReaderSize(f, 1<<20)} }

// next returns the next line with its newline, valid until the next
// call; at the end, io.EOF with what follows the last newline (a torn
// line, or nothing).
func (l *lines) next() ([]byte, error) {
	for {
		b, err := l.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			l.long = append(l.long, b...)
			continue
		}
		if l.long != nil {
			b, l.long = append(l.long, b...), nil
		}
		return b, err
	}
}

// lineIndex reads the index a record line starts with.
func lineIndex(b []byte) (uint64, bool) {
	b, ok := bytes.CutPrefix(b, []byte(`{"index":`))
	if !ok {
		return 0, false
	}
	var i uint64
	n := 0
	for ; n < len(b) && n < 20 && b[n] >= '0' && b[n] <= '9'; n++ {
		i = i*10 + uint64(b[n]-'0')
	}
	return i, n > 0 && n < 20
}

// decodeRun decodes and hashes the run's records, on every core (a
// restart reads back 100,000 of them before it serves), and keeps what
// follows the last record that does not decode as its line's index says,
// as reading them one by one and starting over there would, and the
// index of that record (0 when every record decodes).
func decodeRun(run []line) ([]Sealed, uint64) {
	out := make([]Sealed, len(run))
	bad := make([]int, runtime.GOMAXPROCS(0))
	chunk := (len(run) + len(bad) - 1) / len(bad)
	var wg sync.WaitGroup
	for w := range bad {
		bad[w] = -1
		lo, hi := min(w*chunk, len(run)), min((w+1)*chunk, len(run))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				rec := &logpb.Record{}
				if proto.Unmarshal(run[i].bytes, rec) != nil || rec.Index != run[i].index {
					bad[w] = i
					continue
				}
				out[i] = Sealed{Record: rec, Bytes: run[i].bytes, Hash: sha256.Sum256(run[i].bytes)}
			}
		})
	}
	wg.Wait()
	if last := slices.Max(bad); last >= 0 {
		return out[last+1:], run[last].index
	}
	return out, 0
}
