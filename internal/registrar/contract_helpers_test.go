package registrar_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Helpers shared by the contract tests (acquire_test.go, renew_test.go, …).

// recordKind names a record for comparisons: "issued w2", "ended EXPIRED",
// "renewed", "grace", "waiting w3", "wait_ended w3", "state 2", "policy".
func recordKind(rec *logpb.Record) string {
	switch b := rec.Body.(type) {
	case *logpb.Record_Issued:
		return "issued " + b.Issued.Holder
	case *logpb.Record_Renewed:
		return "renewed"
	case *logpb.Record_Ended:
		return "ended " + strings.TrimPrefix(b.Ended.State.String(), "STATE_")
	case *logpb.Record_Grace:
		return "grace"
	case *logpb.Record_Waiting:
		return "waiting " + b.Waiting.Holder
	case *logpb.Record_WaitEnded:
		return "wait_ended " + b.WaitEnded.Holder
	case *logpb.Record_StateWritten:
		return fmt.Sprintf("state %d", b.StateWritten.Epoch)
	case *logpb.Record_PolicySet:
		return "policy"
	case *logpb.Record_Checkpoint:
		return "checkpoint"
	case *logpb.Record_Initialized:
		return "initialized"
	}
	return fmt.Sprintf("%T", rec.Body)
}

func recordKinds(recs []*logpb.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, recordKind(r))
	}
	return out
}

// wantRecords checks the kinds of the records emitted since mark.
func (e *env) wantRecords(mark int, want ...string) []*logpb.Record {
	e.t.Helper()
	recs := e.since(mark)
	if got := recordKinds(recs); !slices.Equal(got, want) {
		e.t.Fatalf("records = %q, want %q", got, want)
	}
	return recs
}

// unchanged runs f and fails if it moved the ledger.
func (e *env) unchanged(f func()) {
	e.t.Helper()
	before, n := e.next(), e.mark()
	f()
	if after := e.next(); after != before {
		e.t.Fatalf("ledger moved from %d to %d: %q", before, after, recordKinds(e.since(n)))
	}
}

// meta returns the metadata of a registrar error (HeldError included).
func meta(t *testing.T, err error) map[string]string {
	t.Helper()
	if err == nil {
		t.Fatal("want an error, got nil")
	}
	return registrar.ToError(err).Metadata
}

// wantMeta checks selected metadata entries of err.
func wantMeta(t *testing.T, err error, kv ...string) {
	t.Helper()
	m := meta(t, err)
	for i := 0; i+1 < len(kv); i += 2 {
		if got := m[kv[i]]; got != kv[i+1] {
			t.Errorf("metadata %s = %q, want %q (all: %v)", kv[i], got, kv[i+1], m)
		}
	}
}

// wantMessagePrefix checks that the message starts with its reason.
func wantMessagePrefix(t *testing.T, err error) {
	t.Helper()
	r := registrar.ReasonOf(err)
	if !strings.HasPrefix(err.Error(), string(r)+": ") {
		t.Errorf("message %q does not start with %q", err.Error(), r)
	}
}

// wantErrIs checks errors.Is against a sentinel.
func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("errors.Is(%v, %v) = false", err, target)
	}
}

// wallAt is the wall time the env stamps at tick t.
func wallAt(t registrar.Tick) int64 { return wallBase + int64(t) }

// leaseState reads a lease at the env's tick.
func (e *env) state(id string) registrar.State { return e.get(id).State }

// pending returns the holders of a resource's wait queue, head first.
func (e *env) queue(ns, res string) []string {
	var out []string
	for _, w := range e.m.Registrar().Waiters(ns, res) {
		out = append(out, w.Holder)
	}
	return out
}

// activeHolders returns the holders of a resource's active leases.
func (e *env) activeHolders(ns, res string) []string {
	var out []string
	for _, l := range e.m.Registrar().Active(ns, res, e.tick) {
		out = append(out, l.Holder)
	}
	slices.Sort(out)
	return out
}

func strs(s ...string) []string { return s }
