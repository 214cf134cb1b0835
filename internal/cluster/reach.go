package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// reach is the leader's view of which members it cannot reach: Raft
// reports each failed heartbeat to a member and the first one that
// succeeds again. A member is unreachable from its first failed heartbeat
// (since its last contact) until one succeeds; the view starts empty with
// every change of leader, whose heartbeats start afresh.
type reach struct {
	mu    sync.Mutex
	since map[string]time.Time // member id → last contact before the failures
	// leaderChanges counts the changes of leader this node has seen
	// (including to none: an election under way, or this node cut off).
	leaderChanges atomic.Uint64
	// leader is the last leader observed ("": none), once seen is set.
	leader string
	seen   bool
	// onLeader, when set, is told of each leader observed (id, or "").
	onLeader func(id string)
}

// observe follows Raft's heartbeat and leader observations until stop.
func (rc *reach) observe(r *raft.Raft, stop <-chan struct{}) {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(obs)
	defer r.DeregisterObserver(obs)
	// Raft runs before the observer is registered: a restarted follower
	// may have heard from its leader already, an observation nobody
	// received (the leader unknown to onLeader, not counted). What Raft
	// knows now is taken as observed; an observation of the same leader
	// that was on its way is not counted twice.
	if _, id := r.LeaderWithID(); id != "" {
		rc.observed(raft.LeaderObservation{LeaderID: id})
	}
	for {
		select {
		case <-stop:
			return
		case o := <-ch:
			rc.observed(o.Data)
		}
	}
}

// observed notes an observation and tells onLeader of a new leader.
func (rc *reach) observed(data any) {
	if rc.note(data) && rc.onLeader != nil {
		rc.onLeader(rc.leader)
	}
}

// note notes an observation and reports whether it is of a change of
// leader.
func (rc *reach) note(data any) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch d := data.(type) {
	case raft.FailedHeartbeatObservation:
		if _, ok := rc.since[string(d.PeerID)]; !ok {
			since := d.LastContact
			if since.IsZero() {
				since = time.Now()
			}
			rc.since[string(d.PeerID)] = since
		}
	case raft.ResumedHeartbeatObservation:
		delete(rc.since, string(d.PeerID))
	case raft.LeaderObservation:
		if rc.seen && rc.leader == string(d.LeaderID) {
			return false
		}
		rc.seen, rc.leader = true, string(d.LeaderID)
		clear(rc.since)
		rc.leaderChanges.Add(1)
		return true
	}
	return false
}

// unreachableSince returns when the leader last heard from member id, if
// its heartbeats to it fail now.
func (rc *reach) unreachableSince(id string) (time.Time, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	t, ok := rc.since[id]
	return t, ok
}

// silentAfter is how long a heartbeat (sent every tenth of the heartbeat
// timeout) may go unanswered before the leader calls the member
// unreachable.
func silentAfter(heartbeat time.Duration) time.Duration {
	return max(2*heartbeat, 2*time.Second)
}

// unreachableSince returns, on the leader, when it last heard from member
// id if it cannot reach it now: its heartbeats fail, or one has gone
// unanswered for silentAfter.
func (n *Node) unreachableSince(id string) (time.Time, bool) {
	if id == n.id || !n.IsLeader() {
		return time.Time{}, false
	}
	if t, ok := n.reach.unreachableSince(id); ok {
		return t, true
	}
	return n.calls.silentSince(raft.ServerID(id), n.silentAfter)
}
