package ledger

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Prune leaves a marker file, <index>.pruned.ndjson, holding one start
// marker with "pruned": true; it sorts before the segment of that index.
const prunedInfix = ".pruned"

func isPrunedMarker(path string) bool {
	return strings.HasSuffix(path, prunedInfix+segmentExt)
}

// Pruned is what Prune did.
type Pruned struct {
	// Start is the first index the ledger still accounts for (0: nothing
	// was pruned).
	Start uint64
	// Removed is how many files were removed.
	Removed int
}

// Prune removes the oldest whole segments whose records all come before
// index before, first writing a start marker (Entry.Pruned) at the first
// index kept, so that the ledger still verifies, with the pruned range
// reported as such. It never removes the last segment, which a running
// node appends to, so it is safe while the node runs. Callers verify the
// ledger first: what is pruned cannot be verified any more.
func Prune(dir string, before uint64) (Pruned, error) {
	var out Pruned
	segs, err := Segments(dir)
	if err != nil {
		return out, err
	}
	var regular, markers []string
	for _, s := range segs {
		if isPrunedMarker(s) {
			markers = append(markers, s)
		} else {
			regular = append(regular, s)
		}
	}
	// Segment i holds only records before the first entry of segment i+1.
	cut := 0
	var keep Entry
	for cut < len(regular)-1 {
		e, err := firstEntry(regular[cut+1])
		if err != nil {
			return out, err
		}
		first := max(e.Index, e.Start)
		if first > before {
			break
		}
		cut, keep = cut+1, e
	}
	if cut == 0 {
		return out, nil
	}
	out.Start = max(keep.Index, keep.Start)
	line, err := json.Marshal(Entry{Start: out.Start, Prev: keep.Prev, Pruned: true})
	if err != nil {
		return out, err
	}
	name := filepath.Join(dir, fmt.Sprintf("%020d%s%s", out.Start, prunedInfix, segmentExt))
	err = writeMarker(name, append(line, '\n'))
	if errors.Is(err, syscall.ENOSPC) && dropReserve(dir) {
		// The disk is full, and pruning is how the ledger frees it: the
		// reserve makes room for the marker (found from outside: neither
		// the server nor tenure audit prune could prune a full disk).
		err = writeMarker(name, append(line, '\n'))
	}
	if err != nil {
		return out, err
	}
	defer KeepReserve(dir)
	// The marker is in place: a crash from here on leaves old files that
	// still chain into it.
	for _, m := range markers {
		if m != name && firstIndexOf(m) < out.Start {
			if err := os.Remove(m); err != nil {
				return out, fmt.Errorf("ledger: %w", err)
			}
			out.Removed++
		}
	}
	for _, s := range regular[:cut] {
		if err := os.Remove(s); err != nil {
			return out, fmt.Errorf("ledger: %w", err)
		}
		out.Removed++
	}
	return out, syncDir(dir)
}

// writeMarker writes a pruned marker (a variable for tests).
var writeMarker = WriteFileAtomic

// reserveName is a file of reserveSize bytes a ledger dir keeps, and Prune
// deletes when the disk is too full to write its marker: the marker must
// be in place before the segments it stands for are removed.
const (
	reserveName = "space.reserve"
	reserveSize = 256 << 10
)

// KeepReserve creates dir's reserve file when it is missing and there is
// room for it (best effort: without room it is made by a later call).
func KeepReserve(dir string) {
	path := filepath.Join(dir, reserveName)
	if _, err := os.Stat(path); err == nil {
		return
	}
	if err := writeSynced(path, make([]byte, reserveSize)); err != nil {
		os.Remove(path)
	}
}

// dropReserve deletes dir's reserve file, reporting whether there was one.
func dropReserve(dir string) bool {
	return os.Remove(filepath.Join(dir, reserveName)) == nil
}

// PruneToSize prunes, as Prune does, the oldest whole segments until the
// ledger's files take at most maxBytes, or only the newest segment (which
// a running node appends to) is left. A node calls it on its own ledger
// as the files rotate, without verifying them first.
func PruneToSize(dir string, maxBytes int64) (Pruned, error) {
	segs, err := Segments(dir)
	if err != nil {
		return Pruned{}, err
	}
	var regular []string
	var sizes []int64
	total := int64(0)
	for _, s := range segs {
		st, err := os.Stat(s)
		if err != nil {
			return Pruned{}, fmt.Errorf("ledger: %w", err)
		}
		total += st.Size()
		if !isPrunedMarker(s) {
			regular, sizes = append(regular, s), append(sizes, st.Size())
		}
	}
	cut := 0
	for cut < len(regular)-1 && total > maxBytes {
		total -= sizes[cut]
		cut++
	}
	if cut == 0 {
		return Pruned{}, nil
	}
	// Segment cut is named after its first index: Prune removes exactly
	// the segments before it.
	return Prune(dir, firstIndexOf(regular[cut]))
}

// firstIndexOf is the index a segment or marker file is named after.
// FirstIndex is the index a segment file begins at, from its name.
func FirstIndex(path string) uint64 { return firstIndexOf(path) }

func firstIndexOf(path string) uint64 {
	name, _, _ := strings.Cut(filepath.Base(path), ".")
	n, _ := strconv.ParseUint(name, 10, 64)
	return n
}

func firstEntry(path string) (Entry, error) {
	var e Entry
	f, err := os.Open(path)
	if err != nil {
		return e, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 4096).ReadBytes('\n')
	if err != nil {
		return e, fmt.Errorf("ledger: %s: no complete first line: %w", filepath.Base(path), err)
	}
	if err := json.Unmarshal(line, &e); err != nil || (e.Index == 0) == (e.Start == 0) {
		return e, fmt.Errorf("ledger: %s: the first line is not a ledger entry", filepath.Base(path))
	}
	return e, nil
}

// WriteFileAtomic writes b to path (mode 0600) whole or not at all: to a
// temporary file beside it, synced, renamed into place, the directory
// synced.
func WriteFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := writeSynced(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ledger: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path) // not left behind, empty, by a full disk
		return fmt.Errorf("ledger: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("ledger: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}
