package registrar

import "github.com/tenurehq/tenure/internal/logpb"

// Sink takes the records a command emits. The state machine seals each
// record (ledger index, hash chain) and applies it, through Apply of the
// domain that owns it, before Emit returns; so a command sees its own
// effects as it goes.
type Sink interface {
	Emit(rec *logpb.Record) error
}

// Tx is one command being applied: its tick, wall time and actor, and the
// sink its records go to.
type Tx struct {
	Tick  Tick
	Wall  int64
	Actor string
	// Rules are the state machine's rules the command was proposed under
	// (logpb.Command.rules; statemachine.Rules).
	Rules uint32
	sink  Sink
	err   error
}

// NewTx starts applying a command stamped with tick and wall.
func NewTx(tick Tick, wall int64, actor string, sink Sink) *Tx {
	tx := &Tx{}
	tx.Reset(tick, wall, actor, sink)
	return tx
}

// Reset reuses tx for a new command.
func (tx *Tx) Reset(tick Tick, wall int64, actor string, sink Sink) {
	*tx = Tx{Tick: tick, Wall: wall, Actor: actor, sink: sink}
}

// Emit records one change. A failure here means the state can no longer be
// trusted (a bug, not a user error); it is kept and reported by Err.
func (tx *Tx) Emit(rec *logpb.Record) {
	if tx.err != nil {
		return
	}
	tx.err = tx.sink.Emit(rec)
}

// Err reports the first failure to apply an emitted record.
func (tx *Tx) Err() error { return tx.err }

// OnLeaseEnd registers a hook told of every lease that ends (release,
// expiry, revoke, transfer) inside the same apply step, after the lease's
// own record. Sibling domains use it to requeue tasks and return pieces.
func (r *Registrar) OnLeaseEnd(f func(tx *Tx, l Lease)) { r.onEnd = append(r.onEnd, f) }
