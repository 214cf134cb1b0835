package tenure

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

func TestParseRoutes(t *testing.T) {
	rt, err := ParseRoutes(" orders = 10.0.1.1:7070, 10.0.1.2:7070 ;team-*=https://t.example\n*=10.0.3.1:7070;")
	if err != nil {
		t.Fatal(err)
	}
	want := Routes{
		"orders": {"10.0.1.1:7070", "10.0.1.2:7070"},
		"team-*": {"https://t.example"},
		"*":      {"10.0.3.1:7070"},
	}
	if len(rt) != len(want) {
		t.Fatalf("ParseRoutes = %v, want %v", rt, want)
	}
	for k, eps := range want {
		if !slices.Equal(rt[k], eps) {
			t.Errorf("route %q = %v, want %v", k, rt[k], eps)
		}
	}

	for _, tc := range []struct{ in, wantErr string }{
		{"", "no route given"},
		{" ; \n", "no route given"},
		{"orders", "want NAMESPACE=ENDPOINT"},
		{"orders=", `"orders" has no endpoint`},
		{"=10.0.0.1:7070", "a route has no namespace"},
		{"a=10.0.0.1:7070;a=10.0.0.2:7070", `"a" is routed twice`},
		{"a b=10.0.0.1:7070", "is not a namespace"},
		{"a*b=10.0.0.1:7070", "is not a namespace"},
		{"a=10.0.0.1", "has no port"},
		{"a=ftp://10.0.0.1:21", "is not http or https"},
	} {
		if _, err := ParseRoutes(tc.in); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseRoutes(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestRoutesRoute(t *testing.T) {
	rt := Routes{
		"orders":  {"a:1"},
		"team-*":  {"b:1"},
		"team-x*": {"c:1"},
		"*":       {"d:1"},
	}
	for _, tc := range []struct{ ns, key string }{
		{"orders", "orders"},
		{"orders-2", "*"},
		{"team-a", "team-*"},
		{"team-", "team-*"},
		{"team-xyz", "team-x*"}, // the longer prefix
		{"team-x", "team-x*"},
		{"default", "*"},
	} {
		key, eps, err := rt.Route(tc.ns)
		if err != nil || key != tc.key || !slices.Equal(eps, rt[tc.key]) {
			t.Errorf("Route(%q) = %q %v %v, want %q", tc.ns, key, eps, err, tc.key)
		}
	}
	delete(rt, "*")
	if _, _, err := rt.Route("default"); !errors.Is(err, ErrNoRoute) {
		t.Errorf("Route of an unrouted namespace = %v, want ErrNoRoute", err)
	}
	// A key that is a prefix routes its prefix, not the name with a star.
	if key, _, err := rt.Route("team-*"); err != nil || key != "team-*" {
		t.Errorf(`Route("team-*") = %q, %v`, key, err)
	}
}

// Two independent clusters, each namespace on the one its route names:
// the Router's Clients acquire there and only there, fences counting on
// each cluster apart, and Close releases the leases on both.
func TestRouterTwoClusters(t *testing.T) {
	t.Parallel()
	one, two := startRealServer(t), startRealServer(t)
	ctx := ctxTimeout(t, 30*time.Second)
	r, err := NewRouter(Routes{"*": {one.api}, "team-*": {two.api}}, WithHolder("router-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })

	orders, err := r.Client("orders")
	if err != nil {
		t.Fatal(err)
	}
	teamA, err := r.Client("team-a")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.Client("orders"); again != orders {
		t.Error("a second Client(orders) made another Client")
	}
	billing, err := r.Client("billing")
	if err != nil || billing == orders {
		t.Fatalf("Client(billing) = %p, %v, want its own Client", billing, err)
	}
	r.mu.Lock()
	transports := len(r.transports)
	r.mu.Unlock()
	if transports != 2 {
		t.Errorf("%d transports for two clusters, want one each", transports)
	}
	if orders.Namespace() != "orders" || teamA.Namespace() != "team-a" || orders.Holder() != "router-test" {
		t.Errorf("Clients: %s/%s, %s/%s", orders.Namespace(), orders.Holder(), teamA.Namespace(), teamA.Holder())
	}
	if eps, err := r.Endpoints("team-b"); err != nil || len(eps) != 1 || eps[0] != two.api {
		t.Errorf("Endpoints(team-b) = %v, %v, want [%s]", eps, err, two.api)
	}

	l1, err := orders.Acquire(ctx, "shared-name", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := teamA.Acquire(ctx, "shared-name", TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	probeOne, probeTwo := one.client(t), two.client(t)
	for _, tc := range []struct {
		probe *Client
		l     *Lease
		ns    string
		here  bool
	}{
		{probeOne, l1, "orders", true},
		{probeTwo, l1, "orders", false},
		{probeTwo, l2, "team-a", true},
		{probeOne, l2, "team-a", false},
	} {
		pb, err := tc.probe.Get(ctx, tc.l.ID())
		switch {
		case tc.here && (err != nil || pb.GetNamespace() != tc.ns || pb.GetState() != tenurev1.State_STATE_ACTIVE):
			t.Errorf("lease %s on its cluster: %v, %v", tc.l.ID(), pb, err)
		case !tc.here && !errors.Is(err, ErrLeaseNotFound):
			t.Errorf("lease %s on the other cluster: %v, %v, want LEASE_NOT_FOUND", tc.l.ID(), pb, err)
		}
	}

	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, l := range []*Lease{l1, l2} {
		if !errors.Is(l.Err(), ErrReleased) {
			t.Errorf("lease %s after the Router's Close: %v, want released", l.ID(), l.Err())
		}
	}
	if pb, err := probeTwo.Get(ctx, l2.ID()); err != nil || pb.GetState() != tenurev1.State_STATE_RELEASED {
		t.Errorf("team-a lease at its registrar after Close: %v, %v", pb.GetState(), err)
	}
	if _, err := r.Client("team-c"); !errors.Is(err, ErrClientClosed) {
		t.Errorf("Client after Close = %v, want ErrClientClosed", err)
	}
	if _, err := orders.Get(ctx, l1.ID()); !errors.Is(err, ErrClientClosed) {
		t.Errorf("a routed Client after the Router's Close: %v, want ErrClientClosed", err)
	}
}

func TestNewRouterRefuses(t *testing.T) {
	if _, err := NewRouter(nil); err == nil {
		t.Error("NewRouter with no routes succeeded")
	}
	if _, err := NewRouter(Routes{"a": {"nohost"}}); err == nil {
		t.Error("NewRouter with a bad endpoint succeeded")
	}
	if _, err := NewRouter(Routes{"*": {"127.0.0.1:1"}}, WithHolder("")); err == nil {
		t.Error("NewRouter with an empty holder succeeded")
	}
	r, err := NewRouter(Routes{"a": {"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Client("b"); !errors.Is(err, ErrNoRoute) {
		t.Errorf("Client of an unrouted namespace = %v, want ErrNoRoute", err)
	}
	if _, err := r.Client(""); err == nil {
		t.Error("Client of the empty namespace succeeded")
	}
}
