package cluster

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// Read runs fn against the state machine under its read lock, at the
// registrar's current tick. Unless stale, the read is linearizable: this
// node confirms it leads and waits until it has applied everything
// committed when the read began (else NOT_LEADER), and reads at its
// term's clock. A stale read is at the tick this member last applied:
// possibly behind the cluster, never ahead of it (a leader deposed
// while it was paused still has its term, whose clock ran on through
// the pause while the cluster's stood still). fn must not keep m.
func (n *Node) Read(ctx context.Context, stale bool, fn func(m *statemachine.Machine, t registrar.Tick) error) error {
	t := n.leader.Load()
	if !stale {
		if t == nil {
			return n.notLeader()
		}
		idx := n.raft.CommitIndex()
		if err := n.raft.VerifyLeader().Error(); err != nil {
			return n.notLeader()
		}
		if err := n.waitApplied(ctx, idx); err != nil {
			return err
		}
	}
	f := n.fsm
	if t == nil || stale {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return fn(f.m, max(f.maxTick.load(), f.m.Registrar().Tick()))
	}
	// At the term's clock rounded down, and not before the clock has
	// reached the last tick applied (term.settle): never at a tick the
	// clock has not reached, where a lease would read as expired before
	// its deadline.
	for try := 0; ; try++ {
		t.settle(ctx, f.maxTick.load())
		f.mu.RLock()
		tick := max(f.maxTick.load(), f.m.Registrar().Tick())
		if tick > t.passed() && try < 3 && ctx.Err() == nil {
			f.mu.RUnlock() // applied meanwhile, ahead of the clock
			continue
		}
		defer f.mu.RUnlock()
		return fn(f.m, max(tick, t.passed()))
	}
}

// WaitApplied blocks until this node has applied the log up to idx, or
// ctx ends (its error).
func (n *Node) WaitApplied(ctx context.Context, idx uint64) error { return n.waitApplied(ctx, idx) }

func (n *Node) waitApplied(ctx context.Context, idx uint64) error {
	for {
		ch := n.fsm.changes()
		if n.fsm.applied.Load() >= idx {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return unavailable("the node is shutting down")
		}
	}
}

// AwaitWaiter blocks until the queued acquire with this waiter id is
// granted or its wait ends. Call it after Propose answered the id.
//
// Only the leader that queued the wait calls it. When its leadership ends
// first (or already has), the answer is OUTCOME_UNKNOWN: the next leader
// withdraws the wait (it was queued under an earlier term) unless it has
// been granted by then, and the caller's retry there either queues again
// or finds the lease granted to it.
func (n *Node) AwaitWaiter(ctx context.Context, id uint64) (WaitResult, error) {
	var term <-chan struct{}
	if t := n.leader.Load(); t != nil {
		term = t.ctx.Done()
	} else {
		ended := make(chan struct{})
		close(ended)
		term = ended
	}
	ch, cancel, err := n.fsm.await(id)
	if err != nil {
		return WaitResult{}, err
	}
	defer cancel()
	select {
	case r := <-ch:
		// A grant handed over by an expiry: not before the clock has
		// reached it (term.settle).
		n.Settle(ctx)
		return r, nil
	case <-term:
		cancel() // first: a resolution from now on is kept for a later await
		select {
		case r := <-ch:
			return r, nil
		default:
		}
		return WaitResult{}, n.outcomeUnknown("leadership_moved", "leadership moved while the acquire waited; the new leader withdraws the wait unless it was granted")
	case <-ctx.Done():
		// A result that raced the end of ctx is still handed back (with
		// ctx's error), so the caller can undo a grant nobody will use.
		// Interest is dropped first (under the lock the resolution takes):
		// a resolution after that is kept for the next await, one before
		// it is in ch.
		cancel()
		select {
		case r := <-ch:
			return r, ctx.Err()
		default:
		}
		return WaitResult{}, ctx.Err()
	case <-n.stop:
		return WaitResult{}, unavailable("the node is shutting down")
	}
}

// expire is the leader's expirer: it sleeps until the registrar's next
// deadline (re-armed whenever something is applied) and proposes an
// Advance, which expires every due lease and ends every due wait (and,
// idle, prunes the terminal leases past their retention). While
// anything is due it also proposes an Advance whenever no command has
// carried the clock for ClockHeartbeat: a successor resumes time from the
// last applied tick, so without it an idle spell before a leader's crash
// would be added to every lease (the fault tests measured it). And it asks
// for the ledger's tail to be signed once it has waited SignAfter.
func (n *Node) expire(t *term) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// Proposed at half the heartbeat, so that the Raft round of the
	// Advance itself stays within it.
	beat := registrar.Tick(registrar.Ms(n.cfg.ClockHeartbeat / 2))
	signAfter := registrar.Tick(registrar.Ms(n.cfg.SignAfter))
	var pruned registrar.Tick // when it last proposed an Advance to prune
	for {
		changed := n.fsm.changes()
		n.fsm.mu.RLock()
		next, ok := n.fsm.m.Registrar().NextDeadline()
		prune, pruning := n.fsm.m.Registrar().NextPrune()
		unsigned, since := n.fsm.m.UnsignedTail()
		n.fsm.mu.RUnlock()
		applied := n.fsm.maxTick.load()
		timer.Stop()
		if ok {
			if stale := applied + beat; stale < next {
				next = stale
			}
		}
		// A quiet ledger's tail is signed SignAfter after its first
		// unsigned record.
		signAt := since + signAfter
		if unsigned > 0 && (!ok || signAt < next) {
			next, ok = signAt, true
		}
		// Terminal leases are pruned as the records' ticks pass their
		// retention, so an idle spell left them all to the next write
		// (0.7 s for 290,000, measured from outside): once some are due
		// the ledger's tail is signed, a record, at most once a second.
		// (Under writes the records prune: a tail signed for it only once
		// pruning has waited pruneSlack for one.)
		pruneAt := max(prune+registrar.Tick(registrar.Ms(pruneSlack)), pruned+registrar.Tick(registrar.Ms(pruneEvery)))
		if pruning && (!ok || pruneAt < next) {
			next, ok = pruneAt, true
		}
		if ok {
			// Due once the clock has fully reached next (rounded down): the
			// Advance's stamp (rounded up) is then the deadline or later,
			// and it is proposed no earlier than the deadline, so that no
			// expiry, hand-off to a waiter or lease.expired event comes
			// before it.
			now := t.passed()
			if next <= now {
				forPrune := pruning && pruneAt <= now
				if forPrune {
					pruned = now
				}
				sign := unsigned > 0 && signAt <= now || forPrune
				_, err := n.Propose(t.ctx, &logpb.Command{Op: &logpb.Command_Advance{Advance: &logpb.Advance{Sign: sign, Prune: forPrune}}})
				if err == nil {
					continue
				}
				if t.ctx.Err() != nil {
					return
				}
				n.log.Warn("expirer: proposing advance", "err", err)
				timer.Reset(50 * time.Millisecond) // retry soon
			} else {
				timer.Reset(registrar.Dur(int64(next - now)))
			}
		}
		select {
		case <-t.ctx.Done():
			return
		case <-changed:
		case <-timer.C:
		}
	}
}

// pruneEvery bounds how often an idle leader proposes an Advance to prune
// terminal leases (each is a checkpoint record), and pruneSlack is how
// long pruning waits for a record before.
const (
	pruneEvery = time.Second
	pruneSlack = 100 * time.Millisecond
)

// Certify signs a lease certificate with the registrar's key.
func (n *Node) Certify(l registrar.Lease) ([]byte, string, error) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.m.Certify(l)
}

// Role is a member's role in Status.
type Role int

// Roles.
const (
	RoleFollower Role = iota
	RoleLeader
	RoleCandidate
	RoleNonvoter
	// RoleUnknown is another voter's role while this node knows no
	// leader: it may lead a term this node has not heard of, or be down.
	RoleUnknown
)

// Member is one member of the Raft configuration.
type Member struct {
	ID, RaftAddress, APIAddress string
	Role                        Role
	// UnreachableSince is set, on the leader, for a member its heartbeats
	// fail to reach: when it last heard from it.
	UnreachableSince time.Time
}

// Status is the node's view of the cluster.
type Status struct {
	NodeID                    string
	LeaderID, LeaderRaftAddr  string
	LeaderAPIAddr             string
	Term                      uint64
	CommitIndex, AppliedIndex uint64
	LastLogIndex, LastLogTerm uint64 // of the local log, applied or not
	LedgerIndex               uint64
	Tick                      registrar.Tick
	Members                   []Member
	// NoLeaderSince is, while no leader is known, since when (zero
	// otherwise).
	NoLeaderSince time.Time
	// LeaderLastContact is, on a follower that names a leader, when it
	// last heard from it (zero otherwise).
	LeaderLastContact time.Time
}

// Status reports the node's view of the cluster (a local, stale read).
func (n *Node) Status() (Status, error) {
	addr, id := n.raft.LeaderWithID()
	s := Status{
		NodeID: n.id, LeaderID: string(id), LeaderRaftAddr: string(addr),
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.fsm.applied.Load(),
	}
	if idx, err := n.logs.LastIndex(); err == nil && idx > 0 {
		var e raft.Log
		if err := n.logs.GetLog(idx, &e); err == nil {
			s.LastLogIndex, s.LastLogTerm = e.Index, e.Term
		}
	}
	if s.LastLogIndex == 0 { // the log is empty past the snapshot
		s.LastLogIndex = n.raft.LastIndex()
	}
	if string(id) == n.id {
		s.LeaderAPIAddr = n.cfg.APIAddr
	} else if id != "" {
		s.LeaderAPIAddr = n.memberAPI(string(id))
		s.LeaderLastContact = n.raft.LastContact()
	} else if since := n.noLeaderSince.Load(); since != 0 {
		s.NoLeaderSince = time.Unix(0, since)
	}
	_ = n.Read(context.Background(), true, func(m *statemachine.Machine, t registrar.Tick) error {
		s.Tick = t
		s.LedgerIndex = m.Chain().Next - 1
		return nil
	})
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return s, unavailable("reading the raft configuration: " + err.Error())
	}
	published := map[string]string{}
	for _, m := range n.Members() {
		published[m.ID] = m.APIAddress
	}
	for _, srv := range cf.Configuration().Servers {
		m := Member{ID: string(srv.ID), RaftAddress: string(srv.Address), Role: RoleFollower}
		switch {
		case srv.ID == id:
			m.Role = RoleLeader
		case srv.Suffrage != raft.Voter:
			m.Role = RoleNonvoter
		case string(srv.ID) == n.id && n.raft.State() == raft.Candidate:
			m.Role = RoleCandidate
		case id == "" && string(srv.ID) != n.id:
			m.Role = RoleUnknown
		}
		if string(srv.ID) == n.id {
			m.APIAddress = n.cfg.APIAddr
		} else {
			m.APIAddress = published[string(srv.ID)]
			if since, ok := n.unreachableSince(string(srv.ID)); ok {
				m.UnreachableSince = since
			}
		}
		s.Members = append(s.Members, m)
	}
	return s, nil
}

// Members returns the published members (replicated state), sorted by id.
func (n *Node) Members() []statemachine.Member {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.m.Members()
}

func (n *Node) memberAPI(id string) string {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	m, _ := n.fsm.m.Member(id)
	return m.APIAddress
}

// Leader returns the id of the leader Raft knows of and its published API
// address ("" when unknown).
func (n *Node) Leader() (id, apiAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	n.knewLeader.Store(true)
	last := string(lid)
	n.lastLeader.Store(&last)
	if string(lid) == n.id {
		return n.id, n.cfg.APIAddr
	}
	return string(lid), n.memberAPI(string(lid))
}

// LastLeader is the last leader this node knew (none: ""), with its API
// address: a node that cannot follow (its Raft log cannot be written)
// keeps starting elections it cannot win, and knows no leader while the
// one it knew still leads.
func (n *Node) LastLeader() (id, apiAddr string) {
	p := n.lastLeader.Load()
	if p == nil {
		return "", ""
	}
	if *p == n.id {
		return n.id, n.cfg.APIAddr
	}
	return *p, n.memberAPI(*p)
}

// AwaitLeader waits, at most ApplyTimeout, while no member can serve a
// call only because one is being elected or is starting: this node has
// won an election and its term has not begun (the barrier is through in
// milliseconds), the leader is known but its API address has not reached
// this node yet (a fresh cluster: members publish it once they lead or
// join), or the node has not known any leader since it started (a fresh
// cluster elects one within a second or two). A call that waits then
// succeeds where it would have failed with NOT_LEADER right after a start.
// A node that knew a leader and lost it (a partition) does not wait: its
// callers learn at once to try another member. The caller routes as usual
// after.
func (n *Node) AwaitLeader(ctx context.Context) {
	electing := func() bool {
		if n.IsLeader() {
			return false
		}
		id, addr := n.Leader()
		return id == n.id || (id != "" && addr == "") || (id == "" && !n.knewLeader.Load())
	}
	n.pollUntil(ctx, n.cfg.ApplyTimeout, func() bool { return !electing() })
}

// pollUntil waits until done holds, wait has passed, ctx ends or the node
// stops, looking every 5 ms: Raft broadcasts neither leadership, contact
// nor the rules set.
func (n *Node) pollUntil(ctx context.Context, wait time.Duration, done func() bool) {
	if done() {
		return
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-tick.C:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		case <-n.stop:
			return
		}
	}
}

// HadState reports whether the data dir held Raft state when the node
// opened (a restarted member: no bootstrap, no join needed).
func (n *Node) HadState() bool { return n.existing }

// NeedsPublish reports whether this member should ask the leader to
// publish its addresses: it is in the Raft configuration (as far as it
// knows) but the replicated members map lacks it or has other addresses.
// A member that was removed is not in its own latest configuration once
// it learned of the removal, and still published until then, so it never
// asks to be re-added.
func (n *Node) NeedsPublish() bool {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return false
	}
	var in bool
	for _, s := range cf.Configuration().Servers {
		in = in || string(s.ID) == n.id
	}
	if !in {
		return false
	}
	n.fsm.mu.RLock()
	m, ok := n.fsm.m.Member(n.id)
	n.fsm.mu.RUnlock()
	return !ok || m.APIAddress != n.cfg.APIAddr || m.RaftAddress != n.RaftAddr()
}

// APIAddr returns this node's API address.
func (n *Node) APIAddr() string { return n.cfg.APIAddr }

// Snapshot takes a Raft snapshot now (truncating the log behind it) and
// returns its index and term.
func (n *Node) Snapshot() (index, term uint64, err error) {
	f := n.raft.Snapshot()
	if err := f.Error(); err != nil {
		if err == raft.ErrNothingNewToSnapshot {
			stats := n.raft.Stats()
			i, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
			t, _ := strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
			return i, t, nil
		}
		return 0, 0, unavailable("snapshot: " + err.Error())
	}
	meta, rc, err := f.Open()
	if err != nil {
		return 0, 0, unavailable("snapshot: " + err.Error())
	}
	_ = rc.Close()
	n.log.Info("took a snapshot", "index", meta.Index, "term", meta.Term)
	return meta.Index, meta.Term, nil
}

// WaitLeader blocks until this node leads with an initialized registrar
// and has published its own addresses (a fresh single node: after its
// election, the bootstrap command and its SetMember), or ctx ends.
func (n *Node) WaitLeader(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond) // leadership changes are not broadcast
	defer tick.Stop()
	for {
		ch := n.fsm.changes()
		if n.leader.Load() != nil {
			n.fsm.mu.RLock()
			self, published := n.fsm.m.Member(n.id)
			ok := n.fsm.m.Bootstrapped() && published && self.APIAddress == n.cfg.APIAddr
			n.fsm.mu.RUnlock()
			if ok {
				return nil
			}
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return unavailable("the node is shutting down")
		}
	}
}
