package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// Node is one member of a Tenure cluster: Raft, its stores and transport,
// the FSM, the proposer and (while leader) the expirer.
type Node struct {
	cfg     Config
	log     *slog.Logger
	id      string
	lock    *os.File // the data dir's lock (lockDataDir), held while open
	logs    *writtenStore
	raft    *raft.Raft
	trans   *raft.NetworkTransport
	stream  *streamLayer
	fsm     *fsm
	feed    *Feed
	metrics *metrics
	// outcasts, after a --force-new-cluster, refuses the left-out members
	// until they are back (nil otherwise).
	outcasts *outcastFilter

	// leader is set while this node leads and has anchored its clock.
	leader atomic.Pointer[term]
	// knewLeader is set once this node has known a leader, itself included
	// (AwaitLeader).
	knewLeader atomic.Bool
	// noLeaderSince is, while this node knows no leader, since when (unix
	// ns; 0 while one is known).
	noLeaderSince atomic.Int64
	// policyApplied is set once this process has applied the policy
	// defaults given at its start (applyPolicyDefaults).
	policyApplied atomic.Bool
	// lastLeader is the id of the last leader this node knew (itself
	// included).
	lastLeader atomic.Pointer[string]
	// leaderSeen ends at the next change of leader this node observes
	// (LeaderChange).
	leaderSeen atomic.Pointer[leaderEpoch]

	// existing is whether the data dir held Raft state at Open.
	existing bool
	// reach tracks, while this node leads, the members it cannot reach.
	reach reach
	// calls is the transport Raft calls through.
	calls *leftOutWatch
	// rules is what this node stamps on commands while it leads in the
	// term it was set for (SetRules).
	rules atomic.Pointer[termRules]
	// silentAfter is how long a member may leave the leader's calls
	// unanswered before the leader calls it unreachable.
	silentAfter time.Duration

	in       chan *proposal
	inflight chan *inflight
	slots    *entrySlots // Raft entries proposed and not yet in the leader's log
	stop     chan struct{}
	raftDown chan struct{} // closed once Raft has shut down
	// failed is closed when the node stopped Raft on its own (failErr
	// says why): its state diverged from the cluster's.
	failed   chan struct{}
	failOnce sync.Once
	failErr  error
	wg       sync.WaitGroup
	closed   sync.Once
	closeErr error
}

// term is one leadership term of this node: its clock anchor and a context
// that ends when leadership does.
type term struct {
	start  time.Time
	base   registrar.Tick
	ctx    context.Context
	cancel context.CancelFunc

	// wallBase is the wall time (unix ms) the term's clock started from:
	// the leader's wall clock, or the latest wall time applied when that
	// is later. offset is Config.TestWallOffset. wallMu guards the last
	// wall time stamped (ns) and when (lastAt, monotonic).
	wallBase int64
	offset   time.Duration
	wallMu   sync.Mutex
	lastNs   int64
	lastAt   time.Time
}

// wallSlew is the rate at which the wall time stamped advances while it
// is ahead of the leader's clock: half speed, so that it meets the clock
// again after twice the difference, never running backwards.
const wallSlew = 2

// now is the leader's registrar time: the anchor plus monotonic time since
// it, rounded up to the next millisecond.
func (t *term) now() registrar.Tick {
	return t.base + registrar.Tick(registrar.Ms(time.Since(t.start)))
}

// passed is the last tick the term's clock has fully reached: now rounded
// down. A read at it calls a lease expired only once its deadline has
// truly passed.
func (t *term) passed() registrar.Tick {
	return t.base + registrar.Tick(time.Since(t.start)/time.Millisecond)
}

// maxSettle bounds settle's wait: ticks are stamped at most a millisecond
// ahead of the term's clock (now rounds up); one further ahead is not
// this term's to wait for.
const maxSettle = 5 * time.Millisecond

// settle waits until the term's clock has reached tick, or ctx ends.
//
// Commands are stamped with now, rounded up, so the last tick applied is
// often up to a millisecond ahead of the clock, and a read at it calls a
// lease expired whose deadline is that tick before the deadline has come
// (found from outside: a read spinning at a lease's end called it expired
// 0.15 ms before its ttl, counted from the client's send, had run). Reads
// and watched events wait for the clock to reach it. (The expirer proposes
// an expiry only once the clock has passed the deadline: expire.)
//
// It yields rather than sleeps: a timer of less than a millisecond takes
// more than one here (measured: 1.1 ms for 0.1 ms).
func (t *term) settle(ctx context.Context, tick registrar.Tick) {
	until := time.Duration(tick-t.base) * time.Millisecond
	if d := until - time.Since(t.start); d <= 0 || d > maxSettle {
		return
	}
	for time.Since(t.start) < until && ctx.Err() == nil {
		runtime.Gosched()
	}
}

// Settle waits, on the leader, until its clock has reached the latest tick
// applied (see term.settle): call it before showing what was applied to
// a caller by another path than Read (a watched event).
func (n *Node) Settle(ctx context.Context) {
	if t := n.leader.Load(); t != nil {
		t.settle(ctx, n.fsm.maxTick.load())
	}
}

// wall is the wall time (unix ms) to stamp on the next entry. It follows
// the leader's wall clock, but never runs backwards: when the clock is
// behind what was stamped before (stepped back, or this leader's clock is
// behind the last one's, whose wall times the term starts from), the
// stamps go on at half speed until the clock catches up. Wall times order
// the queue's tasks and time their delays and retries: running backwards
// reordered FIFO tasks and stalled retries by the difference, and staying
// ahead for good (one member's clock an hour ahead, once) made absolute
// times (a task's notBefore, a certificate's expiry) an hour off for good.
func (t *term) wall() int64 { return t.wallAt(time.Now()) }

func (t *term) wallAt(now time.Time) int64 {
	clock := now.Add(t.offset).UnixNano()
	t.wallMu.Lock()
	defer t.wallMu.Unlock()
	w := clock
	if t.lastAt.IsZero() {
		w = max(clock, t.wallBase*int64(time.Millisecond))
	} else if slewed := t.lastNs + int64(now.Sub(t.lastAt))/wallSlew; clock < slewed {
		w = slewed
	}
	t.lastNs, t.lastAt = max(w, t.lastNs), now
	return (t.lastNs + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

const nodeIDFile = "node-id"

// Open starts a node on cfg.DataDir. With an empty data dir it bootstraps
// a one-voter cluster of itself; otherwise it resumes from the directory.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	def := DefaultConfig()
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = def.MaxBatch
	}
	if cfg.MaxInflightEntries == 0 {
		cfg.MaxInflightEntries = def.MaxInflightEntries
	}
	if cfg.ApplyTimeout == 0 {
		cfg.ApplyTimeout = def.ApplyTimeout
	}
	if cfg.ClockHeartbeat <= 0 {
		cfg.ClockHeartbeat = def.ClockHeartbeat
	}
	if cfg.SignAfter <= 0 {
		cfg.SignAfter = def.SignAfter
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ForceNewCluster && !hasRaftFiles(cfg.DataDir) {
		// Refused before anything is written: a mistyped dir stays
		// untouched (and does not take this node id).
		return nil, fmt.Errorf("cluster: --force-new-cluster: %s holds no Raft state to go on from "+
			"(it restarts a member of a cluster that lost its quorum, from that member's data dir)", cfg.DataDir)
	}
	if err := privateDir(cfg.DataDir, log); err != nil {
		return nil, err
	}
	id, err := nodeID(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	raftOut := cfg.RaftLogOutput
	var raftErrs *raftErrors
	if raftOut == nil {
		// Raft's own chatter is left out, its errors are not: a follower
		// whose disk is full only ever said so there.
		raftErrs = newRaftErrors(log.With("node", id))
		raftOut = raftErrs
	}

	n := &Node{
		cfg:      cfg,
		log:      log.With("node", id),
		id:       id,
		feed:     NewFeed(cfg.FeedSize, cfg.EventScope),
		in:       make(chan *proposal, 4*cfg.MaxBatch),
		inflight: make(chan *inflight, 256),
		slots:    newEntrySlots(cfg.MaxInflightEntries),
		stop:     make(chan struct{}),
		raftDown: make(chan struct{}),
		failed:   make(chan struct{}),
	}
	n.leaderSeen.Store(newLeaderEpoch())
	n.noLeaderSince.Store(time.Now().UnixNano())
	if raftErrs != nil {
		raftErrs.knewLeader = n.knewLeader.Load
	}
	n.fsm = newFSM(cfg.Machine, n.feed)
	n.metrics = newMetrics(cfg.Registerer, n)
	n.fsm.observe = func(m *statemachine.Machine, cmd *logpb.Command, res statemachine.Result) {
		n.metrics.observe(m, cmd, res)
		if sp := cmd.GetSetPolicy(); sp != nil && sp.Namespace == registrar.DefaultsNamespace && res.Outcome.Err == nil {
			// The server-wide policy was set since this process started
			// (by an operator, or by this node's own defaults): the
			// defaults given at start are older, and never applied over it.
			n.policyApplied.Store(true)
		}
	}
	n.fsm.applying = n.slots.written
	n.fsm.onDiverged = n.diverged

	ok := false
	defer func() {
		if !ok {
			n.closeStores()
		}
	}()
	if n.lock, err = lockDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	// The ledger opens before Raft, which re-applies into it at start.
	if n.fsm.ledger, err = openLedger(cfg.DataDir, cfg.LedgerSegmentSize, cfg.LedgerMaxBytes, cfg.EventScope, n.log); err != nil {
		return nil, err
	}
	n.fsm.ledger.diverged = n.diverged
	n.fsm.ledger.startHealing(n.feed, ledgerHealEvery)
	// raft-wal appends each batch of entries to a segment file with one
	// fsync, about twice as fast here as BoltDB's two.
	walDir := filepath.Join(cfg.DataDir, "wal")
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: raft log dir: %w", err)
	}
	// Whether the log's index was there before the store opens it (and
	// creates it), for the error below.
	segs, _ := filepath.Glob(filepath.Join(walDir, "*.wal"))
	_, merr := os.Stat(filepath.Join(walDir, "wal-meta.db"))
	hadMeta := merr == nil
	walLog := hclog.New(&hclog.LoggerOptions{Name: "wal", Output: raftOut, Level: hclog.Info})
	n.logs, err = openWritten(func(meta *metadb.BoltMetaDB) (*wal.WAL, error) {
		return wal.Open(walDir, wal.WithMetaStore(meta), wal.WithLogger(walLog))
	}, n.log)
	if err == nil {
		n.logs.room = func() error { return freeSpace(walDir, 2*uint64(wal.DefaultSegmentSize)) }
	}
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.ENOSPC) {
			hint = fmt.Sprintf(" (the Raft log preallocates segments of %d MiB: a member needs at least %d MiB free for it, "+
				"besides its snapshots and ledger)", wal.DefaultSegmentSize>>20, 2*wal.DefaultSegmentSize>>20)
		}
		if len(segs) > 0 && (!hadMeta || strings.Contains(err.Error(), "file exists")) {
			hint = " (the log's index, wal-meta.db, is missing or out of step with its segments: restore the data dir from a " +
				"backup, or in a cluster remove this member, wipe its data dir and --join it again)"
		}
		return nil, fmt.Errorf("cluster: raft log store in %s: %w%s", walDir, err, hint)
	}
	// Snapshots hold the registrar's key seed: the store's own directory
	// would be 0755 and its files 0644.
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "snapshots"), 0o700); err != nil {
		return nil, fmt.Errorf("cluster: snapshot dir: %w", err)
	}
	removeTempSnapshots(filepath.Join(cfg.DataDir, "snapshots"), n.log)
	snaps, err := raft.NewFileSnapshotStore(cfg.DataDir, 2, raftOut)
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	var self *Peer
	for i := range cfg.Peers {
		if cfg.Peers[i].ID == id {
			self = &cfg.Peers[i]
		}
	}
	if len(cfg.Peers) > 0 && self == nil {
		return nil, fmt.Errorf("cluster: --peers does not list this node (%q)", id)
	}
	ln := cfg.RaftListener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return nil, fmt.Errorf("cluster: raft transport on %s: %w", cfg.RaftAddr, err)
		}
	}
	stream := &streamLayer{Listener: ln, advertise: ln.Addr()}
	if cfg.RaftTLS != nil {
		stream.tls = cfg.RaftTLS
		stream.startTLS(cfg.RaftTLS, n.log)
	}
	n.stream = stream
	if self != nil {
		// Members reach this node at the address the peer list gives.
		stream.advertise = peerAddr(self.RaftAddr)
	}
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 10 * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "raft-net", Output: raftOut, Level: hclog.DefaultLevel}),
		// No pipelined replication: hashicorp/raft 1.8's pipeline can
		// deadlock after a follower refuses an entry (its decoder stops
		// while the sender has one more to hand it), which stops
		// replication to that follower for good, heartbeats going on,
		// and hangs Raft's shutdown (found from outside: a member never
		// exited after SIGTERM, following partitions). Raft's own
		// measurements find pipelining of little use with batching.
		MaxRPCsInFlight: 1,
	})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: raftOut, Level: hclog.Info})
	rc.BatchApplyCh = true
	// A leader that removes itself steps down and keeps running Raft, as a
	// removed follower does, so that it can be added back (Raft's default
	// shut it down for good: re-added, it never caught up).
	rc.ShutdownOnRemove = false
	rc.MaxAppendEntries = 256
	if hb := cfg.HeartbeatTimeout; hb > 0 {
		rc.HeartbeatTimeout = hb
		rc.LeaderLeaseTimeout = leaderLease(hb, rc.LeaderLeaseTimeout)
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	n.silentAfter = silentAfter(rc.HeartbeatTimeout)
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	// Raft looks this often (jittered) for SnapshotThreshold new entries
	// to snapshot. Its default, 2 minutes, let a busy node gather ~100,000
	// entries, which a restart then replays (9 s measured after a minute of
	// full load); a snapshot is taken beside the applies, so looking
	// every 20 s costs little and bounds the replay to seconds.
	rc.SnapshotInterval = 20 * time.Second

	existing, err := raft.HasExistingState(n.logs, n.logs, snaps)
	if err != nil {
		return nil, fmt.Errorf("cluster: reading raft state: %w", err)
	}
	// A log that starts after entry 1 needs a snapshot of what came
	// before it (Raft panics without one).
	if first, err := n.logs.FirstIndex(); err == nil && first > 1 {
		if metas, err := snaps.List(); err == nil && len(metas) == 0 {
			return nil, fmt.Errorf("cluster: the Raft log in %s starts at entry %d and no snapshot in %s holds what came before it "+
				"(were the snapshots deleted?): restore the data dir from a backup, or in a cluster remove this member, wipe its "+
				"data dir and --join it again", walDir, first, filepath.Join(cfg.DataDir, "snapshots"))
		}
	}
	if last, err := n.logs.LastIndex(); err == nil {
		n.fsm.replayed = last // not counted again in the metrics
	}
	if cfg.ForceNewCluster { // before the log's guard against foreign history: it compacts the whole log
		if !existing {
			return nil, fmt.Errorf("cluster: --force-new-cluster: %s holds no Raft state to go on from "+
				"(it restarts a member of a cluster that lost its quorum, from that member's data dir)", cfg.DataDir)
		}
		if err := n.forceNewCluster(rc, snaps); err != nil {
			return nil, err
		}
	}
	n.logs.slots, n.logs.fromLog, n.logs.diverged = n.slots, &n.fsm.fromLog, n.diverged
	var trans raft.Transport = n.trans
	var fresh *freshVoter
	if !existing {
		fresh = newFreshVoter(n.trans, rc.LocalID, n.log)
		trans = fresh
	}
	var outcasts *outcastFilter
	if out, err := readOutcasts(cfg.DataDir); err != nil {
		return nil, err
	} else if existing && len(out) > 0 {
		outcasts = newOutcastFilter(n.trans, cfg.DataDir, out, n.log)
		trans = outcasts
	}
	if existing {
		if err := checkLeftOut(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	n.calls = newLeftOutWatch(trans, cfg.DataDir, n.diverged)
	n.raft, err = raft.NewRaft(rc, n.fsm, n.logs, n.logs, snaps, n.calls)
	if err != nil {
		if strings.Contains(err.Error(), "failed to load any existing snapshots") {
			return nil, fmt.Errorf("cluster: starting raft: %w: no snapshot in %s could be read (damaged or truncated; "+
				"the raft log's lines above say which). A snapshot moved aside lets the node start from the Raft log if that "+
				"log still holds everything after the snapshot before it; otherwise restore the data dir from a backup, "+
				"or in a cluster remove this member, wipe its data dir and --join it again",
				err, filepath.Join(cfg.DataDir, "snapshots"))
		}
		return nil, fmt.Errorf("cluster: starting raft: %w", err)
	}
	n.existing = existing
	if existing {
		n.checkOwnAddress()
		n.log.Info("resuming from the data dir", "dir", cfg.DataDir, "last_log_index", n.raft.LastIndex(),
			"applied_from_snapshot", n.raft.AppliedIndex())
	}
	if !existing && !cfg.NoBootstrap {
		servers := []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: n.trans.LocalAddr()}}
		if len(cfg.Peers) > 0 {
			servers = servers[:0]
			for _, p := range cfg.Peers {
				servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
			}
		}
		n.log.Info("bootstrapping the cluster", "raft_addr", n.trans.LocalAddr(), "voters", len(servers))
		f := n.raft.BootstrapCluster(raft.Configuration{Servers: servers})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			_ = n.raft.Shutdown().Error()
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}
	n.electIfAlone()
	ok = true
	if fresh != nil {
		n.wg.Go(func() { fresh.run(n.raft.AppliedIndex, n.stop) })
	}
	if outcasts != nil {
		n.outcasts = outcasts
		n.wg.Go(func() { outcasts.run(n.configIDs, n.stop) })
	}
	n.reach.since = map[string]time.Time{}
	n.reach.onLeader = func(id string) {
		n.leaderSeen.Swap(newLeaderEpoch()).cancel()
		if id == "" {
			n.noLeaderSince.CompareAndSwap(0, time.Now().UnixNano())
		} else {
			n.noLeaderSince.Store(0)
		}
		if id != "" {
			// Also when this node led and nobody asked it who leads: a
			// partitioned former leader must not wait for an election.
			n.knewLeader.Store(true)
			n.lastLeader.Store(&id)
		}
		if id == n.id && fresh != nil {
			// Elected, it holds what the cluster committed: it votes as ever.
			fresh.caughtUp.Store(true)
		}
		switch {
		case id == "" && !n.IsVoter():
			n.log.Warn("no leader known, and this member is not a voter of the cluster's configuration (removed?): " +
				"it hears of no new leader; stop it, or add it back (tenure cluster join)")
		case id == "":
			n.log.Info("no leader known: an election is under way, or this node is cut off")
		case id != n.id:
			n.log.Info("following", "leader", id)
		}
	}
	n.wg.Add(5)
	go func() {
		defer n.wg.Done()
		n.reach.observe(n.raft, n.stop)
	}()
	go func() { // Raft's own goroutine finds a divergence; Shutdown waits for it
		defer n.wg.Done()
		select {
		case <-n.stop:
		case <-n.failed:
			n.raft.Shutdown()
		}
	}()
	go n.watchLeadership()
	go n.propose()
	go n.complete()
	return n, nil
}

// leaderLease is how long a leader may go without hearing from a quorum
// before it steps down, given the heartbeat timeout hb and Raft's default
// lease def: half of hb from Raft's default timings up (a slow network
// wants both longer), at most hb below them (tests' fast timings).
func leaderLease(hb, def time.Duration) time.Duration {
	return max(min(def, hb), hb/2)
}

// electIfAlone has a node that is the only voter of its configuration
// stand for election now, not after Raft's heartbeat timeout (a random
// 1–2 s by default, which every restart of a single node spent
// unavailable): no other member can lead, nor be disrupted. Raft has no
// call for it; shortening the heartbeat timeout has its follower loop
// look for a leader at once, and a node that has heard from none since
// it started stands then. The timeout is set back straight after (the
// loop has been told). Where the timeout cannot be shortened (a lease
// timeout as long as it), the node waits as before.
func (n *Node) electIfAlone() {
	servers, err := n.configuration()
	if err != nil || len(servers) == 0 {
		return
	}
	for _, s := range servers {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(n.id) {
			return
		}
	}
	if !n.IsVoter() || n.raft.State() != raft.Follower {
		return
	}
	rc := n.raft.ReloadableConfig()
	hb := rc.HeartbeatTimeout
	rc.HeartbeatTimeout = hb - time.Millisecond
	if err := n.raft.ReloadConfig(rc); err != nil {
		return
	}
	rc.HeartbeatTimeout = hb
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("could not set Raft's heartbeat timeout back", "err", err)
	}
}

// nodeID resolves the member id against the one stored in dir.
func nodeID(dir, want string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		stored := strings.TrimSpace(string(b))
		if want != "" && want != stored {
			return "", fmt.Errorf("cluster: data dir %s belongs to node %q, not %q", dir, stored, want)
		}
		return stored, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("cluster: reading node id: %w", err)
	}
	if want == "" {
		if hasRaftFiles(dir) {
			// Taking the default id would make this member another one
			// (node1) with the Raft state of the one it was.
			return "", fmt.Errorf("cluster: data dir %s holds a member's Raft state but no %s file (deleted?): "+
				"start it with --node-id set to the id that member had (tenure cluster status lists the members)", dir, nodeIDFile)
		}
		want = DefaultNodeID
	}
	if err := registrar.CheckIdentifier("node_id", want, true); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(want+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("cluster: storing node id: %w", err)
	}
	return want, nil
}

// diverged stops the node for good: its log holds applied history the
// cluster's leader contradicts (writtenStore.DeleteRange).
func (n *Node) diverged(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		n.log.Error("stopping Raft: this node's state diverged from the cluster's", "err", err)
		close(n.failed)
	})
}

// Failed is closed when the node has stopped on its own; Err says why.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err is why the node stopped on its own (nil while it has not).
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}

// ID returns the member id.
func (n *Node) ID() string { return n.id }

// RaftAddr returns the Raft transport's bound address.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// Feed returns the in-memory ring of recent records.
func (n *Node) Feed() *Feed { return n.feed }

// FindInLedger searches this member's ledger files for records of
// resource (ns, res, as Config.EventScope names them) that the feed no
// longer holds: a resource's history within its retention.
func (n *Node) FindInLedger(ctx context.Context, ns, res string, q ledger.Query) (ledger.Found, error) {
	return n.fsm.ledger.find(ctx, ns, res, q)
}

// ReadLedger reads this member's ledger files in order (every segment),
// for a watch resumed from records the feed no longer holds. Reads take
// turns among themselves, not with FindInLedger's searches.
func (n *Node) ReadLedger(ctx context.Context, q ledger.Query) (ledger.Found, error) {
	return n.fsm.ledger.read(ctx, q)
}

// Close shuts the node down: Raft first (pending proposals answer
// OUTCOME_UNKNOWN), then the goroutines, the transport and the stores.
func (n *Node) Close() error {
	n.closed.Do(func() {
		close(n.stop)
		if t := n.leader.Swap(nil); t != nil {
			t.cancel()
		}
		err := n.shutdownRaft()
		close(n.raftDown)
		n.wg.Wait()
		n.closeErr = errors.Join(err, n.closeStores())
	})
	return n.closeErr
}

// raftShutdownGrace bounds each wait for Raft's shutdown in Close.
const raftShutdownGrace = 5 * time.Second

// shutdownRaft shuts Raft down and waits for it; when that takes longer
// than raftShutdownGrace (a replication goroutine stuck on a peer that
// does not answer), it closes the transport, which fails the transfers
// in progress, and waits once more before it gives up on Raft.
func (n *Node) shutdownRaft() error {
	done := make(chan error, 1)
	f := n.raft.Shutdown()
	go func() { done <- f.Error() }()
	wait := time.NewTimer(raftShutdownGrace)
	defer wait.Stop()
	select {
	case err := <-done:
		return err
	case <-wait.C:
	}
	n.log.Warn("raft has not shut down after " + raftShutdownGrace.String() + "; closing its transport")
	_ = n.trans.Close()
	wait.Reset(raftShutdownGrace)
	select {
	case err := <-done:
		return err
	case <-wait.C:
		return errors.New("cluster: raft did not shut down within " + (2 * raftShutdownGrace).String() + "; giving up on it")
	}
}

func (n *Node) closeStores() error {
	var errs []error
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.logs != nil {
		errs = append(errs, n.logs.close())
	}
	errs = append(errs, n.fsm.ledger.close())
	if n.lock != nil {
		errs = append(errs, n.lock.Close()) // releases the lock
	}
	return errors.Join(errs...)
}

// raftErrors passes the error lines of hashicorp/raft's logs (and its
// log store's and transport's), and its warnings of why leadership
// changes, on to the node's log, dropping the rest.
// A line repeated within raftErrorEvery is logged once, and again after
// it with how often it came meanwhile: a member cut off from the others
// has Raft say the same failed vote request to each of them twice a
// second for as long as the partition lasts.
type raftErrors struct {
	log *slog.Logger
	now func() time.Time // time.Now unless a test sets it
	// knewLeader, once set, reports whether the node has known a leader:
	// before that, the election every member starts with is routine.
	knewLeader func() bool

	mu   sync.Mutex
	seen map[string]*repeated
}

// repeated is an error line that was logged at, and came again n times
// since.
type repeated struct {
	at time.Time
	n  int
}

const (
	raftErrorEvery = 30 * time.Second
	// raftErrorLines bounds the distinct lines remembered; past it the
	// memory starts afresh.
	raftErrorLines = 256
)

func newRaftErrors(log *slog.Logger) *raftErrors {
	return &raftErrors{log: log, now: time.Now, seen: map[string]*repeated{}}
}

func (r *raftErrors) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		_, msg, ok := strings.Cut(line, "[ERROR] ")
		if !ok {
			_, msg, ok = strings.Cut(line, "[ERR] ") // the standard library logger's form
		}
		// A connection cut by this node's own shutdown is not an error
		// worth an operator's look.
		if ok && !strings.Contains(msg, "transport shutdown") {
			r.error(strings.TrimSpace(msg)) // "raft: …", "wal: …"
			continue
		}
		if _, msg, ok := strings.Cut(line, "[WARN] "); ok && leadershipWarning(msg) {
			r.error(strings.TrimSpace(msg))
		}
	}
	return len(p), nil
}

// leadershipWarning reports whether a warning line of Raft's says why
// leadership changes (a leader that hears from no quorum steps down, a
// follower that hears from no leader stands): without them a step-down
// had no cause in the log. Raft's warnings of each unreachable member
// (twice a second each) stay out.
func leadershipWarning(msg string) bool {
	for _, why := range []string{"failed to contact quorum of nodes, stepping down", "heartbeat timeout reached, starting election",
		"Election timeout reached, restarting election", "new leader elected, stepping down"} {
		if strings.Contains(msg, why) {
			return true
		}
	}
	return false
}

func (r *raftErrors) error(msg string) {
	r.mu.Lock()
	now := r.now()
	rep := r.seen[msg]
	if rep != nil && now.Sub(rep.at) < raftErrorEvery {
		rep.n++
		r.mu.Unlock()
		return
	}
	var again int
	if rep != nil {
		again = rep.n
	} else if len(r.seen) >= raftErrorLines {
		clear(r.seen)
	}
	r.seen[msg] = &repeated{at: now}
	r.mu.Unlock()
	level := slog.LevelError
	switch {
	case routineRaftError(msg):
		level = slog.LevelInfo
	case strings.Contains(msg, "heartbeat timeout reached, starting election") && r.knewLeader != nil && !r.knewLeader():
		level = slog.LevelInfo // the first election after a start
	case leadershipWarning(msg):
		level = slog.LevelWarn
	}
	if again > 0 {
		r.log.Log(context.Background(), level, msg, "repeated", again, "within", raftErrorEvery.String())
		return
	}
	r.log.Log(context.Background(), level, msg)
}

// routineRaftError reports whether an error line of Raft's is routine in
// a healthy cluster, logged at info level: a leader stepping down for a
// newer term, a peer hanging up a connection (a member restarting), and
// the entry a new member asks for while the leader sends it a snapshot.
func routineRaftError(msg string) bool {
	switch {
	case strings.Contains(msg, "peer has newer term, stopping replication"):
		return true
	case strings.Contains(msg, "failed to decode incoming command") &&
		(strings.Contains(msg, "connection reset by peer") || strings.Contains(msg, "EOF")):
		return true
	case strings.Contains(msg, "failed to get log") && strings.Contains(msg, "log not found"):
		return true
	}
	return false
}

// lockFile is the data dir's lock file; it holds the pid of its holder.
const lockFile = "LOCK"

// lockDataDir takes the data dir's lock, held until the returned file is
// closed (or the process ends): a second server started on the same data
// dir would otherwise block inside the Raft log store's own lock, with
// its listeners open and nothing said, after opening the ledger files the
// first one writes.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cluster: data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = "process " + pid
			}
			return nil, fmt.Errorf("cluster: the data dir %s is in use by another tenure server (%s); stop it first, or give this one another --data-dir", dir, holder)
		}
		return nil, fmt.Errorf("cluster: locking the data dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// watchLeadership anchors the clock when this node becomes leader and
// drops it when leadership ends.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	ch := n.raft.LeaderCh()
	for {
		select {
		case <-n.stop:
			return
		case isLeader := <-ch:
			n.metrics.leaderChanges.Inc()
			if old := n.leader.Swap(nil); old != nil {
				old.cancel()
			}
			if isLeader {
				n.wg.Add(1)
				go n.lead()
			} else {
				n.log.Info("lost leadership")
			}
		}
	}
}

// lead runs one leadership term: barrier, clock anchor, bootstrap of the
// registrar key (first leader only), then the expirer until the term ends.
// The term begins (IsLeader, Propose, linearizable reads) only after the
// registrar has its key: a lease granted before would carry an id without
// the key's tag, which no lookup resolves once the key is set.
func (n *Node) lead() {
	defer n.wg.Done()
	if err := n.await(n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		if err != errStopping {
			n.log.Warn("leadership barrier failed", "err", err)
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := n.fsm
	f.mu.RLock()
	base := max(f.maxTick.load(), f.m.Registrar().Tick())
	lastWall := max(f.maxWall.Load(), f.m.Registrar().Wall())
	bootstrapped := f.m.Bootstrapped()
	f.mu.RUnlock()
	// Everything up to the barrier is applied; the entries the FSM never
	// sees (no-ops, barriers) count as applied too.
	f.applied.Store(max(f.applied.Load(), n.raft.AppliedIndex()))
	start := time.Now()
	t := &term{start: start, base: base, ctx: ctx, cancel: cancel, offset: n.cfg.TestWallOffset,
		wallBase: max(start.Add(n.cfg.TestWallOffset).UnixMilli(), lastWall)}
	if n.raft.State() != raft.Leader {
		cancel()
		return
	}
	// Before anything is proposed: a log that lost history must not even
	// bootstrap a registrar anew.
	if err := n.checkHistory(); err != nil {
		n.diverged(err)
		cancel()
		return
	}
	if !bootstrapped {
		if err := n.bootstrapRegistrar(t); err != nil {
			n.log.Error("bootstrapping the registrar; this term serves nothing", "err", err)
			cancel()
			return
		}
		n.log.Info("registrar initialized")
	}
	if err := n.withdrawOrphanWaits(t); err != nil {
		n.log.Error("withdrawing the waits of earlier terms; this term serves nothing", "err", err)
		cancel()
		return
	}
	n.noteVoters()
	n.leader.Store(t)
	n.log.Info("leading", "tick", base)
	n.publishMembers(ctx)
	n.applyPolicyDefaults(ctx)
	n.expire(t)
}

// applyPolicyDefaults proposes the server-wide policy defaults given at
// start where the replicated ones differ (a member restarted with other
// flags, then elected), once per start: the first time this process
// leads, unless the server-wide policy was set since it started. Later
// terms leave the replicated policy as it is, so that a change of leader
// never undoes a `tenure policy set '*'` made since (nor flips it between
// members started with different flags).
func (n *Node) applyPolicyDefaults(ctx context.Context) {
	if n.cfg.PolicyDefaults == nil || n.policyApplied.Load() {
		return
	}
	n.fsm.mu.RLock()
	cur := n.fsm.m.Registrar().Defaults()
	n.fsm.mu.RUnlock()
	want := n.cfg.PolicyDefaults(cur)
	if want == cur {
		n.policyApplied.Store(true)
		return
	}
	res, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{
		Namespace: registrar.DefaultsNamespace, Policy: want.ProtoToSet()}}})
	if err == nil {
		err = res.Outcome.Err
	}
	if err != nil {
		n.log.Warn("applying the policy defaults given at start", "err", err)
		return
	}
	n.policyApplied.Store(true)
	n.fsm.mu.RLock()
	now := n.fsm.m.Registrar().Defaults()
	n.fsm.mu.RUnlock()
	if now != want {
		// A count set to 0 (unlimited) cannot undo a limit through a
		// policy update (0 leaves a field as it is).
		n.log.Warn("the policy defaults given at start could not all be applied", "not_applied", policyDiff(now, want))
		return
	}
	// A warning: it overrides what `tenure policy set '*'` may have set
	// since, which surprises whoever set it.
	n.log.Warn("applied the policy defaults given at start (flags, TENURE_* or --policy-file), replacing the replicated ones",
		"changed", policyDiff(cur, now))
}

// errStopping is await's answer when the node closes first.
var errStopping = errors.New("the node is shutting down")

// await waits for a Raft future, or for the node to close.
func (n *Node) await(f raft.Future) error { return awaitFuture(f, n.stop, errStopping) }

// awaitFuture waits for f, or until gone closes (then it answers
// f's error if f is already answered, else ifGone). A future still queued
// in Raft when Raft shuts down is never answered (hashicorp/raft#498):
// without this, Close hung waiting for it — seen in the fault tests on a
// node stopped right after its election, and in the dashboard's tests on
// a server closed right after a write. raft.Future has no channel, so a
// goroutine waits on it (one per Raft entry, not per command); it stays
// blocked only for a future Raft abandoned.
func awaitFuture(f raft.Future, gone <-chan struct{}, ifGone error) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-gone:
		select {
		case err := <-done:
			return err
		default:
			return ifGone
		}
	}
}

// checkHistory refuses a term whose state lacks history this node once
// applied: its ledger files recorded records up to some index, and the
// Raft log and snapshot it restarted from, now all applied (the term's
// barrier), derive fewer. The log lost entries that were acknowledged (a
// deleted, truncated or replaced wal directory), and serving would grant
// again what was granted, with lower fences. The ledger is synced first,
// so that every record replayed has been compared with the files
// (ledger.ErrOtherHistory stops the node).
func (n *Node) checkHistory() error {
	d := n.fsm.ledger
	if d == nil || d.lastAtOpen == 0 {
		return nil
	}
	_ = d.sync() // an error here is the disk's, logged by the ledger
	if err := n.Err(); err != nil {
		return err
	}
	n.fsm.mu.RLock()
	last := n.fsm.m.Chain().Next - 1
	n.fsm.mu.RUnlock()
	if last >= d.lastAtOpen {
		return nil
	}
	return fmt.Errorf("cluster: the Raft log and snapshot in %s derive the history up to record %d, but the ledger files in %s "+
		"hold records up to %d: entries that were applied and acknowledged are missing from the Raft log (was the wal directory "+
		"deleted, truncated or replaced?). Refusing to serve, so that nothing acknowledged is granted again: restore the data dir "+
		"from a backup, or in a cluster remove this member, wipe its data dir and --join it again",
		n.cfg.DataDir, last, d.dir, d.lastAtOpen)
}

// bootstrapRegistrar gives the registrar its key, straight through Raft:
// the proposer serves only a term that has begun, and nothing else may be
// proposed before this.
func (n *Node) bootstrapRegistrar(t *term) error {
	seed := make([]byte, 32)
	if _, err := rand.Read(seed); err != nil {
		return fmt.Errorf("drawing the key seed: %w", err)
	}
	boot := &logpb.Bootstrap{KeySeed: seed}
	if d := n.cfg.PolicyDefaults; d != nil {
		if p := d(registrar.DefaultPolicy()); p != registrar.DefaultPolicy() {
			boot.DefaultPolicy = p.Proto()
		}
	}
	res, err := n.applyBeforeTerm(t, []*logpb.Command{{Op: &logpb.Command_Bootstrap{Bootstrap: boot}}})
	if err != nil {
		return err
	}
	if err := res[0].Outcome.Err; err != nil && registrar.ReasonOf(err) != registrar.ReasonAlreadyBootstrapped {
		return err
	}
	return nil
}

// withdrawOrphanWaits ends the waits queued under earlier terms, before
// this term serves anything. Their callers waited on the member that led
// then: its Acquire handlers went with it (or, if it lives, answered
// OUTCOME_UNKNOWN when its leadership ended, see AwaitWaiter), and the
// callers have gone or asked again here. Left queued, each would be
// granted a lease nobody receives, holding its resource for a whole ttl
// and its place ahead of the callers' own retries. They are withdrawn
// latest first (Registrar.QueuedWaits), so that none is granted on the way.
func (n *Node) withdrawOrphanWaits(t *term) error {
	n.fsm.mu.RLock()
	waits := n.fsm.m.Registrar().QueuedWaits()
	n.fsm.mu.RUnlock()
	if len(waits) == 0 {
		return nil
	}
	const perEntry = 1024
	for chunk := range slices.Chunk(waits, perEntry) {
		cmds := make([]*logpb.Command, len(chunk))
		for i, w := range chunk {
			cmds[i] = &logpb.Command{Actor: w.Holder, Op: &logpb.Command_CancelWait{
				CancelWait: &logpb.CancelWait{WaiterId: w.ID, Holder: w.Holder}}}
		}
		res, err := n.applyBeforeTerm(t, cmds)
		if err != nil {
			return err
		}
		for i, r := range res {
			if r.Outcome.Err != nil {
				return fmt.Errorf("withdrawing waiter %d: %w", chunk[i].ID, r.Outcome.Err)
			}
		}
	}
	n.log.Info("withdrew the waits queued under an earlier term", "waits", len(waits))
	return nil
}

// applyBeforeTerm applies cmds as one Raft entry, stamped with t's base tick, before
// this term serves (the proposer serves only a term that has begun), and
// answers their results.
func (n *Node) applyBeforeTerm(t *term, cmds []*logpb.Command) ([]statemachine.Result, error) {
	wall := t.wall()
	for _, c := range cmds {
		c.Tick, c.Wall = int64(t.base), wall
	}
	data, err := proto.Marshal(n.fsm.batchOf(cmds, n.stampRules()))
	if err != nil {
		return nil, err
	}
	fut := n.raft.Apply(data, n.cfg.ApplyTimeout)
	if err := n.await(fut); err != nil {
		return nil, err
	}
	switch r := fut.Response().(type) {
	case error:
		return nil, r
	case []statemachine.Result:
		if len(r) == len(cmds) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("applying %d commands answered %T", len(cmds), fut.Response())
}

// publishMembers runs when this node takes office: it publishes its own
// addresses and forgets published members that are no longer in the Raft
// configuration (removed while their removal could not be published).
func (n *Node) publishMembers(ctx context.Context) {
	cmds := []*logpb.SetMember{{Id: n.id, ApiAddress: n.cfg.APIAddr, RaftAddress: n.RaftAddr()}}
	if cf := n.raft.GetConfiguration(); cf.Error() == nil {
		in := map[string]bool{}
		for _, s := range cf.Configuration().Servers {
			in[string(s.ID)] = true
		}
		for _, m := range n.Members() {
			if !in[m.ID] {
				cmds = append(cmds, &logpb.SetMember{Id: m.ID, Removed: true})
			}
		}
	}
	for _, c := range cmds {
		if err := n.proposeMember(ctx, c); err != nil {
			n.log.Warn("publishing a member", "member", c.Id, "removed", c.Removed, "err", err)
		}
	}
}

func (n *Node) proposeMember(ctx context.Context, c *logpb.SetMember) error {
	res, err := n.Propose(ctx, &logpb.Command{Op: &logpb.Command_SetMember{SetMember: c}})
	if err == nil {
		err = res.Outcome.Err
	}
	return err
}

// notLeader is the NOT_LEADER answer, naming the leader when known.
func (n *Node) notLeader() error {
	if err := n.Err(); err != nil {
		return &registrar.Error{Reason: registrar.ReasonUnavailable, Message: string(registrar.ReasonUnavailable) + ": " + err.Error()}
	}
	if err := n.LogFailure(); err != nil {
		return &registrar.Error{Reason: registrar.ReasonUnavailable, Metadata: map[string]string{"cause": "raft_log_write"},
			Message: string(registrar.ReasonUnavailable) + ": member " + n.id + " cannot write its Raft log (" + err.Error() +
				"), so it cannot lead or take writes; free space or fix the disk (it recovers by itself)"}
	}
	meta := n.leaderMeta()
	id := meta["leader_id"]
	msg := "this node is not the leader"
	switch {
	case id != "" && meta["leader"] != "":
		msg += fmt.Sprintf(" (leader %s at %s)", id, meta["leader"]) // its API address, where to retry
	case id != "":
		msg += fmt.Sprintf(" (leader %s, API address not published yet)", id)
	case !n.IsVoter():
		msg += ", knows no leader, and is not a voter of the cluster's configuration (removed, or not yet added)"
	default:
		msg += " and no leader is known"
	}
	return &registrar.Error{Reason: registrar.ReasonNotLeader, Message: string(registrar.ReasonNotLeader) + ": " + msg, Metadata: meta}
}

// leaderMeta is the error metadata naming the leader as this node knows
// it: leader_id, and leader, its API address (both empty when none is
// known; leader empty when its address is not published yet).
func (n *Node) leaderMeta() map[string]string {
	_, id := n.raft.LeaderWithID()
	meta := map[string]string{"leader_id": string(id), "leader": ""}
	if id == raft.ServerID(n.id) {
		meta["leader"] = n.cfg.APIAddr
	} else if id != "" {
		meta["leader"] = n.memberAPI(string(id))
	}
	return meta
}

// outcomeUnknown is the OUTCOME_UNKNOWN answer for a write whose fate
// this node cannot tell: why says what broke off, cause names it for
// machines (metadata cause), and the metadata names the leader as known
// now, where to ask what became of it.
func (n *Node) outcomeUnknown(cause, why string) error {
	meta := n.leaderMeta()
	meta["cause"] = cause
	return &registrar.Error{Reason: registrar.ReasonOutcomeUnknown, Metadata: meta,
		Message: string(registrar.ReasonOutcomeUnknown) + ": " + why + "; the write may or may not have been applied"}
}

// checkOwnAddress warns when the configuration this node restarted with
// lists it at another Raft address than the one it listens on now: the
// other members cannot reach it there, and it would campaign forever.
func (n *Node) checkOwnAddress() {
	servers, err := n.configuration()
	if err != nil {
		return
	}
	here := string(n.trans.LocalAddr())
	for _, s := range servers {
		if s.ID == raft.ServerID(n.id) && !sameAddress(string(s.Address), here) {
			n.log.Warn("the cluster knows this member at another Raft address: the others cannot reach it here; "+
				"start it with --raft-listen at that address, or remove it and add it back at the new one",
				"configured", string(s.Address), "listening", here)
		}
	}
}

// IsVoter reports whether this node is a voter in its latest Raft
// configuration (true when that cannot be read).
func (n *Node) IsVoter() bool {
	servers, err := n.configuration()
	if err != nil {
		return true
	}
	for _, s := range servers {
		if s.ID == raft.ServerID(n.id) {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}

// LeftOut reports whether member id was left out by --force-new-cluster
// and is not in the configuration again.
func (n *Node) LeftOut(id string) bool {
	return n.outcasts != nil && n.outcasts.listed(id) && !n.configIDs()[id]
}

// configIDs returns the ids in the latest Raft configuration (none when
// it cannot be read).
func (n *Node) configIDs() map[string]bool {
	servers, _ := n.configuration()
	ids := make(map[string]bool, len(servers))
	for _, s := range servers {
		ids[string(s.ID)] = true
	}
	return ids
}

// hasRaftFiles reports whether dir holds Raft log segments or snapshots.
func hasRaftFiles(dir string) bool {
	segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	return len(segs) > 0 || len(snaps) > 0
}

// leaderEpoch is the time between two changes of leader, as this node
// observes them: its context ends at the second.
type leaderEpoch struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newLeaderEpoch() *leaderEpoch {
	ctx, cancel := context.WithCancel(context.Background())
	return &leaderEpoch{ctx, cancel}
}

// LeaderChange returns a context that ends when this node next observes a
// change of leader (to another member, to itself, or to none: an election
// under way). Take it before reading Leader, so that no change after the
// read is missed.
func (n *Node) LeaderChange() context.Context { return n.leaderSeen.Load().ctx }

// IsLeader reports whether this node leads and serves writes.
func (n *Node) IsLeader() bool { return n.leader.Load() != nil }

// Ready reports whether this node can serve or route a request: it leads
// and its term has begun (everything before it applied, the registrar has
// its key, writes and linearizable reads are answered), or it follows a
// known leader and has applied everything committed (waiting a moment,
// within ctx, for what is being applied).
func (n *Node) Ready(ctx context.Context) bool {
	if n.Err() != nil {
		return false
	}
	addr, id := n.raft.LeaderWithID()
	if addr == "" {
		return false
	}
	if id == raft.ServerID(n.id) {
		// Raft names this node leader as soon as it wins the election, but
		// it serves only once lead's barrier is through; until then its
		// commit index still trails (0 after a restart), so the follower
		// check below would pass while every call answers NOT_LEADER.
		return n.IsLeader()
	}
	// Under writes a follower's commit index runs a moment ahead of what
	// it has applied: wait that moment (at most readyGrace) rather than
	// answer not ready now and then (5% of probes, measured from outside).
	ctx, cancel := context.WithTimeout(ctx, readyGrace)
	defer cancel()
	return n.waitApplied(ctx, n.raft.CommitIndex()) == nil
}

// readyGrace is how long Ready waits for a follower to apply what it
// knows is committed.
const readyGrace = 250 * time.Millisecond

// LeaderChanges counts the changes of leader this node has seen since it
// started, a follower included (a change to no leader counts too).
func (n *Node) LeaderChanges() uint64 { return n.reach.leaderChanges.Load() }

// LogFailure is the Raft log's last write error when it failed in the
// last 10 s and has not written since (a full or failing disk).
func (n *Node) LogFailure() error {
	if n.logs == nil {
		return nil
	}
	return n.logs.recentFailure(10 * time.Second)
}

// LedgerStopped reports whether the durable ledger stopped writing (a
// disk's error, logged): writes go on, but the ledger files miss what
// follows and snapshots are held back until the node restarts.
func (n *Node) LedgerStopped() bool {
	d := n.fsm.ledger
	return d != nil && d.failed.Load()
}

// LedgerNeedsRestart reports whether the stopped ledger can only be
// refilled by a restart (from the Raft log): it is not tried again, since
// the in-memory feed no longer reaches back to where its files end, or
// the error was not a disk's.
func (n *Node) LedgerNeedsRestart() bool {
	d := n.fsm.ledger
	return d != nil && d.failed.Load() && (!d.healable.Load() || d.stopHeal == nil)
}

// Applied is the index of the last log entry this node has applied.
func (n *Node) Applied() uint64 { return n.fsm.applied.Load() }

// Wall estimates the cluster's wall time now, in unix ms: the time the
// leader would stamp, as far as this node can tell (the latest applied
// wall time advanced by this node's monotonic clock).
func (n *Node) Wall() int64 { return n.fsm.wall() }

// streamLayer is Raft's TCP stream layer over a listener we own, so that
// the advertised address can be the one the peer list names (and tests
// can bind every member's port before starting any).
// With tls set (Config.RaftTLS), every connection is mutual TLS (tls.go).
type streamLayer struct {
	net.Listener
	advertise net.Addr
	tls       *RaftTLS
	accept    *tlsAccept
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) Accept() (net.Conn, error) {
	if s.accept != nil {
		return s.acceptTLS()
	}
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &probedConn{Conn: c}, nil
}

// probedConn answers the probe byte (streamLayer.probe: "is this a
// member's Raft port?", asked before a voter is added) when a connection
// starts with it, and is Raft's connection otherwise. The first byte is
// read on Raft's own goroutine for the connection, so a silent peer holds
// up nothing else.
type probedConn struct {
	net.Conn
	started bool
}

func (c *probedConn) Read(p []byte) (int, error) {
	if c.started || len(p) == 0 {
		return c.Conn.Read(p)
	}
	c.started = true
	n, err := c.Conn.Read(p[:1])
	if n == 1 && p[0] == probeByte {
		_, _ = c.Conn.Write([]byte{probeOK})
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	// A member listening on a specific IPv4 loopback address (127.0.0.2,
	// …) dials its peers from that address, so that several members on one
	// host can be told apart by source address: the fault harness
	// (internal/fault) cuts links between chosen pairs that way. Anywhere
	// else the kernel picks the source as usual.
	if a, ok := s.Listener.Addr().(*net.TCPAddr); ok && a.IP.To4() != nil && a.IP.IsLoopback() {
		d.LocalAddr = &net.TCPAddr{IP: a.IP}
	}
	conn, err := d.Dial("tcp", string(addr))
	if err != nil || s.tls == nil {
		return conn, err
	}
	return s.dialTLS(conn, timeout)
}

// peerAddr is a Raft address as given in the peer list.
type peerAddr string

func (a peerAddr) Network() string { return "tcp" }
func (a peerAddr) String() string  { return string(a) }

// privateDir creates the data directory, or takes an existing one, as
// accessible to this user only (0700): it holds the registrar's key seed
// (in snapshots and the log) and every namespace's state, and the files
// Raft and its log store write within are readable by anyone (0644).
func privateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cluster: data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cluster: data dir: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, perm&^0o077); err != nil {
			return fmt.Errorf("cluster: data dir %s is open to other users (%v) and cannot be closed: %w", dir, perm, err)
		}
		log.Warn("data dir was open to other users; now accessible to this user only", "dir", dir, "was", perm.String(), "now", (perm &^ 0o077).String())
	}
	return nil
}

// policyDiff names the fields of a that b changes, with b's values.
func policyDiff(a, b registrar.Policy) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	// The policy's int64 fields are durations in milliseconds.
	show := func(v reflect.Value) any {
		if v.Kind() == reflect.Int64 {
			return time.Duration(v.Int()) * time.Millisecond
		}
		return v.Interface()
	}
	var out []string
	for i := range va.NumField() {
		if va.Field(i).Interface() != vb.Field(i).Interface() {
			out = append(out, fmt.Sprintf("%s %v→%v", va.Type().Field(i).Name, show(va.Field(i)), show(vb.Field(i))))
		}
	}
	return strings.Join(out, ", ")
}

// freeSpace says whether dir's file system has at least need bytes free.
func freeSpace(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("%d bytes free in %s, %d needed", free, dir, need)
	}
	return nil
}

// removeTempSnapshots removes the snapshots that were being written when
// a node stopped (killed, or the disk full: Raft's file store leaves the
// directory of a snapshot it could not finish when it cannot flush it).
// Raft skips them and never removes them, and each can be as large as the
// state, taking the room a full disk was freed for. The data dir is locked:
// none is being written now.
func removeTempSnapshots(dir string, log *slog.Logger) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	for _, tmp := range tmps {
		if err := os.RemoveAll(tmp); err != nil {
			log.Warn("removing an unfinished snapshot", "dir", tmp, "err", err)
			continue
		}
		log.Info("removed an unfinished snapshot", "dir", tmp)
	}
}
