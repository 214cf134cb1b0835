package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// WaitResult is how a queued acquire ended: granted (Lease set) or its
// wait ran out (Err is a *registrar.HeldError with WaitEnded set).
type WaitResult struct {
	Lease registrar.Lease
	Err   error
}

// maxResolved bounds the resolutions kept for waiters nobody awaits yet.
const maxResolved = 1 << 16

// fsm adapts the state machine to raft.BatchingFSM. Every field below mu
// is guarded by it; queries take the read lock.
type fsm struct {
	cfg statemachine.Config

	mu sync.RWMutex
	m  *statemachine.Machine
	// maxTick is the highest tick of any applied command (a command that
	// emits no record still moved time forward for its caller). It is
	// written under mu by ApplyBatch and Restore and read without mu: the
	// proposer stamps the next entry while the FSM applies the last one.
	maxTick atomicTick
	// maxWall is the latest wall time of any applied command, kept like
	// maxTick: a new term's wall clock starts no earlier (term.wall).
	// wallSeen is maxWall with the local (monotonic) time it was applied.
	maxWall  atomic.Int64
	wallSeen atomic.Pointer[wallReading]
	// bumpFences, set while forceNewCluster runs, raises the next fence
	// in the snapshots taken (the one Raft's recovery writes).
	bumpFences uint64
	// applied is the highest Raft index the FSM has seen (see Node.Read).
	applied atomic.Uint64
	// fromLog is the index of the last command entry applied since the
	// state was last restored from a snapshot (0: none): the state holds
	// its effects, so the log must never lose it (writtenStore.DeleteRange).
	fromLog atomic.Uint64
	// tag is the cluster tag of the state (the registrar public key's
	// first 8 bytes; nil before bootstrap), which the proposer stamps on
	// every entry (logpb.Batch.Cluster).
	tag atomic.Pointer[[]byte]
	// halted is set once an entry of another cluster came: nothing is
	// applied after it, and onDiverged is told.
	halted     bool
	onDiverged func(error)
	// waits holds a channel for each waiter somebody awaits.
	waits map[uint64]chan WaitResult
	// resolved holds resolutions that arrived before anybody awaited them,
	// bounded by resolvedOrder (oldest evicted first).
	resolved      map[uint64]WaitResult
	resolvedOrder []uint64
	// changed is closed (and replaced) after every applied batch.
	changed chan struct{}

	feed *Feed
	// ledger, when set, receives every sealed record: the durable ledger
	// in the data dir (ledger.go), written on a goroutine of its own. Raft
	// calls ApplyBatch, Snapshot and Restore one at a time, so the
	// ledger's queue holds their requests in apply order.
	ledger *durableLedger
	// applying, when set, is handed each batch of logs before it is
	// applied (entrySlots.written).
	applying func([]*raft.Log)
	// lastSealed is how many records the last batch sealed: the next
	// batch's list starts with that much room (growing it was a tenth of
	// a busy node's allocated bytes).
	lastSealed int
	// observe, when set, sees every applied command's result (metrics),
	// but those of entries up to replayed: the log held them at start.
	observe  func(m *statemachine.Machine, cmd *logpb.Command, res statemachine.Result)
	replayed uint64
	// stamps holds the rules stamped on the last command entry applied,
	// and on the last one of an earlier term (Node.RulesBefore).
	stamps atomic.Pointer[stampPair]
}

// stampPair is the rules of the last command entry applied (last) and of
// the last entry of an earlier term than its (prev).
type stampPair struct{ last, prev *termRules }

// noteStamp records the rules stamped on an applied entry of term.
func (f *fsm) noteStamp(term uint64, rules uint32) {
	cur := f.stamps.Load()
	next := &stampPair{last: &termRules{term: term, rules: rules}}
	if cur != nil {
		next.prev = cur.prev
		if cur.last.term < term {
			next.prev = cur.last
		}
	}
	f.stamps.Store(next)
}

func newFSM(cfg statemachine.Config, feed *Feed) *fsm {
	return &fsm{
		cfg:      cfg,
		m:        statemachine.New(cfg),
		waits:    make(map[uint64]chan WaitResult),
		resolved: make(map[uint64]WaitResult),
		changed:  make(chan struct{}),
		feed:     feed,
	}
}

// Apply applies a single entry (raft.FSM); Raft calls ApplyBatch instead.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch decodes each command entry as a logpb.Batch and applies its
// commands in order. The response of an entry is []statemachine.Result
// (one per command) or an error for an undecodable entry.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	if f.applying != nil {
		f.applying(logs)
	}
	out := make([]any, len(logs))
	f.mu.Lock()
	var sealed []statemachine.Sealed
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			f.applied.Store(max(f.applied.Load(), l.Index))
			continue
		}
		if f.halted {
			out[i] = errHalted
			continue
		}
		b, err := decodeBatch(l.Data)
		if err != nil {
			// Every replica refuses the entry alike, so state stays equal.
			out[i] = fmt.Errorf("cluster: undecodable log entry %d: %w", l.Index, err)
			f.applied.Store(max(f.applied.Load(), l.Index))
			continue
		}
		if own := f.tag.Load(); own != nil && len(b.Cluster) > 0 && !bytes.Equal(b.Cluster, *own) {
			f.halted = true
			out[i] = errHalted
			if f.onDiverged != nil {
				f.onDiverged(fmt.Errorf("cluster: log entry %d comes from another cluster (registrar key %x…, this node's is %x…): %s",
					l.Index, b.Cluster, *own, foreignHistory))
			}
			continue
		}
		if r := newerRules(b); r != 0 {
			// A build that does not know these rules would derive other
			// records than the members that do, and drift from them
			// unseen (found from outside: a member put back on an older
			// build skipped the commands it did not know).
			f.halted = true
			out[i] = errHalted
			if f.onDiverged != nil {
				f.onDiverged(fmt.Errorf("cluster: log entry %d is stamped with rules %d, and this build applies rules up to %d: "+
					"run the build the cluster was upgraded to (a member may not go back to an older build once newer rules were applied)",
					l.Index, r, statemachine.Rules))
			}
			continue
		}
		if sealed == nil {
			// Most commands emit one record or more.
			sealed = make([]statemachine.Sealed, 0, max(len(b.Commands)+1, f.lastSealed+f.lastSealed/4))
		}
		if len(b.Commands) > 0 {
			f.noteStamp(l.Term, b.Commands[0].Rules)
		}
		results := make([]statemachine.Result, len(b.Commands))
		for j, cmd := range b.Commands {
			f.maxTick.raise(registrar.Tick(cmd.Tick))
			if cmd.Wall > f.maxWall.Load() {
				f.maxWall.Store(cmd.Wall) // only the FSM goroutine writes it
			}
			res := f.m.Apply(cmd)
			results[j] = res
			for _, s := range res.Records {
				f.resolveWaiter(s.Record)
			}
			sealed = append(sealed, res.Records...)
			if f.observe != nil && l.Index > f.replayed {
				f.observe(f.m, cmd, res)
			}
		}
		out[i] = results
		f.applied.Store(max(f.applied.Load(), l.Index))
		f.fromLog.Store(l.Index)
	}
	if w := f.maxWall.Load(); w > 0 {
		if seen := f.wallSeen.Load(); seen == nil || seen.wall != w {
			f.wallSeen.Store(&wallReading{wall: w, at: time.Now()})
		}
	}
	f.lastSealed = len(sealed)
	f.noteTag()
	f.feed.append(sealed)
	close(f.changed)
	f.changed = make(chan struct{})
	pub := f.m.PublicKey()
	f.mu.Unlock()
	// Outside the lock: readers need not wait for the hand-over. The
	// writer goroutine encodes and writes; the callers do not wait for it.
	f.ledger.write(sealed, pub)
	return out
}

// resolveWaiter delivers a waiter's grant or end. Called under mu.
func (f *fsm) resolveWaiter(rec *logpb.Record) {
	var id uint64
	var res WaitResult
	reg := f.m.Registrar()
	switch b := rec.Body.(type) {
	case *logpb.Record_Issued:
		if b.Issued.WaiterId == 0 {
			return
		}
		id = b.Issued.WaiterId
		l, err := reg.Get(b.Issued.LeaseId, registrar.Tick(rec.Tick))
		res = WaitResult{Lease: l, Err: err}
	case *logpb.Record_WaitEnded:
		id = b.WaitEnded.WaiterId
		res = WaitResult{Err: reg.WaitEnded(b.WaitEnded.Namespace, b.WaitEnded.Resource, registrar.Tick(rec.Tick))}
	default:
		return
	}
	if ch, ok := f.waits[id]; ok {
		delete(f.waits, id)
		ch <- res // buffered, never blocks
		return
	}
	f.resolved[id] = res
	f.resolvedOrder = append(f.resolvedOrder, id)
	if len(f.resolvedOrder) > maxResolved {
		delete(f.resolved, f.resolvedOrder[0])
		f.resolvedOrder = f.resolvedOrder[1:]
	}
}

// await registers interest in a waiter. It returns a channel that receives
// the resolution exactly once, and a cancel func to drop the interest.
func (f *fsm) await(id uint64) (<-chan WaitResult, func(), error) {
	ch := make(chan WaitResult, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if res, ok := f.resolved[id]; ok {
		delete(f.resolved, id)
		ch <- res
		return ch, func() {}, nil
	}
	if !f.m.Registrar().WaiterPending(id) {
		return nil, nil, &registrar.Error{Reason: registrar.ReasonOutcomeUnknown,
			Metadata: map[string]string{"cause": "waiter_gone", "waiter_id": strconv.FormatUint(id, 10)},
			Message:  fmt.Sprintf("%s: waiter %d is no longer queued and its outcome was not kept", registrar.ReasonOutcomeUnknown, id)}
	}
	f.waits[id] = ch
	return ch, func() {
		f.mu.Lock()
		delete(f.waits, id)
		f.mu.Unlock()
	}, nil
}

// changes returns a channel closed after the next applied batch.
func (f *fsm) changes() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// Snapshot captures the machine's state (raft.FSM) under the read lock,
// holding applies back only for the copy of what may still change
// (statemachine.CaptureLazy); Persist adds the leases that never change
// again, encodes and writes it beside later applies.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	// Raft may drop the log entries a snapshot covers: the ledger lines
	// written from them must be on disk first.
	if err := f.ledger.sync(); err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	s, fill := f.m.CaptureLazy()
	return fsmSnapshot{state: s, fill: fill, bumpFences: f.bumpFences}, nil
}

// Restore replaces the machine with a snapshot's (raft.FSM).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	m, err := statemachine.Restore(f.cfg, b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.m = m
	f.fromLog.Store(0)
	f.tag.Store(nil)
	f.noteTag()
	f.maxTick.raise(m.Registrar().Tick())
	f.maxWall.Store(max(f.maxWall.Load(), m.Registrar().Wall()))
	ch := m.Chain()
	if f.feed.empty() {
		// A restart: the history before the snapshot is in the ledger files.
		f.feed.prime(f.ledger.tail(ch.Next-1, ch.Head, f.feed.size(), f.feed.maxBytes))
	}
	f.ledger.restored(ch.Next, ch.Head, m.PublicKey())
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return nil
}

// wallReading is a wall time of the replicated state and when this node
// applied it.
type wallReading struct {
	wall int64
	at   time.Time
}

// wall estimates the cluster's wall time now (unix ms): the latest wall
// time applied plus the time since, by this node's monotonic clock; its
// own wall clock before anything is applied. Timers that wait for a
// replicated wall time (a task's ready time) use it, not the local
// clock, which may be off from the leader's.
func (f *fsm) wall() int64 {
	if seen := f.wallSeen.Load(); seen != nil {
		return seen.wall + time.Since(seen.at).Milliseconds()
	}
	return time.Now().UnixMilli()
}

// foreignHistory explains a node stopped for holding another cluster's
// history, and what to do.
const foreignHistory = "this node holds history the cluster does not (was its data dir wiped and the node started without " +
	"--peers or --join, bootstrapping a cluster of its own?); stopping with its state as it was. " +
	"Remove the member, wipe its data dir and --join it again"

// count reads one number from the state (for a metric).
func (f *fsm) count(read func(*statemachine.Machine) int) float64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return float64(read(f.m))
}

// newerRules is the rules of a command of b stamped with newer rules than
// this build applies, or 0.
func newerRules(b *logpb.Batch) uint32 {
	for _, c := range b.Commands {
		if c.Rules > statemachine.Rules {
			return c.Rules
		}
	}
	return 0
}

// errHalted answers the entries a halted FSM did not apply.
var errHalted = errors.New("cluster: not applied: this node stopped, its log holds another cluster's entries")

// noteTag records the state's cluster tag once it has one. Called under
// mu's write lock.
func (f *fsm) noteTag() {
	if f.tag.Load() != nil {
		return
	}
	if pub := f.m.PublicKey(); len(pub) >= clusterTagSize {
		t := bytes.Clone(pub[:clusterTagSize])
		f.tag.Store(&t)
	}
}

// batchOf is the log entry of cmds, stamped with the cluster's tag, each
// command with rules (Node.stampRules). Safe for concurrent use.
func (f *fsm) batchOf(cmds []*logpb.Command, rules uint32) *logpb.Batch {
	for _, c := range cmds {
		c.Rules = rules
	}
	b := &logpb.Batch{Commands: cmds}
	if tag := f.tag.Load(); tag != nil {
		b.Cluster = *tag
	}
	return b
}

// clusterTagSize is how much of the registrar key tags an entry.
const clusterTagSize = 8

type fsmSnapshot struct {
	state      *logpb.Snapshot
	fill       func() // completes state, beside later applies
	bumpFences uint64 // raises the next fence in the snapshot (forceNewCluster)
}

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	s.fill()
	if s.bumpFences > 0 {
		next, err := raisedFence(s.state.NextSeq, s.bumpFences, time.Now())
		if err != nil {
			_ = sink.Cancel()
			return err
		}
		s.state.NextSeq = next
	}
	b, err := statemachine.EncodeSnapshot(s.state)
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() {}

// atomicTick is a registrar tick that only moves forward.
type atomicTick struct{ v atomic.Int64 }

func (t *atomicTick) load() registrar.Tick { return registrar.Tick(t.v.Load()) }

// raise moves the tick up to x. Its callers are serialized (Raft calls
// the FSM one call at a time), so a load and a store suffice.
func (t *atomicTick) raise(x registrar.Tick) {
	if int64(x) > t.v.Load() {
		t.v.Store(int64(x))
	}
}
