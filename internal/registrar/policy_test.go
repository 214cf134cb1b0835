package registrar_test

import (
	"google.golang.org/protobuf/proto"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

func TestPolicy_Defaults(t *testing.T) {
	t.Parallel()
	p := registrar.DefaultPolicy()
	want := registrar.Policy{
		DefaultTTL: 60_000, MinTTL: 1000, MaxTTL: 300_000, MaxGrace: 15_000,
		MaxActivePerHolder: 10_000, MaxActivePerNamespace: 1_000_000, MaxWaitersPerResource: 1000,
		LeaseRetention: 3_600_000, HistoryRetention: 86_400_000, MaxRetainedLeases: 100_000,
		MaxRetainedTasks: 100_000, TaskMaxRenewals: 10, TaskMaxLifetime: 7_200_000, // API.md: task leases 10 renewals, 2 h
		MaxStateBytes: 256 << 20, MaxPendingTasks: 1_000_000, MaxPendingTaskBytes: 1 << 30, MaxPoolPieces: 1 << 24,
	}
	if p != want {
		t.Fatalf("defaults %+v\nwant     %+v", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	e := setup(t)
	if got := e.m.Registrar().Policy("anything"); got != want {
		t.Fatalf("policy of a fresh namespace %+v", got)
	}
}

// Quotas (seed 002 §7 lease squatting): max_active_per_holder and
// max_active_per_namespace → QUOTA_EXCEEDED naming the quota and limit.
func TestPolicy_Quotas(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		policy  *tenurev1.NamespacePolicy
		holders []string // one acquire each, on distinct resources; the last is refused
		quota   string
		limit   string
		holder  string // the holder metadata ("" for none)
	}{
		{"per_holder", &tenurev1.NamespacePolicy{MaxActivePerHolder: 2}, strs("w1", "w1", "w1"), "max_active_per_holder", "2", "w1"},
		{"per_namespace", &tenurev1.NamespacePolicy{MaxActivePerNamespace: 3}, strs("w1", "w2", "w3", "w4"), "max_active_per_namespace", "3", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.setPolicy("tight", c.policy)
			var last registrar.Lease
			n := len(c.holders)
			for i, h := range c.holders[:n-1] {
				last = e.mustAcquire("r/"+string(rune('a'+i)), h, inNS("tight"))
			}
			var out registrar.Outcome
			e.unchanged(func() { out = e.acquire("r/z", c.holders[n-1], inNS("tight")) })
			wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
			wantErrIs(t, out.Err, registrar.ErrQuotaExceeded)
			wantMeta(t, out.Err, "quota", c.quota, "limit", c.limit, "namespace", "tight", "holder", c.holder)
			wantMessagePrefix(t, out.Err)
			// Waiting does not get around it either.
			e.unchanged(func() { out = e.acquire("r/z", c.holders[n-1], inNS("tight"), wait(1000)) })
			wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
			// Other namespaces are not affected.
			e.mustAcquire("r/z", c.holders[n-1])
			// Ending a lease frees quota.
			e.release(last.ID, last.Holder)
			e.mustAcquire("r/z", c.holders[n-1], inNS("tight"))
		})
	}
}

// A holder at its quota that retries an acquire whose outcome it did not
// learn still gets LEASE_HELD naming its own lease, so that it can adopt it
// (API.md conventions); only a grant or a queued wait is refused.
func TestPolicy_QuotaDoesNotHideOwnLease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("default", &tenurev1.NamespacePolicy{MaxActivePerHolder: 1})
	l := e.mustAcquire("orders/42", "w1")
	out := e.acquire("orders/42", "w1")
	wantReason(t, out.Err, registrar.ReasonLeaseHeld)
	wantMeta(t, out.Err, "lease_id", l.ID, "holder", "w1")
	wantReason(t, e.acquire("orders/43", "w1").Err, registrar.ReasonQuotaExceeded)
	wantReason(t, e.acquire("orders/42", "w1", wait(1000)).Err, registrar.ReasonQuotaExceeded)
}

// Queued acquires count against the holder's and the namespace's quota, so
// that grants from wait queues never take a holder past its limit.
func TestPolicy_WaitersCountAgainstQuota(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("default", &tenurev1.NamespacePolicy{MaxActivePerHolder: 1})
	a := e.mustAcquire("r1", "other")
	b := e.mustAcquire("r2", "other2")
	if out := e.acquire("r1", "w1", wait(60_000)); out.Err != nil || out.WaiterID == 0 {
		t.Fatalf("first wait: %+v", out)
	}
	out := e.acquire("r2", "w1", wait(60_000))
	wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
	wantMeta(t, out.Err, "quota", "max_active_per_holder", "limit", "1")
	e.after(10).release(a.ID, "other")
	e.release(b.ID, "other2")
	if act, queued := e.m.Registrar().HolderLoad("w1", "default"); act != 1 || queued != 0 {
		t.Fatalf("w1 holds %d and waits for %d; want 1 and 0", act, queued)
	}

	e.setPolicy("ns2", &tenurev1.NamespacePolicy{MaxActivePerNamespace: 2})
	e.mustAcquire("x", "h1", inNS("ns2"))
	if out := e.acquire("x", "h2", inNS("ns2"), wait(60_000)); out.Err != nil {
		t.Fatalf("namespace wait: %v", out.Err)
	}
	wantReason(t, e.acquire("y", "h3", inNS("ns2")).Err, registrar.ReasonQuotaExceeded)
}

// Pruning: terminal leases are removed lease_retention after the record
// that ended them; ids and fences are never reused afterwards.
func TestPolicy_PruneAfterRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("default", &tenurev1.NamespacePolicy{LeaseRetention: durationpb.New(10 * time.Second)})
	rel := e.mustAcquire("orders/42", "w1", ttl(5000))
	e.after(100).release(rel.ID, "w1")
	releasedAt := e.tick
	exp := e.mustAcquire("orders/43", "w1", ttl(2000))
	// The expirer is 5 s late: pruning counts from the expiry record.
	expiredRecordAt := exp.ExpiresTick + 5000
	e.at(expiredRecordAt).advance()
	active := e.mustAcquire("orders/44", "w1", ttl(300_000))

	poke := func(at registrar.Tick) { // any command that emits a record
		e.at(at).mustAcquire("poke", "p")
		for _, l := range e.m.Registrar().Active("", "poke", e.tick) {
			e.release(l.ID, "p")
		}
	}
	poke(releasedAt + 9999)
	if _, err := e.m.Registrar().Get(rel.ID, e.tick); err != nil {
		t.Fatalf("pruned before its retention: %v", err)
	}
	poke(releasedAt + 10_000)
	if _, err := e.m.Registrar().Get(rel.ID, e.tick); registrar.ReasonOf(err) != registrar.ReasonLeaseNotFound {
		t.Fatalf("released lease not pruned: %v", err)
	}
	if _, err := e.m.Registrar().Get(exp.ID, e.tick); err != nil {
		t.Fatalf("expired lease pruned before its retention from the expiry record: %v", err)
	}
	poke(expiredRecordAt + 10_000)
	if _, err := e.m.Registrar().Get(exp.ID, e.tick); registrar.ReasonOf(err) != registrar.ReasonLeaseNotFound {
		t.Fatalf("expired lease not pruned: %v", err)
	}
	// Active leases are never pruned (CTR-0402).
	if got := e.get(active.ID); got.State != registrar.Active {
		t.Fatalf("active lease %+v", got)
	}
	// Pruned: verify says not found, release says already terminal.
	vr, _ := e.m.Registrar().Verify([]string{rel.ID, exp.ID}, e.tick)
	if vr[0].Found || vr[1].Found {
		t.Fatalf("verify pruned: %+v", vr)
	}
	if out := e.release(rel.ID, "w1"); out.Err != nil || !out.AlreadyTerminal {
		t.Fatalf("release pruned: %+v", out)
	}
	wantReason(t, e.renew(rel.ID, nil).Err, registrar.ReasonLeaseNotFound)
	list, _, _ := e.m.Registrar().List(registrar.ListQuery{Prefix: "orders/"}, e.tick)
	if len(list) != 1 || list[0].ID != active.ID {
		t.Fatalf("list after pruning %q", describe(list))
	}
	_, released, expired, _, _ := e.m.Registrar().Counts("")
	if expired != 0 || released != 3 { // the three poke leases are still retained
		t.Fatalf("counts released %d expired %d", released, expired)
	}
	// Never reused: a new lease on the pruned resource gets a higher fence
	// and an id no earlier lease had.
	n := e.mustAcquire("orders/42", "w2")
	if n.Fence <= exp.Fence || n.Fence <= rel.Fence || n.ID == rel.ID || n.ID == exp.ID {
		t.Fatalf("reused: %+v", n)
	}
	if _, _, seq, _ := registrar.ParseLeaseID(n.ID); seq != n.Fence {
		t.Fatalf("id sequence %d, fence %d", seq, n.Fence)
	}
}

// max_retained_leases bounds the terminal leases a namespace keeps: past
// it the oldest are pruned before their retention, a whole tick at a time,
// never those of the current tick; active leases are never pruned.
func TestPolicy_MaxRetainedLeases(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("capped", &tenurev1.NamespacePolicy{MaxRetainedLeases: 3})
	pruned := func(id string) bool {
		_, err := e.m.Registrar().Get(id, e.tick)
		return registrar.ReasonOf(err) == registrar.ReasonLeaseNotFound
	}
	active := e.mustAcquire("held", "w", inNS("capped"))
	other := e.mustAcquire("r", "w") // another namespace: its own cap
	e.release(other.ID, "w")
	// Two leases end in one tick, then one per tick.
	var ended []string
	e.after(1)
	for _, res := range []string{"a", "b"} {
		l := e.mustAcquire(res, "w", inNS("capped"))
		e.release(l.ID, "w")
		ended = append(ended, l.ID)
	}
	for _, res := range []string{"c", "d"} {
		e.after(1)
		l := e.mustAcquire(res, "w", inNS("capped"))
		e.release(l.ID, "w")
		ended = append(ended, l.ID)
	}
	// Four kept until a later tick: those of the current tick (d) are
	// never pruned by the cap, and the record that ended d came after
	// the last chance in this tick.
	for _, id := range ended {
		if pruned(id) {
			t.Fatalf("lease %s pruned in the tick that put the namespace over its cap", id)
		}
	}
	e.after(1).advance()
	e.after(1).mustAcquire("poke", "p") // any record prunes
	// a and b ended in the same tick: both go, though that leaves two.
	for i, want := range []bool{true, true, false, false} {
		if got := pruned(ended[i]); got != want {
			t.Fatalf("lease %d (%s) pruned %v, want %v", i, ended[i], got, want)
		}
	}
	if pruned(active.ID) || pruned(other.ID) {
		t.Fatal("the cap pruned an active lease or another namespace's")
	}
	_, released, _, _, _ := e.m.Registrar().Counts("capped")
	if released != 2 {
		t.Fatalf("counts %d released leases, want 2", released)
	}
	// A lower cap set later prunes at the next record past the tick.
	e.setPolicy("capped", &tenurev1.NamespacePolicy{MaxRetainedLeases: 1})
	e.after(1).mustAcquire("poke2", "p")
	if !pruned(ended[2]) || pruned(ended[3]) {
		t.Fatalf("after lowering the cap to 1: c pruned %v (want true), d pruned %v (want false)", pruned(ended[2]), pruned(ended[3]))
	}
	// A policy that leaves it 0 gets the default, as for every count.
	e.setPolicy("capped", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(2)})
	if got := e.m.Registrar().Policy("capped").MaxRetainedLeases; got != 100_000 {
		t.Fatalf("max_retained_leases 0 gives %d, want the default", got)
	}
	e.wantReplayEqual()
}

// Policy limits are validated and the ones copied into a lease at grant
// do not change under it.
func TestPolicy_SetPolicyValidationAndSnapshotAtGrant(t *testing.T) {
	t.Parallel()
	e := setup(t)
	bad := []struct {
		name  string
		p     *tenurev1.NamespacePolicy
		field string
	}{
		{"max_below_min", &tenurev1.NamespacePolicy{MinTtl: durationpb.New(10 * time.Second), MaxTtl: durationpb.New(5 * time.Second)}, "max_ttl"},
		{"default_outside", &tenurev1.NamespacePolicy{DefaultTtl: durationpb.New(time.Hour)}, "default_ttl"},
		{"grace_over_15s", &tenurev1.NamespacePolicy{MaxGrace: durationpb.New(16 * time.Second)}, "max_grace"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			var out registrar.Outcome
			e.unchanged(func() {
				out = e.do(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "x", Policy: c.p}}})
			})
			wantReason(t, out.Err, registrar.ReasonInvalidArgument)
			wantMeta(t, out.Err, "field", c.field)
		})
	}
	e.setPolicy("default", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(1)})
	l := e.mustAcquire("r", "w1", ttl(10_000))
	e.setPolicy("default", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(5)})
	e.after(1000).renew(l.ID, nil)
	wantReason(t, e.after(1000).renew(l.ID, nil).Err, registrar.ReasonRenewalLimitExceeded)
}

// Pruning follows each namespace's own retention, and a namespace whose
// terminal leases were all pruned is pruned again when more end.
func TestPolicy_PruneAcrossNamespaces(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy("fast", &tenurev1.NamespacePolicy{LeaseRetention: durationpb.New(10 * time.Second)})
	e.setPolicy("slow", &tenurev1.NamespacePolicy{LeaseRetention: durationpb.New(20 * time.Second)})
	e.mustAcquire("idle", "w", inNS("idle")) // a namespace with nothing to prune
	end := func(ns string) string {
		l := e.mustAcquire("r", "w", inNS(ns))
		e.release(l.ID, "w")
		return l.ID
	}
	pruned := func(id string) bool {
		_, err := e.m.Registrar().Get(id, e.tick)
		return registrar.ReasonOf(err) == registrar.ReasonLeaseNotFound
	}
	poke := func(at registrar.Tick) { // a command that emits a record
		e.at(at)
		end("idle")
	}
	t0 := e.tick
	fast, slow := end("fast"), end("slow")
	poke(t0 + 10_000)
	if !pruned(fast) || pruned(slow) {
		t.Fatalf("after 10 s: fast pruned %v (want true), slow pruned %v (want false)", pruned(fast), pruned(slow))
	}
	e.at(t0 + 15_000)
	fast2 := end("fast")
	poke(t0 + 20_000)
	if !pruned(slow) || pruned(fast2) {
		t.Fatalf("after 20 s: slow pruned %v (want true), the second fast lease pruned %v (want false)", pruned(slow), pruned(fast2))
	}
	poke(t0 + 25_000)
	if !pruned(fast2) {
		t.Fatal("the second lease of a namespace pruned empty before was never pruned")
	}
}

// A transfer that carries the limits over (as servers propose it) is no
// way past them: handing a lease to another holder and back continues its
// renewal count and lifetime (the auditor's sequence: renewals used up,
// a→b→a, renew). Without the flag (commands of older logs) the new lease
// starts afresh, as it did when they were written.
func TestPolicy_TransferCarriesTheLimits(t *testing.T) {
	t.Parallel()
	for _, carry := range []bool{true, false} {
		e := setup(t)
		hand := func(id, from, to string) registrar.Lease {
			t.Helper()
			out := e.do(&logpb.Command{Actor: from, Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{
				LeaseId: id, Holder: from, NewHolder: to, TtlMs: ms(8000), CarryLimits: carry}}})
			if out.Err != nil {
				t.Fatal(out.Err)
			}
			return *out.Lease
		}

		// The renewal count.
		e.setPolicy("default", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(3)})
		l := e.mustAcquire("r", "a", ttl(5000))
		for range 3 {
			if out := e.after(1000).renew(l.ID, nil); out.Err != nil {
				t.Fatal(out.Err)
			}
		}
		wantReason(t, e.after(1000).renew(l.ID, nil).Err, registrar.ReasonRenewalLimitExceeded)
		back := hand(hand(l.ID, "a", "b").ID, "b", "a")
		renewed := e.after(1000).renew(back.ID, nil)
		if carry {
			if back.RenewalCount != 3 {
				t.Errorf("the lease handed back has renewal count %d, want 3", back.RenewalCount)
			}
			wantReason(t, renewed.Err, registrar.ReasonRenewalLimitExceeded)
		} else if renewed.Err != nil || back.RenewalCount != 0 {
			t.Errorf("without carry_limits: count %d, renew %v; want a fresh lease", back.RenewalCount, renewed.Err)
		}

		// The lifetime: 10 s from the first acquire, through a snapshot.
		e.setPolicy("default", &tenurev1.NamespacePolicy{MaxLifetime: durationpb.New(10 * time.Second)})
		start := e.tick
		l = e.mustAcquire("s", "a", ttl(5000))
		e.after(4000).renew(l.ID, nil)
		b := hand(l.ID, "a", "b")
		snap, err := e.m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if e.m, err = statemachine.Restore(statemachine.DefaultConfig(), snap); err != nil {
			t.Fatal(err)
		}
		back = hand(b.ID, "b", "a")
		renewed = e.after(1000).renew(back.ID, nil)
		if carry {
			if back.Deadline() != start+10_000 {
				t.Errorf("the lease handed back is honoured until tick %d, want the lifetime cap %d", back.Deadline(), start+10_000)
			}
			if renewed.Err == nil && renewed.Lease.Deadline() > start+10_000 {
				t.Errorf("renewed past the lifetime cap: until %d", renewed.Lease.Deadline())
			}
		} else if renewed.Err != nil || renewed.Lease.Deadline() <= start+10_000 {
			t.Errorf("without carry_limits: %v; want a lease renewed past the first one's cap", renewed.Err)
		}
	}
}

// max_renewals 0 (unlimited) set over a non-zero server-wide limit holds,
// for a namespace and for the defaults themselves, also in the records
// replayed: unset in a record reads as the defaults' value, so the record
// says 0 outright.
func TestPolicy_UnlimitedRenewalsOverALimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.setPolicy(registrar.DefaultsNamespace, &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(6)})
	e.setPolicy("ns", &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(0)})
	if got := e.m.Registrar().Policy("ns").MaxRenewals; got != 0 {
		t.Fatalf("namespace max_renewals %d, want 0 (unlimited) over the default 6", got)
	}
	l := e.mustAcquire("r", "w", inNS("ns"), ttl(5000))
	for range 8 {
		if out := e.after(1000).renew(l.ID, nil); out.Err != nil {
			t.Fatalf("renewal of an unlimited lease: %v", out.Err)
		}
	}
	e.setPolicy(registrar.DefaultsNamespace, &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(0)})
	if got := e.m.Registrar().Defaults().MaxRenewals; got != 0 {
		t.Fatalf("default max_renewals %d, want 0 (unlimited) after 6", got)
	}
	e.wantReplayEqual()
}

// A namespace's dead task retention of 0 (the default: a day) over
// defaults that set one is kept (rules 5), where under earlier rules its
// record left it out and the namespace took the defaults' (kept so for
// their commands: replay derives the same records).
func TestPolicy_DeadTaskRetentionZeroOverDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rules uint32
		want  int64
	}{{registrar.RulesDeadRetentionOutright, 0}, {registrar.RulesDeadRetentionOutright - 1, 3_600_000}} {
		e := setup(t)
		e.rules = tc.rules
		e.setPolicy("*", &tenurev1.NamespacePolicy{DeadTaskRetention: durationpb.New(time.Hour)})
		mark := e.mark()
		e.setPolicy("ns", &tenurev1.NamespacePolicy{DeadTaskRetention: durationpb.New(0)})
		if got := e.m.Registrar().Policy("ns").DeadTaskRetention; got != tc.want {
			t.Errorf("rules %d: dead task retention %d ms, want %d", tc.rules, got, tc.want)
		}
		recs := e.since(mark)
		if len(recs) != 1 || (recs[0].GetPolicySet().GetPolicy().DeadTaskRetention != nil) != (tc.want == 0) {
			t.Errorf("rules %d: records %v", tc.rules, recs)
		}
	}
}
