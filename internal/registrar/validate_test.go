package registrar_test

import (
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Input limits (DESIGN §1.5; seed 000 "IDs limited to 128 bytes"): every
// bad input gets INVALID_ARGUMENT naming the field, and changes nothing.
func TestValidation_RejectsAndEmitsNothing(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("x", n) }
	acq := func(f func(a *logpb.Acquire)) func(id string) *logpb.Command {
		return func(string) *logpb.Command {
			a := &logpb.Acquire{Resource: "orders/42", Holder: "w1"}
			f(a)
			return &logpb.Command{Op: &logpb.Command_Acquire{Acquire: a}}
		}
	}
	cases := []struct {
		name  string
		cmd   func(id string) *logpb.Command // id: an active lease of w1 on "held"
		field string
	}{
		{"acquire_holder_too_long", acq(func(a *logpb.Acquire) { a.Holder = long(129) }), "holder"},
		{"acquire_holder_empty", acq(func(a *logpb.Acquire) { a.Holder = "" }), "holder"},
		{"acquire_holder_invalid_utf8", acq(func(a *logpb.Acquire) { a.Holder = "w\xff1" }), "holder"},
		{"acquire_holder_truncated_utf8", acq(func(a *logpb.Acquire) { a.Holder = "w\xc3" }), "holder"},
		{"acquire_holder_nul", acq(func(a *logpb.Acquire) { a.Holder = "w\x001" }), "holder"},
		{"acquire_holder_del", acq(func(a *logpb.Acquire) { a.Holder = "w\x7f" }), "holder"},
		{"acquire_namespace_too_long", acq(func(a *logpb.Acquire) { a.Namespace = long(129) }), "namespace"},
		{"acquire_namespace_tab", acq(func(a *logpb.Acquire) { a.Namespace = "a\tb" }), "namespace"},
		{"acquire_resource_too_long", acq(func(a *logpb.Acquire) { a.Resource = long(513) }), "resource"},
		{"acquire_resource_empty", acq(func(a *logpb.Acquire) { a.Resource = "" }), "resource"},
		{"acquire_resource_blank", acq(func(a *logpb.Acquire) { a.Resource = "  " }), "resource"},
		{"acquire_resource_unicode_blank", acq(func(a *logpb.Acquire) { a.Resource = "\u00a0\u3000" }), "resource"},
		{"acquire_holder_blank", acq(func(a *logpb.Acquire) { a.Holder = " " }), "holder"},
		{"acquire_namespace_blank", acq(func(a *logpb.Acquire) { a.Namespace = "   " }), "namespace"},
		{"acquire_resource_newline", acq(func(a *logpb.Acquire) { a.Resource = "orders/\n42" }), "resource"},
		{"acquire_resource_c1_control", acq(func(a *logpb.Acquire) { a.Resource = "orders/\u008542" }), "resource"},
		{"acquire_resource_line_separator", acq(func(a *logpb.Acquire) { a.Resource = "orders/\u202842" }), "resource"},
		{"acquire_resource_bidi_override", acq(func(a *logpb.Acquire) { a.Resource = "orders/\u202e24" }), "resource"},
		{"acquire_namespace_zero_width", acq(func(a *logpb.Acquire) { a.Namespace = "team\u200b" }), "namespace"},
		{"acquire_holder_zero_width", acq(func(a *logpb.Acquire) { a.Holder = "w\u200d1" }), "holder"},
		{"acquire_resource_invalid_utf8", acq(func(a *logpb.Acquire) { a.Resource = "orders/\xed\xa0\x80" }), "resource"},
		{"acquire_mode_unknown", acq(func(a *logpb.Acquire) { a.Mode = tenurev1.Mode(7) }), "mode"},
		{"acquire_wait_negative", acq(func(a *logpb.Acquire) { a.WaitMs = -1 }), "wait"},
		{"renew_holder_too_long", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{id}, Holder: long(129)}}}
		}, "holder"},
		{"renew_id_too_long", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: []string{id, long(129)}}}}
		}, "lease_ids"},
		{"renew_batch_too_big", func(id string) *logpb.Command {
			ids := make([]string, registrar.MaxBatchIDs+1)
			for i := range ids {
				ids[i] = id
			}
			return &logpb.Command{Op: &logpb.Command_Renew{Renew: &logpb.Renew{LeaseIds: ids}}}
		}, "lease_ids"},
		{"release_id_empty", func(string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{Holder: "w1"}}}
		}, "lease_id"},
		{"release_id_control", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id[:10] + "\x1b" + id[11:], Holder: "w1"}}}
		}, "lease_id"},
		{"release_holder_invalid_utf8", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Release{Release: &logpb.Release{LeaseId: id, Holder: "\xff"}}}
		}, "holder"},
		{"revoke_reason_too_long", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Revoke{Revoke: &logpb.Revoke{LeaseId: id, Reason: long(registrar.MaxReasonBytes + 1)}}}
		}, "reason"},
		{"transfer_holder_empty", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{LeaseId: id, NewHolder: "w2"}}}
		}, "holder"},
		{"transfer_new_holder_too_long", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_Transfer{Transfer: &logpb.Transfer{LeaseId: id, Holder: "w1", NewHolder: long(129)}}}
		}, "new_holder"},
		{"declare_restart_namespace_bad", func(string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_DeclareRestart{DeclareRestart: &logpb.DeclareRestart{Holder: "w1", Namespace: "\x01"}}}
		}, "namespace"},
		{"write_state_resource_too_long", func(id string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_WriteState{WriteState: &logpb.WriteState{Resource: long(513), LeaseId: id}}}
		}, "resource"},
		{"set_policy_namespace_empty", func(string) *logpb.Command {
			return &logpb.Command{Op: &logpb.Command_SetPolicy{SetPolicy: &logpb.SetPolicy{}}}
		}, "namespace"},
		{"no_operation", func(string) *logpb.Command { return &logpb.Command{} }, "op"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			held := e.mustAcquire("held", "w1")
			before, logLen := e.next(), len(e.log)
			out := e.do(c.cmd(held.ID))
			wantReason(t, out.Err, registrar.ReasonInvalidArgument)
			wantErrIs(t, out.Err, registrar.ErrInvalidArgument)
			wantMeta(t, out.Err, "field", c.field)
			wantMessagePrefix(t, out.Err)
			if !strings.Contains(out.Err.Error(), c.field) {
				t.Errorf("message %q does not name %s", out.Err.Error(), c.field)
			}
			if e.next() != before || len(e.log) != logLen {
				t.Fatalf("rejected command moved the ledger %d → %d", before, e.next())
			}
			if out.Lease != nil || out.WaiterID != 0 || len(out.Leases) != 0 {
				t.Fatalf("rejected command answered %+v", out)
			}
			if got := e.get(held.ID); got.State != registrar.Active || got.RenewalCount != 0 {
				t.Fatalf("held lease changed: %+v", got)
			}
		})
	}
}

// The limits are inclusive: 128-byte identifiers, 512-byte resources and
// non-ASCII text are fine.
func TestValidation_AcceptsLimits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	holder := strings.Repeat("h", registrar.MaxIdentifierBytes)
	ns := strings.Repeat("n", registrar.MaxIdentifierBytes)
	res := strings.Repeat("r", registrar.MaxResourceBytes)
	l := e.mustAcquire(res, holder, inNS(ns))
	if l.Holder != holder || l.Resource != res || l.Namespace != ns {
		t.Fatalf("lease %+v", l)
	}
	for _, r := range strs("FILE:/src/main.go", "données/élève", "日本/資源", "emoji/🔒", "spaces are fine") {
		e.mustAcquire(r, "agent-ü")
	}
	// A 4-byte rune that would straddle the limit is counted in bytes.
	over := strings.Repeat("r", registrar.MaxResourceBytes-3) + "🔒"
	wantReason(t, e.acquire(over, "w1").Err, registrar.ReasonInvalidArgument)
}

// The API refuses namespace names with '*' or white space at either end
// (CheckNamespace, where requests come in), but commands in a log written
// before that apply as they did: a member replaying such a log, or running
// beside members of the previous version, must derive the same records.
func TestValidation_LoggedNamespacesStillApply(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, ns := range strs("x*", "*", " default", "team a ") {
		if err := registrar.CheckNamespace("namespace", ns, false); err == nil {
			t.Errorf("CheckNamespace(%q) passed", ns)
		}
		if l := e.mustAcquire("r", "w1", inNS(ns)); l.Namespace != ns {
			t.Fatalf("acquire in %q from the log: %+v", ns, l)
		}
	}
	for _, ns := range strs("", "default", "team-a", "a b") {
		if err := registrar.CheckNamespace("namespace", ns, false); err != nil {
			t.Errorf("CheckNamespace(%q): %v", ns, err)
		}
	}
}
