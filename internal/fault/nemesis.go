package fault

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// Nemesis injects faults into a Cluster, notes each in the history, and
// brings the cluster back to health after each.
type Nemesis struct {
	T   testing.TB
	C   *Cluster
	Rec *Recorder
	// Hold is how long a fault lasts (a pause or partition must outlast
	// the election timeout: Raft's default 1 s, detected within 2 s).
	Hold time.Duration
	// Injected counts faults by kind.
	Injected map[string]int
	// WallOffsetLeaders are the members that led with an offset wall clock.
	WallOffsetLeaders map[string]time.Duration
}

func (n *Nemesis) note(kind, format string, args ...any) {
	if n.Injected == nil {
		n.Injected = map[string]int{}
	}
	n.Injected[kind]++
	msg := kind + ": " + fmt.Sprintf(format, args...)
	n.Rec.Note(msg)
	n.T.Logf("nemesis %s", msg)
}

// hold lets a fault last d (the fault is the point: nothing to wait for).
func hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// recover heals every link, resumes paused members, starts stopped ones
// and waits until all are ready under one leader.
func (n *Nemesis) recover() {
	n.C.Heal()
	for _, m := range n.C.Members {
		if m.Paused() {
			m.Resume()
		}
		if !m.Running() {
			m.Start()
		}
	}
	for _, m := range n.C.Members {
		m.WaitReady(60 * time.Second)
	}
	n.C.WaitLeader(30 * time.Second)
	n.Rec.Note("healed")
}

// Faults are the nemesis's fault kinds, in the order a round runs them.
var Faults = []string{"kill-leader", "kill-follower", "pause-leader", "isolate-leader", "cut-link", "wall-offset"}

// Inject runs one fault of the given kind and recovers from it.
func (n *Nemesis) Inject(ctx context.Context, kind string) {
	c := n.C
	l := c.WaitLeader(30 * time.Second)
	switch kind {
	case "kill-leader":
		n.note(kind, "kill -9 %s", l.ID)
		l.Kill()
		c.WaitLeader(30*time.Second, l)
		hold(ctx, n.Hold/2)
		n.Rec.Note("restart " + l.ID)
		l.Start()
	case "kill-follower":
		f := n.follower(l)
		n.note(kind, "kill -9 %s", f.ID)
		f.Kill()
		hold(ctx, n.Hold)
		n.Rec.Note("restart " + f.ID)
		f.Start()
	case "pause-leader":
		n.note(kind, "SIGSTOP %s for %v", l.ID, n.Hold)
		l.Pause()
		paused := time.Now()
		// Longer than the election timeout: the others elect a leader.
		c.WaitLeader(30*time.Second, l)
		hold(ctx, n.Hold-time.Since(paused))
		l.Resume()
	case "isolate-leader":
		n.note(kind, "cut %s from every member for %v", l.ID, n.Hold)
		c.Isolate(l)
		cut := time.Now()
		// The cut works: the majority side elects a leader of its own.
		c.WaitLeader(30*time.Second, l)
		hold(ctx, n.Hold-time.Since(cut))
		c.Heal()
	case "cut-link":
		// A partial partition: the leader loses one follower and keeps
		// its majority through the other.
		f := n.follower(l)
		n.note(kind, "cut the link %s–%s for %v", l.ID, f.ID, n.Hold)
		c.Cut(l, f)
		hold(ctx, n.Hold)
		c.Heal()
	case "wall-offset":
		// Restart a follower with its wall clock an hour off (alternating
		// ahead and behind) and hand it the leadership.
		f := n.follower(l)
		off := time.Hour
		if n.Injected[kind]%2 == 1 {
			off = -time.Hour
		}
		n.note(kind, "restart %s with wall clock %+v and make it leader", f.ID, off)
		f.Env = []string{"TENURE_TEST_WALL_OFFSET=" + off.String()}
		f.Restart()
		f.WaitReady(60 * time.Second)
		n.transfer(l, f)
		if n.WallOffsetLeaders == nil {
			n.WallOffsetLeaders = map[string]time.Duration{}
		}
		if c.Leader() == f {
			n.WallOffsetLeaders[f.ID] = off
		}
		hold(ctx, n.Hold)
	default:
		n.T.Fatalf("unknown fault %q", kind)
	}
	n.recover()
}

func (n *Nemesis) follower(l *Member) *Member { return n.C.Other(l) }

// transfer asks leader l to hand leadership to f and waits for it.
func (n *Nemesis) transfer(l, f *Member) {
	cc := tenurev1connect.NewClusterServiceClient(n.C.http, "http://"+l.API, connect.WithGRPC())
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cc.TransferLeadership(ctx, connect.NewRequest(&tenurev1.TransferLeadershipRequest{Id: f.ID}))
		cancel()
		if err == nil {
			if got := n.C.WaitLeader(30 * time.Second); got == f {
				n.Rec.Note("leader is " + f.ID)
				return
			} else {
				l = got
				cc = tenurev1connect.NewClusterServiceClient(n.C.http, "http://"+l.API, connect.WithGRPC())
			}
		} else {
			n.T.Logf("transfer leadership to %s: %v", f.ID, err)
			l = n.C.WaitLeader(30 * time.Second)
			cc = tenurev1connect.NewClusterServiceClient(n.C.http, "http://"+l.API, connect.WithGRPC())
		}
		if l == f {
			return
		}
	}
}
