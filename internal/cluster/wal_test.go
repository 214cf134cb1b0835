package cluster

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"github.com/tenurehq/tenure/internal/registrar"
)

// A follower that loses an uncommitted suffix of its log (Raft truncates
// the tail when a new leader's log disagrees) and is then killed must open
// its log again. raft-wal v0.4.0 marked the truncated segment sealed
// without writing its index block, and every later start panicked with
// "sealed segment has no index block" (hashicorp/raft-wal#31); the fault
// tests (internal/fault) hit it after a leader kill. Fixed by v0.4.1.
func TestLogReopensAfterTailTruncation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	open := func() (*wal.WAL, *metadb.BoltMetaDB) {
		meta := &metadb.BoltMetaDB{}
		w, err := wal.Open(dir, wal.WithMetaStore(meta))
		if err != nil {
			t.Fatalf("opening the log: %v", err)
		}
		return w, meta
	}
	w, meta := open()
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("entry")})
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteRange(8, 10); err != nil { // the tail truncation
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{{Index: 8, Term: 2, Type: raft.LogCommand, Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	// No clean shutdown: a crash leaves the files as they are.
	_ = w.Close()
	_ = meta.Close()

	w, meta = open()
	defer meta.Close()
	defer w.Close()
	var l raft.Log
	if err := w.GetLog(1, &l); err != nil {
		t.Fatalf("entry 1 after reopening: %v", err)
	}
	if err := w.GetLog(8, &l); err != nil || string(l.Data) != "new" || l.Term != 2 {
		t.Fatalf("entry 8 after reopening: %v %+v", err, l)
	}
	if last, _ := w.LastIndex(); last != 8 {
		t.Fatalf("last index %d after reopening, want 8", last)
	}
}

// The log store refuses to cut off its end at or below the last command
// entry the state machine applied from it (the node's history differs
// from the leader's) and reports it; an uncommitted tail above it, the
// start of the log, and the whole log once the state came from a
// snapshot may go.
func TestLogKeepsAppliedEntries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithMetaStore(meta))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Close(); meta.Close() }()
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("entry")})
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	var fromLog atomic.Uint64
	var reported []error
	s := &writtenStore{wal: w, slots: newEntrySlots(1), fromLog: &fromLog, diverged: func(err error) { reported = append(reported, err) }}
	fromLog.Store(6)
	if err := s.DeleteRange(9, 10); err != nil || len(reported) != 0 { // not applied yet
		t.Fatalf("cutting an unapplied tail: %v, reported %v", err, reported)
	}
	if err := s.DeleteRange(5, 8); err == nil || len(reported) != 1 {
		t.Fatalf("cutting applied entries: %v, reported %v", err, reported)
	}
	if last, _ := w.LastIndex(); last != 8 {
		t.Fatalf("the refused cut changed the log: last index %d", last)
	}
	if err := s.DeleteRange(1, 3); err != nil { // compaction after a snapshot
		t.Fatalf("trimming the start: %v", err)
	}
	fromLog.Store(0) // the state was restored from the leader's snapshot
	if err := s.DeleteRange(4, 8); err != nil || len(reported) != 1 {
		t.Fatalf("clearing the log after a restore: %v, reported %v", err, reported)
	}
}

// failingFiler is raft-wal's segment filer whose Create fails while fail
// is set: a new segment cannot be made (a full disk).
type failingFiler struct {
	types.SegmentFiler
	fail atomic.Bool
}

func (f *failingFiler) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	if f.fail.Load() {
		return nil, errors.New("no space left on device (injected)")
	}
	return f.SegmentFiler.Create(info)
}

// openFailing opens a store of 32 KiB segments over a filer whose
// segment creation a test can make fail (a full disk), closed when the
// test ends.
func openFailing(t *testing.T) (*writtenStore, *failingFiler) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ff := &failingFiler{SegmentFiler: segment.NewFiler(dir, fs.New())}
	s, err := openWritten(func(meta *metadb.BoltMetaDB) (*wal.WAL, error) {
		return wal.Open(dir, wal.WithMetaStore(meta), wal.WithSegmentFiler(ff), wal.WithSegmentSize(32<<10))
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close() })
	s.slots = newEntrySlots(1)
	return s, ff
}

// A segment that fills up while no new one can be created leaves raft-wal
// refusing every later write ("segment is sealed") until a restart, even
// once the disk has room again (found from outside with a full disk). The
// store reopens the log on that error: the writes fail while the disk is
// full and go on by themselves after, nothing written lost.
func TestLogWritesAgainAfterAFailedRotation(t *testing.T) {
	s, ff := openFailing(t)
	entry := func(i uint64) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 1000)}
	}
	ff.fail.Store(true)
	var err error
	next := uint64(1)
	for ; next < 500; next++ {
		if err = s.StoreLogs([]*raft.Log{entry(next)}); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("500 entries of 1 KB written to 32 KB segments without a new segment")
	}
	if s.recentFailure(time.Minute) == nil {
		t.Error("the failed write is not reported")
	}
	if err := s.StoreLogs([]*raft.Log{entry(next)}); err == nil {
		t.Fatal("written while no segment can be created")
	}
	ff.fail.Store(false) // room again
	for last := next + 50; next <= last; next++ {
		if err := s.StoreLogs([]*raft.Log{entry(next)}); err != nil {
			t.Fatalf("entry %d, after the disk has room again: %v", next, err)
		}
	}
	if s.recentFailure(time.Minute) != nil {
		t.Error("a failure is still reported after writes succeed")
	}
	for i := uint64(1); i < next; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, entry(i).Data) {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

// A node whose Raft log ends before its newest snapshot must start and
// take writes. Raft leaves that state when a follower is killed while it
// installs the leader's snapshot (the snapshot is on disk, the log it
// replaces not yet cleared: restoring a large state takes seconds), or
// when the log's tail was lost. Raft then appends after the snapshot,
// which raft-wal refused for good ("non-monotonic log entries"): the node
// ran, answering UNAVAILABLE, and never led or followed again.
func TestLogEndingBeforeTheSnapshot(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	var leases []registrar.Lease
	for i := 0; i < 5; i++ {
		out := acquire(t, n, "orders/"+string(rune('a'+i)), "w1", time.Minute, 0)
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		leases = append(leases, *out.Lease)
	}
	snapIdx, _, err := n.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// Cut the log back to before the snapshot.
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(filepath.Join(dir, "wal"), wal.WithMetaStore(meta))
	if err != nil {
		t.Fatal(err)
	}
	last, _ := w.LastIndex()
	if err := w.DeleteRange(3, last); err != nil {
		t.Fatal(err)
	}
	if last, _ := w.LastIndex(); last >= snapIdx {
		t.Fatalf("log ends at %d, snapshot at %d", last, snapIdx)
	}
	w.Close()
	meta.Close()

	n = open(t, dir)
	defer n.Close()
	for _, want := range leases {
		if l, err := get(t, n, want.ID); err != nil || l.Fence != want.Fence {
			t.Fatalf("lease %s after restart: %+v, %v", want.ID, l, err)
		}
	}
	if out := acquire(t, n, "orders/after", "w1", time.Minute, 0); out.Err != nil {
		t.Fatalf("acquire after restart: %v", out.Err)
	}
}

// While a sealed log waits for room for a new segment, its write error
// says how much it needs: the answer was only "segment is sealed", and
// an operator who freed some space (less than the new segment's) saw
// "free space or fix the disk (it recovers by itself)" and no recovery.
func TestLogSaysWhatRoomItNeeds(t *testing.T) {
	s, ff := openFailing(t)
	var noRoom atomic.Bool
	s.room = func() error {
		if noRoom.Load() {
			return errors.New("1000 bytes free in wal, 2000 needed")
		}
		return nil
	}
	entry := func(i uint64) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 1000)}
	}
	ff.fail.Store(true)
	noRoom.Store(true)
	var err error
	next := uint64(1)
	for ; next < 500; next++ {
		if err = s.StoreLogs([]*raft.Log{entry(next)}); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("500 entries of 1 KB written to 32 KB segments without a new segment")
	}
	err = s.StoreLogs([]*raft.Log{entry(next)})
	if err == nil || !strings.Contains(err.Error(), "2000 needed") {
		t.Fatalf("write while the disk has too little room: %v, want the room it needs", err)
	}
	if f := s.recentFailure(time.Minute); f == nil || !strings.Contains(f.Error(), "2000 needed") {
		t.Fatalf("failure reported: %v, want the room it needs", f)
	}
	ff.fail.Store(false)
	noRoom.Store(false)
	if err := s.StoreLogs([]*raft.Log{entry(next)}); err != nil {
		t.Fatalf("after the disk has room again: %v", err)
	}
}
