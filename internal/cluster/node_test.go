package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
	"github.com/tenurehq/tenure/internal/testlog"
)

// open starts a node on dir with fast Raft timings and waits until it leads.
func open(t *testing.T, dir string) *Node {
	t.Helper()
	return openWith(t, dir, nil)
}

// openWith is open with the config passed through mod (when not nil).
func openWith(t *testing.T, dir string, mod func(*Config)) *Node {
	t.Helper()
	n := openNoWaitWith(t, dir, mod)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitLeader(ctx); err != nil {
		n.Close()
		t.Fatalf("WaitLeader: %v", err)
	}
	return n
}

// openNoWait starts a node on dir with fast Raft timings.
func openNoWait(t *testing.T, dir string) *Node {
	t.Helper()
	return openNoWaitWith(t, dir, nil)
}

// openNoWaitWith is openNoWait with the config passed through mod.
func openNoWaitWith(t *testing.T, dir string, mod func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.HeartbeatTimeout = 50 * time.Millisecond
	cfg.ElectionTimeout = 50 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return n
}

func ms(d time.Duration) *int64 { v := registrar.Ms(d); return &v }

func acquire(t *testing.T, n *Node, resource, holder string, ttl, wait time.Duration) registrar.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
		Resource: resource, Holder: holder, TtlMs: ms(ttl), WaitMs: registrar.Ms(wait),
	}}})
	if err != nil {
		t.Fatalf("Propose acquire: %v", err)
	}
	return res.Outcome
}

func get(t *testing.T, n *Node, id string) (registrar.Lease, error) {
	t.Helper()
	var l registrar.Lease
	err := n.Read(context.Background(), false, func(m *statemachine.Machine, tk registrar.Tick) error {
		var err error
		l, err = m.Registrar().Get(id, tk)
		return err
	})
	return l, err
}

func TestNodeGrantsAndSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	out := acquire(t, n, "orders/1", "w1", time.Minute, 0)
	if out.Err != nil {
		t.Fatalf("acquire: %v", out.Err)
	}
	first := *out.Lease
	if out := acquire(t, n, "orders/1", "w2", time.Minute, 0); !errors.Is(out.Err, registrar.ErrLeaseHeld) {
		t.Fatalf("second acquire: got %v, want LEASE_HELD", out.Err)
	}
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	out = acquire(t, n, "orders/2", "w1", time.Minute, 0) // after the snapshot: replayed from the log
	if out.Err != nil {
		t.Fatalf("acquire 2: %v", out.Err)
	}
	second := *out.Lease
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	n = open(t, dir)
	defer n.Close()
	for _, want := range []registrar.Lease{first, second} {
		l, err := get(t, n, want.ID)
		if err != nil {
			t.Fatalf("Get %s after restart: %v", want.ID, err)
		}
		if l.State != registrar.Active || l.Fence != want.Fence {
			t.Fatalf("after restart: %+v, want active with fence %d", l, want.Fence)
		}
	}
	out = acquire(t, n, "orders/3", "w1", time.Minute, 0)
	if out.Err != nil || out.Lease.Fence <= second.Fence {
		t.Fatalf("acquire after restart: %+v, want fence > %d", out, second.Fence)
	}
	if out.Lease.IssuedTick < second.IssuedTick {
		t.Fatalf("tick went backwards across restart: %d < %d", out.Lease.IssuedTick, second.IssuedTick)
	}
}

// TestLoneVoterLeadsAtOnce: a node that is its configuration's only voter
// stands for election as it starts, on a fresh data dir and on restart,
// rather than after Raft's heartbeat timeout (a minute here: open waits
// ten seconds at the most).
func TestLoneVoterLeadsAtOnce(t *testing.T) {
	dir := t.TempDir()
	slow := func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = time.Minute, time.Minute }
	n := openWith(t, dir, slow)
	if out := acquire(t, n, "orders/1", "w1", time.Minute, 0); out.Err != nil {
		t.Fatalf("acquire: %v", out.Err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	n = openWith(t, dir, slow)
	defer n.Close()
	if got := n.raft.ReloadableConfig().HeartbeatTimeout; got != time.Minute {
		t.Fatalf("heartbeat timeout after the election: %v, want it set back to 1m", got)
	}
	if out := acquire(t, n, "orders/1", "w2", time.Minute, 0); !errors.Is(out.Err, registrar.ErrLeaseHeld) {
		t.Fatalf("acquire after restart: %v, want LEASE_HELD", out.Err)
	}
}

// TestSnapshotsBesideWrites: snapshots encode their state while writes
// go on (Persist runs beside applies); every write acknowledged around
// them is there after a restart, with its fence. Under -race this also
// checks that a capture shares nothing the applies change.
func TestSnapshotsBesideWrites(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	const writers, each = 4, 150
	leases := make([][]registrar.Lease, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
					Resource: fmt.Sprintf("r/%d/%d", w, i), Holder: "h", TtlMs: ms(5 * time.Minute)}}})
				cancel()
				if err == nil {
					err = res.Outcome.Err
				}
				if err != nil {
					errs <- err
					return
				}
				leases[w] = append(leases[w], *res.Outcome.Lease)
			}
		})
	}
	for range 5 {
		if _, _, err := n.Snapshot(); err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("acquire: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	n = open(t, dir)
	defer n.Close()
	err := n.Read(context.Background(), false, func(m *statemachine.Machine, tk registrar.Tick) error {
		for _, ls := range leases {
			for _, want := range ls {
				l, err := m.Registrar().Get(want.ID, tk)
				if err != nil || l.Fence != want.Fence || l.State != registrar.Active {
					return fmt.Errorf("lease on %s after restart: %+v %v, want active with fence %d", want.Resource, l, err, want.Fence)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWaiterGrantedOnExpiry(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	held := acquire(t, n, "r", "w1", time.Second, 0)
	if held.Err != nil {
		t.Fatal(held.Err)
	}
	out := acquire(t, n, "r", "w2", time.Second, 10*time.Second)
	if out.WaiterID == 0 {
		t.Fatalf("want a waiter, got %+v", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No request arrives: only the expirer can expire the lease and hand it over.
	res, err := n.AwaitWaiter(ctx, out.WaiterID)
	if err != nil || res.Err != nil {
		t.Fatalf("AwaitWaiter: %v / %v", err, res.Err)
	}
	if res.Lease.Holder != "w2" || res.Lease.Fence <= held.Lease.Fence {
		t.Fatalf("granted %+v", res.Lease)
	}
	if res.Lease.IssuedTick < held.Lease.ExpiresTick {
		t.Fatalf("granted at tick %d before the holder's expiry %d", res.Lease.IssuedTick, held.Lease.ExpiresTick)
	}
}

func TestWaitEnds(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	if out := acquire(t, n, "r", "w1", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	out := acquire(t, n, "r", "w2", time.Second, 50*time.Millisecond)
	if out.WaiterID == 0 {
		t.Fatalf("want a waiter, got %+v", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.AwaitWaiter(ctx, out.WaiterID)
	if err != nil {
		t.Fatal(err)
	}
	var he *registrar.HeldError
	if !errors.As(res.Err, &he) || !he.WaitEnded || he.Holder != "w1" {
		t.Fatalf("want a wait-ended LEASE_HELD naming w1, got %v", res.Err)
	}
}

func TestConcurrentProposalsShareBatches(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	const clients = 64
	errs := make(chan error, clients)
	for i := range clients {
		go func() {
			out := acquire(t, n, "res/"+string(rune('a'+i%26))+string(rune('a'+i/26)), "w", time.Minute, 0)
			errs <- out.Err
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var leases []registrar.Lease
	n.Read(context.Background(), false, func(m *statemachine.Machine, tk registrar.Tick) error {
		leases = m.Registrar().ByHolder("w", "", tk)
		return nil
	})
	if len(leases) != clients {
		t.Fatalf("%d active leases, want %d", len(leases), clients)
	}
}

func TestFeedReadsAndCompacts(t *testing.T) {
	f := NewFeed(3, nil)
	if _, ch, err := f.Read(0, 10); err != nil || ch == nil {
		t.Fatalf("empty feed: %v", err)
	}
	var recs []statemachine.Sealed
	for i := uint64(1); i <= 5; i++ {
		recs = append(recs, statemachine.Sealed{Record: &logpb.Record{Index: i}})
	}
	f.append(recs)
	got, _, err := f.Read(2, 10)
	if err != nil || len(got) != 3 || got[0].Record.Index != 3 {
		t.Fatalf("Read(2): %v %v", got, err)
	}
	if _, _, err := f.Read(1, 10); registrar.ReasonOf(err) != registrar.ReasonInvalidArgument {
		t.Fatalf("Read(1) of a compacted index: %v", err)
	}
	if f.Head() != 5 {
		t.Fatalf("Head = %d", f.Head())
	}
}

// History reads one resource's records among those the ring still
// holds, in order, after an index; a gap (snapshot restore) empties it.
func TestFeedHistoryIndex(t *testing.T) {
	scope := func(r *logpb.Record) (string, string) {
		return r.GetIssued().GetNamespace(), r.GetIssued().GetResource()
	}
	f := NewFeed(4, scope)
	rec := func(i uint64, ns, res string) statemachine.Sealed {
		return statemachine.Sealed{Record: &logpb.Record{Index: i,
			Body: &logpb.Record_Issued{Issued: &logpb.LeaseIssued{Namespace: ns, Resource: res}}}}
	}
	history := func(ns, res string, after uint64) []uint64 {
		var out []uint64
		f.History(ns, res, after, func(s statemachine.Sealed) bool {
			out = append(out, s.Record.Index)
			return true
		})
		return out
	}
	f.append([]statemachine.Sealed{rec(1, "a", "x"), rec(2, "a", "y"), rec(3, "b", "x"), rec(4, "a", "x")})
	if got := history("a", "x", 0); !slices.Equal(got, []uint64{1, 4}) {
		t.Fatalf("history of a/x: %v, want [1 4]", got)
	}
	if got := history("a", "x", 1); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("history of a/x after 1: %v, want [4]", got)
	}
	// 1 and 2 leave the ring.
	f.append([]statemachine.Sealed{rec(5, "a", "x"), rec(6, "b", "x")})
	for _, tc := range []struct {
		ns, res string
		want    []uint64
	}{{"a", "x", []uint64{4, 5}}, {"a", "y", nil}, {"b", "x", []uint64{3, 6}}} {
		if got := history(tc.ns, tc.res, 0); !slices.Equal(got, tc.want) {
			t.Fatalf("history of %s/%s: %v, want %v", tc.ns, tc.res, got, tc.want)
		}
	}
	if len(f.byKey) != 2 {
		t.Fatalf("index holds %d keys, want 2: %v", len(f.byKey), f.byKey)
	}
	// A gap restarts the ring and its index.
	f.append([]statemachine.Sealed{rec(10, "a", "x")})
	if got := history("a", "x", 0); !slices.Equal(got, []uint64{10}) {
		t.Fatalf("history after a gap: %v, want [10]", got)
	}
	if got := history("b", "x", 0); got != nil {
		t.Fatalf("history of b/x after a gap: %v, want none", got)
	}
	// Stopping early.
	f.append([]statemachine.Sealed{rec(11, "a", "x")})
	n := 0
	f.History("a", "x", 0, func(statemachine.Sealed) bool { n++; return false })
	if n != 1 {
		t.Fatalf("fn called %d times after returning false", n)
	}
}

// A single node is Ready only once it serves, on its first start and on
// every restart: the first Ready it reports is followed at once by a
// linearizable read and a write that succeed, and the lease ids it grants
// resolve on every later start. Raft names the node leader before its term
// begins (barrier, clock anchor, registrar key), and Ready used to pass in
// that gap, so /readyz said OK while calls answered NOT_LEADER naming the
// node itself, or granted leases whose ids lacked the key's tag and were
// not found after the key was set. The gap is short; Ready is polled
// without pause to land in it.
func TestReadyOnlyOnceLeaderServes(t *testing.T) {
	dir := t.TempDir()
	var ids []string
	for start := range 4 {
		n := openNoWait(t, dir)
		// On failure the node is left open: its term's own proposals may
		// still be enqueued, and raft leaves those unanswered at Shutdown
		// (hashicorp/raft#498), so Close could wait forever.
		deadline := time.Now().Add(10 * time.Second)
		for !n.Ready(context.Background()) {
			if time.Now().After(deadline) {
				t.Fatalf("start %d: not ready after 10s", start)
			}
			runtime.Gosched()
		}
		for _, id := range ids {
			if _, err := get(t, n, id); err != nil {
				t.Fatalf("start %d: read right after Ready: %v", start, err)
			}
		}
		res, err := n.Propose(context.Background(), &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			Resource: fmt.Sprintf("ready/%d", start), Holder: "w", TtlMs: ms(time.Minute)}}})
		if err == nil {
			err = res.Outcome.Err
		}
		if err != nil {
			t.Fatalf("start %d: write right after Ready: %v", start, err)
		}
		ids = append(ids, res.Outcome.Lease.ID)
		// Let the term's own proposals (publishing this member) finish
		// before Close, for the same reason.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = n.WaitLeader(ctx)
		cancel()
		if err != nil {
			t.Fatalf("start %d: WaitLeader: %v", start, err)
		}
		if err := n.Close(); err != nil {
			t.Fatalf("start %d: Close: %v", start, err)
		}
	}
}

// While a lease is due, the replicated clock keeps up with the leader's
// even when nobody writes: the leader proposes an Advance whenever no
// command has carried the clock for ClockHeartbeat. A successor resumes
// from the last applied tick, so a leader that crashed after an idle spell
// would otherwise add the whole spell to every lease (found by the fault
// tests, internal/fault).
func TestReplicatedClockKeepsUpWhileLeasesAreDue(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	out := acquire(t, n, "clock/a", "h", time.Minute, 0)
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	appliedTick := n.fsm.maxTick.load
	start := appliedTick()
	deadline := time.Now().Add(10 * time.Second)
	for appliedTick() < start+1000 {
		if time.Now().After(deadline) {
			t.Fatalf("applied tick stuck at %d (started at %d) with a lease due and no writes", appliedTick(), start)
		}
		select {
		case <-n.fsm.changes():
		case <-time.After(time.Second):
		}
	}
	// And it stays close to the leader's clock (ClockHeartbeat 100 ms,
	// plus one Raft round).
	if lag := n.leader.Load().now() - appliedTick(); lag > 1000 {
		t.Fatalf("applied tick lags the leader's clock by %d ms", lag)
	}
}

// TestReplicationIsNotPipelined: the Raft transport replicates one
// request at a time (hashicorp/raft's pipeline can deadlock after a
// follower refuses an entry: replication to it stops for good and Raft
// cannot shut down).
func TestReplicationIsNotPipelined(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	if p, err := n.trans.AppendEntriesPipeline("other", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		if p != nil {
			_ = p.Close()
		}
		t.Fatalf("AppendEntriesPipeline: %v; want pipelining off", err)
	}
}

// TestStaleReadsAreNeverAhead: a stale read answers at the tick the
// member applied last, never at its term's clock, which runs ahead of it
// between entries (found from outside: a leader paused past an election
// and resumed answered a stale Get at a time the cluster had not reached,
// calling a live lease expired).
func TestStaleReadsAreNeverAhead(t *testing.T) {
	n := openWith(t, t.TempDir(), func(c *Config) { c.ClockHeartbeat = time.Hour })
	defer n.Close()
	if out := acquire(t, n, "stale/a", "h", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	readAt := func(stale bool) registrar.Tick {
		var at registrar.Tick
		if err := n.Read(context.Background(), stale, func(_ *statemachine.Machine, tk registrar.Tick) error {
			at = tk
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return at
	}
	applied := n.fsm.maxTick.load()
	deadline := time.Now().Add(10 * time.Second)
	for readAt(false) < applied+5 { // the term's clock moves on with no entry
		if time.Now().After(deadline) {
			t.Fatal("the leader's clock did not move")
		}
		select {
		case <-n.fsm.changes():
		case <-time.After(time.Millisecond):
		}
	}
	if got, now := readAt(true), n.fsm.maxTick.load(); got > now {
		t.Fatalf("stale read at tick %d, ahead of the applied tick %d", got, now)
	}
}

// Closing a node right after Raft elected it, while its leadership
// barrier is in flight, returns: the barrier may never be answered once
// Raft shuts down, and Close used to wait for it forever.
func TestCloseRightAfterElection(t *testing.T) {
	for range 5 {
		cfg := DefaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.RaftAddr = "127.0.0.1:0"
		cfg.HeartbeatTimeout = 50 * time.Millisecond
		cfg.ElectionTimeout = 50 * time.Millisecond
		n, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for n.raft.State() != raft.Leader {
			if time.Now().After(deadline) {
				t.Fatal("never elected")
			}
			runtime.Gosched()
		}
		closed := make(chan error, 1)
		go func() { closed <- n.Close() }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return within 10 s of an election")
		}
	}
}

// A command Raft refuses because the leadership is being transferred was
// never appended: it answers NOT_LEADER (retry), not OUTCOME_UNKNOWN. The
// fault tests saw every write during a TransferLeadership answered as
// unknown.
func TestRefusalDuringLeadershipTransferIsNotLeader(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	err := n.raftError(fmt.Errorf("apply: %w", raft.ErrLeadershipTransferInProgress))
	if r := registrar.ReasonOf(err); r != registrar.ReasonNotLeader {
		t.Fatalf("refused during a leadership transfer: reason %q (%v), want NOT_LEADER", r, err)
	}
	// Broken off after appending stays unknown.
	err = n.raftError(raft.ErrLeadershipLost)
	if e := registrar.ToError(err); e.Reason != registrar.ReasonOutcomeUnknown || e.Metadata["cause"] != "raft" || !hasKey(e.Metadata, "leader_id") {
		t.Fatalf("leadership lost while committing: %v (%v), want OUTCOME_UNKNOWN naming its cause and the leader", err, e.Metadata)
	}
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// Ticks stamped in an earlier term of this node never carry into a later
// one: a leader paused past the election timeout kept stamping its (then
// far ahead) clock on entries that never committed, and when it led again
// its first ticks jumped ahead of the committed timeline by the pause,
// so leases expired that much early in real time (found by a 10-minute
// soak of the fault tests).
func TestStampsDoNotCarryAcrossTerms(t *testing.T) {
	var s stamper
	now := time.Now()
	old := &term{start: now, base: 50_000} // stamped far ahead, never committed
	if got := s.stamp(old, 40_000); got < 50_000 {
		t.Fatalf("stamp %d below the term's clock", got)
	}
	next := &term{start: now, base: 46_000} // resumes from the last applied tick
	got := s.stamp(next, 46_000)
	if got >= 47_000 {
		t.Fatalf("new term stamped %d: carried the earlier term's tick (want about 46000)", got)
	}
	// Within a term, stamps never go backwards, nor below what applied.
	if again := s.stamp(next, 46_500); again < got || again < 46_500 {
		t.Fatalf("stamp %d after %d with applied 46500", again, got)
	}
}

// Wall times stamped on commands never run backwards: not within a term
// whose clock is stepped back, nor when a leader whose clock is behind
// takes over (found from outside: a leader an hour behind ordered new
// queue tasks ahead of older ones and held delayed tasks back an hour).
// Ahead of the clock they go on at half speed until it catches up (found
// from outside: one member's clock an hour ahead, once, kept every later
// wall time an hour ahead for good); a clock that is ahead is followed.
func TestWallTimesNeverRunBackwards(t *testing.T) {
	t0 := time.Now()
	ms := func(d time.Duration) int64 {
		return (t0.Add(d).UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	} // as stamped: rounded up
	// The last leader stamped an hour ahead of this one's clock.
	behind := &term{start: t0, wallBase: ms(time.Hour)}
	if w := behind.wallAt(t0); w != ms(time.Hour) {
		t.Fatalf("first stamp %d; want the last applied wall time %d", w, ms(time.Hour))
	}
	if w := behind.wallAt(t0.Add(10 * time.Second)); w != ms(time.Hour+5*time.Second) {
		t.Fatalf("10 s later: %d; want half of them added, %d", w, ms(time.Hour+5*time.Second))
	}
	prev := behind.wallAt(t0.Add(10 * time.Second))
	for s := 20 * time.Second; s <= 3*time.Hour; s += 10 * time.Minute {
		w := behind.wallAt(t0.Add(s))
		if w < prev {
			t.Fatalf("at +%v: stamped %d after %d", s, w, prev)
		}
		prev = w
	}
	if w := behind.wallAt(t0.Add(3 * time.Hour)); w != ms(3*time.Hour) {
		t.Fatalf("3 h later: %d; want the clock, %d, caught up after twice the hour", w, ms(3*time.Hour))
	}
	// A clock stepped back within a term: the same.
	stepped := &term{start: t0, wallBase: ms(0)}
	stepped.wallAt(t0)
	stepped.offset = -time.Minute
	if w := stepped.wallAt(t0.Add(2 * time.Second)); w != ms(time.Second) {
		t.Fatalf("after a step back: %d; want %d", w, ms(time.Second))
	}
	ahead := &term{start: t0, offset: time.Hour, wallBase: ms(0)}
	if w := ahead.wallAt(t0); w != ms(time.Hour) {
		t.Fatalf("a clock an hour ahead stamped %d; want it followed", w)
	}

	// Through Raft: a node restarted with its clock an hour behind goes on
	// from the wall time it applied before.
	dir := t.TempDir()
	n := open(t, dir)
	if out := acquire(t, n, "a", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	before := n.fsm.maxWall.Load()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openWith(t, dir, func(c *Config) { c.TestWallOffset = -time.Hour })
	defer n.Close()
	if out := acquire(t, n, "b", "w", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	last, ok := n.Feed().At(n.Feed().Head())
	if !ok || last.Record.Wall < before {
		t.Fatalf("after a restart an hour behind, a record stamped %d; before it %d", last.Record.Wall, before)
	}
	if est := n.Wall(); est < before || est > time.Now().Add(time.Minute).UnixMilli() {
		t.Fatalf("the node's estimate of the cluster's wall time: %d; want from %d to about now", est, before)
	}
}

// Closing a node while writes pour in returns, and every write gets an
// answer: Raft leaves a command still queued at Shutdown unanswered
// (hashicorp/raft#498), and Close used to wait for it forever (seen in the
// dashboard's tests, closing a server right after a write).
func TestCloseUnderWriteLoad(t *testing.T) {
	for round := range 10 {
		n := open(t, t.TempDir())
		var wg sync.WaitGroup
		started := make(chan struct{}, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					_, err := n.Propose(context.Background(), &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
						Resource: fmt.Sprintf("load/%d/%d", w, i), Holder: "w", TtlMs: ms(time.Minute)}}})
					if i == 0 {
						started <- struct{}{}
					}
					if err != nil {
						return // the node is closing: NOT_LEADER, UNAVAILABLE or OUTCOME_UNKNOWN
					}
				}
			}()
		}
		for range 8 {
			<-started
		}
		closed := make(chan error, 1)
		go func() { closed <- n.Close() }()
		select {
		case <-closed:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: Close did not return within 20 s under load", round)
		}
		answered := make(chan struct{})
		go func() { wg.Wait(); close(answered) }()
		select {
		case <-answered:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: a write was never answered after Close", round)
		}
	}
}

// TestProposeThen: the result of a command proposed without waiting
// reaches its continuation: a grant, a refusal in the outcome, and, once
// the node is closed, an error.
func TestProposeThen(t *testing.T) {
	n := open(t, t.TempDir())
	type answer struct {
		res statemachine.Result
		err error
	}
	propose := func(holder string) answer {
		got := make(chan answer, 1)
		n.ProposeThen(context.Background(), &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			Resource: "then", Holder: holder, TtlMs: ms(time.Minute)}}}, func(res statemachine.Result, err error) {
			got <- answer{res, err}
		})
		select {
		case a := <-got:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("the continuation never ran")
		}
		return answer{}
	}
	first := propose("w1")
	if first.err != nil || first.res.Outcome.Err != nil || first.res.Outcome.Lease == nil || first.res.Outcome.Lease.Holder != "w1" {
		t.Fatalf("first: %+v", first)
	}
	second := propose("w2")
	if second.err != nil || !errors.Is(second.res.Outcome.Err, registrar.ErrLeaseHeld) {
		t.Fatalf("second: %+v, want LEASE_HELD in the outcome", second)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if closed := propose("w3"); closed.err == nil {
		t.Fatalf("after Close: %+v, want an error", closed)
	}
}

// A data dir that exists open to other users is closed to them at start,
// and the snapshot dir (the key seed is in every snapshot) is private.
func TestDataDirIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	n := open(t, dir)
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "snapshots")} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s is %v, want no access for others", d, perm)
		}
	}
}

// A member restarted on another Raft address than the cluster knows it
// at says so (the others cannot reach it there).
func TestRestartOnAnotherRaftAddressWarns(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir) // on a free port
	first := n.RaftAddr()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// Held, so that the free port the restart gets is another one (the
	// kernel may hand out the one just freed: then no warning is due).
	hold, err := net.Listen("tcp", first)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	var mu sync.Mutex
	var logged bytes.Buffer
	n = openNoWaitWith(t, dir, func(cfg *Config) { // on another free port
		cfg.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logged.Write(p)
		}), nil))
	})
	defer n.Close()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "another Raft address") {
		t.Fatalf("no warning in the log:\n%s", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestQuietLedgerTailIsSigned: a few records, then nothing: the leader
// has the tail signed SignAfter later instead of leaving it unsigned
// until the next 1024 records.
func TestQuietLedgerTailIsSigned(t *testing.T) {
	n := openWith(t, t.TempDir(), func(c *Config) { c.SignAfter = 200 * time.Millisecond })
	defer n.Close()
	if out := acquire(t, n, "sign/a", "h", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	unsigned := func() uint64 {
		n.fsm.mu.RLock()
		defer n.fsm.mu.RUnlock()
		u, _ := n.fsm.m.UnsignedTail()
		return u
	}
	deadline := time.Now().Add(10 * time.Second)
	for unsigned() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d records still unsigned 10 s after the last write", unsigned())
		}
		select {
		case <-n.fsm.changes():
		case <-time.After(time.Second):
		}
	}
}

// TestDataDirLocked: a second node on a data dir in use fails at once,
// naming the holder (it used to block in the log store's lock, silently,
// with its listeners open: found from outside), and the lock goes with
// the first node.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	cfg := DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = dir, "127.0.0.1:0"
	second, err := Open(cfg)
	if err == nil {
		second.Close()
		t.Fatal("a second node opened a data dir in use")
	}
	if want := fmt.Sprintf("in use by another tenure server (process %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("second open: %v; want %q", err, want)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open(t, dir)
	n.Close()
}

// TestRaftErrorsReachTheLog: hashicorp/raft's error lines are logged by
// the node (a follower whose disk was full said so only there), the rest
// of its chatter is not.
func TestRaftErrorsReachTheLog(t *testing.T) {
	var buf testlog.Buffer
	w := newRaftErrors(slog.New(slog.NewTextHandler(&buf, nil)))
	w.Write([]byte("2026-11-26T00:00:00.000Z [INFO]  raft: entering follower state\n" +
		"2026-11-26T00:00:01.000Z [ERROR] raft: failed to append to logs: error=\"no space left on device\"\n" +
		"2026/11/26 00:00:02 [ERR] snapshot: failed to move\n" +
		"2026-11-26T00:00:03.000Z [ERROR] raft-net: failed to decode incoming command: error=\"transport shutdown\"\n" +
		"2026-11-26T00:00:04.000Z [ERROR] raft: peer has newer term, stopping replication: peer=\"{Voter n2 127.0.0.1:7171}\"\n" +
		"2026-11-26T00:00:05.000Z [WARN]  raft: failed to contact: server-id=n2 time=2.5s\n" +
		"2026-11-26T00:00:05.000Z [WARN]  raft: failed to contact quorum of nodes, stepping down\n"))
	out := buf.String()
	// Why leadership changed: a warning; each member not heard from: out.
	if !strings.Contains(out, `level=WARN msg="raft: failed to contact quorum of nodes, stepping down"`) || strings.Contains(out, "server-id=n2") {
		t.Errorf("the step-down's cause, and only it, should be logged as a warning:\n%s", out)
	}
	// Routine in a healthy cluster: info, not error.
	if !strings.Contains(out, `level=INFO msg="raft: peer has newer term, stopping replication`) {
		t.Errorf("a leader stepping down is not logged at info:\n%s", out)
	}
	if !strings.Contains(out, `level=ERROR msg="raft: failed to append to logs: error=\"no space left on device\""`) ||
		!strings.Contains(out, `msg="snapshot: failed to move"`) || strings.Contains(out, "follower state") ||
		strings.Contains(out, "transport shutdown") {
		t.Fatalf("logged:\n%s", out)
	}
}

// TestFirstElectionIsNotAWarning: the election every member starts with
// is logged at info (it tripped alerting on warnings at every start); one
// after a leader was known stays a warning.
func TestFirstElectionIsNotAWarning(t *testing.T) {
	var buf testlog.Buffer
	w := newRaftErrors(slog.New(slog.NewTextHandler(&buf, nil)))
	knew := false
	w.knewLeader = func() bool { return knew }
	const line = "2026-11-26T00:00:00.000Z [WARN]  raft: heartbeat timeout reached, starting election: last-leader-addr= last-leader-id=\n"
	w.Write([]byte(line))
	knew = true
	w.now = func() time.Time { return time.Now().Add(time.Hour) } // past the repeat window
	w.Write([]byte(line))
	out := buf.String()
	if !strings.Contains(out, `level=INFO msg="raft: heartbeat timeout reached`) || !strings.Contains(out, `level=WARN msg="raft: heartbeat timeout reached`) {
		t.Fatalf("want the first election at info and a later one a warning:\n%s", out)
	}
}

// TestRaftErrorsRepeatedAreLoggedOnce: an error line Raft repeats (a
// member cut off asks each other member for its vote twice a second) is
// logged once per window, then with how often it came meanwhile.
func TestRaftErrorsRepeatedAreLoggedOnce(t *testing.T) {
	var buf testlog.Buffer
	w := newRaftErrors(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Unix(1_800_000_000, 0)
	w.now = func() time.Time { return now }
	vote := "2026-11-26T00:00:01.000Z [ERROR] raft: failed to make requestVote RPC: target=n2 error=\"i/o timeout\"\n"
	for range 5 {
		w.Write([]byte(vote))
		now = now.Add(time.Second)
	}
	w.Write([]byte("2026-11-26T00:00:01.000Z [ERROR] raft: failed to append to logs\n"))
	now = now.Add(raftErrorEvery)
	w.Write([]byte(vote))
	out := buf.String()
	if n := strings.Count(out, "requestVote"); n != 2 {
		t.Fatalf("the repeated line was logged %d times, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "repeated=4") || !strings.Contains(out, "failed to append to logs") {
		t.Fatalf("logged:\n%s", out)
	}
}

// TestIdleLeaderPrunes: terminal leases whose retention has passed are
// pruned on an idle leader (an Advance signs the ledger's tail, a record,
// even with nothing new to sign), not left for the next write to pay for.
func TestIdleLeaderPrunes(t *testing.T) {
	n := openWith(t, t.TempDir(), func(c *Config) {
		c.SignAfter = time.Hour // no Advance to sign the ledger's tail otherwise
		c.PolicyDefaults = func(p registrar.Policy) registrar.Policy {
			p.LeaseRetention = registrar.Ms(200 * time.Millisecond)
			return p
		}
	})
	defer n.Close()
	for i := range 3 {
		out := acquire(t, n, fmt.Sprintf("r%d", i), "h", 10*time.Second, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: out.Lease.ID, Holder: "h"}}})
		cancel()
		if err != nil || res.Outcome.Err != nil {
			t.Fatalf("release: %v %v", err, res.Outcome.Err)
		}
	}
	retained := func() int {
		return int(n.fsm.count(func(m *statemachine.Machine) int { return m.Registrar().Retained() }))
	}
	deadline := time.After(10 * time.Second)
	for {
		changed := n.fsm.changes() // before the check: no apply is missed
		if retained() == 0 {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%d terminal leases still kept on an idle leader past their retention", retained())
		case <-changed:
		}
	}
}

// TestStatusWithoutALeader: a member that knows no leader reports the
// other voters' roles as unknown, not as followers (found from outside:
// a follower showed the leader just killed as a follower).
func TestStatusWithoutALeader(t *testing.T) {
	self, other1, other2 := listen(t), listen(t), listen(t)
	other1.Close()
	other2.Close()
	n := openNoWaitWith(t, t.TempDir(), func(c *Config) {
		c.NodeID, c.RaftListener = "a", self
		c.Peers = []Peer{{ID: "a", RaftAddr: self.Addr().String()}, {ID: "b", RaftAddr: other1.Addr().String()}, {ID: "c", RaftAddr: other2.Addr().String()}}
	})
	defer n.Close()
	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaderID != "" || len(st.Members) != 3 {
		t.Fatalf("status %+v; want no leader and three members", st)
	}
	// How long without one: since the start.
	if st.NoLeaderSince.IsZero() || time.Since(st.NoLeaderSince) > time.Minute {
		t.Errorf("no leader since %v; want the start", st.NoLeaderSince)
	}
	// Nothing is committed without a leader, but the log holds the
	// bootstrap configuration.
	if st.LastLogIndex != 1 || st.LastLogTerm != 1 || st.AppliedIndex != 0 {
		t.Errorf("last log %d (term %d), applied %d; want the bootstrap entry, none applied", st.LastLogIndex, st.LastLogTerm, st.AppliedIndex)
	}
	for _, m := range st.Members {
		if m.ID != "a" && m.Role != RoleUnknown {
			t.Errorf("member %s: role %v; want unknown", m.ID, m.Role)
		}
		if m.ID == "a" && m.Role != RoleFollower && m.Role != RoleCandidate {
			t.Errorf("itself: role %v", m.Role)
		}
	}
}

// TestLogWriteFailureIsTheAnswer: while the Raft log cannot be written
// (a full disk), callers hear that, not NOT_LEADER (found from outside:
// a full disk answered "not the leader, no leader known" for minutes).
func TestLogWriteFailureIsTheAnswer(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	if n.LogFailure() != nil {
		t.Fatal("a log failure before any")
	}
	n.logs.failure.Store(&storeFailure{err: errors.New("write wal: no space left on device"), at: time.Now()})
	err := n.notLeader()
	if re := registrar.ToError(err); re.Reason != registrar.ReasonUnavailable || re.Metadata["cause"] != "raft_log_write" ||
		!strings.Contains(re.Message, "no space left on device") {
		t.Fatalf("answer while the log cannot be written: %v", err)
	}
	n.logs.failure.Store(&storeFailure{err: errors.New("old"), at: time.Now().Add(-time.Minute)})
	if n.LogFailure() != nil {
		t.Fatal("a failure a minute ago still counts")
	}
	n.logs.failure.Store(&storeFailure{err: errors.New("write wal: no space left on device"), at: time.Now()})
	if out := acquire(t, n, "after", "w", time.Minute, 0); out.Err != nil { // a write that succeeds clears it
		t.Fatal(out.Err)
	}
	if n.LogFailure() != nil {
		t.Fatal("a failure still reported after a successful write")
	}
}

func TestLeaderLease(t *testing.T) {
	def := raft.DefaultConfig().LeaderLeaseTimeout // 500 ms
	for _, c := range []struct{ hb, want time.Duration }{
		{50 * time.Millisecond, 50 * time.Millisecond}, // tests' timings: all of it
		{time.Second, 500 * time.Millisecond},          // Raft's defaults
		{5 * time.Second, 2500 * time.Millisecond},     // a slow network: half
	} {
		if got := leaderLease(c.hb, def); got != c.want {
			t.Errorf("leaderLease(%v) = %v, want %v", c.hb, got, c.want)
		}
	}
}

// TestPolicyDiff: the warning about start-up settings replacing a policy
// names each change with its units.
func TestPolicyDiff(t *testing.T) {
	a := registrar.DefaultPolicy()
	b := a
	b.MaxTTL, b.MaxRenewals = 6*60_000, 20
	if got, want := policyDiff(a, b), "MaxTTL 5m0s→6m0s, MaxRenewals 0→20"; got != want {
		t.Fatalf("policyDiff = %q, want %q", got, want)
	}
}

// TestPolicyDefaultsOncePerStart: the policy defaults given at start are
// applied the first time the process leads, and not again at its later
// terms, nor at its first when the policy was set since it started: a
// change of leader left a `tenure policy set '*'` made since undone
// (found from outside).
func TestPolicyDefaultsOncePerStart(t *testing.T) {
	n := openWith(t, t.TempDir(), func(c *Config) {
		c.PolicyDefaults = func(p registrar.Policy) registrar.Policy {
			p.MaxTTL = registrar.Ms(9 * time.Minute)
			return p
		}
	})
	defer n.Close()
	defaults := func() registrar.Policy {
		n.fsm.mu.RLock()
		defer n.fsm.mu.RUnlock()
		return n.fsm.m.Registrar().Defaults()
	}
	waitUntil(t, "the defaults given at start applied", func() bool { return defaults().MaxTTL == registrar.Ms(9*time.Minute) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{
		Namespace: registrar.DefaultsNamespace, Policy: &tenurev1.NamespacePolicy{MaxTtl: durationpb.New(6 * time.Minute)}}}})
	if err != nil || res.Outcome.Err != nil {
		t.Fatalf("policy set '*': %v %v", err, res.Outcome.Err)
	}
	n.applyPolicyDefaults(ctx) // as at the next term this process leads
	if got := defaults().MaxTTL; got != registrar.Ms(6*time.Minute) {
		t.Fatalf("max ttl %v after a later term, want the 6m set since", got)
	}
	// A member that had not led yet when the policy was set (a follower
	// restarted with its flags, then elected) leaves the newer setting.
	n.policyApplied.Store(false)
	res, err = n.Propose(ctx, &logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{
		Namespace: registrar.DefaultsNamespace, Policy: &tenurev1.NamespacePolicy{MaxTtl: durationpb.New(7 * time.Minute)}}}})
	if err != nil || res.Outcome.Err != nil {
		t.Fatalf("policy set '*': %v %v", err, res.Outcome.Err)
	}
	n.applyPolicyDefaults(ctx) // its first term
	if got := defaults().MaxTTL; got != registrar.Ms(7*time.Minute) {
		t.Fatalf("max ttl %v at the first term after a policy set since the start, want the 7m set", got)
	}
}

// TestForeignLedgerKeyIsReported: ledger files written under another
// registrar key (another cluster's ledger put in this data dir) are
// reported as such at once, and their key file is not overwritten.
func TestForeignLedgerKeyIsReported(t *testing.T) {
	dir := t.TempDir()
	other, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ledger.DirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := ledger.SavePublicKey(filepath.Join(dir, ledger.DirName), other); err != nil {
		t.Fatal(err)
	}
	var buf testlog.Buffer
	n := openWith(t, dir, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&buf, nil)) })
	acquire(t, n, "r", "h", 10*time.Second, 0)
	waitUntil(t, "the foreign key reported", func() bool { return strings.Contains(buf.String(), "written under another registrar key") })
	n.Close()
	if got, err := ledger.ReadPublicKey(filepath.Join(dir, ledger.DirName)); err != nil || !got.Equal(other) {
		t.Fatalf("the key file now holds %x (%v), want the other registrar's, kept", got, err)
	}
}

// A data dir whose node-id file is gone but whose Raft state is there is
// not taken as the default member's: that would make member n4 "node1",
// with n4's log, silently out of the voters. A new or empty data dir still
// takes the default, and --node-id names the member it was.
func TestNodeIDMissingWithRaftState(t *testing.T) {
	dir := t.TempDir()
	if id, err := nodeID(dir, ""); err != nil || id != DefaultNodeID {
		t.Fatalf("empty data dir: %q, %v; want %q", id, err, DefaultNodeID)
	}
	if err := os.Remove(filepath.Join(dir, nodeIDFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wal", "00000000000000000001-0000000000000000.wal"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if id, err := nodeID(dir, ""); err == nil || !strings.Contains(err.Error(), "--node-id") {
		t.Fatalf("data dir with Raft state and no node-id: %q, %v; want an error asking for --node-id", id, err)
	}
	if id, err := nodeID(dir, "n4"); err != nil || id != "n4" {
		t.Fatalf("with --node-id n4: %q, %v", id, err)
	}
	if id, err := nodeID(dir, ""); err != nil || id != "n4" {
		t.Fatalf("after --node-id n4 once: %q, %v", id, err)
	}
}

// TestNothingShownAheadOfTheClock: reads are at ticks the leader's clock
// has reached. Commands are stamped with the clock rounded up, so a read
// at the clock rounded up, or at the last tick applied right after the
// apply, showed a lease expired up to a millisecond before its deadline (found from outside: a read spinning at a lease's end called it
// expired 0.15 ms before its ttl, counted from the client's send, had run).
func TestNothingShownAheadOfTheClock(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	term := n.leader.Load()
	if term == nil {
		t.Fatal("no term")
	}
	// The clock's exact reading, in ticks (fractions of a millisecond).
	clock := func() float64 {
		return float64(term.base) + float64(time.Since(term.start))/float64(time.Millisecond)
	}
	for i := range 200 {
		out := acquire(t, n, fmt.Sprintf("clock/%d", i), "h", time.Second, 0)
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		if err := n.Read(context.Background(), false, func(_ *statemachine.Machine, tk registrar.Tick) error {
			if now := clock(); now < float64(tk) {
				return fmt.Errorf("read at tick %d while the clock read %.3f", tk, now)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTakeoverAnsweredOnceTheClockIsThere: an Acquire that finds a lease
// expired is answered only once the leader's clock has reached the expiry
// (its stamp, the clock rounded up, may be ahead of it), and a waiter
// handed the resource by an expiry likewise.
func TestTakeoverAnsweredOnceTheClockIsThere(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	term := n.leader.Load()
	clock := func() float64 {
		return float64(term.base) + float64(time.Since(term.start))/float64(time.Millisecond)
	}
	for round := range 2 {
		res := fmt.Sprintf("takeover/%d", round)
		a := acquire(t, n, res, "a", time.Second, 0)
		if a.Err != nil {
			t.Fatal(a.Err)
		}
		w := acquire(t, n, res, "w", time.Second, 10*time.Second)
		if w.Err != nil || w.WaiterID == 0 {
			t.Fatalf("queueing w: %+v", w)
		}
		r, err := n.AwaitWaiter(context.Background(), w.WaiterID)
		if err != nil || r.Err != nil {
			t.Fatalf("w's wait: %v, %v", err, r.Err)
		}
		if now := clock(); now < float64(a.Lease.ExpiresTick) {
			t.Fatalf("w handed the resource at clock %.3f, before a's expiry %d", now, a.Lease.ExpiresTick)
		}
		// b asks for w's lease, without waiting, until it is granted.
		for {
			b := acquire(t, n, res, "b", time.Second, 0)
			if b.Err == nil {
				if now := clock(); now < float64(r.Lease.ExpiresTick) {
					t.Fatalf("b granted at clock %.3f, before w's expiry %d", now, r.Lease.ExpiresTick)
				}
				break
			}
			if !errors.Is(b.Err, registrar.ErrLeaseHeld) {
				t.Fatal(b.Err)
			}
		}
	}
}

// A snapshot left unfinished (a kill while writing it, or a disk that
// filled: Raft's store leaves its directory when it cannot flush it) is
// removed at the next start: Raft skips such directories and never
// removed them, and each can be as large as the state.
func TestUnfinishedSnapshotsRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	n := open(t, dir)
	if out := acquire(t, n, "orders/1", "w1", time.Minute, 0); out.Err != nil {
		t.Fatal(out.Err)
	}
	if _, _, err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "snapshots", "2-9-1795877282918.tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "state.bin"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	n = open(t, dir)
	defer n.Close()
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unfinished snapshot still there after a start: %v", err)
	}
	if metas, err := raft.NewFileSnapshotStore(dir, 2, io.Discard); err != nil {
		t.Fatal(err)
	} else if list, err := metas.List(); err != nil || len(list) != 1 {
		t.Fatalf("finished snapshots after the start: %v, %v", list, err)
	}
}
