package ui_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/server"
)

// chromiumPath is Debian's chromium, which .ci/run installs; TENURE_CHROMIUM
// names another binary.
func chromiumPath() string {
	if p := os.Getenv("TENURE_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// env is a running server, API clients for it and a browser tab.
type env struct {
	cfg    server.Config
	srv    *server.Server
	base   string
	leases tenurev1connect.LeaseServiceClient
	queues tenurev1connect.QueueServiceClient
	pools  tenurev1connect.PoolServiceClient
	tab    context.Context
	shots  string
	// token is what metric sends when the server requires tokens.
	token string

	mu     sync.Mutex
	errors []string // uncaught exceptions in the page
}

func startServer(t *testing.T) *env {
	t.Helper()
	return startServerWith(t, nil)
}

// startServerWith is startServer with mod applied to the config first
// (e.g. to require authentication).
func startServerWith(t *testing.T, mod func(*server.Config)) *env {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Cluster = cluster.DefaultConfig()
	cfg.Cluster.DataDir = t.TempDir()
	cfg.Cluster.RaftAddr = "127.0.0.1:0"
	cfg.Cluster.HeartbeatTimeout = 50 * time.Millisecond
	cfg.Cluster.ElectionTimeout = 50 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	e := &env{cfg: cfg}
	e.start(t)
	t.Cleanup(func() { e.stop(t) })
	e.cfg.Listen = e.srv.Addr() // a restart comes back on the same address
	e.base = "http://" + e.srv.Addr()
	hc := &http.Client{Timeout: 2 * time.Minute}
	e.leases = tenurev1connect.NewLeaseServiceClient(hc, e.base)
	e.queues = tenurev1connect.NewQueueServiceClient(hc, e.base)
	e.pools = tenurev1connect.NewPoolServiceClient(hc, e.base)
	return e
}

// start starts the server on e.cfg and waits until it serves writes.
func (e *env) start(t *testing.T) {
	t.Helper()
	srv, err := server.Start(e.cfg)
	if err != nil {
		t.Fatalf("server.Start: %v", err)
	}
	e.srv = srv
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
}

// stop closes the server, if it runs.
func (e *env) stop(t *testing.T) {
	t.Helper()
	if e.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	e.srv = nil
}

// startBrowser opens one headless chromium tab for the whole test, at a
// laptop's 1366x768, and records uncaught page exceptions.
func (e *env) startBrowser(t *testing.T) {
	t.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("chromium not found at %s (apt-get install chromium, or set TENURE_CHROMIUM): %v", path, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.WindowSize(1366, 768),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1366, 768)); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	e.tab = tab
	e.recordExceptions()
	e.shots = os.Getenv("TENURE_ARTIFACTS")
	if e.shots == "" {
		e.shots = filepath.Join(os.TempDir(), "tenure-ui-artifacts")
	}
	if err := os.MkdirAll(e.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", e.shots)
}

// recordExceptions records the uncaught exceptions of e's tab (see
// pageErrors).
func (e *env) recordExceptions() {
	go func() {
		for m, err := range chromedp.Console(e.tab) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException {
				e.mu.Lock()
				e.errors = append(e.errors, fmt.Sprintf("%s (%s:%d)", m.Text, m.URL, m.Line))
				e.mu.Unlock()
			}
		}
	}()
}

// newTab opens another tab of e's browser, as a user opens one (the same
// profile: localStorage is shared), for e's server; it closes when the
// test ends.
func (e *env) newTab(t *testing.T) *env {
	t.Helper()
	tab, cancel := chromedp.NewContext(e.tab)
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1366, 768)); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	o := &env{cfg: e.cfg, srv: e.srv, base: e.base, leases: e.leases, queues: e.queues, pools: e.pools, tab: tab, shots: e.shots, token: e.token}
	o.recordExceptions()
	t.Cleanup(func() { o.pageErrors(t); cancel() })
	return o
}

// setHidden makes the page's document hidden (another tab in front, a
// minimised window) or visible again, as the browser tells a page:
// visibilityState and a visibilitychange event. (A headless browser's
// pages are always visible.)
func (e *env) setHidden(t *testing.T, hidden bool) {
	t.Helper()
	state := "visible"
	if hidden {
		state = "hidden"
	}
	e.step(t, "make the page "+state, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		Object.defineProperty(document, "visibilityState", { configurable: true, get: () => %q });
		Object.defineProperty(document, "hidden", { configurable: true, get: () => %t });
		document.dispatchEvent(new Event("visibilitychange"));
	})()`, state, hidden)))
}

// metric sums the samples of the server's /metrics series name whose
// labels include every one of labels ("k", "v", …); 0 when there is none.
func (e *env) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %v", resp.Status, err)
	}
	var sum float64
	for line := range strings.Lines(string(body)) {
		series, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && strings.Contains(series, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		if v, err := strconv.ParseFloat(value, 64); match && err == nil {
			sum += v
		}
	}
	return sum
}

// openWatches is how many Watch streams the server has open.
func (e *env) openWatches(t *testing.T) int {
	t.Helper()
	return int(e.metric(t, "tenure_rpc_streams_open", "procedure", "/tenure.v1.LeaseService/Watch"))
}

// pageErrors fails the test when the page threw.
func (e *env) pageErrors(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, msg := range e.errors {
		t.Errorf("uncaught exception in the dashboard: %s", msg)
	}
	e.errors = nil
}

// step runs browser actions with a bound, so a broken page fails the test
// instead of hanging it.
func (e *env) step(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// open navigates to a dashboard route (the part after #).
func (e *env) open(t *testing.T, route string) {
	t.Helper()
	e.step(t, "open "+route, chromedp.Navigate(e.base+"/ui/#"+route))
}

// waitJS waits until the expression is truthy in the page.
func (e *env) waitJS(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		page, _ := chromedp.Run(e.tab, chromedp.Evaluate[string](`document.querySelector("main")?.innerText ?? ""`))
		t.Fatalf("waiting for %s (%s): %v\npage text:\n%.2000s", what, expr, err, page)
	}
}

// eval returns the expression's value.
func eval[T any](t *testing.T, e *env, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the viewport as name.png in the artifacts dir and, with
// TENURE_UPDATE_SCREENSHOTS=1, in docs/screenshots for the README.
func (e *env) screenshot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{e.shots}
	if os.Getenv("TENURE_UPDATE_SCREENSHOTS") == "1" {
		dirs = append(dirs, filepath.Join("..", "..", "docs", "screenshots"))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// q quotes a string for a JS expression or a CSS attribute selector.
func q(s string) string { return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"` }

func (e *env) acquire(t *testing.T, resource, holder string, ttl time.Duration, mode tenurev1.Mode) *tenurev1.Lease {
	t.Helper()
	r, err := e.leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{
		Resource: resource, Holder: holder, Ttl: durationpb.New(ttl), Mode: mode}))
	if err != nil {
		t.Fatalf("Acquire %s: %v", resource, err)
	}
	return r.Msg.Lease
}

// listLeases answers what the dashboard's lease table should show.
func (e *env) listLeases(t *testing.T, req *tenurev1.ListRequest) []*tenurev1.Lease {
	t.Helper()
	req.PageSize = 1000
	r, err := e.leases.List(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return r.Msg.Leases
}

// startCluster starts n more servers as one cluster (bootstrapped with the
// same peer list) and returns them; they stop when the test ends.
func startCluster(t *testing.T, n int) []*server.Server {
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
	srvs := make([]*server.Server, n)
	for i, p := range peers {
		cfg := server.DefaultConfig()
		cfg.Listen = "127.0.0.1:0"
		cfg.Cluster = cluster.DefaultConfig()
		cfg.Cluster.DataDir = t.TempDir()
		cfg.Cluster.NodeID = p.ID
		cfg.Cluster.Peers = peers
		cfg.Cluster.RaftListener = lns[i]
		// Room for -race on two cores: a late heartbeat must not depose.
		cfg.Cluster.HeartbeatTimeout = 200 * time.Millisecond
		cfg.Cluster.ElectionTimeout = 200 * time.Millisecond
		srv, err := server.Start(cfg)
		if err != nil {
			t.Fatalf("Start %s: %v", p.ID, err)
		}
		srvs[i] = srv
		t.Cleanup(func() { stopServer(t, srvs, i) })
	}
	return srvs
}

// stopServer closes srvs[i] unless it is closed already.
func stopServer(t *testing.T, srvs []*server.Server, i int) {
	if srvs[i] == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srvs[i].Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	srvs[i] = nil
}
