package cluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// Config configures a node.
type Config struct {
	// DataDir holds the Raft log (wal/), snapshots, the node identity and
	// the durable ledger (ledger/).
	DataDir string
	// NodeID is the member id. Empty takes the id stored in DataDir, or
	// DefaultNodeID on first start; a different stored id is an error.
	NodeID string
	// RaftAddr is the Raft transport's listen address (host:port; port 0
	// picks one, see Node.RaftAddr).
	RaftAddr string
	// RaftListener, when set, is the Raft transport's listener (RaftAddr
	// is then ignored): tests bind every member's port before starting any.
	RaftListener net.Listener
	// RaftTLS, when set, makes the Raft transport mutual TLS 1.3: peers
	// without a certificate of the cluster CA are refused, and a leader
	// adds a member only after checking its certificate (AddVoter).
	RaftTLS *RaftTLS
	// APIAddr is this node's API address, published in replicated state
	// (SetMember) so that followers can forward to the leader.
	APIAddr string
	// Peers are the initial voters of a cluster started with --peers:
	// every initial member is given the same list, which must name this
	// node, and bootstraps that configuration on a fresh data dir (Raft
	// accepts the same bootstrap from every member). Empty: a one-node
	// cluster of this node.
	Peers []Peer
	// NoBootstrap starts Raft on a fresh data dir without bootstrapping
	// anything: the node waits to be added by a leader (--join).
	NoBootstrap bool
	// ForceNewCluster restarts an existing member as a one-member cluster
	// of itself, keeping its state: for a cluster that lost its quorum for
	// good (see forceNewCluster). It refuses while another member of the
	// old configuration answers on its Raft address.
	ForceNewCluster bool
	// LedgerSegmentSize is the size of one durable ledger file in
	// DataDir/ledger (zero: ledger.DefaultSegmentSize).
	LedgerSegmentSize int64
	// LedgerMaxBytes bounds the durable ledger files: as they rotate, the
	// oldest whole files are pruned past it (ledger.PruneToSize), leaving
	// a marker so that the rest still verifies. Zero keeps everything.
	LedgerMaxBytes int64
	// Machine configures the state machine.
	Machine statemachine.Config
	// PolicyDefaults, when set, is what the server-wide policy defaults
	// given at start (flags, TENURE_* variables, a policy file) do to a
	// policy. They are replicated state: the first leader bootstraps the
	// registrar with them, and a leader taking office whose replicated
	// defaults differ from what they make of them proposes the change.
	PolicyDefaults func(registrar.Policy) registrar.Policy
	// FeedSize is how many recent records Watch and History can reach.
	FeedSize int
	// EventScope, when set, names the namespace and resource a record
	// belongs to: the feed indexes its records by them (Feed.History).
	EventScope func(*logpb.Record) (ns, resource string)
	// MaxBatch bounds the commands proposed in one Raft log entry.
	MaxBatch int
	// MaxInflightEntries bounds the Raft entries proposed and not yet
	// written to the leader's log (with other voters) or not yet being
	// applied (a lone voter), for group commit: while that many are in
	// flight, arriving commands wait and then share the next entry, which
	// is written while the previous one commits and applies (entrySlots).
	// Zero: the default, 1, which measured best (one entry per fsync
	// carries every command that arrived during the last one; more in
	// flight splits them over entries).
	MaxInflightEntries int
	// ApplyTimeout bounds how long a proposal may wait to enter Raft.
	ApplyTimeout time.Duration
	// ClockHeartbeat bounds how far the replicated clock (the tick of the
	// last applied command) may lag the leader's while anything is due: the
	// leader proposes an Advance when no command has carried the clock for
	// this long. A successor continues from the last applied tick, so this
	// bounds how long before a failure registrar time stops, and so how
	// much a failover can add to a lease beyond the election (zero: the
	// default, 100 ms).
	ClockHeartbeat time.Duration
	// SignAfter bounds how long the ledger's last records wait for a
	// signed checkpoint: a checkpoint signs the chain head every
	// Machine.CheckpointEvery records, and the leader asks for one this
	// long after the first record it would leave unsigned (zero: the
	// default, 1 s).
	SignAfter time.Duration
	// HeartbeatTimeout and ElectionTimeout tune Raft (zero: Raft's defaults).
	HeartbeatTimeout, ElectionTimeout time.Duration
	// SnapshotThreshold is how many log entries trigger a snapshot (zero:
	// Raft's default, 8192).
	SnapshotThreshold uint64
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// RaftLogOutput receives hashicorp/raft's own logs (nil: discarded).
	RaftLogOutput io.Writer
	// Registerer receives the node's metrics; nil skips registration.
	Registerer prometheus.Registerer
	// TestWallOffset is a fault-injection hook (tenure server reads it
	// from TENURE_TEST_WALL_OFFSET): it is added to this node's wall
	// clock while it leads, as if the clock were off by that much.
	// Validity runs on registrar ticks, which the fault tests check; the
	// wall times stamped on commands (issued_at, expires_at, lease ids,
	// the queue's ready times) never run backwards: behind the last
	// stamped they slew back (term.wall). Zero in production.
	TestWallOffset time.Duration
}

// DefaultNodeID is the member id of a node started without one.
const DefaultNodeID = "node1"

// DefaultConfig returns the defaults of API.md's command line contract.
func DefaultConfig() Config {
	return Config{
		DataDir:            "./tenure-data",
		RaftAddr:           "127.0.0.1:7071",
		APIAddr:            "127.0.0.1:7070",
		Machine:            statemachine.DefaultConfig(),
		FeedSize:           DefaultFeedSize,
		MaxBatch:           1024,
		MaxInflightEntries: 1,
		ApplyTimeout:       5 * time.Second,
		ClockHeartbeat:     100 * time.Millisecond,
		SignAfter:          time.Second,
		LedgerMaxBytes:     DefaultLedgerMaxBytes,
	}
}

// DefaultLedgerMaxBytes is the ledger files' default budget (4 GiB: about
// 12 million records of ~350 bytes; a day and a half at 100 writes a
// second, three hours at 1,000, under an hour at full speed: every
// renewal is a record).
const DefaultLedgerMaxBytes = 4 << 30

// Validate reports the first unusable field, by name.
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("cluster: DataDir is required")
	case c.RaftAddr == "" && c.RaftListener == nil:
		return errors.New("cluster: RaftAddr is required")
	case len(c.Peers) > 0 && c.NoBootstrap:
		return errors.New("cluster: Peers and NoBootstrap (join) exclude each other")
	case c.LedgerMaxBytes < 0:
		return errors.New("cluster: LedgerMaxBytes must not be negative")
	case c.MaxBatch < 0:
		return errors.New("cluster: MaxBatch must not be negative")
	case c.MaxInflightEntries < 0:
		return errors.New("cluster: MaxInflightEntries must not be negative")
	case c.FeedSize < 0:
		return errors.New("cluster: FeedSize must not be negative")
	}
	return nil
}

// Peer is one initial voter: its member id and Raft address.
type Peer struct {
	ID, RaftAddr string
}

// ParsePeers parses API.md's --peers form, id=raftaddr,id=raftaddr,…
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q: want id=raftaddr", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %v", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("peer id %q listed twice", id)
		}
		seen[id] = true
		out = append(out, Peer{ID: id, RaftAddr: addr})
	}
	if len(out) == 0 {
		return nil, errors.New("no peers listed")
	}
	return out, nil
}
