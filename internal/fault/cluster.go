package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// Cluster is a real cluster of `tenure server` processes on loopback. Each
// member has its own loopback IP (127.0.0.x), its API on that IP, its Raft
// listener on that IP and, at the Raft address the peer list names, a
// fault-injecting proxy that forwards to the Raft listener.
type Cluster struct {
	t       testing.TB
	bin     string
	Dir     string // members' data directories and logs
	Members []*Member
	http    *http.Client
	// Rec, when set, is written with the logs if the test fails.
	Rec      *Recorder
	reported bool // artifacts already written by Check
}

// Member is one `tenure server` process of a Cluster.
type Member struct {
	c        *Cluster
	ID       string
	IP       string
	API      string // host:port of the API
	raftReal string // the member's own Raft listener
	DataDir  string
	LogPath  string
	Env      []string // extra environment (KEY=VALUE) for the next start
	args     []string
	proxy    *proxy

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// freeAddr picks a free port on ip.
func freeAddr(t testing.TB, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("no free port on %s: %v", ip, err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// StartCluster starts n members bootstrapped together with --peers and
// waits until every one is ready (a leader is known). The processes are
// killed when the test ends.
func StartCluster(t testing.TB, bin string, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: bin, Dir: t.TempDir(), http: h2c()}
	// A random third octet keeps concurrent test binaries on this host
	// apart; every 127/8 address is loopback on Linux.
	octet := 20 + rand.IntN(200)
	var peers []string
	for i := range n {
		ip := fmt.Sprintf("127.0.%d.%d", octet, i+2)
		m := &Member{c: c, ID: fmt.Sprintf("n%d", i+1), IP: ip, API: freeAddr(t, ip), raftReal: freeAddr(t, ip)}
		m.DataDir = filepath.Join(c.Dir, m.ID)
		m.LogPath = filepath.Join(c.Dir, m.ID+".log")
		p, err := newProxy(ip+":0", m.raftReal)
		if err != nil {
			t.Fatalf("proxy for %s: %v", m.ID, err)
		}
		m.proxy = p
		peers = append(peers, m.ID+"="+p.addr())
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.args = []string{"server", "--data-dir", m.DataDir, "--listen", m.API, "--raft-listen", m.raftReal,
			"--node-id", m.ID, "--peers", strings.Join(peers, ",")}
	}
	t.Cleanup(c.stop)
	for _, m := range c.Members {
		m.Start()
	}
	for _, m := range c.Members {
		m.WaitReady(30 * time.Second)
	}
	return c
}

func (c *Cluster) stop() {
	for _, m := range c.Members {
		m.Kill()
		m.proxy.close()
	}
	if c.t.Failed() && !c.reported {
		dir := ArtifactsDir(c.t)
		rec := c.Rec
		if rec == nil {
			rec = NewRecorder()
		}
		WriteArtifacts(c.t, dir, rec, c, nil)
		c.t.Logf("artifacts (history.json, member logs) in %s", dir)
	}
}

// Endpoints returns every member's API address.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.API)
	}
	return out
}

// Member returns the member with the API address api, or nil.
func (c *Cluster) Member(api string) *Member {
	for _, m := range c.Members {
		if m.API == api {
			return m
		}
	}
	return nil
}

// Start starts the member's process on its data directory.
func (m *Member) Start() {
	t := m.c.t
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	log, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(log, "=== fault harness: starting %s at %s\n", m.ID, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(m.c.bin, m.args...)
	cmd.Env = append(os.Environ(), m.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("starting %s: %v", m.ID, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	m.cmd, m.exited, m.paused = cmd, exited, false
}

// Running reports whether the process runs (it may be paused).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Paused reports whether the member is stopped with SIGSTOP.
func (m *Member) Paused() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.paused }

// Kill kills the process with SIGKILL (kill -9) and waits for it to exit.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.paused = false
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Pause stops the process with SIGSTOP.
func (m *Member) Pause() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.cmd.Process.Signal(syscall.SIGSTOP) == nil {
		m.paused = true
	}
}

// Resume continues a paused process with SIGCONT.
func (m *Member) Resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.cmd.Process.Signal(syscall.SIGCONT) == nil {
		m.paused = false
	}
}

// Restart kills the process (if it runs) and starts it again on the same
// data directory.
func (m *Member) Restart() {
	m.Kill()
	m.Start()
}

// WaitReady waits until the member answers /readyz with 200 (it knows a
// leader and has applied what is committed).
func (m *Member) WaitReady(timeout time.Duration) {
	t := m.c.t
	t.Helper()
	waitFor(t, timeout, m.ID+" ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.API+"/readyz", nil)
		resp, err := m.c.http.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Status asks the member for its own view of the cluster.
func (m *Member) Status(ctx context.Context) (*tenurev1.StatusResponse, error) {
	cc := tenurev1connect.NewClusterServiceClient(m.c.http, "http://"+m.API, connect.WithGRPC())
	resp, err := cc.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// Leader returns the member that says it leads and that a majority of
// the members (itself included) name as leader, or nil.
func (c *Cluster) Leader() *Member {
	votes := map[string]int{}
	self := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range c.Members {
		if !m.Running() || m.Paused() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			st, err := m.Status(ctx)
			if err != nil || st.GetLeaderId() == "" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			votes[st.GetLeaderId()]++
			if st.GetLeaderId() == m.ID {
				self[m.ID] = true
			}
		}()
	}
	wg.Wait()
	for _, m := range c.Members {
		if self[m.ID] && votes[m.ID] > len(c.Members)/2 {
			return m
		}
	}
	return nil
}

// Other returns a member other than m (a follower, when m leads).
func (c *Cluster) Other(m *Member) *Member {
	for _, o := range c.Members {
		if o != m {
			return o
		}
	}
	return nil
}

// WaitLeader waits for a leader that is not among not, and returns it.
func (c *Cluster) WaitLeader(timeout time.Duration, not ...*Member) *Member {
	c.t.Helper()
	var l *Member
	waitFor(c.t, timeout, "a leader", func() bool {
		l = c.Leader()
		for _, n := range not {
			if l == n {
				return false
			}
		}
		return l != nil
	})
	return l
}

// Cut cuts the Raft links between a and b in both directions.
func (c *Cluster) Cut(a, b *Member) {
	b.proxy.block(a.IP)
	a.proxy.block(b.IP)
}

// Isolate cuts every Raft link of m.
func (c *Cluster) Isolate(m *Member) {
	for _, o := range c.Members {
		if o != m {
			c.Cut(m, o)
		}
	}
}

// Heal restores every Raft link.
func (c *Cluster) Heal() {
	for _, a := range c.Members {
		for _, b := range c.Members {
			a.proxy.unblock(b.IP)
		}
	}
}

// Logs returns the members' log files by member id.
func (c *Cluster) Logs() map[string]string {
	out := map[string]string{}
	for _, m := range c.Members {
		out[m.ID] = m.LogPath
	}
	return out
}

func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// waitFor polls cond every 20 ms until it holds, failing t after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// Retry runs call until it returns an error other than one that proves
// nothing happened (NOT_LEADER, UNAVAILABLE, a refused connection: a
// cluster between leaders), for at most timeout.
func Retry[T any](t testing.TB, timeout time.Duration, call func(ctx context.Context) (T, error)) (T, error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := call(ctx)
		cancel()
		if o, _ := classify(err); o != NoEffect || time.Now().After(deadline) {
			return v, err
		}
		<-tick.C
	}
}
