package cluster

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// probeTimeout bounds forceNewCluster's dial of each other member.
const probeTimeout = time.Second

// forcedTermJump is how far forceNewCluster raises the Raft term: more
// elections than old members could hold (one per election timeout at
// most) in decades.
const forcedTermJump = 1 << 32

// keyCurrentTerm is Raft's stable-store key of the current term.
var keyCurrentTerm = []byte("CurrentTerm")

// forceNewCluster rewrites this member's Raft configuration to itself
// alone, keeping its state (Raft's RecoverCluster: the latest snapshot and
// every entry of its log are applied, uncommitted ones included, and
// become a new snapshot under the new configuration). It is the way out of
// a lost quorum: a cluster whose majority is gone for good cannot elect a
// leader, and no write is possible until one member goes on alone.
//
// The other members must be gone: one that still runs would go on as a
// second cluster beside this one, and the two would grant the same
// resources. So it refuses while any other member of the old
// configuration accepts a connection on its Raft address (one cut off by
// a partition cannot be told from one that is down: that is the operator's
// to know). Writes acknowledged by the lost majority and never replicated
// here are lost (their fences are not: the next fence moves past them);
// the member whose log goes furthest is the one to recover.
func (n *Node) forceNewCluster(rc *raft.Config, snaps raft.SnapshotStore) error {
	probe := *rc // GetConfiguration marks its Config to skip Raft's start
	old, err := raft.GetConfiguration(&probe, n.fsm, n.logs, n.logs, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("cluster: --force-new-cluster: reading the Raft configuration: %w", err)
	}
	voter := false
	var others []string
	for _, s := range old.Servers {
		if string(s.ID) == n.id {
			voter = s.Suffrage == raft.Voter
			continue
		}
		others = append(others, string(s.ID))
		conn, err := net.DialTimeout("tcp", string(s.Address), probeTimeout)
		if err == nil {
			conn.Close()
			return fmt.Errorf("cluster: --force-new-cluster: member %s answers at %s: this member would become a second cluster "+
				"beside the one it is in, and both would grant the same leases. Stop every other member for good first "+
				"(or, if the cluster has a leader, remove the lost members with tenure cluster remove instead)", s.ID, s.Address)
		}
	}
	if !voter {
		return fmt.Errorf("cluster: --force-new-cluster: %s is not a voter of the cluster its data dir last knew "+
			"(removed from it?): it may be far behind what the cluster acknowledged; recover a member that is", n.id)
	}
	// Left out members may come back with their data: refuse them (see
	// outcastFilter). Recorded first: a crash before the recovery ends
	// leaves a list, never a new cluster without one.
	out, err := readOutcasts(n.cfg.DataDir)
	if err != nil {
		return err
	}
	for _, id := range others {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if err := writeOutcasts(n.cfg.DataDir, out); err != nil {
		return fmt.Errorf("cluster: --force-new-cluster: %w", err)
	}
	self := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: n.trans.LocalAddr()}}}
	// The lost members may have acknowledged leases this member never
	// got: the next fence moves past any of theirs, as a restore's does.
	n.fsm.bumpFences = DefaultFenceBump
	err = raft.RecoverCluster(rc, n.fsm, n.logs, n.logs, snaps, n.trans, self)
	n.fsm.bumpFences = 0
	if err != nil {
		return fmt.Errorf("cluster: --force-new-cluster: %w", err)
	}
	// The new cluster's terms start far above any the old members can
	// reach: Raft takes entries of one index and term for the same entry,
	// and an old member that leads the others at a term this one also
	// reached would otherwise match its history here, or depose this
	// member with a higher one.
	term, err := n.logs.GetUint64(keyCurrentTerm)
	if err != nil && err.Error() != "not found" {
		return fmt.Errorf("cluster: --force-new-cluster: reading the term: %w", err)
	}
	if err := n.logs.SetUint64(keyCurrentTerm, term+forcedTermJump); err != nil {
		return fmt.Errorf("cluster: --force-new-cluster: raising the term: %w", err)
	}
	n.log.Warn("forced a new one-member cluster from this data dir (--force-new-cluster): "+
		"start this member without the flag from now on; wipe the data dirs of the old members before they --join it "+
		"(this member refuses them while they run with their old data)",
		"old_members", strings.Join(others, ","), "raft_addr", n.trans.LocalAddr(), "fence_bump", DefaultFenceBump)
	return nil
}
