package cluster

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// freshVoter stands between the Raft transport and Raft on a member that
// started on an empty data dir, and refuses its vote (and pre-vote) to a
// candidate that has a log beyond the bootstrap entry until the member
// has caught up with a leader.
//
// Raft counts on a voter remembering what it acknowledged. A member whose
// data dir was wiped and that comes back as itself (the same --peers, or
// --join without a `cluster remove` first) has an empty log, and would
// grant its vote to any candidate: with it, a candidate that missed
// acknowledged writes could win, and those writes would be lost (found
// from outside: a lease acknowledged, then granted again with the same
// fence). Until it holds what a leader told it was committed, its vote
// goes only to candidates of a cluster that has never written anything
// (log index ≤ 1, the bootstrap configuration: the first election of a
// new cluster), so a new cluster still elects its first leader, and a
// member started late catches up as before.
type freshVoter struct {
	transportFilter
	header  raft.RPCHeader
	applied func() uint64 // the node's applied index (nil until Raft runs)
	log     *slog.Logger

	mu sync.Mutex
	// commit is the first commit index a leader told: everything
	// acknowledged before this member came back is at or below it (what
	// is acknowledged later, this member acknowledged itself, from its
	// log on disk). A later, higher one would be a moving target while
	// writes go on.
	commit   uint64
	caughtUp atomic.Bool
	warned   bool
}

// newFreshVoter wraps trans; call run once Raft runs on it.
func newFreshVoter(trans *raft.NetworkTransport, id raft.ServerID, log *slog.Logger) *freshVoter {
	return &freshVoter{transportFilter: newTransportFilter(trans), log: log,
		header: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: trans.EncodePeer(id, trans.LocalAddr())}}
}

// SetHeartbeatHandler passes Raft's heartbeat handler on, noting the
// commit index heartbeats carry (the transport hands heartbeats to it
// directly, not through Consumer).
func (f *freshVoter) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		f.Transport.SetHeartbeatHandler(nil)
		return
	}
	f.Transport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if ae, ok := rpc.Command.(*raft.AppendEntriesRequest); ok && !f.caughtUp.Load() {
			f.told(ae.LeaderCommitIndex)
		}
		cb(rpc)
	})
}

// run passes the transport's RPCs on to Raft, answering the votes this
// member must not give itself, until stop is closed.
func (f *freshVoter) run(applied func() uint64, stop <-chan struct{}) {
	f.applied = applied
	f.pump(func(rpc raft.RPC) bool { return !f.caughtUp.Load() && f.refuse(rpc) }, stop)
}

// transportFilter stands between the Raft transport and Raft: the RPCs
// that come in pass through pump, which may answer some itself; the
// member's own calls go straight to the transport.
type transportFilter struct {
	raft.Transport
	pre  raft.WithPreVote
	rpcs chan raft.RPC
}

func newTransportFilter(trans *raft.NetworkTransport) transportFilter {
	return transportFilter{Transport: trans, pre: trans, rpcs: make(chan raft.RPC)}
}

// RequestPreVote passes the member's own pre-votes on (raft looks for
// the method on its transport).
func (f *transportFilter) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return f.pre.RequestPreVote(id, target, args, resp)
}

// Close closes the transport.
func (f *transportFilter) Close() error { return f.Transport.(raft.WithClose).Close() }

// Consumer is what Raft reads its incoming RPCs from.
func (f *transportFilter) Consumer() <-chan raft.RPC { return f.rpcs }

// pump passes the transport's RPCs on to Raft until stop is closed, but
// for those refuse answered itself (it returns true for them).
func (f *transportFilter) pump(refuse func(raft.RPC) bool, stop <-chan struct{}) {
	in := f.Transport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-stop:
			return
		}
		if refuse(rpc) {
			continue
		}
		select {
		case f.rpcs <- rpc:
		case <-stop:
			return
		}
	}
}

// refuse answers rpc itself when it asks for a vote this member must not
// give yet, and notes what a leader says was committed.
func (f *freshVoter) refuse(rpc raft.RPC) bool {
	var last uint64
	var candidate []byte
	switch c := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		f.told(c.LeaderCommitIndex)
		return false
	case *raft.InstallSnapshotRequest:
		f.told(c.LastLogIndex)
		return false
	case *raft.RequestVoteRequest:
		last, candidate = c.LastLogIndex, c.ID
		if f.allowed(last, candidate) {
			return false
		}
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: f.header, Term: c.Term, Granted: false}, nil)
		return true
	case *raft.RequestPreVoteRequest:
		last, candidate = c.LastLogIndex, c.ID
		if f.allowed(last, candidate) {
			return false
		}
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: f.header, Term: c.Term, Granted: false}, nil)
		return true
	}
	return false
}

func (f *freshVoter) told(commit uint64) {
	f.mu.Lock()
	if f.commit == 0 {
		f.commit = commit
	}
	f.mu.Unlock()
}

// allowed reports whether this member may weigh a vote for a candidate
// whose log ends at last (Raft then decides as ever).
func (f *freshVoter) allowed(last uint64, candidate []byte) bool {
	if last <= 1 {
		return true // a cluster that never wrote anything: nothing to lose
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.commit > 0 && f.applied != nil && f.applied() >= f.commit {
		f.caughtUp.Store(true)
		f.log.Info("caught up with the cluster after starting on an empty data dir; voting again")
		return true
	}
	if !f.warned {
		f.warned = true
		f.log.Warn("refusing votes until caught up: this member started on an empty data dir, and a candidate with a "+
			"longer log asks for its vote; if it was a member before and lost its data, it must not vote as itself "+
			"(acknowledged writes could be lost): remove it (tenure cluster remove ID) and --join it again with an empty data dir",
			"candidate", string(candidate), "candidate_last_index", last, "leader_commit_seen", f.commit)
	}
	return false
}
