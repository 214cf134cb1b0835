package tenure

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/internal/wire"
)

// ErrNoRoute is the error of a Router asked for a namespace its routes do
// not cover.
var ErrNoRoute = errors.New("tenure: no route for the namespace")

// Routes maps namespaces to the API endpoints of the cluster that serves
// them, for a deployment that partitions its namespaces across several
// independent Tenure clusters (each cluster is its own registrar: a lease,
// a fence or a queue lives in exactly one). A key is a namespace name, a
// prefix ending in "*" ("team-*": every namespace that starts with
// "team-"), or "*" alone for every namespace not routed otherwise. A name
// routes before a prefix, a longer prefix before a shorter one.
type Routes map[string][]string

// ParseRoutes parses routes written as the CLI's --routes and
// TENURE_ROUTES take them: "NAMESPACE=ENDPOINT,ENDPOINT;NAMESPACE=…", for
// example "orders=10.0.1.1:7070,10.0.1.2:7070;team-*=10.0.2.1:7070;*=10.0.3.1:7070".
// Spaces and newlines around the parts are ignored, and a newline may
// separate routes as ";" does.
func ParseRoutes(s string) (Routes, error) {
	rt := Routes{}
	for entry := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ';' || r == '\n' }) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		ns, list, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("tenure: route %q: want NAMESPACE=ENDPOINT[,ENDPOINT…]", entry)
		}
		ns = strings.TrimSpace(ns)
		if _, dup := rt[ns]; dup {
			return nil, fmt.Errorf("tenure: routes: %q is routed twice", ns)
		}
		var eps []string
		for e := range strings.SplitSeq(list, ",") {
			if e = strings.TrimSpace(e); e != "" {
				eps = append(eps, e)
			}
		}
		rt[ns] = eps
	}
	if err := rt.check(); err != nil {
		return nil, err
	}
	return rt, nil
}

// check reports the first bad route: an empty table, a key that is no
// namespace name or prefix, a route with no endpoint or a bad one.
func (rt Routes) check() error {
	if len(rt) == 0 {
		return errors.New("tenure: routes: no route given")
	}
	for _, key := range slices.Sorted(maps.Keys(rt)) {
		name := strings.TrimSuffix(key, "*")
		switch {
		case key == "":
			return errors.New("tenure: routes: a route has no namespace")
		case strings.ContainsAny(name, "*=;, \t\n"):
			return fmt.Errorf("tenure: routes: %q is not a namespace, a prefix ending in * or *", key)
		case len(rt[key]) == 0:
			return fmt.Errorf("tenure: routes: %q has no endpoint", key)
		}
		for _, e := range rt[key] {
			if err := CheckEndpoint(e); err != nil {
				return fmt.Errorf("tenure: routes: %q: %s", key, strings.TrimPrefix(err.Error(), "tenure: "))
			}
		}
	}
	return nil
}

// Route returns the key of the route that serves namespace ns (ns itself,
// the longest prefix that matches, or "*") and its endpoints, or an error
// matching ErrNoRoute.
func (rt Routes) Route(ns string) (key string, endpoints []string, err error) {
	if eps, ok := rt[ns]; ok && !strings.HasSuffix(ns, "*") {
		return ns, eps, nil
	}
	best := ""
	found := false
	for k := range rt {
		prefix, ok := strings.CutSuffix(k, "*")
		if ok && strings.HasPrefix(ns, prefix) && (!found || len(prefix) > len(best)) {
			best, found = prefix, true
		}
	}
	if !found {
		return "", nil, fmt.Errorf("%w %q: route it, or add a route for \"*\"", ErrNoRoute, ns)
	}
	return best + "*", rt[best+"*"], nil
}

// Router hands out Clients by namespace across several independent
// clusters (see Routes): Client(ns) is a Client of the cluster that serves
// ns, with ns as its default namespace. A Router is safe for concurrent use;
// Close it when done.
//
// Each namespace gets its own Client, made on first use and kept (its
// leases, heartbeats and pipelines are its own), all with the options given
// to NewRouter and one holder identity (WithHolder, else the Client's
// default). Clients of namespaces served by the same cluster share their
// connections, unless WithHTTPClient supplies the transport.
type Router struct {
	routes Routes
	opts   []Option
	cfg    config // the options applied, for the transport and the holder

	mu         sync.Mutex
	closed     bool
	clients    map[string]*Client      // by namespace
	transports map[string]*http.Client // by endpoint set, when the Router owns them
	conns      []*wire.Conns           // the connections of transports
}

// NewRouter returns a Router over routes. Like New, it does not contact
// any server; it checks the routes and the options.
func NewRouter(routes Routes, opts ...Option) (*Router, error) {
	if err := routes.check(); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts) // one default holder for every namespace's Client
	if err != nil {
		return nil, err
	}
	r := &Router{
		routes:     make(Routes, len(routes)),
		opts:       slices.Clone(opts),
		cfg:        cfg,
		clients:    make(map[string]*Client),
		transports: make(map[string]*http.Client),
	}
	for k, eps := range routes {
		r.routes[k] = slices.Clone(eps)
	}
	return r, nil
}

// Client returns the Client for namespace ns: on the cluster that serves
// it, with ns as its default namespace. It is made on the first call for ns
// and the same Client is returned after that; the Router closes it. The
// error matches ErrNoRoute when no route covers ns, ErrClientClosed after
// Close.
func (r *Router) Client(ns string) (*Client, error) {
	if ns == "" {
		return nil, errors.New("tenure: Router.Client: namespace must not be empty")
	}
	_, eps, err := r.routes.Route(ns)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClientClosed
	}
	if c := r.clients[ns]; c != nil {
		return c, nil
	}
	opts := append(slices.Clone(r.opts), WithNamespace(ns))
	if !r.cfg.holderGiven {
		opts = append(opts, WithHolder(r.cfg.holder))
	}
	if r.cfg.httpClient == nil {
		tc := autoTLS(r.cfg.tlsConfig, eps)
		// One transport per cluster: routes that name the same
		// endpoints, in any order, share it.
		key := strings.Join(slices.Sorted(slices.Values(eps)), ",")
		hc := r.transports[key]
		if hc == nil {
			var conns *wire.Conns
			hc, conns = wire.NewTrackedHTTPClient(tc, r.cfg.dialTimeout)
			r.transports[key] = hc
			r.conns = append(r.conns, conns)
		}
		opts = append(opts, WithHTTPClient(hc))
		if tc != nil {
			opts = append(opts, WithTLS(tc))
		}
	}
	c, err := New(eps, opts...)
	if err != nil {
		return nil, err
	}
	r.clients[ns] = c
	return c, nil
}

// Endpoints returns the endpoints of the cluster that serves namespace ns
// (an error matching ErrNoRoute when none does).
func (r *Router) Endpoints(ns string) ([]string, error) {
	_, eps, err := r.routes.Route(ns)
	return slices.Clone(eps), err
}

// Close closes every Client the Router made, in parallel (each releases
// its leases, see Client.Close), then the connections they shared. Later
// calls of Client return ErrClientClosed. Close is idempotent; it returns
// the Clients' errors.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	clients := slices.Collect(maps.Values(r.clients))
	r.mu.Unlock()

	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { errs[i] = c.Close() })
	}
	wg.Wait()
	for _, hc := range r.transports {
		hc.CloseIdleConnections()
	}
	for _, conns := range r.conns {
		conns.CloseAll() // those not idle yet too (see Client.Close)
	}
	return errors.Join(errs...)
}
