package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"os/user"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/wire"
)

// cliCommand is one client subcommand's flag set plus the global client
// flags (--endpoints, --namespace, --token, -o) every client command takes.
type cliCommand struct {
	fs       *flag.FlagSet
	name     string // "tenure acquire"
	synopsis string // "RESOURCE [flags]"
	stdout   io.Writer
	stderr   io.Writer

	endpoints string
	routes    string
	pinned    bool // endpoints set by the command itself, not routed (pinEndpoints)
	namespace string
	token     string
	output    string
	holder    string
	tlsCA     string
	tlsCert   string
	tlsKey    string
	stale     bool
	// principalHolder is true when credentials are given without
	// --holder or TENURE_HOLDER: the holder is then the principal the
	// server authenticates (raw requests send an empty holder, which the
	// server fills in; the Go client asks WhoAmI).
	principalHolder bool

	help func() // prints --help to stdout
}

// newCLICommand returns a command with the global client flags defined.
// description and examples make up its --help.
func newCLICommand(name, synopsis, description, examples string, stdout, stderr io.Writer) *cliCommand {
	c := &cliCommand{fs: flag.NewFlagSet(name, flag.ContinueOnError), name: name, synopsis: synopsis, stdout: stdout, stderr: stderr}
	c.fs.SetOutput(io.Discard)
	c.fs.StringVar(&c.endpoints, "endpoints", envOr("TENURE_ENDPOINTS", "127.0.0.1:7070"), "comma-separated API addresses of cluster members (env TENURE_ENDPOINTS)")
	c.fs.StringVar(&c.routes, "routes", os.Getenv("TENURE_ROUTES"), "for namespaces split across clusters: NS=ADDR,ADDR;NS2=ADDR;prefix-*=ADDR;*=ADDR picks --endpoints by --namespace, unless --endpoints is given (env TENURE_ROUTES)")
	c.fs.StringVar(&c.namespace, "namespace", envOr("TENURE_NAMESPACE", tenure.DefaultNamespace), "namespace (env TENURE_NAMESPACE)")
	c.fs.StringVar(&c.token, "token", os.Getenv("TENURE_TOKEN"), "bearer token (env TENURE_TOKEN)")
	c.fs.StringVar(&c.tlsCA, "tls-ca", os.Getenv("TENURE_TLS_CA"), "PEM file of the CA(s) to trust for https endpoints instead of the system's (env TENURE_TLS_CA); any --tls-* flag turns TLS on")
	c.fs.StringVar(&c.tlsCert, "tls-cert", os.Getenv("TENURE_TLS_CERT"), "PEM client certificate, for servers that require one (env TENURE_TLS_CERT)")
	c.fs.StringVar(&c.tlsKey, "tls-key", os.Getenv("TENURE_TLS_KEY"), "PEM key of --tls-cert (env TENURE_TLS_KEY)")
	c.fs.StringVar(&c.output, "o", "table", "output format: table or json")
	c.fs.BoolVar(&c.stale, "stale", false, "answer reads from the local state of the member asked, without the leader: possibly behind, but served without a leader (writes are unaffected)")
	c.fs.Usage = func() {} // the flag package calls it on every error; help is printed by parse
	c.help = func() {
		fmt.Fprintf(stdout, "usage: %s %s\n\n%s\n", name, synopsis, strings.TrimSpace(description))
		if examples != "" {
			fmt.Fprintf(stdout, "\nexamples:\n%s\n", strings.TrimRight(examples, "\n"))
		}
		fmt.Fprintf(stdout, "\nflags:\n")
		printFlags(stdout, c.fs)
	}
	return c
}

// printFlags lists fs's flags as the flag package does, but spelt as
// the documentation spells them: --ttl, not -ttl (both are accepted).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	io.WriteString(w, flagLine.ReplaceAllString(b.String(), "  --$1"))
}

// flagLine matches the start of a flag's line, a one-letter flag (-o) left
// as it is.
var flagLine = regexp.MustCompile(`(?m)^  -(\w\w)`)

// holderFlag defines --holder. def is the default when neither the flag nor
// TENURE_HOLDER is given ("" means the Go client's default, user@host:pid);
// defaultText describes it in --help.
func (c *cliCommand) holderFlag(def, defaultText string) {
	usage := "holder identity (env TENURE_HOLDER; default " + defaultText + ")"
	if def != "" { // the flag package prints the default itself
		usage = "holder identity (env TENURE_HOLDER)"
	}
	c.fs.StringVar(&c.holder, "holder", envOr("TENURE_HOLDER", def), usage)
}

// parse parses args, flags and positional arguments in any order ("--" ends
// the flags: everything after it is positional), and checks that there are
// between min and max positional arguments (max < 0: no limit).
func (c *cliCommand) parse(args []string, min, max int) ([]string, error) {
	var rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.help()
				return nil, err
			}
			// A negative number is an argument, not a flag ("consume ID
			// tokens -1"): the command says what it must be.
			if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
				if _, nerr := strconv.ParseFloat("-"+name, 64); nerr == nil {
					pos = append(pos, "-"+name)
					args = c.fs.Args() // what follows it
					continue
				}
			}
			return nil, c.usageError("%s", explainFlagError(c.fs, err))
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	pos = append(pos, rest...)
	switch {
	case len(pos) < min:
		return nil, c.usageError("missing argument")
	case max >= 0 && len(pos) > max:
		return nil, c.usageError("unexpected argument %q", pos[max])
	}
	switch c.output {
	case "table", "json":
	default:
		return nil, c.usageError("-o must be table or json, got %q", c.output)
	}
	if c.fs.Lookup("holder") != nil && (c.token != "" || c.tlsCert != "") && os.Getenv("TENURE_HOLDER") == "" && !c.given("holder") {
		c.holder, c.principalHolder = "", true
	}
	return pos, nil
}

// route sets the endpoints to those --routes gives the namespace, unless
// --endpoints is given on the command line (which wins over the routes, as
// the routes win over TENURE_ENDPOINTS) or the command pinned its own
// (pinEndpoints). It runs when the endpoints are needed (endpointList,
// checkEndpoints), so that commands that contact no server never fail on
// the routes, and a command that changes its namespace routes by the new
// one.
func (c *cliCommand) route() error {
	if strings.TrimSpace(c.routes) == "" || c.given("endpoints") || c.pinned {
		return nil
	}
	rt, err := tenure.ParseRoutes(c.routes)
	if err != nil {
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "tenure: "), "routes: ")
		return c.usageError("--routes: %s", msg)
	}
	_, eps, err := rt.Route(c.namespace)
	if err != nil {
		return c.usageError("--routes: no route for namespace %q: route it, or add a route for \"*\"", c.namespace)
	}
	c.endpoints = strings.Join(eps, ",")
	return nil
}

// given reports whether the flag name was set on the command line rather
// than left at its default. A flag given explicitly is sent even when its
// value is zero or negative, for the server to judge: "--ttl 0s" must be
// refused, not mistaken for "no ttl".
func (c *cliCommand) given(name string) bool { return given(c.fs, name) }

// given reports whether the flag name was set on fs's command line.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// durationIfGiven is d for a request field when --name was given, nil
// (the server's default) when it was not.
func (c *cliCommand) durationIfGiven(name string, d time.Duration) *durationpb.Duration {
	if !c.given(name) {
		return nil
	}
	return durationpb.New(d)
}

// notNegative is a usage error naming --name when d is negative.
func (c *cliCommand) notNegative(name string, d time.Duration) error {
	if d < 0 {
		return c.usageError("--%s must not be negative, got %v", name, d)
	}
	return nil
}

// int32Flag defines an integer flag for an int32 field of the API. A value
// that does not fit is a usage error, never wrapped around.
func (c *cliCommand) int32Flag(name string, def int32, usage string) *int32 {
	v := int32Value(def)
	c.fs.Var(&v, name, usage+" (a 32-bit `int`)")
	return (*int32)(&v)
}

// uint32Flag is int32Flag for a uint32 field.
func (c *cliCommand) uint32Flag(name string, def uint32, usage string) *uint32 {
	v := uint32Value(def)
	c.fs.Var(&v, name, usage+" (a 32-bit `uint`)")
	return (*uint32)(&v)
}

type int32Value int32

func (v *int32Value) String() string { return strconv.FormatInt(int64(*v), 10) }

func (v *int32Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 32)
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("must fit in 32 bits (%d to %d)", math.MinInt32, math.MaxInt32)
	}
	if err != nil {
		return errors.New("not an integer")
	}
	*v = int32Value(n)
	return nil
}

type uint32Value uint32

func (v *uint32Value) String() string { return strconv.FormatUint(uint64(*v), 10) }

func (v *uint32Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 0, 32)
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("must fit in 32 bits (0 to %d)", uint64(math.MaxUint32))
	}
	if err != nil {
		return errors.New("not a non-negative integer")
	}
	*v = uint32Value(n)
	return nil
}

// usageError is a usage error followed by the command's usage line.
func (c *cliCommand) usageError(format string, args ...any) error {
	return usagef("%s: %s\nusage: %s %s (see %s --help)", strings.TrimPrefix(c.name, "tenure "), fmt.Sprintf(format, args...), c.name, c.synopsis, c.name)
}

func (c *cliCommand) json() bool { return c.output == "json" }

// pinEndpoints makes eps (comma-separated) the command's endpoints,
// whatever the routes say (a command that put the leader first).
func (c *cliCommand) pinEndpoints(eps string) { c.endpoints, c.pinned = eps, true }

// endpointList splits --endpoints (routed: see route; checkEndpoints
// reports a routing error).
func (c *cliCommand) endpointList() []string {
	_ = c.route()
	var out []string
	for e := range strings.SplitSeq(c.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// checkEndpoints refuses, as a usage error, an --endpoints list that is
// empty or names something that is not host:port or an http(s) URL.
func (c *cliCommand) checkEndpoints() ([]string, error) {
	if err := c.route(); err != nil {
		return nil, err
	}
	eps := c.endpointList()
	if len(eps) == 0 {
		return nil, c.usageError("--endpoints is empty")
	}
	for _, e := range eps {
		if !validEndpoint(e) {
			return nil, c.usageError("--endpoints: %q is not host:port or an http(s)://host[:port] URL", e)
		}
	}
	return eps, nil
}

// validEndpoint: an endpoint the Go client accepts (tenure.CheckEndpoint).
func validEndpoint(e string) bool { return tenure.CheckEndpoint(e) == nil }

// client returns a Go client (heartbeats, Watch, failover) for commands that
// hold leases or follow streams. The caller closes it.
func (c *cliCommand) client(opts ...tenure.Option) (*tenure.Client, error) {
	eps, err := c.checkEndpoints()
	if err != nil {
		return nil, err
	}
	if c.namespace != "" { // --namespace '': the default, as the other commands' requests
		opts = append([]tenure.Option{tenure.WithNamespace(c.namespace)}, opts...)
	}
	if c.token != "" {
		opts = append(opts, tenure.WithToken(c.token))
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, tenure.WithTLS(tc))
	}
	if c.principalHolder && c.holder == "" {
		// Act as the principal of the credentials; a server without
		// authentication leaves the client's own default holder.
		cl, err := tenure.New(eps, opts...)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		who, err := cl.WhoAmI(ctx)
		cancel()
		cl.Close()
		if err != nil {
			return nil, err
		}
		if who.Authenticated {
			c.holder = who.Principal
		}
	}
	if c.holder != "" {
		opts = append(opts, tenure.WithHolder(c.holder))
	}
	return tenure.New(eps, opts...)
}

// remote returns raw service clients for the RPCs the Go client does not
// wrap. Calls go to the first endpoint that answers (see remote.lease).
func (c *cliCommand) remote() (*remote, error) {
	eps, err := c.checkEndpoints()
	if err != nil {
		return nil, err
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	// The Go client's HTTP client: its pings give up a hung member after
	// ~4 s, where a stalled process used to hold a command forever.
	hc := wire.NewHTTPClient(tc, 3*time.Second)
	scheme := "http://"
	if tc != nil {
		scheme = "https://"
	}
	opts := []connect.ClientOption{connect.WithCodec(wire.Codec{}), connect.WithInterceptors(markReadRetry{})}
	if c.token != "" {
		opts = append(opts, connect.WithInterceptors(bearerToken(c.token)))
	}
	if c.stale {
		opts = append(opts, connect.WithInterceptors(staleReads{}))
	}
	r := &remote{}
	for _, e := range eps {
		if !strings.Contains(e, "://") {
			e = scheme + e
		}
		e = strings.TrimRight(e, "/")
		eopts := opts
		if len(eps) > 1 {
			// Outermost: its refusal goes to firstAnswer as it is.
			eopts = append([]connect.ClientOption{connect.WithInterceptors(&probeFirst{hc: hc, base: e})}, opts...)
		}
		r.leases = append(r.leases, tenurev1connect.NewLeaseServiceClient(hc, e, eopts...))
		r.clusters = append(r.clusters, tenurev1connect.NewClusterServiceClient(hc, e, eopts...))
		r.pools = append(r.pools, tenurev1connect.NewPoolServiceClient(hc, e, eopts...))
		r.queues = append(r.queues, tenurev1connect.NewQueueServiceClient(hc, e, eopts...))
	}
	return r, nil
}

// probeFirst asks an endpoint's /healthz, before the first call sent to
// it, when the command has others to try: a member that accepts
// connections and never answers (paused, its machine stalled) would hold
// the call until the connection's pings give up, ~4 s, and a write that
// may not be sent twice would then end with its outcome unknown, where
// the next member could have taken it (as etcdctl moves on). A probe that
// has no answer within probeWait sends nothing: the call moves on, its
// outcome known. Any answer, or a failure of another kind (refused, TLS),
// lets the call go as it would have.
type probeFirst struct {
	hc     *http.Client
	base   string
	mu     sync.Mutex
	proven bool
}

// probeWait bounds the probe: a few round trips of a slow network.
var probeWait = 2 * time.Second

// notSent is the error of a call that was not sent: its member did not
// answer the probe.
type notSent struct{ error }

func (n notSent) Unwrap() error { return n.error }

func (p *probeFirst) alive(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proven {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, p.base+"/healthz", nil)
	if err != nil {
		return nil
	}
	resp, err := p.hc.Do(req)
	if err == nil {
		resp.Body.Close()
		p.proven = true
		return nil
	}
	if ctx.Err() == nil && pctx.Err() != nil {
		return notSent{connect.NewError(connect.CodeUnavailable, fmt.Errorf(
			"%s did not answer within %v (hung or overloaded?): nothing was sent to it", strings.TrimPrefix(strings.TrimPrefix(p.base, "http://"), "https://"), probeWait))}
	}
	return nil
}

func (p *probeFirst) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := p.alive(ctx); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (p *probeFirst) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (p *probeFirst) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// fileArgError is the error of flag's argument, which names a file: one
// that could not be read fails the command (exit 1, with a reason: see
// fileReason), anything else about it is a usage error.
func (c *cliCommand) fileArgError(flag string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", flag, err)
	}
	return c.usageError("%s: %v", flag, err)
}

// tlsConfig builds the client TLS configuration from --tls-ca,
// --tls-cert and --tls-key: nil (h2c) when none is given and no endpoint
// is an https:// URL; an https:// endpoint alone trusts the system's CAs.
func (c *cliCommand) tlsConfig() (*tls.Config, error) {
	https := false
	for _, e := range c.endpointList() {
		https = https || strings.HasPrefix(strings.ToLower(e), "https://")
	}
	if c.tlsCA == "" && c.tlsCert == "" && c.tlsKey == "" && !https {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, c.fileArgError("--tls-ca", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, c.usageError("--tls-ca: %s holds no PEM certificate", c.tlsCA)
		}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, c.usageError("--tls-cert and --tls-key go together")
	}
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, c.fileArgError("--tls-cert/--tls-key", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// remote is the generated Connect clients, one per endpoint.
type remote struct {
	leases   []tenurev1connect.LeaseServiceClient
	clusters []tenurev1connect.ClusterServiceClient
	pools    []tenurev1connect.PoolServiceClient
	queues   []tenurev1connect.QueueServiceClient
}

// firstAnswer runs fn against each endpoint's client in turn until one
// answers: it moves on only when the request cannot have been processed
// (the connection could not be made, or NOT_LEADER), or when it only
// reads and its member could not answer (hung, or unavailable). When
// every endpoint failed so, it goes through the list again after a
// pause, for up to retryFor: a server started a moment ago may not listen
// yet, a cluster may be electing its leader. The error is parsed into the
// Go client's typed errors, so its message starts with the reason.
func firstAnswer[C any](clients []C, fn func(C) error) error {
	var err, answer error
	// The error to report when every member failed: a member's own answer
	// (NOT_LEADER: no leader known, when a quorum is lost) says more than
	// the transport's error of another that is down.
	last := func() error {
		if answer != nil {
			return answer
		}
		return err
	}
	deadline := time.Now().Add(retryFor)
	extended := false
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		for _, c := range clients {
			raw := fn(c)
			var rr readRetry
			if err = tenure.ParseError(raw); err == nil || !tryNext(err) && !errors.As(raw, &rr) {
				return err
			}
			if tenure.ReasonOf(err) != "" {
				answer = err
			}
			if !extended && tenure.ReasonOf(err) == tenure.ReasonOutcomeUnknown {
				// A member answered OUTCOME_UNKNOWN for a write safe to
				// repeat: its forward went to a leader that was lost, which
				// it says once it sees the next one elected, often after
				// the budget is spent (a hung leader is noticed in 2-3 s).
				// The cluster has a leader again: give it a full budget, once.
				deadline, extended = time.Now().Add(retryFor), true
			}
		}
		if time.Now().Add(pause).After(deadline) {
			return last()
		}
		time.Sleep(pause)
	}
}

// retryFor bounds how long firstAnswer goes on trying endpoints that
// could not take the request.
var retryFor = 3 * time.Second

// call makes one unary call (a method expression such as
// tenurev1connect.LeaseServiceClient.Get) through firstAnswer.
func call[C, Req, Resp any](ctx context.Context, clients []C,
	method func(C, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	req *Req) (*Resp, error) {
	var out *Resp
	err := firstAnswer(clients, func(c C) error {
		res, err := method(c, ctx, connect.NewRequest(req))
		if err == nil {
			out = res.Msg
		}
		return err
	})
	return out, err
}

// lease runs fn through firstAnswer on the LeaseService clients.
func (r *remote) lease(fn func(tenurev1connect.LeaseServiceClient) error) error {
	return firstAnswer(r.leases, fn)
}

// cluster is lease for the ClusterService.
func (r *remote) cluster(fn func(tenurev1connect.ClusterServiceClient) error) error {
	return firstAnswer(r.clusters, fn)
}

// leaseCall makes one unary LeaseService call (a method expression such as
// tenurev1connect.LeaseServiceClient.Get) through r.lease's failover.
func leaseCall[Req, Resp any](ctx context.Context, r *remote,
	method func(tenurev1connect.LeaseServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	req *Req) (*Resp, error) {
	return call(ctx, r.leases, method, req)
}

// clusterCall is leaseCall for the ClusterService.
func clusterCall[Req, Resp any](ctx context.Context, r *remote,
	method func(tenurev1connect.ClusterServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	req *Req) (*Resp, error) {
	return call(ctx, r.clusters, method, req)
}

func tryNext(err error) bool {
	if tenure.ReasonOf(err) == tenure.ReasonNotLeader {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || wire.TLSRefused(err) || errors.As(err, new(notSent))
}

// readOnly lists the calls that change nothing: one that fails for
// want of an answer (a hung member, UNAVAILABLE) may be sent to the next
// member.
var readOnly = map[string]bool{
	tenurev1connect.LeaseServiceGetProcedure: true, tenurev1connect.LeaseServiceListProcedure: true,
	tenurev1connect.LeaseServiceVerifyProcedure: true, tenurev1connect.LeaseServiceHistoryProcedure: true,
	tenurev1connect.LeaseServiceCheckFenceProcedure: true, tenurev1connect.LeaseServiceReadStateProcedure: true,
	tenurev1connect.LeaseServiceTreeProcedure: true, tenurev1connect.LeaseServiceAuthorizeProcedure: true,
	tenurev1connect.ClusterServiceStatusProcedure: true, tenurev1connect.ClusterServiceWhoAmIProcedure: true,
	tenurev1connect.ClusterServicePublicKeyProcedure: true, tenurev1connect.ClusterServiceGetPolicyProcedure: true,
	tenurev1connect.ClusterServiceSaveSnapshotProcedure: true,
	tenurev1connect.QueueServiceGetTaskProcedure:        true, tenurev1connect.QueueServiceListTasksProcedure: true,
	tenurev1connect.QueueServiceStatsProcedure: true, tenurev1connect.QueueServiceListQueuesProcedure: true,
	tenurev1connect.PoolServiceStatusProcedure: true, tenurev1connect.PoolServiceRankingsProcedure: true,
	tenurev1connect.PoolServiceStatsProcedure:     true,
	tenurev1connect.PoolServiceListPoolsProcedure: true,
}

// resendable lists the writes that may be sent again, to the next member,
// when the first one's answer was lost (the Go client's idempotent calls):
// a release of a released lease answers as the first did, a renewal
// extends from the new send time, a task completed or failed twice by the
// same lease is answered again, and a cancelled task is answered
// unchanged, and a peer reset twice is as reset once.
var resendable = map[string]bool{
	tenurev1connect.LeaseServiceRenewProcedure: true, tenurev1connect.LeaseServiceReleaseProcedure: true,
	tenurev1connect.QueueServiceCompleteProcedure: true, tenurev1connect.QueueServiceFailProcedure: true,
	tenurev1connect.QueueServiceCancelProcedure: true, tenurev1connect.PoolServiceResetPeerProcedure: true,
}

// resend says whether req may be sent again, to the next member, after its
// answer was lost (or a member answered OUTCOME_UNKNOWN): a resendable
// write, or an Enqueue whose every task names its id (an id that exists is
// answered as it is, so a repeat enqueues nothing more).
func resend(req connect.AnyRequest) bool {
	if resendable[req.Spec().Procedure] {
		return true
	}
	if e, ok := req.Any().(*tenurev1.EnqueueRequest); ok && len(e.GetTasks()) > 0 {
		for _, t := range e.GetTasks() {
			if t.GetTaskId() == "" {
				return false
			}
		}
		return true
	}
	return false
}

// readRetry marks the failure of a call that the next member may answer
// (firstAnswer): a read-only or resendable one whose member did not.
type readRetry struct{ error }

func (r readRetry) Unwrap() error { return r.error }

// markReadRetry is the interceptor that marks such failures, and names a
// write whose answer was lost for what it is: OUTCOME_UNKNOWN.
type markReadRetry struct{}

func (markReadRetry) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil && ctx.Err() == nil && tenure.ReasonOf(tenure.ParseError(err)) == tenure.ReasonOutcomeUnknown && resend(req) {
			// A member's forward to the leader broke off (a leader lost
			// mid-call): the next member may answer it.
			return resp, readRetry{err}
		}
		if err == nil || ctx.Err() != nil || tenure.ReasonOf(tenure.ParseError(err)) != "" || tryNext(err) {
			return resp, err // answered, abandoned, or never sent
		}
		proc := req.Spec().Procedure
		// ParseError: connect-go reports a connection the member reset (a
		// member killed mid-call) as canceled; it is one that did not answer.
		switch code := connect.CodeOf(tenure.ParseError(err)); {
		case (readOnly[proc] || resend(req)) && code == connect.CodeUnavailable:
			err = readRetry{err}
		case !readOnly[proc] && (code == connect.CodeUnavailable || code == connect.CodeUnknown || code == connect.CodeInternal):
			err = &tenure.Error{Reason: tenure.ReasonOutcomeUnknown, Code: code, Message: fmt.Sprintf(
				"%s: no answer from %s (%v); the write may or may not have been applied: read the state before repeating it",
				tenure.ReasonOutcomeUnknown, req.Peer().Addr, err)}
		}
		return resp, err
	}
}

func (markReadRetry) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (markReadRetry) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// bearerToken adds "Authorization: Bearer <token>" to every request.
type bearerToken string

func (b bearerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// staleReads asks for stale reads (--stale) on every unary call; the
// server applies it to reads only.
type staleReads struct{}

func (staleReads) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(tenure.HeaderConsistency, "stale")
		return next(ctx, req)
	}
}

func (staleReads) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (staleReads) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// stableHolder is the default holder of one-shot commands: user@host,
// without the pid the Go client adds, so that a lease acquired by one
// invocation can be renewed, released or transferred by the next.
func stableHolder() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return name + "@" + host
}

// parseMode turns --mode into the API enum.
func parseMode(s string) (tenure.Mode, error) {
	switch strings.ToLower(s) {
	case "", "exclusive":
		return tenure.Exclusive, nil
	case "shared":
		return tenure.Shared, nil
	}
	return 0, fmt.Errorf("--mode must be exclusive or shared, got %q", s)
}
