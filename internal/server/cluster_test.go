package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// member is one in-process member of a test cluster.
type member struct {
	id      string
	srv     *Server
	leases  tenurev1connect.LeaseServiceClient
	cluster tenurev1connect.ClusterServiceClient
}

// Raft timings for cluster tests: short, but with room for -race on two
// cores (a heartbeat missed under load must not depose the leader).
func clusterTestConfig(dir, id string) Config {
	cfg := testConfig(dir)
	cfg.Cluster.NodeID = id
	cfg.Cluster.HeartbeatTimeout = 200 * time.Millisecond
	cfg.Cluster.ElectionTimeout = 200 * time.Millisecond
	return cfg
}

func newMember(t *testing.T, id string, srv *Server) *member {
	h2c := h2cClient()
	base := "http://" + srv.Addr()
	return &member{id: id, srv: srv,
		leases:  tenurev1connect.NewLeaseServiceClient(h2c, base, connect.WithGRPC()),
		cluster: tenurev1connect.NewClusterServiceClient(h2c, base)}
}

func (m *member) stop(t *testing.T) {
	if m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.srv.Close(ctx); err != nil {
		t.Errorf("Close %s: %v", m.id, err)
	}
	m.srv = nil
}

// startCluster starts n members bootstrapped with the same peer list
// (--peers), each on its own data dir and pre-bound Raft port.
func startCluster(t *testing.T, n int) []*member {
	t.Helper()
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with each member's config passed
// through mod (when not nil).
func startClusterWith(t *testing.T, n int, mod func(*Config)) []*member {
	t.Helper()
	var peers []cluster.Peer
	var lns []net.Listener
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		peers = append(peers, cluster.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: ln.Addr().String()})
	}
	var ms []*member
	for i, p := range peers {
		cfg := clusterTestConfig(t.TempDir(), p.ID)
		cfg.Cluster.Peers = peers
		cfg.Cluster.RaftListener = lns[i]
		if mod != nil {
			mod(&cfg)
		}
		srv, err := Start(cfg)
		if err != nil {
			t.Fatalf("Start %s: %v", p.ID, err)
		}
		m := newMember(t, p.ID, srv)
		ms = append(ms, m)
		t.Cleanup(func() { m.stop(t) })
	}
	return ms
}

// leaderOf waits until one running member leads with an initialized
// registrar and returns it.
func leaderOf(t *testing.T, ms []*member, timeout time.Duration) *member {
	t.Helper()
	var l *member
	waitFor(t, "a leader", timeout, func() bool {
		for _, m := range ms {
			if m.srv != nil && m.srv.Node().IsLeader() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
				ok := m.srv.WaitReady(ctx) == nil
				cancel()
				if ok {
					l = m
					return true
				}
			}
		}
		return false
	})
	return l
}

func statusOf(m *member) (*tenurev1.StatusResponse, error) {
	resp, err := m.cluster.Status(context.Background(), connect.NewRequest(&tenurev1.StatusRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// published reports whether m's Status lists exactly ids, each with an
// API address, and names the leader and its API address.
func published(m *member, ids ...string) bool {
	st, err := statusOf(m)
	if err != nil || st.LeaderId == "" || st.LeaderApiAddress == "" || len(st.Members) != len(ids) {
		return false
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	leaders := 0
	for _, mb := range st.Members {
		if !want[mb.Id] || mb.ApiAddress == "" || mb.RaftAddress == "" {
			return false
		}
		if mb.Role == tenurev1.Role_ROLE_LEADER {
			leaders++
		}
	}
	return leaders == 1
}

func followerOf(ms []*member, leader *member) *member {
	for _, m := range ms {
		if m != leader && m.srv != nil {
			return m
		}
	}
	return nil
}

type acked struct {
	lease *tenurev1.Lease
	sent  time.Time
}

// whileNotLeader retries call as a client would while the member answers
// NOT_LEADER (nothing was proposed, so a retry is safe): a member may not
// know the leader yet right after an election.
func whileNotLeader(call func() error) error {
	deadline := time.After(10 * time.Second)
	retry := time.NewTicker(20 * time.Millisecond) // a client's backoff
	defer retry.Stop()
	for {
		err := call()
		var ce *connect.Error
		if err == nil || !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), "NOT_LEADER") {
			return err
		}
		select {
		case <-deadline:
			return err
		case <-retry.C:
		}
	}
}

func acquireVia(t *testing.T, m *member, resource string, ttl time.Duration) acked {
	t.Helper()
	var sent time.Time
	var resp *connect.Response[tenurev1.AcquireResponse]
	err := whileNotLeader(func() error {
		sent = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		resp, err = m.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{
			Resource: resource, Holder: "h-" + resource, Ttl: durationpb.New(ttl)}))
		return err
	})
	if err != nil {
		t.Fatalf("Acquire %s via %s: %v", resource, m.id, err)
	}
	return acked{lease: resp.Msg.Lease, sent: sent}
}

func getVia(m *member, id string, stale bool) (*tenurev1.Lease, error) {
	req := connect.NewRequest(&tenurev1.GetRequest{LeaseId: id})
	if stale {
		req.Header().Set(HeaderConsistency, "stale")
	}
	var resp *connect.Response[tenurev1.GetResponse]
	err := whileNotLeader(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		resp, err = m.leases.Get(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Msg.Lease, nil
}

// TestCluster runs a three-node cluster through forwarding, failover,
// join and removal, with real Raft on loopback.
func TestCluster(t *testing.T) {
	ms := startCluster(t, 3)
	leader := leaderOf(t, ms, 10*time.Second)
	ids := []string{"n1", "n2", "n3"}
	for _, m := range ms {
		waitFor(t, m.id+" lists every member with its API address", 10*time.Second, func() bool { return published(m, ids...) })
	}
	st, err := statusOf(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaderId != leader.id || st.LeaderApiAddress != leader.srv.Addr() {
		t.Fatalf("Status leader %s at %s, want %s at %s", st.LeaderId, st.LeaderApiAddress, leader.id, leader.srv.Addr())
	}
	for _, mb := range st.Members {
		for _, m := range ms {
			if m.id == mb.Id && mb.ApiAddress != m.srv.Addr() {
				t.Errorf("member %s published API address %s, serves on %s", mb.Id, mb.ApiAddress, m.srv.Addr())
			}
		}
	}

	// A follower says when it last heard from its leader (a moment ago:
	// heartbeats every tenth of a second); the leader says nothing of it.
	f := followerOf(ms, leader)
	waitFor(t, "a follower's recent contact with its leader", 10*time.Second, func() bool {
		st, err := statusOf(f)
		c := st.GetLeaderLastContact()
		return err == nil && c != nil && time.Since(c.AsTime()) < 5*time.Second
	})
	if st, err := statusOf(leader); err != nil || st.LeaderLastContact != nil {
		t.Fatalf("the leader's Status: contact %v, %v", st.GetLeaderLastContact(), err)
	}

	// Writes through a follower are forwarded; the lease is then visible
	// on every member with a linearizable read, and with a stale read once
	// the member has applied it.
	var all []acked
	a := acquireVia(t, f, "fwd/1", 30*time.Second)
	all = append(all, a)
	for _, m := range ms {
		l, err := getVia(m, a.lease.LeaseId, false)
		if err != nil {
			t.Fatalf("linearizable Get via %s: %v", m.id, err)
		}
		if l.Fence != a.lease.Fence || l.State != tenurev1.State_STATE_ACTIVE {
			t.Fatalf("Get via %s: fence %d state %s, want %d active", m.id, l.Fence, l.State, a.lease.Fence)
		}
		waitFor(t, "stale read on "+m.id, 5*time.Second, func() bool {
			l, err := getVia(m, a.lease.LeaseId, true)
			return err == nil && l.Fence == a.lease.Fence
		})
	}
	// History is a linearizable read as well: every member answers with
	// the event the leader has just acknowledged, applied there or not.
	for _, m := range ms {
		b := acquireVia(t, leader, "hist/"+m.id, 30*time.Second)
		var resp *connect.Response[tenurev1.HistoryResponse]
		if err := whileNotLeader(func() (err error) {
			resp, err = m.leases.History(context.Background(), connect.NewRequest(&tenurev1.HistoryRequest{Resource: "hist/" + m.id}))
			return err
		}); err != nil {
			t.Fatalf("History via %s: %v", m.id, err)
		}
		if ev := resp.Msg.Events; len(ev) != 1 || ev[0].LeaseId != b.lease.LeaseId || ev[0].Type != "lease.issued" {
			t.Fatalf("History via %s right after the ack: %v, want the issue of %s", m.id, ev, b.lease.LeaseId)
		}
	}
	// A rejection by the leader passes through the follower unchanged.
	_, err = f.leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{
		Resource: "fwd/1", Holder: "someone-else", Ttl: durationpb.New(time.Minute)}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_HELD")
	// Connect JSON through the follower too.
	jresp, err := http.Post("http://"+f.srv.Addr()+tenurev1connect.LeaseServiceAcquireProcedure, "application/json",
		strings.NewReader(`{"resource":"fwd/json","holder":"j","ttl":"30s"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(jresp.Body)
	jresp.Body.Close()
	if jresp.StatusCode != http.StatusOK || jresp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("JSON acquire via follower: %d %s %s", jresp.StatusCode, jresp.Header.Get("Content-Type"), body)
	}
	// Pipeline and KeepAlive operations on a follower are forwarded.
	pipe := f.leases.Pipeline(context.Background())
	if err := pipe.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{
		{Id: 1, Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{Resource: "fwd/pipe", Holder: "p", Ttl: durationpb.New(30 * time.Second)}}},
	}}); err != nil {
		t.Fatal(err)
	}
	pr, err := pipe.Receive()
	if err != nil {
		t.Fatal(err)
	}
	pl := pr.Results[0].GetAcquire().GetLease()
	if pl == nil {
		t.Fatalf("pipelined acquire via follower: %v", pr.Results[0])
	}
	pipe.CloseRequest()
	pipe.CloseResponse()
	all = append(all, acked{lease: pl, sent: time.Now()}) // sent before now: a conservative bound is not needed for 30 s
	ka := f.leases.KeepAlive(context.Background())
	if err := ka.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{pl.LeaseId, "nope"}, RequestId: 7}); err != nil {
		t.Fatal(err)
	}
	kr, err := ka.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if kr.RequestId != 7 || len(kr.Leases) != 1 || len(kr.Failures) != 1 || kr.Failures[0].Reason != "LEASE_NOT_FOUND" {
		t.Fatalf("KeepAlive via follower: %v", kr)
	}
	ka.CloseRequest()
	ka.CloseResponse()

	// More acknowledged leases, some short-lived, through every member.
	short := map[string]time.Duration{}
	for i, m := range ms {
		all = append(all, acquireVia(t, m, fmt.Sprintf("long/%d", i), 60*time.Second))
		s := acquireVia(t, m, fmt.Sprintf("short/%d", i), 2*time.Second)
		short[s.lease.LeaseId] = 2 * time.Second
		all = append(all, s)
	}
	var maxFence uint64
	var maxTick int64
	for _, a := range all {
		maxFence = max(maxFence, a.lease.Fence)
		maxTick = max(maxTick, a.lease.IssuedTick)
	}

	// Kill the leader: a new one serves within a few seconds.
	killed := time.Now()
	leader.stop(t)
	alive := []*member{}
	for _, m := range ms {
		if m.srv != nil {
			alive = append(alive, m)
		}
	}
	next := leaderOf(t, alive, 5*time.Second)
	t.Logf("new leader %s after %v", next.id, time.Since(killed))
	f = followerOf(alive, next)
	// The new leader's Status marks the killed member unreachable; the
	// others not.
	waitFor(t, "the new leader reports "+leader.id+" unreachable", 10*time.Second, func() bool {
		st, err := statusOf(next)
		if err != nil {
			return false
		}
		for _, mb := range st.Members {
			if (mb.UnreachableSince != nil) != (mb.Id == leader.id) {
				return false
			}
		}
		return true
	})
	// Time continues from the highest applied tick (DESIGN §2).
	if st, err := statusOf(next); err != nil || st.Tick < maxTick {
		t.Fatalf("new leader's tick %v below the last grant's %d (%v)", st, maxTick, err)
	}

	// Every acknowledged lease is still there with its fence; none expired
	// before its ttl measured from the client's send time.
	for _, a := range all {
		l, err := getVia(f, a.lease.LeaseId, false)
		now := time.Now()
		if err != nil {
			t.Fatalf("Get %s after failover: %v", a.lease.LeaseId, err)
		}
		if l.Fence != a.lease.Fence || l.ExpiresTick < a.lease.ExpiresTick {
			t.Fatalf("lease %s: fence %d expires_tick %d after failover, was %d %d", l.LeaseId, l.Fence, l.ExpiresTick, a.lease.Fence, a.lease.ExpiresTick)
		}
		ttl := a.lease.Ttl.AsDuration()
		if l.State != tenurev1.State_STATE_ACTIVE && now.Sub(a.sent) < ttl {
			t.Fatalf("lease %s is %s %v after it was requested with ttl %v", l.LeaseId, l.State, now.Sub(a.sent), ttl)
		}
	}
	// The short leases expire, but never early.
	for id, ttl := range short {
		var sent time.Time
		for _, a := range all {
			if a.lease.LeaseId == id {
				sent = a.sent
			}
		}
		waitFor(t, "short lease "+id+" to expire", 10*time.Second, func() bool {
			l, err := getVia(next, id, false)
			if err != nil {
				t.Fatalf("Get %s: %v", id, err)
			}
			if l.State == tenurev1.State_STATE_ACTIVE {
				return false
			}
			if el := time.Since(sent); el < ttl {
				t.Fatalf("lease %s %s after %v; ttl %v", id, l.State, el, ttl)
			}
			return true
		})
	}
	// The next grant's fence is higher than every earlier one.
	n := acquireVia(t, f, "after/failover", 30*time.Second)
	if n.lease.Fence <= maxFence {
		t.Fatalf("fence after failover %d, not above %d", n.lease.Fence, maxFence)
	}
	if _, err := getVia(f, n.lease.LeaseId, false); err != nil {
		t.Fatal(err)
	}

	// A fourth node joins through a follower (AddVoter is forwarded to the
	// leader) and becomes a voter with its API address published.
	cfg := clusterTestConfig(t.TempDir(), "n4")
	cfg.Join = f.srv.Addr()
	cfg.JoinTimeout = 20 * time.Second
	srv4, err := Start(cfg)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	m4 := newMember(t, "n4", srv4)
	t.Cleanup(func() { m4.stop(t) })
	live := []string{next.id, f.id, "n4"}
	waitFor(t, "n4 published on the leader", 10*time.Second, func() bool { return published(next, append(live, leader.id)...) })
	cf, err := statusOf(next)
	if err != nil {
		t.Fatal(err)
	}
	for _, mb := range cf.Members {
		if mb.Id == "n4" && (mb.Role != tenurev1.Role_ROLE_FOLLOWER || mb.ApiAddress != srv4.Addr()) {
			t.Fatalf("n4 in Status: %v", mb)
		}
	}
	// The new member serves (its linearizable reads reach the leader) and
	// has applied the log (stale reads answer from its own state).
	if l, err := getVia(m4, n.lease.LeaseId, false); err != nil || l.Fence != n.lease.Fence {
		t.Fatalf("Get via n4: %v %v", l, err)
	}
	waitFor(t, "n4 caught up", 10*time.Second, func() bool {
		l, err := getVia(m4, n.lease.LeaseId, true)
		return err == nil && l.Fence == n.lease.Fence
	})
	a4 := acquireVia(t, m4, "via/n4", 30*time.Second)
	if a4.lease.Fence <= n.lease.Fence {
		t.Fatalf("fence via n4 %d", a4.lease.Fence)
	}

	// Remove the dead old leader and the new member (through a follower);
	// Status shows what is left.
	for _, id := range []string{leader.id, "n4"} {
		if _, err := f.cluster.RemoveServer(context.Background(), connect.NewRequest(&tenurev1.RemoveServerRequest{Id: id})); err != nil {
			t.Fatalf("RemoveServer %s: %v", id, err)
		}
	}
	waitFor(t, "removals published", 10*time.Second, func() bool { return published(next, next.id, f.id) && published(f, next.id, f.id) })
	m4.stop(t)
	// Two voters left: still serving.
	acquireVia(t, f, "after/removal", 30*time.Second)
}

// TestClusterNoLeaderAnswersNotLeader: a member without a leader answers
// writes and linearizable reads NOT_LEADER (nothing proposed), and stale
// reads from its own state.
func TestClusterNoLeaderAnswersNotLeader(t *testing.T) {
	ms := startCluster(t, 3)
	leader := leaderOf(t, ms, 10*time.Second)
	for _, m := range ms {
		waitFor(t, m.id+" published", 10*time.Second, func() bool { return published(m, "n1", "n2", "n3") })
	}
	a := acquireVia(t, leader, "x", time.Minute)
	var lone *member
	for _, m := range ms {
		if m != leader {
			lone = m
			waitFor(t, "stale read on "+m.id, 5*time.Second, func() bool {
				_, err := getVia(m, a.lease.LeaseId, true)
				return err == nil
			})
		}
	}
	// Stop everybody else: the lone member has no quorum, so no leader.
	for _, m := range ms {
		if m != lone {
			m.stop(t)
		}
	}
	waitFor(t, "leader lost", 10*time.Second, func() bool {
		id, _ := lone.srv.Node().Leader()
		return id == ""
	})
	_, err := lone.leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{Resource: "y", Holder: "h"}))
	wantReason(t, err, connect.CodeUnavailable, "NOT_LEADER")
	_, err = lone.leases.Get(context.Background(), connect.NewRequest(&tenurev1.GetRequest{LeaseId: a.lease.LeaseId}))
	wantReason(t, err, connect.CodeUnavailable, "NOT_LEADER")
	if l, err := getVia(lone, a.lease.LeaseId, true); err != nil || l.Fence != a.lease.Fence {
		t.Fatalf("stale Get without a leader: %v %v", l, err)
	}
}

// TestCutOffLeaderAnswersAtOnce: a leader left without its quorum steps
// down and answers NOT_LEADER at once, not after waiting for an election
// as a member does right after its start (it knew a leader: itself, even
// though nothing asked it who leads). Its wait would last the apply
// timeout, here longer than the call's deadline.
func TestCutOffLeaderAnswersAtOnce(t *testing.T) {
	ms := startClusterWith(t, 3, func(c *Config) { c.Cluster.ApplyTimeout = 5 * time.Minute })
	leader := leaderOf(t, ms, 10*time.Second)
	acquireVia(t, leader, "x", time.Minute)
	for _, m := range ms {
		if m != leader {
			m.stop(t)
		}
	}
	waitFor(t, "the leader steps down", 10*time.Second, func() bool { return !leader.srv.Node().IsLeader() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := leader.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "y", Holder: "h"}))
	if ctx.Err() != nil {
		t.Fatalf("the call waited for a leader until its deadline: %v", err)
	}
	wantReason(t, err, connect.CodeUnavailable, "NOT_LEADER")
}

// TestForwardErrorClassification: a forward that cannot be started is
// NOT_LEADER naming the leader (without its address: it could not be
// dialled); one that broke off after sending a write
// is OUTCOME_UNKNOWN; the leader's own answers pass through.
func TestForwardErrorClassification(t *testing.T) {
	b := setup(t)
	s := b.srv
	ctx := context.Background()
	// Nobody listens on this port any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	_, err = routes[tenurev1connect.LeaseServiceAcquireProcedure].call(ctx, s, "http://"+dead, &tenurev1.AcquireRequest{}, http.Header{})
	werr := s.forwardError(ctx, err, true, "n9", dead)
	wantReason(t, werr, connect.CodeUnavailable, "NOT_LEADER")
	if !strings.Contains(werr.Error(), dead) {
		t.Errorf("the message does not name the leader's address %s: %v", dead, werr)
	}
	var ce *connect.Error
	if errors.As(werr, &ce) {
		for _, d := range ce.Details() {
			v, _ := d.Value()
			if info, ok := v.(interface{ GetMetadata() map[string]string }); ok {
				// A leader that could not be dialled is named, but its
				// address is not offered: a client would go there next.
				if md := info.GetMetadata(); md["leader"] != "" || md["leader_id"] != "n9" {
					t.Fatalf("NOT_LEADER metadata %v", md)
				}
			}
		}
	}
	// A leader that accepts the request and then hangs up.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 4096)
				c.Read(buf) // the request arrived…
				c.Close()   // …and the connection broke off
			}()
		}
	}()
	_, err = routes[tenurev1connect.LeaseServiceAcquireProcedure].call(ctx, s, "http://"+hang.Addr().String(), &tenurev1.AcquireRequest{}, http.Header{})
	wantReason(t, s.forwardError(ctx, err, true, "n9", hang.Addr().String()), connect.CodeUnavailable, "OUTCOME_UNKNOWN")
	// The leader's own rejection passes through unchanged.
	_, err = routes[tenurev1connect.LeaseServiceGetProcedure].call(ctx, s, b.base, &tenurev1.GetRequest{LeaseId: "zzz"}, http.Header{})
	wantReason(t, s.forwardError(ctx, err, false, "n1", s.Addr()), connect.CodeNotFound, "LEASE_NOT_FOUND")
}

// TestCallsRightAfterStartWaitForTheFirstLeader: a fresh node answers a
// write sent before its first election ends (Raft waits a heartbeat
// timeout, here 400 ms, before electing itself) instead of NOT_LEADER.
func TestCallsRightAfterStartWaitForTheFirstLeader(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Cluster.HeartbeatTimeout = 400 * time.Millisecond
	cfg.Cluster.ElectionTimeout = 400 * time.Millisecond
	srv, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer srv.Close(context.Background())
	if srv.node.IsLeader() {
		t.Fatal("the node leads at once; the test needs an election to wait for")
	}
	leases := tenurev1connect.NewLeaseServiceClient(h2cClient(), "http://"+srv.Addr(), connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "first", Holder: "w1"}))
	if err != nil {
		t.Fatalf("Acquire right after the start: %v", err)
	}
	if resp.Msg.Lease.GetFence() == 0 {
		t.Fatalf("no lease: %v", resp.Msg)
	}
}

// TestFreshClusterAnswersEveryMemberAtOnce: calls sent to each member of
// a three-node cluster the moment it starts succeed: each waits while the
// first leader is elected and until its API address reaches the member
// (forwarding needs it) instead of failing with NOT_LEADER.
func TestFreshClusterAnswersEveryMemberAtOnce(t *testing.T) {
	ms := startCluster(t, 3)
	errs := make(chan error, len(ms))
	for i, m := range ms {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := m.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: fmt.Sprintf("first/%d", i), Holder: "w1"}))
			if err != nil {
				err = fmt.Errorf("acquire through %s: %w", m.id, err)
			}
			errs <- err
		}()
	}
	for range ms {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestRemoveLeaderThenAddBack: a leader removed from the cluster steps
// down and keeps running, and added back it catches up and votes again
// (the cluster then survives the loss of another member).
func TestRemoveLeaderThenAddBack(t *testing.T) {
	ms := startCluster(t, 3)
	old := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, old)
	// As a client would: a removal refused for a moment (the hand-over
	// timed out on a loaded machine, an election) is asked again.
	for attempt := 1; ; attempt++ {
		_, err := f.cluster.RemoveServer(context.Background(), connect.NewRequest(&tenurev1.RemoveServerRequest{Id: old.id}))
		if err == nil {
			break
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || attempt == 5 {
			t.Fatalf("RemoveServer of the leader (attempt %d): %v", attempt, err)
		}
		t.Logf("RemoveServer of the leader (attempt %d): %v; again", attempt, err)
	}
	// It handed leadership over first: the member that removed it leads
	// already, with no election to wait for.
	if old.srv.Node().IsLeader() || !slices.ContainsFunc(ms, func(m *member) bool { return m != old && m.srv.Node().IsLeader() }) {
		t.Fatal("no other member leads when the removal of the leader returns")
	}
	var rest []*member
	for _, m := range ms {
		if m != old {
			rest = append(rest, m)
		}
	}
	next := leaderOf(t, rest, 10*time.Second)
	before := acquireVia(t, next, "while/removed", 30*time.Second)
	// Removed, it says so rather than "an election may be under way".
	waitFor(t, "the removed member to say it is not a voter", 20*time.Second, func() bool {
		_, err := old.leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{
			Resource: "via/removed", Holder: "h", Ttl: durationpb.New(time.Minute)}))
		return err != nil && strings.Contains(err.Error(), "not a voter of the cluster's configuration")
	})
	// And so does its /readyz.
	resp, err := http.Get("http://" + old.srv.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "not a voter of the cluster's configuration") {
		t.Fatalf("/readyz of the removed member: %d %s", resp.StatusCode, body)
	}
	// A watch on it ends rather than waiting for events it never hears
	// of: from now, and from an index past its last (the cluster's
	// ledger moved on without it).
	st, err := statusOf(next)
	if err != nil {
		t.Fatal(err)
	}
	for _, after := range []uint64{0, st.CommitIndex + 1000} {
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		ws, err := old.leases.Watch(wctx, connect.NewRequest(&tenurev1.WatchRequest{AfterIndex: after}))
		if err != nil {
			t.Fatal(err)
		}
		for ws.Receive() {
		}
		wcancel()
		if err := ws.Err(); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "watch from another member") {
			t.Fatalf("Watch on the removed member after %d: %v", after, err)
		}
	}
	if err := whileNotLeader(func() error {
		_, err := next.cluster.AddVoter(context.Background(), connect.NewRequest(&tenurev1.AddVoterRequest{
			Id: old.id, RaftAddress: old.srv.Node().RaftAddr(), ApiAddress: old.srv.Addr()}))
		return err
	}); err != nil {
		t.Fatalf("AddVoter of the old leader: %v", err)
	}
	after := acquireVia(t, next, "after/added", 30*time.Second)
	waitFor(t, "the re-added member to apply what it missed and what came after", 10*time.Second, func() bool {
		a, errA := getVia(old, before.lease.LeaseId, true)
		b, errB := getVia(old, after.lease.LeaseId, true)
		return errA == nil && errB == nil && a.Fence == before.lease.Fence && b.Fence == after.lease.Fence
	})
	// It votes again: with another member gone, two of three still elect.
	var other *member
	for _, m := range rest {
		if m != next {
			other = m
		}
	}
	next.stop(t)
	l := leaderOf(t, []*member{old, other}, 15*time.Second)
	acquireVia(t, l, "after/another/loss", 30*time.Second)
}

// TestRestartedFollowerReadyOnlyOnceCaughtUp: a follower restarted after
// the cluster moved on answers /readyz 200 only once it has applied what
// the leader had committed (its own commit index is 0 after a restart,
// and trails the leader's while it catches up).
func TestRestartedFollowerReadyOnlyOnceCaughtUp(t *testing.T) {
	cfgs := map[string]Config{}
	ms := startClusterWith(t, 3, func(c *Config) { cfgs[c.Cluster.NodeID] = *c })
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	for i := range 100 { // entries the follower has, and must apply again after its restart
		acquireVia(t, l, fmt.Sprintf("before/%d", i), time.Minute)
	}
	raftAddr := f.srv.Node().RaftAddr()
	f.stop(t)
	for i := range 50 { // and entries it missed
		acquireVia(t, l, fmt.Sprintf("missed/%d", i), time.Minute)
	}
	st, err := statusOf(l)
	if err != nil {
		t.Fatal(err)
	}
	target := st.CommitIndex
	cfg := cfgs[f.id]
	cfg.Cluster.RaftListener = nil
	cfg.Cluster.RaftAddr = raftAddr
	srv, err := Start(cfg)
	if err != nil {
		t.Fatalf("restart %s: %v", f.id, err)
	}
	f.srv = srv
	hc := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, "the restarted follower to be ready", 20*time.Second, func() bool {
		resp, err := hc.Get("http://" + srv.Addr() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		if applied := srv.Node().Applied(); applied < target {
			t.Fatalf("/readyz 200 with %d entries applied; the leader had committed %d before the restart", applied, target)
		}
		return true
	})
}

// TestTransferToADownMemberIsRefused: the leader knows a member it cannot
// reach and refuses to hand leadership to it at once, instead of refusing
// writes for an election timeout and then answering OUTCOME_UNKNOWN; and
// it refuses to remove a member that is up while that one is down (the
// voters left, one up of two, would not be a majority: etcd's strict
// reconfiguration check), itself included, but removes the down one.
func TestTransferToADownMemberIsRefused(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	f.stop(t)
	waitFor(t, "the leader to see the stopped member unreachable", 20*time.Second, func() bool {
		st, err := statusOf(l)
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.Id == f.id && m.UnreachableSince != nil {
				return true
			}
		}
		return false
	})
	_, err := l.cluster.TransferLeadership(context.Background(), connect.NewRequest(&tenurev1.TransferLeadershipRequest{Id: f.id}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("transfer to a stopped member: %v, want INVALID_ARGUMENT saying it cannot be reached", err)
	}
	if !l.srv.Node().IsLeader() {
		t.Fatal("the leader stepped down")
	}
	acquireVia(t, l, "after/refused/transfer", 30*time.Second)

	var up *member
	for _, m := range ms {
		if m != l && m != f {
			up = m
		}
	}
	for _, id := range []string{up.id, l.id} {
		_, err = l.cluster.RemoveServer(context.Background(), connect.NewRequest(&tenurev1.RemoveServerRequest{Id: id}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "not a majority") || !strings.Contains(err.Error(), f.id) {
			t.Fatalf("removing %s while %s is down: %v, want INVALID_ARGUMENT naming the member down", id, f.id, err)
		}
	}
	if st, err := statusOf(l); err != nil || len(st.Members) != 3 || !l.srv.Node().IsLeader() {
		t.Fatalf("after the refused removals: %v, %v", st, err)
	}
	resp, err := l.cluster.RemoveServer(context.Background(), connect.NewRequest(&tenurev1.RemoveServerRequest{Id: f.id}))
	if err != nil || !resp.Msg.WasMember {
		t.Fatalf("removing the member that is down: %v, %v", resp, err)
	}
	// Again: it succeeds, and says it was no member any more.
	if resp, err = l.cluster.RemoveServer(context.Background(), connect.NewRequest(&tenurev1.RemoveServerRequest{Id: f.id})); err != nil || resp.Msg.WasMember {
		t.Fatalf("removing the member again: %v, %v", resp, err)
	}
	acquireVia(t, l, "after/removal", 30*time.Second)
}

// TestJoinViaSomethingElseFailsFast: --join naming an address where
// something listens but does not speak the API (a member's Raft port)
// fails after a few answers, saying so, instead of retrying for the whole
// join timeout.
func TestJoinViaSomethingElseFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // not HTTP/2: the connection ends at once
		}
	}()
	cfg := clusterTestConfig(t.TempDir(), "late")
	cfg.Join = ln.Addr().String()
	cfg.JoinTimeout = time.Minute
	start := time.Now()
	srv, err := Start(cfg)
	if err == nil {
		srv.Close(context.Background())
		t.Fatal("joined via a listener that is not a Tenure API")
	}
	if !strings.Contains(err.Error(), "does not answer as a Tenure API") || time.Since(start) > 30*time.Second {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
}

// TestFollowerReadyOnceItReachedTheTargetAsked: a follower that has
// applied what the leader had committed when it last asked is ready at
// the next probe, without asking again (found from outside: under steady
// writes, probes a second or more apart asked a fresh target each time,
// always a few entries ahead, and /readyz never turned 200).
func TestFollowerReadyOnceItReachedTheTargetAsked(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	acquireVia(t, l, "ready/target", time.Minute)
	srv := f.srv
	waitFor(t, "the follower to apply the write", 10*time.Second, func() bool {
		st, err := statusOf(l)
		return err == nil && srv.Node().Applied() >= st.CommitIndex
	})
	asked := time.Now().Add(-time.Hour) // long enough ago to ask again
	c := &srv.catchUp
	c.mu.Lock()
	c.changes, c.target, c.asked, c.done = srv.Node().LeaderChanges(), srv.Node().Applied(), asked, false
	c.mu.Unlock()
	if ok, why := srv.caughtUp(context.Background()); !ok {
		t.Fatalf("not ready with the asked target applied: %s", why)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.asked.Equal(asked) {
		t.Fatal("asked the leader again for a target already reached")
	}
}

// TestFollowerReadyUnderWritesAtFirstProbe: a follower in step with the
// leader is ready at the first probe after a change of leader although
// writes go on, which keep the leader's commit index a message ahead of
// what the follower has heard of when it asks.
func TestFollowerReadyUnderWritesAtFirstProbe(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	acquireVia(t, l, "ready/writes", time.Minute)
	waitFor(t, f.id+" knows the leader's address", 10*time.Second, func() bool { return published(f, "n1", "n2", "n3") })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil && i < 100_000; i++ {
			_, _ = l.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: fmt.Sprintf("ready/w%d", i), Holder: "h"}))
		}
	})
	defer wg.Wait()
	defer cancel()
	srv := f.srv
	for probe := range 5 { // each as the first after a change of leader
		c := &srv.catchUp
		c.mu.Lock()
		c.changes, c.target, c.asked, c.done = srv.Node().LeaderChanges(), 0, time.Time{}, false
		c.mu.Unlock()
		if ok, why := srv.caughtUp(context.Background()); !ok {
			t.Fatalf("probe %d: a follower in step with the leader is not ready: %s", probe, why)
		}
	}
	// Nor does its own check flap: under writes its commit index runs a
	// moment ahead of what it has applied (5% of probes were 503).
	for probe := range 50 {
		if !srv.Node().Ready(context.Background()) {
			t.Fatalf("probe %d: a follower under writes is not ready", probe)
		}
	}
}

// TestForwardedWaitCutOnShutdown: a Claim long-polling through a follower
// that shuts down is answered (OUTCOME_UNKNOWN: the leader may have
// claimed) within a moment, instead of holding the shutdown and being
// dropped unanswered.
func TestForwardedWaitCutOnShutdown(t *testing.T) {
	ms := startCluster(t, 3)
	leader := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, leader)
	qc := tenurev1connect.NewQueueServiceClient(h2cClient(), "http://"+f.srv.Addr(), connect.WithGRPC())
	errc := waitingClaim(t, qc, leader.srv)
	f.stop(t)
	wantReason(t, <-errc, connect.CodeUnavailable, "OUTCOME_UNKNOWN")
}

// TestWipedMemberDoesNotVoteAwayAcknowledgedWrites: a member that lost
// its data dir and comes back as itself (the same --peers) must not help
// a member that missed acknowledged writes become leader. Found from
// outside: with its vote, a lagging member won, the acknowledged lease was
// gone, and the resource was granted again with the same fence.
func TestWipedMemberDoesNotVoteAwayAcknowledgedWrites(t *testing.T) {
	cfgs := map[string]Config{}
	ms := startClusterWith(t, 3, func(c *Config) { cfgs[c.Cluster.NodeID] = *c })
	l := leaderOf(t, ms, 10*time.Second)
	acquireVia(t, l, "warm", time.Minute)
	var lagging, other *member
	for _, m := range ms {
		switch {
		case m == l:
		case lagging == nil:
			lagging = m
		default:
			other = m
		}
	}
	addrs := map[string]string{}
	for _, m := range ms {
		addrs[m.id] = m.srv.Node().RaftAddr()
	}
	lagging.stop(t)
	// Acknowledged by the leader and other: a majority.
	x := acquireVia(t, l, "acked", 5*time.Minute)
	l.stop(t)
	other.stop(t)
	restart := func(m *member, wipe bool) {
		t.Helper()
		cfg := cfgs[m.id]
		if wipe {
			cfg.Cluster.DataDir = t.TempDir()
		}
		cfg.Cluster.RaftListener = nil
		cfg.Cluster.RaftAddr = addrs[m.id]
		srv, err := Start(cfg)
		if err != nil {
			t.Fatalf("restart %s: %v", m.id, err)
		}
		*m = *newMember(t, m.id, srv)
	}
	// other comes back wiped, with the same peers; lagging comes back
	// without the write. Together they are a majority, but lagging must
	// not win with the vote of a member that forgot what it acknowledged.
	restart(other, true)
	restart(lagging, false)
	leaderBy := func() *member {
		for _, m := range []*member{lagging, other} {
			if m.srv.Node().IsLeader() {
				return m
			}
		}
		return nil
	}
	// Watched for long enough for several elections (timeouts of 200 ms):
	// without the guard, lagging led within a second.
	watch := time.NewTicker(20 * time.Millisecond)
	defer watch.Stop()
	for end := time.After(3 * time.Second); ; {
		if m := leaderBy(); m != nil {
			t.Fatalf("%s leads with the vote of a member that lost its data", m.id)
		}
		select {
		case <-watch.C:
			continue
		case <-end:
		}
		break
	}
	// The member that holds the write comes back: it leads, and the wiped
	// member catches up from it.
	restart(l, false)
	nl := leaderOf(t, ms, 20*time.Second)
	got, err := getVia(nl, x.lease.LeaseId, false)
	if err != nil || got.GetState() != tenurev1.State_STATE_ACTIVE || got.GetFence() != x.lease.GetFence() {
		t.Fatalf("the acknowledged lease after the wiped member rejoined: %v %v", got, err)
	}
	if _, err := nl.leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{
		Resource: "acked", Holder: "intruder"})); err == nil {
		t.Fatal("the acknowledged lease's resource was granted again")
	}
}

// TestFollowerCountsTheRejectionsItForwards: a follower's
// tenure_rejections_total counts the refusals of the calls it forwarded
// (its dashboard's "errors by reason" showed none while its clients got
// them from the leader), and not as forwards that failed in transit.
func TestFollowerCountsTheRejectionsItForwards(t *testing.T) {
	ms := startCluster(t, 3)
	f := followerOf(ms, leaderOf(t, ms, 10*time.Second))
	ctx := context.Background()
	if _, err := f.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "fw/held", Holder: "a"})); err != nil {
		t.Fatal(err)
	}
	_, err := f.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "fw/held", Holder: "b"}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_HELD")
	resp, err := http.Get("http://" + f.srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `tenure_rejections_total{reason="LEASE_HELD"} 1`) {
		t.Errorf("the follower's /metrics does not count the LEASE_HELD it answered:\n%s", body)
	}
	// The leader's refusal is an answer, not a forward that failed.
	if !strings.Contains(string(body), "tenure_forward_errors_total 0\n") {
		t.Errorf("the follower counts the leader's LEASE_HELD as a forwarding error:\n%s", body)
	}
}

// TestForceNewClusterAfterLostQuorum: a three-member cluster loses two
// members for good. The survivor, restarted with --force-new-cluster,
// refuses while another member still answers, then goes on alone with
// every lease it had (fences continuing upward), and a wiped member joins
// it as a new second member.
func TestForceNewClusterAfterLostQuorum(t *testing.T) {
	cfgs := map[string]Config{}
	ms := startClusterWith(t, 3, func(c *Config) { cfgs[c.Cluster.NodeID] = *c })
	l := leaderOf(t, ms, 10*time.Second)
	x := acquireVia(t, l, "kept", 5*time.Minute)
	survivor, other := followerOf(ms, l), (*member)(nil)
	for _, m := range ms {
		if m != l && m != survivor {
			other = m
		}
	}
	waitFor(t, "the survivor to apply the lease", 10*time.Second, func() bool {
		got, err := getVia(survivor, x.lease.LeaseId, true)
		return err == nil && got.GetState() == tenurev1.State_STATE_ACTIVE
	})
	addrs := map[string]string{}
	for _, m := range ms {
		addrs[m.id] = m.srv.Node().RaftAddr()
	}
	restart := func(m *member, mod func(*Config)) error {
		t.Helper()
		cfg := cfgs[m.id]
		cfg.Cluster.RaftListener = nil
		cfg.Cluster.RaftAddr = addrs[m.id]
		mod(&cfg)
		srv, err := Start(cfg)
		if err != nil {
			return err
		}
		*m = *newMember(t, m.id, srv)
		return nil
	}
	force := func(c *Config) { c.Cluster.ForceNewCluster = true }

	l.stop(t)
	survivor.stop(t)
	err := restart(survivor, force)
	if err == nil || !strings.Contains(err.Error(), "member "+other.id+" answers at") {
		t.Fatalf("--force-new-cluster while %s runs: %v, want a refusal naming it", other.id, err)
	}
	other.stop(t)
	if err := restart(survivor, force); err != nil {
		t.Fatalf("--force-new-cluster: %v", err)
	}
	if nl := leaderOf(t, []*member{survivor}, 10*time.Second); nl != survivor {
		t.Fatal("the forced member does not lead")
	}
	got, err := getVia(survivor, x.lease.LeaseId, false)
	if err != nil || got.GetState() != tenurev1.State_STATE_ACTIVE || got.GetFence() != x.lease.GetFence() {
		t.Fatalf("the acknowledged lease after the recovery: %v %v", got, err)
	}
	// Fences the lost members may have acknowledged are never issued again.
	if next := acquireVia(t, survivor, "after-recovery", time.Minute); next.lease.GetFence() <= x.lease.GetFence()+cluster.DefaultFenceBump {
		t.Fatalf("fence after the recovery %d, not above %d + the bump", next.lease.GetFence(), x.lease.GetFence())
	}
	waitFor(t, "Status to list the survivor alone", 10*time.Second, func() bool { return published(survivor, survivor.id) })

	// Both lost members come back with their old data, against the
	// runbook: the survivor refuses them and keeps its own, and each
	// stops once refused (without that, they went on as the old cluster
	// between themselves, granting what the survivor grants).
	if err := restart(l, func(*Config) {}); err != nil {
		t.Fatalf("restart %s with its old data: %v", l.id, err)
	}
	if err := restart(other, func(*Config) {}); err != nil {
		t.Fatalf("restart %s with its old data: %v", other.id, err)
	}
	// Watched, with writes, over many of their heartbeats and elections
	// (timeouts of 200 ms): without the refusal, the survivor followed
	// their leader within a second.
	watch := time.NewTicker(50 * time.Millisecond)
	defer watch.Stop()
	for i, end := 0, time.After(3*time.Second); ; i++ {
		if !survivor.srv.Node().IsLeader() {
			t.Fatal("the forced member lost its leadership to the old members")
		}
		acquireVia(t, survivor, fmt.Sprintf("alone/%d", i), time.Minute)
		select {
		case <-watch.C:
			continue
		case <-end:
		}
		break
	}
	if got, err := getVia(survivor, x.lease.LeaseId, false); err != nil || got.GetState() != tenurev1.State_STATE_ACTIVE {
		t.Fatalf("the lease on the forced member after the old members came back: %v %v", got, err)
	}
	for _, m := range []*member{l, other} {
		select {
		case <-m.srv.Node().Failed():
		case <-time.After(20 * time.Second):
			t.Fatalf("%s, left out, still runs with its old data", m.id)
		}
		if err := m.srv.Node().Err(); err == nil || !strings.Contains(err.Error(), "member "+survivor.id+", forced into a new cluster") {
			t.Fatalf("%s stopped with %v", m.id, err)
		}
	}
	// Started again from its old data, a left-out member refuses at once.
	lAPI := l.srv.Addr()
	l.stop(t)
	if err := restart(l, func(*Config) {}); err == nil || !strings.Contains(err.Error(), "refused this member's Raft calls") {
		t.Fatalf("a left-out member started again with its old data: %v", err)
	}
	// An admin cannot add an old member back as it is: only from an
	// empty data dir, through its own --join.
	_, err = survivor.cluster.AddVoter(context.Background(), connect.NewRequest(&tenurev1.AddVoterRequest{
		Id: l.id, RaftAddress: addrs[l.id], ApiAddress: lAPI}))
	if err == nil || !strings.Contains(err.Error(), "left out by --force-new-cluster") {
		t.Fatalf("AddVoter of a left-out member: %v", err)
	}
	// Its terms are far above the old members'.
	if st, err := statusOf(survivor); err != nil || st.Term < 1<<32 {
		t.Fatalf("the forced member's term: %v %v", st.GetTerm(), err)
	}
	l.stop(t)
	other.stop(t)

	// A lost member comes back wiped and joins the new cluster.
	if err := restart(other, func(c *Config) {
		c.Cluster.DataDir, c.Cluster.Peers, c.Join = t.TempDir(), nil, survivor.srv.Addr()
	}); err != nil {
		t.Fatalf("join after the recovery: %v", err)
	}
	waitFor(t, "Status to list both members", 20*time.Second, func() bool { return published(survivor, survivor.id, other.id) })
	waitFor(t, "the joined member to have the lease", 20*time.Second, func() bool {
		got, err := getVia(other, x.lease.LeaseId, true)
		return err == nil && got.GetFence() == x.lease.GetFence()
	})
}

// A data dir without Raft state has nothing to go on from, and is left
// as it was (a mistyped path is not created).
func TestForceNewClusterNeedsState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mistyped")
	cfg := clusterTestConfig(dir, "n1")
	cfg.Cluster.ForceNewCluster = true
	if srv, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "holds no Raft state") {
		if srv != nil {
			_ = srv.Close(context.Background())
		}
		t.Fatalf("--force-new-cluster on an empty data dir: %v", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the refused --force-new-cluster made its data dir")
	}
}

// A grant forwarded by a follower for a caller that went away before the
// leader's answer reached it (the follower paused, or slow) is given
// back: without it the lease stayed held by no one until it expired.
func TestForwardedGrantOfACallerGoneIsGivenBack(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	held := acquireVia(t, l, "gone/x", time.Minute)

	// The leader's answer reaches the follower once the follower has seen
	// its caller go.
	orig := routes[tenurev1connect.LeaseServiceAcquireProcedure]
	t.Cleanup(func() { routes[tenurev1connect.LeaseServiceAcquireProcedure] = orig })
	late := orig
	late.call = func(ctx context.Context, s *Server, base string, msg any, hdr http.Header) (connect.AnyResponse, error) {
		resp, err := orig.call(ctx, s, base, msg, hdr)
		if msg.(*tenurev1.AcquireRequest).GetHolder() == "w-gone" {
			<-ctx.Value(callerKey{}).(context.Context).Done()
		}
		return resp, err
	}
	routes[tenurev1connect.LeaseServiceAcquireProcedure] = late

	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.leases.Acquire(wctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "gone/x", Holder: "w-gone",
			Ttl: durationpb.New(time.Minute), Wait: durationpb.New(30 * time.Second)}))
		done <- err
	}()
	// The waiter is queued; the holder lets go, and the leader grants it.
	waitFor(t, "the forwarded acquire to queue", 10*time.Second, func() bool {
		h, err := l.leases.History(context.Background(), connect.NewRequest(&tenurev1.HistoryRequest{Resource: "gone/x"}))
		return err == nil && slices.ContainsFunc(h.Msg.Events, func(e *tenurev1.Event) bool { return e.Type == EventLeaseWaiting })
	})
	if _, err := l.leases.Release(context.Background(), connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: held.lease.LeaseId, Holder: "h-gone/x"})); err != nil {
		t.Fatal(err)
	}
	var granted *tenurev1.Lease
	waitFor(t, "the waiter to be granted", 10*time.Second, func() bool {
		ls, err := l.leases.List(context.Background(), connect.NewRequest(&tenurev1.ListRequest{Resource: "gone/x", Holder: "w-gone"}))
		if err == nil && len(ls.Msg.Leases) == 1 {
			granted = ls.Msg.Leases[0]
		}
		return granted != nil
	})
	cancel()
	if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("the caller's acquire: %v", err)
	}
	waitFor(t, "the grant to be given back", 10*time.Second, func() bool {
		got, err := getVia(l, granted.LeaseId, false)
		return err == nil && got.GetState() == tenurev1.State_STATE_RELEASED && got.GetReleaseReason() == tenurev1.ReleaseReason_RELEASE_REASON_ABORTED
	})
}

// A member remembers the last leader it knew, with its API address: one
// whose disk is full keeps starting elections (it cannot follow), knows no
// leader, and forwards writes there.
func TestLastLeader(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	waitFor(t, "the follower to know the leader's API address", 10*time.Second, func() bool {
		id, addr := f.srv.Node().LastLeader()
		return id == l.id && addr == l.srv.Addr()
	})
	if id, addr := l.srv.Node().LastLeader(); id != l.id || addr != l.srv.Addr() {
		t.Fatalf("the leader's last leader: %s %s", id, addr)
	}
	l.stop(t)
	nl := leaderOf(t, ms, 10*time.Second)
	waitFor(t, "the follower to know the new leader", 10*time.Second, func() bool {
		id, _ := f.srv.Node().LastLeader()
		return id == nl.id
	})
}

// TestBackupFromTheLeader: a member that does not lead answers a backup
// with NOT_LEADER naming the leader (a removed or lagging member's backup
// missed acknowledged leases, found from outside), unless allow_stale
// asks for its applied state.
func TestBackupFromTheLeader(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	a := acquireVia(t, l, "backup/one", time.Minute)
	// The follower's stale backup below is of what it has applied: wait
	// until that includes the lease (CI found it before its first entry).
	waitFor(t, "the follower to apply the lease", 10*time.Second, func() bool {
		got, err := getVia(f, a.lease.LeaseId, true)
		return err == nil && got.Fence == a.lease.Fence
	})
	ctx := context.Background()
	err := drainBackup(f.cluster.SaveSnapshot(ctx, connect.NewRequest(&tenurev1.SaveSnapshotRequest{})))
	wantReason(t, err, connect.CodeUnavailable, "NOT_LEADER")
	if !strings.Contains(err.Error(), "allow_stale") {
		t.Errorf("the refusal does not say how to back up a follower: %v", err)
	}
	var info *tenurev1.SnapshotInfo
	stream, err := f.cluster.SaveSnapshot(ctx, connect.NewRequest(&tenurev1.SaveSnapshotRequest{AllowStale: true}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if stream.Msg().GetInfo() != nil {
			info = stream.Msg().GetInfo()
		}
	}
	if err := stream.Err(); err != nil || info.GetNodeId() != f.id || info.GetLeader() {
		t.Fatalf("a follower's backup with allow_stale: %v, %v", info, err)
	}
	if err := drainBackup(l.cluster.SaveSnapshot(ctx, connect.NewRequest(&tenurev1.SaveSnapshotRequest{}))); err != nil {
		t.Fatalf("the leader's backup: %v", err)
	}
}

// TestLeaderStampsTheLowestRules: the leader stamps on commands the
// lowest rules its members say they apply (a member of an older build in
// a rolling upgrade applies newer rules by its own, older ones: found
// from outside, two signed ledgers that disagree), and this build's own
// once every member says them; what newer rules alone know (ResetPeer)
// is refused meanwhile. From the same asks it shows how far each member
// applied the log, and which cannot write its own.
func TestLeaderStampsTheLowestRules(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	f := followerOf(ms, l)
	stamps := func(want uint32) func() bool {
		return func() bool { return l.srv.node.StampRules() == want }
	}
	waitFor(t, "the leader to stamp its own rules", 10*time.Second, stamps(statemachine.Rules))
	if st, err := statusOf(f); err != nil || st.GetRules() != statemachine.Rules || st.GetStampedRules() != 0 {
		t.Fatalf("a follower's Status says rules %d, stamped %d (%v), want %d and none", st.GetRules(), st.GetStampedRules(), err, statemachine.Rules)
	}
	pc := tenurev1connect.NewPoolServiceClient(h2cClient(), "http://"+l.srv.Addr(), connect.WithGRPC())
	reset := func() (*connect.Response[tenurev1.ResetPeerResponse], error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return pc.ResetPeer(ctx, connect.NewRequest(&tenurev1.ResetPeerRequest{Pool: "rules", Peer: "p1"}))
	}
	if err := whileNotLeader(func() error {
		_, err := pc.CreatePool(context.Background(), connect.NewRequest(&tenurev1.CreatePoolRequest{Pool: "rules"}))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.srv.reportRules.Store(pool.ResetRules - 1) // an older build
	waitFor(t, "the leader to stamp the older member's rules", 10*time.Second, stamps(pool.ResetRules-1))
	// What the older build does not know is refused, not proposed.
	_, err := reset()
	wantReason(t, err, connect.CodeUnimplemented, "UNIMPLEMENTED")
	if st, err := statusOf(l); err != nil || st.GetRules() != statemachine.Rules || st.GetStampedRules() != pool.ResetRules-1 {
		t.Fatalf("the leader's Status says rules %d, stamped %d (%v)", st.GetRules(), st.GetStampedRules(), err)
	}
	acquireVia(t, l, "rules/older", 30*time.Second) // commands go on
	f.srv.reportRules.Store(0)                      // upgraded
	waitFor(t, "the leader to stamp its own rules again", 10*time.Second, stamps(statemachine.Rules))
	if r, err := reset(); err != nil || r.Msg.GetKnown() {
		t.Fatalf("ResetPeer once every member is upgraded: %v, %v", r, err)
	}
	// From the same asks the leader knows how far each member applied,
	// and which cannot write its log (it answers heartbeats all the same).
	failure := "raft log: no space left on device (test)"
	f.srv.reportLogFailure.Store(&failure)
	waitFor(t, "the leader to show the member's log failure", 10*time.Second, func() bool {
		st, err := statusOf(l)
		if err != nil {
			return false
		}
		for _, m := range st.GetMembers() {
			if m.GetId() == f.id {
				return m.GetLogFailure() == failure && m.GetAppliedIndex() > 0
			}
		}
		return false
	})
	if st, err := statusOf(f); err != nil || st.GetLogFailure() != failure {
		t.Fatalf("the member's own Status: %v, %v", st.GetLogFailure(), err)
	}
}

// TestRulesOfADownMemberOutliveALeaderChange: a leader elected while a
// member is down stamps what its predecessor knew that member to apply,
// not the floor for a member never heard from (found from outside: a
// cluster all of one build stamped rules 3 after its leader failed over,
// pruning dead tasks after an hour and refusing ResetPeer as
// UNIMPLEMENTED until the down member came back).
func TestRulesOfADownMemberOutliveALeaderChange(t *testing.T) {
	ms := startCluster(t, 3)
	l := leaderOf(t, ms, 10*time.Second)
	waitFor(t, "the leader to stamp its own rules", 10*time.Second, func() bool {
		return l.srv.node.StampRules() == statemachine.Rules
	})
	acquireVia(t, l, "rules/before", 30*time.Second) // an entry stamped with them
	var down, next *member
	for _, m := range ms {
		switch {
		case m == l:
		case down == nil:
			down = m
		default:
			next = m
		}
	}
	down.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.cluster.TransferLeadership(ctx, connect.NewRequest(&tenurev1.TransferLeadershipRequest{Id: next.id})); err != nil {
		t.Fatalf("TransferLeadership to %s: %v", next.id, err)
	}
	// Whichever of the two up leads (the leadership may move again), once
	// it has set its rules for its term, stamps its predecessor's: rules
	// 3 (the floor for a member not heard from) never does.
	waitFor(t, "the new leader to stamp its predecessor's rules with "+down.id+" down", 15*time.Second, func() bool {
		for _, m := range []*member{l, next} {
			if m.srv.node.IsLeader() {
				r := m.srv.node.AwaitRules(ctx, 2*time.Second)
				return m.srv.node.IsLeader() && r == statemachine.Rules
			}
		}
		return false
	})
}
