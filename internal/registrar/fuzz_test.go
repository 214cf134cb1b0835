package registrar_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// fuzzBase is a machine holding a bit of everything: exclusive and shared
// leases, waiters (one exclusive blocking a shared one), a restart grace,
// guarded state, a namespace policy with limits, and ended leases.
type fuzzBase struct {
	cfg  statemachine.Config
	seed []byte
	snap []byte
	tick registrar.Tick
	ids  map[string]string // name → lease id
}

func i64p(v int64) *int64 { return &v }

func newFuzzBase(t testing.TB) *fuzzBase {
	t.Helper()
	cfg := statemachine.DefaultConfig()
	cfg.CheckpointEvery = 8
	m := statemachine.New(cfg)
	seed := propKeySeed()
	tick := int64(1000)
	do := func(cmd *logpb.Command) registrar.Outcome {
		t.Helper()
		cmd.Tick, cmd.Wall = tick, wallBase+tick
		out := m.Apply(cmd).Outcome
		if out.Err != nil {
			t.Fatalf("base: %v: %v", cmd, out.Err)
		}
		return out
	}
	acq := func(ns, res, holder string, mode tenurev1.Mode, ttlMs, waitMs int64) registrar.Outcome {
		return do(&logpb.Command{Actor: holder, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
			Namespace: ns, Resource: res, Holder: holder, Mode: mode, TtlMs: &ttlMs, WaitMs: waitMs}}})
	}
	ids := map[string]string{}
	do(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: seed}}})
	do(&logpb.Command{Actor: "admin", Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "team-b",
		Policy: &tenurev1.NamespacePolicy{MaxRenewals: proto.Uint32(1), LeaseRetention: dms(2000), MaxLifetime: dms(20_000)}}}})
	ids["released"] = acq("", "gone", "h1", 0, 5000, 0).Lease.ID
	do(&logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: ids["released"], Holder: "h1"}}})
	ids["revoked"] = acq("", "gone", "h2", 0, 5000, 0).Lease.ID
	do(&logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: ids["revoked"], Reason: "why not"}}})
	ids["expired"] = acq("team-b", "short", "h3", 0, 1000, 0).Lease.ID
	tick += 2000
	ids["a"] = acq("", "a", "h1", 0, 8000, 0).Lease.ID
	acq("", "a", "h2", 0, 5000, 10_000) // waiter
	do(&logpb.Command{Actor: "h1", Op: &logpb.Command_WriteState{WriteState: &logpb.WriteState{Resource: "a", LeaseId: ids["a"], Data: []byte("v1")}}})
	ids["b1"] = acq("", "b", "h1", tenurev1.Mode_MODE_SHARED, 6000, 0).Lease.ID
	ids["b2"] = acq("", "b", "h2", tenurev1.Mode_MODE_SHARED, 9000, 0).Lease.ID
	acq("", "b", "h3", tenurev1.Mode_MODE_EXCLUSIVE, 4000, 8000) // waiter
	acq("", "b", "h1", tenurev1.Mode_MODE_SHARED, 4000, 12_000)  // waiter behind it
	ids["c"] = acq("team-b", "c", "h3", 0, 3000, 0).Lease.ID
	do(&logpb.Command{Actor: "h3", Op: &logpb.Command_DeclareRestart{DeclareRestart: &logpb.DeclareRestart{Holder: "h3"}}})
	// A lease tree: a scoped, budgeted root, a child and a grandchild.
	ids["root"] = do(&logpb.Command{Actor: "agent", Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{
		Resource: "job", Holder: "agent", TtlMs: i64p(10_000), Derivation: &logpb.Derivation{
			ResourcePrefixes: []string{"job/"}, Actions: []string{"read", "write"},
			Limits: []*logpb.CounterLimit{{Counter: "calls", Limit: 10}, {Counter: "tokens", Limit: 100}}}}}}).Lease.ID
	ids["mid"] = do(&logpb.Command{Actor: "agent", Op: &logpb.Command_Derive{Derive: &logpb.Derive{
		ParentLeaseId: ids["root"], Holder: "agent", NewHolder: "sub", Resource: "job/a",
		Derivation: &logpb.Derivation{Actions: []string{"read"}, Limits: []*logpb.CounterLimit{{Counter: "tokens", Limit: 40}}}}}}).Lease.ID
	ids["leaf"] = do(&logpb.Command{Actor: "sub", Op: &logpb.Command_Derive{Derive: &logpb.Derive{
		ParentLeaseId: ids["mid"], Holder: "sub", NewHolder: "subsub", Resource: "job/a/1",
		Derivation: &logpb.Derivation{Limits: []*logpb.CounterLimit{{Counter: "tokens", Limit: 10}}}}}}).Lease.ID
	do(&logpb.Command{Op: &logpb.Command_Consume{Consume: &logpb.Consume{LeaseId: ids["leaf"], Counter: "tokens", Amount: 4}}})
	tick += 500
	do(&logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{ids["b1"]}}}})
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzBase{cfg: cfg, seed: seed, snap: snap, tick: m.Registrar().Tick(), ids: ids}
}

func (b *fuzzBase) machine(t testing.TB) *statemachine.Machine {
	m, err := statemachine.Restore(b.cfg, b.snap)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// seedCommands are valid and invalid commands of every kind against the base.
func (b *fuzzBase) seedCommands() []*logpb.Command {
	t0 := int64(b.tick)
	id := b.ids
	i64 := func(v int64) *int64 { return &v }
	return []*logpb.Command{
		{Tick: t0, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "a", Holder: "h3"}}},
		{Tick: t0 + 100, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "new", Holder: "h3", TtlMs: i64(2000), Mode: tenurev1.Mode_MODE_SHARED}}},
		{Tick: t0 + 100, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: "b", Holder: "h2", WaitMs: 3000}}},
		{Tick: t0 + 9000, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Namespace: "team-b", Resource: "c", Holder: "h1"}}},
		{Tick: t0 + 1000, Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{id["a"]}, TtlMs: i64(9000)}}},
		{Tick: t0 + 1000, Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{id["c"], id["b2"], id["released"]}}}},
		{Tick: t0 + 1000, Op: &logpb.Command_Renew{Renew: &logpb.Renew{Holder: "h1", AllOfHolder: true}}},
		{Tick: t0 + 200, Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id["a"], Holder: "h1", Reason: tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED}}},
		{Tick: t0 + 200, Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id["b2"], Holder: "h1"}}},
		{Tick: t0 + 200, Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: id["b1"], Reason: "x"}}},
		{Tick: t0 + 200, Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{LeaseId: id["a"], Holder: "h1", NewHolder: "h3"}}},
		{Tick: t0 + 4000, Op: &logpb.Command_Expire{Expire: &logpb.Expire{LeaseIds: []string{id["c"], id["a"], id["expired"], "nope"}}}},
		{Tick: t0 + 100, Op: &logpb.Command_DeclareRestart{DeclareRestart: &logpb.DeclareRestart{Holder: "h1", GraceMs: i64(5000)}}},
		{Tick: t0 + 100, Op: &logpb.Command_WriteState{WriteState: &logpb.WriteState{Resource: "a", LeaseId: id["a"], ExpectedEpoch: 1, Data: []byte("v2")}}},
		{Tick: t0 + 100, Op: &logpb.Command_WriteState{WriteState: &logpb.WriteState{Resource: "a", LeaseId: id["a"], ExpectedEpoch: 0}}},
		{Tick: t0 + 10, Op: &logpb.Command_Derive{Derive: &logpb.Derive{ParentLeaseId: id["leaf"], Holder: "subsub", Resource: "job/a/1/x",
			TtlMs: i64(60_000), Derivation: &logpb.Derivation{Limits: []*logpb.CounterLimit{{Counter: "tokens", Limit: 6}}}}}},
		{Tick: t0 + 10, Op: &logpb.Command_Derive{Derive: &logpb.Derive{ParentLeaseId: id["mid"], Holder: "sub", Resource: "job/a/2",
			Derivation: &logpb.Derivation{Limits: []*logpb.CounterLimit{{Counter: "tokens", Limit: 31}}}}}},
		{Tick: t0 + 10, Op: &logpb.Command_Derive{Derive: &logpb.Derive{ParentLeaseId: id["mid"], Holder: "sub", Resource: "job/a/2",
			Derivation: &logpb.Derivation{Actions: []string{"write"}}}}},
		{Tick: t0 + 10, Op: &logpb.Command_Derive{Derive: &logpb.Derive{ParentLeaseId: id["root"], Holder: "agent", Resource: "elsewhere"}}},
		{Tick: t0 + 10, Op: &logpb.Command_Consume{Consume: &logpb.Consume{LeaseId: id["leaf"], Counter: "tokens", Amount: 6}}},
		{Tick: t0 + 10, Op: &logpb.Command_Consume{Consume: &logpb.Consume{LeaseId: id["leaf"], Counter: "tokens", Amount: 7}}},
		{Tick: t0 + 10, Op: &logpb.Command_Consume{Consume: &logpb.Consume{LeaseId: id["leaf"], Counter: "calls", Amount: 1}}},
		{Tick: t0 + 10, Op: &logpb.Command_Consume{Consume: &logpb.Consume{LeaseId: id["root"], Counter: "bytes", Amount: 1 << 40}}},
		{Tick: t0 + 10, Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id["mid"], Holder: "sub"}}},
		{Tick: t0 + 10, Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{LeaseId: id["mid"], Holder: "sub", NewHolder: "sub2"}}},
		{Tick: t0 + 10, Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: id["root"], Reason: "tree"}}},
		{Tick: t0 + 10, Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{id["leaf"]}, TtlMs: i64(60_000)}}},
		{Tick: t0 + 20_000, Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}},
		{Tick: t0 + 100, Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{Namespace: "*", Policy: &tenurev1.NamespacePolicy{LeaseRetention: dms(1000), MaxRenewals: proto.Uint32(3)}}}},
		{Tick: t0 + 30_000, Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}},
		{Tick: t0 + 5_000_000, Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}},
		{Tick: t0, Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: make([]byte, 32)}}},
		{Tick: t0},
	}
}

// namespacesOf lists the namespaces a snapshot mentions.
func namespacesOf(t testing.TB, snap []byte) []string {
	s := &logpb.Snapshot{}
	if err := proto.Unmarshal(snap, s); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{registrar.DefaultNamespace: true}
	for _, l := range s.Leases {
		seen[l.Namespace] = true
	}
	for _, w := range s.Waiters {
		seen[w.Namespace] = true
	}
	for _, p := range s.Policies {
		seen[p.Namespace] = true
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// FuzzApplyCommand applies an arbitrary command to a machine that holds a
// few leases. It must never panic; a rejected command must change only
// what an Advance at its tick changes; the invariants must hold after it;
// its records must replay to the same state and the state must survive a
// snapshot round trip.
func FuzzApplyCommand(f *testing.F) {
	base := newFuzzBase(f)
	for _, cmd := range base.seedCommands() {
		cmd.Wall = wallBase + cmd.Tick
		b, err := proto.Marshal(cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd := &logpb.Command{}
		if err := proto.Unmarshal(data, cmd); err != nil {
			return
		}
		// The leader stamps ticks from a monotonic clock and walls from
		// the UTC clock: keep them in the range those take (ticks far
		// below 2^62, which tick arithmetic relies on; walls present and
		// in the 48 bits a lease id carries), folding the rest in.
		const span = 1 << 40
		cmd.Tick %= span
		cmd.Wall = wallBase + max(cmd.Wall%span, -(cmd.Wall%span))
		m := base.machine(t)
		T := max(registrar.Tick(cmd.Tick), m.Registrar().Tick())
		res := m.Apply(proto.Clone(cmd).(*logpb.Command))
		snap, err := m.Snapshot()
		if err != nil {
			t.Fatal(err)
		}

		// Bootstrap is the one command that does not start with an Advance.
		if _, boot := cmd.Op.(*logpb.Command_Bootstrap); res.Outcome.Err != nil && !boot {
			for _, s := range res.Records {
				if !expiryKind(s.Record) {
					t.Fatalf("rejected command (%v) emitted %v", res.Outcome.Err, s.Record)
				}
			}
			adv := base.machine(t)
			adv.Apply(&logpb.Command{Tick: cmd.Tick, Wall: cmd.Wall, Actor: cmd.Actor, Op: &logpb.Command_Advance{Advance: &logpb.Advance{}}})
			if want := mustSnapshot(t, adv); !bytes.Equal(want, snap) {
				t.Fatalf("rejected command (%v) changed more than an Advance would:\n%s\nvs\n%s", res.Outcome.Err, snapText(want), snapText(snap))
			}
		}
		if err := checkInvariants(m, T, namespacesOf(t, snap)); err != nil {
			t.Fatalf("after %v: %v", cmd, err)
		}
		var ids []string
		for _, id := range base.ids {
			ids = append(ids, id)
		}
		for _, s := range res.Records {
			if is := s.Record.GetIssued(); is != nil {
				ids = append(ids, is.LeaseId)
			}
		}
		if err := checkTrees(m.Registrar(), ids, T); err != nil {
			t.Fatalf("after %v: %v", cmd, err)
		}

		replica := base.machine(t)
		for _, s := range res.Records {
			if _, err := replica.Replay(s.Bytes); err != nil {
				t.Fatalf("replay of record %d (%v): %v", s.Record.Index, s.Record, err)
			}
		}
		if got := mustSnapshot(t, replica); !bytes.Equal(got, snap) {
			t.Fatalf("replayed records give another state:\n%s\nvs\n%s", snapText(snap), snapText(got))
		}
		restored, err := statemachine.Restore(base.cfg, snap)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if got := mustSnapshot(t, restored); !bytes.Equal(got, snap) {
			t.Fatal("snapshot does not round-trip")
		}
	})
}

// FuzzParseLeaseID: parsing never panics, a parsed id formats back to
// itself (upper-cased), a formatted id parses back to its parts, and ids
// sort like their (wall, tag, seq).
func FuzzParseLeaseID(f *testing.F) {
	f.Add("01KAV9FTZ89Z80000000000001", int64(1_764_000_000_000), uint16(0x1234), uint64(1))
	f.Add("7ZZZZZZZZZZZZZZZZZZZZZZZZZ", int64(1<<48-1), uint16(0xffff), uint64(1<<64-1))
	f.Add("8ZZZZZZZZZZZZZZZZZZZZZZZZZ", int64(0), uint16(0), uint64(0))
	f.Add("01kav9ftz89z80000000000001", int64(-1), uint16(1), uint64(2))
	f.Add("01KAV9FTZ89Z8000000000000I", int64(1<<47), uint16(7), uint64(1<<40))
	f.Add("", int64(5), uint16(5), uint64(5))
	f.Fuzz(func(t *testing.T, s string, wall int64, tag uint16, seq uint64) {
		if w, tg, sq, err := registrar.ParseLeaseID(s); err == nil {
			if len(s) != registrar.LeaseIDLen || w < 0 || w >= 1<<48 {
				t.Fatalf("ParseLeaseID(%q) = %d, %d, %d", s, w, tg, sq)
			}
			if got := registrar.FormatLeaseID(w, tg, sq); got != strings.ToUpper(s) {
				t.Fatalf("ParseLeaseID(%q) formats back as %q", s, got)
			}
		}
		wall &= 1<<48 - 1 // a lease id carries 48 bits of wall time
		id := registrar.FormatLeaseID(wall, tag, seq)
		w, tg, sq, err := registrar.ParseLeaseID(id)
		if err != nil || w != wall || tg != tag || sq != seq {
			t.Fatalf("FormatLeaseID(%d, %d, %d) = %q parses as %d, %d, %d, %v", wall, tag, seq, id, w, tg, sq, err)
		}
		// Ids sort by issue time, then tag, then sequence.
		other := registrar.FormatLeaseID(wall, tag, seq^1)
		if (id < other) != (seq < seq^1) {
			t.Fatalf("%q and %q sort against their sequences %d, %d", id, other, seq, seq^1)
		}
		if wall > 0 {
			earlier := registrar.FormatLeaseID(wall-1, ^tag, ^seq)
			if earlier >= id {
				t.Fatalf("id %q issued earlier sorts after %q", earlier, id)
			}
		}
	})
}

// acceptable reports whether s is what a text field must accept: valid
// UTF-8, no control characters (C0, DEL, C1, and the line and paragraph
// separators), not only white space, at most max bytes.
func acceptable(s string, max int) bool {
	if len(s) > max || !utf8.ValidString(s) || s != "" && strings.TrimFunc(s, unicode.IsSpace) == "" {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == 0x2028 || r == 0x2029 {
			return false
		}
	}
	return true
}

// acceptableName is acceptable for a name (identifier, resource), which
// also holds no invisible formatting character (Unicode's Cf).
func acceptableName(s string, max int) bool {
	return acceptable(s, max) && !strings.ContainsFunc(s, func(r rune) bool { return unicode.Is(unicode.Cf, r) })
}

func checkFieldError(t *testing.T, err error, field string) {
	t.Helper()
	var e *registrar.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %T %v is not a *registrar.Error", field, err, err)
	}
	if !strings.HasPrefix(e.Message, string(e.Reason)+": ") {
		t.Fatalf("%s: message %q does not start with its reason %s", field, e.Message, e.Reason)
	}
	if e.Reason == registrar.ReasonInvalidArgument && e.Metadata["field"] != field {
		t.Fatalf("%s: error names field %q", field, e.Metadata["field"])
	}
}

// FuzzValidators: the input validators never panic, accept exactly the
// valid UTF-8 strings without control characters within their limits, and
// answer everything else with INVALID_ARGUMENT naming the field.
func FuzzValidators(f *testing.F) {
	for _, s := range []string{"", "orders/42", "FILE:/src/main.go", "héllo wörld", "漢字", "a\x00b", "tab\there",
		"\x7f", "\u0085", "\u2028", "\xff\xfe", "\xed\xa0\x80", "\xc0\xaf", strings.Repeat("x", 128), strings.Repeat("x", 129),
		strings.Repeat("é", 256), strings.Repeat("y", 513), "\uFFFD", "emoji 🙂", "team\u200b", "\u202egnp.exe", "soft\u00adhyphen"} {
		f.Add(s, int64(1000), int32(1), int64(0))
	}
	f.Add("ok", int64(0), int32(2), int64(-1))
	f.Add("ok", int64(-5), int32(3), int64(5))
	f.Add("ok", int64(1<<62), int32(0), int64(1<<62))
	f.Fuzz(func(t *testing.T, s string, ttlMs int64, mode int32, waitMs int64) {
		for _, tc := range []struct {
			field    string
			max      int
			required bool
			check    func(string) error
		}{
			{"holder", registrar.MaxIdentifierBytes, true, func(v string) error { return registrar.CheckIdentifier("holder", v, true) }},
			{"namespace", registrar.MaxIdentifierBytes, false, func(v string) error { return registrar.CheckIdentifier("namespace", v, false) }},
			{"resource", registrar.MaxResourceBytes, true, func(v string) error { return registrar.CheckResource("resource", v) }},
			{"lease_id", registrar.MaxIdentifierBytes, true, func(v string) error { return registrar.CheckLeaseIDText("lease_id", v) }},
			{"reason", registrar.MaxReasonBytes, false, func(v string) error { return registrar.CheckReason("reason", v) }},
		} {
			err := tc.check(s)
			ok := acceptable
			if tc.field != "lease_id" && tc.field != "reason" { // names
				ok = acceptableName
			}
			want := ok(s, tc.max) && (s != "" || !tc.required)
			if (err == nil) != want {
				t.Fatalf("%s %q: error %v, want accepted %v", tc.field, s, err, want)
			}
			if err != nil {
				checkFieldError(t, err, tc.field)
				if registrar.ReasonOf(err) != registrar.ReasonInvalidArgument {
					t.Fatalf("%s %q: %v", tc.field, s, err)
				}
			}
		}

		// An acquire with s in each text field in turn.
		for i, field := range []string{"namespace", "resource", "holder"} {
			a := &logpb.Acquire{Namespace: "default", Resource: "r", Holder: "h", Mode: tenurev1.Mode(mode), WaitMs: waitMs}
			if ttlMs != 0 {
				a.TtlMs = &ttlMs
			}
			*[]*string{&a.Namespace, &a.Resource, &a.Holder}[i] = s
			err := registrar.ValidateAcquire(a)
			limit := registrar.MaxIdentifierBytes
			if field == "resource" {
				limit = registrar.MaxResourceBytes
			}
			// The first bad field, in the order the validator checks them.
			const maxDur = 10 * 365 * 86_400_000
			wantField, wantReason := "", registrar.Reason("")
			switch {
			case !acceptableName(s, limit) || s == "" && field != "namespace":
				wantField, wantReason = field, registrar.ReasonInvalidArgument
			case mode < 0 || mode > 2:
				wantField, wantReason = "mode", registrar.ReasonInvalidArgument
			case ttlMs < 0 || ttlMs > maxDur: // 0 stands for no ttl
				wantField, wantReason = "ttl", registrar.ReasonTTLOutOfRange
			case waitMs < 0 || waitMs > maxDur:
				wantField, wantReason = "wait", registrar.ReasonInvalidArgument
			}
			if got := registrar.ReasonOf(err); got != wantReason {
				t.Fatalf("acquire with %s %q, ttl %d, mode %d, wait %d: %v, want %q", field, s, ttlMs, mode, waitMs, err, wantReason)
			}
			if err != nil {
				checkFieldError(t, err, wantField)
				if f := registrar.ToError(err).Metadata["field"]; f != wantField {
					t.Fatalf("acquire error %v names field %q, want %q", err, f, wantField)
				}
			}
		}
	})
}
