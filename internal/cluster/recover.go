package cluster

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// probeTimeout bounds forceNewCluster's dial of each other member.
const probeTimeout = time.Second

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
// here are lost, their fences with them; the member with the highest
// applied index is the one to recover.
func (n *Node) forceNewCluster(rc *raft.Config, snaps raft.SnapshotStore) error {
	probe := *rc // GetConfiguration marks its Config to skip Raft's start
	old, err := raft.GetConfiguration(&probe, n.fsm, n.logs, n.logs, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("cluster: --force-new-cluster: reading the Raft configuration: %w", err)
	}
	var others []string
	for _, s := range old.Servers {
		if string(s.ID) == n.id {
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
	self := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: n.trans.LocalAddr()}}}
	if err := raft.RecoverCluster(rc, n.fsm, n.logs, n.logs, snaps, n.trans, self); err != nil {
		return fmt.Errorf("cluster: --force-new-cluster: %w", err)
	}
	n.log.Warn("forced a new one-member cluster from this data dir (--force-new-cluster): "+
		"start this member without the flag from now on; wipe the data dirs of the old members before they --join it",
		"old_members", strings.Join(others, ","), "raft_addr", n.trans.LocalAddr())
	return nil
}
