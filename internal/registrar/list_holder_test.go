package registrar_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// List of one holder's active leases reads the holder's own list; its
// pages are exactly those of the general scan (forced here by naming the
// state twice): same leases, same order, same tokens.
func TestListActiveOfHolderMatchesScan(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rng := rand.New(rand.NewPCG(5, 6))
	holders := []string{"h1", "h2", "h3"}
	for i := range 300 {
		res := fmt.Sprintf("%c/%d", "abc"[rng.IntN(3)], rng.IntN(40))
		h := holders[rng.IntN(len(holders))]
		var opts []func(*logpb.Acquire)
		opts = append(opts, ttl(int64(1000+rng.IntN(20_000))))
		if rng.IntN(3) == 0 {
			opts = append(opts, func(a *logpb.Acquire) { a.Mode = tenurev1.Mode_MODE_SHARED })
		}
		out := e.after(int64(rng.IntN(50))).acquire(res, h, opts...)
		if out.Err == nil && out.Lease != nil && rng.IntN(4) == 0 {
			e.release(out.Lease.ID, h)
		}
		_ = i
	}
	// Some active leases are past their expiry, not yet marked.
	e.after(5000)
	for _, h := range append(holders, "nobody") {
		for _, prefix := range []string{"", "a/", "b/1", "z"} {
			for _, size := range []int{1, 3, 100} {
				fast := pages(t, e, registrar.ListQuery{Holder: h, Prefix: prefix, PageSize: size, States: []registrar.State{registrar.Active}})
				scan := pages(t, e, registrar.ListQuery{Holder: h, Prefix: prefix, PageSize: size, States: []registrar.State{registrar.Active, registrar.Active}})
				if !slices.Equal(fast, scan) {
					t.Fatalf("holder %s prefix %q size %d:\n fast %v\n scan %v", h, prefix, size, fast, scan)
				}
			}
		}
	}
	if n := len(pages(t, e, registrar.ListQuery{Holder: "h1", States: []registrar.State{registrar.Active}})); n == 0 {
		t.Fatal("no active lease of h1: the comparison saw nothing")
	}
}

// pages lists every page of q, as "id@token" lines.
func pages(t *testing.T, e *env, q registrar.ListQuery) []string {
	t.Helper()
	var out []string
	for {
		ls, next, err := e.m.Registrar().List(q, e.tick)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.State != registrar.Active {
				t.Fatalf("List of active leases returned %s in state %v", l.ID, l.State)
			}
			out = append(out, l.ID+"@"+next)
		}
		if next == "" {
			return out
		}
		q.PageToken = next
	}
}
