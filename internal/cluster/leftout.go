package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/ledger"
)

// The other side of outcastFilter: a member that --force-new-cluster left
// out, started again with its old data, learns it from the forced member's
// refusal of its Raft calls (a vote request, a heartbeat), and stops for
// good, so that it cannot go on as the old cluster with other left-out
// members (found from outside: two clusters granting the same resource).
// It records the refusal in its data dir and refuses to start from it
// again. Left-out members that never reach the forced member (a partition)
// can still form the old cluster between themselves: wipe them.

// leftOutFile records, in a data dir, that a forced member refused this
// member's Raft calls.
const leftOutFile = "left-out.json"

// leftOutMark is in the error outcastFilter answers an outcast with.
const leftOutMark = "was left out of this cluster by --force-new-cluster"

type leftOutRecord struct {
	RefusedBy string    `json:"refusedBy"`
	At        time.Time `json:"at"`
	Error     string    `json:"error"`
}

// checkLeftOut refuses to start from a data dir a forced member refused.
func checkLeftOut(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, leftOutFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	var rec leftOutRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("cluster: %s: %w", filepath.Join(dir, leftOutFile), err)
	}
	return leftOutError(dir, rec)
}

func leftOutError(dir string, rec leftOutRecord) error {
	return fmt.Errorf("cluster: member %s, forced into a new cluster by --force-new-cluster, refused this member's Raft calls "+
		"(%s): this data dir holds the old cluster's history, which must not go on; wipe %s and start this member with "+
		"--join and the API address of a member of the new cluster", rec.RefusedBy, rec.At.UTC().Format(time.RFC3339), dir)
}

// leftOutWatch wraps a member's Raft transport: its own calls go through,
// and a refusal by a forced member ends the member (onLeftOut). It also
// notes, for a leader, the last log index each member acknowledged
// holding (acked), when each member last answered a call (answered) and
// whether a heartbeat to it has gone unanswered for long (silentSince).
type leftOutWatch struct {
	raft.Transport
	dir       string
	onLeftOut func(error)
	seen      atomic.Bool

	mu       sync.Mutex
	acked    map[raft.ServerID]uint64
	answered map[raft.ServerID]time.Time
	beating  map[raft.ServerID]time.Time // heartbeats under way, since
}

func newLeftOutWatch(trans raft.Transport, dir string, onLeftOut func(error)) *leftOutWatch {
	return &leftOutWatch{Transport: trans, dir: dir, onLeftOut: onLeftOut}
}

func (w *leftOutWatch) check(id raft.ServerID, err error) error {
	if err == nil || !strings.Contains(err.Error(), leftOutMark) || !w.seen.CompareAndSwap(false, true) {
		return err
	}
	rec := leftOutRecord{RefusedBy: string(id), At: time.Now(), Error: err.Error()}
	b, merr := json.Marshal(rec)
	if merr == nil {
		merr = ledger.WriteFileAtomic(filepath.Join(w.dir, leftOutFile), b)
	}
	out := leftOutError(w.dir, rec)
	if merr != nil {
		out = fmt.Errorf("%w (recording it in %s failed: %v)", out, filepath.Join(w.dir, leftOutFile), merr)
	}
	w.onLeftOut(out)
	return err
}

func (w *leftOutWatch) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	heartbeat := isHeartbeat(args)
	if heartbeat {
		w.mu.Lock()
		if w.beating == nil {
			w.beating = map[raft.ServerID]time.Time{}
		}
		w.beating[id] = time.Now()
		w.mu.Unlock()
	}
	err := w.check(id, w.Transport.AppendEntries(id, target, args, resp))
	w.mu.Lock()
	defer w.mu.Unlock()
	if heartbeat {
		delete(w.beating, id)
	}
	if err != nil {
		return err
	}
	// Any answer, a refusal too, says the member is there.
	if w.answered == nil {
		w.answered = map[raft.ServerID]time.Time{}
		w.acked = map[raft.ServerID]uint64{}
	}
	w.answered[id] = time.Now()
	if resp.Success && len(args.Entries) > 0 {
		w.acked[id] = max(w.acked[id], args.Entries[len(args.Entries)-1].Index)
	}
	return nil
}

// isHeartbeat is the test Raft's transport applies to pass a call to the
// member's heartbeat handler, which answers at once (not after the
// member's Raft loop).
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return a.Term != 0 && a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

// silentSince reports, if a heartbeat to member id has gone unanswered
// for longer than after, when the member last answered a call (or, if it
// never did, when that heartbeat was sent). A member that hangs (stopped,
// or cut off by dropped packets) fails its heartbeats only when they time
// out, after the transport's 10 s; a member that answers takes a
// millisecond.
func (w *leftOutWatch) silentSince(id raft.ServerID, after time.Duration) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sent, ok := w.beating[id]
	if !ok || time.Since(sent) <= after {
		return time.Time{}, false
	}
	if last := w.answered[id]; !last.IsZero() {
		return last, true
	}
	return sent, true
}

// ackedBy is the last log index member id acknowledged holding, as far as
// this member's own calls to it tell (0: none seen).
func (w *leftOutWatch) ackedBy(id raft.ServerID) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked[id]
}

func (w *leftOutWatch) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return w.check(id, w.Transport.RequestVote(id, target, args, resp))
}

// RequestPreVote passes the member's pre-votes on (raft looks for the
// method on its transport).
func (w *leftOutWatch) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pre, ok := w.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("the transport has no pre-vote")
	}
	return w.check(id, pre.RequestPreVote(id, target, args, resp))
}

// Close closes the transport.
func (w *leftOutWatch) Close() error {
	if c, ok := w.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}
