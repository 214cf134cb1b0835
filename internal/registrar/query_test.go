package registrar_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/internal/registrar"
)

// Verify (seed 002 §3.4 VERIFY_ALL): one result per requested id, in
// request order, found=false for an unknown one.
func TestVerify_RequestOrder_Seed002(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.mustAcquire("a", "agent-1", ttl(10_000))
	b := e.mustAcquire("b", "agent-1", ttl(2000))
	c := e.mustAcquire("c", "agent-1")
	e.release(c.ID, "agent-1")
	w, tag, seq, _ := registrar.ParseLeaseID(a.ID)
	unknown := registrar.FormatLeaseID(w, tag, seq+1000)
	e.after(3000) // b is past its expiry, no record yet
	ids := []string{c.ID, unknown, a.ID, "not-a-lease", b.ID, a.ID}
	res, err := e.m.Registrar().Verify(ids, e.tick)
	if err != nil || len(res) != len(ids) {
		t.Fatalf("verify: %v %v", res, err)
	}
	want := []struct {
		found bool
		state registrar.State
	}{
		{true, registrar.Released}, {false, 0}, {true, registrar.Active}, {false, 0}, {true, registrar.Expired}, {true, registrar.Active},
	}
	for i, r := range res {
		if r.LeaseID != ids[i] || r.Found != want[i].found {
			t.Fatalf("result %d: %+v, want id %s found %v", i, r, ids[i], want[i].found)
		}
		if r.Found && (r.Lease.State != want[i].state || r.Lease.ID != ids[i] || r.Lease.Holder != "agent-1") {
			t.Fatalf("result %d: %+v", i, r.Lease)
		}
	}
	if res[2].Lease.Remaining != 7000*1e6 || res[2].Lease.Fence != a.Fence {
		t.Fatalf("time left %v fence %d", res[2].Lease.Remaining, res[2].Lease.Fence)
	}
	// An empty list is an empty answer; a malformed id is a bad request.
	if res, err := e.m.Registrar().Verify(nil, e.tick); err != nil || len(res) != 0 {
		t.Fatalf("empty verify: %v %v", res, err)
	}
	_, err = e.m.Registrar().Verify([]string{a.ID, ""}, e.tick)
	wantReason(t, err, registrar.ReasonInvalidArgument)
	wantMeta(t, err, "field", "lease_ids[1]") // named as Renew names it
}

func TestGet(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("a", "w1")
	reg := e.m.Registrar()
	if got, err := reg.Get(l.ID, e.tick); err != nil || got.ID != l.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	_, err := reg.Get("", e.tick)
	wantReason(t, err, registrar.ReasonInvalidArgument)
	_, err = reg.Get("01ARZ3NDEKTSV4RRFFQ69G5FAV", e.tick)
	wantReason(t, err, registrar.ReasonLeaseNotFound)
	wantMeta(t, err, "lease_id", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
}

// listFixture makes leases in the default namespace over several resources,
// holders and states, plus one in another namespace.
func listFixture(t *testing.T) *env {
	e := setup(t)
	rel := e.mustAcquire("jobs/a", "w1")
	e.release(rel.ID, "w1")
	e.mustAcquire("jobs/a", "w2")
	e.mustAcquire("jobs/b", "w1", ttl(1000))
	e.mustAcquire("jobs/c", "w1")
	rev := e.mustAcquire("orders/1", "w2")
	e.revoke(rev.ID, "ops")
	e.mustAcquire("orders/2", "w3", shared)
	e.mustAcquire("orders/2", "w1", shared)
	e.mustAcquire("jobs/a", "w9", inNS("tenant-b"))
	e.after(1000) // jobs/b (w1) is past its expiry, not yet recorded
	return e
}

func describe(ls []registrar.Lease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s %s %s", l.Resource, l.Holder, l.State))
	}
	return out
}

func TestList_Filters(t *testing.T) {
	t.Parallel()
	e := listFixture(t)
	cases := []struct {
		name string
		q    registrar.ListQuery
		want []string
	}{
		{"everything_in_default", registrar.ListQuery{}, strs(
			"jobs/a w1 RELEASED", "jobs/a w2 ACTIVE", "jobs/b w1 EXPIRED", "jobs/c w1 ACTIVE",
			"orders/1 w2 REVOKED", "orders/2 w3 ACTIVE", "orders/2 w1 ACTIVE")},
		{"explicit_default", registrar.ListQuery{Namespace: "default", Prefix: "orders/"}, strs(
			"orders/1 w2 REVOKED", "orders/2 w3 ACTIVE", "orders/2 w1 ACTIVE")},
		{"other_namespace", registrar.ListQuery{Namespace: "tenant-b"}, strs("jobs/a w9 ACTIVE")},
		{"unknown_namespace", registrar.ListQuery{Namespace: "nobody"}, nil},
		{"prefix", registrar.ListQuery{Prefix: "jobs/"}, strs(
			"jobs/a w1 RELEASED", "jobs/a w2 ACTIVE", "jobs/b w1 EXPIRED", "jobs/c w1 ACTIVE")},
		{"prefix_exact_resource", registrar.ListQuery{Prefix: "jobs/b"}, strs("jobs/b w1 EXPIRED")},
		{"prefix_no_match", registrar.ListQuery{Prefix: "zzz"}, nil},
		{"holder", registrar.ListQuery{Holder: "w1"}, strs(
			"jobs/a w1 RELEASED", "jobs/b w1 EXPIRED", "jobs/c w1 ACTIVE", "orders/2 w1 ACTIVE")},
		{"active", registrar.ListQuery{States: []registrar.State{registrar.Active}}, strs(
			"jobs/a w2 ACTIVE", "jobs/c w1 ACTIVE", "orders/2 w3 ACTIVE", "orders/2 w1 ACTIVE")},
		{"terminal_states", registrar.ListQuery{States: []registrar.State{registrar.Released, registrar.Revoked, registrar.Expired}}, strs(
			"jobs/a w1 RELEASED", "jobs/b w1 EXPIRED", "orders/1 w2 REVOKED")},
		{"holder_prefix_state", registrar.ListQuery{Holder: "w1", Prefix: "jobs/", States: []registrar.State{registrar.Active}}, strs(
			"jobs/c w1 ACTIVE")},
		{"resource", registrar.ListQuery{Resource: "jobs/a"}, strs("jobs/a w1 RELEASED", "jobs/a w2 ACTIVE")},
		{"resource_is_exact", registrar.ListQuery{Resource: "jobs/"}, nil},
		{"resource_holder_active", registrar.ListQuery{Resource: "orders/2", Holder: "w1", States: []registrar.State{registrar.Active}}, strs(
			"orders/2 w1 ACTIVE")},
		{"resource_within_prefix", registrar.ListQuery{Prefix: "orders/", Resource: "orders/1"}, strs("orders/1 w2 REVOKED")},
		{"resource_outside_prefix", registrar.ListQuery{Prefix: "jobs/", Resource: "orders/2"}, nil},
		{"resource_unknown", registrar.ListQuery{Resource: "jobs/zz"}, nil},
		{"expired_unmarked", registrar.ListQuery{ExpiredUnmarked: true}, strs("jobs/b w1 EXPIRED")},
		{"expired_unmarked_active", registrar.ListQuery{ExpiredUnmarked: true, States: []registrar.State{registrar.Active}}, nil},
		{"expired_unmarked_holder", registrar.ListQuery{ExpiredUnmarked: true, Holder: "w2"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, next, err := e.m.Registrar().List(c.q, e.tick)
			if err != nil || next != "" {
				t.Fatalf("list: next %q err %v", next, err)
			}
			if d := describe(got); !slices.Equal(d, c.want) {
				t.Fatalf("got  %q\nwant %q", d, c.want)
			}
		})
	}
}

// ExpiredUnmarked lists a lease past its expiry until a record marks it
// expired, and not after; a page token of it is its own.
func TestList_ExpiredUnmarked(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.mustAcquire("a", "w1", ttl(1000))
	b := e.mustAcquire("b", "w1", ttl(1000))
	e.mustAcquire("c", "w1", ttl(5000))
	reg := e.m.Registrar()
	unmarked := registrar.ListQuery{ExpiredUnmarked: true}
	if got, _, err := reg.List(unmarked, e.tick); err != nil || len(got) != 0 {
		t.Fatalf("before any expiry: %q %v", describe(got), err)
	}
	e.after(1000) // a and b are due: read expired, not marked
	if got, _, err := reg.List(unmarked, e.tick); err != nil || !slices.Equal(describe(got), strs("a w1 EXPIRED", "b w1 EXPIRED")) {
		t.Fatalf("past the expiry: %q %v", describe(got), err)
	}
	page, next, err := reg.List(registrar.ListQuery{ExpiredUnmarked: true, PageSize: 1}, e.tick)
	if err != nil || len(page) != 1 || page[0].ID != a.ID || next == "" {
		t.Fatalf("first page: %q %q %v", describe(page), next, err)
	}
	_, _, err = reg.List(registrar.ListQuery{PageToken: next}, e.tick)
	wantReason(t, err, registrar.ReasonInvalidArgument) // issued for other filters
	// Any command applied from their expiry on records it (the expirer's
	// Expire, or a clock tick as here).
	if out := e.advance(); out.Err != nil {
		t.Fatal(out.Err)
	}
	if got, _, err := reg.List(unmarked, e.tick); err != nil || len(got) != 0 {
		t.Fatalf("after the expiries were recorded: %q %v", describe(got), err)
	}
	got, _, err := reg.List(registrar.ListQuery{States: []registrar.State{registrar.Expired}}, e.tick)
	if err != nil || len(got) != 2 || got[1].ID != b.ID {
		t.Fatalf("expired leases after the records: %q %v", describe(got), err)
	}
}

func TestList_BadQueries(t *testing.T) {
	t.Parallel()
	e := listFixture(t)
	_, tok, err := e.m.Registrar().List(registrar.ListQuery{PageSize: 1}, e.tick)
	if err != nil || tok == "" {
		t.Fatalf("first page: token %q, %v", tok, err)
	}
	cases := []struct {
		name  string
		q     registrar.ListQuery
		field string
	}{
		{"page_size_negative", registrar.ListQuery{PageSize: -1}, "page_size"},
		{"page_size_too_big", registrar.ListQuery{PageSize: registrar.MaxPageSize + 1}, "page_size"},
		{"garbage_token", registrar.ListQuery{PageToken: "!!!"}, "page_token"},
		{"base64_garbage_token", registrar.ListQuery{PageToken: "AXp6eg"}, "page_token"},
		{"token_of_another_prefix", registrar.ListQuery{Prefix: "zzz", PageToken: tok}, "page_token"},
		{"token_of_another_holder", registrar.ListQuery{Holder: "w1", PageToken: tok}, "page_token"},
		{"token_of_other_states", registrar.ListQuery{States: []registrar.State{registrar.Active}, PageToken: tok}, "page_token"},
		{"token_of_almost_every_state", registrar.ListQuery{States: []registrar.State{registrar.Active, registrar.Released, registrar.Expired}, PageToken: tok}, "page_token"},
		{"token_of_another_namespace", registrar.ListQuery{Namespace: "other", PageToken: tok}, "page_token"},
		{"unknown_state", registrar.ListQuery{States: []registrar.State{9}}, "states"},
		{"bad_holder", registrar.ListQuery{Holder: "w\n1"}, "holder"},
		{"bad_resource", registrar.ListQuery{Resource: "a\nb"}, "resource"},
		{"token_of_another_resource", registrar.ListQuery{Resource: "jobs/a", PageToken: tok}, "page_token"},
		{"bad_namespace", registrar.ListQuery{Namespace: string(make([]byte, 129))}, "namespace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := e.m.Registrar().List(c.q, e.tick)
			wantReason(t, err, registrar.ReasonInvalidArgument)
			wantMeta(t, err, "field", c.field)
		})
	}
	// One resource's leases page like the rest.
	q := registrar.ListQuery{Resource: "jobs/a", PageSize: 1}
	first, tok2, err := e.m.Registrar().List(q, e.tick)
	q.PageToken = tok2
	second, tok3, err2 := e.m.Registrar().List(q, e.tick)
	if err != nil || err2 != nil || len(first) != 1 || len(second) != 1 || first[0].Fence >= second[0].Fence || tok3 != "" {
		t.Fatalf("paging one resource: %v %v, %v %v, next %q", describe(first), err, describe(second), err2, tok3)
	}
	// Naming every state is the same query as naming none, and "default"
	// the same as no namespace: the token carries on.
	every := []registrar.State{registrar.Revoked, registrar.Active, registrar.Expired, registrar.Released}
	if _, _, err := e.m.Registrar().List(registrar.ListQuery{Namespace: "default", States: every, PageToken: tok}, e.tick); err != nil {
		t.Fatalf("token with every state named: %v", err)
	}
}

// Paging walks every lease exactly once in (resource, fence) order, and
// leases added or ended between pages neither repeat nor vanish.
func TestList_StablePaging(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 2, 3, 5, 100} {
		t.Run(fmt.Sprint("page_size_", size), func(t *testing.T) {
			t.Parallel()
			e := listFixture(t)
			all, _, _ := e.m.Registrar().List(registrar.ListQuery{}, e.tick)
			var got []registrar.Lease
			tok, pages := "", 0
			for {
				page, next, err := e.m.Registrar().List(registrar.ListQuery{PageSize: size, PageToken: tok}, e.tick)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > size || (next != "" && len(page) != size) {
					t.Fatalf("page of %d with size %d (next %q)", len(page), size, next)
				}
				got = append(got, page...)
				pages++
				if next == "" {
					break
				}
				tok = next
			}
			if d, w := describe(got), describe(all); !slices.Equal(d, w) {
				t.Fatalf("paged %q\nwant  %q", d, w)
			}
			if want := (len(all) + size - 1) / size; pages != want {
				t.Fatalf("%d pages, want %d", pages, want)
			}
		})
	}

	t.Run("changes_between_pages", func(t *testing.T) {
		t.Parallel()
		e := listFixture(t)
		page1, tok, err := e.m.Registrar().List(registrar.ListQuery{PageSize: 3}, e.tick)
		if err != nil || tok == "" {
			t.Fatalf("page 1: %v %q", err, tok)
		}
		// After page 1 (which ends inside jobs/b): a new lease on an
		// earlier resource, one on a later resource, and a release.
		e.mustAcquire("aaa/0", "w5")
		e.mustAcquire("zzz/9", "w5")
		for _, l := range e.m.Registrar().Active("", "jobs/c", e.tick) {
			e.release(l.ID, l.Holder)
		}
		var rest []registrar.Lease
		for tok != "" {
			var page []registrar.Lease
			page, tok, err = e.m.Registrar().List(registrar.ListQuery{PageSize: 3, PageToken: tok}, e.tick)
			if err != nil {
				t.Fatal(err)
			}
			rest = append(rest, page...)
		}
		want := strs("jobs/c w1 RELEASED", "orders/1 w2 REVOKED", "orders/2 w3 ACTIVE", "orders/2 w1 ACTIVE", "zzz/9 w5 ACTIVE")
		if d := describe(rest); !slices.Equal(d, want) {
			t.Fatalf("rest %q\nwant %q (page 1 was %q)", d, want, describe(page1))
		}
	})
}

// Counts by state and waiters, per namespace.
func TestCounts(t *testing.T) {
	t.Parallel()
	e := listFixture(t)
	e.advance() // record the due expiry: counts follow records
	e.acquire("jobs/a", "w7", wait(60_000))
	a, rel, exp, rev, w := e.m.Registrar().Counts("")
	if a != 4 || rel != 1 || exp != 1 || rev != 1 || w != 1 {
		t.Fatalf("counts active %d released %d expired %d revoked %d waiters %d", a, rel, exp, rev, w)
	}
	if a, _, _, _, _ := e.m.Registrar().Counts("tenant-b"); a != 1 {
		t.Fatalf("tenant-b active %d", a)
	}
	if a, rel, exp, rev, w := e.m.Registrar().Counts("nobody"); a+rel+exp+rev+w != 0 {
		t.Fatal("counts for an unknown namespace")
	}
}

func TestByHolderAndActive(t *testing.T) {
	t.Parallel()
	e := listFixture(t)
	reg := e.m.Registrar()
	got := describe(reg.ByHolder("w1", "", e.tick))
	if want := strs("jobs/c w1 ACTIVE", "orders/2 w1 ACTIVE"); !slices.Equal(got, want) {
		t.Fatalf("by holder %q, want %q", got, want)
	}
	if got := describe(reg.ByHolder("w9", "tenant-b", e.tick)); len(got) != 1 {
		t.Fatalf("by holder in namespace %q", got)
	}
	if got := describe(reg.Active("", "orders/2", e.tick)); !slices.Equal(got, strs("orders/2 w3 ACTIVE", "orders/2 w1 ACTIVE")) {
		t.Fatalf("active %q", got)
	}
}
