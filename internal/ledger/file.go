package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The durable ledger is a set of append-only NDJSON segment files in one
// directory (DirName under a node's data dir), each named after the index
// of its first entry (00000000000000000001.ndjson). One line per entry:
//
//	{"index":7,"prev":"<hex>","hash":"<hex>","record":"<base64>"}
//	{"start":1025,"prev":"<hex>"}
//
// A record line carries the record's canonical bytes (deterministic
// protobuf of logpb.Record, which holds the index, previous hash and, for
// checkpoints, the signature) in base64, with the index, previous hash and
// SHA-256 hash repeated in the clear for grep and cross-checks. A start
// line says the chain resumes at that index with that previous hash: the
// records before it are not in this ledger (the node caught up from a
// snapshot, or its ledger began after them). Lines are written without an
// fsync each (Raft's log already holds the entries); a crash may leave a
// torn last line, which readers report and ignore and the writer cuts.

// DirName is the ledger's directory under a node's data dir.
const DirName = "ledger"

// PublicKeyFile, in the ledger directory, holds the registrar's Ed25519
// public key in hex, for offline verification.
const PublicKeyFile = "public-key"

// DefaultSegmentSize is the size after which a new segment starts.
const DefaultSegmentSize = 64 << 20

const segmentExt = ".ndjson"

// Entry is one line of the ledger: a record or a start marker.
type Entry struct {
	// Index is the record's index (0 for a start marker).
	Index uint64 `json:"index,omitempty"`
	// Start is the index at which the chain resumes (start marker only).
	Start uint64 `json:"start,omitempty"`
	// Prev is the previous record's hash, hex.
	Prev string `json:"prev,omitempty"`
	// Hash is the record's hash (SHA-256 of Record), hex.
	Hash string `json:"hash,omitempty"`
	// Record is the record's canonical encoding.
	Record []byte `json:"record,omitempty"`
	// Pruned marks the start marker Prune leaves where it cut.
	Pruned bool `json:"pruned,omitempty"`
}

// Writer appends sealed records to a ledger directory. It is not safe for
// concurrent use: the node calls it from its ledger writer goroutine only.
type Writer struct {
	dir     string
	segSize int64
	f       *os.File
	size    int64
	buf     []byte
	// last is the index of the last record the ledger holds (0: none)
	// and lastHash its hash.
	last     uint64
	lastHash Hash
	started  bool // the ledger holds at least one entry
	// err is the first write error; it sticks, so that nothing is
	// written after a gap. Reopening (a node restart) resumes from what
	// the file holds, and Raft re-applies the rest of its log.
	err error
}

// Recovered describes what OpenWriter found.
type Recovered struct {
	// Last is the index of the last record in the ledger (0: empty).
	Last uint64
	// TornBytes is the size of the partial last line cut off (0: none).
	TornBytes int
	// Segment is the segment the writer appends to.
	Segment string
}

// OpenWriter opens (creating) the ledger in dir, cuts a torn last line
// left by a crash, and positions after the last record. segSize <= 0
// takes DefaultSegmentSize.
func OpenWriter(dir string, segSize int64) (*Writer, Recovered, error) {
	if segSize <= 0 {
		segSize = DefaultSegmentSize
	}
	var rec Recovered
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, rec, fmt.Errorf("ledger: %w", err)
	}
	KeepReserve(dir)
	segs, err := Segments(dir)
	if err != nil {
		return nil, rec, err
	}
	w := &Writer{dir: dir, segSize: segSize}
	if len(segs) == 0 {
		return w, rec, nil
	}
	lastSeg := segs[len(segs)-1]
	b, err := os.ReadFile(lastSeg)
	if err != nil {
		return nil, rec, fmt.Errorf("ledger: %w", err)
	}
	whole := completeLines(b)
	if rec.TornBytes = len(b) - whole; rec.TornBytes > 0 {
		if err := os.Truncate(lastSeg, int64(whole)); err != nil {
			return nil, rec, fmt.Errorf("ledger: cutting the torn last line of %s: %w", lastSeg, err)
		}
	}
	// The position is the last entry of the newest segment that has one.
	for i := len(segs) - 1; i >= 0 && !w.started; i-- {
		data := b[:whole]
		if i != len(segs)-1 {
			if data, err = os.ReadFile(segs[i]); err != nil {
				return nil, rec, fmt.Errorf("ledger: %w", err)
			}
		}
		if err := w.position(segs[i], data); err != nil {
			return nil, rec, err
		}
	}
	if isPrunedMarker(lastSeg) {
		// Only Prune's marker is left: the next record starts a segment.
		rec.Last = w.last
		return w, rec, nil
	}
	if w.f, err = os.OpenFile(lastSeg, os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, rec, fmt.Errorf("ledger: %w", err)
	}
	w.size = int64(whole)
	rec.Last, rec.Segment = w.last, lastSeg
	return w, rec, nil
}

// position takes the writer's position from the last line of data.
func (w *Writer) position(seg string, data []byte) error {
	data = bytes.TrimRight(data, "\n")
	if len(data) == 0 {
		return nil
	}
	line := data[bytes.LastIndexByte(data, '\n')+1:]
	var e Entry
	if err := json.Unmarshal(line, &e); err != nil {
		return fmt.Errorf("ledger: the last line of %s is not a ledger entry (%v); run tenure audit verify", seg, err)
	}
	var h []byte
	var err error
	switch {
	case e.Index > 0:
		w.last = e.Index
		h, err = hex.DecodeString(e.Hash)
	case e.Start > 0:
		w.last = e.Start - 1
		h, err = hex.DecodeString(e.Prev)
	default:
		err = errors.New("neither a record nor a start marker")
	}
	if err != nil || len(h) != len(Hash{}) {
		return fmt.Errorf("ledger: the last line of %s is not a ledger entry (bad hash %v); run tenure audit verify", seg, err)
	}
	copy(w.lastHash[:], h)
	w.started = true
	return nil
}

// completeLines is the length of b up to its last newline; a tail of
// only NUL bytes (a crash that extended the file without its data) counts
// as torn as well.
func completeLines(b []byte) int {
	n := bytes.LastIndexByte(b, '\n') + 1
	for n > 0 {
		prev := bytes.LastIndexByte(b[:n-1], '\n') + 1
		if len(bytes.Trim(b[prev:n-1], "\x00")) != 0 {
			break
		}
		n = prev
	}
	return n
}

// Last returns the index of the last record written (0: none).
func (w *Writer) Last() uint64 { return w.last }

// ErrOtherHistory is the error of a record (or snapshot chain head) that
// differs from the ledger's own at the same index: what the node applied
// is not the history the ledger recorded.
var ErrOtherHistory = errors.New("the ledger belongs to another history")

// Append adds one sealed record: its index, previous hash, hash and
// canonical bytes. A record the ledger already holds (Raft re-applies
// its log on restart) is skipped; one that does not follow the last (the
// node restored a snapshot) is preceded by a start marker. Lines collect
// in a buffer until Flush.
func (w *Writer) Append(index uint64, prev []byte, hash Hash, rec []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.started && index <= w.last {
		if index == w.last && hash != w.lastHash {
			return fmt.Errorf("ledger: record %d differs from the one in the ledger: %w", index, ErrOtherHistory)
		}
		return nil
	}
	if w.f == nil || w.size+int64(len(w.buf)) >= w.segSize {
		if err := w.rotate(index); err != nil {
			w.err = err
			return err
		}
	}
	if !w.started && index != 1 || w.started && index != w.last+1 {
		w.buf = appendStart(w.buf, index, prev)
	}
	w.buf = appendRecordLine(w.buf, index, prev, hash, rec)
	w.last, w.lastHash, w.started = index, hash, true
	return nil
}

func appendRecordLine(b []byte, index uint64, prev []byte, hash Hash, rec []byte) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendUint(b, index, 10)
	b = append(b, `,"prev":"`...)
	b = hex.AppendEncode(b, prev)
	b = append(b, `","hash":"`...)
	b = hex.AppendEncode(b, hash[:])
	b = append(b, `","record":"`...)
	b = base64.StdEncoding.AppendEncode(b, rec)
	return append(b, "\"}\n"...)
}

// Resume records that the chain continues at next after the hash prev
// (a snapshot was restored): unless the ledger already reaches next-1, it
// writes a start marker, so that the ledger accounts for the snapshot's
// position even before the next record arrives.
func (w *Writer) Resume(next uint64, prev Hash) error {
	if w.err != nil {
		return w.err
	}
	if next <= 1 || w.started && w.last >= next-1 {
		if w.started && w.last == next-1 && w.lastHash != prev {
			return fmt.Errorf("ledger: record %d differs from the restored snapshot's chain head: %w", next-1, ErrOtherHistory)
		}
		return nil
	}
	if w.f == nil || w.size+int64(len(w.buf)) >= w.segSize {
		if err := w.rotate(next); err != nil {
			w.err = err
			return err
		}
	}
	w.buf = appendStart(w.buf, next, prev[:])
	w.last, w.lastHash, w.started = next-1, prev, true
	return w.Flush()
}

func appendStart(b []byte, start uint64, prev []byte) []byte {
	b = append(b, `{"start":`...)
	b = strconv.AppendUint(b, start, 10)
	b = append(b, `,"prev":"`...)
	b = hex.AppendEncode(b, prev)
	return append(b, "\"}\n"...)
}

// rotate starts a new segment named after index, syncing the old one.
func (w *Writer) rotate(index uint64) error {
	if w.f != nil {
		if err := w.Sync(); err != nil {
			return err
		}
		if err := w.f.Close(); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		w.f = nil
	}
	name := filepath.Join(w.dir, fmt.Sprintf("%020d%s", index, segmentExt))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("ledger: %w", err)
	}
	w.f, w.size = f, st.Size()
	return syncDir(w.dir)
}

// Segment is the file the writer appends to ("" before the first record).
func (w *Writer) Segment() string {
	if w.f == nil {
		return ""
	}
	return w.f.Name()
}

// Flush writes the buffered lines to the file (no fsync).
func (w *Writer) Flush() error {
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	n, err := w.f.Write(w.buf)
	w.size += int64(n)
	if err != nil {
		// A partial line is cut as torn on the next open.
		w.err = fmt.Errorf("ledger: %w", err)
		return w.err
	}
	w.buf = w.buf[:0]
	return nil
}

// Err returns the write error that stopped the writer, if any.
func (w *Writer) Err() error { return w.err }

// Sync flushes and fsyncs: the node does so before Raft may compact
// the log entries the ledger was written from (a snapshot).
func (w *Writer) Sync() error {
	if err := w.Flush(); err != nil {
		return err
	}
	if w.f == nil {
		return nil
	}
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("ledger: %w", err)
		return w.err
	}
	return nil
}

// Close syncs and closes the ledger.
func (w *Writer) Close() error {
	err := w.Sync()
	if w.f != nil {
		err = errors.Join(err, w.f.Close())
		w.f = nil
	}
	return err
}

// SavePublicKey stores the registrar's public key beside the ledger
// (PublicKeyFile), unless the same key is there already.
func SavePublicKey(dir string, pub ed25519.PublicKey) error {
	path := filepath.Join(dir, PublicKeyFile)
	want := hex.EncodeToString(pub) + "\n"
	if b, err := os.ReadFile(path); err == nil && string(b) == want {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(want), 0o600); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return syncDir(dir)
}

// ReadPublicKey reads PublicKeyFile from a ledger directory.
func ReadPublicKey(dir string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(filepath.Join(dir, PublicKeyFile))
	if err != nil {
		return nil, err
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("ledger: %s does not hold an Ed25519 public key in hex", filepath.Join(dir, PublicKeyFile))
	}
	return k, nil
}

// Segments lists the segment files of a ledger directory in order.
func Segments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	type seg struct {
		first  uint64
		pruned bool
		path   string
	}
	var segs []seg
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segmentExt)
		if !ok || e.IsDir() {
			continue
		}
		name, pruned := strings.CutSuffix(name, prunedInfix)
		first, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, seg{first, pruned, filepath.Join(dir, e.Name())})
	}
	// A pruned marker comes before the segment that starts at its index.
	sort.Slice(segs, func(i, j int) bool {
		if segs[i].first != segs[j].first {
			return segs[i].first < segs[j].first
		}
		return segs[i].pruned && !segs[j].pruned
	})
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i] = s.path
	}
	return out, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}
