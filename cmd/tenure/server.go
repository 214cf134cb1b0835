package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/server"
)

// onServerReady, when set (tests), is told of the running server.
var onServerReady func(*server.Server)

// env returns the TENURE_<NAME> environment variable, or def.
func env(flagName, def string) string {
	if v, ok := os.LookupEnv("TENURE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))); ok {
		return v
	}
	return def
}

// runServer is `tenure server`: it runs a node until ctx ends (SIGINT or
// SIGTERM), then shuts down cleanly.
func runServer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("tenure server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", env("data-dir", "./tenure-data"), "Raft log, snapshots and node identity (env TENURE_DATA_DIR)")
	listen := fs.String("listen", env("listen", "127.0.0.1:7070"), "API, metrics and health address (env TENURE_LISTEN)")
	raftListen := fs.String("raft-listen", env("raft-listen", "127.0.0.1:7071"), "Raft transport address (env TENURE_RAFT_LISTEN)")
	nodeID := fs.String("node-id", env("node-id", ""), "member id; default node1, stored in the data dir after the first start (env TENURE_NODE_ID)")
	peers := fs.String("peers", env("peers", ""), "initial voters id=raftaddr,…, the same list on every initial member (env TENURE_PEERS)")
	join := fs.String("join", env("join", ""), "API address of any member of a cluster to join as a voter (env TENURE_JOIN)")
	insecure := fs.Bool("insecure", env("insecure", "") == "true", "allow a non-loopback --listen without authentication (env TENURE_INSECURE)")
	logLevel := fs.String("log-level", env("log-level", "info"), "debug, info, warn or error (env TENURE_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("tenure server takes no arguments, got %q", fs.Args())
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
		if _, _, err := net.SplitHostPort(*join); err != nil {
			return usagef("--join: %v", err)
		}
	}
	if len(peerList) > 0 && *nodeID == "" {
		return usagef("--peers needs --node-id: this member's id in the list")
	}
	if !*insecure && !loopback(*listen) {
		return usagef("--listen %s is not a loopback address; authentication is not available yet, so pass --insecure to serve it anyway", *listen)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level: %v", err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg := server.DefaultConfig()
	cfg.Listen = *listen
	cfg.Version = version
	cfg.Logger = log
	cfg.Cluster = cluster.DefaultConfig()
	cfg.Cluster.DataDir = *dataDir
	cfg.Cluster.RaftAddr = *raftListen
	cfg.Cluster.NodeID = *nodeID
	cfg.Cluster.Peers = peerList
	cfg.Join = *join
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
	srv, err := server.Start(cfg)
	if err != nil {
		return err
	}
	if onServerReady != nil {
		onServerReady(srv)
	}
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Close(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	log.Info("stopped")
	return nil
}

// loopback reports whether addr (host:port) only listens on loopback.
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
