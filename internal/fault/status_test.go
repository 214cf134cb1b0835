package fault

import (
	"context"
	"testing"
	"time"
)

// A follower that hangs (SIGSTOP) is shown unreachable by the leader's
// Status within seconds, not only when its heartbeats time out (the
// transport's 10 s), since about when it stopped; once it runs again it
// is shown reachable.
func TestStatusShowsAHungFollowerSoon(t *testing.T) {
	c := StartCluster(t, tenureBin, 3)
	l := c.WaitLeader(30 * time.Second)
	f := c.Other(l)
	unreachable := func() (time.Time, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := l.Status(ctx)
		if err != nil {
			return time.Time{}, false
		}
		for _, m := range st.GetMembers() {
			if m.GetId() == f.ID && m.GetUnreachableSince() != nil {
				return m.GetUnreachableSince().AsTime(), true
			}
		}
		return time.Time{}, false
	}
	waitFor(t, 20*time.Second, "the follower shown reachable", func() bool { _, down := unreachable(); return !down })
	stopped := time.Now()
	f.Pause()
	defer f.Resume()
	var since time.Time
	waitFor(t, 7*time.Second, "the hung follower shown unreachable", func() bool {
		var down bool
		since, down = unreachable()
		return down
	})
	t.Logf("shown unreachable %v after the follower stopped, since %v before", time.Since(stopped), stopped.Sub(since))
	if since.After(stopped.Add(time.Second)) || since.Before(stopped.Add(-5*time.Second)) {
		t.Errorf("unreachable since %v, but the follower stopped at %v", since, stopped)
	}
	f.Resume()
	waitFor(t, 20*time.Second, "the resumed follower shown reachable", func() bool { _, down := unreachable(); return !down })
}
