package registrar_test

import (
	"bytes"
	"flag"
	"fmt"
	"google.golang.org/protobuf/proto"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// Scenario files (testdata/scenarios/*.txt) script the registrar in the
// spirit of etcd-io/raft's testdata: a command, "----", then the records it
// emitted and its outcome, then a blank line. Lease ids are written L<fence>
// (a lease's fence is its sequence number) and waiters W<id>, so the files
// stay readable and deterministic. Lines starting with # are comments.
//
// Regenerate the expected output after a deliberate change with
//
//	go test ./internal/registrar -run TestScenarios -scenario-rewrite
//
// and review the diff.
//
// Commands (key=value options in any order after the positional ones):
//
//	at TICK | after MS | advance
//	acquire RES HOLDER [ttl=MS] [wait=MS] [shared] [ns=NS]
//	renew L.. [ttl=MS] [holder=H] | renew-all HOLDER [ns=NS] [ttl=MS]
//	release L HOLDER [reason=COMPLETED|ABORTED|VOLUNTARY]
//	revoke L [reason=TEXT] | transfer L HOLDER NEWHOLDER [ttl=MS]
//	expire L.. | restart HOLDER [grace=MS] [ns=NS]
//	write RES L EPOCH DATA | read RES
//	policy NS [max_renewals=N] [max_lifetime=MS] [max_waiters=N]
//	       [max_per_holder=N] [max_per_namespace=N] [retention=MS]
//	get L.. | active RES | queue RES | fence RES FENCE
//	derive L HOLDER RES [new=H] [ttl=MS] [ns=NS] [SCOPE] [budget=C:N,..]
//	consume L COUNTER AMOUNT [holder=H]
//	authorize L [res=R] [action=A] [ns=NS] | tree L
//
// SCOPE is any of namespaces=A,B prefixes=P,Q actions=X,Y; acquire takes
// SCOPE and budget= too (a root lease's scope and budget).
var scenarioRewrite = flag.Bool("scenario-rewrite", false, "rewrite the expected output of scenario files")

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			t.Parallel()
			runScenario(t, f)
		})
	}
}

type scenarioBlock struct {
	comments []string // lines before the command
	line     int
	cmd      string
	want     []string
}

func parseScenario(t *testing.T, path string) (blocks []scenarioBlock, trailing []string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var cur scenarioBlock
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			cur.comments = append(cur.comments, l)
			continue
		}
		cur.cmd, cur.line = strings.TrimSpace(l), i+1
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ----", path, i+1)
		}
		i += 2
		for ; i < len(lines) && lines[i] != ""; i++ {
			cur.want = append(cur.want, lines[i])
		}
		blocks = append(blocks, cur)
		cur = scenarioBlock{}
	}
	return blocks, cur.comments
}

func runScenario(t *testing.T, path string) {
	blocks, trailing := parseScenario(t, path)
	e := setup(t)
	s := &scenario{e: e, tag: e.m.Registrar().IDTag(), ids: map[uint64]string{}}
	var out strings.Builder
	failed := false
	for _, b := range blocks {
		got := s.run(b.cmd)
		for _, c := range b.comments {
			out.WriteString(c + "\n")
		}
		fmt.Fprintf(&out, "%s\n----\n", b.cmd)
		for _, l := range got {
			out.WriteString(l + "\n")
		}
		out.WriteString("\n")
		if !*scenarioRewrite && strings.Join(got, "\n") != strings.Join(b.want, "\n") {
			t.Errorf("%s:%d: %s\ngot:\n  %s\nwant:\n  %s", path, b.line, b.cmd,
				strings.Join(got, "\n  "), strings.Join(b.want, "\n  "))
			failed = true
		}
	}
	for _, c := range trailing {
		out.WriteString(c + "\n")
	}
	e.wantReplayEqual()
	if *scenarioRewrite {
		text := strings.TrimRight(out.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if failed {
		t.Log("rerun with -scenario-rewrite to accept the new output")
	}
}

type scenario struct {
	e   *env
	tag uint16
	ids map[uint64]string // lease ids by fence, as issued
}

var scenarioIDPattern = regexp.MustCompile(`\b[0-7][0-9A-HJKMNP-TV-Z]{25}\b`)

// name renders a lease id as L<fence>.
func (s *scenario) name(id string) string {
	if _, _, seq, err := registrar.ParseLeaseID(id); err == nil {
		return "L" + strconv.FormatUint(seq, 10)
	}
	return id
}

// id resolves L<n> to the id of lease n, or to an id never issued.
func (s *scenario) id(ref string) string {
	n, err := strconv.ParseUint(strings.TrimPrefix(ref, "L"), 10, 64)
	if !strings.HasPrefix(ref, "L") || err != nil {
		return ref
	}
	if id, ok := s.ids[n]; ok {
		return id
	}
	return registrar.FormatLeaseID(1, s.tag, n)
}

// redact replaces lease ids in free text by their names.
func (s *scenario) redact(msg string) string {
	return scenarioIDPattern.ReplaceAllStringFunc(msg, s.name)
}

func (s *scenario) run(line string) []string {
	e := s.e
	f := strings.Fields(line)
	verb, pos, opt := f[0], []string{}, map[string]string{}
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			opt[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			e.t.Fatalf("%q: bad number %q", line, s)
		}
		return v
	}
	optMs := func(k string) *int64 {
		if v, ok := opt[k]; ok {
			return ms(num(v))
		}
		return nil
	}
	ids := func(refs []string) []string {
		out := make([]string, len(refs))
		for i, r := range refs {
			out[i] = s.id(r)
		}
		return out
	}
	need := func(n int) {
		if len(pos) < n {
			e.t.Fatalf("%q: want %d arguments", line, n)
		}
	}
	mark := e.mark()
	var out registrar.Outcome
	switch verb {
	case "at":
		need(1)
		e.at(registrar.Tick(num(pos[0])))
		return []string{fmt.Sprintf("tick %d", e.tick)}
	case "after":
		need(1)
		e.after(num(pos[0]))
		return []string{fmt.Sprintf("tick %d", e.tick)}
	case "advance":
		out = e.advance()
	case "acquire":
		need(2)
		a := &logpb.Acquire{Resource: pos[0], Holder: pos[1], TtlMs: optMs("ttl"), Namespace: opt["ns"]}
		if w := optMs("wait"); w != nil {
			a.WaitMs = *w
		}
		for _, p := range pos[2:] {
			if p == "shared" {
				a.Mode = tenurev1.Mode_MODE_SHARED
			}
		}
		a.Derivation = s.derivation(opt)
		out = e.do(&logpb.Command{Actor: a.Holder, Op: &logpb.Command_Acquire{Acquire: a}})
	case "renew":
		out = e.renewWith(&logpb.Renew{LeaseIds: ids(pos), TtlMs: optMs("ttl"), Holder: opt["holder"]})
	case "renew-all":
		need(1)
		out = e.renewWith(&logpb.Renew{Holder: pos[0], AllOfHolder: true, Namespace: opt["ns"], TtlMs: optMs("ttl")})
	case "release":
		need(2)
		r := &logpb.Release{LeaseId: s.id(pos[0]), Holder: pos[1]}
		if v, ok := opt["reason"]; ok {
			r.Reason = tenurev1.ReleaseReason(tenurev1.ReleaseReason_value["RELEASE_REASON_"+v])
		}
		out = e.releaseWith(r)
	case "revoke":
		need(1)
		out = e.revoke(s.id(pos[0]), opt["reason"])
	case "transfer":
		need(3)
		out = e.transfer(s.id(pos[0]), pos[1], pos[2], optMs("ttl"))
	case "expire":
		out = e.expire(ids(pos)...)
	case "restart":
		need(1)
		out = e.declareRestartIn(pos[0], opt["ns"], optMs("grace"))
	case "write":
		need(4)
		out = e.writeState(pos[0], s.id(pos[1]), uint64(num(pos[2])), []byte(pos[3]))
	case "policy":
		need(1)
		p := &tenurev1.NamespacePolicy{}
		for k, v := range opt {
			switch k {
			case "max_renewals":
				p.MaxRenewals = proto.Uint32(uint32(num(v)))
			case "max_lifetime":
				p.MaxLifetime = durationpb.New(time.Duration(num(v)) * time.Millisecond)
			case "max_waiters":
				p.MaxWaitersPerResource = uint64(num(v))
			case "max_per_holder":
				p.MaxActivePerHolder = uint64(num(v))
			case "max_per_namespace":
				p.MaxActivePerNamespace = uint64(num(v))
			case "retention":
				p.LeaseRetention = durationpb.New(time.Duration(num(v)) * time.Millisecond)
			default:
				e.t.Fatalf("%q: unknown policy field %s", line, k)
			}
		}
		out = e.do(&logpb.Command{Actor: "admin", Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: pos[0], Policy: p}}})
	case "derive":
		need(3)
		d := &logpb.Derive{ParentLeaseId: s.id(pos[0]), Holder: pos[1], Resource: pos[2], NewHolder: opt["new"],
			TtlMs: optMs("ttl"), Namespace: opt["ns"], Derivation: s.derivation(opt)}
		out = e.do(&logpb.Command{Actor: d.Holder, Op: &logpb.Command_Derive{Derive: d}})
	case "consume":
		need(3)
		out = e.do(&logpb.Command{Op: &logpb.Command_Consume{Consume: &logpb.Consume{
			LeaseId: s.id(pos[0]), Counter: pos[1], Amount: num(pos[2]), Holder: opt["holder"]}}})
	case "authorize":
		need(1)
		denied, err := e.m.Registrar().Authorize(s.id(pos[0]), opt["ns"], opt["res"], opt["action"], e.tick)
		switch {
		case err != nil:
			return []string{"error " + s.redact(err.Error())}
		case denied != nil:
			return []string{"denied " + s.redact(denied.Error())}
		}
		return []string{"allowed"}
	case "tree":
		need(1)
		ls, err := e.m.Registrar().Tree(s.id(pos[0]), e.tick)
		if err != nil {
			return []string{"error " + s.redact(err.Error())}
		}
		depth := map[string]int{}
		var lines []string
		for _, l := range ls {
			d := 0
			if pd, ok := depth[l.ParentID]; ok {
				d = pd + 1
			}
			depth[l.ID] = d
			lines = append(lines, strings.Repeat("  ", d)+s.lease(l))
		}
		return lines
	case "get":
		var lines []string
		for _, r := range pos {
			l, err := e.m.Registrar().Get(s.id(r), e.tick)
			if err != nil {
				lines = append(lines, s.redact(err.Error()))
				continue
			}
			lines = append(lines, s.lease(l))
		}
		return lines
	case "active":
		need(1)
		lines := []string{}
		for _, l := range e.m.Registrar().Active(opt["ns"], pos[0], e.tick) {
			lines = append(lines, s.lease(l))
		}
		if len(lines) == 0 {
			lines = append(lines, "none")
		}
		return lines
	case "queue":
		need(1)
		var q []string
		for _, w := range e.m.Registrar().Waiters(opt["ns"], pos[0]) {
			q = append(q, fmt.Sprintf("W%d %s %s", w.ID, w.Holder, w.Mode))
		}
		if len(q) == 0 {
			return []string{"empty"}
		}
		return []string{strings.Join(q, ", ")}
	case "read":
		need(1)
		data, epoch, err := e.m.Registrar().ReadState(opt["ns"], pos[0])
		if err != nil {
			return []string{err.Error()}
		}
		return []string{fmt.Sprintf("epoch %d data %q", epoch, data)}
	case "fence":
		need(2)
		cur, active, err := e.m.Registrar().Fence(opt["ns"], pos[0], uint64(num(pos[1])), e.tick)
		if err != nil {
			return []string{err.Error()}
		}
		return []string{fmt.Sprintf("current %v active %d", cur, active)}
	default:
		e.t.Fatalf("%q: unknown command %s", line, verb)
	}
	var lines []string
	for _, rec := range e.since(mark) {
		if is := rec.GetIssued(); is != nil {
			s.ids[is.Seq] = is.LeaseId
		}
		lines = append(lines, s.record(rec))
	}
	return append(lines, s.outcome(out)...)
}

func (s *scenario) lease(l registrar.Lease) string {
	b := fmt.Sprintf("%s %s %s %s %s %s", s.name(l.ID), l.Namespace, l.Resource, l.Holder, l.Mode, l.State)
	b += fmt.Sprintf(" exp=%d", l.ExpiresTick)
	if l.GraceTick > l.ExpiresTick {
		b += fmt.Sprintf(" grace=%d", l.GraceTick)
	}
	if l.RenewalCount > 0 {
		b += fmt.Sprintf(" renewals=%d", l.RenewalCount)
	}
	if l.State == registrar.Active {
		b += fmt.Sprintf(" left=%v", l.Remaining)
	} else {
		b += fmt.Sprintf(" ended_at=%d", l.TerminatedAt.UnixMilli()-wallBase)
	}
	if l.ReleaseReason != 0 {
		b += " reason=" + strings.TrimPrefix(l.ReleaseReason.String(), "RELEASE_REASON_")
	}
	if l.ParentID != "" {
		b += " parent=" + s.name(l.ParentID)
	}
	if l.EndedBy != "" {
		b += " by=" + s.name(l.EndedBy)
	}
	if sc := scopeText(l.Scope.Namespaces, l.Scope.ResourcePrefixes, l.Scope.Actions); sc != "" {
		b += " scope=" + sc
	}
	for _, c := range l.Counters {
		if c.Limited {
			b += fmt.Sprintf(" %s=%d/%d", c.Name, c.Used, c.Limit)
			if c.Reserved != 0 {
				b += fmt.Sprintf("+%d", c.Reserved)
			}
		} else {
			b += fmt.Sprintf(" %s=%d", c.Name, c.Used)
		}
	}
	return b
}

// scopeText renders a scope compactly: ns[..] pre[..] act[..].
func scopeText(ns, pre, act []string) string {
	var parts []string
	for _, k := range []struct {
		name string
		v    []string
	}{{"ns", ns}, {"pre", pre}, {"act", act}} {
		if len(k.v) > 0 {
			parts = append(parts, k.name+"["+strings.Join(k.v, ",")+"]")
		}
	}
	return strings.Join(parts, "")
}

// derivation reads SCOPE and budget= options.
func (s *scenario) derivation(opt map[string]string) *logpb.Derivation {
	list := func(k string) []string {
		if v, ok := opt[k]; ok {
			return strings.Split(v, ",")
		}
		return nil
	}
	d := &logpb.Derivation{Namespaces: list("namespaces"), ResourcePrefixes: list("prefixes"), Actions: list("actions")}
	for _, kv := range list("budget") {
		name, n, _ := strings.Cut(kv, ":")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			s.e.t.Fatalf("budget %q: %v", kv, err)
		}
		d.Limits = append(d.Limits, &logpb.CounterLimit{Counter: name, Limit: v})
	}
	if len(d.Namespaces)+len(d.ResourcePrefixes)+len(d.Actions)+len(d.Limits) == 0 {
		return nil
	}
	return d
}

func (s *scenario) record(rec *logpb.Record) string {
	switch b := rec.Body.(type) {
	case *logpb.Record_Issued:
		is := b.Issued
		x := fmt.Sprintf("issued L%d %s/%s %s %s ttl=%d exp=%d", is.Seq, is.Namespace, is.Resource, is.Holder,
			strings.TrimPrefix(is.Mode.String(), "MODE_"), is.TtlMs, is.ExpiresTick)
		if is.WaiterId != 0 {
			x += fmt.Sprintf(" waiter=W%d", is.WaiterId)
		}
		if is.TransferredFrom != 0 {
			x += fmt.Sprintf(" from=L%d", is.TransferredFrom)
		}
		if d := is.Derivation; d != nil {
			if d.ParentSeq != 0 {
				x += fmt.Sprintf(" parent=L%d", d.ParentSeq)
			}
			if sc := scopeText(d.Namespaces, d.ResourcePrefixes, d.Actions); sc != "" {
				x += " scope=" + sc
			}
			for _, cl := range d.Limits {
				x += fmt.Sprintf(" %s<=%d", cl.Counter, cl.Limit)
			}
		}
		return x
	case *logpb.Record_Renewed:
		return fmt.Sprintf("renewed L%d exp=%d ttl=%d", b.Renewed.GetLease().GetSeq(), b.Renewed.ExpiresTick, b.Renewed.TtlMs)
	case *logpb.Record_Ended:
		en := b.Ended
		x := fmt.Sprintf("ended L%d %s", en.GetLease().GetSeq(), strings.TrimPrefix(en.State.String(), "STATE_"))
		if en.Reason != 0 {
			x += " reason=" + strings.TrimPrefix(en.Reason.String(), "RELEASE_REASON_")
		}
		if en.RevokeReason != "" {
			x += fmt.Sprintf(" revoke_reason=%q", en.RevokeReason)
		}
		if en.TransferredTo != 0 {
			x += fmt.Sprintf(" to=L%d", en.TransferredTo)
		}
		if en.EndedBy != 0 {
			x += fmt.Sprintf(" by=L%d", en.EndedBy)
		}
		return x
	case *logpb.Record_Consumed:
		return fmt.Sprintf("consumed L%d %s=%d", b.Consumed.GetLease().GetSeq(), b.Consumed.Counter, b.Consumed.Amount)
	case *logpb.Record_Grace:
		return fmt.Sprintf("grace L%d until=%d", b.Grace.GetLease().GetSeq(), b.Grace.UntilTick)
	case *logpb.Record_Waiting:
		w := b.Waiting
		x := fmt.Sprintf("waiting W%d %s/%s %s %s deadline=%d", w.WaiterId, w.Namespace, w.Resource, w.Holder,
			strings.TrimPrefix(w.Mode.String(), "MODE_"), w.DeadlineTick)
		if d := w.Derivation; d != nil {
			if sc := scopeText(d.Namespaces, d.ResourcePrefixes, d.Actions); sc != "" {
				x += " scope=" + sc
			}
			for _, cl := range d.Limits {
				x += fmt.Sprintf(" %s<=%d", cl.Counter, cl.Limit)
			}
		}
		return x
	case *logpb.Record_WaitEnded:
		w := b.WaitEnded
		return fmt.Sprintf("wait_ended W%d %s/%s %s", w.WaiterId, w.Namespace, w.Resource, w.Holder)
	case *logpb.Record_StateWritten:
		sw := b.StateWritten
		return fmt.Sprintf("state %s/%s epoch=%d by=L%d data=%q", sw.Namespace, sw.Resource, sw.Epoch, sw.Seq, sw.Data)
	case *logpb.Record_PolicySet:
		return "policy " + b.PolicySet.Namespace
	}
	return recordKind(rec)
}

func (s *scenario) outcome(out registrar.Outcome) []string {
	if out.Err != nil {
		return []string{"error " + s.redact(out.Err.Error())}
	}
	var parts []string
	if out.Released != nil {
		parts = append(parts, "released "+s.name(out.Released.ID))
	}
	if out.Lease != nil {
		parts = append(parts, "lease "+s.lease(*out.Lease))
	}
	if out.WaiterID != 0 {
		parts = append(parts, fmt.Sprintf("queued W%d", out.WaiterID))
	}
	if out.AlreadyTerminal {
		parts = append(parts, "already terminal")
	}
	if out.Epoch != 0 {
		parts = append(parts, fmt.Sprintf("epoch %d", out.Epoch))
	}
	lines := []string{"ok" + prefixed(strings.Join(parts, "; "))}
	if out.Lease == nil {
		for _, l := range out.Leases {
			lines = append(lines, "  "+s.lease(l))
		}
	}
	for _, f := range out.Failures {
		lines = append(lines, "  failed "+s.name(f.LeaseID)+": "+s.redact(f.Err.Error()))
	}
	return lines
}

func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

// wantReplayEqual replays the env's ledger into a fresh machine and checks
// that it reaches the same snapshot bytes (INV-0502: the state is a pure
// function of the record sequence).
func (e *env) wantReplayEqual() {
	e.t.Helper()
	m := statemachine.New(statemachine.DefaultConfig())
	m.SetKeySeed(e.seed)
	for i, b := range e.log {
		if _, err := m.Replay(b); err != nil {
			e.t.Fatalf("replay record %d: %v", i, err)
		}
	}
	want, err := e.m.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := m.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		e.t.Fatalf("replayed state differs from the live one (%d vs %d snapshot bytes)", len(got), len(want))
	}
	// And the snapshot restores to itself.
	r, err := statemachine.Restore(statemachine.DefaultConfig(), want)
	if err != nil {
		e.t.Fatalf("restore: %v", err)
	}
	if again, err := r.Snapshot(); err != nil || !bytes.Equal(again, want) {
		e.t.Fatalf("snapshot does not round-trip (%v)", err)
	}
}
