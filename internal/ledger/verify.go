package ledger

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/logpb"
)

// Torn is a partial last line: what a crash between two writes leaves.
type Torn struct {
	Segment string `json:"segment"`
	Bytes   int    `json:"bytes"`
}

// Line is one entry as read from a ledger directory.
type Line struct {
	Entry
	// Segment and Line locate the entry (line numbers from 1).
	Segment string
	Line    int
}

// ErrStop, returned by a Scan callback, ends the scan without error.
var ErrStop = errors.New("stop")

// Scan reads every entry of the ledger in dir, oldest first, and calls fn
// for each. A partial last line of the last segment is not passed on; it
// is returned as Torn. A line that is not an entry, or a partial line
// elsewhere, fails the scan with a *BrokenError at index next, the index
// the entry after the last good one would have.
func Scan(dir string, fn func(Line) error) (*Torn, error) {
	segs, err := Segments(dir)
	if err != nil {
		return nil, err
	}
	var next uint64 = 1
	for i, seg := range segs {
		f, err := os.Open(seg)
		if err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		name := filepath.Base(seg)
		for n := 1; ; n++ {
			b, err := r.ReadBytes('\n')
			if err == io.EOF {
				f.Close()
				if len(b) == 0 {
					break
				}
				if i == len(segs)-1 {
					return &Torn{Segment: name, Bytes: len(b)}, nil
				}
				return nil, &BrokenError{Index: next, Reason: fmt.Sprintf("%s line %d: a partial line in the middle of the ledger", name, n)}
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("ledger: %s: %w", name, err)
			}
			if i == len(segs)-1 && len(bytes.Trim(b[:len(b)-1], "\x00")) == 0 {
				if rest, ok := onlyNULsLeft(r); ok {
					f.Close()
					return &Torn{Segment: name, Bytes: len(b) + rest}, nil
				}
			}
			var e Entry
			if err := parseLine(b, &e); err != nil || (e.Index == 0) == (e.Start == 0) {
				f.Close()
				why := "neither a record nor a start marker"
				if err != nil {
					why = err.Error()
				}
				return nil, &BrokenError{Index: next, Reason: fmt.Sprintf("%s line %d is not a ledger entry: %s", name, n, why)}
			}
			if e.Index > 0 {
				next = e.Index + 1
			} else {
				next = e.Start
			}
			if err := fn(Line{Entry: e, Segment: name, Line: n}); err != nil {
				f.Close()
				if err == ErrStop {
					return nil, nil
				}
				return nil, err
			}
		}
	}
	return nil, nil
}

// onlyNULsLeft reports whether the rest of r is NUL bytes and newlines,
// and its length.
func onlyNULsLeft(r *bufio.Reader) (int, bool) {
	rest, err := io.ReadAll(r)
	if err != nil {
		return 0, false
	}
	return len(rest), len(bytes.Trim(rest, "\x00\n")) == 0
}

// Gap is a range of records the ledger does not hold.
type Gap struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
	// Pruned says tenure audit prune removed them (otherwise the node
	// caught up from a snapshot instead of applying them).
	Pruned bool `json:"pruned,omitempty"`
}

// Report summarizes a verified ledger.
type Report struct {
	Records     uint64 `json:"records"`
	Checkpoints uint64 `json:"checkpoints"`
	// First and Last are the indexes of the first and last record held.
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
	// SignedThrough is the last index a verified checkpoint covers;
	// the records after it are chained but not yet signed.
	SignedThrough uint64 `json:"signedThrough"`
	// Unsigned counts the records after the last checkpoint (the records
	// after SignedThrough but the checkpoint that signs them).
	Unsigned uint64 `json:"unsigned"`
	// Gaps are the ranges not held (start markers).
	Gaps []Gap `json:"gaps,omitempty"`
	// UnsignedBeforeGaps are the chained records that no checkpoint
	// signs because a gap follows them: a start marker's previous hash is
	// not signed, so the checkpoints after the gap vouch only for the
	// records after it. Compare these with another member's ledger.
	UnsignedBeforeGaps []Gap `json:"unsignedBeforeGaps,omitempty"`
	// Torn is a partial last line, ignored.
	Torn     *Torn `json:"torn,omitempty"`
	Segments int   `json:"segments"`
	// Anchored is the record index the anchor confirmed (0: no anchor, or
	// it fell in a gap).
	Anchored uint64 `json:"anchored,omitempty"`
	// AnchorNotHeld is the anchor's record index when the ledger does not
	// hold that record (pruned, or in a gap after a catch-up), so that it
	// could not be compared.
	AnchorNotHeld uint64 `json:"anchorNotHeld,omitempty"`
	// KeyFromLedger says the public key was taken from the ledger's own
	// Initialized record (no key was given).
	KeyFromLedger bool `json:"keyFromLedger,omitempty"`
}

// Anchor is a chain position known from elsewhere (the node's Raft
// snapshot): the record before Next has hash Head.
type Anchor struct {
	Next   uint64
	Head   Hash
	Source string
}

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Anchor, when set, must agree with the ledger: the ledger reaches
	// Anchor.Next-1 (or resumes after it) with hash Anchor.Head. This
	// catches a truncated ledger and a rewritten tail up to that point.
	Anchor *Anchor
	// PublicKey verifies the checkpoints. Nil takes the key of the
	// ledger's Initialized record, which only proves self-consistency.
	PublicKey ed25519.PublicKey
	// Progress, when set, is called every ProgressEvery records.
	Progress func(records uint64)
}

// ProgressEvery is how often Verify reports progress, in records.
const ProgressEvery = 1 << 16

// ErrNoKey reports checkpoints that could not be verified for want of a key.
var ErrNoKey = errors.New("no public key to verify the checkpoints with: pass one")

// Verify checks the ledger in dir: every line is an entry, every record's
// bytes hash to its stated hash and decode to the record of the stated
// index and previous hash, the records chain without holes (except at
// start markers, reported as gaps) and every checkpoint covers the chain
// head before it and carries a valid signature. It returns the first
// failure as a *BrokenError naming the first bad index.
func Verify(dir string, opt VerifyOptions) (Report, error) {
	var rep Report
	segs, err := Segments(dir)
	if err != nil {
		return rep, err
	}
	rep.Segments = len(segs)
	pub := opt.PublicKey
	chain := NewChain()
	var held bool // a record or marker was seen
	// The records since the last checkpoint of the run being read: from
	// runFrom, runUnsigned of them.
	var runFrom, runUnsigned uint64
	anchor := opt.Anchor
	// checkAnchor compares what the ledger says the hash of record
	// anchor.Next-1 is.
	checkAnchor := func(at uint64, h []byte, what string) error {
		if anchor == nil || anchor.Next <= 1 || at != anchor.Next-1 || rep.Anchored != 0 {
			return nil
		}
		if !bytes.Equal(h, anchor.Head[:]) {
			return &BrokenError{Index: at, Reason: fmt.Sprintf("%s differs from the chain head in %s (the ledger was rewritten)", what, anchor.Source)}
		}
		rep.Anchored = at
		return nil
	}
	torn, err := Scan(dir, func(l Line) error {
		bad := func(format string, args ...any) error {
			return &BrokenError{Index: chain.Next, Reason: fmt.Sprintf("%s line %d: ", l.Segment, l.Line) + fmt.Sprintf(format, args...)}
		}
		if l.Start > 0 {
			prev, err := hex.DecodeString(l.Prev)
			if err != nil || len(prev) != len(Hash{}) {
				return bad("start marker with a malformed previous hash")
			}
			switch {
			case l.Pruned && rep.Records > 0:
				// Prune only ever cuts the oldest records: its marker
				// comes before every record the ledger holds.
				return bad("a pruned marker after records: tenure audit prune removes only the oldest records, so records before %d were removed by hand", l.Start)
			case held && l.Start < chain.Next:
				return bad("start marker at %d goes back before the records already read", l.Start)
			case l.Start == chain.Next && !bytes.Equal(prev, chain.Head[:]) && held:
				return bad("start marker's previous hash differs from the chain's head")
			case l.Start > chain.Next || !held && l.Start > 1:
				rep.Gaps = append(rep.Gaps, Gap{From: chain.Next, To: l.Start - 1, Pruned: l.Pruned})
				if runUnsigned > 0 {
					// No checkpoint after the gap signs them: the marker's
					// previous hash, which would link them, is not signed.
					rep.UnsignedBeforeGaps = append(rep.UnsignedBeforeGaps, Gap{From: runFrom, To: chain.Next - 1})
					runUnsigned = 0
				}
			}
			chain.Next = l.Start
			copy(chain.Head[:], prev)
			held = true
			return checkAnchor(l.Start-1, prev, fmt.Sprintf("the previous hash of the start marker at %d", l.Start))
		}
		sum := sha256.Sum256(l.Record)
		if hex.EncodeToString(sum[:]) != l.Hash {
			return bad("record %d: its bytes do not hash to its stated hash (the record was altered)", l.Index)
		}
		rec := &logpb.Record{}
		if err := proto.Unmarshal(l.Record, rec); err != nil {
			return bad("record %d: undecodable: %v", l.Index, err)
		}
		if rec.Index != l.Index {
			return bad("the line says index %d, its record says %d", l.Index, rec.Index)
		}
		if hex.EncodeToString(rec.PrevHash) != l.Prev {
			return bad("record %d: the line's previous hash differs from the record's", l.Index)
		}
		if ini := rec.GetInitialized(); ini != nil {
			switch {
			case pub == nil:
				pub = append(ed25519.PublicKey(nil), ini.PublicKey...)
				rep.KeyFromLedger = true
			case !bytes.Equal(pub, ini.PublicKey):
				return bad("record %d: the registrar was initialized with another public key than the one given", l.Index)
			}
		}
		if cp := rec.GetCheckpoint(); cp != nil && pub == nil {
			return fmt.Errorf("ledger: record %d is a checkpoint: %w", rec.Index, ErrNoKey)
		}
		if _, err := chain.Follow(rec, l.Record, pub); err != nil {
			return err
		}
		if err := checkAnchor(rec.Index, sum[:], fmt.Sprintf("record %d's hash", rec.Index)); err != nil {
			return err
		}
		if cp := rec.GetCheckpoint(); cp != nil {
			rep.Checkpoints++
			rep.SignedThrough = cp.CoversIndex
			rep.Unsigned = 0
			runUnsigned = 0
		} else {
			rep.Unsigned++
			if runUnsigned == 0 {
				runFrom = rec.Index
			}
			runUnsigned++
		}
		if rep.Records == 0 {
			rep.First = rec.Index
		}
		rep.Records++
		rep.Last = rec.Index
		held = true
		if opt.Progress != nil && rep.Records%ProgressEvery == 0 {
			opt.Progress(rep.Records)
		}
		return nil
	})
	rep.Torn = torn
	if err == nil && anchor != nil && anchor.Next > 1 && rep.Anchored == 0 {
		covered := chain.Next - 1 // the last index the ledger accounts for
		switch {
		case !held || covered < anchor.Next-1:
			err = &BrokenError{Index: covered + 1, Reason: fmt.Sprintf("the ledger ends at %d, but %s covers records up to %d: records %d..%d are missing (truncated)",
				covered, anchor.Source, anchor.Next-1, covered+1, anchor.Next-1)}
		default: // the anchor fell in a gap or a pruned range: nothing to compare
			rep.AnchorNotHeld = anchor.Next - 1
		}
	}
	return rep, err
}
