package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
	"github.com/tenurehq/tenure/internal/testport"
)

func TestCheckAddress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, addr string
		ok, raftOK bool
	}{
		{"ipv4", "127.0.0.1:7071", true, true},
		{"ipv6", "[::1]:7071", true, true},
		{"ipv6 zone", "[fe80::1%eth0]:7071", true, true},
		{"host name", "node-2.tenure.internal:7071", true, true},
		{"fqdn", "node2.example.com.:7071", true, true},
		{"single label", "localhost:1", true, true},
		{"highest port", "h:65535", true, true},
		{"unspecified v4", "0.0.0.0:7071", true, false},
		{"unspecified v6", "[::]:7071", true, false},
		{"words", "not an address", false, false},
		{"no port", "127.0.0.1", false, false},
		{"empty port", "127.0.0.1:", false, false},
		{"no host", ":7071", false, false},
		{"port zero", "127.0.0.1:0", false, false},
		{"port too high", "127.0.0.1:65536", false, false},
		{"named port", "127.0.0.1:raft", false, false},
		{"negative port", "127.0.0.1:-1", false, false},
		{"space in host", "my host:7071", false, false},
		{"leading hyphen", "-node:7071", false, false},
		{"empty label", "a..b:7071", false, false},
		{"bad ip", "999.1.1.1:7071", false, false},
		{"scheme", "http://127.0.0.1:7071", false, false},
		{"too many colons", "1:2:3", false, false},
		{"long label", strings.Repeat("a", 64) + ":1", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				check func(string, string) error
				want  bool
			}{{CheckAddress, tc.ok}, {CheckRaftAddress, tc.raftOK}} {
				err := c.check("raft_address", tc.addr)
				if (err == nil) != c.want {
					t.Fatalf("%q: err %v, want ok=%v", tc.addr, err, c.want)
				}
				if err == nil {
					continue
				}
				var e *registrar.Error
				if !asError(err, &e) || e.Reason != registrar.ReasonInvalidArgument || e.Metadata["field"] != "raft_address" ||
					!strings.HasPrefix(e.Message, "INVALID_ARGUMENT: raft_address: ") {
					t.Fatalf("%q: %#v", tc.addr, err)
				}
			}
		})
	}
}

func asError(err error, e **registrar.Error) bool { return errors.As(err, e) }

// FuzzCheckAddress: an accepted address splits into a host and a port
// from 1 to 65535, and equals itself.
func FuzzCheckAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7071", "[::1]:1", "a.b:65535", "not an address", ":0", "h:+1", "[::]:9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		if CheckAddress("a", addr) != nil {
			return
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			t.Fatalf("accepted %q: %v", addr, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			t.Fatalf("accepted %q with port %q", addr, port)
		}
		if !sameAddress(addr, addr) {
			t.Fatalf("%q is not the same as itself", addr)
		}
	})
}

func TestSameAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:7071", "127.0.0.1:7071", true},
		{"127.0.0.1:7071", "127.0.0.1:07071", true},
		{"[::1]:7071", "[0:0::1]:7071", true},
		{"[::ffff:127.0.0.1]:7071", "127.0.0.1:7071", true},
		{"Node2.Example:7071", "node2.example.:7071", true},
		{"127.0.0.1:7071", "127.0.0.1:7072", false},
		{"127.0.0.1:7071", "127.0.0.2:7071", false},
		{"localhost:7071", "127.0.0.1:7071", false}, // names are not resolved
		{"a:1", "garbage", false},
	} {
		if got := sameAddress(tc.a, tc.b); got != tc.want {
			t.Errorf("sameAddress(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// TestRaftRefusalsMatchRaft pins raftRefusals to the Raft in go.mod: the
// refusals it names are what Raft answers, and each one left the
// configuration as it was.
func TestRaftRefusalsMatchRaft(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	self := raft.ServerID(n.id)
	addr := raft.ServerAddress(n.RaftAddr())
	before := n.raft.GetConfiguration()
	if err := before.Error(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		do    func() error
		field string
	}{
		{"remove the last voter", func() error { return n.raft.RemoveServer(self, 0, time.Second).Error() }, "id"},
		{"transfer with no other voter", func() error { return n.raft.LeadershipTransfer().Error() }, "id"},
		{"transfer to an unknown server", func() error {
			return n.raft.LeadershipTransferToServer("ghost", "127.0.0.1:1").Error()
		}, "id"},
		{"duplicate address", func() error { return n.raft.AddVoter("n2", addr, 0, time.Second).Error() }, "raft_address"},
		{"empty id", func() error { return n.raft.AddVoter("", "127.0.0.1:1", 0, time.Second).Error() }, "id"},
		{"empty address", func() error { return n.raft.AddVoter("n2", "", 0, time.Second).Error() }, "raft_address"},
	}
	for _, tc := range cases {
		err := tc.do()
		if err == nil {
			t.Fatalf("%s: Raft accepted it", tc.name)
		}
		r := raftRefusal(err)
		var e *registrar.Error
		if r == nil || !asError(r, &e) || e.Reason != registrar.ReasonInvalidArgument || e.Metadata["field"] != tc.field {
			t.Fatalf("%s: Raft answered %q, mapped to %v; want INVALID_ARGUMENT field %s", tc.name, err, r, tc.field)
		}
	}
	after := n.raft.GetConfiguration()
	if after.Index() != before.Index() || len(after.Configuration().Servers) != 1 {
		t.Fatalf("configuration changed: index %d → %d, %v", before.Index(), after.Index(), after.Configuration())
	}
	if raftRefusal(raft.ErrLeadershipLost) != nil || raftRefusal(raft.ErrNotLeader) != nil {
		t.Fatal("an error that is not a refusal was mapped as one")
	}
}

// TestMembershipNoOps: adding a member again with its own address,
// removing a non-member and handing leadership to the leader succeed
// without a Raft configuration change; refusals change nothing either.
func TestMembershipNoOps(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	index := func() uint64 {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			t.Fatal(err)
		}
		return cf.Index()
	}
	before := index()
	if err := n.AddVoter(ctx, n.id, n.RaftAddr(), "", false); err != nil {
		t.Fatalf("AddVoter of itself: %v", err)
	}
	if err := n.AddVoter(ctx, n.id, n.RaftAddr(), n.APIAddr(), false); err != nil {
		t.Fatalf("AddVoter of itself with its API address: %v", err)
	}
	if was, err := n.RemoveServer(ctx, "nosuch", false); err != nil || was {
		t.Fatalf("RemoveServer of a non-member: was a member %v, %v", was, err)
	}
	if err := n.TransferLeadership(n.id); err != nil {
		t.Fatalf("TransferLeadership to the leader: %v", err)
	}
	for name, err := range map[string]error{
		"AddVoter with another address": n.AddVoter(ctx, n.id, "127.0.0.1:1", "", false),
		"AddVoter of a taken address":   n.AddVoter(ctx, "n2", n.RaftAddr(), "", false),
		"AddVoter of an API address":    n.AddVoter(ctx, "n2", n.APIAddr(), "", false),
		// A second voter nothing answers for: the cluster would stop.
		"AddVoter of a member not up": n.AddVoter(ctx, "n2", freeAddr(t), "", false),
		// Nor does a listener that is not a member's Raft port (an API
		// address given by mistake).
		"AddVoter of an HTTP server":     n.AddVoter(ctx, "n2", httpAddr(t), "", false),
		"RemoveServer of the last voter": second(n.RemoveServer(ctx, n.id, false)),
		"TransferLeadership to anyone":   n.TransferLeadership(""),
		"TransferLeadership to a nobody": n.TransferLeadership("nosuch"),
	} {
		if r := registrar.ReasonOf(err); r != registrar.ReasonInvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if after := index(); after != before {
		t.Fatalf("configuration index %d → %d", before, after)
	}
	if !n.IsLeader() {
		t.Fatal("the node no longer leads")
	}
}

// TestForeignHistoryStopsTheNode: a member holding another cluster's
// history (here: two one-node clusters, each with its own grants, joined
// as if the second were a wiped member restarted without --peers or
// --join) does not take the other's entries on top of its own state: the
// node that would have to stops, its state as it was, and says why.
func TestForeignHistoryStopsTheNode(t *testing.T) {
	start := func(id string) *Node {
		n := openWith(t, t.TempDir(), func(cfg *Config) { cfg.NodeID = id })
		t.Cleanup(func() { n.Close() })
		return n
	}
	a, b := start("a"), start("b")
	granted := map[*Node]registrar.Outcome{}
	for i, n := range []*Node{a, b} {
		// Enough entries that the two logs overlap well past the start.
		for j := range 20 {
			out := acquire(t, n, fmt.Sprintf("r/%d", j), fmt.Sprintf("holder-%d", i), time.Minute, 0)
			if out.Err != nil {
				t.Fatal(out.Err)
			}
			granted[n] = out
		}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.AddVoter(ctx, "b", b.RaftAddr(), "", false)
	}()
	var failed, other *Node
	deadline := time.After(20 * time.Second)
	select {
	case <-a.Failed():
		failed, other = a, b
	case <-b.Failed():
		failed, other = b, a
	case <-deadline:
		t.Fatal("neither node noticed the other's history")
	}
	if err := failed.Err(); err == nil || !strings.Contains(err.Error(), "history the cluster does not") {
		t.Fatalf("Err() = %v", err)
	}
	t.Logf("%s stopped: %v", failed.ID(), failed.Err())
	// Its state is its own, untouched by the other's entries.
	get := func(n *Node, id string) (l registrar.Lease, err error) {
		err = n.Read(context.Background(), true, func(m *statemachine.Machine, tk registrar.Tick) error {
			l, err = m.Registrar().Get(id, tk)
			return err
		})
		return l, err
	}
	own := granted[failed].Lease
	l, err := get(failed, own.ID)
	if err != nil || l.Holder != own.Holder || l.Fence != own.Fence {
		t.Fatalf("the stopped node's own lease: %+v, %v; want %+v", l, err, own)
	}
	if _, err := get(failed, granted[other].Lease.ID); err == nil {
		t.Fatalf("the stopped node took the other cluster's lease %s", granted[other].Lease.ID)
	}
	if failed.Ready(context.Background()) {
		t.Fatal("a stopped node reports ready")
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	addr, err := testport.Free()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// httpAddr is the address of an HTTP server that lives as long as the
// test.
func httpAddr(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestRemovalCountsAHungMemberDown: a voter that hangs (its Raft port
// accepts connections and answers nothing: a stopped process, dropped
// packets) counts as down for the quorum check at once, not only once
// the leader's heartbeats to it time out (~10 s): removing the other
// voter that is up is refused (found from outside with SIGSTOP).
func TestRemovalCountsAHungMemberDown(t *testing.T) {
	a := openWith(t, t.TempDir(), func(c *Config) { c.NodeID = "a" })
	defer a.Close()
	b := openNoWaitWith(t, t.TempDir(), func(c *Config) { c.NodeID, c.NoBootstrap = "b", true })
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.AddVoter(ctx, "b", b.RaftAddr(), "", false); err != nil {
		t.Fatalf("adding b: %v", err)
	}
	// c accepts connections and never answers (until the test ends:
	// then its connections close, so that a's shutdown need not wait
	// for its Raft calls to time out).
	hung := listen(t)
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		hung.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	if err := a.AddVoter(ctx, "c", hung.Addr().String(), "", true); err != nil {
		t.Fatalf("adding c with force: %v", err)
	}
	_, err := a.RemoveServer(ctx, "b", false)
	if registrar.ReasonOf(err) != registrar.ReasonInvalidArgument || !strings.Contains(err.Error(), "c cannot be reached") {
		t.Fatalf("removing b while c hangs: %v, want INVALID_ARGUMENT naming c", err)
	}
	if !a.IsLeader() {
		t.Fatal("a no longer leads")
	}
}

// TestRemovedUnderWritesLearnsItIsOut: a member removed while the leader
// replicates writes to it hears that it no longer votes. Raft's last
// replication to a member it removes is skipped while a call to the
// member is under way, as it often is under writes: removed outright, the
// member kept believing it voted (and calling elections nobody answered).
func TestRemovedUnderWritesLearnsItIsOut(t *testing.T) {
	a := openWith(t, t.TempDir(), func(c *Config) { c.NodeID = "a" })
	defer a.Close()
	b := openNoWaitWith(t, t.TempDir(), func(c *Config) { c.NodeID, c.NoBootstrap = "b", true })
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for w := range 4 { // writes, so that a call to b is under way at most times
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				_, _ = a.Propose(wctx, &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
					Resource: fmt.Sprintf("load/%d/%d", w, i), Holder: "h", TtlMs: ms(time.Minute)}}})
				wcancel()
			}
		}()
	}
	for round := range 5 {
		if err := a.AddVoter(ctx, "b", b.RaftAddr(), "", false); err != nil {
			t.Fatalf("round %d: adding b: %v", round, err)
		}
		waitUntil(t, fmt.Sprintf("round %d: b to vote", round), b.IsVoter)
		if was, err := a.RemoveServer(ctx, "b", false); err != nil || !was {
			t.Fatalf("round %d: removing b: %v", round, err)
		}
		waitUntil(t, fmt.Sprintf("round %d: b to know it no longer votes", round), func() bool { return !b.IsVoter() })
	}
}

// second is the error of a call that also answers a value.
func second[T any](_ T, err error) error { return err }
