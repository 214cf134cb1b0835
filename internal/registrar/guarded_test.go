package registrar_test

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

func (e *env) readState(res string) ([]byte, uint64) {
	e.t.Helper()
	data, epoch, err := e.m.Registrar().ReadState("", res)
	if err != nil {
		e.t.Fatalf("read state %s: %v", res, err)
	}
	return data, epoch
}

// Only the active exclusive lease writes, and only at the current epoch,
// which then moves to epoch+1 (seed 001 lease_id + epoch).
func TestGuarded_WriteByActiveExclusive_Seed001(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if data, epoch := e.readState("wf/7"); data != nil || epoch != 0 {
		t.Fatalf("fresh state %q @%d", data, epoch)
	}
	l := e.mustAcquire("wf/7", "orch-a")
	mark := e.mark()
	out := e.writeState("wf/7", l.ID, 0, []byte("initialized"))
	if out.Err != nil || out.Epoch != 1 {
		t.Fatalf("write: %+v", out)
	}
	recs := e.wantRecords(mark, "state 1")
	if sw := recs[0].GetStateWritten(); sw.Seq != l.Fence || sw.Resource != "wf/7" || string(sw.Data) != "initialized" {
		t.Fatalf("record %+v", sw)
	}
	out = e.writeState("wf/7", l.ID, 1, []byte("step_completed"))
	if out.Err != nil || out.Epoch != 2 {
		t.Fatalf("write 2: %+v", out)
	}
	if data, epoch := e.readState("wf/7"); string(data) != "step_completed" || epoch != 2 {
		t.Fatalf("state %q @%d", data, epoch)
	}
	// ReadState hands out a copy.
	data, _ := e.readState("wf/7")
	data[0] = 'X'
	if again, _ := e.readState("wf/7"); again[0] != 's' {
		t.Fatal("ReadState exposed the stored bytes")
	}
	// An empty blob is a valid state too.
	if out := e.writeState("wf/7", l.ID, 2, nil); out.Err != nil || out.Epoch != 3 {
		t.Fatalf("empty write: %+v", out)
	}
}

// STALE_EPOCH below the current epoch, FUTURE_EPOCH above it, with both
// epochs in the metadata; nothing is written.
func TestGuarded_Epochs_Seed001(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		expected uint64
		want     registrar.Reason
		sentinel error
	}{
		{"stale_by_one", 1, registrar.ReasonStaleEpoch, registrar.ErrStaleEpoch},
		{"stale_zero", 0, registrar.ReasonStaleEpoch, registrar.ErrStaleEpoch},
		{"future_by_one", 3, registrar.ReasonFutureEpoch, registrar.ErrFutureEpoch},
		{"far_future", 1 << 40, registrar.ReasonFutureEpoch, registrar.ErrFutureEpoch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			l := e.mustAcquire("wf/7", "orch-a")
			e.writeState("wf/7", l.ID, 0, []byte("a"))
			e.writeState("wf/7", l.ID, 1, []byte("b"))
			var out registrar.Outcome
			e.unchanged(func() { out = e.writeState("wf/7", l.ID, c.expected, []byte("c")) })
			wantReason(t, out.Err, c.want)
			wantErrIs(t, out.Err, c.sentinel)
			wantMessagePrefix(t, out.Err)
			wantMeta(t, out.Err, "expected_epoch", strconv.FormatUint(c.expected, 10), "current_epoch", "2",
				"namespace", "default", "resource", "wf/7", "lease_id", l.ID)
			if data, epoch := e.readState("wf/7"); string(data) != "b" || epoch != 2 {
				t.Fatalf("state %q @%d", data, epoch)
			}
		})
	}
}

// LEASE_VIOLATION for any lease that is not the resource's active
// exclusive lease, including one that has expired (API.md errors).
func TestGuarded_LeaseViolation_Seed001(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		lease      func(e *env) string // the writing lease
		wantActive func(e *env) string // metadata active_lease_id
	}{
		{"shared_lease", func(e *env) string {
			return e.mustAcquire("wf/7", "r1", shared).ID
		}, func(*env) string { return "" }},
		{"expired_not_yet_recorded", func(e *env) string {
			l := e.mustAcquire("wf/7", "w1", ttl(2000))
			e.at(l.ExpiresTick)
			return l.ID
		}, func(*env) string { return "" }},
		{"expired_one_ms_late", func(e *env) string {
			l := e.mustAcquire("wf/7", "w1", ttl(2000))
			e.at(l.ExpiresTick + 1).advance()
			return l.ID
		}, func(*env) string { return "" }},
		{"released", func(e *env) string {
			l := e.mustAcquire("wf/7", "w1")
			e.release(l.ID, "w1")
			return l.ID
		}, func(*env) string { return "" }},
		{"revoked", func(e *env) string {
			l := e.mustAcquire("wf/7", "w1")
			e.revoke(l.ID, "ops")
			return l.ID
		}, func(*env) string { return "" }},
		{"previous_holder_after_transfer", func(e *env) string {
			l := e.mustAcquire("wf/7", "w1")
			e.transfer(l.ID, "w1", "w2", nil)
			return l.ID
		}, func(e *env) string { return e.m.Registrar().Active("", "wf/7", e.tick)[0].ID }},
		{"lease_on_another_resource", func(e *env) string {
			e.mustAcquire("wf/7", "w1")
			return e.mustAcquire("wf/8", "w1").ID
		}, func(e *env) string { return e.m.Registrar().Active("", "wf/7", e.tick)[0].ID }},
		{"never_issued", func(e *env) string {
			l := e.mustAcquire("wf/7", "w1")
			w, tag, seq, _ := registrar.ParseLeaseID(l.ID)
			return registrar.FormatLeaseID(w, tag, seq+99)
		}, func(e *env) string { return e.m.Registrar().Active("", "wf/7", e.tick)[0].ID }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			id := c.lease(e)
			e.advance() // record any due expiry so that the write itself emits nothing
			var out registrar.Outcome
			e.unchanged(func() { out = e.writeState("wf/7", id, 0, []byte("x")) })
			wantReason(t, out.Err, registrar.ReasonLeaseViolation)
			wantErrIs(t, out.Err, registrar.ErrLeaseViolation)
			wantMessagePrefix(t, out.Err)
			wantMeta(t, out.Err, "lease_id", id, "active_lease_id", c.wantActive(e))
		})
	}
}

// The state outlives leases: a successor resumes where its predecessor
// stopped, and the predecessor can no longer write (seed 001 hand-off).
func TestGuarded_StateSurvivesChangeOfHolder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.mustAcquire("wf/7", "orch-a", ttl(5000))
	e.writeState("wf/7", a.ID, 0, []byte("step-1"))
	e.at(a.ExpiresTick) // orch-a crashed; its lease lapsed
	b := e.mustAcquire("wf/7", "orch-b")
	if data, epoch := e.readState("wf/7"); string(data) != "step-1" || epoch != 1 {
		t.Fatalf("successor reads %q @%d", data, epoch)
	}
	if out := e.writeState("wf/7", b.ID, 1, []byte("step-2")); out.Err != nil || out.Epoch != 2 {
		t.Fatalf("successor write: %+v", out)
	}
	wantReason(t, e.writeState("wf/7", a.ID, 2, []byte("zombie")).Err, registrar.ReasonLeaseViolation)
	// Released and pruned leases do not take the state with them.
	e.release(b.ID, "orch-b")
	e.after(2*3_600_000).mustAcquire("elsewhere", "w9") // past the default 1 h retention
	if _, err := e.m.Registrar().Get(b.ID, e.tick); registrar.ReasonOf(err) != registrar.ReasonLeaseNotFound {
		t.Fatalf("lease not pruned: %v", err)
	}
	if data, epoch := e.readState("wf/7"); string(data) != "step-2" || epoch != 2 {
		t.Fatalf("after pruning %q @%d", data, epoch)
	}
}

// Data is at most 64 KiB; more is INVALID_ARGUMENT naming the field.
func TestGuarded_DataLimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := e.mustAcquire("wf/7", "w1")
	full := bytes.Repeat([]byte{0xAB}, registrar.MaxStateBytes)
	if out := e.writeState("wf/7", l.ID, 0, full); out.Err != nil {
		t.Fatalf("64 KiB: %v", out.Err)
	}
	var out registrar.Outcome
	e.unchanged(func() { out = e.writeState("wf/7", l.ID, 1, append(full, 0)) })
	wantReason(t, out.Err, registrar.ReasonInvalidArgument)
	wantMeta(t, out.Err, "field", "data")
	if registrar.MaxStateBytes != 64<<10 {
		t.Fatalf("MaxStateBytes %d", registrar.MaxStateBytes)
	}
	// Other bad fields.
	for _, c := range []struct {
		name  string
		cmd   *logpb.WriteState
		field string
	}{
		{"no_resource", &logpb.WriteState{LeaseId: l.ID}, "resource"},
		{"no_lease", &logpb.WriteState{Resource: "wf/7"}, "lease_id"},
		{"bad_namespace", &logpb.WriteState{Namespace: "a\x00b", Resource: "wf/7", LeaseId: l.ID}, "namespace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out registrar.Outcome
			e.unchanged(func() { out = e.do(&logpb.Command{Op: &logpb.Command_WriteState{WriteState: c.cmd}}) })
			wantReason(t, out.Err, registrar.ReasonInvalidArgument)
			wantMeta(t, out.Err, "field", c.field)
		})
	}
}

// The guarded state a namespace holds is bounded by its policy's
// max_state_bytes (each blob plus 256 for its entry): a write past it is
// QUOTA_EXCEEDED and changes nothing; an empty blob frees its bytes; the
// count survives a snapshot (found from outside: one holder grew every
// member for good, 9 MB/s, by writing and releasing).
func TestGuarded_StateBytesQuota(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := registrar.DefaultPolicy()
	p.MaxStateBytes = registrar.StateCost(600) + registrar.StateCost(100)
	e.setPolicy("default", p.Proto())
	a := e.mustAcquire("a", "w")
	if out := e.writeState("a", a.ID, 0, make([]byte, 600)); out.Err != nil {
		t.Fatal(out.Err)
	}
	b := e.mustAcquire("b", "w")
	mark := e.mark()
	out := e.writeState("b", b.ID, 0, make([]byte, 101))
	wantReason(t, out.Err, registrar.ReasonQuotaExceeded)
	if re := registrar.ToError(out.Err); re.Metadata["quota"] != "state_bytes" || re.Metadata["limit"] != strconv.FormatUint(p.MaxStateBytes, 10) {
		t.Fatalf("metadata %v", re.Metadata)
	}
	if len(e.since(mark)) != 0 {
		t.Fatal("a refused write emitted records")
	}
	if out := e.writeState("b", b.ID, 0, make([]byte, 100)); out.Err != nil { // exactly the limit
		t.Fatal(out.Err)
	}
	// Rewriting a blob counts only the difference; an empty one frees it.
	wantReason(t, e.writeState("a", a.ID, 1, make([]byte, 601)).Err, registrar.ReasonQuotaExceeded)
	if out := e.writeState("a", a.ID, 1, nil); out.Err != nil {
		t.Fatal(out.Err)
	}
	// A machine restored from a snapshot counts alike.
	snap, err := e.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if e.m, err = statemachine.Restore(statemachine.DefaultConfig(), snap); err != nil {
		t.Fatal(err)
	}
	c := e.mustAcquire("c", "w")
	if out := e.writeState("c", c.ID, 0, make([]byte, 300)); out.Err != nil {
		t.Fatalf("after freeing a's bytes: %v", out.Err)
	}
	wantReason(t, e.writeState("b", b.ID, 1, make([]byte, 200)).Err, registrar.ReasonQuotaExceeded)
}
