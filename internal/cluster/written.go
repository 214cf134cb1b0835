package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// writtenStore is the Raft log (and stable) store, telling the proposer
// when the leader's own copy of an entry it proposed is on disk, if the
// cluster has other voters (entrySlots.atWrite): from then the disk is
// free for the next entry while the followers write this one.
//
// It reopens raft-wal when a write finds its last segment sealed: a
// segment that filled up while the disk was full could not be followed
// by a new one (the rotation failed), and raft-wal would refuse every
// write from then on, until a restart, although the disk has room again.
type writtenStore struct {
	// openWAL opens the log with meta as its index; room, when set, says
	// why a reopen would fail now (too little free disk), so that the
	// store is not closed for an open that cannot succeed.
	openWAL func(meta *metadb.BoltMetaDB) (*wal.WAL, error)
	room    func() error
	// mu guards wal and meta: read-locked by every call, locked to
	// reopen them.
	mu   sync.RWMutex
	wal  *wal.WAL
	meta *metadb.BoltMetaDB
	// broken is the reopen's error while the store could not be opened
	// again (the disk still full): writes retry the reopen, reads fail.
	broken error

	slots *entrySlots
	// fromLog is the FSM's last command entry applied from the log, and
	// diverged is told when Raft would delete it (see DeleteRange).
	fromLog  *atomic.Uint64
	diverged func(error)
	// failure is the last failed write of the log and when (nil once a
	// write succeeds): a full or failing disk, which Raft answers by
	// stepping down, so that callers would only hear of NOT_LEADER.
	failure atomic.Pointer[storeFailure]
	log     *slog.Logger
}

// openWritten opens the Raft log with openWAL.
func openWritten(openWAL func(meta *metadb.BoltMetaDB) (*wal.WAL, error), log *slog.Logger) (*writtenStore, error) {
	s := &writtenStore{openWAL: openWAL, log: log}
	var err error
	s.wal, s.meta, err = s.open()
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *writtenStore) open() (*wal.WAL, *metadb.BoltMetaDB, error) {
	meta := &metadb.BoltMetaDB{}
	w, err := s.openWAL(meta)
	if err != nil {
		meta.Close()
		return nil, nil, err
	}
	return w, meta, nil
}

// errNotOpen is the answer of a store that could not be opened again.
var errNotOpen = errors.New("cluster: the Raft log could not be opened again after a failed write")

// current returns the open store (read-locked: call done after).
func (s *writtenStore) current() (w *wal.WAL, done func(), err error) {
	s.mu.RLock()
	if s.broken != nil {
		err := s.broken
		s.mu.RUnlock()
		if err == wal.ErrClosed {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("%w: %w", errNotOpen, err)
	}
	return s.wal, s.mu.RUnlock, nil
}

// reopen closes w (nil: the store is not open) and opens the store
// again, unless another call already did. It reports whether the store
// is open, and if not because the disk has too little room, why.
func (s *writtenStore) reopen(w *wal.WAL) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.broken == wal.ErrClosed: // closed for good
		return false, nil
	case s.broken == nil && s.wal != w: // reopened already
		return true, nil
	case s.broken == nil:
		if s.room != nil {
			if err := s.room(); err != nil {
				return false, err // still sealed: the next write looks again
			}
		}
		s.log.Warn("reopening the Raft log: a write found its last segment sealed (a new segment could not be created, full disk?)")
		s.wal.Close()
		s.meta.Close()
	}
	nw, meta, err := s.open()
	if err != nil {
		s.log.Warn("the Raft log could not be opened again; the next write tries again", "err", err)
		s.broken = err
		return false, nil
	}
	s.log.Info("reopened the Raft log")
	s.wal, s.meta, s.broken = nw, meta, nil
	return true, nil
}

// close closes the store for good.
func (s *writtenStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	broken := s.broken
	s.broken = wal.ErrClosed // no write reopens it after this
	if broken != nil {
		return nil // closed already
	}
	return errors.Join(s.wal.Close(), s.meta.Close())
}

// storeFailure is a failed write of the Raft log.
type storeFailure struct {
	err error
	at  time.Time
}

// recentFailure returns the log's last write error if it failed within
// the last window and has not written since.
func (s *writtenStore) recentFailure(window time.Duration) error {
	if f := s.failure.Load(); f != nil && time.Since(f.at) < window {
		return f.err
	}
	return nil
}

// DeleteRange refuses to cut off the end of the log at or below the last
// command entry the state machine applied from it. Raft cuts the end of a
// follower's log where it conflicts with the leader's, which for applied
// (so committed) entries never happens in one cluster: this node holds
// history the cluster does not have, such as a wiped member restarted
// without --peers or --join that bootstrapped a cluster of its own and
// granted leases there before the old leader reached it. Taking the
// leader's entries now would leave its state a mix of both histories
// while the log says otherwise; the node stops instead (diverged), its
// state as it was. Trimming the start of the log (after a snapshot), and
// clearing it after the state was restored from the leader's snapshot,
// go ahead.
func (s *writtenStore) DeleteRange(min, max uint64) error {
	w, done, err := s.current()
	if err != nil {
		return err
	}
	defer done()
	last, err := w.LastIndex()
	if err != nil {
		return err
	}
	if s.fromLog == nil { // not guarded yet: forceNewCluster compacting the log
		return w.DeleteRange(min, max)
	}
	if applied := s.fromLog.Load(); max >= last && min <= applied {
		err := fmt.Errorf("cluster: the leader's log conflicts with entries %d..%d of this node's, which it applied up to %d: %s",
			min, last, applied, foreignHistory)
		s.diverged(err)
		return err
	}
	return w.DeleteRange(min, max)
}

func (s *writtenStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) > 0 {
		if err := s.dropBehindSnapshot(logs[0].Index); err != nil {
			s.failure.Store(&storeFailure{err: err, at: time.Now()})
			return err
		}
	}
	w, err := s.storeLogs(logs)
	if errors.Is(err, wal.ErrSealed) || errors.Is(err, errNotOpen) {
		if ok, room := s.reopen(w); ok {
			_, err = s.storeLogs(logs)
		} else if room != nil {
			// Said, or the answer is only "segment is sealed": the
			// space freed may not be enough for a new segment.
			err = fmt.Errorf("%w: a new log segment needs more room (%v)", err, room)
		}
	}
	if err != nil {
		s.failure.Store(&storeFailure{err: err, at: time.Now()})
		return err
	}
	if s.failure.Load() != nil {
		s.failure.Store(nil)
	}
	if s.slots.atWrite.Load() {
		s.slots.written(logs)
	}
	return nil
}

// dropBehindSnapshot clears the log when Raft appends next after its
// end: Raft appends after the last entry it has, in the log or in its
// snapshot, so the snapshot holds every entry up to next. The log then
// ends before the snapshot, which Raft leaves when the node stops while
// installing a leader's snapshot (the snapshot is written, the log it
// replaces not yet cleared) or when the log lost its tail; raft-wal would
// refuse every append after it for good. Raft clears the log itself after
// installing a snapshot into a store like this one.
func (s *writtenStore) dropBehindSnapshot(next uint64) error {
	w, done, err := s.current()
	if err != nil {
		return nil // storeLogs reports it, or reopens the store
	}
	defer done()
	last, err := w.LastIndex()
	if err != nil || last == 0 || next <= last+1 {
		return nil
	}
	first, err := w.FirstIndex()
	if err != nil {
		return err
	}
	if s.log != nil {
		s.log.Warn("the Raft log ends before the snapshot that holds the state (a stop while installing a snapshot, "+
			"or a lost log tail): clearing the entries the snapshot holds", "first", first, "last", last, "next", next)
	}
	if err := w.DeleteRange(first, last); err != nil {
		return fmt.Errorf("cluster: clearing the Raft log's entries %d..%d, which the snapshot holds: %w", first, last, err)
	}
	return nil
}

// storeLogs writes logs to the open store, which it returns (nil: not
// open).
func (s *writtenStore) storeLogs(logs []*raft.Log) (*wal.WAL, error) {
	w, done, err := s.current()
	if err != nil {
		return nil, err
	}
	defer done()
	return w, w.StoreLogs(logs)
}

func (s *writtenStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *writtenStore) FirstIndex() (uint64, error) {
	w, done, err := s.current()
	if err != nil {
		return 0, err
	}
	defer done()
	return w.FirstIndex()
}

func (s *writtenStore) LastIndex() (uint64, error) {
	w, done, err := s.current()
	if err != nil {
		return 0, err
	}
	defer done()
	return w.LastIndex()
}

func (s *writtenStore) GetLog(index uint64, l *raft.Log) error {
	w, done, err := s.current()
	if err != nil {
		return err
	}
	defer done()
	return w.GetLog(index, l)
}

// IsMonotonic tells Raft that the log takes no gaps (raft-wal's).
func (s *writtenStore) IsMonotonic() bool { return true }

func (s *writtenStore) Set(key, val []byte) error {
	w, done, err := s.current()
	if err != nil {
		return err
	}
	defer done()
	return w.Set(key, val)
}

func (s *writtenStore) Get(key []byte) ([]byte, error) {
	w, done, err := s.current()
	if err != nil {
		return nil, err
	}
	defer done()
	return w.Get(key)
}

func (s *writtenStore) SetUint64(key []byte, val uint64) error {
	w, done, err := s.current()
	if err != nil {
		return err
	}
	defer done()
	return w.SetUint64(key, val)
}

func (s *writtenStore) GetUint64(key []byte) (uint64, error) {
	w, done, err := s.current()
	if err != nil {
		return 0, err
	}
	defer done()
	return w.GetUint64(key)
}

// entrySlots bounds the entries proposed and not yet written to the
// leader's log (Config.MaxInflightEntries). A slot is taken by the
// proposer and given back once, by whichever comes first: the leader's log
// write of the entry if the cluster has other voters, or else the start
// of its apply (the entry is recognised by its data, which Raft hands to
// the log store and the FSM as the very slice it was given), or the end
// of the entry's future (applied, refused or abandoned).
//
// A lone voter commits an entry the moment its log write returns, and
// freeing the slot then lost time twice over (measured): Raft's leader
// loop, seeing the next entry and the commit at once, picks one at random,
// so half the commits waited behind the next entry's fsync; and with
// callers not yet answered, the next entry carried only the few commands
// that happened to be waiting. Freed when the FSM starts to apply the
// entry, the commit has been handed over and the next entry's fsync still
// overlaps the apply.
type entrySlots struct {
	free chan struct{}
	// atWrite frees slots at the leader's log write: the node leads
	// other voters, whose writes then overlap the leader's next one.
	atWrite atomic.Bool
	mu      sync.Mutex
	held    map[*byte]struct{}
}

func newEntrySlots(n int) *entrySlots {
	return &entrySlots{free: make(chan struct{}, n), held: map[*byte]struct{}{}}
}

// take returns the channel to send on to take a slot; hold records the
// entry that has it.
func (s *entrySlots) take() chan<- struct{} { return s.free }

func (s *entrySlots) hold(data []byte) {
	s.mu.Lock()
	s.held[&data[0]] = struct{}{}
	s.mu.Unlock()
}

// put gives back a slot taken without proposing an entry.
func (s *entrySlots) put() { <-s.free }

// release gives back the slot of an entry if it still holds one.
func (s *entrySlots) release(data []byte) {
	s.mu.Lock()
	_, ok := s.held[&data[0]]
	delete(s.held, &data[0])
	s.mu.Unlock()
	if ok {
		<-s.free
	}
}

// written gives back the slots of logs, written to the leader's log or
// about to be applied.
func (s *entrySlots) written(logs []*raft.Log) {
	for _, l := range logs {
		if l.Type == raft.LogCommand && len(l.Data) > 0 {
			s.release(l.Data)
		}
	}
}
