package registrar_test

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/registrar"
)

// An expire request earlier than the lease's expiry is rejected and
// changes nothing (seed 000 "Early Expiration Attack").
func TestExpire_TooEarly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		offset int64 // from the issue tick; ttl 5000
	}{
		{"right_after_issue", 0},
		{"one_ms_before", 4999},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1", ttl(5000))
			var out registrar.Outcome
			e.unchanged(func() { out = e.after(c.offset).expire(l.ID) })
			if out.Err != nil || len(out.Leases) != 0 || len(out.Failures) != 1 {
				t.Fatalf("expire: %+v", out)
			}
			f := out.Failures[0]
			if f.LeaseID != l.ID {
				t.Fatalf("failure names %q", f.LeaseID)
			}
			wantReason(t, f.Err, registrar.ReasonExpiryTooEarly)
			wantErrIs(t, f.Err, registrar.ErrExpiryTooEarly)
			wantMessagePrefix(t, f.Err)
			if got := e.get(l.ID); got.State != registrar.Active || got.ExpiresTick != l.ExpiresTick {
				t.Fatalf("lease %+v", got)
			}
		})
	}
}

func TestExpire_DueUnknownAndMixed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	due := e.mustAcquire("a", "w1", ttl(2000))
	notDue := e.mustAcquire("b", "w1", ttl(9000))
	w, tag, seq, _ := registrar.ParseLeaseID(due.ID)
	unknown := registrar.FormatLeaseID(w, tag, seq+500)
	mark := e.mark()
	out := e.at(due.ExpiresTick).expire(due.ID, notDue.ID, unknown)
	e.wantRecords(mark, "ended EXPIRED")
	if len(out.Leases) != 1 || out.Leases[0].ID != due.ID || out.Leases[0].State != registrar.Expired {
		t.Fatalf("expired %+v", out.Leases)
	}
	if len(out.Failures) != 2 || out.Failures[0].LeaseID != notDue.ID || out.Failures[1].LeaseID != unknown {
		t.Fatalf("failures %+v", out.Failures)
	}
	wantReason(t, out.Failures[0].Err, registrar.ReasonExpiryTooEarly)
	wantReason(t, out.Failures[1].Err, registrar.ReasonLeaseNotFound)
	// Expiring it again (the expirer retrying) is harmless.
	e.unchanged(func() { out = e.after(5).expire(due.ID) })
	if len(out.Failures) != 0 {
		t.Fatalf("second expire: %+v", out.Failures)
	}
}

// terminated_at of an expired lease is its own expires_at, not the time
// the expiry was recorded (INV-0304, CTR-0403).
func TestExpiry_TerminatedAtIsOwnExpiry_INV0304(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		late  int64 // how late the expiry is recorded
		renew bool
	}{
		{"on_time", 0, false},
		{"expirer_late", 7777, false},
		{"expirer_very_late_after_renewal", 3_600_000, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1", ttl(5000))
			if c.renew {
				l = *e.after(2000).renew(l.ID, nil).Lease
			}
			mark := e.mark()
			e.at(l.ExpiresTick + registrar.Tick(c.late)).advance()
			e.wantRecords(mark, "ended EXPIRED")
			got := e.get(l.ID)
			if got.State != registrar.Expired {
				t.Fatalf("state %v", got.State)
			}
			if !got.TerminatedAt.Equal(got.ExpiresAt) || got.TerminatedAt.UnixMilli() != wallAt(l.ExpiresTick) {
				t.Fatalf("terminated_at %v, expires_at %v", got.TerminatedAt, got.ExpiresAt)
			}
		})
	}
}

// Reads evaluate expiry at the tick they are made: past its expiry a lease
// reads EXPIRED before any record says so (API.md conventions).
func TestExpiry_ReadsPastExpiryBeforeAnyRecord(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1", ttl(5000))
	reg := e.m.Registrar()
	next := e.next()

	before, err := reg.Get(l.ID, l.ExpiresTick-1)
	if err != nil || before.State != registrar.Active || before.Remaining != time.Millisecond {
		t.Fatalf("1 ms before: %+v %v", before, err)
	}
	at, err := reg.Get(l.ID, l.ExpiresTick)
	if err != nil || at.State != registrar.Expired || at.Remaining != 0 || !at.TerminatedAt.Equal(at.ExpiresAt) {
		t.Fatalf("at expiry: %+v %v", at, err)
	}
	vr, err := reg.Verify([]string{l.ID}, l.ExpiresTick)
	if err != nil || !vr[0].Found || vr[0].Lease.State != registrar.Expired {
		t.Fatalf("verify: %+v %v", vr, err)
	}
	list, _, err := reg.List(registrar.ListQuery{States: []registrar.State{registrar.Expired}}, l.ExpiresTick)
	if err != nil || len(list) != 1 || list[0].ID != l.ID {
		t.Fatalf("list expired: %+v %v", list, err)
	}
	list, _, _ = reg.List(registrar.ListQuery{States: []registrar.State{registrar.Active}}, l.ExpiresTick)
	if len(list) != 0 {
		t.Fatalf("list active: %+v", list)
	}
	if act := reg.Active("", "orders/42", l.ExpiresTick); len(act) != 0 {
		t.Fatalf("active: %+v", act)
	}
	if got := reg.ByHolder("w1", "", l.ExpiresTick); len(got) != 0 {
		t.Fatalf("by holder: %+v", got)
	}
	if cur, _, _ := reg.Fence("", "orders/42", l.Fence, l.ExpiresTick); cur {
		t.Fatal("fence current at expiry")
	}
	if e.next() != next {
		t.Fatal("reads moved the ledger")
	}
}

// Due lists leases due by a tick, earliest first, without changing
// anything; NextDeadline is the earliest lease or waiter deadline.
func TestExpiry_DueAndNextDeadline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	reg := e.m.Registrar()
	if _, ok := reg.NextDeadline(); ok {
		t.Fatal("deadline with nothing active")
	}
	c := e.mustAcquire("c", "w1", ttl(3000))
	a := e.mustAcquire("a", "w1", ttl(1000))
	b := e.mustAcquire("b", "w1", ttl(2000))
	e.mustAcquire("d", "w1", ttl(60_000))
	if d, ok := reg.NextDeadline(); !ok || d != a.ExpiresTick {
		t.Fatalf("next deadline %d %v, want %d", d, ok, a.ExpiresTick)
	}
	e.acquire("d", "w2", wait(500)) // a waiter due before every lease
	if d, ok := reg.NextDeadline(); !ok || d != e.tick+500 {
		t.Fatalf("next deadline %d, want the waiter's %d", d, e.tick+500)
	}

	cases := []struct {
		name  string
		at    registrar.Tick
		limit int
		want  []string
	}{
		{"none_due", a.ExpiresTick - 1, 10, nil},
		{"one_due_at_its_tick", a.ExpiresTick, 10, strs(a.ID)},
		{"all_due_earliest_first", c.ExpiresTick + 50, 10, strs(a.ID, b.ID, c.ID)},
		{"limit", c.ExpiresTick, 2, strs(a.ID, b.ID)},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			due := reg.Due(cs.at, cs.limit)
			var got []string
			for _, l := range due {
				got = append(got, l.ID)
			}
			if len(got) != len(cs.want) {
				t.Fatalf("due %v, want %v", got, cs.want)
			}
			for i := range got {
				if got[i] != cs.want[i] {
					t.Fatalf("due %v, want %v", got, cs.want)
				}
			}
		})
	}
	if e.get(a.ID).State != registrar.Active || e.next() == 0 {
		t.Fatal("Due changed state")
	}
	// The expirer proposes what Due lists; afterwards nothing is due.
	e.at(c.ExpiresTick).expire(a.ID, b.ID, c.ID)
	if due := reg.Due(c.ExpiresTick, 10); len(due) != 0 {
		t.Fatalf("still due: %+v", due)
	}
	if d, ok := reg.NextDeadline(); !ok || d != e.get(e.m.Registrar().Active("", "d", e.tick)[0].ID).ExpiresTick {
		t.Fatalf("next deadline %d %v", d, ok)
	}
}

// Expiry is strict at the tick of the command being applied, whatever the
// expirer does: an acquire at the expiry tick gets the resource.
func TestExpiry_AcquireAtExpiryTickSucceeds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1", ttl(5000))
	wantReason(t, e.at(l.ExpiresTick-1).acquire("orders/42", "w2").Err, registrar.ReasonLeaseHeld)
	mark := e.mark()
	n := e.at(l.ExpiresTick).mustAcquire("orders/42", "w2")
	e.wantRecords(mark, "ended EXPIRED", "issued w2")
	if n.Fence <= l.Fence {
		t.Fatal("fence did not grow")
	}
}
