package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/logpb"
)

// Query selects records for Find.
type Query struct {
	// From and To bound the indexes read: From ≤ index < To.
	From, To uint64
	// MinTick: records of earlier ticks are read but not kept, and a
	// segment whose successor starts before it is not read at all.
	MinTick int64
	// MaxBytes bounds the bytes of the lines read from From on (0: no
	// bound).
	MaxBytes int64
	// Match filters a record by its encoding before it is decoded (a
	// cheap test that may let through records Keep refuses); nil lets all
	// through.
	Match func(enc []byte) bool
	// Keep decides on the decoded record.
	Keep func(*logpb.Record) bool
	// First stops the scan once it has kept that many; Last keeps only
	// the newest that many. 0: no limit.
	First, Last int
	// Skip, when set, names segments known to hold no record Keep would
	// keep, as an unbroken run of records from the segment's first index
	// up to last: they are not read.
	Skip func(segment string) (last uint64, ok bool)
	// Learn, when set, is offered every segment Find reads from its first
	// line (but the last, which the writer may be adding to): a non-nil
	// add is called with each of its records, decoded, and keep once the
	// whole segment was read as one unbroken run (so that a filter built
	// from the records may stand for the segment, for Skip).
	Learn func(segment string) (add func(*logpb.Record), keep func())
}

// Found is what Find read.
type Found struct {
	// Records are the records kept, oldest first.
	Records []Sealed
	// From..Next (exclusive) is the range the answer is complete for:
	// every record in it was read, in an unbroken run of indexes, and
	// those kept are in Records. From is above the Query's when the files
	// lack the records before it (a start marker, pruned or damaged
	// lines); Next is below the Query's To when the scan stopped early
	// (First reached, the byte budget spent, the files ending).
	From, Next uint64
}

// Find reads the records of q's range from the ledger in dir, oldest
// first, for the history of one resource older than a node keeps in
// memory. It reads the segments that may hold the range; records read are
// decoded only when q.Match lets them through. It returns ctx's error if
// ctx ends; a segment removed meanwhile (pruned) counts as missing lines.
func Find(ctx context.Context, dir string, q Query) (Found, error) {
	out := Found{From: q.From, Next: q.From}
	if q.From >= q.To {
		return out, nil
	}
	segs, err := Segments(dir)
	if err != nil {
		return out, err
	}
	// Start at the last segment starting at or before From, then skip
	// those wholly before MinTick.
	i := 0
	for i+1 < len(segs) && firstIndexOf(segs[i+1]) <= q.From {
		i++
	}
	if len(segs) > 0 && firstIndexOf(segs[i]) > out.Next {
		// The files begin after From (pruned, or the member began from a
		// snapshot): the answer is complete from where they begin.
		out.From, out.Next = firstIndexOf(segs[i]), firstIndexOf(segs[i])
	}
	skipped := false
	for i+1 < len(segs) && firstIndexOf(segs[i+1]) < q.To {
		e, err := firstEntry(segs[i+1])
		if err != nil || e.Index == 0 {
			break
		}
		rec := &logpb.Record{}
		if proto.Unmarshal(e.Record, rec) != nil || rec.Tick >= q.MinTick {
			break
		}
		i, skipped = i+1, true
	}
	if skipped {
		// The segments skipped hold only records before MinTick (and any
		// missing between them would be as old), which the answer leaves
		// out anyway: it is complete past them.
		out.Next = max(out.Next, firstIndexOf(segs[i]))
	}
	s := scanner{q: q, out: &out}
	for ; i < len(segs) && !s.done; i++ {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if firstIndexOf(segs[i]) >= q.To {
			break
		}
		// A segment the run has reached (nothing missing before it) that
		// holds nothing wanted: the run goes on past its last record (and
		// the next segment read says whether anything is missing after
		// it). Never the last one, which the writer may still be adding to.
		if i+1 < len(segs) && q.Skip != nil && !s.broken && firstIndexOf(segs[i]) <= out.Next {
			if last, ok := q.Skip(segs[i]); ok {
				out.Next = max(out.Next, min(last+1, q.To))
				continue
			}
		}
		s.add, s.keep = nil, nil
		if q.Learn != nil && i+1 < len(segs) && firstIndexOf(segs[i]) >= out.Next {
			s.add, s.keep = q.Learn(segs[i])
		}
		if err := s.read(ctx, segs[i]); err != nil {
			return out, err
		}
	}
	if n := len(out.Records); q.Last > 0 && n > q.Last {
		out.Records = out.Records[n-q.Last:]
	}
	return out, nil
}

// scanner is one Find's progress.
type scanner struct {
	q     Query
	out   *Found
	bytes int64
	done  bool
	// broken: a garbled line was read; the run starts over at the next
	// record that reads.
	broken bool
	// add and keep learn the segment being read (Query.Learn); whole
	// turns false when its run breaks or the read stops before its end.
	add   func(*logpb.Record)
	keep  func()
	whole bool
}

// restart starts the unbroken run over at index i: what was kept before
// a gap cannot be vouched for as all the range held.
func (s *scanner) restart(i uint64) {
	clear(s.out.Records)
	s.out.Records = s.out.Records[:0]
	s.out.From, s.out.Next, s.broken = i, i, false
	s.whole = false
}

func (s *scanner) read(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // pruned meanwhile: the next line read is a gap
	}
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	s.whole = s.add != nil
	r := newLines(f)
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		b, err := r.next()
		if err == io.EOF {
			// A torn last line is not read: the range ends here.
			if s.whole && len(b) == 0 && s.keep != nil {
				s.keep()
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if i, ok := lineIndex(b); ok && i != 0 && i < s.out.Next && !s.broken {
			s.whole = false
			continue // before the range (not counted: nothing is decoded)
		}
		s.bytes += int64(len(b))
		if s.q.MaxBytes > 0 && s.bytes > s.q.MaxBytes {
			s.done = true
			return nil
		}
		var e Entry
		if parseLine(b, &e) != nil {
			// Garbled: the run is broken here; it resumes at the next
			// line that reads.
			s.broken, s.whole = true, false
			continue
		}
		switch {
		case e.Index == 0: // a start marker
			if e.Start > s.out.Next {
				s.restart(e.Start)
			}
			continue
		case e.Index >= s.q.To && !s.whole:
			s.done = true
			return nil
		case e.Index >= s.q.To:
			// Learning: read the segment to its end, keeping nothing.
			s.done = true
			if rec := s.decode(e); rec != nil {
				s.add(rec)
			} else {
				s.whole = false
			}
			continue
		case s.broken || e.Index > s.out.Next:
			s.restart(e.Index) // records missing before it
		case e.Index < s.out.Next:
			continue
		}
		if err := s.take(e); err != nil {
			s.restart(e.Index + 1)
			continue
		}
		if s.done {
			return nil
		}
	}
}

// decode decodes a line's record, nil if it does not decode as its index.
func (s *scanner) decode(e Entry) *logpb.Record {
	rec := &logpb.Record{}
	if err := proto.Unmarshal(e.Record, rec); err != nil || rec.Index != e.Index {
		return nil
	}
	return rec
}

// take reads one record of the run.
func (s *scanner) take(e Entry) error {
	var rec *logpb.Record
	if s.whole {
		if rec = s.decode(e); rec == nil {
			return fmt.Errorf("ledger: record %d does not decode", e.Index)
		}
		s.add(rec)
	}
	if s.q.Match != nil && !s.q.Match(e.Record) {
		s.out.Next = e.Index + 1
		return nil
	}
	if rec == nil {
		if rec = s.decode(e); rec == nil {
			return fmt.Errorf("ledger: record %d does not decode", e.Index)
		}
	}
	s.out.Next = e.Index + 1
	if rec.Tick < s.q.MinTick || !s.q.Keep(rec) {
		return nil
	}
	s.out.Records = append(s.out.Records, Sealed{Record: rec, Bytes: e.Record, Hash: sha256.Sum256(e.Record)})
	if s.q.Last > 0 && len(s.out.Records) > 2*s.q.Last {
		n := copy(s.out.Records, s.out.Records[len(s.out.Records)-s.q.Last:])
		clear(s.out.Records[n:])
		s.out.Records = s.out.Records[:n]
	}
	if s.q.First > 0 && len(s.out.Records) >= s.q.First {
		s.done = true
	}
	return nil
}
