package registrar_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// The head of the wait queue is granted in the same command that frees the
// resource, whichever command that is (DESIGN §1.1: "granted in the same
// replicated step that frees it").
func TestWaiters_HeadGrantedInTheFreeingCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		free func(e *env, l registrar.Lease) registrar.Outcome
		want []string
	}{
		{"release", func(e *env, l registrar.Lease) registrar.Outcome { return e.release(l.ID, "w1") },
			strs("ended RELEASED", "issued w2")},
		{"revoke", func(e *env, l registrar.Lease) registrar.Outcome { return e.revoke(l.ID, "stuck") },
			strs("ended REVOKED", "issued w2")},
		{"expiry_by_expirer_advance", func(e *env, l registrar.Lease) registrar.Outcome {
			return e.at(l.ExpiresTick).advance()
		}, strs("ended EXPIRED", "issued w2")},
		{"expiry_by_expire_command", func(e *env, l registrar.Lease) registrar.Outcome {
			return e.at(l.ExpiresTick).expire(l.ID)
		}, strs("ended EXPIRED", "issued w2")},
		{"expiry_inside_any_other_command", func(e *env, l registrar.Lease) registrar.Outcome {
			return e.at(l.ExpiresTick+250).acquire("unrelated", "w9")
		}, strs("ended EXPIRED", "issued w2", "issued w9")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("orders/42", "w1", ttl(5000))
			q := e.acquire("orders/42", "w2", wait(60_000), ttl(7000))
			if q.Err != nil || q.WaiterID == 0 || q.Lease != nil {
				t.Fatalf("queue: %+v", q)
			}
			if !e.m.Registrar().WaiterPending(q.WaiterID) {
				t.Fatal("waiter not pending")
			}
			mark := e.mark()
			if out := c.free(e, l); out.Err != nil {
				t.Fatal(out.Err)
			}
			e.wantRecords(mark, c.want...)
			if e.m.Registrar().WaiterPending(q.WaiterID) {
				t.Fatal("waiter still pending after hand-off")
			}
			act := e.m.Registrar().Active("", "orders/42", e.tick)
			if len(act) != 1 || act[0].Holder != "w2" || act[0].Fence <= l.Fence {
				t.Fatalf("active %+v", act)
			}
			if act[0].IssuedTick != e.tick || act[0].ExpiresTick != e.tick+7000 {
				t.Fatalf("granted at %d until %d (now %d); want the waiter's ttl from now",
					act[0].IssuedTick, act[0].ExpiresTick, e.tick)
			}
		})
	}
}

func TestWaiters_FIFO(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1")
	for _, h := range strs("w2", "w3", "w4") {
		if out := e.acquire("orders/42", h, wait(60_000)); out.WaiterID == 0 {
			t.Fatalf("%s not queued: %v", h, out.Err)
		}
	}
	if got := e.queue("", "orders/42"); !slices.Equal(got, strs("w2", "w3", "w4")) {
		t.Fatalf("queue %v", got)
	}
	cur, holder := l, "w1"
	for _, next := range strs("w2", "w3", "w4") {
		out := e.after(10).release(cur.ID, holder)
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		act := e.m.Registrar().Active("", "orders/42", e.tick)
		if len(act) != 1 || act[0].Holder != next || act[0].Fence <= cur.Fence {
			t.Fatalf("after %s released: %+v, want %s", holder, act, next)
		}
		cur, holder = act[0], next
	}
	if got := e.queue("", "orders/42"); len(got) != 0 {
		t.Fatalf("queue not empty: %v", got)
	}
}

// A new request does not overtake the queue even when it would fit.
func TestWaiters_NoOvertaking(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s := e.mustAcquire("doc/1", "r1", shared)
	e.acquire("doc/1", "w1", wait(60_000)) // exclusive, queued
	// A shared request would be compatible with r1, but w1 is queued first.
	wantReason(t, e.acquire("doc/1", "r2", shared).Err, registrar.ReasonLeaseHeld)
	out := e.acquire("doc/1", "r3", shared, wait(60_000))
	if out.Err != nil || out.WaiterID == 0 {
		t.Fatalf("shared waiter behind an exclusive one: %+v", out)
	}
	if got := e.queue("", "doc/1"); !slices.Equal(got, strs("w1", "r3")) {
		t.Fatalf("queue %v", got)
	}
	// r1 leaves: the exclusive head is granted, r3 keeps waiting.
	e.release(s.ID, "r1")
	if got := e.activeHolders("", "doc/1"); !slices.Equal(got, strs("w1")) {
		t.Fatalf("active %v", got)
	}
	if got := e.queue("", "doc/1"); !slices.Equal(got, strs("r3")) {
		t.Fatalf("queue %v", got)
	}
	w1 := e.m.Registrar().Active("", "doc/1", e.tick)[0]
	e.release(w1.ID, "w1")
	if got := e.activeHolders("", "doc/1"); !slices.Equal(got, strs("r3")) {
		t.Fatalf("active %v", got)
	}
}

// A run of shared waiters at the head is granted together; the run stops
// at the first exclusive waiter.
func TestWaiters_SharedRunGrantedTogether(t *testing.T) {
	t.Parallel()
	e := setup(t)
	x := e.mustAcquire("doc/1", "w0")
	e.acquire("doc/1", "r1", shared, wait(60_000))
	e.acquire("doc/1", "r2", shared, wait(60_000))
	e.acquire("doc/1", "w3", wait(60_000))
	e.acquire("doc/1", "r4", shared, wait(60_000))
	mark := e.mark()
	e.release(x.ID, "w0")
	e.wantRecords(mark, "ended RELEASED", "issued r1", "issued r2")
	if got := e.activeHolders("", "doc/1"); !slices.Equal(got, strs("r1", "r2")) {
		t.Fatalf("active %v", got)
	}
	if got := e.queue("", "doc/1"); !slices.Equal(got, strs("w3", "r4")) {
		t.Fatalf("queue %v", got)
	}
	// Both shared leases must end before w3; then r4 waits behind w3.
	for _, l := range e.m.Registrar().Active("", "doc/1", e.tick) {
		if l.Holder == "r1" {
			e.release(l.ID, "r1")
		}
	}
	if got := e.activeHolders("", "doc/1"); !slices.Equal(got, strs("r2")) {
		t.Fatalf("w3 granted next to a shared lease: %v", got)
	}
	for _, l := range e.m.Registrar().Active("", "doc/1", e.tick) {
		e.release(l.ID, l.Holder)
	}
	if got := e.activeHolders("", "doc/1"); !slices.Equal(got, strs("w3")) {
		t.Fatalf("active %v", got)
	}
}

// A waiter whose wait runs out leaves the queue with a WaiterEnded record,
// and its answer is LEASE_HELD with wait_ended (API.md: "or the wait ran out").
func TestWaiters_DeadlineDropsWaiter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("orders/42", "w1", ttl(60_000))
	q := e.acquire("orders/42", "w2", wait(5000))
	deadline := e.tick + 5000

	e.at(deadline - 1).advance()
	if !e.m.Registrar().WaiterPending(q.WaiterID) {
		t.Fatal("waiter dropped 1 ms before its deadline")
	}
	mark := e.mark()
	e.at(deadline).advance()
	recs := e.wantRecords(mark, "wait_ended w2")
	if we := recs[0].GetWaitEnded(); we.WaiterId != q.WaiterID || we.Resource != "orders/42" || we.Namespace != "default" {
		t.Fatalf("record %+v", we)
	}
	if e.m.Registrar().WaiterPending(q.WaiterID) || len(e.queue("", "orders/42")) != 0 {
		t.Fatal("waiter still queued")
	}
	err := e.m.Registrar().WaitEnded("default", "orders/42", e.tick)
	wantReason(t, err, registrar.ReasonLeaseHeld)
	var he *registrar.HeldError
	if !errors.As(err, &he) || !he.WaitEnded || he.LeaseID != l.ID || he.Holder != "w1" {
		t.Fatalf("wait-ended error %+v", err)
	}
	if !strings.Contains(err.Error(), "the wait ran out") {
		t.Fatalf("message %q", err.Error())
	}
	wantMeta(t, err, "wait_ended", "true", "lease_id", l.ID)
	// The freed resource no longer goes to w2.
	mark = e.mark()
	e.release(l.ID, "w1")
	e.wantRecords(mark, "ended RELEASED")
}

// When the exclusive waiter that blocked later shared waiters leaves the
// queue, those shared waiters are compatible with the active shared lease
// and are granted in the same step.
func TestWaiters_ExclusiveHeadLeavingGrantsSharedBehind(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.mustAcquire("doc/1", "r1", shared, ttl(60_000))
	e.acquire("doc/1", "w1", wait(1000))
	q := e.acquire("doc/1", "r2", shared, wait(30_000))
	mark := e.mark()
	e.after(1000).advance()
	e.wantRecords(mark, "wait_ended w1", "issued r2")
	if e.m.Registrar().WaiterPending(q.WaiterID) {
		t.Fatal("shared waiter still queued behind nobody")
	}
	if got := e.activeHolders("", "doc/1"); !slices.Equal(got, strs("r1", "r2")) {
		t.Fatalf("active %v", got)
	}
}

// A shared request refused for an exclusive one queued ahead says so: the
// shared holder alone would have admitted it.
func TestWaiters_SharedRefusedForAQueuedExclusiveSaysSo(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.mustAcquire("doc/1", "r1", shared, ttl(60_000))
	e.acquire("doc/1", "w1", wait(10_000))
	out := e.acquire("doc/1", "r2", shared)
	wantReason(t, out.Err, registrar.ReasonLeaseHeld)
	wantMeta(t, out.Err, "queued_ahead", "true", "waiters", "1")
	if !strings.Contains(out.Err.Error(), "1 queued request(s) ahead of this one come first") {
		t.Fatalf("message %q does not say a queued request comes first", out.Err)
	}
	// An exclusive request is refused by the holder itself.
	out = e.acquire("doc/1", "x2")
	wantMeta(t, out.Err, "queued_ahead", "false")
	if strings.Contains(out.Err.Error(), "queued request") {
		t.Fatalf("message %q blames the queue", out.Err)
	}
}

// max_waiters_per_resource bounds the queue → QUOTA_EXCEEDED, nothing queued.
func TestWaiters_MaxWaitersQuota(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("default", &tenurev1.NamespacePolicy{MaxWaitersPerResource: 2})
	e.mustAcquire("orders/42", "w1")
	e.acquire("orders/42", "w2", wait(10_000))
	e.acquire("orders/42", "w3", wait(10_000))
	var out registrar.Outcome
	e.unchanged(func() { out = e.acquire("orders/42", "w4", wait(10_000)) })
	wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
	wantErrIs(t, out.Err, registrar.ErrQuotaExceeded)
	wantMeta(t, out.Err, "quota", "max_waiters_per_resource", "limit", "2", "namespace", "default", "resource", "orders/42")
	wantMessagePrefix(t, out.Err)
	if out.WaiterID != 0 {
		t.Fatalf("waiter id %d on a rejected request", out.WaiterID)
	}
	// Without wait the answer is still LEASE_HELD, and it counts the queue.
	out = e.acquire("orders/42", "w5")
	wantReason(t, out.Err, registrar.ReasonLeaseHeld)
	wantMeta(t, out.Err, "waiters", "2")
	if _, _, _, _, w := e.m.Registrar().Counts(""); w != 2 {
		t.Fatalf("namespace waiters %d", w)
	}
}

// A queued request is granted with the ttl it asked for, and the wait
// queue is per resource.
func TestWaiters_PerResourceAndTTL(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.mustAcquire("a", "w1")
	e.mustAcquire("b", "w1")
	e.acquire("a", "w2", wait(60_000), ttl(4000))
	e.acquire("b", "w3", wait(60_000))
	e.release(a.ID, "w1")
	if got := e.activeHolders("", "b"); !slices.Equal(got, strs("w1")) {
		t.Fatalf("b changed hands: %v", got)
	}
	act := e.m.Registrar().Active("", "a", e.tick)
	if len(act) != 1 || act[0].Holder != "w2" || act[0].TTL.Milliseconds() != 4000 {
		t.Fatalf("a: %+v", act)
	}
	if got := e.queue("", "b"); !slices.Equal(got, strs("w3")) {
		t.Fatalf("queue of b %v", got)
	}
}

// A queued acquire whose caller went away is withdrawn: the resource goes
// to the next waiter (or stays free) instead of to a lease nobody holds.
func TestWaiters_CancelWait(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("r", "w1")
	ghost := e.acquire("r", "w2", wait(60_000))
	next := e.acquire("r", "w3", wait(60_000))
	if ghost.WaiterID == 0 || next.WaiterID == 0 {
		t.Fatalf("waits: %+v %+v", ghost, next)
	}
	cancel := func(id uint64, holder string) registrar.Outcome {
		return e.do(&logpb.Command{Op: &logpb.Command_CancelWait{CancelWait: &logpb.CancelWait{WaiterId: id, Holder: holder}}})
	}
	wantReason(t, cancel(ghost.WaiterID, "w3").Err, registrar.ReasonNotHolder)
	if out := cancel(ghost.WaiterID, "w2"); out.Err != nil {
		t.Fatal(out.Err)
	}
	if e.m.Registrar().WaiterPending(ghost.WaiterID) {
		t.Fatal("cancelled waiter still queued")
	}
	if out := cancel(ghost.WaiterID, "w2"); out.Err != nil {
		t.Fatalf("second cancel is a no-op, got %v", out.Err)
	}
	e.after(10).release(l.ID, "w1")
	act := e.m.Registrar().Active("default", "r", e.tick)
	if len(act) != 1 || act[0].Holder != "w3" {
		t.Fatalf("after release the resource went to %+v, want w3", act)
	}
}
