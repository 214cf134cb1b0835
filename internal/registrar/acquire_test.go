package registrar_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// At most one active exclusive lease per resource; shared leases coexist
// with each other and never with an exclusive one (INV-0402, DESIGN §1.1).
func TestAcquire_ModeCompatibility_INV0402(t *testing.T) {
	t.Parallel()
	mode := func(sh bool) func(*logpb.Acquire) {
		if sh {
			return shared
		}
		return func(*logpb.Acquire) {}
	}
	cases := []struct {
		name          string
		first, second bool // shared?
		wantHeld      bool
	}{
		{"exclusive_then_exclusive", false, false, true},
		{"exclusive_then_shared", false, true, true},
		{"shared_then_exclusive", true, false, true},
		{"shared_then_shared", true, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			first := e.mustAcquire("orders/42", "w1", mode(c.first))
			out := e.acquire("orders/42", "w2", mode(c.second))
			if c.wantHeld {
				wantReason(t, out.Err, registrar.ReasonLeaseHeld)
				var he *registrar.HeldError
				if !errors.As(out.Err, &he) || he.LeaseID != first.ID {
					t.Fatalf("held error %v does not name %s", out.Err, first.ID)
				}
				if got := e.activeHolders("", "orders/42"); len(got) != 1 || got[0] != "w1" {
					t.Fatalf("active holders %v, want [w1]", got)
				}
				return
			}
			if out.Err != nil || out.Lease == nil {
				t.Fatalf("shared next to shared: %v", out.Err)
			}
			if out.Lease.Mode != registrar.Shared || out.Lease.Fence <= first.Fence {
				t.Fatalf("second shared lease %+v", out.Lease)
			}
			if got := e.activeHolders("", "orders/42"); len(got) != 2 {
				t.Fatalf("active holders %v, want both", got)
			}
		})
	}
}

func TestAcquire_ResourcesAndNamespacesAreIndependent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.mustAcquire("orders/42", "w1")
	b := e.mustAcquire("orders/43", "w2")
	c := e.mustAcquire("orders/42", "w3", inNS("tenant-b"))
	if a.Namespace != registrar.DefaultNamespace || c.Namespace != "tenant-b" {
		t.Fatalf("namespaces %q %q", a.Namespace, c.Namespace)
	}
	if a.ID == b.ID || a.ID == c.ID || b.ID == c.ID {
		t.Fatal("lease ids collide")
	}
	// An explicit "default" is the same namespace as "".
	wantReason(t, e.acquire("orders/42", "w4", inNS("default")).Err, registrar.ReasonLeaseHeld)
}

func TestAcquire_GrantFields(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.at(5000)
	mark := e.mark()
	l := e.mustAcquire("orders/42", "w1", ttl(30_000))
	e.wantRecords(mark, "issued w1")
	if l.State != registrar.Active || l.Mode != registrar.Exclusive || l.Holder != "w1" || l.Resource != "orders/42" {
		t.Fatalf("lease %+v", l)
	}
	if l.IssuedTick != 5000 || l.ExpiresTick != 35_000 || l.TTL != 30*time.Second {
		t.Fatalf("ticks %d..%d ttl %v", l.IssuedTick, l.ExpiresTick, l.TTL)
	}
	if l.IssuedAt.UnixMilli() != wallAt(5000) || l.ExpiresAt.Sub(l.IssuedAt) != 30*time.Second {
		t.Fatalf("wall times %v %v", l.IssuedAt, l.ExpiresAt)
	}
	if l.IssuedAt.Location() != time.UTC || l.IssuedAt.Format(time.RFC3339)[19:] != "Z" {
		t.Fatalf("wall time not UTC: %v", l.IssuedAt)
	}
	if l.Remaining != 30*time.Second || l.RenewalCount != 0 || !l.TerminatedAt.IsZero() {
		t.Fatalf("lease %+v", l)
	}
}

// MODE_UNSPECIFIED in a request means exclusive (API.md conventions).
func TestAcquire_UnspecifiedModeIsExclusive(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1", func(a *logpb.Acquire) { a.Mode = tenurev1.Mode_MODE_UNSPECIFIED })
	if l.Mode != registrar.Exclusive {
		t.Fatalf("mode %v", l.Mode)
	}
	wantReason(t, e.acquire("orders/42", "w2", shared).Err, registrar.ReasonLeaseHeld)
}

// LEASE_HELD names the lease in the way: id, holder, fence, time left
// (API.md errors; CTR-0501 WorkAlreadyLeased carries the existing lease).
func TestAcquire_LeaseHeldNamesTheLease_CTR0501(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		holder string // of the second request
		mode   func(*logpb.Acquire)
	}{
		{"other_holder", "w2", func(*logpb.Acquire) {}},
		{"same_holder", "w1", func(*logpb.Acquire) {}}, // a retry can adopt its own lease
		{"shared_request", "w2", shared},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1", ttl(30_000))
			e.after(1800)
			var out registrar.Outcome
			e.unchanged(func() { out = e.acquire("orders/42", c.holder, c.mode) })
			wantReason(t, out.Err, registrar.ReasonLeaseHeld)
			wantErrIs(t, out.Err, registrar.ErrLeaseHeld)
			var he *registrar.HeldError
			if !errors.As(out.Err, &he) {
				t.Fatalf("%T is not a *HeldError", out.Err)
			}
			if he.LeaseID != l.ID || he.Holder != "w1" || he.Fence != l.Fence || he.Remaining != 28200*time.Millisecond ||
				he.Resource != "orders/42" || he.Namespace != "default" || he.Mode != registrar.Exclusive || he.WaitEnded {
				t.Fatalf("held error %+v", he)
			}
			wantMessagePrefix(t, out.Err)
			want := "LEASE_HELD: orders/42 is held by lease " + l.ID + " (holder w1, fence " +
				strconv.FormatUint(l.Fence, 10) + ", 28.2s left)"
			if out.Err.Error() != want {
				t.Fatalf("message %q, want %q", out.Err.Error(), want)
			}
			ge := registrar.ToError(out.Err)
			if ge.Reason != registrar.ReasonLeaseHeld || ge.Message != want {
				t.Fatalf("ToError %+v", ge)
			}
			wantMeta(t, out.Err, "lease_id", l.ID, "holder", "w1", "fence", strconv.FormatUint(l.Fence, 10),
				"remaining_ms", "28200", "resource", "orders/42", "namespace", "default", "mode", "EXCLUSIVE",
				"waiters", "0", "wait_ended", "false")
		})
	}
}

// TTL: omitted → policy default (60 s); floor 1 s; max 300 s; 0 or
// negative → TTL_OUT_OF_RANGE (API.md conventions; INV-0302).
func TestAcquire_TTLPolicy_INV0302(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		ttl     *int64
		want    registrar.Reason
		wantTTL int64
	}{
		{"omitted_is_default_60s", nil, "", 60_000},
		{"floor_1s", ms(1000), "", 1000},
		{"below_floor", ms(999), registrar.ReasonTTLOutOfRange, 0},
		{"max_300s", ms(300_000), "", 300_000},
		{"above_max", ms(300_001), registrar.ReasonTTLOutOfRange, 0},
		{"zero", ms(0), registrar.ReasonTTLOutOfRange, 0},
		{"negative", ms(-1000), registrar.ReasonTTLOutOfRange, 0},
		{"absurdly_long", ms(1 << 50), registrar.ReasonTTLOutOfRange, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var out registrar.Outcome
			opt := func(a *logpb.Acquire) { a.TtlMs = c.ttl }
			if c.want != "" {
				e.unchanged(func() { out = e.acquire("r", "w1", opt) })
				wantReason(t, out.Err, c.want)
				wantErrIs(t, out.Err, registrar.ErrTTLOutOfRange)
				wantMeta(t, out.Err, "field", "ttl")
				wantMessagePrefix(t, out.Err)
				return
			}
			out = e.acquire("r", "w1", opt)
			if out.Err != nil {
				t.Fatal(out.Err)
			}
			if got := int64(out.Lease.ExpiresTick - out.Lease.IssuedTick); got != c.wantTTL || out.Lease.TTL != registrar.Dur(c.wantTTL) {
				t.Fatalf("ttl %d (%v), want %d", got, out.Lease.TTL, c.wantTTL)
			}
		})
	}
}

// Per-namespace policy moves the default, floor and max.
func TestAcquire_TTLNamespacePolicy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("fast", &tenurev1.NamespacePolicy{
		DefaultTtl: durationpb.New(2 * time.Second),
		MinTtl:     durationpb.New(100 * time.Millisecond),
		MaxTtl:     durationpb.New(10 * time.Second),
	})
	l := e.mustAcquire("r", "w1", inNS("fast"))
	if l.TTL != 2*time.Second {
		t.Fatalf("default ttl %v", l.TTL)
	}
	e.mustAcquire("r2", "w1", inNS("fast"), ttl(100))
	wantReason(t, e.acquire("r3", "w1", inNS("fast"), ttl(99)).Err, registrar.ReasonTTLOutOfRange)
	wantReason(t, e.acquire("r3", "w1", inNS("fast"), ttl(10_001)).Err, registrar.ReasonTTLOutOfRange)
	// The default namespace keeps the server defaults.
	if l := e.mustAcquire("r", "w1"); l.TTL != 60*time.Second {
		t.Fatalf("default namespace ttl %v", l.TTL)
	}
}

// Fences are strictly increasing per resource across release, expiry,
// revoke and transfer, and every shared lease gets its own (DESIGN §1.1).
func TestFence_StrictlyIncreasingPerResource(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var fences []uint64
	note := func(l registrar.Lease) { fences = append(fences, l.Fence) }

	l := e.mustAcquire("orders/42", "w1", ttl(5000))
	note(l)
	e.release(l.ID, "w1")
	l = e.mustAcquire("orders/42", "w2", ttl(5000))
	note(l)
	e.after(5000) // expiry
	l = e.mustAcquire("orders/42", "w3", ttl(5000))
	note(l)
	tr := e.transfer(l.ID, "w3", "w4", nil)
	if tr.Err != nil {
		t.Fatal(tr.Err)
	}
	note(*tr.Lease)
	e.revoke(tr.Lease.ID, "ops")
	a := e.mustAcquire("orders/42", "r1", shared)
	b := e.mustAcquire("orders/42", "r2", shared)
	note(a)
	note(b)
	e.mustAcquire("orders/43", "w9") // other resources do not disturb the order
	e.release(a.ID, "r1")
	e.release(b.ID, "r2")
	note(e.mustAcquire("orders/42", "w5"))
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences not strictly increasing: %v", fences)
		}
	}
}

// CheckFence: current when the fence belongs to any ACTIVE lease of the
// resource; the answer also gives the highest active fence.
func TestCheckFence(t *testing.T) {
	t.Parallel()
	e := setup(t)
	old := e.mustAcquire("orders/42", "w1", ttl(5000))
	e.release(old.ID, "w1")
	cur := e.mustAcquire("orders/42", "w2", ttl(5000))
	s1 := e.mustAcquire("reads/1", "r1", shared)
	s2 := e.mustAcquire("reads/1", "r2", shared)
	gone := e.mustAcquire("gone/1", "w3", ttl(2000))

	reg := e.m.Registrar()
	cases := []struct {
		name        string
		ns, res     string
		fence       uint64
		tick        registrar.Tick
		wantCurrent bool
		wantActive  uint64
	}{
		{"current_exclusive", "", "orders/42", cur.Fence, e.tick, true, cur.Fence},
		{"stale_after_release", "", "orders/42", old.Fence, e.tick, false, cur.Fence},
		{"future_fence", "", "orders/42", cur.Fence + 100, e.tick, false, cur.Fence},
		{"shared_first", "", "reads/1", s1.Fence, e.tick, true, s2.Fence},
		{"shared_second", "", "reads/1", s2.Fence, e.tick, true, s2.Fence},
		{"expired_read_before_record", "", "gone/1", gone.Fence, gone.ExpiresTick, false, 0},
		{"one_ms_before_expiry", "", "gone/1", gone.Fence, gone.ExpiresTick - 1, true, gone.Fence},
		{"unknown_resource", "", "nobody/1", 1, e.tick, false, 0},
		{"other_namespace", "elsewhere", "orders/42", cur.Fence, e.tick, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			current, active, err := reg.Fence(c.ns, c.res, c.fence, c.tick)
			if err != nil || current != c.wantCurrent || active != c.wantActive {
				t.Fatalf("Fence = %v, %d, %v; want %v, %d", current, active, err, c.wantCurrent, c.wantActive)
			}
		})
	}
	_, _, err := reg.Fence("", "", 1, e.tick)
	wantReason(t, err, registrar.ReasonInvalidArgument)
	wantMeta(t, err, "field", "resource")
}
