package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// writtenStore is the Raft log store, telling the proposer when the
// leader's own copy of an entry it proposed is on disk: from then the
// disk is free for the next entry while Raft commits and applies this
// one, so the log write of entry N+1 overlaps the apply of entry N.
type writtenStore struct {
	*wal.WAL
	slots *entrySlots
}

func (s *writtenStore) StoreLogs(logs []*raft.Log) error {
	if err := s.WAL.StoreLogs(logs); err != nil {
		return err
	}
	s.slots.written(logs)
	return nil
}

func (s *writtenStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// entrySlots bounds the entries proposed and not yet written to the
// leader's log (Config.MaxInflightEntries). A slot is taken by the
// proposer and given back once, by whichever comes first: the leader's log
// write of the entry (recognised by its data, which Raft hands to the log
// store as the very slice it was given) or the end of the entry's future
// (applied, refused or abandoned).
type entrySlots struct {
	free chan struct{}
	mu   sync.Mutex
	held map[*byte]struct{}
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

func (s *entrySlots) written(logs []*raft.Log) {
	for _, l := range logs {
		if l.Type == raft.LogCommand && len(l.Data) > 0 {
			s.release(l.Data)
		}
	}
}
