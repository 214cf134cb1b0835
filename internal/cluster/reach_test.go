package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestReach: a member is unreachable from its first failed heartbeat,
// since its last contact, until one succeeds; a change of leader starts
// the view afresh.
func TestReach(t *testing.T) {
	rc := &reach{since: map[string]time.Time{}}
	last := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	rc.note(raft.FailedHeartbeatObservation{PeerID: "n2", LastContact: last})
	rc.note(raft.FailedHeartbeatObservation{PeerID: "n2", LastContact: last.Add(time.Second)})
	if got, ok := rc.unreachableSince("n2"); !ok || !got.Equal(last) {
		t.Fatalf("after two failures: %v %v, want %v", got, ok, last)
	}
	if _, ok := rc.unreachableSince("n3"); ok {
		t.Fatal("n3 never failed")
	}
	rc.note(raft.ResumedHeartbeatObservation{PeerID: "n2"})
	if _, ok := rc.unreachableSince("n2"); ok {
		t.Fatal("n2 resumed")
	}
	rc.note(raft.FailedHeartbeatObservation{PeerID: "n3"}) // never heard from: since now
	if got, ok := rc.unreachableSince("n3"); !ok || time.Since(got) > time.Minute {
		t.Fatalf("n3: %v %v", got, ok)
	}
	rc.note(raft.LeaderObservation{})
	if _, ok := rc.unreachableSince("n3"); ok {
		t.Fatal("a new leader starts afresh")
	}
}

// TestReachCountsEachLeaderOnce: the leader Raft knows when the observer
// starts (a restarted follower may hear from its leader before) counts as
// observed, once, even when Raft's own observation of it follows; each
// real change counts, an election ("") included.
func TestReachCountsEachLeaderOnce(t *testing.T) {
	var told []string
	rc := &reach{since: map[string]time.Time{}, onLeader: func(id string) { told = append(told, id) }}
	rc.observed(raft.LeaderObservation{LeaderID: "n1"}) // what Raft knew at the start
	rc.observed(raft.LeaderObservation{LeaderID: "n1"}) // its observation, on its way
	rc.observed(raft.LeaderObservation{})               // an election
	rc.observed(raft.LeaderObservation{LeaderID: "n1"})
	if n := rc.leaderChanges.Load(); n != 3 || len(told) != 3 || told[0] != "n1" || told[1] != "" || told[2] != "n1" {
		t.Fatalf("%d changes counted, onLeader told %q; want 3: n1, none, n1", n, told)
	}
}
