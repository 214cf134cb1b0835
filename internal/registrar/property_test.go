package registrar_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"pgregory.net/rapid"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// The property tests drive a statemachine.Machine with random sequences of
// every command over a small world (two namespaces, four resources, three
// holders) and check the registrar's invariants after every step:
//
//   - at most one active exclusive lease per resource, never beside a shared one;
//   - fences strictly increasing (per resource, and globally since fence == seq);
//   - terminal states final, identity fields of a lease immutable;
//   - no lease marked or read ACTIVE at or after its deadline once a command at
//     that tick is applied (Due is empty);
//   - renewal counts within the max_renewals in force when the lease was issued,
//     expiry never past max_lifetime, restart grace at most once per lease;
//   - waiters: FIFO, never stuck behind a compatible resource, never past their wait;
//   - counts agree with List, pruning only after retention and always by then;
//   - a rejected command changes exactly what an Advance at its tick changes;
//   - replaying the ledger gives the same snapshot bytes, and snapshot →
//     restore → the rest of the sequence gives the same records and bytes;
//   - per-command outcomes agree with a model computed from the state the
//     command decided on.

var (
	propCmdNamespaces = []string{"", "default", "team-b"}
	propNamespaces    = []string{"default", "team-b"}
	propResources     = []string{"r0", "r1", "r2", "r3"}
	propHolders       = []string{"h0", "h1", "h2"}
)

func propKeySeed() []byte {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(0xA0 + i)
	}
	return seed
}

// propLease is what the test knows of one lease it saw issued.
type propLease struct {
	first, last registrar.Lease
	ended       bool           // an Ended record was seen
	endedTick   registrar.Tick // the tick of that record
	graced      bool           // a Grace record was seen
	pruned      bool
}

type propRun struct {
	t        *rapid.T
	cfg      statemachine.Config
	seed     []byte
	m        *statemachine.Machine
	replica  *statemachine.Machine // replays every sealed record
	twin     *statemachine.Machine // restored from a snapshot at the cut, then fed the same commands
	tick     registrar.Tick
	log      [][]byte
	snap     []byte // m's snapshot after the last step
	ids      []string
	active   []string // ids active after the last step
	leases   map[string]*propLease
	bySeq    map[uint64]string
	waiters  map[uint64]*logpb.WaiterQueued
	maxFence uint64
	resFence map[string]uint64
	// limits are each issued lease's renewal and lifetime limits, by fence.
	limits map[uint64][2]int64
	step   int
	stats  map[string]int // outcomes and records seen, for -v
	// lastRenewed is renewed again more often than chance would.
	lastRenewed string
}

func newPropRun(t *rapid.T, checkpointEvery uint64) *propRun {
	cfg := statemachine.DefaultConfig()
	cfg.CheckpointEvery = checkpointEvery
	p := &propRun{
		t: t, cfg: cfg, seed: propKeySeed(), tick: 1000,
		m:        statemachine.New(cfg),
		replica:  statemachine.New(cfg),
		leases:   map[string]*propLease{},
		bySeq:    map[uint64]string{},
		waiters:  map[uint64]*logpb.WaiterQueued{},
		resFence: map[string]uint64{},
		limits:   map[uint64][2]int64{},
	}
	p.replica.SetKeySeed(p.seed)
	res := p.m.Apply(&logpb.Command{Tick: int64(p.tick), Wall: wallBase + int64(p.tick),
		Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: p.seed}}})
	if res.Outcome.Err != nil {
		t.Fatalf("bootstrap: %v", res.Outcome.Err)
	}
	p.sealed(res.Records)
	p.snap = mustSnapshot(t, p.m)
	p.sameSnapshot("replica after bootstrap", p.replica)
	return p
}

func mustSnapshot(t interface{ Fatalf(string, ...any) }, m *statemachine.Machine) []byte {
	b, err := m.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return b
}

func (p *propRun) restore(b []byte) *statemachine.Machine {
	m, err := statemachine.Restore(p.cfg, b)
	if err != nil {
		p.t.Fatalf("step %d: restore: %v", p.step, err)
	}
	return m
}

// sealed appends records to the log and replays them into the replica.
func (p *propRun) sealed(recs []statemachine.Sealed) {
	for _, s := range recs {
		p.log = append(p.log, s.Bytes)
		rec, err := p.replica.Replay(s.Bytes)
		if err != nil {
			p.t.Fatalf("step %d: replay of record %d: %v", p.step, s.Record.Index, err)
		}
		if !proto.Equal(rec, s.Record) {
			p.t.Fatalf("step %d: replayed record %d differs from the sealed one", p.step, s.Record.Index)
		}
	}
}

func (p *propRun) sameSnapshot(what string, other *statemachine.Machine) {
	got := mustSnapshot(p.t, other)
	if !bytes.Equal(got, p.snap) {
		p.t.Fatalf("step %d: %s: snapshot differs\nwant:\n%s\ngot:\n%s", p.step, what, snapText(p.snap), snapText(got))
	}
}

func snapText(b []byte) string {
	s := &logpb.Snapshot{}
	if err := proto.Unmarshal(b, s); err != nil {
		return err.Error()
	}
	s.KeySeed = nil
	return prototext.Format(s)
}

// apply runs one command at the current tick and checks everything.
func (p *propRun) apply(cmd *logpb.Command) statemachine.Result {
	t := p.t
	p.step++
	T := p.tick
	cmd.Tick, cmd.Wall = int64(T), wallBase+int64(T)

	// adv is the last state with everything due at T applied (every
	// command starts with an Advance); a rejected command leaves what it
	// does. The command decides on decide: the same but for the checkpoint
	// an Advance alone may end with, since a command signs after its own
	// records (what that checkpoint would prune at T is still there when
	// the command decides).
	adv := p.restore(p.snap)
	advance := &logpb.Command{Tick: cmd.Tick, Wall: cmd.Wall, Actor: cmd.Actor,
		Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}}
	advRes := adv.Apply(advance)
	noSign := p.cfg
	noSign.CheckpointEvery = math.MaxUint64
	decide, err := statemachine.Restore(noSign, p.snap)
	if err != nil {
		t.Fatalf("step %d: restore: %v", p.step, err)
	}
	decide.Apply(proto.Clone(advance).(*logpb.Command))
	check := p.expect(decide, cmd)
	polBefore := policies(decide.Registrar())

	res := p.m.Apply(proto.Clone(cmd).(*logpb.Command))
	out := res.Outcome
	p.sealed(res.Records)
	p.snap = mustSnapshot(t, p.m)
	p.sameSnapshot("replica (ledger replay)", p.replica)
	if p.twin != nil {
		tres := p.twin.Apply(proto.Clone(cmd).(*logpb.Command))
		if len(tres.Records) != len(res.Records) {
			t.Fatalf("step %d: restored twin emitted %d records, the original %d", p.step, len(tres.Records), len(res.Records))
		}
		for i := range res.Records {
			if !bytes.Equal(tres.Records[i].Bytes, res.Records[i].Bytes) {
				t.Fatalf("step %d: restored twin's record %d differs:\n%v\nvs\n%v", p.step, i, tres.Records[i].Record, res.Records[i].Record)
			}
		}
		if registrar.ReasonOf(tres.Outcome.Err) != registrar.ReasonOf(out.Err) {
			t.Fatalf("step %d: twin answered %v, original %v", p.step, tres.Outcome.Err, out.Err)
		}
		p.sameSnapshot("twin restored from a snapshot", p.twin)
	}

	// The command's records start with exactly what an Advance emits.
	pre := advRes.Records
	if n := len(pre); n > 0 && pre[n-1].Record.GetCheckpoint() != nil {
		pre = pre[:n-1]
	}
	for i, s := range pre {
		if i >= len(res.Records) || !bytes.Equal(s.Bytes, res.Records[i].Bytes) {
			t.Fatalf("step %d: record %d differs from what an Advance at the same tick emits", p.step, i)
		}
	}
	own := res.Records[len(pre):]
	if out.Err != nil {
		for _, s := range res.Records {
			if !expiryKind(s.Record) {
				t.Fatalf("step %d: rejected command (%v) emitted %v", p.step, out.Err, s.Record)
			}
		}
		for _, s := range own {
			if s.Record.GetCheckpoint() == nil {
				t.Fatalf("step %d: rejected command (%v) emitted %v beyond its expiries", p.step, out.Err, s.Record)
			}
		}
		if advSnap := mustSnapshot(t, adv); !bytes.Equal(advSnap, p.snap) {
			t.Fatalf("step %d: rejected command (%v) changed more than an Advance would:\nadvance:\n%s\ncommand:\n%s",
				p.step, out.Err, snapText(advSnap), snapText(p.snap))
		}
	}

	if p.stats != nil {
		p.stats[cmdName(cmd)+" "+string(registrar.ReasonOf(out.Err))]++
		for _, s := range res.Records {
			p.stats[fmt.Sprintf("record %T", s.Record.Body)[len("record *logpb.Record_"):]]++
		}
	}
	p.records(res.Records, polBefore)
	p.checkState(T, res, cmd, polBefore)
	check(res, own)
	return res
}

// expiryKind reports whether a record is one that the Advance every
// command starts with may emit: an expiry, the grant of a waiter that the
// expiry freed, a waiter whose wait ran out, or a checkpoint.
func expiryKind(rec *logpb.Record) bool {
	switch b := rec.Body.(type) {
	case *logpb.Record_Ended:
		return b.Ended.State == tenurev1.State_STATE_EXPIRED
	case *logpb.Record_Issued:
		return b.Issued.WaiterId != 0
	case *logpb.Record_WaitEnded, *logpb.Record_Checkpoint:
		return true
	}
	return false
}

func policies(r *registrar.Registrar) map[string]registrar.Policy {
	out := map[string]registrar.Policy{}
	for _, ns := range propNamespaces {
		out[ns] = r.Policy(ns)
	}
	return out
}

func resKey(ns, res string) string { return ns + "\x00" + res }

// records checks the sealed records of one step against the model.
func (p *propRun) records(recs []statemachine.Sealed, pol map[string]registrar.Policy) {
	t := p.t
	for _, s := range recs {
		rec := s.Record
		switch b := rec.Body.(type) {
		case *logpb.Record_Issued:
			is := b.Issued
			if is.Seq <= p.maxFence {
				t.Fatalf("step %d: fence %d issued after fence %d", p.step, is.Seq, p.maxFence)
			}
			k := resKey(is.Namespace, is.Resource)
			if is.Seq <= p.resFence[k] {
				t.Fatalf("step %d: fence %d on %s issued after %d", p.step, is.Seq, is.Resource, p.resFence[k])
			}
			p.maxFence, p.resFence[k] = is.Seq, is.Seq
			wantRenewals, wantLifetime := pol[is.Namespace].MaxRenewals, pol[is.Namespace].MaxLifetime
			if is.WaiterId != 0 {
				w := p.waiters[is.WaiterId]
				if w == nil {
					t.Fatalf("step %d: grant of unknown waiter %d", p.step, is.WaiterId)
				}
				if w.Namespace != is.Namespace || w.Resource != is.Resource || w.Holder != is.Holder || w.Mode != is.Mode || w.TtlMs != is.TtlMs {
					t.Fatalf("step %d: waiter %d granted as %v", p.step, is.WaiterId, is)
				}
				wantRenewals, wantLifetime = w.MaxRenewals, w.MaxLifetimeMs
				delete(p.waiters, is.WaiterId)
			}
			got := [2]int64{int64(is.MaxRenewals), is.MaxLifetimeMs}
			p.limits[is.Seq] = got
			if prev, ok := p.limits[is.TransferredFrom]; is.TransferredFrom != 0 && ok && got == prev {
				// A transfer that carried the old lease's limits over.
				wantRenewals, wantLifetime = is.MaxRenewals, is.MaxLifetimeMs
			}
			if is.MaxRenewals != wantRenewals || is.MaxLifetimeMs != wantLifetime {
				t.Fatalf("step %d: lease %d issued with limits %d/%dms, want %d/%dms", p.step, is.Seq,
					is.MaxRenewals, is.MaxLifetimeMs, wantRenewals, wantLifetime)
			}
			if is.ExpiresTick <= rec.Tick {
				t.Fatalf("step %d: lease %d issued already expired", p.step, is.Seq)
			}
			if _, dup := p.leases[is.LeaseId]; dup {
				t.Fatalf("step %d: lease id %s reused", p.step, is.LeaseId)
			}
			p.ids = append(p.ids, is.LeaseId)
			p.bySeq[is.Seq] = is.LeaseId
			p.leases[is.LeaseId] = &propLease{}
		case *logpb.Record_Waiting:
			p.waiters[b.Waiting.WaiterId] = b.Waiting
		case *logpb.Record_WaitEnded:
			if p.waiters[b.WaitEnded.WaiterId] == nil {
				t.Fatalf("step %d: unknown waiter %d ended", p.step, b.WaitEnded.WaiterId)
			}
			delete(p.waiters, b.WaitEnded.WaiterId)
		case *logpb.Record_Ended:
			pl := p.lease(b.Ended.GetLease())
			if pl.ended {
				t.Fatalf("step %d: lease %d ended twice", p.step, b.Ended.GetLease().GetSeq())
			}
			pl.ended, pl.endedTick = true, registrar.Tick(rec.Tick)
		case *logpb.Record_Renewed:
			if pl := p.lease(b.Renewed.GetLease()); pl.ended {
				t.Fatalf("step %d: renewal of ended lease %d", p.step, b.Renewed.GetLease().GetSeq())
			}
		case *logpb.Record_Grace:
			pl := p.lease(b.Grace.GetLease())
			if pl.ended || pl.graced {
				t.Fatalf("step %d: grace for lease %d (ended %v, graced before %v)", p.step, b.Grace.GetLease().GetSeq(), pl.ended, pl.graced)
			}
			pl.graced = true
		case *logpb.Record_Checkpoint:
			cp := b.Checkpoint
			if cp.CoversIndex+1 != rec.Index {
				t.Fatalf("step %d: checkpoint %d covers %d", p.step, rec.Index, cp.CoversIndex)
			}
		}
	}
}

func (p *propRun) lease(ref *logpb.LeaseRef) *propLease {
	id, ok := p.bySeq[ref.GetSeq()]
	if !ok || id != ref.GetLeaseId() {
		p.t.Fatalf("step %d: record names lease %d (%s), never issued", p.step, ref.GetSeq(), ref.GetLeaseId())
	}
	return p.leases[id]
}

func listAll(r *registrar.Registrar, ns string, t registrar.Tick) ([]registrar.Lease, error) {
	var out []registrar.Lease
	tok := ""
	for {
		page, next, err := r.List(registrar.ListQuery{Namespace: ns, PageSize: registrar.MaxPageSize, PageToken: tok}, t)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		tok = next
	}
}

// checkInvariants checks what must hold of any machine after a command at
// tick t was applied (shared with FuzzApplyCommand). Resources and
// namespaces are discovered through List, so it works on any state.
func checkInvariants(m *statemachine.Machine, t registrar.Tick, namespaces []string) error {
	r := m.Registrar()
	if due := r.Due(t, 10); len(due) > 0 {
		return fmt.Errorf("lease %s still marked active at tick %d, past its deadline %d", due[0].ID, t, due[0].Deadline())
	}
	if next, ok := r.NextDeadline(); ok && next <= t {
		return fmt.Errorf("next deadline %d is not after tick %d", next, t)
	}
	for _, ns := range namespaces {
		all, err := listAll(r, ns, t)
		if err != nil {
			return fmt.Errorf("list %s: %w", ns, err)
		}
		var counts [5]uint64
		activeByRes := map[string][]registrar.Lease{}
		resources := map[string]bool{}
		var prev registrar.Lease
		for i, l := range all {
			if i > 0 && (l.Resource < prev.Resource || l.Resource == prev.Resource && l.Fence <= prev.Fence) {
				return fmt.Errorf("list %s out of order at %s/%d", ns, l.Resource, l.Fence)
			}
			prev = l
			resources[l.Resource] = true
			if l.Namespace != ns {
				return fmt.Errorf("lease %s of namespace %s listed in %s", l.ID, l.Namespace, ns)
			}
			if int(l.State) >= len(counts) || l.State == 0 {
				return fmt.Errorf("lease %s has state %d", l.ID, l.State)
			}
			counts[l.State]++
			if l.State == registrar.Active {
				if t >= l.Deadline() {
					return fmt.Errorf("lease %s reads ACTIVE at tick %d, at or past its deadline %d", l.ID, t, l.Deadline())
				}
				activeByRes[l.Resource] = append(activeByRes[l.Resource], l)
			} else if l.TerminatedAt.IsZero() {
				return fmt.Errorf("terminal lease %s has no terminated_at", l.ID)
			}
			// A lease expired with an ancestor terminated at the ancestor's
			// deadline, which may come before its own.
			if l.State == registrar.Expired && !l.TerminatedAt.Equal(l.ExpiresAt) && !l.TerminatedAt.Equal(l.GraceUntil) &&
				!(l.EndedBy != "" && l.TerminatedAt.Before(l.ExpiresAt)) {
				return fmt.Errorf("expired lease %s terminated at %v, not at its expiry %v", l.ID, l.TerminatedAt, l.ExpiresAt)
			}
			if l.MaxRenewals > 0 && l.RenewalCount > l.MaxRenewals {
				return fmt.Errorf("lease %s renewed %d times, limit %d", l.ID, l.RenewalCount, l.MaxRenewals)
			}
			if lt := registrar.Ms(l.MaxLifetime); lt > 0 && l.Deadline() > l.AcquiredTick+registrar.Tick(lt) {
				return fmt.Errorf("lease %s honoured until %d, past its max lifetime (acquired %d + %dms)", l.ID, l.Deadline(), l.AcquiredTick, lt)
			}
			if l.AcquiredTick > l.IssuedTick {
				return fmt.Errorf("lease %s acquired at %d, after its issue at %d", l.ID, l.AcquiredTick, l.IssuedTick)
			}
			if got, err := r.Get(l.ID, t); err != nil || got.State != l.State || got.Fence != l.Fence {
				return fmt.Errorf("Get(%s) = %v, %v; List says %v", l.ID, got.State, err, l.State)
			}
		}
		for res := range resources {
			act := r.Active(ns, res, t)
			var excl, shared int
			for _, l := range act {
				if l.State != registrar.Active || t >= l.Deadline() {
					return fmt.Errorf("Active(%s) returned %s in state %v (deadline %d, tick %d)", res, l.ID, l.State, l.Deadline(), t)
				}
				if l.Mode == registrar.Shared {
					shared++
				} else {
					excl++
				}
			}
			if excl > 1 || excl == 1 && shared > 0 {
				return fmt.Errorf("%s/%s has %d exclusive and %d shared active leases", ns, res, excl, shared)
			}
			if len(act) != len(activeByRes[res]) {
				return fmt.Errorf("%s/%s: Active says %d leases, List %d", ns, res, len(act), len(activeByRes[res]))
			}
			ws := r.Waiters(ns, res)
			for i, w := range ws {
				if w.Deadline <= t {
					return fmt.Errorf("%s/%s: waiter %d still queued at %d, past its wait %d", ns, res, w.ID, t, w.Deadline)
				}
				if i > 0 && w.ID <= ws[i-1].ID {
					return fmt.Errorf("%s/%s: wait queue out of FIFO order", ns, res)
				}
			}
			if len(ws) > 0 && (ws[0].Mode == registrar.Shared && excl == 0 || len(act) == 0) {
				return fmt.Errorf("%s/%s: waiter %d (%v) is stuck behind a compatible resource (%d excl, %d shared)",
					ns, res, ws[0].ID, ws[0].Mode, excl, shared)
			}
		}
		a, rel, exp, rev, _ := r.Counts(ns)
		if a != counts[registrar.Active] || rel != counts[registrar.Released] || exp != counts[registrar.Expired] || rev != counts[registrar.Revoked] {
			return fmt.Errorf("namespace %s counts %d/%d/%d/%d, List has %v", ns, a, rel, exp, rev, counts[1:])
		}
	}
	return nil
}

// checkState checks the invariants and the model after one step at tick T.
func (p *propRun) checkState(T registrar.Tick, res statemachine.Result, cmd *logpb.Command, polBefore map[string]registrar.Policy) {
	t := p.t
	r := p.m.Registrar()
	if err := checkInvariants(p.m, T, propNamespaces); err != nil {
		t.Fatalf("step %d (%s): %v", p.step, cmdName(cmd), err)
	}
	polAfter := policies(r)
	views := map[string]registrar.Lease{}
	var waiters uint64
	for _, ns := range propNamespaces {
		all, _ := listAll(r, ns, T)
		for _, l := range all {
			views[l.ID] = l
		}
		for _, res := range propResources {
			waiters += uint64(len(r.Waiters(ns, res)))
		}
		if _, _, _, _, w := r.Counts(ns); w > uint64(len(p.waiters)) {
			t.Fatalf("step %d: namespace %s counts %d waiters, the records leave %d", p.step, ns, w, len(p.waiters))
		}
	}
	if waiters != uint64(len(p.waiters)) {
		t.Fatalf("step %d: %d waiters queued, the records leave %d", p.step, waiters, len(p.waiters))
	}
	_, isPolicy := cmd.Op.(*logpb.Command_SetPolicy)
	// Records the registrar applies (and so advances its time and prunes
	// at); the machine keeps membership to itself.
	registrarRecords := 0
	for _, s := range res.Records {
		if s.Record.GetMemberSet() == nil {
			registrarRecords++
		}
	}
	// The cap on terminal leases (MaxRetainedLeases): how many each
	// namespace kept before any pruning of this step (those it began with
	// and those it ended), and the latest tick pruned for the cap.
	kept := map[string]int{}
	for _, pl := range p.leases {
		if pl.ended && !pl.pruned {
			kept[pl.last.Namespace]++
		}
	}
	capPruned := map[string]registrar.Tick{} // the latest tick pruned for the cap
	p.active = p.active[:0]
	for _, id := range p.ids {
		pl := p.leases[id]
		if pl.pruned {
			if _, ok := views[id]; ok {
				t.Fatalf("step %d: pruned lease %s is back", p.step, id)
			}
			continue
		}
		v, ok := views[id]
		if !ok {
			// Pruned in this step: only a lease that ended at least a
			// retention period ago (under the policy before or after).
			ns := pl.last.Namespace
			ret := min(polBefore[ns].LeaseRetention, polAfter[ns].LeaseRetention)
			if !pl.ended || pl.endedTick+registrar.Tick(ret) > T {
				// Or one of the oldest, from a tick before T, of a
				// namespace that kept more than its cap.
				limit := min(polBefore[ns].MaxRetainedLeases, polAfter[ns].MaxRetainedLeases)
				if !pl.ended || pl.endedTick >= T || uint64(kept[ns]) <= limit {
					t.Fatalf("step %d: lease %s (ended %v at %d) pruned at %d, retention %dms, %d kept (cap %d)",
						p.step, id, pl.ended, pl.endedTick, T, ret, kept[ns], limit)
				}
				capPruned[ns] = max(capPruned[ns], pl.endedTick)
				if p.stats != nil {
					p.stats["~pruned for the cap"]++
				}
			}
			if _, err := r.Get(id, T); registrar.ReasonOf(err) != registrar.ReasonLeaseNotFound {
				t.Fatalf("step %d: Get of pruned lease %s: %v", p.step, id, err)
			}
			pl.pruned = true
			if p.stats != nil {
				p.stats["~pruned"]++
			}
			continue
		}
		if pl.first.ID == "" {
			pl.first = v
		}
		f := pl.first
		if v.Fence != f.Fence || v.Namespace != f.Namespace || v.Resource != f.Resource || v.Holder != f.Holder ||
			v.Mode != f.Mode || v.IssuedTick != f.IssuedTick || !v.IssuedAt.Equal(f.IssuedAt) ||
			v.MaxRenewals != f.MaxRenewals || v.MaxLifetime != f.MaxLifetime {
			t.Fatalf("step %d: lease %s changed identity:\nfirst %+v\nnow   %+v", p.step, id, f, v)
		}
		last := pl.last
		if last.ID != "" {
			if last.State.Terminal() && (v.State != last.State || !v.TerminatedAt.Equal(last.TerminatedAt) || v.ReleaseReason != last.ReleaseReason) {
				t.Fatalf("step %d: terminal lease %s changed: %v at %v → %v at %v", p.step, id, last.State, last.TerminatedAt, v.State, v.TerminatedAt)
			}
			if v.RenewalCount < last.RenewalCount {
				t.Fatalf("step %d: lease %s renewal count went back", p.step, id)
			}
		}
		// Ended records and states agree once the step has applied.
		if pl.ended != v.State.Terminal() {
			t.Fatalf("step %d: lease %s reads %v, ended record seen: %v", p.step, id, v.State, pl.ended)
		}
		if v.State.Terminal() && registrarRecords > 0 && !isPolicy {
			// Pruning is prompt: a record at T prunes what is due by T.
			if ret := polAfter[v.Namespace].LeaseRetention; pl.endedTick+registrar.Tick(ret) <= T {
				t.Fatalf("step %d: lease %s ended at %d still kept at %d (retention %dms)", p.step, id, pl.endedTick, T, ret)
			}
		}
		pl.last = v
		if v.State == registrar.Active {
			p.active = append(p.active, id)
		}
	}
	// The cap prunes the oldest ticks whole, and promptly: what ended
	// before T is within the cap after any step with records.
	for _, ns := range propNamespaces {
		older := uint64(0)
		for _, pl := range p.leases {
			if !pl.ended || pl.pruned || pl.last.Namespace != ns {
				continue
			}
			if at, ok := capPruned[ns]; ok && pl.endedTick <= at {
				t.Fatalf("step %d: namespace %s pruned leases that ended at %d for its cap, and kept one that ended at %d", p.step, ns, at, pl.endedTick)
			}
			if pl.endedTick < T {
				older++
			}
		}
		if limit := polAfter[ns].MaxRetainedLeases; registrarRecords > 0 && !isPolicy && older > limit {
			t.Fatalf("step %d: namespace %s keeps %d terminal leases from before tick %d, over its cap %d", p.step, ns, older, T, limit)
		}
	}
	if len(views) != len(p.ids)-countPruned(p.leases) {
		t.Fatalf("step %d: List shows %d leases, the records %d", p.step, len(views), len(p.ids)-countPruned(p.leases))
	}
}

func countPruned(m map[string]*propLease) int {
	n := 0
	for _, l := range m {
		if l.pruned {
			n++
		}
	}
	return n
}

func cmdName(cmd *logpb.Command) string {
	if cmd.Op == nil {
		return "<none>"
	}
	return fmt.Sprintf("%T", cmd.Op)[len("*logpb.Command_"):]
}

// --- expectations -------------------------------------------------------

// expect computes, from the state the command decides on (adv), what the
// command must answer, and returns a check to run on the result. own are
// the records the command emitted beyond the Advance.
func (p *propRun) expect(adv *statemachine.Machine, cmd *logpb.Command) func(statemachine.Result, []statemachine.Sealed) {
	r := adv.Registrar()
	T := p.tick
	step := p.step
	t := p.t
	want := func(res statemachine.Result, reason registrar.Reason) {
		t.Helper()
		if got := registrar.ReasonOf(res.Outcome.Err); got != reason {
			t.Fatalf("step %d (%s): got %q (%v), want %q", step, cmdName(cmd), got, res.Outcome.Err, reason)
		}
	}
	noOwn := func(own []statemachine.Sealed) {
		t.Helper()
		for _, s := range own {
			if s.Record.GetCheckpoint() == nil {
				t.Fatalf("step %d (%s): emitted %v", step, cmdName(cmd), s.Record)
			}
		}
	}
	// pruned mirrors what the registrar can still tell of an id it no
	// longer holds: its tag and sequence (a pruned lease's issue time is
	// forgotten, so an id with a pruned sequence counts as pruned).
	pruned := func(id string) bool {
		_, tag, seq, err := registrar.ParseLeaseID(id)
		if err != nil || tag != r.IDTag() {
			return false
		}
		real, ok := p.bySeq[seq]
		if !ok {
			return false
		}
		_, err = r.Get(real, T)
		return err != nil
	}
	fence := p.maxFence

	switch op := cmd.Op.(type) {
	case *logpb.Command_Acquire:
		a := op.Acquire
		ns := nsOf(a.Namespace)
		pol := r.Policy(ns)
		mode := registrar.Mode(a.Mode)
		if mode == 0 {
			mode = registrar.Exclusive
		}
		ttl := pol.DefaultTTL
		if a.TtlMs != nil {
			ttl = *a.TtlMs
		}
		act := r.Active(ns, a.Resource, T)
		waiting := r.Waiters(ns, a.Resource)
		held := len(r.ByHolder(a.Holder, ns, T))
		_, queued := r.HolderLoad(a.Holder, ns)
		compatible := len(act) == 0 || mode == registrar.Shared && act[0].Mode == registrar.Shared
		return func(res statemachine.Result, own []statemachine.Sealed) {
			out := res.Outcome
			free := len(waiting) == 0 && compatible
			switch {
			case ttl < pol.MinTTL || ttl > pol.MaxTTL:
				want(res, registrar.ReasonTTLOutOfRange)
			case !free && a.WaitMs <= 0:
				// LEASE_HELD comes before the quota, so that a holder at
				// its quota retrying an acquire finds its own lease.
				want(res, registrar.ReasonLeaseHeld)
				var he *registrar.HeldError
				if !errors.As(out.Err, &he) || len(act) > 0 && !slices.ContainsFunc(act, func(l registrar.Lease) bool { return l.ID == he.LeaseID }) {
					t.Fatalf("step %d: LEASE_HELD names %+v, active %v", step, he, act)
				}
				noOwn(own)
			case uint64(held)+queued >= pol.MaxActivePerHolder:
				want(res, registrar.ReasonQuotaExceeded)
			case free:
				want(res, "")
				l := out.Lease
				if l == nil || l.State != registrar.Active || l.Holder != a.Holder || l.Resource != a.Resource ||
					l.Namespace != ns || l.Mode != mode || l.Fence <= fence {
					t.Fatalf("step %d: acquire granted %+v", step, l)
				}
				exp := T + registrar.Tick(ttl)
				if pol.MaxLifetime > 0 && ttl > pol.MaxLifetime {
					exp = T + registrar.Tick(pol.MaxLifetime)
				}
				if l.ExpiresTick != exp || l.IssuedTick != T || l.MaxRenewals != pol.MaxRenewals || l.RenewalCount != 0 {
					t.Fatalf("step %d: acquire granted %+v, want expiry %d", step, l, exp)
				}
			case uint64(len(waiting)) >= pol.MaxWaitersPerResource:
				want(res, registrar.ReasonQuotaExceeded)
			default:
				want(res, "")
				ws := p.m.Registrar().Waiters(ns, a.Resource)
				if out.WaiterID == 0 || out.Lease != nil || len(ws) != len(waiting)+1 || ws[len(ws)-1].ID != out.WaiterID ||
					ws[len(ws)-1].Deadline != T+registrar.Tick(a.WaitMs) {
					t.Fatalf("step %d: acquire with wait answered %+v; queue %+v", step, out, ws)
				}
			}
		}

	case *logpb.Command_Release:
		c := op.Release
		v, getErr := r.Get(c.LeaseId, T)
		return func(res statemachine.Result, own []statemachine.Sealed) {
			out := res.Outcome
			switch {
			case c.LeaseId == "" || c.Holder == "" || c.Reason > tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY:
				want(res, registrar.ReasonInvalidArgument)
			case getErr != nil && pruned(c.LeaseId):
				want(res, "")
				if !out.AlreadyTerminal {
					t.Fatalf("step %d: release of pruned %s not already terminal", step, c.LeaseId)
				}
				noOwn(own)
			case getErr != nil:
				want(res, registrar.ReasonLeaseNotFound)
			case v.Holder != c.Holder:
				want(res, registrar.ReasonNotHolder)
			case v.State.Terminal():
				want(res, "")
				if !out.AlreadyTerminal || out.Lease == nil || out.Lease.State != v.State {
					t.Fatalf("step %d: release of terminal %s answered %+v", step, c.LeaseId, out)
				}
				noOwn(own)
			default:
				want(res, "")
				reason := c.Reason
				if reason == 0 {
					reason = tenurev1.ReleaseReason_RELEASE_REASON_VOLUNTARY
				}
				if out.AlreadyTerminal || out.Lease == nil || out.Lease.State != registrar.Released || out.Lease.ReleaseReason != reason ||
					!out.Lease.TerminatedAt.Equal(registrar.WallTime(wallBase+int64(T))) {
					t.Fatalf("step %d: release answered %+v", step, out.Lease)
				}
			}
		}

	case *logpb.Command_Renew:
		c := op.Renew
		if len(c.LeaseIds) != 1 || c.AllOfHolder {
			var mine []registrar.Lease
			if c.AllOfHolder {
				mine = r.ByHolder(c.Holder, c.Namespace, T)
			}
			return func(res statemachine.Result, own []statemachine.Sealed) {
				out := res.Outcome
				if c.AllOfHolder && c.Holder == "" || !c.AllOfHolder && len(c.LeaseIds) == 0 || c.TtlMs != nil && *c.TtlMs <= 0 ||
					slices.Contains(c.LeaseIds, "") {
					if out.Err == nil {
						t.Fatalf("step %d: bad renew accepted", step)
					}
					return
				}
				want(res, "")
				if len(out.Leases)+len(out.Failures) != len(c.LeaseIds)+len(mine) {
					t.Fatalf("step %d: renew of %d ids + %d of the holder answered %d leases, %d failures",
						step, len(c.LeaseIds), len(mine), len(out.Leases), len(out.Failures))
				}
				for _, l := range out.Leases {
					if l.State != registrar.Active {
						t.Fatalf("step %d: renew answered %+v", step, l)
					}
				}
			}
		}
		id := c.LeaseIds[0]
		v, getErr := r.Get(id, T)
		return func(res statemachine.Result, own []statemachine.Sealed) {
			out := res.Outcome
			if c.TtlMs != nil && *c.TtlMs <= 0 || id == "" {
				if out.Err == nil {
					t.Fatalf("step %d: bad renew accepted", step)
				}
				return
			}
			switch {
			case getErr != nil:
				want(res, registrar.ReasonLeaseNotFound)
			case c.Holder != "" && v.Holder != c.Holder:
				want(res, registrar.ReasonNotHolder)
			case v.State == registrar.Expired:
				want(res, registrar.ReasonLeaseExpired) // strict expiry
			case v.State.Terminal():
				want(res, registrar.ReasonLeaseTerminal)
			default:
				pol := r.Policy(v.Namespace)
				ttl := registrar.Ms(v.TTL)
				if c.TtlMs != nil {
					ttl = *c.TtlMs
				}
				capT := registrar.Tick(1<<62 - 1)
				if lt := registrar.Ms(v.MaxLifetime); lt > 0 {
					capT = v.AcquiredTick + registrar.Tick(lt)
				}
				asked := T + registrar.Tick(ttl)
				exp := min(asked, capT)
				switch {
				case c.TtlMs != nil && (ttl < pol.MinTTL || ttl > pol.MaxTTL):
					want(res, registrar.ReasonTTLOutOfRange)
				case asked == v.ExpiresTick:
					// A retry within the same tick: a no-op that does not
					// count as a renewal, even after the last allowed one.
					want(res, "")
					if out.Lease == nil || out.Lease.RenewalCount != v.RenewalCount || out.Lease.ExpiresTick != v.ExpiresTick {
						t.Fatalf("step %d: no-op renew answered %+v", step, out.Lease)
					}
					noOwn(own)
				case v.MaxRenewals > 0 && v.RenewalCount >= v.MaxRenewals:
					want(res, registrar.ReasonRenewalLimitExceeded)
				case asked > capT && v.ExpiresTick >= capT:
					// The lease already lives as long as it may.
					want(res, registrar.ReasonLifetimeExceeded)
				case exp < v.ExpiresTick:
					want(res, registrar.ReasonRenewalDoesNotExtend)
				default:
					want(res, "")
					if out.Lease == nil || out.Lease.ExpiresTick != exp || out.Lease.RenewalCount != v.RenewalCount+1 || out.Lease.GraceTick != 0 {
						t.Fatalf("step %d: renew answered %+v, want expiry %d", step, out.Lease, exp)
					}
				}
			}
		}

	case *logpb.Command_Revoke:
		c := op.Revoke
		v, getErr := r.Get(c.LeaseId, T)
		return func(res statemachine.Result, own []statemachine.Sealed) {
			switch {
			case c.LeaseId == "":
				want(res, registrar.ReasonInvalidArgument)
			case getErr != nil:
				want(res, registrar.ReasonLeaseNotFound)
			case v.State == registrar.Revoked:
				want(res, "")
				noOwn(own)
			case v.State == registrar.Expired:
				want(res, registrar.ReasonLeaseExpired)
			case v.State.Terminal():
				want(res, registrar.ReasonLeaseTerminal)
			default:
				want(res, "")
				if l := res.Outcome.Lease; l == nil || l.State != registrar.Revoked || l.RevokeReason != c.Reason {
					t.Fatalf("step %d: revoke answered %+v", step, l)
				}
			}
		}

	case *logpb.Command_Transfer:
		c := op.Transfer
		v, getErr := r.Get(c.LeaseId, T)
		return func(res statemachine.Result, own []statemachine.Sealed) {
			out := res.Outcome
			if c.LeaseId == "" || c.Holder == "" || c.NewHolder == "" || c.TtlMs != nil && *c.TtlMs <= 0 {
				if out.Err == nil {
					t.Fatalf("step %d: bad transfer accepted", step)
				}
				return
			}
			live := false
			switch {
			case getErr != nil:
				want(res, registrar.ReasonLeaseNotFound)
			case v.Holder != c.Holder:
				want(res, registrar.ReasonNotHolder)
			case v.State == registrar.Expired:
				want(res, registrar.ReasonLeaseExpired)
			case v.State.Terminal():
				want(res, registrar.ReasonLeaseTerminal)
			default:
				live = true
			}
			if !live {
				return
			}
			if c.NewHolder == c.Holder { // a live lease to its own holder: refused
				want(res, registrar.ReasonInvalidArgument)
				return
			}
			if out.Err != nil {
				if rs := registrar.ReasonOf(out.Err); rs != registrar.ReasonTTLOutOfRange && rs != registrar.ReasonQuotaExceeded {
					t.Fatalf("step %d: transfer of live lease %s refused: %v", step, c.LeaseId, out.Err)
				}
				return
			}
			old, nl := out.Released, out.Lease
			pol := r.Policy(v.Namespace)
			if old == nil || nl == nil || old.State != registrar.Released ||
				old.ReleaseReason != tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED ||
				nl.Holder != c.NewHolder || nl.Resource != v.Resource || nl.Mode != v.Mode || nl.Fence <= fence ||
				nl.State != registrar.Active {
				t.Fatalf("step %d: transfer answered %+v → %+v", step, old, nl)
			}
			// Carried over, the tenure goes on: the count and the limits
			// of the old lease; otherwise it starts afresh under the
			// policy in force.
			wantCount, wantMax, wantLife := uint32(0), pol.MaxRenewals, time.Duration(pol.MaxLifetime)*time.Millisecond
			if c.CarryLimits {
				wantCount, wantMax, wantLife = v.RenewalCount, v.MaxRenewals, v.MaxLifetime
			}
			if nl.RenewalCount != wantCount || nl.MaxRenewals != wantMax || nl.MaxLifetime != wantLife {
				t.Fatalf("step %d: transfer (carry %v) of %+v gives %+v; want count %d, max renewals %d, lifetime %v",
					step, c.CarryLimits, v, nl, wantCount, wantMax, wantLife)
			}
			// Nobody slipped in between: the two records are adjacent.
			for i, s := range own {
				if s.Record.GetEnded() != nil {
					if i+1 >= len(own) || own[i+1].Record.GetIssued().GetSeq() != nl.Fence {
						t.Fatalf("step %d: transfer's records are not adjacent", step)
					}
				}
			}
		}

	case *logpb.Command_Expire:
		c := op.Expire
		type exp struct {
			found, active bool
		}
		pre := make([]exp, len(c.LeaseIds))
		for i, id := range c.LeaseIds {
			v, err := r.Get(id, T)
			pre[i] = exp{found: err == nil, active: err == nil && v.State == registrar.Active}
		}
		return func(res statemachine.Result, own []statemachine.Sealed) {
			out := res.Outcome
			want(res, "")
			noOwn(own)
			var wantFail, wantOK int
			for i, id := range c.LeaseIds {
				switch {
				case !pre[i].found && pruned(id):
				case !pre[i].found || pre[i].active:
					wantFail++
				default:
					wantOK++
				}
			}
			if len(out.Failures) != wantFail || len(out.Leases) != wantOK {
				t.Fatalf("step %d: expire answered %d ok / %d failures, want %d / %d", step, len(out.Leases), len(out.Failures), wantOK, wantFail)
			}
			for _, f := range out.Failures {
				if rs := registrar.ReasonOf(f.Err); rs != registrar.ReasonExpiryTooEarly && rs != registrar.ReasonLeaseNotFound {
					t.Fatalf("step %d: expire failure %v", step, f.Err)
				}
			}
		}

	case *logpb.Command_DeclareRestart:
		c := op.DeclareRestart
		mine := r.ByHolder(c.Holder, c.Namespace, T)
		return func(res statemachine.Result, own []statemachine.Sealed) {
			out := res.Outcome
			if c.Holder == "" || c.GraceMs != nil && *c.GraceMs <= 0 {
				want(res, registrar.ReasonInvalidArgument)
				return
			}
			want(res, "")
			if len(out.Leases) > len(mine) {
				t.Fatalf("step %d: restart graced %d of %d leases", step, len(out.Leases), len(mine))
			}
			for _, l := range out.Leases {
				pol := r.Policy(l.Namespace)
				g := pol.MaxGrace
				if c.GraceMs != nil {
					g = min(g, *c.GraceMs)
				}
				if l.Holder != c.Holder || l.GraceTick <= l.ExpiresTick || l.GraceTick > l.ExpiresTick+registrar.Tick(g) {
					t.Fatalf("step %d: restart graced %+v (grace %dms)", step, l, g)
				}
			}
		}

	case *logpb.Command_WriteState:
		c := op.WriteState
		ns := nsOf(c.Namespace)
		v, getErr := r.Get(c.LeaseId, T)
		_, epoch, _ := r.ReadState(ns, c.Resource)
		return func(res statemachine.Result, own []statemachine.Sealed) {
			out := res.Outcome
			switch {
			case c.LeaseId == "":
				want(res, registrar.ReasonInvalidArgument)
			case getErr != nil || v.State != registrar.Active || v.Mode != registrar.Exclusive || v.Namespace != ns || v.Resource != c.Resource:
				want(res, registrar.ReasonLeaseViolation)
			case c.ExpectedEpoch < epoch:
				want(res, registrar.ReasonStaleEpoch)
			case c.ExpectedEpoch > epoch:
				want(res, registrar.ReasonFutureEpoch)
			default:
				want(res, "")
				data, e, err := p.m.Registrar().ReadState(ns, c.Resource)
				if out.Epoch != epoch+1 || e != epoch+1 || err != nil || !bytes.Equal(data, c.Data) {
					t.Fatalf("step %d: write answered epoch %d; state now %q at %d", step, out.Epoch, data, e)
				}
			}
		}

	case *logpb.Command_SetPolicy:
		c := op.SetPolicy
		return func(res statemachine.Result, own []statemachine.Sealed) {
			if c.Namespace == "" {
				want(res, registrar.ReasonInvalidArgument)
				return
			}
			p0 := registrar.PolicyFromProto(r.Defaults(), c.Policy)
			if p0.Validate() != nil {
				want(res, registrar.ReasonInvalidArgument)
				return
			}
			want(res, "")
			got := p.m.Registrar().Defaults()
			if c.Namespace != registrar.DefaultsNamespace {
				got = p.m.Registrar().Policy(c.Namespace)
			}
			if got != p0 {
				t.Fatalf("step %d: policy %+v in force, want %+v", step, got, p0)
			}
		}

	case *logpb.Command_Advance:
		return func(res statemachine.Result, own []statemachine.Sealed) {
			want(res, "")
			noOwn(own)
		}

	case *logpb.Command_SetMember:
		c := op.SetMember
		return func(res statemachine.Result, own []statemachine.Sealed) {
			if c.Id == "" {
				want(res, registrar.ReasonInvalidArgument)
				return
			}
			want(res, "")
			got, ok := p.m.Member(c.Id)
			if ok == c.Removed || ok && (got.APIAddress != c.ApiAddress || got.RaftAddress != c.RaftAddress) {
				t.Fatalf("step %d: member %s reads %+v (%v) after %v", step, c.Id, got, ok, c)
			}
		}
	}
	return func(statemachine.Result, []statemachine.Sealed) {}
}

func nsOf(ns string) string {
	if ns == "" {
		return registrar.DefaultNamespace
	}
	return ns
}

// --- generators ---------------------------------------------------------

func (p *propRun) drawTickStep() {
	var d int64
	switch k := rapid.IntRange(0, 39).Draw(p.t, "tick_kind"); {
	case k < 8:
		d = 0
	case k < 34:
		d = rapid.Int64Range(1, 3000).Draw(p.t, "dt")
	case k < 39:
		d = rapid.Int64Range(3000, 30_000).Draw(p.t, "dt")
	default: // far enough for default-retention pruning
		d = rapid.Int64Range(60_000, 4_000_000).Draw(p.t, "dt")
	}
	p.tick += registrar.Tick(d)
}

func (p *propRun) drawLeaseID(label string) string {
	t := p.t
	k := rapid.IntRange(0, 19).Draw(t, label+"_kind")
	switch {
	case k < 10 && len(p.active) > 0:
		return rapid.SampledFrom(p.active).Draw(t, label)
	case k < 16 && len(p.ids) > 0:
		return rapid.SampledFrom(p.ids).Draw(t, label)
	case k == 16:
		return rapid.SampledFrom([]string{"", "not-a-lease", "01ARZ3NDEKTSV4RRFFQ69G5FAV"}).Draw(t, label)
	case k == 17:
		// Well formed, this cluster's tag, never issued.
		return registrar.FormatLeaseID(wallBase, p.m.Registrar().IDTag(), p.maxFence+1+uint64(rapid.IntRange(0, 3).Draw(t, label)))
	case len(p.ids) > 0:
		// A known sequence with the wrong issue time: a forged id.
		l := p.leases[rapid.SampledFrom(p.ids).Draw(t, label)]
		if l.first.ID == "" {
			return "01ARZ3NDEKTSV4RRFFQ69G5FAV"
		}
		return registrar.FormatLeaseID(wallBase-1, p.m.Registrar().IDTag(), l.first.Fence)
	}
	return "01ARZ3NDEKTSV4RRFFQ69G5FAV"
}

// holderFor returns the lease's holder, or sometimes another one.
func (p *propRun) holderFor(id, label string) string {
	if pl := p.leases[id]; pl != nil && pl.last.Holder != "" && rapid.IntRange(0, 3).Draw(p.t, label+"_right") > 0 {
		return pl.last.Holder
	}
	return rapid.SampledFrom(append([]string{""}, propHolders...)).Draw(p.t, label)
}

func (p *propRun) drawTTL(label string) *int64 {
	switch k := rapid.IntRange(0, 9).Draw(p.t, label+"_kind"); {
	case k < 4:
		return nil
	case k < 9:
		v := rapid.Int64Range(1000, 8000).Draw(p.t, label)
		return &v
	default:
		v := rapid.SampledFrom([]int64{-5, 0, 500, 400_000}).Draw(p.t, label)
		return &v
	}
}

func dms(ms int64) *durationpb.Duration { return durationpb.New(time.Duration(ms) * time.Millisecond) }

func (p *propRun) drawPolicy() *tenurev1.NamespacePolicy {
	t := p.t
	pol := &tenurev1.NamespacePolicy{}
	if rapid.Bool().Draw(t, "set_renewals") {
		pol.MaxRenewals = proto.Uint32(rapid.Uint32Range(1, 3).Draw(t, "max_renewals"))
	}
	if rapid.Bool().Draw(t, "set_lifetime") {
		pol.MaxLifetime = dms(rapid.SampledFrom([]int64{0, 3000, 8000, 20_000}).Draw(t, "max_lifetime"))
	}
	if rapid.Bool().Draw(t, "set_retention") {
		pol.LeaseRetention = dms(rapid.Int64Range(500, 20_000).Draw(t, "retention"))
	}
	if rapid.IntRange(0, 3).Draw(t, "set_grace") == 0 {
		pol.MaxGrace = dms(rapid.SampledFrom([]int64{0, 2000, 15_000, 20_000}).Draw(t, "max_grace"))
	}
	if rapid.IntRange(0, 3).Draw(t, "set_waiters") == 0 {
		pol.MaxWaitersPerResource = rapid.Uint64Range(1, 3).Draw(t, "max_waiters")
	}
	if rapid.IntRange(0, 3).Draw(t, "set_retained") == 0 {
		pol.MaxRetainedLeases = rapid.Uint64Range(1, 4).Draw(t, "max_retained")
	}
	if rapid.IntRange(0, 3).Draw(t, "set_quota") == 0 {
		pol.MaxActivePerHolder = rapid.Uint64Range(1, 6).Draw(t, "max_per_holder")
	}
	if rapid.IntRange(0, 3).Draw(t, "set_default_ttl") == 0 {
		pol.DefaultTtl = dms(rapid.Int64Range(1000, 10_000).Draw(t, "default_ttl"))
	}
	if rapid.IntRange(0, 9).Draw(t, "set_bad") == 0 {
		pol.MinTtl, pol.MaxTtl = dms(5000), dms(2000)
	}
	return pol
}

func (p *propRun) drawCommand() *logpb.Command {
	t := p.t
	holder := func(label string) string { return rapid.SampledFrom(propHolders).Draw(t, label) }
	ns := func() string { return rapid.SampledFrom(propCmdNamespaces).Draw(t, "ns") }
	resource := func() string { return rapid.SampledFrom(propResources).Draw(t, "resource") }
	switch rapid.IntRange(0, 24).Draw(t, "op") {
	case 0, 1, 2, 3, 4, 5: // Acquire
		a := &logpb.Acquire{Namespace: ns(), Resource: resource(), Holder: holder("holder"), TtlMs: p.drawTTL("ttl")}
		a.Mode = tenurev1.Mode(rapid.IntRange(0, 2).Draw(t, "mode"))
		if rapid.IntRange(0, 2).Draw(t, "waits") == 0 {
			a.WaitMs = rapid.Int64Range(1, 8000).Draw(t, "wait")
		}
		return &logpb.Command{Actor: a.Holder, Op: &logpb.Command_Acquire{Acquire: a}}
	case 6, 7, 8, 9: // Renew
		c := &logpb.Renew{TtlMs: p.drawTTL("renew_ttl")}
		switch rapid.IntRange(0, 5).Draw(t, "renew_kind") {
		case 0: // all of a holder
			c.AllOfHolder, c.Holder = true, holder("holder")
			c.Namespace = rapid.SampledFrom([]string{"", "default", "team-b"}).Draw(t, "renew_ns")
		case 1: // batch
			n := rapid.IntRange(2, 3).Draw(t, "batch")
			for i := 0; i < n; i++ {
				c.LeaseIds = append(c.LeaseIds, p.drawLeaseID("lease"))
			}
		default:
			id := p.drawLeaseID("lease")
			if p.lastRenewed != "" && rapid.IntRange(0, 2).Draw(t, "renew_again") > 0 {
				id = p.lastRenewed // drive leases to their renewal limits
			}
			p.lastRenewed = id
			c.LeaseIds = []string{id}
			if rapid.Bool().Draw(t, "renew_holder") {
				c.Holder = p.holderFor(id, "holder")
			}
		}
		return &logpb.Command{Op: &logpb.Command_Renew{Renew: c}}
	case 10, 11, 12: // Release
		id := p.drawLeaseID("lease")
		c := &logpb.Release{LeaseId: id, Holder: p.holderFor(id, "holder"),
			Reason: tenurev1.ReleaseReason(rapid.SampledFrom([]int{0, 0, 1, 2, 3, 4, 9}).Draw(t, "reason"))}
		return &logpb.Command{Actor: c.Holder, Op: &logpb.Command_Release{Release: c}}
	case 13: // Revoke
		c := &logpb.Revoke{LeaseId: p.drawLeaseID("lease"), Reason: rapid.SampledFrom([]string{"", "stuck", "admin says so"}).Draw(t, "why")}
		return &logpb.Command{Actor: "admin", Op: &logpb.Command_Revoke{Revoke: c}}
	case 14, 15: // Transfer
		id := p.drawLeaseID("lease")
		c := &logpb.Transfer{LeaseId: id, Holder: p.holderFor(id, "holder"), NewHolder: holder("new_holder"),
			CarryLimits: rapid.Bool().Draw(t, "carry_limits")}
		if rapid.IntRange(0, 2).Draw(t, "transfer_ttl") == 0 {
			c.TtlMs = p.drawTTL("ttl")
		}
		return &logpb.Command{Actor: c.Holder, Op: &logpb.Command_Transfer{Transfer: c}}
	case 16: // Expire: due and not-due ids
		c := &logpb.Expire{}
		for _, l := range p.m.Registrar().Due(p.tick, 3) {
			c.LeaseIds = append(c.LeaseIds, l.ID)
		}
		n := rapid.IntRange(0, 2).Draw(t, "expire_n")
		for i := 0; i < n; i++ {
			c.LeaseIds = append(c.LeaseIds, p.drawLeaseID("lease"))
		}
		return &logpb.Command{Op: &logpb.Command_Expire{Expire: c}}
	case 17: // DeclareRestart
		c := &logpb.DeclareRestart{Holder: holder("holder"), Namespace: rapid.SampledFrom([]string{"", "default", "team-b"}).Draw(t, "restart_ns")}
		if rapid.Bool().Draw(t, "grace_set") {
			g := rapid.SampledFrom([]int64{0, 1000, 5000, 20_000}).Draw(t, "grace")
			c.GraceMs = &g
		}
		return &logpb.Command{Actor: c.Holder, Op: &logpb.Command_DeclareRestart{DeclareRestart: c}}
	case 18, 19: // WriteState
		c := &logpb.WriteState{Data: []byte(fmt.Sprintf("state %d", p.step))}
		var writers []registrar.Lease
		for _, id := range p.active {
			if l := p.leases[id].last; l.Mode == registrar.Exclusive {
				writers = append(writers, l)
			}
		}
		if len(writers) > 0 && rapid.IntRange(0, 3).Draw(t, "writer_right") > 0 {
			w := rapid.SampledFrom(writers).Draw(t, "writer")
			c.Namespace, c.Resource, c.LeaseId = w.Namespace, w.Resource, w.ID
		} else {
			c.Namespace, c.Resource, c.LeaseId = ns(), resource(), p.drawLeaseID("lease")
		}
		nsName := nsOf(c.Namespace)
		_, epoch, _ := p.m.Registrar().ReadState(nsName, c.Resource)
		switch rapid.IntRange(0, 3).Draw(t, "epoch") {
		case 0, 1:
			c.ExpectedEpoch = epoch
		case 2:
			c.ExpectedEpoch = epoch + 1 // future
		default:
			c.ExpectedEpoch = epoch - 1 // stale (wraps to a future one at 0)
		}
		return &logpb.Command{Actor: "writer", Op: &logpb.Command_WriteState{WriteState: c}}
	case 20, 21: // SetPolicy
		c := &logpb.SetPolicy{Namespace: rapid.SampledFrom([]string{"", "default", "team-b", "team-b", "*"}).Draw(t, "policy_ns"), Policy: p.drawPolicy()}
		return &logpb.Command{Actor: "admin", Op: &logpb.Command_SetPolicy{SetPolicy: c}}
	case 24: // SetMember (machine state beside the registrar's)
		c := &logpb.SetMember{Id: rapid.SampledFrom([]string{"", "n1", "n2"}).Draw(t, "member"),
			ApiAddress:  rapid.SampledFrom([]string{"", "127.0.0.1:7070", "127.0.0.1:7080"}).Draw(t, "api"),
			RaftAddress: "127.0.0.1:7071", Removed: rapid.IntRange(0, 3).Draw(t, "removed") == 0}
		return &logpb.Command{Actor: "registrar", Op: &logpb.Command_SetMember{SetMember: c}}
	default:
		// Now and then the idle leader's Advance that signs the tail to
		// prune (a checkpoint record, whose tick prunes).
		prune := rapid.IntRange(0, 3).Draw(t, "prune") == 0
		return &logpb.Command{Op: &logpb.Command_Advance{Advance: &logpb.Advance{Sign: prune, Prune: prune}}}
	}
}

// TestPropertyRegistrar is the main property: random sequences of every
// command, checked after every step, with a snapshot/restore cut.
func TestPropertyRegistrar(t *testing.T) {
	stats := map[string]int{}
	defer func() {
		if testing.Verbose() {
			keys := slices.Sorted(maps.Keys(stats))
			for _, k := range keys {
				t.Logf("%-40s %d", k, stats[k])
			}
		}
	}()
	rapid.Check(t, func(rt *rapid.T) {
		every := rapid.SampledFrom([]uint64{3, 16, 1024}).Draw(rt, "checkpoint_every")
		p := newPropRun(rt, every)
		p.stats = stats
		n := rapid.IntRange(50, 120).Draw(rt, "steps")
		cut := rapid.IntRange(0, n).Draw(rt, "cut")
		if rapid.Bool().Draw(rt, "initial_limits") {
			// Renewal limits and lifetimes in force from the start.
			pol := &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(rapid.Uint32Range(1, 4).Draw(rt, "initial_max_renewals"))}
			if rapid.Bool().Draw(rt, "initial_lifetime") {
				pol.MaxLifetime = dms(rapid.Int64Range(2000, 30_000).Draw(rt, "initial_max_lifetime"))
			}
			p.apply(&logpb.Command{Actor: "admin", Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "*", Policy: pol}}})
		}
		for i := 0; i < n; i++ {
			if i == cut {
				p.twin = p.restore(p.snap)
				p.sameSnapshot("restored snapshot", p.twin)
			}
			p.drawTickStep()
			p.apply(p.drawCommand())
		}
		// A fresh machine replaying the whole ledger reaches the same bytes.
		fresh := statemachine.New(p.cfg)
		fresh.SetKeySeed(p.seed)
		for i, b := range p.log {
			if _, err := fresh.Replay(b); err != nil {
				rt.Fatalf("replay of record %d: %v", i+1, err)
			}
		}
		p.sameSnapshot("fresh replay of the whole ledger", fresh)
		// Every checkpoint in it verifies, and they are no further apart
		// than one command's records allow.
		pub := p.m.PublicKey()
		for _, b := range p.log {
			rec := &logpb.Record{}
			if err := proto.Unmarshal(b, rec); err != nil {
				rt.Fatal(err)
			}
			if cp := rec.GetCheckpoint(); cp != nil && !ledger.VerifyCheckpoint(pub, cp) {
				rt.Fatalf("checkpoint %d does not verify", rec.Index)
			}
		}
	})
}
