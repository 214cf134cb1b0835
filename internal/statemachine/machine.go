// Package statemachine is Tenure's replicated state machine: it decodes
// commands, stamps them into a transaction, lets the domains (the lease
// registrar; later the queue and the piece pool) decide, seals every
// emitted record into the ledger's hash chain and applies it. It is pure:
// no I/O, no clocks, no goroutines; the same commands give the same
// records and the same snapshot bytes on every replica.
package statemachine

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/fencing"
	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Rules numbers the rules this code applies commands by, which a leader
// stamps on each command it proposes (logpb.Command.rules). A change to
// what a command does, as opposed to what the API lets through before
// proposing, must keep the old behaviour for commands stamped with earlier
// rules: entries written before the change are applied again after a
// restart (and by members of other builds), and must derive the records
// they derived then, or the node finds its ledger disagreeing and refuses
// to serve.
//
//	0  commands of builds before rules were numbered
//	1  an Enqueue of a task id whose finished task has passed its
//	   retention enqueues anew (it answered the old task until the next
//	   queue record pruned it)
//	2  a derived lease is capped at its parent's chain deadline (the
//	   earliest of the parent's and its ancestors'), which a renewal may
//	   bring below the lease's own expiry; Consume refuses a lease's
//	   33rd counter (QUOTA_EXCEEDED, quota max_counters); the records of
//	   what falls due at a command's tick carry the registrar as their
//	   actor, not the command's
//	3  a task requeued because its lease was given back (its attempt not
//	   counted) keeps its last error: the requeue's reason is no error
//	4  a task that dies is kept a day (queue.DeadRetention) unless its
//	   namespace's policy sets a dead task retention, not its lease
//	   retention
//	5  a pool's ResetPeer applies (pool.ResetRules; refused without a
//	   record before, as builds that do not know the command refuse it);
//	   a policy's dead task retention of 0 (the default) over defaults
//	   that set one is recorded outright (registrar.
//	   RulesDeadRetentionOutright; it took the defaults')
//
// A member of an older build applies commands stamped with newer rules by
// its own, older ones (found from outside: a rolling upgrade to rules 4
// left members with ledgers that disagree), so the leader stamps the
// lowest rules of its cluster's members (each says its own in Status;
// see cluster.Node.SetRules), not this build's own.
const Rules = 5

// UnreportedRules is what the leader stamps for a member that does not say
// its rules: builds before members reported them applied at most these,
// and a member not heard from yet in a term counts likewise.
const UnreportedRules = 3

// SnapshotVersion is the version of the snapshot encoding this code writes.
// Version 2 added lease trees (derivation, usage, ended_by of a lease); a
// version 1 snapshot has none and restores as is. A build that only reads
// version 1 refuses version 2 rather than drop the trees.
const SnapshotVersion = 2

// minSnapshotVersion is the oldest snapshot encoding this code reads.
const minSnapshotVersion = 1

// MaxTick and MaxWall bound the times a command may carry: ticks leave
// room for any ttl without overflow; walls fit the 48 bits of a lease id.
const (
	MaxTick = 1 << 52
	MaxWall = 1 << 48
)

// SystemActor is the actor of commands the registrar issues itself.
const SystemActor = "registrar"

// Config configures a machine.
type Config struct {
	// Defaults is the default policy until a Bootstrap command sets one.
	Defaults registrar.Policy
	// CheckpointEvery signs the chain head after this many records.
	CheckpointEvery uint64
}

// DefaultConfig returns the defaults of API.md.
func DefaultConfig() Config {
	return Config{Defaults: registrar.DefaultPolicy(), CheckpointEvery: 1024}
}

// Sealed is one record as applied: the record, its canonical bytes and its
// chain hash.
type Sealed struct {
	Record *logpb.Record
	Bytes  []byte
	Hash   ledger.Hash
}

// Result is what applying one command produced.
type Result struct {
	Outcome registrar.Outcome
	// Records are the records the command emitted, in order.
	Records []Sealed
	// Queue is the answer of a work-queue command (nil for others).
	Queue *queue.Outcome
	// Pool is the answer of a piece-pool command (nil for others).
	Pool *pool.Outcome
}

// Machine is the state machine. It is not safe for concurrent use.
type Machine struct {
	cfg            Config
	reg            *registrar.Registrar
	q              *queue.Queues
	qout           *queue.Outcome // answer of the current queue command
	pools          *pool.Pools
	pout           *pool.Outcome // answer of the current pool command
	chain          ledger.Chain
	seed           []byte
	priv           ed25519.PrivateKey
	pub            ed25519.PublicKey
	lastCheckpoint uint64
	// unsignedSince is the tick of the first record after lastCheckpoint
	// (not state: after a restore, the registrar's tick then).
	unsignedSince registrar.Tick
	// members are the published cluster members, by id.
	members map[string]Member
	tx      *registrar.Tx
	txv     registrar.Tx // reused for every command
	out     []Sealed
	// recs is room for the records of commands to come: a command's
	// Records are its next slots (one allocation for many commands).
	recs []Sealed
}

// recsChunk is how many records' room recs takes at a time.
const recsChunk = 64

// New returns an empty machine.
func New(cfg Config) *Machine {
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = DefaultConfig().CheckpointEvery
	}
	m := &Machine{cfg: cfg, reg: registrar.New(cfg.Defaults), chain: ledger.NewChain(), members: map[string]Member{}}
	m.q = queue.New(m.reg)
	m.pools = pool.New(m.reg)
	return m
}

// Member is a cluster member's published addresses (SetMember).
type Member struct {
	ID, APIAddress, RaftAddress string
}

// Members returns the published members, sorted by id.
func (m *Machine) Members() []Member {
	out := make([]Member, 0, len(m.members))
	for _, mb := range m.members {
		out = append(out, mb)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Member returns one published member.
func (m *Machine) Member(id string) (Member, bool) {
	mb, ok := m.members[id]
	return mb, ok
}

// Registrar gives read access to the lease domain for queries. Callers
// must not call its command methods directly.
func (m *Machine) Registrar() *registrar.Registrar { return m.reg }

// Chain returns the ledger chain head.
func (m *Machine) Chain() ledger.Chain { return m.chain }

// PublicKey returns the registrar's public key (nil before bootstrap).
func (m *Machine) PublicKey() ed25519.PublicKey { return m.pub }

// PrivateKey returns the registrar's signing key (nil before bootstrap).
func (m *Machine) PrivateKey() ed25519.PrivateKey { return m.priv }

// Bootstrapped reports whether the registrar has its key.
func (m *Machine) Bootstrapped() bool { return m.pub != nil }

var errNotBootstrapped = &registrar.Error{Reason: registrar.ReasonNotBootstrapped,
	Message: "NOT_BOOTSTRAPPED: the registrar has no key yet"}

// Apply applies one command and returns its outcome and records. A
// rejected command changes nothing beyond the expiries due at its tick.
func (m *Machine) Apply(cmd *logpb.Command) Result {
	if cmd.Tick < 0 || cmd.Tick > MaxTick || cmd.Wall < 0 || cmd.Wall >= MaxWall {
		// Only a broken leader stamps such times; refusing them keeps tick
		// arithmetic from overflowing and lease ids parseable.
		return Result{Outcome: registrar.Outcome{Err: &registrar.Error{Reason: registrar.ReasonInvalidArgument,
			Message:  fmt.Sprintf("INVALID_ARGUMENT: tick %d or wall %d out of range", cmd.Tick, cmd.Wall),
			Metadata: map[string]string{"field": "tick"}}}}
	}
	tick := registrar.Tick(cmd.Tick)
	if t := m.reg.Tick(); tick < t {
		tick = t // ticks never go backwards
	}
	actor := cmd.Actor
	if actor == "" {
		actor = SystemActor
	}
	tx := &m.txv
	tx.Reset(tick, cmd.Wall, actor, m)
	tx.Rules = cmd.Rules
	if len(m.recs) == cap(m.recs) {
		m.recs = make([]Sealed, 0, recsChunk)
	}
	m.tx, m.out, m.qout, m.pout = tx, m.recs[len(m.recs):], nil, nil
	defer func() { m.tx = nil }()

	var out registrar.Outcome
	if b, ok := cmd.Op.(*logpb.Command_Bootstrap); ok {
		out = m.bootstrap(tx, b.Bootstrap)
	} else {
		if cmd.Rules >= 2 {
			// What falls due at the command's tick (expiries, the hand-offs
			// to waiters they cause) is the registrar's doing, not the
			// command's sender's.
			tx.Actor = SystemActor
		}
		m.reg.Advance(tx)
		tx.Actor = actor
		out = m.dispatch(tx, cmd)
	}
	unsigned := m.chain.Next - 1 - m.lastCheckpoint
	if a, ok := cmd.Op.(*logpb.Command_Advance); m.priv != nil && (unsigned >= m.cfg.CheckpointEvery ||
		ok && a.Advance.Sign && (unsigned > 0 || a.Advance.Prune)) {
		tx.Emit(&logpb.Record{Body: &logpb.Record_Checkpoint{Checkpoint: m.chain.SignCheckpoint(m.priv)}})
	}
	if err := tx.Err(); err != nil {
		// An emitted record failed to apply: a bug. Say so loudly rather
		// than carry on with a state that may differ between replicas.
		panic(fmt.Sprintf("statemachine: applying command at tick %d: %v", tick, err))
	}
	return Result{Outcome: out, Records: m.records(), Queue: m.qout, Pool: m.pout}
}

// records returns the current command's records, nil for none. Records
// that fit the room in recs take it for good; the slice is capped so that
// appending to it never reaches the next command's.
func (m *Machine) records() []Sealed {
	n := len(m.out)
	if n == 0 {
		return nil
	}
	if rest := m.recs[len(m.recs):cap(m.recs)]; n <= len(rest) && &rest[0] == &m.out[0] {
		m.recs = m.recs[:len(m.recs)+n]
	}
	return m.out[:n:n]
}

// transferable refuses to transfer the lease of a claimed task or of a
// leased piece: the task or piece stays with the lease it was granted
// under, which alone may complete or fail it, so a transferred lease
// would strand the work until the new lease ended. An unknown id passes:
// the registrar answers it.
func (m *Machine) transferable(id string, t registrar.Tick) error {
	l, err := m.reg.Get(id, t)
	if err != nil {
		return nil
	}
	if q, task, ok := m.q.LeaseTask(l.Fence); ok {
		return registrar.NewError(registrar.ReasonInvalidArgument,
			map[string]string{"field": "lease_id", "lease_id": id, "queue": q, "task_id": task},
			"lease_id: lease %s is the lease of task %s in queue %s, which only it may complete or fail; a task lease cannot be transferred", id, task, q)
	}
	if p, file, piece, ok := m.pools.LeasePiece(l.Fence); ok {
		return registrar.NewError(registrar.ReasonInvalidArgument,
			map[string]string{"field": "lease_id", "lease_id": id, "pool": p},
			"lease_id: lease %s is the lease of piece %d of file %d in pool %s, which only its peer may complete; a piece lease cannot be transferred", id, piece, file, p)
	}
	return nil
}

func (m *Machine) dispatch(tx *registrar.Tx, cmd *logpb.Command) registrar.Outcome {
	switch op := cmd.Op.(type) {
	case *logpb.Command_Acquire:
		return m.reg.Acquire(tx, op.Acquire)
	case *logpb.Command_Renew:
		return m.reg.Renew(tx, op.Renew)
	case *logpb.Command_Release:
		return m.reg.Release(tx, op.Release)
	case *logpb.Command_Revoke:
		return m.reg.Revoke(tx, op.Revoke)
	case *logpb.Command_Transfer:
		if err := m.transferable(op.Transfer.LeaseId, tx.Tick); err != nil {
			return registrar.Outcome{Err: err}
		}
		return m.reg.Transfer(tx, op.Transfer)
	case *logpb.Command_Expire:
		return m.reg.Expire(tx, op.Expire)
	case *logpb.Command_DeclareRestart:
		return m.reg.DeclareRestart(tx, op.DeclareRestart)
	case *logpb.Command_WriteState:
		return m.reg.WriteState(tx, op.WriteState)
	case *logpb.Command_SetPolicy:
		return m.reg.SetPolicy(tx, op.SetPolicy)
	case *logpb.Command_Advance:
		return registrar.Outcome{}
	case *logpb.Command_CancelWait:
		return m.reg.CancelWait(tx, op.CancelWait)
	case *logpb.Command_Derive:
		return m.reg.Derive(tx, op.Derive)
	case *logpb.Command_Consume:
		return m.reg.Consume(tx, op.Consume)
	case *logpb.Command_SetMember:
		return m.setMember(tx, op.SetMember)
	case *logpb.Command_Enqueue, *logpb.Command_Claim, *logpb.Command_CompleteTask, *logpb.Command_FailTask, *logpb.Command_CancelTask,
		*logpb.Command_RetryTask, *logpb.Command_ConfigureQueue:
		return m.dispatchQueue(tx, cmd)
	case *logpb.Command_Pool:
		return m.dispatchPool(tx, op.Pool)
	case nil:
		return registrar.Outcome{Err: &registrar.Error{Reason: registrar.ReasonInvalidArgument,
			Message: "INVALID_ARGUMENT: command has no operation", Metadata: map[string]string{"field": "op"}}}
	}
	return registrar.Outcome{Err: &registrar.Error{Reason: registrar.ReasonInvalidArgument,
		Message: fmt.Sprintf("INVALID_ARGUMENT: unknown operation %T", cmd.Op), Metadata: map[string]string{"field": "op"}}}
}

func (m *Machine) bootstrap(tx *registrar.Tx, b *logpb.Bootstrap) registrar.Outcome {
	if m.pub != nil {
		return registrar.Outcome{Err: &registrar.Error{Reason: registrar.ReasonAlreadyBootstrapped,
			Message: "ALREADY_BOOTSTRAPPED: the registrar already has its key"}}
	}
	if len(b.KeySeed) != ed25519.SeedSize {
		return registrar.Outcome{Err: &registrar.Error{Reason: registrar.ReasonInvalidArgument,
			Message: "INVALID_ARGUMENT: key_seed must be 32 bytes", Metadata: map[string]string{"field": "key_seed"}}}
	}
	p := registrar.PolicyFromProto(registrar.DefaultPolicy(), b.DefaultPolicy)
	if b.DefaultPolicy == nil {
		p = m.cfg.Defaults
	}
	if err := p.Validate(); err != nil {
		return registrar.Outcome{Err: err}
	}
	m.SetKeySeed(b.KeySeed)
	tx.Emit(&logpb.Record{Body: &logpb.Record_Initialized{Initialized: &logpb.Initialized{
		PublicKey: m.pub, DefaultPolicy: p.ProtoOver(registrar.DefaultPolicy()),
	}}})
	return registrar.Outcome{Err: tx.Err()}
}

// setMember publishes (or forgets) a member. A command that changes
// nothing emits nothing, so a leader may republish itself on every term.
func (m *Machine) setMember(tx *registrar.Tx, c *logpb.SetMember) registrar.Outcome {
	for _, f := range []struct{ name, v string }{{"id", c.Id}, {"api_address", c.ApiAddress}, {"raft_address", c.RaftAddress}} {
		if err := registrar.CheckIdentifier(f.name, f.v, f.name == "id"); err != nil {
			return registrar.Outcome{Err: err}
		}
	}
	old, ok := m.members[c.Id]
	switch {
	case c.Removed && !ok:
		return registrar.Outcome{}
	case !c.Removed && ok && old == (Member{ID: c.Id, APIAddress: c.ApiAddress, RaftAddress: c.RaftAddress}):
		return registrar.Outcome{}
	}
	rec := &logpb.MemberSet{Id: c.Id, Removed: c.Removed}
	if !c.Removed {
		rec.ApiAddress, rec.RaftAddress = c.ApiAddress, c.RaftAddress
	}
	tx.Emit(&logpb.Record{Body: &logpb.Record_MemberSet{MemberSet: rec}})
	return registrar.Outcome{Err: tx.Err()}
}

// SetKeySeed installs the registrar's private key (a replica replaying a
// ledger gets it from its snapshot; records carry only the public key).
func (m *Machine) SetKeySeed(seed []byte) {
	m.seed = append([]byte(nil), seed...)
	m.priv = ed25519.NewKeyFromSeed(seed)
	m.pub = m.priv.Public().(ed25519.PublicKey)
}

// UnsignedTail reports how many records follow the last checkpoint (none
// before the registrar has its key), and the tick of the first of them.
func (m *Machine) UnsignedTail() (records uint64, since registrar.Tick) {
	if m.priv == nil {
		return 0, 0
	}
	return m.chain.Next - 1 - m.lastCheckpoint, m.unsignedSince
}

// Emit seals and applies one record of the current command (registrar.Sink).
func (m *Machine) Emit(rec *logpb.Record) error {
	rec.Tick, rec.Wall, rec.Actor = int64(m.tx.Tick), m.tx.Wall, m.tx.Actor
	b, h, err := m.chain.Seal(rec)
	if err != nil {
		return err
	}
	if err := m.applyRecord(rec); err != nil {
		return err
	}
	if len(m.out) == cap(m.out) {
		m.moveOut()
	}
	m.out = append(m.out, Sealed{Record: rec, Bytes: b, Hash: h})
	return nil
}

// moveOut moves the current command's records, which fill the room left
// in recs, to the start of a new chunk that becomes recs: records then
// takes its room as usual, and the commands after it have room again
// (growing out by append would leave recs' short remainder to the next
// command, and so reallocate its records as well).
func (m *Machine) moveOut() {
	n := len(m.out)
	fresh := make([]Sealed, n, max(recsChunk, 2*n))
	copy(fresh, m.out)
	m.recs, m.out = fresh[:0], fresh
}

func (m *Machine) applyRecord(rec *logpb.Record) error {
	if rec.Index == m.lastCheckpoint+1 {
		m.unsignedSince = registrar.Tick(rec.Tick)
	}
	switch b := rec.Body.(type) {
	case *logpb.Record_Initialized:
		if len(b.Initialized.PublicKey) != ed25519.PublicKeySize {
			return fmt.Errorf("record %d: bad public key", rec.Index)
		}
		m.pub = append(ed25519.PublicKey(nil), b.Initialized.PublicKey...)
		m.reg.SetIDTag(IDTag(m.pub))
	case *logpb.Record_Checkpoint:
		m.lastCheckpoint = rec.Index
	case *logpb.Record_MemberSet:
		// Membership is the machine's own business, not the registrar's.
		ms := b.MemberSet
		if ms.Id == "" {
			return fmt.Errorf("record %d: member without id", rec.Index)
		}
		if ms.Removed {
			delete(m.members, ms.Id)
		} else {
			m.members[ms.Id] = Member{ID: ms.Id, APIAddress: ms.ApiAddress, RaftAddress: ms.RaftAddress}
		}
		m.reg.Observe(rec) // registrar time moves with every record
		return nil
	}
	if rec.GetPool() != nil {
		m.reg.Observe(rec) // registrar time moves with every record
		return m.pools.Apply(rec)
	}
	if queue.Owns(rec) {
		m.reg.Observe(rec) // registrar time moves with every record
		return m.q.Apply(rec)
	}
	return m.reg.Apply(rec)
}

// IDTag derives the lease-id tag of a cluster from its public key.
func IDTag(pub ed25519.PublicKey) uint16 { return binary.BigEndian.Uint16(pub[:2]) }

// Replay applies one encoded record from a ledger, checking that it
// continues the chain (and, for checkpoints, that the signature holds).
func (m *Machine) Replay(b []byte) (*logpb.Record, error) {
	rec := &logpb.Record{}
	if err := proto.Unmarshal(b, rec); err != nil {
		return nil, &ledger.BrokenError{Index: m.chain.Next, Reason: "undecodable record: " + err.Error()}
	}
	pub := m.pub
	if ini := rec.GetInitialized(); ini != nil {
		// A machine that knows its key must not let the ledger swap it: a
		// rewritten ledger re-signed under another key would verify.
		if m.pub != nil && !bytes.Equal(m.pub, ini.PublicKey) {
			return nil, &ledger.BrokenError{Index: rec.Index, Reason: "initialized with another registrar key"}
		}
		pub = ini.PublicKey
	}
	if _, err := m.chain.Follow(rec, b, pub); err != nil {
		return nil, err
	}
	if err := m.applyRecord(rec); err != nil {
		return nil, &ledger.BrokenError{Index: rec.Index, Reason: err.Error()}
	}
	return rec, nil
}

// Snapshot encodes the whole state, canonically.
func (m *Machine) Snapshot() ([]byte, error) { return EncodeSnapshot(m.Capture()) }

// Capture copies the whole state into a snapshot message that shares
// nothing the machine will change (only immutable strings and byte
// slices), with its long lists in no particular order. It is the only
// part of a snapshot that must hold the machine still: EncodeSnapshot,
// the costly part, can run beside later applies.
func (m *Machine) Capture() *logpb.Snapshot {
	s, fill := m.CaptureLazy()
	fill()
	return s
}

// CaptureLazy is Capture for a caller that holds applies back only for
// what may still change: the returned fill completes the snapshot with
// the leases that never change again (registrar.Retained), and may run
// beside later applies; call it before EncodeSnapshot.
func (m *Machine) CaptureLazy() (*logpb.Snapshot, func()) {
	head := m.chain.Head // Seal overwrites the chain's own array
	s := &logpb.Snapshot{
		Version:        SnapshotVersion,
		KeySeed:        m.seed,
		NextIndex:      m.chain.Next,
		ChainHead:      head[:],
		LastCheckpoint: m.lastCheckpoint,
	}
	retained := m.reg.SnapshotInto(s)
	m.q.SnapshotInto(s)
	m.pools.SnapshotInto(s)
	for _, mb := range m.Members() { // sorted by id
		s.Members = append(s.Members, &logpb.MemberSet{Id: mb.ID, ApiAddress: mb.APIAddress, RaftAddress: mb.RaftAddress})
	}
	return s, func() { retained.Fill(s) }
}

// EncodeSnapshot encodes a captured state canonically, so that equal
// states give equal bytes: it sorts the lists Capture left unordered
// (leases, waiters, tasks and piece leases by sequence) and marshals
// deterministically. It changes s.
func EncodeSnapshot(s *logpb.Snapshot) ([]byte, error) {
	slices.SortFunc(s.Leases, func(a, b *logpb.LeaseSnap) int { return cmp.Compare(a.Seq, b.Seq) })
	slices.SortFunc(s.Waiters, func(a, b *logpb.WaiterQueued) int { return cmp.Compare(a.WaiterId, b.WaiterId) })
	slices.SortFunc(s.Tasks, func(a, b *logpb.TaskSnap) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, p := range s.Pools {
		slices.SortFunc(p.Leases, func(a, b *logpb.PoolLeaseSnap) int { return cmp.Compare(a.LeaseSeq, b.LeaseSeq) })
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(s)
}

// ErrUnsupportedSnapshot reports a snapshot this code cannot read.
var ErrUnsupportedSnapshot = errors.New("UNSUPPORTED_SNAPSHOT")

// Restore rebuilds a machine from snapshot bytes.
func Restore(cfg Config, b []byte) (*Machine, error) {
	s := &logpb.Snapshot{}
	if err := proto.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if s.Version < minSnapshotVersion || s.Version > SnapshotVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads %d to %d)", ErrUnsupportedSnapshot, s.Version, minSnapshotVersion, SnapshotVersion)
	}
	if len(s.ChainHead) != len(ledger.Hash{}) || s.NextIndex == 0 {
		return nil, fmt.Errorf("snapshot: bad chain head")
	}
	if len(s.KeySeed) != 0 && len(s.KeySeed) != ed25519.SeedSize {
		return nil, fmt.Errorf("snapshot: bad key seed")
	}
	reg, err := registrar.Restore(s)
	if err != nil {
		return nil, err
	}
	m := New(cfg)
	m.reg = reg
	if m.q, err = queue.Restore(reg, s); err != nil {
		return nil, err
	}
	if m.pools, err = pool.Restore(s, reg); err != nil {
		return nil, err
	}
	m.chain.Next = s.NextIndex
	copy(m.chain.Head[:], s.ChainHead)
	m.lastCheckpoint = s.LastCheckpoint
	m.unsignedSince = reg.Tick()
	for _, mb := range s.Members {
		if mb.Id == "" || mb.Removed {
			return nil, fmt.Errorf("snapshot: bad member %q", mb.Id)
		}
		if _, dup := m.members[mb.Id]; dup {
			return nil, fmt.Errorf("snapshot: member %q listed twice", mb.Id)
		}
		m.members[mb.Id] = Member{ID: mb.Id, APIAddress: mb.ApiAddress, RaftAddress: mb.RaftAddress}
	}
	if len(s.KeySeed) != 0 {
		m.SetKeySeed(s.KeySeed)
		if IDTag(m.pub) != reg.IDTag() {
			return nil, fmt.Errorf("snapshot: key does not match lease-id tag")
		}
	}
	return m, nil
}

// Certify signs a lease certificate for l and returns the signature and
// the key id. Ed25519 is deterministic, so every replica signs alike.
func (m *Machine) Certify(l registrar.Lease) ([]byte, string, error) {
	if m.priv == nil {
		return nil, "", errNotBootstrapped
	}
	return fencing.Sign(m.priv, l.Claim()), fencing.KeyID(m.pub), nil
}
