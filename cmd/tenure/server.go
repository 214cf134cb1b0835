package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/server"
)

// onServerReady, when set (tests), is told of the running server.
var onServerReady func(*server.Server)

// env returns the TENURE_<NAME> environment variable, or def.
func env(flagName, def string) string {
	if v, ok := os.LookupEnv(envName(flagName)); ok {
		return v
	}
	return def
}

// otherEnv are the TENURE_* variables read elsewhere than by a server
// flag: by the CLI's client commands (which a server's environment often
// shares), by a command tenure exec runs, and by fault-injection tests.
var otherEnv = map[string]bool{
	"TENURE_ENDPOINTS": true, "TENURE_ROUTES": true, "TENURE_NAMESPACE": true, "TENURE_TOKEN": true,
	"TENURE_HOLDER": true, "TENURE_LEASE_ID": true, "TENURE_LEASE_FENCE": true, "TENURE_LEASE_RESOURCE": true,
	"TENURE_LEASE_HOLDER": true, "TENURE_TEST_WALL_OFFSET": true,
}

// unknownEnv lists the TENURE_* variables of environ that neither a
// flag of fs nor anything else of tenure reads (etcd warns of its own
// likewise): TENURE_MAXTTL=3m, meant for --max-ttl, was silently ignored.
func unknownEnv(fs *flag.FlagSet, environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "TENURE_") || otherEnv[name] {
			continue
		}
		flagName := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "TENURE_"), "_", "-"))
		if fs.Lookup(flagName) == nil {
			out = append(out, name)
		}
	}
	return out
}

// serverEnvNames are the TENURE_* variables of fs's flags.
func serverEnvNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, envName(f.Name)) })
	return names
}

// flagSource names where server flag name's value came from: the flag,
// or (not given on the command line) its TENURE_* variable.
func flagSource(fs *flag.FlagSet, name string) string {
	if _, set := os.LookupEnv(envName(name)); set && !given(fs, name) {
		return envName(name) + " (for --" + name + ")"
	}
	return "--" + name
}

// runServer is `tenure server`: it runs a node until ctx ends (SIGINT or
// SIGTERM), then shuts down cleanly.
func runServer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("tenure server", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; --help prints below
	dataDir := fs.String("data-dir", env("data-dir", "./tenure-data"), "Raft log, snapshots and node identity (env TENURE_DATA_DIR)")
	listen := fs.String("listen", env("listen", "127.0.0.1:7070"), "API, metrics and health address (env TENURE_LISTEN)")
	raftListen := fs.String("raft-listen", env("raft-listen", "127.0.0.1:7071"), "Raft transport address (env TENURE_RAFT_LISTEN)")
	nodeID := fs.String("node-id", env("node-id", ""), "member id; default node1, stored in the data dir after the first start (env TENURE_NODE_ID)")
	peers := fs.String("peers", env("peers", ""), "initial voters id=raftaddr,…, the same list on every initial member (env TENURE_PEERS)")
	join := fs.String("join", env("join", ""), "API address of any member of a cluster to join as a voter (env TENURE_JOIN)")
	forceEnv, forceErr := parseBool(env("force-new-cluster", ""))
	force := fs.Bool("force-new-cluster", forceEnv, "after a cluster lost its quorum for good: go on as a one-member cluster of this member, from its data dir; every other member must be stopped (env TENURE_FORCE_NEW_CLUSTER; once, then restart without it)")
	insecureEnv, insecureErr := parseBool(env("insecure", ""))
	insecure := fs.Bool("insecure", insecureEnv, "allow a non-loopback --listen without authentication (env TENURE_INSECURE: true, 1, …)")
	raftCert := fs.String("raft-tls-cert", env("raft-tls-cert", ""), "PEM certificate of this member for mutual TLS on the Raft transport; needs --raft-tls-key and --raft-tls-ca (env TENURE_RAFT_TLS_CERT)")
	raftKey := fs.String("raft-tls-key", env("raft-tls-key", ""), "PEM private key of --raft-tls-cert (env TENURE_RAFT_TLS_KEY)")
	raftCA := fs.String("raft-tls-ca", env("raft-tls-ca", ""), "PEM CA that every member's Raft certificate must chain to (env TENURE_RAFT_TLS_CA)")
	logLevel := fs.String("log-level", env("log-level", "info"), "debug, info, warn or error (env TENURE_LOG_LEVEL)")
	authFile := fs.String("auth-file", env("auth-file", ""), "JSON file of bearer tokens and principals; turns authentication on; re-read on SIGHUP (env TENURE_AUTH_FILE)")
	tlsCert := fs.String("tls-cert", env("tls-cert", ""), "PEM certificate of the API; serves TLS only; re-read on SIGHUP (env TENURE_TLS_CERT)")
	tlsKey := fs.String("tls-key", env("tls-key", ""), "PEM key of --tls-cert (env TENURE_TLS_KEY)")
	tlsClientCA := fs.String("tls-client-ca", env("tls-client-ca", ""), "PEM CA(s) of client certificates: require and verify one on every connection (env TENURE_TLS_CLIENT_CA)")
	tlsCA := fs.String("tls-ca", env("tls-ca", ""), "PEM CA(s) this member trusts when it calls other members over TLS (default: the system's, plus --tls-client-ca) (env TENURE_TLS_CA)")
	memberToken := fs.String("member-token", env("member-token", ""), "bearer token of an admin on namespace * this member presents to other members when joining or publishing its address (env TENURE_MEMBER_TOKEN)")
	rateLimit := fs.String("rate-limit", env("rate-limit", "0"), "requests per second per principal, for auth file entries without a rate; 0 = unlimited (env TENURE_RATE_LIMIT)")
	rateBurst := fs.String("rate-burst", env("rate-burst", "0"), "token bucket size of --rate-limit; 0 = the rate rounded up (env TENURE_RATE_BURST)")
	ledgerMax := fs.String("ledger-max-size", env("ledger-max-size", "4GiB"), "size budget of the ledger files in DATA-DIR/ledger: the oldest whole files are pruned past it (e.g. 500MB, 10GiB); 0 keeps everything (env TENURE_LEDGER_MAX_SIZE)")
	heartbeat := fs.String("raft-heartbeat-timeout", env("raft-heartbeat-timeout", "1s"), "how long a follower goes without hearing from the leader before it stands for election (a leader that hears from no quorum for half of it steps down); raise it, and --raft-election-timeout, on a slow or lossy network between members (e.g. 5s for round trips of ~500 ms); give every member the same (env TENURE_RAFT_HEARTBEAT_TIMEOUT)")
	election := fs.String("raft-election-timeout", env("raft-election-timeout", "1s"), "how long a candidate waits for votes before it stands again (env TENURE_RAFT_ELECTION_TIMEOUT)")
	policyFile := fs.String("policy-file", env("policy-file", ""), "JSON file of server-wide policy defaults by flag name (e.g. {\"max-ttl\": \"10m\", \"max-renewals\": 20}); the policy flags win over it (env TENURE_POLICY_FILE)")
	policy := addPolicyFlags(fs, true)
	fs.Usage = func() {} // a mistyped flag gets its error (and a suggestion), not every flag
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprintln(stderr, "usage: tenure server [flags]")
			printFlags(stderr, fs)
			return err
		}
		return usagef("%s (usage: tenure server --help)", explainFlagError(fs, err))
	}
	if fs.NArg() > 0 {
		return usagef("tenure server takes no arguments, got %q", fs.Args())
	}
	if insecureErr != nil && !given(fs, "insecure") {
		return usagef("TENURE_INSECURE=%q is not a boolean (true, false, 1, 0, yes, no, on, off)", os.Getenv("TENURE_INSECURE"))
	}
	if forceErr != nil && !given(fs, "force-new-cluster") {
		return usagef("TENURE_FORCE_NEW_CLUSTER=%q is not a boolean (true, false, 1, 0, yes, no, on, off)", os.Getenv("TENURE_FORCE_NEW_CLUSTER"))
	}
	if *force && (*peers != "" || *join != "") {
		return usagef("--force-new-cluster restarts an existing member alone: it takes neither --peers nor --join (nor TENURE_PEERS, TENURE_JOIN)")
	}
	var peerList []cluster.Peer
	if *peers != "" {
		var err error
		if peerList, err = cluster.ParsePeers(*peers); err != nil {
			return usagef("--peers: %v", err)
		}
	}
	if len(peerList) > 0 && *join != "" {
		return usagef("--peers and --join exclude each other: initial members bootstrap with --peers, later ones --join")
	}
	if *join != "" {
		switch {
		case sameTCPAddr(*join, *listen):
			return usagef("--join %s is this node's own --listen address: name the API address of a member of the cluster to join", *join)
		case sameTCPAddr(*join, *raftListen):
			return usagef("--join %s is this node's own --raft-listen address: name the API address (--listen) of a member of the cluster to join", *join)
		}
		if _, _, err := net.SplitHostPort(*join); err != nil {
			return usagef("--join: %v", err)
		}
	}
	if len(peerList) > 0 && *nodeID == "" {
		return usagef("--peers needs --node-id: this member's id in the list")
	}
	if len(peerList) > 0 && !slices.ContainsFunc(peerList, func(p cluster.Peer) bool { return p.ID == *nodeID }) {
		return usagef("--peers does not list this node (--node-id %s): every initial member is started with the same list, itself included", *nodeID)
	}
	if sameTCPAddr(*listen, *raftListen) {
		return usagef("--listen and --raft-listen are both %s: the API and Raft need a port each", *listen)
	}
	if *authFile == "" && !*insecure && !loopback(*listen) {
		return usagef("--listen %s is not a loopback address, and without --auth-file anyone who reaches it may acquire, "+
			"revoke and read every lease: give --auth-file (with --tls-cert/--tls-key), or --insecure to serve it without authentication anyway", *listen)
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together")
	}
	if *tlsCert == "" && (*tlsClientCA != "" || *tlsCA != "") {
		return usagef("--tls-client-ca and --tls-ca need --tls-cert and --tls-key")
	}
	raftTLS, err := loadRaftTLS(*raftCert, *raftKey, *raftCA)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("%s: %q is not a level: debug, info, warn or error", flagSource(fs, "log-level"), *logLevel)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	tuneGC(log)
	for _, name := range unknownEnv(fs, os.Environ()) {
		msg := "ignoring an environment variable no setting of tenure server reads: a misspelt one leaves its setting at the default"
		if s := suggestion(name, serverEnvNames(fs)); s != "" {
			log.Warn(msg, "variable", name, "did_you_mean", s)
		} else {
			log.Warn(msg, "variable", name)
		}
	}
	for _, p := range peerList {
		if p.ID == *nodeID && !sameTCPAddr(p.RaftAddr, *raftListen) {
			// Right behind a proxy or NAT; otherwise the others cannot
			// reach this node where it listens.
			log.Warn("--peers gives this node another Raft address than --raft-listen: the others reach it at the --peers one",
				"peers", p.RaftAddr, "raft_listen", *raftListen)
		}
	}

	cfg := server.DefaultConfig()
	cfg.Listen = *listen
	cfg.Version = version
	cfg.Logger = log
	cfg.Cluster = cluster.DefaultConfig()
	cfg.Cluster.DataDir = *dataDir
	cfg.Cluster.RaftAddr = *raftListen
	cfg.Cluster.NodeID = *nodeID
	cfg.Cluster.Peers = peerList
	cfg.Cluster.RaftTLS = raftTLS
	cfg.Cluster.ForceNewCluster = *force
	cfg.Join = *join
	for _, t := range []struct {
		flag  string
		value string
		to    *time.Duration
	}{{"raft-heartbeat-timeout", *heartbeat, &cfg.Cluster.HeartbeatTimeout}, {"raft-election-timeout", *election, &cfg.Cluster.ElectionTimeout}} {
		d, err := time.ParseDuration(t.value)
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return usagef("%s: %q is not a duration from 100ms to 1m", flagSource(fs, t.flag), t.value)
		}
		*t.to = d
	}
	if cfg.Cluster.LedgerMaxBytes, err = parseSize(*ledgerMax); err != nil {
		return usagef("%s: %v", flagSource(fs, "ledger-max-size"), err)
	}
	if cfg.Cluster.PolicyDefaults, err = policy.overlay(*policyFile, true); err != nil {
		return err
	}
	cfg.MemberToken = *memberToken
	var limits auth.Limits
	if limits.Rate, err = strconv.ParseFloat(*rateLimit, 64); err != nil {
		return usagef("%s: %q is not a number", flagSource(fs, "rate-limit"), *rateLimit)
	}
	if limits.Burst, err = strconv.Atoi(*rateBurst); err != nil {
		return usagef("%s: %q is not a whole number", flagSource(fs, "rate-burst"), *rateBurst)
	}
	if err := limits.Validate(); err != nil {
		return usagef("--%v", err)
	}
	if *authFile != "" {
		store, err := auth.Open(*authFile, limits)
		if err != nil {
			return usagef("--auth-file: %v", err)
		}
		cfg.Auth = store
	}
	if cfg.Auth != nil && *tlsCert == "" && !loopback(*listen) {
		log.Warn("authentication without TLS: bearer tokens cross the network in clear text; give --tls-cert and --tls-key")
	}
	if *raftCert == "" && !loopback(*raftListen) {
		log.Warn("the Raft transport listens beyond loopback without TLS: whoever reaches it can rewrite the state, "+
			"whatever the API's authentication; give --raft-tls-cert, --raft-tls-key and --raft-tls-ca (docs/security.md)",
			"raft_listen", *raftListen)
	}
	var kp *keyPair
	if *tlsCert != "" {
		if kp, err = loadKeyPair(*tlsCert, *tlsKey); err != nil {
			return usagef("%v", err)
		}
		if cfg.TLS, cfg.PeerTLS, err = apiTLS(kp, *tlsClientCA, *tlsCA); err != nil {
			return usagef("%v", err)
		}
	}
	// A fault-injection hook for the fault tests (internal/fault): an
	// offset added to this node's wall clock readings; lease validity must
	// not move with it. Not a flag: nobody should set it in production.
	if v := os.Getenv("TENURE_TEST_WALL_OFFSET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return usagef("TENURE_TEST_WALL_OFFSET: %v", err)
		}
		log.Warn("test hook: wall clock offset", "offset", d)
		cfg.Cluster.TestWallOffset = d
	}
	// Bound before anything is written to the data dir: a port in use
	// refuses the start without claiming the dir for this node id.
	if cfg.Cluster.RaftListener, err = net.Listen("tcp", *raftListen); err != nil {
		return fmt.Errorf("raft transport on %s: %w", *raftListen, err)
	}
	srv, err := server.StartContext(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil { // SIGTERM while joining
			log.Info("stopped before the node started", "err", err)
			return nil
		}
		return err
	}
	if onServerReady != nil {
		onServerReady(srv)
	}
	// SIGHUP re-reads the auth file and the TLS key pair; what fails to
	// load leaves what is in force in force.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if cfg.Auth != nil {
				_ = srv.ReloadAuth() // logs its outcome
			}
			if kp != nil {
				if err := kp.reload(); err != nil {
					log.Error("TLS key pair reload failed; keeping the one in force", "err", err)
				} else {
					log.Info("TLS key pair reloaded", "cert", *tlsCert)
				}
			}
		}
	}()
	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-srv.Node().Failed():
		failed = srv.Node().Err()
		log.Error("shutting down: the node stopped", "err", failed)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Close(sctx); err != nil {
		return errors.Join(failed, fmt.Errorf("shutting down: %w", err))
	}
	if failed != nil {
		return failed
	}
	log.Info("stopped")
	return nil
}

// parseSize reads a byte count: a whole number with an optional unit,
// B, kB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024).
func parseSize(v string) (int64, error) {
	num := strings.TrimRight(v, "BbKkMGTi ")
	unit := strings.TrimSpace(v[len(num):])
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if errors.Is(err, strconv.ErrRange) && n > 0 {
		return 0, fmt.Errorf("%q is too large", v)
	}
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (a whole number of bytes, or with a unit: 500MB, 4GiB)", v)
	}
	mult := map[string]int64{"": 1, "B": 1,
		"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("%q: unknown unit %q (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)", v, unit)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", v)
	}
	return n * mult, nil
}

// loadRaftTLS reads the Raft transport's mutual-TLS files: all three
// flags or none.
func loadRaftTLS(cert, key, ca string) (*cluster.RaftTLS, error) {
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	for _, f := range []struct{ name, v string }{{"--raft-tls-cert", cert}, {"--raft-tls-key", key}, {"--raft-tls-ca", ca}} {
		if f.v == "" {
			return nil, usagef("%s is missing: Raft TLS needs --raft-tls-cert, --raft-tls-key and --raft-tls-ca together", f.name)
		}
	}
	t, err := cluster.LoadRaftTLS(cert, key, ca)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return t, nil
}

// loopback reports whether addr (host:port) only listens on loopback.
// sameTCPAddr reports whether two host:port addresses name the same
// endpoint (resolving host names; false when either does not resolve, or
// names port 0: each such listener gets a port of its own).
func sameTCPAddr(a, b string) bool {
	ta, err1 := net.ResolveTCPAddr("tcp", a)
	tb, err2 := net.ResolveTCPAddr("tcp", b)
	return err1 == nil && err2 == nil && ta.Port != 0 && ta.Port == tb.Port && ta.IP.Equal(tb.IP)
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseBool reads a boolean environment value: strconv.ParseBool's forms,
// yes/no and on/off, any case; empty is false.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "no", "off":
		return false, nil
	case "yes", "on":
		return true, nil
	}
	return strconv.ParseBool(v)
}
