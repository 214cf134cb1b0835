package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// Authentication happens once per HTTP request, before anything decodes
// it (authenticate): a bearer token, else a verified client certificate.
// The principal travels in the request's context; authorization needs
// the decoded message and happens in the interceptor (unary calls) or in
// the stream handlers, message by message (Watch, KeepAlive, Pipeline),
// all through authorize and the rules table (access.go). With no auth
// store configured every check passes and nothing changes.

type principalKey struct{}

// principalOf returns the caller, or nil when authentication is off.
func principalOf(ctx context.Context) *auth.Principal {
	p, _ := ctx.Value(principalKey{}).(*auth.Principal)
	return p
}

func authError(reason registrar.Reason, meta map[string]string, format string, args ...any) error {
	return &registrar.Error{Reason: reason, Message: string(reason) + ": " + fmt.Sprintf(format, args...), Metadata: meta}
}

// ReloadAuth re-reads the auth file (SIGHUP). On error the tokens in
// force stay in force.
func (s *Server) ReloadAuth() error {
	if s.cfg.Auth == nil {
		return fmt.Errorf("server: no auth file configured")
	}
	if err := s.cfg.Auth.Reload(); err != nil {
		s.log.Error("auth file reload failed; keeping the tokens in force", "path", s.cfg.Auth.Path(), "err", err)
		return err
	}
	s.log.Info("auth file reloaded", "path", s.cfg.Auth.Path())
	s.warnAuth()
	return nil
}

// warnAuth logs what is unsafe about the auth file in force.
func (s *Server) warnAuth() {
	for _, w := range s.cfg.Auth.Warnings() {
		s.log.Warn(w)
	}
}

// open reports the paths served without credentials: health checks, and
// the dashboard's static files under /ui/ and the redirect of / to them
// (they hold no data; the dashboard's API calls carry the user's bearer
// token like any other, and it asks for one when there is none).
func open(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/")
}

// authenticate wraps the mux: every request but the health checks must
// carry credentials. A request whose principal is over its rate limit is
// answered QUOTA_EXCEEDED here, before it costs anything.
func (s *Server) authenticate(next http.Handler) http.Handler {
	store := s.cfg.Auth
	if store == nil {
		if a, ok := s.ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
			return loopbackOnly(next)
		}
		return next // --insecure: served to the network as asked
	}
	ew := connect.NewErrorWriter()
	fail := func(w http.ResponseWriter, r *http.Request, err error) {
		refuseUnread(w, r)
		ce := s.toConnect(err)
		if strings.HasPrefix(r.URL.Path, "/tenure.v1.") && ew.IsSupported(r) {
			_ = ew.Write(w, r, ce.(*connect.Error))
			return
		}
		status := http.StatusUnauthorized
		if connect.CodeOf(ce) == connect.CodeResourceExhausted {
			status = http.StatusTooManyRequests
		}
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tenure"`)
		}
		http.Error(w, ce.(*connect.Error).Message(), status)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		p, expires, err := s.principal(r)
		if err != nil {
			fail(w, r, err)
			return
		}
		if err := s.charge(p, 1); err != nil {
			fail(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		if !expires.IsZero() && !streams[r.URL.Path] {
			// A unary call that waits (an Acquire or Claim queued) ends
			// when its token does: it would act, after the wait, for a
			// caller no longer let in (found from outside: a Claim waiting
			// a minute claimed a task after its token expired). Streams
			// check their token as they go (stillValid).
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadlineCause(ctx, expires, &auth.ExpiredError{At: expires})
			defer cancel()
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// principal finds who sent r: its bearer token, else its verified client
// certificate's subject common name.
func (s *Server) principal(r *http.Request) (p *auth.Principal, expires time.Time, err error) {
	if len(r.Header.Values("Authorization")) > 1 {
		// A proxy before the server might read another one than this.
		return nil, expires, authError(registrar.ReasonUnauthenticated, map[string]string{"credentials": "bearer", "problem": "malformed"},
			"more than one Authorization header: send one")
	}
	token, err := auth.ParseAuthorization(r.Header.Get("Authorization"))
	switch {
	case err == nil:
		p, expires, err := s.cfg.Auth.Authenticate(token, time.Now())
		var exp *auth.ExpiredError
		switch {
		case errors.As(err, &exp):
			return nil, expires, expiredError(exp, "the bearer token expired at %s")
		case err != nil:
			return nil, expires, authError(registrar.ReasonUnauthenticated, map[string]string{"credentials": "bearer", "problem": "unknown_token"},
				"the bearer token is not valid (unknown, or revoked by an auth file reload)")
		}
		return p, expires, nil
	case err != auth.ErrNoCredentials:
		return nil, expires, authError(registrar.ReasonUnauthenticated, map[string]string{"credentials": "bearer", "problem": "malformed"}, "%v", err)
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		if cn := r.TLS.PeerCertificates[0].Subject.CommonName; cn != "" {
			return s.cfg.Auth.Certificate(cn), expires, nil
		}
	}
	how, accepted := `send "Authorization: Bearer <token>"`, "bearer"
	if s.cfg.TLS != nil && s.cfg.TLS.ClientCAs != nil {
		how, accepted = how+" or a client certificate", "bearer,client_certificate"
	}
	return nil, expires, authError(registrar.ReasonUnauthenticated, map[string]string{"credentials": accepted, "problem": "missing"},
		"no credentials: %s", how)
}

// expiredError is the UNAUTHENTICATED answer for a token that expired
// (format has one %s, the time).
func expiredError(exp *auth.ExpiredError, format string) error {
	at := exp.At.UTC().Format(time.RFC3339)
	return authError(registrar.ReasonUnauthenticated, map[string]string{"credentials": "bearer", "problem": "expired", "expired_at": at}, format, at)
}

// streams are the streaming procedures (their token is checked as they
// go, not bounded by a deadline).
var streams = map[string]bool{
	v1c.LeaseServiceWatchProcedure: true, v1c.LeaseServiceKeepAliveProcedure: true, v1c.LeaseServicePipelineProcedure: true,
	v1c.QueueServicePipelineProcedure: true, v1c.PoolServicePipelineProcedure: true, v1c.ClusterServiceSaveSnapshotProcedure: true,
}

// stillValid reports whether the bearer token a stream was opened with
// (its request header h) still names its principal: an auth file reload
// that revoked it ends the streams open with it (checked at each of their
// messages, and every second on a Watch), not only later requests.
func (s *Server) stillValid(ctx context.Context, h http.Header) error {
	p := principalOf(ctx)
	if p == nil || s.cfg.Auth == nil {
		return nil
	}
	token, err := auth.ParseAuthorization(h.Get("Authorization"))
	if err != nil {
		return nil // a client certificate: its connection's, for its life
	}
	q, _, err := s.cfg.Auth.Authenticate(token, time.Now())
	if err == nil && q.Name == p.Name {
		return nil
	}
	if exp := (*auth.ExpiredError)(nil); errors.As(err, &exp) {
		return s.toConnect(expiredError(exp, "the bearer token this stream was opened with expired at %s"))
	}
	return s.toConnect(authError(registrar.ReasonUnauthenticated, map[string]string{"credentials": "bearer", "problem": "revoked"},
		"the bearer token this stream was opened with was revoked by an auth file reload"))
}

// charge takes n requests from p's token bucket, or answers QUOTA_EXCEEDED.
func (s *Server) charge(p *auth.Principal, n int) error {
	l := p.Limiter()
	if l == nil || l.Allow(time.Now(), n) {
		return nil
	}
	return authError(registrar.ReasonQuotaExceeded, map[string]string{
		"quota": "requests_per_second", "limit": strconv.FormatFloat(l.Rate(), 'g', -1, 64),
		"burst": strconv.Itoa(l.Burst()), "principal": p.Name,
	}, "principal %s is over its rate limit of %g requests per second (burst %d)", p.Name, l.Rate(), l.Burst())
}

// authorize checks that the caller may make the call proc with msg (a
// unary request, or one operation of a stream), filling an empty acting
// field (holder, worker, peer) with the caller's name — except for an
// admin acting on a lease, whose holder checkLeases fills in. It does not
// look at state (see checkLeases).
func (s *Server) authorize(ctx context.Context, proc string, msg any) error {
	p := principalOf(ctx)
	if p == nil {
		return nil
	}
	ru, ok := rules[proc]
	if !ok {
		return authError(registrar.ReasonPermissionDenied, map[string]string{"principal": p.Name, "procedure": proc},
			"%s has no access rule; nobody may call it while authentication is on", proc)
	}
	if len(ru.roles) > 0 && !p.HasAny(ru.roles...) {
		return authError(registrar.ReasonPermissionDenied, map[string]string{"principal": p.Name, "procedure": proc, "roles": rolesText(ru.roles)},
			"principal %s may not call %s: it needs the role %s", p.Name, shortProc(proc), rolesText(ru.roles))
	}
	t := ru.target(msg)
	switch {
	case t.whole != "" && !(p.Admin() && p.AllNamespaces()):
		return authError(registrar.ReasonPermissionDenied, map[string]string{"principal": p.Name, "namespace": registrar.DefaultsNamespace, "procedure": proc},
			`principal %s may not %s: that needs admin on namespace "*"`, p.Name, t.whole)
	case t.hasNamespace && !(t.anyNamespace && t.namespace == "") && !p.InNamespace(t.namespace):
		return authError(registrar.ReasonPermissionDenied, map[string]string{"principal": p.Name, "namespace": registrar.OrDefault(t.namespace)},
			"principal %s may not use namespace %s", p.Name, registrar.OrDefault(t.namespace))
	case t.holderWide && t.namespace == "" && !p.AllNamespaces():
		// Without a namespace it would reach the holder's leases in every
		// namespace, the caller's or not (found from outside: an admin of
		// one namespace renewed, and got certificates for, another
		// namespace's leases). One namespace of its own is filled in;
		// otherwise the caller names it.
		if len(p.Namespaces) == 1 && !strings.Contains(p.Namespaces[0], "*") {
			*t.nsField = p.Namespaces[0]
			break
		}
		return authError(registrar.ReasonPermissionDenied, map[string]string{"principal": p.Name, "field": "namespace",
			"namespaces": strings.Join(p.Namespaces, ",")},
			"principal %s may use only the namespaces %s: name the namespace of a request that acts on every lease of a holder",
			p.Name, strings.Join(p.Namespaces, ", "))
	}
	if err := scopeWithin(p, msg); err != nil {
		return err
	}
	if t.acting != nil {
		switch {
		case *t.acting == "" && p.Admin() && (len(t.leases) > 0 || t.byIDs):
			// An admin acting on a lease acts for its holder, whom
			// checkLeases fills in from the lease (Renew needs none).
		case *t.acting == "":
			*t.acting = p.Name
		case *t.acting != p.Name && !p.Admin():
			return authError(registrar.ReasonPermissionDenied, map[string]string{"principal": p.Name, "field": t.field, t.field: *t.acting},
				"principal %s may not act as %s %s: the %s of a request is the authenticated principal", p.Name, t.field, *t.acting, t.field)
		}
	}
	return nil
}

// scopeWithin refuses a lease scope that names a namespace the principal
// may not use: the scope is what Authorize answers from (and what a
// signed certificate carries to other systems), so it may not reach past
// its creator's own authority.
func scopeWithin(p *auth.Principal, msg any) error {
	var sc *tenurev1.Scope
	switch m := msg.(type) {
	case *tenurev1.AcquireRequest:
		sc = m.GetScope()
	case *tenurev1.DeriveRequest:
		sc = m.GetScope()
	}
	for _, ns := range sc.GetNamespaces() {
		if !p.InNamespace(ns) {
			return authError(registrar.ReasonPermissionDenied, map[string]string{"principal": p.Name, "field": "scope.namespaces", "namespace": ns},
				"principal %s may not grant a scope over namespace %s: it may not use that namespace itself", p.Name, ns)
		}
	}
	return nil
}

func rolesText(rs []auth.Role) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return strings.Join(out, " or ")
}

func shortProc(proc string) string { return strings.TrimPrefix(proc, "/tenure.v1.") }

// checkLeases checks, on the member that runs a request, that the leases
// it acts on are the caller's (see leaseAccess), and fills the empty
// holder of an admin's request with the lease's holder (the admin acts
// for it; for an unknown lease, with the admin's name). Unknown ids are
// left to the handler. Renew partitions its ids instead (ownLeases), so
// that a batch answers each refused lease as its own failure.
func (s *Server) checkLeases(ctx context.Context, proc string, msg any) error {
	p := principalOf(ctx)
	if p == nil {
		return nil
	}
	ru, ok := rules[proc]
	if !ok {
		return nil
	}
	tg := ru.target(msg)
	if len(tg.leases) == 0 && len(tg.reads) == 0 {
		return nil
	}
	return s.node.Read(ctx, true, func(mc *statemachine.Machine, t registrar.Tick) error {
		for _, id := range tg.leases {
			if err := leaseAccess(p, mc.Registrar(), id, t); err != nil {
				return err
			}
		}
		if tg.acting != nil && *tg.acting == "" && len(tg.leases) > 0 {
			*tg.acting = p.Name
			if l, err := mc.Registrar().Get(tg.leases[0], t); err == nil {
				*tg.acting = l.Holder
			}
		}
		for _, id := range tg.reads {
			if l, err := mc.Registrar().Get(id, t); err == nil && !p.InNamespace(l.Namespace) {
				return authError(registrar.ReasonLeaseNotFound, map[string]string{"lease_id": id}, "no lease %s", id)
			}
		}
		return nil
	})
}

// ownLeases splits lease ids into those the caller may act on and a
// failure for each other one. Without authentication every id passes.
func (s *Server) ownLeases(ctx context.Context, ids []string) (own []string, denied []registrar.Failure, err error) {
	p := principalOf(ctx)
	if p == nil || len(ids) == 0 {
		return ids, nil, nil
	}
	err = s.node.Read(ctx, true, func(mc *statemachine.Machine, t registrar.Tick) error {
		for _, id := range ids {
			if err := leaseAccess(p, mc.Registrar(), id, t); err != nil {
				denied = append(denied, registrar.Failure{LeaseID: id, Err: err})
			} else {
				own = append(own, id)
			}
		}
		return nil
	})
	return own, denied, err
}

// leaseAccess decides whether p may act on lease id: it must be in p's
// namespaces (else LEASE_NOT_FOUND, as for an unknown id, so nothing about
// other namespaces leaks) and held by p (else NOT_HOLDER, API.md's reason
// for a caller that is not the lease's holder; an admin may act on any).
// A lease's namespace and holder never change, so reading them before
// proposing cannot race with the write. An unknown id passes: the handler
// answers it.
func leaseAccess(p *auth.Principal, r *registrar.Registrar, id string, t registrar.Tick) error {
	l, err := r.Get(id, t)
	switch {
	case err != nil:
		return nil
	case !p.InNamespace(l.Namespace):
		return authError(registrar.ReasonLeaseNotFound, map[string]string{"lease_id": id}, "no lease %s", id)
	case l.Holder != p.Name && !p.Admin():
		return authError(registrar.ReasonNotHolder, map[string]string{"principal": p.Name, "lease_id": id, "holder": l.Holder},
			"principal %s may not act on lease %s: it is not its holder", p.Name, id)
	}
	return nil
}

// filterResponse hides what a read by lease id found outside the
// caller's namespaces: Get answers LEASE_NOT_FOUND, Verify reports the id
// as not found — exactly what an unknown id gets — and Tree leaves out
// the descendants that live in other namespaces.
func filterResponse(ctx context.Context, proc string, resp any) (any, error) {
	p := principalOf(ctx)
	if p == nil {
		return resp, nil
	}
	switch proc {
	case v1c.LeaseServiceGetProcedure:
		if r, ok := resp.(*tenurev1.GetResponse); ok && r.Lease != nil && !p.InNamespace(r.Lease.Namespace) {
			id := r.Lease.LeaseId
			return nil, authError(registrar.ReasonLeaseNotFound, map[string]string{"lease_id": id}, "no lease %s", id)
		}
	case v1c.LeaseServiceTreeProcedure:
		if r, ok := resp.(*tenurev1.TreeResponse); ok {
			r.Leases = slices.DeleteFunc(r.Leases, func(l *tenurev1.Lease) bool { return !p.InNamespace(l.Namespace) })
		}
	case v1c.LeaseServiceVerifyProcedure:
		if r, ok := resp.(*tenurev1.VerifyResponse); ok {
			for i, v := range r.Results {
				if v.Lease != nil && !p.InNamespace(v.Lease.Namespace) {
					r.Results[i] = &tenurev1.VerifyResult{LeaseId: v.LeaseId}
				}
			}
		}
	}
	return resp, nil
}

// authInterceptor authorizes unary calls and filters their answers; for
// streams it checks the stream's role (each message is checked by the
// handler).
type authInterceptor struct{ s *Server }

func (a authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := checkNamespaceOf(req.Spec().Procedure, req.Any()); err != nil {
			return nil, a.s.toConnect(err)
		}
		if principalOf(ctx) == nil {
			return next(ctx, req)
		}
		proc := req.Spec().Procedure
		if err := a.s.authorize(ctx, proc, req.Any()); err != nil {
			return nil, a.s.toConnect(err)
		}
		resp, err := next(ctx, req)
		if exp := (*auth.ExpiredError)(nil); err != nil && errors.As(context.Cause(ctx), &exp) {
			return nil, a.s.toConnect(expiredError(exp, "the bearer token expired at %s, while the call waited"))
		}
		if err != nil {
			return resp, err
		}
		if _, ferr := filterResponse(ctx, proc, resp.Any()); ferr != nil {
			return nil, a.s.toConnect(ferr)
		}
		return resp, nil
	}
}

func (authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		p := principalOf(ctx)
		if p == nil {
			return next(ctx, conn)
		}
		proc := conn.Spec().Procedure
		ru, ok := rules[proc]
		if !ok || len(ru.roles) > 0 && !p.HasAny(ru.roles...) {
			return a.s.toConnect(a.s.authorize(ctx, proc, nil))
		}
		return next(ctx, conn)
	}
}

// WhoAmI answers who the call's credentials belong to.
func (h *clusterService) WhoAmI(ctx context.Context, _ *connect.Request[tenurev1.WhoAmIRequest]) (*connect.Response[tenurev1.WhoAmIResponse], error) {
	p := principalOf(ctx)
	if p == nil {
		return connect.NewResponse(&tenurev1.WhoAmIResponse{}), nil
	}
	resp := &tenurev1.WhoAmIResponse{Authenticated: true, Principal: p.Name, Namespaces: p.Namespaces, Method: "token"}
	if p.Certificate {
		resp.Method = "certificate"
	}
	for _, r := range p.Roles {
		resp.Roles = append(resp.Roles, string(r))
	}
	return connect.NewResponse(resp), nil
}

// loopbackOnly serves only requests addressed to a loopback address or to
// localhost (their Host). A server without authentication listens on
// loopback, and this keeps web pages off it too: a page of another site
// could otherwise reach it through DNS rebinding (a name of the site's
// that it makes resolve to 127.0.0.1), with the browser's fetch.
func loopbackOnly(next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopbackHost(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		refuseUnread(w, r)
		msg := fmt.Sprintf("PERMISSION_DENIED: host %q is not a loopback address or localhost; without --auth-file the server "+
			"answers only requests addressed to one (protection from DNS rebinding)", r.Host)
		if strings.HasPrefix(r.URL.Path, "/tenure.v1.") && ew.IsSupported(r) {
			_ = ew.Write(w, r, wireError(connect.CodePermissionDenied, registrar.ReasonPermissionDenied, map[string]string{"host": r.Host}, msg))
			return
		}
		http.Error(w, msg, http.StatusForbidden)
	})
}

// loopbackHost reports whether host (host or host:port, from a request)
// is localhost, a name under .localhost, or a loopback IP address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	host = strings.TrimSuffix(host, ".") // a fully qualified name: "localhost."
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// refuseUnread prepares the refusal of a request whose body is not read:
// over HTTP/1.x the connection closes after the answer. Go's server
// would otherwise read the body before it answers (to keep the
// connection for the next request), and a client that sends headers and
// never its body, with no credentials, held the connection and got no
// answer at all. HTTP/2 answers a stream at once whatever its body.
func refuseUnread(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}
