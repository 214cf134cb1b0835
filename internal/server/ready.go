package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// catchUp is what a following member's readiness needs beyond
// cluster.Node.Ready (a leader known, applied up to its own commit
// index): a follower learns the commit index from the leader only as the
// entries arrive, so its own is 0 right after a restart and trails the
// leader's all through a catch-up, and Ready alone said ready (then not,
// then ready again) long before the member had caught up. A follower is
// ready once it has applied what the leader had committed when asked; it
// asks again after every change of leader it sees (an election, or being
// cut off and back).
type catchUp struct {
	mu      sync.Mutex
	changes uint64 // Node.LeaderChanges when target was asked
	target  uint64 // the leader's commit index then
	asked   time.Time
	done    bool
}

// askEvery bounds how often a catching-up member asks the leader again,
// so that a target it cannot reach soon is refreshed.
const askEvery = time.Second

// targetGrace is how long a readiness probe that just asked the leader
// waits for this member to apply what it was told.
const targetGrace = 250 * time.Millisecond

// caughtUp reports whether this following member has caught up with the
// leader, and if not, why.
func (s *Server) caughtUp(ctx context.Context) (bool, string) {
	c := &s.catchUp
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := s.node.LeaderChanges(); n != c.changes {
		c.changes, c.target, c.asked, c.done = n, 0, time.Time{}, false
	}
	if c.done {
		return true, ""
	}
	// What the leader had committed when last asked is applied: caught
	// up. (Checked before asking again: under steady writes a fresh
	// target is always a few entries ahead of what this member has heard
	// of, and probes a second or more apart never saw it reached.)
	if c.target != 0 && s.node.Applied() >= c.target {
		c.done = true
		return true, ""
	}
	if c.target == 0 || time.Since(c.asked) >= askEvery {
		_, addr := s.node.Leader()
		if addr == "" {
			// A restarted member replaying its log learns the leader's
			// address from the entry that published it.
			return false, "catching up: applied " + utoa(s.node.Applied()) + " entries, not yet the one that published the leader's API address"
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		commit, err := s.leaderCommit(ctx, addr)
		switch {
		case connect.CodeOf(err) == connect.CodeUnauthenticated || connect.CodeOf(err) == connect.CodePermissionDenied:
			// The leader does not let this member ask (no --member-token):
			// fall back on the member's own commit index.
			s.log.Warn("readiness: the leader refuses this member's Status call; ready means applied up to the member's own commit index (give --member-token)", "err", err)
			c.done = true
			return true, ""
		case err != nil:
			return false, "cannot ask the leader at " + addr + " how far the log is committed: " + err.Error()
		}
		c.target, c.asked = commit, time.Now()
		// A member in step with the leader hears of that commit index
		// with the leader's next message, milliseconds away: give it
		// that long rather than answer not ready every time a target
		// was just asked (after each change of leader, under writes).
		wctx, cancel := context.WithTimeout(ctx, targetGrace)
		_ = s.node.WaitApplied(wctx, c.target)
		cancel()
	}
	if applied := s.node.Applied(); applied < c.target {
		return false, fmt.Sprintf("catching up: applied %d of the %d entries the leader had committed", applied, c.target)
	}
	c.done = true
	return true, ""
}

// leaderCommit asks the leader at addr for its commit index.
func (s *Server) leaderCommit(ctx context.Context, addr string) (uint64, error) {
	proc := v1c.ClusterServiceStatusProcedure
	c := s.fwd.get(s.fwd.scheme+addr+proc, func(hc connect.HTTPClient, url string) any {
		return connect.NewClient[tenurev1.StatusRequest, tenurev1.StatusResponse](hc, url)
	}).(*connect.Client[tenurev1.StatusRequest, tenurev1.StatusResponse])
	req := connect.NewRequest(&tenurev1.StatusRequest{})
	req.Header().Set(HeaderForwardedBy, s.node.ID())
	s.fwd.own(req.Header())
	resp, err := c.CallUnary(ctx, req)
	if err != nil {
		return 0, err
	}
	return resp.Msg.GetCommitIndex(), nil
}
