package tenure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/testport"
)

// The tests in this file run the real `tenure server` binary, built once from
// ./cmd/tenure, on loopback ports with a t.TempDir() data dir. They use real
// time (short TTLs); -short skips them.

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// tenureBinary builds cmd/tenure once per test run.
func tenureBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "tenure-client-test")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "tenure")
		// go test puts its own toolchain first on the test's PATH.
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/tenurehq/tenure/cmd/tenure")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/tenure: %v\n%s", err, out.String())
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// realServer is a running `tenure server` process.
type realServer struct {
	t       testing.TB
	bin     string
	dir     string
	api     string
	raft    string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	stopped bool
	// extra are more `tenure server` flags (cluster membership).
	extra []string
}

func freePort(t testing.TB) string {
	t.Helper()
	addr, err := testport.Free()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startRealServer starts a single node and waits until /readyz answers.
func startRealServer(t testing.TB) *realServer {
	t.Helper()
	s := &realServer{t: t, bin: tenureBinary(t), dir: t.TempDir(), api: freePort(t), raft: freePort(t)}
	s.start()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("server log:\n%s", s.log.String())
		}
	})
	return s
}

func (s *realServer) start() {
	s.t.Helper()
	s.startAsync()
	s.waitReady()
}

// startAsync starts the process without waiting for it to be ready.
func (s *realServer) startAsync() {
	s.t.Helper()
	s.log = &bytes.Buffer{}
	args := append([]string{"server", "--data-dir", s.dir, "--listen", s.api, "--raft-listen", s.raft, "--log-level", "warn"}, s.extra...)
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.stopped = false
}

func (s *realServer) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	hc := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if resp, err := hc.Get("http://" + s.api + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		<-tick.C
	}
	s.t.Fatalf("server on %s not ready after 20s; log:\n%s", s.api, s.log.String())
}

// kill stops the process with SIGKILL and waits for it to exit.
func (s *realServer) kill() {
	if s.stopped || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.stopped = true
}

func (s *realServer) client(t testing.TB, opts ...Option) *Client {
	t.Helper()
	c, err := New([]string{s.api}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitRenewals waits until l has been renewed n times.
func waitRenewals(t *testing.T, l *Lease, n uint32) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for l.Proto().GetRenewalCount() < n {
		select {
		case <-l.Done():
			t.Fatalf("lease lost: %v", l.Err())
		case <-deadline:
			t.Fatalf("lease not renewed %d times", n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestIntegrationRenewsAcrossTTLs(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	// Long enough that heartbeats stay inside the trust window on a
	// loaded 2-core CI machine running the whole suite with -race.
	const ttl = 3 * time.Second
	l, err := c.Acquire(ctx, "integration/renew", TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	hold := time.NewTimer(3*ttl + ttl/2)
	defer hold.Stop()
	select {
	case <-l.Done():
		t.Fatalf("lease lost while the server was up: %v", l.Err())
	case <-hold.C:
	}
	pb, err := c.Get(ctx, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	if pb.GetState() != tenurev1.State_STATE_ACTIVE {
		t.Fatalf("state after 3.5 TTLs = %v, want ACTIVE", pb.GetState())
	}
	// Renewed about every ttl/3: 10 renewals in 3.5 TTLs; allow for slack.
	if n := pb.GetRenewalCount(); n < 8 {
		t.Errorf("renewal count %d after 3.5 TTLs, want ≥ 8 (every ttl/3)", n)
	}
	if !l.TrustedUntil().After(time.Now()) {
		t.Errorf("trust window ended at %v", l.TrustedUntil())
	}
	if err := l.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatal(err)
	}
	if pb, err := c.Get(ctx, l.ID()); err != nil || pb.GetState() != tenurev1.State_STATE_RELEASED {
		t.Fatalf("after Release: %v %v", pb.GetState(), err)
	}
}

func TestIntegrationDoneOnRevoke(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 3 * time.Second
	l, err := c.Acquire(ctx, "integration/revoke", TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, l.ID(), "test"); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case <-l.Done():
	case <-time.After(ttl):
		t.Fatalf("Done not closed within a ttl of the revocation")
	}
	if d := time.Since(revoked); d > ttl/3+time.Second {
		t.Errorf("Done %v after the revocation, want by the next heartbeat (ttl/3)", d)
	}
	if !errors.Is(l.Err(), ErrLeaseLost) || !errors.Is(l.Err(), ErrLeaseTerminal) {
		t.Fatalf("Err = %v, want ErrLeaseLost caused by LEASE_TERMINAL", l.Err())
	}
}

// acquireRenewed acquires resource for ttl and returns the lease once the
// heartbeat has renewed it (from then on the KeepAlive stream follows it).
func acquireRenewed(ctx context.Context, t *testing.T, c *Client, resource string, ttl time.Duration) *Lease {
	t.Helper()
	l, err := c.Acquire(ctx, resource, TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitRenewed(t, l, ttl)
	return l
}

// waitRenewed waits, at most ttl, until the heartbeat has renewed l.
func waitRenewed(t *testing.T, l *Lease, ttl time.Duration) {
	t.Helper()
	waitFor(t, "the first renewal", ttl, func() bool { return l.Proto().GetRenewalCount() > 0 })
}

// A lease revoked after the heartbeat has renewed it is told at once on
// the KeepAlive stream, not at the next renewal (ttl/3 later).
func TestIntegrationRevocationToldAtOnce(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 9 * time.Second // renewed every 3 s
	l := acquireRenewed(ctx, t, c, "integration/told", ttl)
	if _, err := c.Revoke(ctx, l.ID(), "rotating credentials"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(ttl/3 - time.Second):
		t.Fatal("Done not closed before the next renewal was due")
	}
	if !errors.Is(l.Err(), ErrLeaseTerminal) || !strings.Contains(l.Err().Error(), "rotating credentials") {
		t.Fatalf("Err = %v, want LEASE_TERMINAL with the revocation's reason", l.Err())
	}
}

// A lease revoked before its first renewal is told too: the stream
// follows it from shortly after its grant (follow_lease_ids), not from its
// first renewal, a third of its ttl later. (The server's tests cover a
// revocation after the follow.)
func TestIntegrationRevocationBeforeFirstRenewalTold(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 60 * time.Second // first renewal 20 s after the grant
	l, err := c.Acquire(ctx, "integration/told-early", TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(ctx, l.ID(), "cancelled"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(ttl/3 - 5*time.Second):
		t.Fatal("Done not closed before the first renewal was due")
	}
	if !errors.Is(l.Err(), ErrLeaseTerminal) || !strings.Contains(l.Err().Error(), "cancelled") {
		t.Fatalf("Err = %v, want LEASE_TERMINAL with the revocation's reason", l.Err())
	}
}

// A lease this client transfers ends as transferred, although the
// registrar tells the KeepAlive stream of its end (notify_ended) as soon as
// it is applied, before the Transfer's own answer arrives.
func TestIntegrationOwnTransferIsNoLoss(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 6 * time.Second
	for i := range 3 {
		l := acquireRenewed(ctx, t, c, fmt.Sprintf("integration/own-transfer/%d", i), ttl)
		if _, err := l.Transfer(ctx, "next-holder", 0); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(l.Err(), ErrTransferred) {
			t.Fatalf("transfer %d: Err = %v, want ErrTransferred", i, l.Err())
		}
	}
}

func TestIntegrationDoneAfterServerStops(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const ttl = 2 * time.Second
	l, err := c.Acquire(ctx, "integration/stop", TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// Let two renewals happen, then kill the server.
	waitRenewals(t, l, 2)
	s.kill()
	// Nothing can confirm a renewal any more: the trust window is final.
	trusted := l.TrustedUntil()
	select {
	case <-l.Done():
	case <-time.After(ttl + time.Second):
		t.Fatalf("Done not closed %v after the server died (trusted until %v)", ttl+time.Second, time.Until(trusted))
	}
	now := time.Now()
	if now.Before(trusted) {
		t.Fatalf("Done closed %v before the end of the trust window", trusted.Sub(now))
	}
	if late := now.Sub(trusted); late > 500*time.Millisecond {
		t.Errorf("Done closed %v after the trust window ended", late)
	}
	if !errors.Is(l.Err(), ErrLeaseLost) || !errors.Is(l.Err(), ErrTrustWindowPassed) {
		t.Fatalf("Err = %v", l.Err())
	}
	// Restarted, the registrar still holds the lease (its time stood
	// still while it was down): the client, which gave it up, releases it
	// and takes the resource again at once instead of meeting LEASE_HELD.
	s.start()
	again, err := c.Acquire(ctx, "integration/stop", TTL(ttl))
	if err != nil {
		t.Fatalf("Acquire after the restart: %v", err)
	}
	if again.ID() == l.ID() || again.Fence() <= l.Fence() {
		t.Fatalf("new lease %s fence %d after %s fence %d", again.ID(), again.Fence(), l.ID(), l.Fence())
	}
}

func TestIntegrationLeaseSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	ctx := ctxTimeout(t, 60*time.Second)
	const ttl = 10 * time.Second // trust window 9 s: room for a restart
	l, err := c.Acquire(ctx, "integration/restart", TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	s.kill()
	s.start() // same data dir and ports
	renewed := l.Proto().GetRenewalCount()
	deadline := time.Now().Add(ttl)
	for l.Proto().GetRenewalCount() <= renewed+1 && time.Now().Before(deadline) {
		select {
		case <-l.Done():
			t.Fatalf("lease lost across a restart of the server: %v", l.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if l.Err() != nil || l.Proto().GetRenewalCount() <= renewed+1 {
		t.Fatalf("no renewal after the restart (count %d, err %v)", l.Proto().GetRenewalCount(), l.Err())
	}
}

func TestIntegrationMutexExcludes20Goroutines(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	clients := make([]*Client, 4)
	for i := range clients {
		clients[i] = s.client(t, WithHolder(fmt.Sprintf("worker-%d", i)))
	}
	ctx := ctxTimeout(t, 90*time.Second)
	var (
		inside    atomic.Int32
		maxInside atomic.Int32
		lastFence atomic.Uint64
		entries   atomic.Int32
		wg        sync.WaitGroup
	)
	const goroutines, rounds = 20, 3
	errs := make(chan error, goroutines*rounds)
	for g := range goroutines {
		c := clients[g%len(clients)]
		m := NewMutex(c, "integration/mutex", TTL(5*time.Second))
		wg.Go(func() {
			for range rounds {
				if err := m.Lock(ctx); err != nil {
					errs <- fmt.Errorf("goroutine %d: Lock: %w", g, err)
					return
				}
				n := inside.Add(1)
				if n > maxInside.Load() {
					maxInside.Store(n)
				}
				fence := m.Lease().Fence()
				if prev := lastFence.Swap(fence); prev >= fence {
					errs <- fmt.Errorf("goroutine %d: fence %d not above the previous holder's %d", g, fence, prev)
				}
				entries.Add(1)
				for range 1000 { // the critical section: let others run meanwhile
					runtime.Gosched()
				}
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("goroutine %d: Unlock: %w", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if maxInside.Load() != 1 {
		t.Errorf("%d goroutines inside at once", maxInside.Load())
	}
	if entries.Load() != goroutines*rounds {
		t.Errorf("%d entries, want %d", entries.Load(), goroutines*rounds)
	}
}

func TestIntegrationMutexSharedByGoroutines(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t)
	m := NewMutex(c, "integration/shared-mutex", TTL(5*time.Second))
	ctx := ctxTimeout(t, 60*time.Second)
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := m.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			if n := inside.Add(1); n > maxInside.Load() {
				maxInside.Store(n)
			}
			for range 1000 { // the critical section: let others run meanwhile
				runtime.Gosched()
			}
			inside.Add(-1)
			if err := m.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Errorf("%d goroutines inside at once", maxInside.Load())
	}
}

func TestIntegrationElection(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c1 := s.client(t, WithHolder("candidate-1"))
	c2 := s.client(t, WithHolder("candidate-2"))
	ctx := ctxTimeout(t, 60*time.Second)
	e1 := NewElection(c1, "integration/election", TTL(3*time.Second))
	e2 := NewElection(c2, "integration/election", TTL(3*time.Second))

	if _, err := e1.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v", err)
	}
	obsCtx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	observed := e2.Observe(obsCtx)

	if err := e1.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	info, err := e2.Leader(ctx)
	if err != nil || info.Value != "one" || info.Holder != "candidate-1" || info.LeaseID != e1.Lease().ID() {
		t.Fatalf("Leader = %+v, %v", info, err)
	}
	expectObserved(t, observed, "one")

	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "two") }()
	select {
	case err := <-won:
		t.Fatalf("second campaign returned while the first leads: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	expectObserved(t, observed, "two")
	if err := e2.Proclaim(ctx, "two-b"); err != nil {
		t.Fatal(err)
	}
	expectObserved(t, observed, "two-b")
	info, err = e1.Leader(ctx)
	if err != nil || info.Value != "two-b" || info.Holder != "candidate-2" {
		t.Fatalf("Leader = %+v, %v", info, err)
	}
	// A new leader publishing the value sent last sends nothing, even
	// after a time without a leader; its next value is sent.
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no leader", 10*time.Second, func() bool { _, err := e1.Leader(ctx); return errors.Is(err, ErrNoLeader) })
	if err := e1.Campaign(ctx, "two-b"); err != nil {
		t.Fatal(err)
	}
	if err := e1.Proclaim(ctx, "three"); err != nil {
		t.Fatal(err)
	}
	expectObserved(t, observed, "three")
}

// TestElectionNamespaceOption: an Election's reads go to the namespace its
// leases are in, Namespace("") (the default namespace) included, whatever
// the client's own.
func TestElectionNamespaceOption(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithNamespace("team"))
	ctx := ctxTimeout(t, 30*time.Second)
	for _, opts := range [][]AcquireOption{{Namespace("")}, {Namespace("other")}, nil} {
		e := NewElection(c, "ns/election", append(opts, TTL(5*time.Second))...)
		if err := e.Campaign(ctx, "v"); err != nil {
			t.Fatal(err)
		}
		if info, err := e.Leader(ctx); err != nil || info.Value != "v" || info.LeaseID != e.Lease().ID() {
			t.Fatalf("%v: Leader = %+v, %v", opts, info, err)
		}
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func expectObserved(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case got, ok := <-ch:
		if !ok || got != want {
			t.Fatalf("observed %q (open %v), want %q", got, ok, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("did not observe %q", want)
	}
}

func TestIntegrationStateFenceVerify(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithHolder("agent-7"))
	ctx := ctxTimeout(t, 30*time.Second)
	l, err := c.Acquire(ctx, "integration/workflow", TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.ReadState(ctx, "integration/workflow")
	if err != nil || st.Epoch != 0 || len(st.Data) != 0 {
		t.Fatalf("ReadState = %+v, %v", st, err)
	}
	epoch, err := c.WriteState(ctx, l, 0, []byte("step-1"))
	if err != nil || epoch != 1 {
		t.Fatalf("WriteState = %d, %v", epoch, err)
	}
	if _, err := c.WriteState(ctx, l, 0, []byte("again")); !errors.Is(err, ErrStaleEpoch) {
		t.Errorf("stale write: %v, want ErrStaleEpoch", err)
	}
	if _, err := c.WriteState(ctx, l, 5, []byte("ahead")); !errors.Is(err, ErrFutureEpoch) {
		t.Errorf("future write: %v, want ErrFutureEpoch", err)
	}
	if cur, active, err := c.CheckFence(ctx, "integration/workflow", l.Fence()); err != nil || !cur || active != l.Fence() {
		t.Errorf("CheckFence = %v %d %v", cur, active, err)
	}

	// A restarting agent: what it remembers, checked against the registrar.
	res, err := c.VerifyAll(ctx, []string{l.ID(), "no-such-lease"}, RestartGrace(5*time.Second, ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || !res[0].Active() || res[0].LeaseID != l.ID() || res[1].Found || res[1].Active() {
		t.Fatalf("VerifyAll = %+v", res)
	}
	if err := l.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatal(err)
	}
	if cur, _, err := c.CheckFence(ctx, "integration/workflow", l.Fence()); err != nil || cur {
		t.Errorf("CheckFence after release = %v %v", cur, err)
	}
	if _, err := c.WriteState(ctx, l, 1, []byte("late")); !errors.Is(err, ErrLeaseViolation) {
		t.Errorf("write by a released lease: %v, want ErrLeaseViolation", err)
	}
	st, err = c.ReadState(ctx, "integration/workflow")
	if err != nil || st.Epoch != 1 || string(st.Data) != "step-1" {
		t.Fatalf("ReadState = %+v, %v", st, err)
	}
}

func TestIntegrationResume(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	ctx := ctxTimeout(t, 30*time.Second)
	// The first run of the agent acquires and "crashes" (its client stops
	// heartbeating without releasing).
	first, err := New([]string{s.api}, WithHolder("agent-9"), WithCloseTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	l, err := first.Acquire(ctx, "integration/resume", TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	id := l.ID()
	t.Cleanup(func() { _ = first.Close() })
	first.hb.stop() // heartbeats stop, the lease stays on the registrar
	second := s.client(t, WithHolder("agent-9"))
	res, err := second.VerifyAll(ctx, []string{id})
	if err != nil || len(res) != 1 || !res[0].Active() {
		t.Fatalf("VerifyAll = %+v, %v", res, err)
	}
	// Another holder cannot resume it, and does not renew it trying.
	if _, err := s.client(t, WithHolder("intruder")).Resume(ctx, id); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Resume by another holder = %v, want ErrNotHolder", err)
	}
	r, err := second.Resume(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Proto().GetRenewalCount(); n != 1 {
		t.Fatalf("renewal count %d after one Resume by the holder, want 1", n)
	}
	if r.ID() != id || r.Fence() != l.Fence() || !r.TrustedUntil().After(time.Now()) {
		t.Fatalf("resumed lease %s fence %d trusted %v", r.ID(), r.Fence(), r.TrustedUntil())
	}
	select {
	case <-r.Done():
		t.Fatalf("resumed lease lost: %v", r.Err())
	case <-time.After(6 * time.Second): // longer than the ttl: heartbeats keep it
	}
}

func TestIntegrationAcquireHeld(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c1 := s.client(t, WithHolder("w1"))
	c2 := s.client(t, WithHolder("w2"))
	ctx := ctxTimeout(t, 30*time.Second)
	l, err := c1.Acquire(ctx, "integration/held", TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.Acquire(ctx, "integration/held")
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("err = %v, want a HeldError", err)
	}
	if held.LeaseID != l.ID() || held.Holder != "w1" || held.Fence != l.Fence() || held.Remaining <= 20*time.Second || held.Mode != Exclusive {
		t.Errorf("HeldError = %+v", held)
	}
	if _, err := c2.Acquire(ctx, "integration/ttl", TTL(time.Hour)); !errors.Is(err, ErrTTLOutOfRange) {
		t.Errorf("ttl of an hour: %v, want ErrTTLOutOfRange", err)
	}
	// Waiting: granted when the holder releases.
	got := make(chan *Lease, 1)
	go func() {
		l2, err := c2.Acquire(ctx, "integration/held", Wait(10*time.Second), TTL(5*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	// Wait until the waiter is queued behind l.
	awaitWaiters(ctx, t, s.client(t, WithHolder("probe")), "integration/held", 1)
	if err := l.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got:
		if l2 == nil || l2.Fence() <= l.Fence() || l2.Holder() != "w2" {
			t.Fatalf("waited lease %+v", l2)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the released resource")
	}
}

func TestIntegrationGRPCProtocol(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithGRPC())
	ctx := ctxTimeout(t, 30*time.Second)
	l, err := c.Acquire(ctx, "integration/grpc", TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitRenewals(t, l, 3)
	if _, err := c.Acquire(ctx, "integration/grpc"); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("second acquire over gRPC: %v, want ErrLeaseHeld", err)
	}
	if err := l.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatal(err)
	}
}

// countingTransport counts the HTTP requests made per path.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

// TestIntegrationCallsSharePipeline: concurrent Acquire, Renew and Release
// calls of one Client travel over one LeaseService.Pipeline stream, with
// the same results and errors as unary calls; WithoutPipeline makes them
// unary.
func TestIntegrationCallsSharePipeline(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	ctx := ctxTimeout(t, 60*time.Second)
	const (
		pipePath    = "/tenure.v1.LeaseService/Pipeline"
		acquirePath = "/tenure.v1.LeaseService/Acquire"
		releasePath = "/tenure.v1.LeaseService/Release"
		renewPath   = "/tenure.v1.LeaseService/Renew"
	)
	run := func(t *testing.T, opts ...Option) *countingTransport {
		cfg := defaultConfig()
		ct := &countingTransport{next: newHTTPClient(&cfg).Transport, n: map[string]int{}}
		c := s.client(t, append(opts, WithHTTPClient(&http.Client{Transport: ct}), WithHolder(t.Name()))...)
		const callers, cycles = 16, 10
		var wg sync.WaitGroup
		for w := range callers {
			wg.Go(func() {
				for i := range cycles {
					res := fmt.Sprintf("%s/%d/%d", t.Name(), w, i)
					l, err := c.Acquire(ctx, res, TTL(30*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					// A second Acquire of the held resource is refused
					// with the holder's lease in the error.
					var held *HeldError
					if _, err := c.Acquire(ctx, res); !errors.As(err, &held) || held.LeaseID != l.ID() || held.Fence != l.Fence() {
						t.Errorf("acquiring a held resource: %v, want a HeldError naming %s", err, l.ID())
					}
					if err := l.Renew(ctx); err != nil {
						t.Error(err)
					}
					if err := l.Release(ctx, ReleaseCompleted); err != nil {
						t.Error(err)
					}
					if l.Err() != ErrReleased {
						t.Errorf("after release: %v", l.Err())
					}
				}
			})
		}
		wg.Wait()
		// A refusal for the lease itself: renewing a released lease.
		l, err := c.Acquire(ctx, t.Name()+"/last")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, ReleaseCompleted); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.renewOnce(ctx, l.ID(), false); !errors.Is(err, ErrLeaseTerminal) {
			t.Errorf("renewing a released lease: %v, want ErrLeaseTerminal", err)
		}
		return ct
	}
	t.Run("pipeline", func(t *testing.T) {
		ct := run(t)
		if n := ct.count(pipePath); n != 1 {
			t.Errorf("%d Pipeline streams, want 1", n)
		}
		for _, p := range []string{acquirePath, releasePath, renewPath} {
			if n := ct.count(p); n != 0 {
				t.Errorf("%d unary calls to %s, want none", n, p)
			}
		}
	})
	t.Run("unary", func(t *testing.T) {
		ct := run(t, WithoutPipeline())
		if n := ct.count(pipePath); n != 0 {
			t.Errorf("%d Pipeline streams WithoutPipeline, want none", n)
		}
		if n := ct.count(acquirePath); n != 16*10*2+1 {
			t.Errorf("%d unary Acquire calls, want %d", n, 16*10*2+1)
		}
	})
}

// TestIntegrationHTTP1ClientFallsBackToUnary: over an HTTP/1.1 client
// (WithHTTPClient) the Pipeline stream cannot open; calls go unary.
func TestIntegrationHTTP1ClientFallsBackToUnary(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c := s.client(t, WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
	l, err := c.Acquire(ctx, "integration/http1", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ep, _ := c.pick()
	ep.leasePipe.mu.Lock()
	off := ep.leasePipe.off
	ep.leasePipe.mu.Unlock()
	if !off {
		t.Error("the endpoint still counts as serving Pipeline over HTTP/1.1")
	}
	if _, err := c.Acquire(ctx, "integration/http1"); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("second acquire: %v, want ErrLeaseHeld", err)
	}
	if err := l.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationRWMutex(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c1 := s.client(t, WithHolder("reader-1"))
	c2 := s.client(t, WithHolder("writer"))
	ctx := ctxTimeout(t, 60*time.Second)
	m1 := NewRWMutex(c1, "integration/rw", TTL(5*time.Second))
	m2 := NewRWMutex(c2, "integration/rw", TTL(5*time.Second))

	// Readers share the lock, each with a lease and a fence of its own.
	r1, err := m1.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m1.TryRLock(ctx)
	if err != nil || r2 == nil {
		t.Fatalf("TryRLock beside a reader: %v, %v", r2, err)
	}
	if r1.Mode() != Shared || r2.Mode() != Shared || r1.ID() == r2.ID() || r1.Fence() == r2.Fence() {
		t.Fatalf("readers' leases: %s %v fence %d, %s %v fence %d", r1.ID(), r1.Mode(), r1.Fence(), r2.ID(), r2.Mode(), r2.Fence())
	}
	if ok, err := m2.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock while readers hold: %v, %v", ok, err)
	}

	// A writer waits for the readers, and readers that come after it wait
	// for it.
	locked := make(chan error, 1)
	go func() { locked <- m2.Lock(ctx) }()
	probe := s.client(t, WithHolder("probe"))
	awaitWaiters(ctx, t, probe, "integration/rw", 1)
	if r3, err := m1.TryRLock(ctx); r3 != nil || err != nil {
		t.Fatalf("TryRLock while a writer waits: %v, %v", r3, err)
	}
	if err := m1.RUnlock(ctx, r1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-locked:
		t.Fatalf("Lock returned (%v) while a reader still held", err)
	default:
	}
	if err := m1.RUnlock(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	w := m2.Lease()
	if w.Mode() != Exclusive || w.Fence() <= r2.Fence() {
		t.Fatalf("writer's lease %v fence %d after readers' %d", w.Mode(), w.Fence(), r2.Fence())
	}
	read := make(chan *Lease, 1)
	go func() {
		l, err := m1.RLock(ctx)
		if err != nil {
			t.Error(err)
		}
		read <- l
	}()
	awaitWaiters(ctx, t, probe, "integration/rw", 1)
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r4 := <-read
	if r4 == nil || r4.Fence() <= w.Fence() {
		t.Fatalf("reader after the writer: %v", r4)
	}
	// A reader's lease released behind the lock's back: RUnlock reports it.
	if err := r4.Release(ctx, ReleaseVoluntary); err != nil {
		t.Fatal(err)
	}
	if err := m1.RUnlock(ctx, r4); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("RUnlock of an ended lease: %v, want ErrLeaseLost", err)
	}
}

// awaitWaiters returns once at least n acquires wait on resource, which
// must be held meanwhile: probe's exclusive Acquire is refused with the
// number of waiters.
func awaitWaiters(ctx context.Context, t *testing.T, probe *Client, resource string, n int) {
	t.Helper()
	for {
		_, err := probe.Acquire(ctx, resource)
		var held *HeldError
		if errors.As(err, &held) && held.Waiters >= n {
			return
		}
		if !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("probe of %s: %v", resource, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("fewer than %d acquires ever waited on %s", n, resource)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// An unlock of a lock whose lease was revoked (or expired) before it, and
// before the client heard of it, reports the loss: the registrar answers
// the release "already terminal" with the state.
func TestIntegrationUnlockAfterUnseenRevoke(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithHolder("locker"))
	admin := s.client(t, WithHolder("admin"))
	ctx := ctxTimeout(t, 30*time.Second)
	m := NewRWMutex(c, "integration/revoked", TTL(30*time.Second))
	revoke := func(l *Lease) {
		t.Helper()
		if _, err := admin.Revoke(ctx, l.ID(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	revoke(r)
	if err := m.RUnlock(ctx, r); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("RUnlock after a revoke: %v, want ErrLeaseLost", err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	revoke(m.Lease())
	if err := m.Unlock(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Unlock after a revoke: %v, want ErrLeaseLost", err)
	}
	// A plain release of a live lock is still no error.
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// Watch from "now" pins now to the ledger index at once, even when the
// first endpoint hangs: asked in turn, the hung member held the question
// for seconds, and the events committed meanwhile were never delivered.
func TestIntegrationWatchNowPastAHungMember(t *testing.T) {
	s := startRealServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // accepts and never answers, as a stopped member
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); _, _ = io.Copy(io.Discard, conn) }()
		}
	}()
	live := s.client(t)
	if _, err := live.Acquire(ctxTimeout(t, 10*time.Second), "watch-now/before"); err != nil {
		t.Fatal(err)
	}
	st, err := live.Status(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New([]string{ln.Addr().String(), s.api})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// Well inside the ~4 s it takes to give up on the hung member.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if got, err := c.LedgerIndex(ctx); err != nil || got < st.GetLedgerIndex() || got == 0 {
		t.Fatalf("ledger index now %d, %v; want at least %d from the live member", got, err, st.GetLedgerIndex())
	}
}

// TestIntegrationDeadFirstEndpoint: with a dead member listed first, the
// pipelined calls (Acquire, Claim, Complete, RequestLeases, CompletePiece)
// go to the live one: their stream to the dead one never connected, so
// nothing was sent (they used to fail with OUTCOME_UNKNOWN).
func TestIntegrationDeadFirstEndpoint(t *testing.T) {
	s := startRealServer(t)
	c, err := New([]string{freePort(t), s.api})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	if _, err := c.Enqueue(ctx, "jobs", []NewTask{{Payload: []byte("a")}}); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	c2, err := New([]string{freePort(t), s.api}) // a fresh client: its first call is pipelined
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	tasks, err := c2.Claim(ctx, "jobs", ClaimOptions{Max: 1, LeaseTTL: 10 * time.Second})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("Claim through a dead first endpoint: %v %v", tasks, err)
	}
	if _, err := tasks[0].Complete(ctx, nil); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, _, err := c.CreatePool(ctx, "swarm"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Want(ctx, "swarm", 0, 8, AllPieces); err != nil {
		t.Fatal(err)
	}
	c3, err := New([]string{freePort(t), s.api})
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	got, err := c3.RequestLeases(ctx, "swarm", "p1", map[uint32]Bitset{0: FromRanges(Range{Start: 0, End: 8})}, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("RequestLeases through a dead first endpoint: %v %v", got, err)
	}
	c4, err := New([]string{freePort(t), s.api})
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if _, err := c4.CompletePiece(ctx, "swarm", "p1", got[0].File, got[0].Piece, PieceSuccess, 0); err != nil {
		t.Fatalf("CompletePiece through a dead first endpoint: %v", err)
	}
}

// TestObserveEndsWithTheClient: Observe's channel closes when its Client
// closes, not only when its ctx ends (it went on polling a closed client).
func TestObserveEndsWithTheClient(t *testing.T) {
	t.Parallel()
	s := startRealServer(t)
	c := s.client(t, WithHolder("observer"))
	ctx := ctxTimeout(t, 30*time.Second)
	observed := NewElection(c, "integration/observe-close", TTL(3*time.Second)).Observe(ctx)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case _, ok := <-observed:
			if !ok {
				return
			}
		case <-ctx.Done():
			t.Fatal("Observe's channel still open after Close")
		}
	}
}

// TestCloseLeavesNoConnection: Close of a Client whose Watch is running
// closes the Watch's connection too (it waits for the stream to end), so
// no HTTP/2 read loop lingers until the idle timeout. Not parallel: it
// counts the process's read loops.
func TestCloseLeavesNoConnection(t *testing.T) {
	s := startRealServer(t)
	readLoops := func() int {
		buf := make([]byte, 1<<22)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "http2clientConnReadLoop")
	}
	before := readLoops()
	c := s.client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	watching := make(chan error, 1)
	go func() {
		watching <- c.Watch(ctx, "integration/close", 0, func(*tenurev1.Event) error { return nil })
	}()
	waitFor(t, "the watch's connection", 10*time.Second, func() bool { return readLoops() > before })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-watching; !errors.Is(err, ErrClientClosed) {
		t.Fatalf("Watch = %v, want ErrClientClosed", err)
	}
	waitFor(t, "no read loop of the closed client", 5*time.Second, func() bool { return readLoops() <= before })
}
