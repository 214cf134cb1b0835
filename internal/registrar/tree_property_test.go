package registrar_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// treeRun drives random lease trees: roots with scopes and budgets,
// derivations, consumption and every way a lease ends, checking the lease
// tree invariants after every step, and that a replica replaying the
// ledger and a twin restored from a snapshot reach the same bytes.
type treeRun struct {
	t       *rapid.T
	cfg     statemachine.Config
	seed    []byte
	m       *statemachine.Machine
	replica *statemachine.Machine
	twin    *statemachine.Machine
	tick    registrar.Tick
	log     [][]byte
	ids     []string
	holder  map[string]string
	step    int
	stats   map[string]int
}

var (
	treeHolders  = []string{"a", "b", "c"}
	treeCounters = []string{"tokens", "calls", "bytes"}
	treePrefixes = []string{"r/", "r/1", "r/2/", "x/"}
	treeActions  = []string{"read", "write", "exec"}
)

func (p *treeRun) do(cmd *logpb.Command) statemachine.Result {
	cmd.Tick, cmd.Wall = int64(p.tick), wallBase+int64(p.tick)
	res := p.m.Apply(cmd)
	for _, s := range res.Records {
		if e := s.Record.GetEnded(); e != nil && e.EndedBy != 0 && p.stats != nil {
			p.stats["cascaded "+e.State.String()]++
		}
	}
	if p.twin != nil {
		p.twin.Apply(cmd)
	}
	for _, s := range res.Records {
		p.log = append(p.log, s.Bytes)
		if _, err := p.replica.Replay(s.Bytes); err != nil {
			p.t.Fatalf("step %d: replay record %d: %v", p.step, s.Record.Index, err)
		}
		if is := s.Record.GetIssued(); is != nil {
			p.ids = append(p.ids, is.LeaseId)
			p.holder[is.LeaseId] = is.Holder
		}
	}
	return res
}

func (p *treeRun) drawSubset(label string, from []string) []string {
	var out []string
	for _, v := range from {
		if rapid.IntRange(0, 3).Draw(p.t, label+"_"+v) == 0 {
			out = append(out, v)
		}
	}
	return out
}

func (p *treeRun) drawDerivation(label string, maxLimit int64) *logpb.Derivation {
	d := &logpb.Derivation{
		ResourcePrefixes: p.drawSubset(label+"_prefix", treePrefixes),
		Actions:          p.drawSubset(label+"_action", treeActions),
	}
	for _, c := range treeCounters {
		if rapid.IntRange(0, 2).Draw(p.t, label+"_has_"+c) == 0 {
			d.Limits = append(d.Limits, &logpb.CounterLimit{Counter: c, Limit: rapid.Int64Range(0, maxLimit).Draw(p.t, label+"_"+c)})
		}
	}
	return d
}

func (p *treeRun) drawID(label string) string {
	if len(p.ids) == 0 {
		return "00000000000000000000000000"
	}
	if rapid.IntRange(0, 3).Draw(p.t, label+"_any") != 0 {
		var act []string
		for _, id := range p.ids {
			if l, err := p.m.Registrar().Get(id, p.tick); err == nil && l.State == registrar.Active {
				act = append(act, id)
			}
		}
		if len(act) > 0 {
			return rapid.SampledFrom(act).Draw(p.t, label+"_active")
		}
	}
	// Recent leases are the interesting ones.
	lo := max(0, len(p.ids)-12)
	return p.ids[rapid.IntRange(lo, len(p.ids)-1).Draw(p.t, label)]
}

func (p *treeRun) drawCommand() *logpb.Command {
	ttl := func(label string) *int64 { return ms(rapid.Int64Range(2000, 60_000).Draw(p.t, label)) }
	switch rapid.IntRange(0, 9).Draw(p.t, "op") {
	case 0:
		return &logpb.Command{Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			Resource: fmt.Sprintf("r/%d", rapid.IntRange(0, 4).Draw(p.t, "res")),
			Holder:   rapid.SampledFrom(treeHolders).Draw(p.t, "holder"), TtlMs: ttl("ttl"),
			Derivation: p.drawDerivation("root", 100),
		}}}
	case 1, 2, 3:
		parent := p.drawID("parent")
		h := p.holder[parent]
		if rapid.IntRange(0, 9).Draw(p.t, "wrong_holder") == 0 {
			h = rapid.SampledFrom(treeHolders).Draw(p.t, "caller")
		}
		return &logpb.Command{Op: &logpb.Command_Derive{Derive: &logpb.Derive{
			ParentLeaseId: parent, Holder: h, NewHolder: rapid.SampledFrom(treeHolders).Draw(p.t, "new_holder"),
			Namespace:  rapid.SampledFrom([]string{"", "", "other"}).Draw(p.t, "ns"),
			Resource:   fmt.Sprintf("r/%d/%d", rapid.IntRange(0, 2).Draw(p.t, "res"), rapid.IntRange(0, 20).Draw(p.t, "sub")),
			TtlMs:      ttl("ttl"),
			Derivation: p.drawDerivation("child", 60),
		}}}
	case 4, 5:
		return &logpb.Command{Op: &logpb.Command_Consume{Consume: &logpb.Consume{
			LeaseId: p.drawID("lease"), Counter: rapid.SampledFrom(treeCounters).Draw(p.t, "counter"),
			Amount: rapid.Int64Range(1, 30).Draw(p.t, "amount"),
		}}}
	case 6:
		id := p.drawID("lease")
		return &logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id, Holder: p.holder[id]}}}
	case 7:
		return &logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: p.drawID("lease"), Reason: "prop"}}}
	case 8:
		id := p.drawID("lease")
		return &logpb.Command{Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{LeaseId: id, Holder: p.holder[id],
			NewHolder: rapid.SampledFrom(treeHolders).Draw(p.t, "new_holder")}}}
	default:
		return &logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{p.drawID("lease")}, TtlMs: ttl("ttl")}}}
	}
}

// coveredBy reports whether a child's scope list lies within its parent's.
func coveredBy(child, parent []string, prefix bool) bool {
	if len(parent) == 0 {
		return true
	}
	if len(child) == 0 {
		return false // an empty child list would be wider than the parent's
	}
	for _, c := range child {
		ok := false
		for _, q := range parent {
			if c == q || prefix && strings.HasPrefix(c, q) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// checkTrees checks the lease tree invariants at tick t.
func checkTrees(r *registrar.Registrar, ids []string, t registrar.Tick) error {
	views := map[string]registrar.Lease{}
	for _, id := range ids {
		if l, err := r.Get(id, t); err == nil {
			views[id] = l
		}
	}
	for id, l := range views {
		for _, c := range l.Counters {
			if c.Used < 0 || c.Reserved < 0 {
				return fmt.Errorf("lease %s counter %s: used %d, reserved %d", id, c.Name, c.Used, c.Reserved)
			}
			if c.Limited && c.Used+c.Reserved > c.Limit {
				return fmt.Errorf("lease %s counter %s: used %d + reserved %d > limit %d", id, c.Name, c.Used, c.Reserved, c.Limit)
			}
		}
		p, ok := views[l.ParentID]
		if !ok {
			continue
		}
		if !coveredBy(l.Scope.Namespaces, p.Scope.Namespaces, false) ||
			!coveredBy(l.Scope.ResourcePrefixes, p.Scope.ResourcePrefixes, true) ||
			!coveredBy(l.Scope.Actions, p.Scope.Actions, false) {
			return fmt.Errorf("lease %s scope %+v is not within its parent %s's %+v", id, l.Scope, p.ID, p.Scope)
		}
		if l.State == registrar.Active {
			for a, ok := p, true; ok; a, ok = views[a.ParentID] {
				if a.State != registrar.Active {
					return fmt.Errorf("lease %s is ACTIVE under ended ancestor %s (%v)", id, a.ID, a.State)
				}
			}
			if l.ExpiresTick > p.Deadline() {
				return fmt.Errorf("lease %s expires at %d, after its parent %s's deadline %d", id, l.ExpiresTick, p.ID, p.Deadline())
			}
		}
	}
	// Reservations: an active lease reserves exactly the limits of its
	// active children, for the counters it limits.
	for id, p := range views {
		if p.State != registrar.Active {
			continue
		}
		tr, err := r.Tree(id, t)
		if err != nil {
			return err
		}
		sum := map[string]int64{}
		for _, c := range tr[1:] {
			if c.ParentID != id || c.State != registrar.Active {
				continue
			}
			for _, cc := range c.Counters {
				if cc.Limited {
					sum[cc.Name] += cc.Limit
				}
			}
		}
		for _, pc := range p.Counters {
			if pc.Limited && pc.Reserved != sum[pc.Name] {
				return fmt.Errorf("lease %s reserves %d %s; its active children were carved %d", id, pc.Reserved, pc.Name, sum[pc.Name])
			}
			if pc.Limited && sum[pc.Name] > pc.Limit-pc.Used {
				return fmt.Errorf("lease %s: children carved %d %s, more than its %d - %d", id, sum[pc.Name], pc.Name, pc.Limit, pc.Used)
			}
		}
	}
	return nil
}

func TestPropertyLeaseTrees(t *testing.T) {
	stats := map[string]int{}
	defer func() {
		if testing.Verbose() {
			for k, v := range stats {
				t.Logf("%-50s %d", k, v)
			}
		}
	}()
	rapid.Check(t, func(rt *rapid.T) {
		cfg := statemachine.DefaultConfig()
		p := &treeRun{t: rt, cfg: cfg, seed: propKeySeed(), tick: 1000,
			m: statemachine.New(cfg), replica: statemachine.New(cfg), holder: map[string]string{}, stats: stats}
		p.replica.SetKeySeed(p.seed)
		p.do(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: p.seed}}})
		// Short retentions, different per namespace, so that parents and
		// children are pruned, sometimes parents first.
		for _, ns := range []string{"default", "other"} {
			ret := rapid.SampledFrom([]int64{2000, 5000, 3_600_000}).Draw(rt, "retention_"+ns)
			res := p.do(&logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: ns,
				Policy: &tenurev1.NamespacePolicy{LeaseRetention: dms(ret)}}}})
			if res.Outcome.Err != nil {
				rt.Fatal(res.Outcome.Err)
			}
		}
		n := rapid.IntRange(40, 120).Draw(rt, "steps")
		cut := rapid.IntRange(0, n).Draw(rt, "cut")
		for p.step = 0; p.step < n; p.step++ {
			if p.step == cut {
				tw, err := statemachine.Restore(cfg, mustSnapshot(rt, p.m))
				if err != nil {
					rt.Fatalf("restore: %v", err)
				}
				p.twin = tw
			}
			p.tick += registrar.Tick(rapid.Int64Range(0, 2500).Draw(rt, "dt"))
			// Expiries due now first, so that the command's own records
			// can be told apart: a rejected command emits nothing.
			p.do(&logpb.Command{Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}})
			cmd := p.drawCommand()
			res := p.do(cmd)
			op := strings.TrimPrefix(fmt.Sprintf("%T", cmd.Op), "*logpb.Command_")
			stats[op+" "+string(registrar.ReasonOf(res.Outcome.Err))]++
			if registrar.ReasonOf(res.Outcome.Err) == registrar.ReasonInvalidArgument {
				stats[op+" "+res.Outcome.Err.Error()]++
			}
			if res.Outcome.Err != nil && len(res.Records) > 0 {
				rt.Fatalf("step %d: %T rejected (%v) but emitted %d records", p.step, cmd.Op, res.Outcome.Err, len(res.Records))
			}
			if err := checkTrees(p.m.Registrar(), p.ids, p.tick); err != nil {
				rt.Fatalf("step %d after %T: %v", p.step, cmd.Op, err)
			}
			want := mustSnapshot(rt, p.m)
			if got := mustSnapshot(rt, p.replica); !bytes.Equal(got, want) {
				rt.Fatalf("step %d: replica differs from the live state\n%s", p.step, snapDiff(got, want))
			}
			if p.twin != nil {
				if got := mustSnapshot(rt, p.twin); !bytes.Equal(got, want) {
					rt.Fatalf("step %d: restored twin differs from the live state\n%s", p.step, snapDiff(got, want))
				}
			}
		}
		fresh := statemachine.New(cfg)
		fresh.SetKeySeed(p.seed)
		for i, b := range p.log {
			if _, err := fresh.Replay(b); err != nil {
				rt.Fatalf("replay of record %d: %v", i+1, err)
			}
		}
		if !bytes.Equal(mustSnapshot(rt, fresh), mustSnapshot(rt, p.m)) {
			rt.Fatalf("fresh replay differs from the live state")
		}
	})
}

func snapDiff(a, b []byte) string {
	la, lb := strings.Split(snapText(a), "\n"), strings.Split(snapText(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("first difference at line %d:\n got %s\nwant %s", i, la[i], lb[i])
		}
	}
	return fmt.Sprintf("lengths %d vs %d", len(la), len(lb))
}
