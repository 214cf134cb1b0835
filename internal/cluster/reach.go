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
	for {
		select {
		case <-stop:
			return
		case o := <-ch:
			rc.note(o.Data)
			if lo, ok := o.Data.(raft.LeaderObservation); ok && rc.onLeader != nil {
				rc.onLeader(string(lo.LeaderID))
			}
		}
	}
}

func (rc *reach) note(data any) {
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
		clear(rc.since)
		rc.leaderChanges.Add(1)
	}
}

// unreachableSince returns when the leader last heard from member id, if
// its heartbeats to it fail now.
func (rc *reach) unreachableSince(id string) (time.Time, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	t, ok := rc.since[id]
	return t, ok
}
