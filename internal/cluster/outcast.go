package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/ledger"
)

// outcastsFile lists, in a data dir, the members a --force-new-cluster
// left out (JSON array of ids), while any of them is not back.
const outcastsFile = "forced-out.json"

// outcastFilter stands between the Raft transport and Raft on a member
// forced into a new cluster (forceNewCluster), and refuses every RPC from
// a member the force left out until that member is in the configuration
// again (wiped and joined back). An old member restarted with its old data
// still believes in the old configuration: without this, its vote
// requests and, once it leads the old members it can reach, its
// AppendEntries would take this member back into the old cluster, and the
// two histories would grant the same leases (found from outside: two
// holders of one resource, with one fence).
//
// An old member it refuses stops on its own (leftOutWatch); old members
// that reach each other but never this member (a partition) can still go
// on as the old cluster among themselves: they must be wiped.
type outcastFilter struct {
	transportFilter
	dir string
	log *slog.Logger
	// members is the latest Raft configuration's ids (nil until Raft runs).
	members atomic.Pointer[func() map[string]bool]

	mu     sync.Mutex
	out    []string             // left out and not back, sorted
	warned map[string]time.Time // when each was last logged
}

// readOutcasts returns the ids dir's outcastsFile lists (none without it).
func readOutcasts(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, outcastsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", filepath.Join(dir, outcastsFile), err)
	}
	return ids, nil
}

// writeOutcasts records ids in dir (removing the file when none is left).
func writeOutcasts(dir string, ids []string) error {
	path := filepath.Join(dir, outcastsFile)
	if len(ids) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return ledger.WriteFileAtomic(path, b)
}

func newOutcastFilter(trans *raft.NetworkTransport, dir string, out []string, log *slog.Logger) *outcastFilter {
	slices.Sort(out)
	return &outcastFilter{transportFilter: newTransportFilter(trans), dir: dir, out: out, log: log,
		warned: map[string]time.Time{}}
}

// SetHeartbeatHandler filters heartbeats as Consumer filters the rest (the
// transport hands heartbeats to the handler directly).
func (f *outcastFilter) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		f.Transport.SetHeartbeatHandler(nil)
		return
	}
	f.Transport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if !f.refuse(rpc) {
			cb(rpc)
		}
	})
}

// run passes the transport's RPCs on to Raft, refusing the outcasts',
// until stop is closed. members reads the latest configuration's ids.
func (f *outcastFilter) run(members func() map[string]bool, stop <-chan struct{}) {
	f.members.Store(&members)
	f.pump(f.refuse, stop)
}

// refuse answers rpc with an error when it comes from an outcast.
func (f *outcastFilter) refuse(rpc raft.RPC) bool {
	h, ok := rpc.Command.(raft.WithRPCHeader)
	if !ok {
		return false
	}
	id := string(h.GetRPCHeader().ID)
	if id == "" || !f.isOutcast(id) {
		return false
	}
	rpc.Respond(nil, fmt.Errorf("member %s "+leftOutMark+" and still has its old data: "+
		"wipe its data dir and --join it again", id))
	return true
}

// listed reports whether id is on the list (whether or not it is back).
func (f *outcastFilter) listed(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, found := slices.BinarySearch(f.out, id)
	return found
}

// isOutcast reports whether id is left out and not back; one that is in
// the configuration again is dropped from the list for good.
func (f *outcastFilter) isOutcast(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, found := slices.BinarySearch(f.out, id)
	if !found {
		return false
	}
	if m := f.members.Load(); m != nil && (*m)()[id] {
		f.out = slices.Delete(f.out, i, i+1)
		if err := writeOutcasts(f.dir, f.out); err != nil {
			f.log.Warn("recording a member joined back after --force-new-cluster", "member", id, "err", err)
		}
		f.log.Info("a member left out by --force-new-cluster is a member again", "member", id)
		return false
	}
	if now := time.Now(); now.Sub(f.warned[id]) > time.Minute {
		f.warned[id] = now
		f.log.Error("refusing Raft calls from a member left out by --force-new-cluster: it runs with its old data, "+
			"and would take this member back into the old cluster; stop it, wipe its data dir and --join it again",
			"member", id)
	}
	return true
}
