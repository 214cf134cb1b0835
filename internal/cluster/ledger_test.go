package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/tenurehq/tenure/internal/ledger"
)

// TestLedgerSurvivesRestart: the durable ledger holds every record once,
// across a snapshot and a restart that re-applies the log after it.
func TestLedgerSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	for i := range 5 {
		if out := acquire(t, n, fmt.Sprintf("r/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if out := acquire(t, n, fmt.Sprintf("s/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	pub := n.fsm.m.PublicKey()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open(t, dir) // re-applies everything after the snapshot
	if out := acquire(t, n, "after", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	n.fsm.mu.RLock()
	last := n.fsm.m.Chain().Next - 1
	n.fsm.mu.RUnlock()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	ldir := filepath.Join(dir, ledger.DirName)
	stored, err := ledger.ReadPublicKey(ldir)
	if err != nil || !stored.Equal(pub) {
		t.Fatalf("stored public key %x, %v; want %x", stored, err, pub)
	}
	anchor, err := SnapshotAnchor(dir)
	if err != nil || anchor == nil || anchor.Next < 2 {
		t.Fatalf("snapshot anchor %+v, %v", anchor, err)
	}
	rep, err := ledger.Verify(ldir, ledger.VerifyOptions{PublicKey: pub, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != 1 || rep.Last != last || rep.Records != last || len(rep.Gaps) != 0 || rep.Torn != nil || rep.Anchored != anchor.Next-1 {
		t.Fatalf("ledger %+v; want records 1..%d exactly once, anchored at %d", rep, last, anchor.Next-1)
	}
}

// TestLedgerResumesAfterSnapshot: a node whose ledger lacks what its
// snapshot covers (here: the files were lost; in a cluster: a member that
// caught up from the leader's snapshot) starts the ledger again at the
// snapshot with a marker, and the records after it verify.
func TestLedgerResumesAfterSnapshot(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	snapNext := snapshotBetween(t, n)
	pub := n.fsm.m.PublicKey()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	ldir := filepath.Join(dir, ledger.DirName)
	if err := os.RemoveAll(ldir); err != nil {
		t.Fatal(err)
	}
	n = open(t, dir) // restores the snapshot, re-applies the log after it
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	stored, err := ledger.ReadPublicKey(ldir) // saved from the snapshot
	if err != nil || !stored.Equal(pub) {
		t.Fatalf("stored key %x, %v", stored, err)
	}
	anchor, err := SnapshotAnchor(dir)
	if err != nil || anchor == nil || anchor.Next != snapNext {
		t.Fatalf("snapshot anchor %+v, %v; want next %d", anchor, err, snapNext)
	}
	rep, err := ledger.Verify(ldir, ledger.VerifyOptions{PublicKey: pub, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Gaps) != 1 || rep.Gaps[0] != (ledger.Gap{From: 1, To: snapNext - 1}) || rep.First != snapNext || rep.Records == 0 || rep.Anchored != snapNext-1 {
		t.Fatalf("ledger %+v; want a gap 1..%d, then the records after the snapshot", rep, snapNext-1)
	}
}

// TestLedgerSyncCoversQueuedWrites: the ledger is written behind the
// FSM, but a sync (what a snapshot starts with) returns only once the
// files hold every record applied before it.
func TestLedgerSyncCoversQueuedWrites(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	defer n.Close()
	for i := range 20 {
		if out := acquire(t, n, fmt.Sprintf("r/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	n.fsm.mu.RLock()
	last := n.fsm.m.Chain().Next - 1
	pub := n.fsm.m.PublicKey()
	n.fsm.mu.RUnlock()
	if err := n.fsm.ledger.sync(); err != nil {
		t.Fatal(err)
	}
	rep, err := ledger.Verify(filepath.Join(dir, ledger.DirName), ledger.VerifyOptions{PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	// Background commands (the leader publishing itself) may add more.
	if rep.First != 1 || rep.Last < last || rep.Records != rep.Last {
		t.Fatalf("ledger %+v after sync; want records 1..%d at least", rep, last)
	}
}

// TestLedgerFailureHoldsSnapshots: once the ledger cannot be written,
// snapshots fail, so that Raft keeps the log the ledger can be refilled
// from after a restart.
func TestLedgerFailureHoldsSnapshots(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	if n.LedgerStopped() {
		t.Fatal("ledger stopped before any failure")
	}
	n.fsm.ledger.fail(errors.New("disk full"))
	if out := acquire(t, n, "r", "w", time.Minute, 0); out.Err != nil {
		t.Fatalf("writes go on: %v", out.Err)
	}
	if !n.LedgerStopped() || n.Err() != nil {
		t.Fatalf("after a disk's failure: ledger stopped %v, node stopped %v; want the ledger only", n.LedgerStopped(), n.Err())
	}
	if _, _, err := n.Snapshot(); err == nil || !strings.Contains(err.Error(), "ledger") {
		t.Fatalf("Snapshot with a failed ledger: %v", err)
	}
}

func TestSnapshotAnchorReadsOnlyIntactSnapshots(t *testing.T) {
	if a, err := SnapshotAnchor(t.TempDir()); a != nil || err != nil {
		t.Fatalf("no snapshot: %+v, %v", a, err)
	}
	dir := t.TempDir()
	n := open(t, dir)
	if out := acquire(t, n, "r", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n.fsm.mu.RLock()
	want := n.fsm.m.Chain()
	n.fsm.mu.RUnlock()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := SnapshotAnchor(dir)
	if err != nil || a == nil || a.Next != want.Next || a.Head != want.Head {
		t.Fatalf("anchor %+v, %v; want next %d", a, err, want.Next)
	}
	states, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if len(states) != 1 {
		t.Fatalf("snapshots: %v", states)
	}
	b, err := os.ReadFile(states[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(states[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := SnapshotAnchor(dir); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("corrupt snapshot: %v", err)
	}
}

// TestLedgerStaysWithinBudget: with LedgerMaxBytes the node prunes its
// oldest ledger files as they rotate; what is left verifies up to the
// chain head, the pruned range reported as such, across a restart.
func TestLedgerStaysWithinBudget(t *testing.T) {
	dir := t.TempDir()
	const segSize, budget = 2048, 8192
	start := func() *Node {
		return openWith(t, dir, func(cfg *Config) { cfg.LedgerSegmentSize, cfg.LedgerMaxBytes = segSize, budget })
	}
	ldir := filepath.Join(dir, ledger.DirName)
	check := func(n *Node, when string) {
		t.Helper()
		if err := n.fsm.ledger.sync(); err != nil {
			t.Fatal(err)
		}
		n.fsm.mu.RLock()
		last, pub := n.fsm.m.Chain().Next-1, n.fsm.m.PublicKey()
		n.fsm.mu.RUnlock()
		segs, err := ledger.Segments(ldir)
		if err != nil {
			t.Fatal(err)
		}
		total := int64(0)
		for _, s := range segs {
			st, err := os.Stat(s)
			if err != nil {
				t.Fatal(err)
			}
			total += st.Size()
		}
		// Pruning runs as a segment starts and leaves room for it to
		// grow to a segment's size (and a line past it).
		if total > budget+512 {
			t.Fatalf("%s: the ledger takes %d bytes in %d files, budget %d", when, total, len(segs), budget)
		}
		rep, err := ledger.Verify(ldir, ledger.VerifyOptions{PublicKey: pub})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if rep.Last < last || len(rep.Gaps) != 1 || !rep.Gaps[0].Pruned || rep.First <= 1 {
			t.Fatalf("%s: ledger %+v; want records up to %d after a pruned range", when, rep, last)
		}
	}
	n := start()
	for i := range 80 {
		if out := acquire(t, n, fmt.Sprintf("r/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	check(n, "running")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = start()
	defer n.Close()
	for i := range 40 {
		if out := acquire(t, n, fmt.Sprintf("s/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	check(n, "after a restart")
}

// TestFeedRefilledAfterRestart: a node restarted from a snapshot reads
// the history before it back from its ledger files, so that History and
// a Watch resuming from an old index reach past the snapshot; a node
// whose files lack that history starts its feed at the snapshot.
func TestFeedRefilledAfterRestart(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	snapNext := snapshotBetween(t, n)
	head := n.Feed().Head()
	var before []ledger.Hash
	for i := uint64(1); i <= head; i++ {
		s, ok := n.Feed().At(i)
		if !ok {
			t.Fatalf("record %d not in the feed before the restart", i)
		}
		before = append(before, s.Hash)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n = open(t, dir)
	if out := acquire(t, n, "after", "w", time.Minute, 0); out.Err != nil { // the log after the snapshot is applied
		t.Fatal(out.Err)
	}
	if got := n.Feed().Oldest(); got != 1 {
		t.Fatalf("oldest record in the feed after the restart: %d; want 1", got)
	}
	for i, h := range before {
		if s, ok := n.Feed().At(uint64(i) + 1); !ok || s.Hash != h {
			t.Fatalf("record %d after the restart: %v, hash %x; want %x", i+1, ok, s.Hash, h)
		}
	}
	if recs, _, err := n.Feed().Read(0, 1000); err != nil || len(recs) <= len(before) {
		t.Fatalf("Watch from the start after the restart: %d records, %v; want more than %d", len(recs), err, len(before))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// Without the files, the feed starts where the snapshot ends.
	if err := os.RemoveAll(filepath.Join(dir, ledger.DirName)); err != nil {
		t.Fatal(err)
	}
	n = open(t, dir)
	defer n.Close()
	if out := acquire(t, n, "again", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	if got := n.Feed().Oldest(); got < snapNext {
		t.Fatalf("oldest record in the feed without ledger files: %d; want ≥ %d (after the snapshot)", got, snapNext)
	}
	if _, _, err := n.Feed().Read(0, 10); err == nil {
		t.Fatal("Watch from index 0 without the history: no error; want compacted")
	}
}

// waitFailed waits for n to stop on its own and returns why.
func waitFailed(t *testing.T, n *Node) error {
	t.Helper()
	select {
	case <-n.Failed():
		return n.Err()
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not stop")
		return nil
	}
}

// TestRefusesALogThatLostHistory: a node whose Raft log lost entries it
// had applied (the wal directory deleted) stops instead of serving: its
// ledger files show the history went further, and serving would grant
// acknowledged leases again with lower fences (found from outside). With
// its snapshots gone too, it does not even bootstrap a registrar anew
// (another key, fences from 1).
func TestRefusesALogThatLostHistory(t *testing.T) {
	for _, lost := range [][]string{{"wal"}, {"wal", "snapshots"}} {
		t.Run(strings.Join(lost, "+"), func(t *testing.T) {
			dir := t.TempDir()
			n := open(t, dir)
			snapshotBetween(t, n)
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			for _, sub := range lost {
				if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
					t.Fatal(err)
				}
			}
			n = openNoWait(t, dir)
			defer n.Close()
			if err := waitFailed(t, n); err == nil || !strings.Contains(err.Error(), "missing from the Raft log") {
				t.Fatalf("stopped with %v; want the missing entries named", err)
			}
			n.fsm.mu.RLock()
			bootstrapped := n.fsm.m.Bootstrapped()
			n.fsm.mu.RUnlock()
			if n.leader.Load() != nil || len(lost) > 1 && bootstrapped {
				t.Fatalf("serves a term (%v) or bootstrapped a registrar over the lost history (%v)", n.leader.Load() != nil, bootstrapped)
			}
		})
	}
}

// TestRefusesAnotherHistory: a node whose log derives other records than
// its ledger files hold (a damaged or replaced log) stops.
func TestRefusesAnotherHistory(t *testing.T) {
	short, long := t.TempDir(), t.TempDir()
	a := open(t, short)
	if out := acquire(t, a, "a", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := open(t, long)
	for i := range 5 {
		if out := acquire(t, b, fmt.Sprintf("b/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// b's data dir with a's (shorter, other) ledger files.
	if err := os.RemoveAll(filepath.Join(long, ledger.DirName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(short, ledger.DirName), filepath.Join(long, ledger.DirName)); err != nil {
		t.Fatal(err)
	}
	b = openNoWait(t, long)
	defer b.Close()
	err := waitFailed(t, b)
	if !errors.Is(err, ledger.ErrOtherHistory) {
		t.Fatalf("stopped with %v; want another history named", err)
	}
}

// TestDamagedFilesAreNamed: a node whose snapshot or Raft log index is
// damaged refuses to start and says which files and what to do (found
// from outside: "failed to load any existing snapshots", "file exists").
func TestDamagedFilesAreNamed(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	if out := acquire(t, n, "r", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = dir, "127.0.0.1:0"

	meta := filepath.Join(dir, "wal", "wal-meta.db")
	b, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(meta); err != nil {
		t.Fatal(err)
	}
	if n, err := Open(cfg); err == nil {
		n.Close()
		t.Fatal("opened without wal-meta.db")
	} else if !strings.Contains(err.Error(), "wal-meta.db, is missing or out of step") {
		t.Fatalf("without wal-meta.db: %v", err)
	}
	if err := os.WriteFile(meta, b, 0o600); err != nil {
		t.Fatal(err)
	}

	// Every snapshot gone while the log was trimmed after one (as Raft
	// does past its trailing entries): named, not Raft's panic.
	w, err := wal.Open(filepath.Join(dir, "wal"), wal.WithMetaStore(&metadb.BoltMetaDB{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	snapDir := filepath.Join(dir, "snapshots")
	if err := os.Rename(snapDir, snapDir+".aside"); err != nil {
		t.Fatal(err)
	}
	if n, err := Open(cfg); err == nil {
		n.Close()
		t.Fatal("opened without its snapshots")
	} else if !strings.Contains(err.Error(), "no snapshot in "+snapDir+" holds what came before it") {
		t.Fatalf("without snapshots: %v", err)
	}
	if err := os.RemoveAll(snapDir); err != nil { // the refused start made it again
		t.Fatal(err)
	}
	if err := os.Rename(snapDir+".aside", snapDir); err != nil {
		t.Fatal(err)
	}

	states, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if len(states) == 0 {
		t.Fatal("no snapshot written")
	}
	for _, s := range states {
		if err := os.WriteFile(s, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := Open(cfg); err == nil {
		n.Close()
		t.Fatal("opened with a garbled snapshot")
	} else if !strings.Contains(err.Error(), "no snapshot in "+filepath.Join(dir, "snapshots")+" could be read") {
		t.Fatalf("with a garbled snapshot: %v", err)
	}
}

// TestLedgerHealsAfterADiskError: a ledger stopped by a disk's error
// writes again once the cause is gone, refilled from the feed: no record
// missing, snapshots allowed again (found from outside: one brief disk
// full stopped it until a restart, and the Raft log grew meanwhile).
func TestLedgerHealsAfterADiskError(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	defer n.Close()
	for i := range 3 {
		if out := acquire(t, n, fmt.Sprintf("before/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	d := n.fsm.ledger
	d.fail(errors.New("write: no space left on device"))
	for i := range 3 {
		if out := acquire(t, n, fmt.Sprintf("during/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	if !n.LedgerStopped() || n.LedgerNeedsRestart() {
		t.Fatalf("stopped %v, needs a restart %v; want stopped and tried again", n.LedgerStopped(), n.LedgerNeedsRestart())
	}
	res := make(chan error, 1) // what the healing goroutine sends every few seconds
	d.ops <- ledgerOp{heal: res}
	if err := <-res; err != nil {
		t.Fatalf("heal: %v", err)
	}
	if n.LedgerStopped() {
		t.Fatal("still stopped after healing")
	}
	if out := acquire(t, n, "after", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatalf("snapshot after healing: %v", err)
	}
	n.fsm.mu.RLock()
	last := n.fsm.m.Chain().Next - 1
	pub := n.fsm.m.PublicKey()
	n.fsm.mu.RUnlock()
	rep, err := ledger.Verify(filepath.Join(dir, ledger.DirName), ledger.VerifyOptions{PublicKey: pub})
	if err != nil || rep.First != 1 || rep.Last < last || len(rep.Gaps) != 0 {
		t.Fatalf("ledger after healing: %+v, %v; want records 1..%d without a gap", rep, err, last)
	}
}

// snapshotBetween acquires r/0..4, snapshots, then acquires s/0..2, and
// returns the index of the first record after the snapshot.
func snapshotBetween(t *testing.T, n *Node) (snapNext uint64) {
	t.Helper()
	for i := range 5 {
		if out := acquire(t, n, fmt.Sprintf("r/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n.fsm.mu.RLock()
	snapNext = n.fsm.m.Chain().Next
	n.fsm.mu.RUnlock()
	for i := range 3 {
		if out := acquire(t, n, fmt.Sprintf("s/%d", i), "w", time.Minute, 0); out.Err != nil {
			t.Fatal(out.Err)
		}
	}
	return snapNext
}
