package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/opstream"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
)

const benchHelp = `The built-in load generator: measure Tenure on your own hardware.

Workloads:
  cycle      acquire + release, each worker on its own resource (one op = one cycle)
  contended  --concurrency workers on --resources resources: acquire + release,
             failing with LEASE_HELD, or with --wait queueing for the lease
  renew      --leases held leases renewed by Renew calls of --batch leases each
             (each worker renews its share of the leases in turn); ops are
             renewals, latency is per call
  queue      a producer keeps a queue topped up (Enqueue of 500 tasks per call);
             --concurrency workers claim up to --batch tasks per Claim and
             run them one after another; ops are completed tasks (counted when
             the Complete is answered), latency is per round (a Claim and the
             completion of what it claimed). --complete async (the default)
             sends each Complete and goes on to the next task, at most --batch
             in flight per worker, as the Go client's Worker does; sync waits
             for each one
  pool       a pool of --files files of --pieces pieces, all wanted, and
             --concurrency peers, each having a random half of every file:
             each peer requests up to --batch pieces (default 4) sending its
             have-maps, completes what it was granted (SUCCESS) and asks
             again; ops are requests answered with pieces, latency is per
             round (a request and its completions). When a peer's pieces are
             all done, it moves on to a new set of files, added then
  keepalive  --leases leases kept alive by the Go client's batched KeepAlive
             stream (one client per 5,000 leases); reports the leases kept alive
             per second (leases / (ttl/3)) and the renewals confirmed per second

cycle, contended, renew, queue and pool send their operations over Pipeline
streams (operations from all workers batched into one message, results matched
by id), so that the measurement is not one HTTP/2 request per operation;
--unary sends one unary call per operation instead, for comparison. The
streams go to one member (the leader when the run starts) and do not move to
another if it goes away; measure a rolling restart or a failover with --unary,
whose calls go on through the other --endpoints.

It runs in the namespace "bench" unless --namespace (or TENURE_NAMESPACE)
names another, so that its events and ended leases do not crowd out those of
the namespaces in use. With authentication, a principal not allowed "bench"
runs in "default", else in the first namespace it names, else in "bench"
under the first prefix it may use ("team-*": team-bench).

Progress goes to stderr (a live line on a terminal), the result table (or
-o json) to stdout. Resources are named bench/<run id>/…; leases are released
at the end; the queue workload's queue, bench-<run id>, keeps its finished
tasks until they are pruned like any; the pool workload's pool, bench-<run
id>, stays until tenure pool delete removes it (its pieces count towards the
namespace's max_pool_pieces). Workers and peers hold as bench-<run id>-w<n>,
or, with credentials (--token, client certificate) on a server with
authentication, as the principal.`

const benchExamples = `  tenure bench --workload cycle --concurrency 64 --duration 10s
  tenure bench --workload contended --resources 4 --concurrency 32 --wait 5s
  tenure bench --workload renew --leases 1000 --unary
  tenure bench --workload renew --leases 10000 --concurrency 64 --batch 100
  tenure bench --workload queue --concurrency 64 --batch 8
  tenure bench --workload queue --concurrency 64 --batch 8 --complete sync
  tenure bench --workload pool --concurrency 64 --files 10 --pieces 10000
  tenure bench --workload keepalive --leases 10000 --ttl 10s --duration 30s -o json`

// benchConfig is what `tenure bench` was asked to do.
type benchConfig struct {
	workload    string
	concurrency int
	duration    time.Duration
	leases      int
	resources   int
	ttl         time.Duration
	wait        time.Duration
	unary       bool
	streams     int
	batch       int
	complete    string // queue: async or sync
	files       int    // pool: files per generation
	pieces      int    // pool: pieces per file
	prefix      string // bench/<run id>
	holder      string // holder prefix
	principal   string // with credentials: every worker holds as this principal
}

// transport names how the operations travel, for the result.
func (cfg benchConfig) transport() string {
	if cfg.unary {
		return "unary"
	}
	return "pipeline"
}

// holderOf names worker w's holder: its own, or with credentials the
// authenticated principal (a server with authentication refuses any
// other holder).
func (cfg benchConfig) holderOf(w int) string {
	if cfg.principal != "" {
		return cfg.principal
	}
	return fmt.Sprintf("%s-w%d", cfg.holder, w)
}

// benchResult is the outcome, printed as a table or JSON.
type benchResult struct {
	Workload    string           `json:"workload"`
	Transport   string           `json:"transport"`
	Concurrency int              `json:"concurrency"`
	Seconds     float64          `json:"seconds"`
	Ops         int64            `json:"ops"`
	OpsPerSec   float64          `json:"opsPerSecond"`
	Errors      map[string]int64 `json:"errors"`
	Latency     *benchLatency    `json:"latency,omitempty"`
	// keepalive only
	Leases          int     `json:"leases,omitempty"`
	LeasesAlive     int     `json:"leasesAlive,omitempty"`
	LeasesLost      int     `json:"leasesLost,omitempty"`
	KeptAlivePerSec float64 `json:"keptAlivePerSecond,omitempty"`
	// queue only
	Queue    string `json:"queue,omitempty"`
	Complete string `json:"complete,omitempty"`
	// pool only: the pool, and the pieces completed
	Pool         string  `json:"pool,omitempty"`
	Pieces       int64   `json:"piecesCompleted,omitempty"`
	PiecesPerSec float64 `json:"piecesPerSecond,omitempty"`
}

// benchLatency is in milliseconds.
type benchLatency struct {
	P50 float64 `json:"p50Ms"`
	P90 float64 `json:"p90Ms"`
	P99 float64 `json:"p99Ms"`
	Max float64 `json:"maxMs"`
}

// runBench is `tenure bench`.
// benchNamespace is where tenure bench runs unless told otherwise.
const benchNamespace = "bench"

// benchNamespaceFor picks where a principal of the namespace patterns
// given runs the bench when none is named: benchNamespace if they cover
// it, else the default namespace, else the first they name outright, else
// benchNamespace under the first prefix they allow ("team-*": team-bench).
func benchNamespaceFor(patterns []string) string {
	covers := func(ns string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool {
			prefix, wild := strings.CutSuffix(p, "*")
			return p == ns || wild && strings.HasPrefix(ns, prefix)
		})
	}
	for _, ns := range []string{benchNamespace, tenure.DefaultNamespace} {
		if covers(ns) {
			return ns
		}
	}
	for _, p := range patterns {
		if !strings.HasSuffix(p, "*") {
			return p
		}
	}
	for _, p := range patterns {
		return strings.TrimSuffix(p, "*") + benchNamespace
	}
	return benchNamespace
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure bench", "[flags]", benchHelp, benchExamples, stdout, stderr)
	var cfg benchConfig
	c.fs.StringVar(&cfg.workload, "workload", "cycle", "cycle, contended, renew, queue, pool or keepalive")
	c.fs.IntVar(&cfg.concurrency, "concurrency", 16, "concurrent workers (operations in flight)")
	c.fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to measure")
	c.fs.IntVar(&cfg.leases, "leases", 1000, "renew, keepalive: number of leases held")
	c.fs.IntVar(&cfg.resources, "resources", 4, "contended: number of resources")
	c.fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease ttl")
	c.fs.DurationVar(&cfg.wait, "wait", 0, "contended: queue up to this long instead of failing with LEASE_HELD")
	c.fs.BoolVar(&cfg.unary, "unary", false, "one unary call per operation instead of Pipeline streams")
	c.fs.IntVar(&cfg.streams, "streams", 1, "number of Pipeline streams")
	c.fs.IntVar(&cfg.batch, "batch", 0, "renew: leases renewed per Renew call; queue: tasks claimed per Claim call (default 1); pool: pieces per request (default 4)")
	c.fs.IntVar(&cfg.files, "files", 10, "pool: files wanted at a time")
	c.fs.IntVar(&cfg.pieces, "pieces", 10_000, "pool: pieces per file")
	c.fs.StringVar(&cfg.complete, "complete", "async", "queue: async (send each Complete and go on) or sync (wait for it)")
	if f := c.fs.Lookup("namespace"); f != nil && os.Getenv("TENURE_NAMESPACE") == "" {
		f.DefValue = benchNamespace // its own (below), as --help says
	}
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	ownNamespace := !c.given("namespace") && os.Getenv("TENURE_NAMESPACE") == ""
	if ownNamespace {
		// Its events, ended leases and queue stay out of the namespaces
		// in use (the in-memory history of "default" would hold nothing
		// else after a few seconds).
		c.namespace = benchNamespace
	}
	if !c.given("batch") {
		cfg.batch = 1
		if cfg.workload == "pool" {
			cfg.batch = 4 // the seed's leases per peer
		}
	}
	notPositive := ""
	for _, f := range []struct {
		name string
		bad  bool
	}{{"concurrency", cfg.concurrency < 1}, {"duration", cfg.duration <= 0}, {"leases", cfg.leases < 1}, {"resources", cfg.resources < 1},
		{"streams", cfg.streams < 1}, {"batch", cfg.batch < 1}, {"ttl", cfg.ttl <= 0}, {"files", cfg.files < 1}, {"pieces", cfg.pieces < 1}} {
		if f.bad && notPositive == "" {
			notPositive = f.name
		}
	}
	switch {
	case !slices.Contains([]string{"cycle", "contended", "renew", "queue", "pool", "keepalive"}, cfg.workload):
		return c.usageError("--workload must be cycle, contended, renew, queue, pool or keepalive, got %q", cfg.workload)
	case notPositive != "":
		return c.usageError("--%s must be positive, got %s", notPositive, c.fs.Lookup(notPositive).Value)
	case cfg.wait < 0:
		return c.notNegative("wait", cfg.wait)
	case cfg.workload == "renew" && cfg.batch > registrar.MaxBatchIDs:
		return c.usageError("--batch must be at most %d (a Renew call's limit), got %d", registrar.MaxBatchIDs, cfg.batch)
	case cfg.complete != "async" && cfg.complete != "sync":
		return c.usageError("--complete must be async or sync, got %q", cfg.complete)
	case cfg.workload == "queue" && cfg.batch > queue.MaxClaim:
		return c.usageError("--batch must be at most %d (a Claim call's limit), got %d", queue.MaxClaim, cfg.batch)
	case cfg.workload == "pool" && cfg.files > pool.MaxHaveMaps:
		return c.usageError("--files must be at most %d (the have-maps of one request), got %d", pool.MaxHaveMaps, cfg.files)
	case cfg.workload == "pool" && cfg.pieces > pool.MaxPiecesPerFile:
		return c.usageError("--pieces must be at most %d (a file's limit), got %d", pool.MaxPiecesPerFile, cfg.pieces)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	run := hex.EncodeToString(id[:])
	cfg.prefix, cfg.holder = "bench/"+run, "bench-"+run
	// First contact: no server (or credentials it refuses) is an error at
	// once, not a run of failed operations. With authentication on, the
	// workers hold as the principal.
	r, err := c.remote()
	if err != nil {
		return err
	}
	who, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.WhoAmI, &tenurev1.WhoAmIRequest{})
	if err != nil {
		return err
	}
	if who.GetAuthenticated() {
		cfg.principal = who.GetPrincipal()
		if ownNamespace {
			c.namespace = benchNamespaceFor(who.GetNamespaces())
			if r, err = c.remote(); err != nil { // routed by that namespace
				return err
			}
		}
	}
	// The workers' streams go to the first endpoint: make it the leader,
	// so that a dead endpoint first in the list, or a follower that would
	// forward every operation, is not what is measured.
	if st, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.Status, &tenurev1.StatusRequest{}); err == nil {
		c.pinEndpoints(leaderFirst(c.endpointList(), st.GetLeaderApiAddress()))
	}

	var res *benchResult
	switch cfg.workload {
	case "keepalive":
		res, err = benchKeepAlive(ctx, c, cfg)
	case "queue":
		res, err = benchQueue(ctx, c, cfg)
	case "pool":
		res, err = benchPool(ctx, c, cfg)
	default:
		res, err = benchOps(ctx, c, cfg)
	}
	if err != nil {
		return err
	}
	if c.json() {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		if _, err = fmt.Fprintf(stdout, "%s\n", b); err != nil {
			return err
		}
	} else if err := writeBench(stdout, res); err != nil {
		return err
	}
	if res.Ops == 0 && len(res.Errors) > 0 {
		return fmt.Errorf("no operation succeeded (errors: %s)", fmtReasons(res.Errors))
	}
	return nil
}

// leaderFirst returns the endpoint list (comma-separated) with the one
// that names the leader's API address first, if one does.
func leaderFirst(eps []string, leader string) string {
	for i, e := range eps {
		if leader != "" && endpointAddr(e) == leader {
			eps = append([]string{eps[i]}, slices.Delete(slices.Clone(eps), i, i+1)...)
			break
		}
	}
	return strings.Join(eps, ",")
}

// endpointAddr is an endpoint's host:port (without scheme and slash).
func endpointAddr(e string) string {
	if _, hostPort, ok := strings.Cut(e, "://"); ok {
		return strings.TrimRight(hostPort, "/")
	}
	return e
}

// fmtReasons lists error counts by reason, most frequent first.
func fmtReasons(m map[string]int64) string {
	rs := slices.Collect(maps.Keys(m))
	slices.SortFunc(rs, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s %d", r, m[r])
	}
	return strings.Join(parts, ", ")
}

// benchStats counts operations as they complete.
type benchStats struct {
	ops, errs atomic.Int64
	mu        sync.Mutex
	lat       []time.Duration
	reasons   map[string]int64
}

// failed counts a worker's failed operation in its reasons (unless ctx,
// the run's, has ended: the run's end cuts calls short) and, unless the
// registrar refused it, pauses the worker until runCtx ends or 50 ms
// pass: a server gone or a stream broken is retried gently, not in a busy
// loop (a queue run spun through millions of STREAM_CLOSED a minute).
func (s *benchStats) failed(ctx, runCtx context.Context, reasons map[string]int64, reason string, err error) {
	if ctx.Err() != nil {
		return
	}
	reasons[reason]++
	s.errs.Add(1)
	if err != nil && !refusal(err) {
		pause(runCtx, 50*time.Millisecond)
	}
}

func (s *benchStats) record(lat []time.Duration, reasons map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lat = append(s.lat, lat...)
	for r, n := range reasons {
		s.reasons[r] += n
	}
}

// benchOps runs cycle, contended or renew.
func benchOps(ctx context.Context, c *cliCommand, cfg benchConfig) (*benchResult, error) {
	r, err := c.remote()
	if err != nil {
		return nil, err
	}
	var ops benchTransport
	if cfg.unary {
		ops = &unaryOps{r: r}
	} else {
		// The streams outlive an interrupt (Ctrl-C ends ctx), so that the
		// leases held then are still released; Close ends them.
		p := newPipelineOps(context.WithoutCancel(ctx), r, cfg.streams)
		defer p.Close()
		ops = p
	}
	ttl := durationpb.New(cfg.ttl)

	// renew: acquire the leases first, spread over the workers.
	held := make([][]string, cfg.concurrency)
	if cfg.workload == "renew" {
		fmt.Fprintf(c.stderr, "acquiring %d leases…\n", cfg.leases)
		var wg sync.WaitGroup
		errs := make([]error, cfg.concurrency)
		for w := range cfg.concurrency {
			wg.Go(func() {
				for i := w; i < cfg.leases; i += cfg.concurrency {
					l, err := ops.acquire(ctx, &tenurev1.AcquireRequest{Namespace: c.namespace, Resource: fmt.Sprintf("%s/l%d", cfg.prefix, i), Holder: cfg.holderOf(w), Ttl: ttl})
					if err != nil {
						errs[w] = err
						return
					}
					held[w] = append(held[w], l.GetLeaseId())
				}
			})
		}
		wg.Wait()
		defer func() { // release them all
			var wg sync.WaitGroup
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for w, ids := range held {
				wg.Go(func() {
					for _, id := range ids {
						_ = ops.release(rctx, &tenurev1.ReleaseRequest{LeaseId: id, Holder: cfg.holderOf(w)})
					}
				})
			}
			wg.Wait()
		}()
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("%w (while acquiring the leases to renew)", err)
			}
		}
	}

	stats := &benchStats{reasons: make(map[string]int64)}
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	stopProgress := startProgress(c.stderr, func(elapsed time.Duration) string {
		n, e := stats.ops.Load(), stats.errs.Load()
		return fmt.Sprintf("%s %s: %d ops, %.0f ops/s, %d errors", cfg.workload, fmtDuration(elapsed), n, float64(n)/elapsed.Seconds(), e)
	})
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.concurrency {
		wg.Go(func() {
			holder := cfg.holderOf(w)
			// A lease acquired is released even when ctx ends meanwhile
			// (Ctrl-C), and an acquire sent is waited for (it may be
			// granted after ctx ended), unless it queues.
			releaseCtx, acquireCtx := context.WithoutCancel(ctx), context.WithoutCancel(ctx)
			if cfg.wait > 0 {
				acquireCtx = ctx
			}
			resource := fmt.Sprintf("%s/c%d", cfg.prefix, w)
			if cfg.workload == "contended" {
				resource = fmt.Sprintf("%s/r%d", cfg.prefix, w%cfg.resources)
			}
			var lat []time.Duration
			reasons := make(map[string]int64)
			fail := func(err error) { stats.failed(ctx, runCtx, reasons, benchReason(err), err) }
			for i := 0; runCtx.Err() == nil; i++ {
				t0 := time.Now()
				switch cfg.workload {
				case "renew":
					ids := held[w]
					if len(ids) == 0 {
						return
					}
					k := min(cfg.batch, len(ids))
					batch := make([]string, k)
					for j := range batch {
						batch[j] = ids[(i*k+j)%len(ids)]
					}
					res, err := ops.renew(ctx, &tenurev1.RenewRequest{LeaseIds: batch})
					if err != nil {
						fail(err)
						continue
					}
					// A batch answers per lease: count what was renewed.
					for _, f := range res.GetFailures() {
						fail(&opstream.OpError{PipelineError: &tenurev1.PipelineError{Reason: f.GetReason(), Message: f.GetMessage()}})
					}
					if len(res.GetLeases()) == 0 {
						continue
					}
					stats.ops.Add(int64(len(res.GetLeases()) - 1)) // one more below
				default: // cycle, contended
					req := &tenurev1.AcquireRequest{Namespace: c.namespace, Resource: resource, Holder: holder, Ttl: ttl}
					if cfg.wait > 0 {
						req.Wait = durationpb.New(cfg.wait)
					}
					l, err := ops.acquire(acquireCtx, req)
					if err != nil {
						fail(err)
						continue
					}
					if err := ops.release(releaseCtx, &tenurev1.ReleaseRequest{LeaseId: l.GetLeaseId(), Holder: holder}); err != nil {
						fail(err)
						continue
					}
				}
				lat = append(lat, time.Since(t0))
				stats.ops.Add(1)
			}
			stats.record(lat, reasons)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	n := stats.ops.Load()
	return &benchResult{
		Workload: cfg.workload, Transport: cfg.transport(), Concurrency: cfg.concurrency,
		Seconds: elapsed.Seconds(), Ops: n, OpsPerSec: float64(n) / elapsed.Seconds(),
		Errors: stats.reasons, Latency: percentiles(stats.lat),
	}, nil
}

// benchKeepAlive holds cfg.leases leases through Go clients' KeepAlive
// streams for the duration and counts the renewals they confirm.
func benchKeepAlive(ctx context.Context, c *cliCommand, cfg benchConfig) (*benchResult, error) {
	const perClient = 5000 // under the default quota of 10,000 per holder
	clients := make([]*tenure.Client, (cfg.leases+perClient-1)/perClient)
	for i := range clients {
		c.holder = fmt.Sprintf("%s-k%d", cfg.holder, i)
		if cfg.principal != "" {
			c.holder = cfg.principal
		}
		cl, err := c.client()
		if err != nil {
			return nil, err
		}
		defer cl.Close() // releases the leases
		clients[i] = cl
	}
	fmt.Fprintf(c.stderr, "acquiring %d leases with %d client(s)…\n", cfg.leases, len(clients))
	leases := make([]*tenure.Lease, cfg.leases)
	errs := make([]error, cfg.concurrency)
	var wg sync.WaitGroup
	for w := range cfg.concurrency {
		wg.Go(func() {
			for i := w; i < cfg.leases && errs[w] == nil; i += cfg.concurrency {
				leases[i], errs[w] = clients[i/perClient].Acquire(ctx, fmt.Sprintf("%s/k%d", cfg.prefix, i), tenure.TTL(cfg.ttl))
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%w (while acquiring the leases to keep alive)", err)
		}
	}
	renewals := func() (total int64, alive int) {
		for _, l := range leases {
			if l.Err() == nil {
				alive++
			}
			total += int64(l.Proto().GetRenewalCount())
		}
		return total, alive
	}
	base, _ := renewals()
	stopProgress := startProgress(c.stderr, func(elapsed time.Duration) string {
		n, alive := renewals()
		return fmt.Sprintf("keepalive %s: %d of %d leases alive, %d renewals confirmed, %.0f/s", fmtDuration(elapsed), alive, cfg.leases, n-base, float64(n-base)/elapsed.Seconds())
	})
	start := time.Now()
	t := time.NewTimer(cfg.duration)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	elapsed := time.Since(start)
	stopProgress()
	n, alive := renewals()
	res := &benchResult{
		Workload: "keepalive", Transport: "KeepAlive stream", Concurrency: len(clients),
		Seconds: elapsed.Seconds(), Ops: n - base, OpsPerSec: float64(n-base) / elapsed.Seconds(),
		Errors: map[string]int64{}, Leases: cfg.leases, LeasesAlive: alive, LeasesLost: cfg.leases - alive,
		KeptAlivePerSec: float64(alive) / (cfg.ttl.Seconds() / 3),
	}
	for _, l := range leases {
		if err := l.Err(); err != nil {
			res.Errors[benchReason(err)]++
		}
	}
	return res, nil
}

// startProgress reports progress on w until the returned stop is called: a
// line rewritten four times a second on a terminal, else a line every 2 s.
func startProgress(w io.Writer, line func(elapsed time.Duration) string) (stop func()) {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	every := 2 * time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	start := time.Now()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				if tty {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-tick.C:
				if tty {
					fmt.Fprintf(w, "\r\033[K%s", line(time.Since(start)))
				} else {
					fmt.Fprintln(w, line(time.Since(start)))
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func percentiles(lat []time.Duration) *benchLatency {
	if len(lat) == 0 {
		return nil
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(lat)-1))
		return float64(lat[i]) / float64(time.Millisecond)
	}
	return &benchLatency{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: at(1)}
}

// refusal reports whether err is the registrar refusing an operation
// (LEASE_HELD, QUOTA_EXCEEDED, …), not a transport's or a server's
// failure.
func refusal(err error) bool {
	reason := string(tenure.ReasonOf(err))
	var oe *opstream.OpError
	if errors.As(err, &oe) {
		reason = oe.Reason()
	}
	switch tenure.Reason(reason) {
	case "", tenure.ReasonUnavailable, tenure.ReasonOutcomeUnknown, tenure.ReasonNotLeader:
		return false
	}
	return true
}

// benchReason names an error for the error counts: its Tenure reason, else
// its Connect code, else "other".
func benchReason(err error) string {
	if r := tenure.ReasonOf(err); r != "" {
		return string(r)
	}
	var oe *opstream.OpError
	if errors.As(err, &oe) {
		return oe.Reason()
	}
	var se *opstream.StreamError
	if errors.As(err, &se) {
		return "STREAM_CLOSED" // the server went away or ended the stream (the transport's code says little)
	}
	if code := connect.CodeOf(err); code != connect.CodeUnknown {
		return strings.ToUpper(code.String())
	}
	return "other"
}

func writeBench(w io.Writer, r *benchResult) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "workload\t%s (%s)\n", r.Workload, r.Transport)
	if r.Workload == "keepalive" {
		fmt.Fprintf(tw, "clients\t%d\n", r.Concurrency)
	} else {
		fmt.Fprintf(tw, "concurrency\t%d\n", r.Concurrency)
	}
	fmt.Fprintf(tw, "duration\t%s\n", fmtDuration(time.Duration(r.Seconds*float64(time.Second))))
	if r.Queue != "" {
		fmt.Fprintf(tw, "queue\t%s\n", r.Queue)
	}
	if r.Pool != "" {
		fmt.Fprintf(tw, "pool\t%s\n", r.Pool)
	}
	if r.Workload == "keepalive" {
		fmt.Fprintf(tw, "leases\t%d (%d alive, %d lost)\n", r.Leases, r.LeasesAlive, r.LeasesLost)
		fmt.Fprintf(tw, "kept alive/s\t%.0f (leases / (ttl/3))\n", r.KeptAlivePerSec)
		fmt.Fprintf(tw, "renewals\t%d confirmed, %.0f/s\n", r.Ops, r.OpsPerSec)
	} else {
		fmt.Fprintf(tw, "ops\t%d\n", r.Ops)
		fmt.Fprintf(tw, "ops/s\t%.0f\n", r.OpsPerSec)
	}
	if r.Pool != "" {
		fmt.Fprintf(tw, "pieces\t%d completed, %.0f/s\n", r.Pieces, r.PiecesPerSec)
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(tw, "latency\tp50 %s  p90 %s  p99 %s  max %s\n", fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.Max))
	}
	if len(r.Errors) == 0 {
		fmt.Fprintf(tw, "errors\tnone\n")
	} else {
		reasons := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		for i, k := range reasons {
			label := ""
			if i == 0 {
				label = "errors"
			}
			fmt.Fprintf(tw, "%s\t%s %d\n", label, k, r.Errors[k])
		}
	}
	return tw.Flush()
}

func fmtMs(ms float64) string {
	if ms < 1 {
		return fmt.Sprintf("%.0fµs", ms*1000)
	}
	return fmt.Sprintf("%.2fms", ms)
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
