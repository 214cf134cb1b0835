// Package cluster is Tenure's Raft wiring: it replicates logpb commands
// with hashicorp/raft and applies them to the pure statemachine.Machine.
//
// # Writes
//
// Callers hand commands to Node.Propose. One proposer goroutine on the
// leader drains whatever commands have arrived, stamps them all with the
// same tick and wall time, and proposes them as one logpb.Batch in one
// Raft log entry; Raft in turn groups entries into one disk write. So many
// concurrent requests share one fsync. The FSM applies each command of the
// batch in order and the per-command statemachine.Result travels back to
// its caller through the Raft apply future.
//
// # Time (DESIGN §2)
//
// Registrar ticks are milliseconds. When a node becomes leader it first
// issues a Raft barrier, so everything committed before its term is
// applied, and then anchors its clock: tick = highest applied tick +
// monotonic time since that moment, rounded up to the next millisecond so
// that an expiry is never earlier than receipt + ttl. Stamped ticks never
// go backwards (the proposer also takes the max with the last stamped and
// the last applied tick), and time stands still while there is no leader.
// Replicas never read their clocks while applying. A new leader resumes
// from the last applied tick, so while anything is due the leader keeps
// that tick within ClockHeartbeat (100 ms) of its clock with Advance
// commands when no other command carries it: a failover then lengthens a
// lease by at most the election plus that heartbeat.
//
// # Reads
//
// Reads are linearizable by default: note the commit index, confirm
// leadership with Raft (VerifyLeader), wait until the FSM has applied up
// to the noted index, then query the machine under its read lock at the
// leader's current tick. A stale read skips the first three steps.
//
// # Expiry
//
// Expiry is exact without any background help: the state machine expires
// everything due at the tick of each command before applying it. The
// expirer goroutine on the leader only makes expiry events and waiter
// hand-offs prompt: it sleeps until the registrar's next deadline (re-armed
// after every apply) and then proposes an Advance command.
//
// # Waiters and events
//
// An Acquire that joins a wait queue answers a waiter id; Node.AwaitWaiter
// then blocks until the FSM applies the grant or the end of the wait. The
// FSM records resolutions under its lock, so a resolution applied before
// the caller starts waiting is not lost. Every applied record also enters
// an in-memory ring (Feed) that Watch and History read.
//
// # Membership
//
// A cluster starts either as one node (no Peers) or from Config.Peers,
// the same list of initial voters on every initial member; each
// bootstraps that configuration on a fresh data dir (Raft accepts the
// identical bootstrap from every member) and the first leader proposes
// the registrar's key (only while the machine is not bootstrapped) before
// its term begins: nothing is served, and Ready is false, until lease ids
// carry the key's tag. A
// later member opens with NoBootstrap and is added by the leader
// (AddVoter). Members publish their API addresses in replicated state
// (SetMember commands, kept in the statemachine's members map and its
// snapshot): a leader publishes itself when it takes office, and what it
// adds or removes; it also forgets published members that are no longer
// in the Raft configuration. Other members ask the leader to publish them
// (server package) when NeedsPublish says so. Followers find the leader's
// API address there to forward to it (server package). AddVoter,
// RemoveServer and TransferLeadership are checked against the latest
// configuration before Raft sees them (membership.go): a second address
// for a member, an address another member has, removing the last voter or
// a transfer with nobody to take over is INVALID_ARGUMENT and changes
// nothing; what is already so (the member with its address, a non-member
// removed, a transfer to the leader) succeeds without a change.
//
// # Durable ledger
//
// After each applied batch the FSM hands the sealed records to the ledger
// writer, a goroutine that appends them to the ledger files in
// DataDir/ledger (ledger.Writer, NDJSON) without an fsync: the Raft log
// already holds the entries. Callers get their results without waiting
// for that write, so the files trail the applied state by the batches
// still queued (microseconds, unless the disk stalls). Records the file
// holds already (Raft re-applies its log after a restart) are skipped; a
// restored snapshot that jumps ahead (one installed from the leader)
// writes a start marker at its chain head. Before every snapshot the FSM
// waits for the writer to fsync everything queued before, since Raft may
// then drop the entries the lines came from; if writing fails, snapshots
// fail too, so that the log stays and refills the ledger after a restart. `tenure audit verify`
// checks the files, also against the newest snapshot (SnapshotAnchor).
//
// # Transport security
//
// With Config.RaftTLS the stream layer speaks mutual TLS 1.3 (tls.go):
// both ends present certificates that must chain to the cluster CA, and
// connections that fail the handshake never reach Raft. Before adding a
// voter the leader probes its Raft address (a handshake both ways), so a
// member without a valid certificate is refused and never enters the
// configuration, where it would count in every quorum.
//
// # Failure handling
//
// A proposal that Raft refuses before appending answers NOT_LEADER (a
// membership change it refuses as invalid: INVALID_ARGUMENT); one
// whose commit broke off (leadership lost, shutdown, caller gone) answers
// OUTCOME_UNKNOWN, because it may or may not have been applied.
package cluster
