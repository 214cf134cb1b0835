package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// writtenStore is the Raft log store, telling the proposer when the
// leader's own copy of an entry it proposed is on disk, if the cluster
// has other voters (entrySlots.atWrite): from then the disk is free for
// the next entry while the followers write this one.
type writtenStore struct {
	*wal.WAL
	slots *entrySlots
	// fromLog is the FSM's last command entry applied from the log, and
	// diverged is told when Raft would delete it (see DeleteRange).
	fromLog  *atomic.Uint64
	diverged func(error)
	// failure is the last failed write of the log and when (nil once a
	// write succeeds): a full or failing disk, which Raft answers by
	// stepping down, so that callers would only hear of NOT_LEADER.
	failure atomic.Pointer[storeFailure]
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
	last, err := s.WAL.LastIndex()
	if err != nil {
		return err
	}
	if applied := s.fromLog.Load(); max >= last && min <= applied {
		err := fmt.Errorf("cluster: the leader's log conflicts with entries %d..%d of this node's, which it applied up to %d: %s",
			min, last, applied, foreignHistory)
		s.diverged(err)
		return err
	}
	return s.WAL.DeleteRange(min, max)
}

func (s *writtenStore) StoreLogs(logs []*raft.Log) error {
	if err := s.WAL.StoreLogs(logs); err != nil {
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

func (s *writtenStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

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
