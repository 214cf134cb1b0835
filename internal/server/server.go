// Package server serves Tenure's API (API.md) over Connect: gRPC, gRPC-Web
// and Connect JSON on one port (h2c on loopback), plus /healthz, /readyz,
// /metrics and the dashboard at /ui/ (package ui). Handlers validate
// requests, convert them to logpb commands for the cluster package, and map
// every domain error through one table (errors.go) to a Connect code with a
// google.rpc.ErrorInfo detail.
//
// With Config.Auth set, every request but the health checks is
// authenticated (auth.go) and every RPC, stream message and pipelined
// operation is authorized by one table (access.go); see
// docs/security.md.
package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
	"github.com/tenurehq/tenure/internal/ui"
	"github.com/tenurehq/tenure/internal/wire"
)

// DefaultJoinTimeout bounds how long a joining node keeps asking.
const DefaultJoinTimeout = 60 * time.Second

// DefaultMaxRequestBytes bounds a request body (a guarded state blob is at
// most 64 KiB, so 1 MiB leaves room for any legitimate request).
const DefaultMaxRequestBytes = 1 << 20

// Config configures a server.
type Config struct {
	// Listen is the API address (host:port; port 0 picks one, see Addr).
	Listen string
	// Cluster configures the node; its APIAddr is filled from Listen.
	Cluster cluster.Config
	// MaxRequestBytes bounds request bodies (0: DefaultMaxRequestBytes).
	MaxRequestBytes int
	// Version is reported by Status.
	Version string
	// Join is the API address of a member of an existing cluster: a node
	// starting on a fresh data dir asks it (AddVoter, forwarded to the
	// leader) to add this node as a voter, retrying with backoff until
	// added or JoinTimeout passes. The node does not bootstrap.
	Join string
	// JoinTimeout bounds joining (0: DefaultJoinTimeout).
	JoinTimeout time.Duration
	// Logger receives structured logs (nil: discarded).
	Logger *slog.Logger

	// Auth, when set, turns authentication and authorization on: every
	// request but /healthz and /readyz needs a bearer token or a client
	// certificate of a principal of the store (docs/security.md). Nil:
	// no checks at all (for loopback and --insecure).
	Auth *auth.Store
	// TLS, when set, serves the API over TLS only (HTTP/2 and HTTP/1.1);
	// with ClientCAs and ClientAuth set, client certificates are checked
	// and a verified one authenticates its subject common name.
	TLS *tls.Config
	// PeerTLS is the client side of TLS for calls to other members
	// (forwarding to the leader, joining): the CAs to trust and, when the
	// members require client certificates, this member's certificate.
	// Needed when the members serve TLS.
	PeerTLS *tls.Config
	// MemberToken is the bearer token this member presents when it calls
	// another member on its own behalf (joining, publishing its address):
	// an admin token of the auth file. Requests forwarded for a caller
	// carry the caller's own Authorization header instead.
	MemberToken string
	// PingAfter and PingTimeout check an HTTP/2 connection that has been
	// silent for PingAfter with a PING, and close it when the answer
	// takes longer than PingTimeout (0: DefaultPingAfter,
	// DefaultPingTimeout): a client that is gone without closing its
	// connections (a stopped process, a machine cut off) no longer holds
	// its streams (KeepAlive, Watch, waiting acquires) open for good.
	PingAfter, PingTimeout time.Duration
	// WatchReadBytes bounds the ledger files a Watch behind the in-memory
	// feed reads at a time; between reads it sends what it found, and
	// each read after the first takes one request of the caller's rate
	// limit (0: DefaultWatchReadBytes).
	WatchReadBytes int64
}

// Defaults of Config.PingAfter, Config.PingTimeout and Config.WatchReadBytes.
const (
	DefaultPingAfter      = 30 * time.Second
	DefaultPingTimeout    = 15 * time.Second
	DefaultWatchReadBytes = 64 << 20
)

// DefaultConfig returns the defaults of API.md's command line contract.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:7070", Cluster: cluster.DefaultConfig(), Version: "dev"}
}

// Server is a running Tenure server: a cluster node and its API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	node    *cluster.Node
	reg     *prometheus.Registry
	metrics *metrics
	rpc     *rpcMetrics
	ln      net.Listener
	http    *http.Server
	served  chan error
	fwd     *forwardClients
	// catchUp tracks a following member's readiness (ready.go).
	catchUp catchUp
	bg      sync.WaitGroup
	// ctx ends when Close begins (background work).
	ctx    context.Context
	cancel context.CancelFunc
	// closing ends streams (Watch, KeepAlive) when the server shuts down.
	closing chan struct{}
	// watchers tells Watch streams which applied records they match.
	watchers *watchHub
	// ends tells KeepAlive streams when a lease they renew ends.
	ends *endHub
	// events renders each record once for all the Watch streams that
	// send it.
	events eventCache

	// reportRules, when set (tests), is the rules this member says it
	// applies, in place of statemachine.Rules.
	reportRules atomic.Uint32
	// reportLogFailure, when set (tests), is the log failure this member
	// says it has, in place of its node's.
	reportLogFailure atomic.Pointer[string]
	// reports are what the other members said when the leader last asked
	// them (rulesWatch): how far they applied, whether their log fails.
	reports memberReports
}

type metrics struct {
	rejections    *prometheus.CounterVec
	forwardErrors prometheus.Counter
}

// Start listens on cfg.Listen, opens the node and serves until Close.
func Start(cfg Config) (*Server, error) { return StartContext(context.Background(), cfg) }

// StartContext is Start with ctx bounding the start itself: a join that
// is still retrying when ctx ends (SIGTERM) gives up at once.
func StartContext(ctx context.Context, cfg Config) (*Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", cfg.Listen, err)
	}
	s := &Server{cfg: cfg, log: log, ln: ln, reg: prometheus.NewRegistry(), served: make(chan error, 1),
		closing: make(chan struct{}), fwd: newForwardClients(cfg.PeerTLS, cfg.MemberToken), watchers: newWatchHub(), ends: newEndHub()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.Auth != nil {
		s.warnAuth()
	}
	s.metrics = &metrics{rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_rejections_total", Help: "Requests answered with an error, by reason.",
	}, []string{"reason"}), forwardErrors: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenure_forward_errors_total", Help: "Calls forwarded to the leader that failed in transit.",
	})}
	s.reg.MustRegister(s.metrics.rejections, s.metrics.forwardErrors, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.rpc = newRPCMetrics(s.reg)

	cc := cfg.Cluster
	cc.APIAddr = ln.Addr().String()
	cc.Registerer = s.reg
	cc.EventScope = eventScope // History reads a resource's events by this index
	if cc.Logger == nil {
		cc.Logger = log
	}
	if cfg.Join != "" {
		if len(cc.Peers) > 0 {
			ln.Close()
			return nil, errors.New("server: --join and --peers exclude each other")
		}
		cc.NoBootstrap = true
	}
	s.node, err = cluster.Open(cc)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.node.Feed().Observe(func(recs []statemachine.Sealed) {
		s.watchers.observe(recs)
		s.ends.observe(recs)
	})

	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(cfg.MaxRequestBytes),
		connect.WithCodec(jsonCodec{}),
		connect.WithCodec(jsonUTF8Codec{}),
		connect.WithCodec(wire.Codec{}),
		// Compressing a few hundred bytes costs more CPU than it saves on
		// the wire (gzip was a fifth of the server's CPU for small calls).
		connect.WithCompressMinBytes(compressMinBytes),
		// Counted first, so that every answer is. Authorization next: a
		// follower refuses what the caller may not do before forwarding
		// it (the leader checks again).
		connect.WithInterceptors(s.rpc, streamInput{}, authInterceptor{s}, s.forwardInterceptor()),
	}
	mux := http.NewServeMux()
	leasePath, leaseHandler := tenurev1connect.NewLeaseServiceHandler(&leaseService{s: s}, opts...)
	mux.Handle(leasePath, leaseHandler)
	mux.Handle(tenurev1connect.LeaseServiceKeepAliveProcedure, s.endOnShutdown(bufferMessages(leaseHandler)))
	mux.Handle(tenurev1connect.LeaseServiceWatchProcedure, holdFlushes(s.ctx, leaseHandler))
	mux.Handle(tenurev1connect.NewClusterServiceHandler(&clusterService{s: s}, opts...))
	mux.Handle(tenurev1connect.NewQueueServiceHandler(&queueService{s: s}, opts...))
	mux.Handle(tenurev1connect.NewPoolServiceHandler(&poolService{s: s}, opts...))
	// A Pipeline message batches many small results; gzip on every one
	// of them was the largest single CPU cost of a busy stream (an eighth
	// of a busy queue's), for little gain on the networks a registrar
	// runs on. Still negotiated: only a message past
	// pipelineCompressMinBytes is compressed.
	popts := append(opts[:len(opts):len(opts)], connect.WithCompressMinBytes(pipelineCompressMinBytes))
	_, leasePipe := tenurev1connect.NewLeaseServiceHandler(&leaseService{s: s}, popts...)
	_, queuePipe := tenurev1connect.NewQueueServiceHandler(&queueService{s: s}, popts...)
	_, poolPipe := tenurev1connect.NewPoolServiceHandler(&poolService{s: s}, popts...)
	mux.Handle(tenurev1connect.LeaseServicePipelineProcedure, s.endOnShutdown(bufferMessages(leasePipe)))
	mux.Handle(tenurev1connect.QueueServicePipelineProcedure, s.endOnShutdown(bufferMessages(queuePipe)))
	mux.Handle(tenurev1connect.PoolServicePipelineProcedure, s.endOnShutdown(bufferMessages(poolPipe)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.node.LogFailure(); err != nil {
			http.Error(w, "not ready: this node cannot write its Raft log: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !s.node.Ready(r.Context()) {
			why := "no leader known or log not applied up to commit"
			if !s.node.IsVoter() {
				why = "this member is not a voter of the cluster's configuration (removed, or not yet added)"
			}
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		if s.node.LedgerStopped() {
			until := "until it writes again (tried every few seconds)"
			if s.node.LedgerNeedsRestart() {
				until = "until the node restarts, which refills them from the Raft log (the records since they stopped " +
					"are no longer in memory; free at least as much disk as the Raft log grew meanwhile)"
			}
			http.Error(w, "not ready: the ledger stopped writing (see the log; a full or failing disk?): writes go on, but the "+
				"ledger files miss them and snapshots are held back "+until, http.StatusServiceUnavailable)
			return
		}
		if !s.node.IsLeader() {
			if ok, why := s.caughtUp(r.Context()); !ok {
				http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.Handle("GET "+ui.Prefix, ui.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(ui.Prefix, http.StatusFound))

	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if cfg.TLS != nil {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	s.http = &http.Server{
		Handler:           s.authenticate(limitBody(checkBody(mux, int64(cfg.MaxRequestBytes)), int64(cfg.MaxRequestBytes))),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: cmp.Or(cfg.PingAfter, DefaultPingAfter),
			PingTimeout:     cmp.Or(cfg.PingTimeout, DefaultPingTimeout),
		},
	}
	if cfg.TLS != nil {
		s.http.TLSConfig = cfg.TLS.Clone()
		go func() { s.served <- s.http.ServeTLS(ln, "", "") }()
	} else {
		go func() { s.served <- s.http.Serve(bufferedListener{ln}) }()
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	dataDir := cc.DataDir
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	log.Info("serving", "listen", ln.Addr().String(), "raft", s.node.RaftAddr(), "node", s.node.ID(), "data_dir", dataDir,
		"dashboard", scheme+ln.Addr().String()+ui.Prefix,
		"tls", cfg.TLS != nil, "client_certificates", cfg.TLS != nil && cfg.TLS.ClientCAs != nil, "auth", cfg.Auth != nil)
	if len(cc.Peers) > 0 && s.node.HadState() && !samePeers(s.node, cc.Peers) {
		log.Warn("--peers ignored: the data dir already holds this node's Raft state, whose configuration decides the members "+
			"(and differs from --peers); change members with tenure cluster join/remove", "data_dir", cc.DataDir)
	}
	if cfg.Join != "" && s.node.HadState() {
		log.Warn("--join ignored: the data dir already holds this node's Raft state, and it resumes the cluster it belongs to; "+
			"to join another cluster, start it on an empty data dir", "join", cfg.Join, "data_dir", cc.DataDir)
	}
	if cfg.Join != "" && !s.node.HadState() {
		if err := s.join(ctx, cfg.Join); err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return nil, errors.Join(err, s.Close(cctx))
		}
	}
	s.bg.Add(2)
	go s.publishSelf()
	go s.rulesWatch()
	return s, nil
}

// Addr returns the API's bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Node returns the cluster node.
func (s *Server) Node() *cluster.Node { return s.node }

// WaitReady blocks until the node leads with an initialized registrar,
// and has set the rules it stamps in its term (until then it stamps the
// floor, statemachine.UnreportedRules: the first commands of a leader
// elected a moment ago would apply older rules). A single node gets
// there on its own; a follower never does (use /readyz).
func (s *Server) WaitReady(ctx context.Context) error {
	if err := s.node.WaitLeader(ctx); err != nil {
		return err
	}
	s.node.AwaitRules(ctx, 2*rulesEvery)
	return ctx.Err()
}

// Close hands leadership to another voter if this member leads, ends
// its streams, stops accepting requests, lets unary calls finish until ctx
// ends (then cuts them), and shuts the node down.
//
// The hand-over comes first: a leader that drained its connections first
// would stay leader while serving nothing, and the cluster could not
// write until it was gone and an election timeout had passed (13 s behind
// one idle KeepAlive stream, before streams ended on shutdown).
func (s *Server) Close(ctx context.Context) error {
	if s.node.IsLeader() {
		switch err := s.node.TransferLeadership(""); {
		case err == nil:
			if to := s.node.NextLeader(ctx); to != "" {
				s.log.Info("handed leadership over before shutting down", "to", to)
			} else {
				s.log.Warn("stepped down before shutting down, but no other member took the leadership yet (the others unreachable?)")
			}
		case registrar.ReasonOf(err) != registrar.ReasonInvalidArgument: // not just the only voter
			s.log.Warn("could not hand leadership over before shutting down", "err", err)
		}
	}
	close(s.closing)
	s.cancel()
	s.bg.Wait()
	err := s.http.Shutdown(ctx)
	if err != nil {
		err = s.http.Close()
	}
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	s.fwd.close()
	return errors.Join(err, s.node.Close())
}

// endOnShutdown ends a client stream's request body when the server shuts
// down, so that a handler waiting in Receive for the client's next message
// (an idle KeepAlive or Pipeline stream) stops at once with UNAVAILABLE,
// as Watch does, instead of holding the drain until the client speaks
// again. What the handler has in flight still completes and is answered.
func (s *Server) endOnShutdown(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := &shutdownBody{ReadCloser: r.Body}
		stop := context.AfterFunc(s.ctx, func() {
			b.ended.Store(true)
			b.ReadCloser.Close()
		})
		defer stop()
		r.Body = b
		h.ServeHTTP(w, r)
	})
}

// shutdownBody is a request body that endOnShutdown may end.
type shutdownBody struct {
	io.ReadCloser
	ended atomic.Bool
}

func (b *shutdownBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.ended.Load() {
		err = errShuttingDown()
	}
	return n, err
}

// errShuttingDown is what a stream ends with when the server shuts down.
func errShuttingDown() error {
	return wireError(connect.CodeUnavailable, registrar.ReasonUnavailable, nil, "UNAVAILABLE: the server is shutting down")
}

// limitBody answers an oversized request body with INVALID_ARGUMENT in the
// request's own protocol (API.md), before anything decodes it. A unary
// call's body of unknown length (chunked) is read here, up to the limit,
// to answer the same; stream bodies are bounded by connect.WithReadMaxBytes
// instead, and so are compressed ones once inflated.
func limitBody(next http.Handler, max int64) http.Handler {
	ew := connect.NewErrorWriter()
	tooLarge := func(w http.ResponseWriter, r *http.Request, size string) {
		_ = ew.Write(w, r, wireError(connect.CodeInvalidArgument, registrar.ReasonInvalidArgument,
			map[string]string{"field": "body", "limit_bytes": fmt.Sprint(max)},
			fmt.Sprintf("INVALID_ARGUMENT: request body is %s bytes; the limit is %d", size, max)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch _, unary := unaryInputs[r.URL.Path]; {
		case r.ContentLength > max && ew.IsSupported(r):
			tooLarge(w, r, fmt.Sprint(r.ContentLength))
			return
		case r.ContentLength < 0 && unary && r.Method == http.MethodPost && ew.IsSupported(r):
			body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
			if err == nil && int64(len(body)) > max {
				tooLarge(w, r, "more than "+fmt.Sprint(max))
				return
			}
			putBack(r, body, err)
		}
		next.ServeHTTP(w, r)
	})
}

// looksLikeProcedure reports a POST to a path of an RPC's shape,
// /package.Service/Method or /Service/Method, outside tenure.v1 (a
// mistyped package or version, the package left out): answered, as an
// unknown RPC under tenure.v1 is, with UNIMPLEMENTED and its reason, not
// with the mux's plain-text 404. Nothing else is served by POST.
func looksLikeProcedure(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	svc, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	return ok && svc != "" && method != "" && !strings.Contains(method, "/") &&
		(strings.Contains(svc, ".") || strings.HasSuffix(svc, "Service"))
}

// checkBody decodes the body of a unary call before Connect does, to
// answer a body that does not decode as every other bad input:
// INVALID_ARGUMENT with its ErrorInfo and a message that starts with the
// reason (Connect's own answer has neither). JSON (curl, browsers, any
// HTTP client): malformed JSON, invalid UTF-8, an unknown enum name, a
// field of the wrong type. Binary (Connect's application/proto, gRPC and
// gRPC-Web framing): malformed wire data, a string that is not UTF-8.
// Streaming calls and compressed bodies go through unchanged (Connect
// still refuses what does not decode), as does a body past max bytes
// (Connect refuses it as too large).
func checkBody(next http.Handler, max int64) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mt, unary := unaryInputs[r.URL.Path]
		ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
		ct = strings.ToLower(strings.TrimSpace(ct))
		if strings.HasPrefix(r.URL.Path, "/tenure.v1.") || looksLikeProcedure(r) {
			// What Connect would answer with a bare status (404, 415)
			// and no body: a Connect error, with the reason.
			if _, known := rules[r.URL.Path]; !known {
				_ = ew.Write(w, r, wireError(connect.CodeUnimplemented, registrar.ReasonUnimplemented, map[string]string{"procedure": r.URL.Path},
					fmt.Sprintf("UNIMPLEMENTED: no RPC %s (API.md lists them; names are case-sensitive)", r.URL.Path)))
				return
			}
			if r.Method != http.MethodPost {
				refuseMethod(w, r, ew)
				return
			}
			if h, v, ok := badTimeout(r.Header); ok {
				_ = ew.Write(w, r, wireError(connect.CodeInvalidArgument, registrar.ReasonInvalidArgument, map[string]string{"field": h},
					fmt.Sprintf("INVALID_ARGUMENT: %s %q is not a timeout: Connect-Timeout-Ms takes 1 to 10 digits "+
						"(milliseconds), grpc-timeout 1 to 8 digits and a unit (H, M, S, m, u, n)", h, v)))
				return
			}
			if r.Method == http.MethodPost && !contentTypeFits(ct, unary) {
				want := "application/json or application/proto (Connect), application/grpc, application/grpc-web"
				if !unary {
					want = "application/connect+json or application/connect+proto (Connect streaming: each message in a 5-byte envelope), " +
						"application/grpc, application/grpc-web"
				}
				_ = ew.Write(w, r, wireError(connect.CodeInvalidArgument, registrar.ReasonInvalidArgument,
					map[string]string{"field": "content_type", "content_type": ct},
					fmt.Sprintf("INVALID_ARGUMENT: content type %q is not one %s takes: %s", ct, r.URL.Path, want)))
				return
			}
			if v, ok := r.Header["Connect-Protocol-Version"]; ok && connectContentType(ct) && strings.Join(v, ",") != "1" {
				// Written as the content type says (a stream's error in an
				// end-of-stream message): with the header as it came, the
				// error writer would not know the protocol.
				r2 := r.Clone(r.Context())
				r2.Header.Del("Connect-Protocol-Version")
				_ = ew.Write(w, r2, wireError(connect.CodeInvalidArgument, registrar.ReasonInvalidArgument,
					map[string]string{"field": "Connect-Protocol-Version", "value": strings.Join(v, ",")},
					fmt.Sprintf("INVALID_ARGUMENT: Connect-Protocol-Version %q is not one this server speaks: 1 (or leave the header out)", strings.Join(v, ","))))
				return
			}
			if h, enc, ok := unknownCompression(r.Header, ct); ok {
				w.Header().Set(acceptEncodingHeader[h], "gzip")
				_ = ew.Write(w, r, wireError(connect.CodeUnimplemented, registrar.ReasonUnimplemented,
					map[string]string{"field": h, "encoding": enc, "supported": "gzip"},
					fmt.Sprintf("UNIMPLEMENTED: compression %q (%s) is not supported: send gzip, or the body uncompressed", enc, h)))
				return
			}
		}
		var decode func(b []byte, m proto.Message) error
		var badUTF8 func(b []byte) (string, bool) // names the field of a string that is not UTF-8
		var md protoreflect.MessageDescriptor
		if unary {
			md = mt.Descriptor()
		}
		switch {
		case !unary || r.Method != http.MethodPost || r.Header.Get("Content-Encoding") != "":
		case ct == "application/json":
			decode = func(b []byte, m proto.Message) error { return (jsonCodec{}).Unmarshal(b, m) }
			badUTF8 = func(b []byte) (string, bool) { return badUTF8JSON(md, b) }
		case ct == "application/proto":
			decode = func(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
			badUTF8 = func(b []byte) (string, bool) { return badUTF8Proto(md, b) }
		case ct == "application/grpc" || ct == "application/grpc+proto" || ct == "application/grpc-web" || ct == "application/grpc-web+proto":
			decode = decodeGRPCFrame
			badUTF8 = func(b []byte) (string, bool) { return badUTF8Proto(md, b[min(5, len(b)):]) }
		}
		if decode == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if err != nil || int64(len(body)) > max {
			// Cut off, or too large: Connect answers as usual.
			putBack(r, body, err)
			next.ServeHTTP(w, r)
			return
		}
		if err := decode(body, mt.New().Interface()); err != nil {
			why := wire.DecodeError(err)
			field, msg := "body", fmt.Sprintf("INVALID_ARGUMENT: the request body does not decode as %s: %s", md.Name(), why)
			if strings.Contains(why, "UTF-8") {
				if f, ok := badUTF8(body); ok {
					field, msg = f, fmt.Sprintf("INVALID_ARGUMENT: %s is not valid UTF-8 (%s: %s)", f, md.Name(), why)
				}
			}
			_ = ew.Write(w, r, wireError(connect.CodeInvalidArgument, registrar.ReasonInvalidArgument, map[string]string{"field": field}, msg))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// refuseMethod answers a call to an RPC by another method than POST (a
// browser's or curl's GET) with 405 and the Allow header, as Connect does,
// but with a Connect error body and its reason where Connect sends none.
// The code is unimplemented: Connect serves GET only for procedures marked
// free of side effects, which none of Tenure's are, so the call asks for
// something the procedure does not offer (gRPC's UNIMPLEMENTED: "not
// supported or enabled"), as an unknown compression is answered; its
// arguments, which invalid_argument is about, were never looked at. Neither
// Connect's nor gRPC's table maps 405 to a code (a client reading only the
// status would make it unknown), so the body is what says which.
func refuseMethod(w http.ResponseWriter, r *http.Request, ew *connect.ErrorWriter) {
	w.Header().Set("Allow", http.MethodPost)
	_ = ew.Write(statusWriter{w, http.StatusMethodNotAllowed}, r, wireError(connect.CodeUnimplemented, registrar.ReasonUnimplemented,
		map[string]string{"procedure": r.URL.Path, "method": r.Method},
		fmt.Sprintf("UNIMPLEMENTED: %s is called with POST, not %s (Connect, gRPC and gRPC-Web calls all are)", r.URL.Path, r.Method)))
}

// statusWriter writes status in place of the one it is asked to.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s statusWriter) WriteHeader(int) { s.ResponseWriter.WriteHeader(s.status) }

// connectContentType reports whether ct (lower case, without parameters)
// is one of the Connect protocol's own, unary or streaming, whose calls
// carry Connect-Protocol-Version.
func connectContentType(ct string) bool {
	return ct == "application/json" || ct == "application/proto" || strings.HasPrefix(ct, "application/connect+")
}

// acceptEncodingHeader gives, for each protocol's compression header, the
// header that lists what the server accepts (gRPC's compression.md and
// Connect's spec ask for it with an unknown compression).
var acceptEncodingHeader = map[string]string{
	"Content-Encoding":         "Accept-Encoding",
	"Connect-Content-Encoding": "Connect-Accept-Encoding",
	"Grpc-Encoding":            "Grpc-Accept-Encoding",
}

// unknownCompression names the compression header of the request's
// protocol (content type ct) and its value when the body is compressed
// with something other than gzip, the one Connect is given here: Connect
// would answer it without a reason.
func unknownCompression(h http.Header, ct string) (header, encoding string, unknown bool) {
	switch {
	case ct == "application/json" || ct == "application/proto":
		header = "Content-Encoding"
	case strings.HasPrefix(ct, "application/connect+"):
		header = "Connect-Content-Encoding"
	case strings.HasPrefix(ct, "application/grpc"): // and gRPC-Web
		header = "Grpc-Encoding"
	default:
		return "", "", false
	}
	switch enc := h.Get(header); enc {
	case "", "identity", "gzip":
		return "", "", false
	default:
		return header, enc, true
	}
}

// badTimeout names a request's timeout header whose value Connect or gRPC
// cannot parse (it would answer without a reason).
func badTimeout(h http.Header) (name, value string, bad bool) {
	if v, ok := h["Connect-Timeout-Ms"]; ok && !timeoutMs.MatchString(strings.Join(v, ",")) {
		return "Connect-Timeout-Ms", strings.Join(v, ","), true
	}
	if v, ok := h["Grpc-Timeout"]; ok && !grpcTimeout.MatchString(strings.Join(v, ",")) {
		return "grpc-timeout", strings.Join(v, ","), true
	}
	return "", "", false
}

var (
	timeoutMs   = regexp.MustCompile(`^[0-9]{1,10}$`)
	grpcTimeout = regexp.MustCompile(`^[0-9]{1,8}[HMSmun]$`)
)

// contentTypeFits reports whether ct (lower case, without parameters) is a
// content type Connect serves a unary (or, unary false, a streaming) RPC
// with: Connect's own, gRPC's or gRPC-Web's, with a codec it has.
func contentTypeFits(ct string, unary bool) bool {
	for _, p := range []string{"application/grpc", "application/grpc-web"} {
		if ct == p || ct == p+"+proto" || ct == p+"+json" {
			return true
		}
	}
	if unary {
		return ct == "application/json" || ct == "application/proto"
	}
	return ct == "application/connect+json" || ct == "application/connect+proto"
}

// decodeGRPCFrame decodes the message of a unary gRPC (or gRPC-Web) body:
// one frame, a flag byte and a 4-byte length. A compressed or otherwise
// unusual body is left to Connect (nil).
func decodeGRPCFrame(b []byte, m proto.Message) error {
	if len(b) < 5 || b[0] != 0 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
		return nil
	}
	return proto.Unmarshal(b[5:], m)
}

// putBack puts the start of r's body, read by a check, back in front of
// the rest: read is what was read, err the error that cut it off, if any.
func putBack(r *http.Request, read []byte, err error) {
	rest := r.Body
	if err != nil {
		rest = io.NopCloser(errReader{err})
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(read), rest), r.Body}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// unaryInputs maps each unary procedure of the API ("/tenure.v1.Svc/Method")
// to its request message.
var unaryInputs = func() map[string]protoreflect.MessageType {
	out := make(map[string]protoreflect.MessageType)
	protoregistry.GlobalFiles.RangeFilesByPackage("tenure.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				if md.IsStreamingClient() || md.IsStreamingServer() {
					continue
				}
				if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName()); err == nil {
					out["/"+string(sd.FullName())+"/"+string(md.Name())] = mt
				}
			}
		}
		return true
	})
	return out
}()

// compressMinBytes is the smallest response body worth compressing.
const compressMinBytes = 8 << 10

// pipelineCompressMinBytes is the smallest Pipeline message compressed.
const pipelineCompressMinBytes = 1 << 20

// samePeers reports whether the node's Raft configuration has exactly the
// members peers lists (by id and Raft address); true when it cannot say.
func samePeers(n *cluster.Node, peers []cluster.Peer) bool {
	st, err := n.Status()
	if err != nil {
		return true
	}
	if len(st.Members) != len(peers) {
		return false
	}
	for _, p := range peers {
		if !slices.ContainsFunc(st.Members, func(m cluster.Member) bool { return m.ID == p.ID && m.RaftAddress == p.RaftAddr }) {
			return false
		}
	}
	return true
}
