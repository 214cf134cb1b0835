package fencing

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// step is one call on a Validator and the reason it must fail with ("" = nil).
type step struct {
	op     string // "check", "accept", "handoff", "setepoch"
	lease  string
	n      uint64 // epoch, fence or next epoch
	reason string
}

// runSteps applies steps to v in order, failing on the first unexpected result.
func runSteps(t *testing.T, v *Validator, steps []step) {
	t.Helper()
	for i, s := range steps {
		var err error
		switch s.op {
		case "check":
			err = v.Check(s.lease, s.n)
		case "accept":
			err = v.Accept(s.lease, s.n)
		case "handoff":
			err = v.Handoff(s.lease, s.n)
		case "setepoch":
			v.SetEpoch(s.n)
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if got := reasonOf(err); got != s.reason {
			t.Fatalf("step %d %s(%q, %d) = %v, want reason %q", i, s.op, s.lease, s.n, err, s.reason)
		}
		if err != nil && !strings.HasPrefix(err.Error(), s.reason+": ") {
			t.Fatalf("step %d: message %q does not start with the reason", i, err)
		}
	}
}

func reasonOf(err error) string {
	if err == nil {
		return ""
	}
	var fe *Error
	if !errors.As(err, &fe) {
		return "not an *Error: " + err.Error()
	}
	return fe.Reason
}

// The scenarios of seed 001 (single-writer workflows), one case each.
func TestValidatorSeed001(t *testing.T) {
	t.Parallel()
	const a, b = "lease-a", "lease-b"
	tests := []struct {
		name  string
		steps []step
	}{
		{"lease_validation_success", []step{
			{"check", a, 0, ""},
			{"accept", a, 0, ""},
			{"accept", a, 1, ""},
			{"accept", a, 2, ""},
		}},
		{"lease_validation_wrong_lease", []step{
			{"check", b, 0, ReasonLeaseViolation},
			{"accept", b, 0, ReasonLeaseViolation},
			{"accept", a, 0, ""}, // the failed attempt consumed nothing
		}},
		{"action_without_lease_id", []step{
			{"accept", "", 0, ReasonLeaseViolation},
		}},
		{"wrong_lease_wins_over_epoch_errors", []step{
			{"accept", a, 0, ""},
			{"accept", b, 0, ReasonLeaseViolation},
			{"accept", b, 9, ReasonLeaseViolation},
		}},
		{"epoch_validation_stale_action", []step{
			{"setepoch", "", 6, ""}, // last processed 5
			{"check", a, 3, ReasonStaleEpoch},
			{"accept", a, 3, ReasonStaleEpoch},
			{"accept", a, 6, ""},
		}},
		{"replay_of_last_epoch_is_stale", []step{
			{"accept", a, 0, ""},
			{"accept", a, 1, ""},
			{"accept", a, 1, ReasonStaleEpoch},
			{"check", a, 1, ReasonStaleEpoch},
		}},
		{"future_action_missed_update", []step{
			{"accept", a, 0, ""},
			{"check", a, 2, ReasonFutureEpoch},
			{"accept", a, 2, ReasonFutureEpoch},
			{"accept", a, 1, ""},
			{"accept", a, 2, ""},
		}},
		{"first_epoch_must_be_zero", []step{
			{"accept", a, 1, ReasonFutureEpoch},
			{"accept", a, 0, ""},
		}},
		{"concurrent_orchestrators_epoch_conflict", []step{
			// Two actions stamped with the same epoch 5: the first is
			// accepted, the second rejected.
			{"setepoch", "", 5, ""},
			{"accept", a, 5, ""},
			{"accept", a, 5, ReasonStaleEpoch},
		}},
		{"check_records_nothing", []step{
			{"check", a, 0, ""},
			{"check", a, 0, ""},
			{"check", a, 1, ReasonFutureEpoch},
		}},
		{"lease_handoff_epochs_continue", []step{
			{"accept", a, 0, ""},
			{"accept", a, 1, ""},
			{"handoff", b, 8, ""},
			{"accept", a, 2, ReasonLeaseViolation}, // the old lease is out
			{"accept", b, 0, ReasonStaleEpoch},     // no restart at 0
			{"accept", b, 2, ""},
		}},
		{"handoff_with_lower_fence_refused", []step{
			{"handoff", b, 6, ReasonFenceStale},
			{"accept", b, 0, ReasonLeaseViolation}, // nothing changed
			{"accept", a, 0, ""},
		}},
		{"handoff_with_equal_fence_refused", []step{
			{"handoff", b, 7, ReasonFenceStale},
			{"accept", a, 0, ""},
		}},
		{"deposed_lease_cannot_come_back", []step{
			{"handoff", b, 8, ""},
			{"handoff", a, 7, ReasonFenceStale},
			{"accept", a, 0, ReasonLeaseViolation},
			{"accept", b, 0, ""},
		}},
		{"handoff_to_empty_lease_is_invalid", []step{
			{"handoff", "", 100, ReasonInvalidArgument},
			{"accept", a, 0, ""},
		}},
		{"setepoch_resynchronises", []step{
			{"accept", a, 5, ReasonFutureEpoch},
			{"setepoch", "", 5, ""},
			{"accept", a, 5, ""},
			{"setepoch", "", 5, ""}, // deliberate rewind
			{"accept", a, 5, ""},
		}},
		{"last_epoch_exhausts", []step{
			{"setepoch", "", math.MaxUint64, ""},
			{"accept", a, math.MaxUint64 - 1, ReasonStaleEpoch},
			{"accept", a, math.MaxUint64, ""},
			{"accept", a, math.MaxUint64, ReasonStaleEpoch},
			{"accept", a, 0, ReasonStaleEpoch},
			{"setepoch", "", 0, ""},
			{"accept", a, 0, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, NewValidator(a, 7), tt.steps)
		})
	}
}

func TestValidatorZeroValueAcceptsNothing(t *testing.T) {
	t.Parallel()
	var v Validator
	runSteps(t, &v, []step{
		{"accept", "", 0, ReasonLeaseViolation},
		{"accept", "x", 0, ReasonLeaseViolation},
		{"handoff", "x", 0, ReasonFenceStale},
		{"handoff", "x", 1, ""},
		{"accept", "x", 0, ""},
	})
}

func TestValidatorErrorMetadata(t *testing.T) {
	t.Parallel()
	v := NewValidator("lease-a", 7)
	v.SetEpoch(5)
	tests := []struct {
		name string
		err  error
		want map[string]string
		msg  string
	}{
		{"stale", v.Check("lease-a", 3),
			map[string]string{"epoch": "3", "expected_epoch": "5"},
			"STALE_EPOCH: epoch 3 < 5, the next expected epoch"},
		{"future", v.Check("lease-a", 9),
			map[string]string{"epoch": "9", "expected_epoch": "5"},
			"FUTURE_EPOCH: epoch 9 > 5, the next expected epoch"},
		{"violation", v.Check("lease-b", 5),
			map[string]string{"expected_lease_id": "lease-a", "lease_id": "lease-b"},
			`LEASE_VIOLATION: lease "lease-b" is not the accepted lease "lease-a"`},
		{"fence stale", v.Handoff("lease-b", 3),
			map[string]string{"fence": "3", "current_fence": "7", "lease_id": "lease-b"},
			`FENCE_STALE: fence 3 of lease "lease-b" <= 7, the current fence`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var fe *Error
			if !errors.As(tt.err, &fe) {
				t.Fatalf("err = %v, want *Error", tt.err)
			}
			if fe.Error() != tt.msg {
				t.Errorf("message = %q, want %q", fe.Error(), tt.msg)
			}
			for k, want := range tt.want {
				if got := fe.Metadata[k]; got != want {
					t.Errorf("metadata[%q] = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// Eight goroutines race to Accept every epoch: each epoch is accepted exactly once
// and the losers see STALE_EPOCH, never FUTURE_EPOCH (a goroutine only moves to
// epoch e after e-1 was accepted, by itself or another).
func TestValidatorConcurrentAccept(t *testing.T) {
	t.Parallel()
	const (
		workers = 8
		epochs  = 2000
	)
	v := NewValidator("lease-a", 1)
	var accepted [epochs]atomic.Int32
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for e := range uint64(epochs) {
				err := v.Accept("lease-a", e)
				switch {
				case err == nil:
					accepted[e].Add(1)
				case errors.Is(err, ErrStaleEpoch):
				default:
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("unexpected error: %v", err)
	}
	for e := range accepted {
		if n := accepted[e].Load(); n != 1 {
			t.Errorf("epoch %d accepted %d times, want exactly once", e, n)
		}
	}
	if err := v.Check("lease-a", epochs); err != nil {
		t.Errorf("next epoch after the race: %v", err)
	}
}

// Concurrent Handoffs with distinct fences end on the highest fence.
func TestValidatorConcurrentHandoff(t *testing.T) {
	t.Parallel()
	v := NewValidator("lease-0", 0)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			err := v.Handoff("lease-"+strconv.Itoa(i+1), uint64(i+1))
			if err != nil && !errors.Is(err, ErrFenceStale) {
				t.Errorf("Handoff: %v", err)
			}
		})
	}
	wg.Wait()
	if err := v.Check("lease-64", 0); err != nil {
		t.Fatalf("after the race the highest fence's lease must be accepted: %v", err)
	}
}

func TestFenceGuard(t *testing.T) {
	t.Parallel()
	type admit struct {
		resource string
		fence    uint64
		reason   string
	}
	tests := []struct {
		name   string
		admits []admit
	}{
		{"first fence admitted", []admit{{"r", 5, ""}}},
		{"equal fence admitted", []admit{{"r", 5, ""}, {"r", 5, ""}}},
		{"higher fence admitted", []admit{{"r", 5, ""}, {"r", 9, ""}}},
		{"deposed holder refused", []admit{{"r", 5, ""}, {"r", 9, ""}, {"r", 5, ReasonFenceStale}, {"r", 8, ReasonFenceStale}, {"r", 9, ""}}},
		{"resources are independent", []admit{{"r", 9, ""}, {"s", 1, ""}, {"r", 1, ReasonFenceStale}}},
		{"fence zero is invalid", []admit{{"r", 0, ReasonInvalidArgument}, {"r", 1, ""}}},
		{"max fence", []admit{{"r", math.MaxUint64, ""}, {"r", math.MaxUint64, ""}, {"r", math.MaxUint64 - 1, ReasonFenceStale}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var g FenceGuard
			for i, a := range tt.admits {
				if got := reasonOf(g.Admit(a.resource, a.fence)); got != a.reason {
					t.Fatalf("admit %d (%q, %d): reason %q, want %q", i, a.resource, a.fence, got, a.reason)
				}
			}
		})
	}
}

func TestFenceGuardStaleMetadata(t *testing.T) {
	t.Parallel()
	var g FenceGuard
	if _, ok := g.Highest("orders/42"); ok {
		t.Fatal("Highest of an unseen resource reported ok")
	}
	if err := g.Admit("orders/42", 17); err != nil {
		t.Fatal(err)
	}
	err := g.Admit("orders/42", 16)
	var fe *Error
	if !errors.As(err, &fe) || !errors.Is(err, ErrFenceStale) {
		t.Fatalf("Admit = %v, want FENCE_STALE", err)
	}
	want := map[string]string{"resource": "orders/42", "fence": "16", "highest_fence": "17"}
	for k, w := range want {
		if fe.Metadata[k] != w {
			t.Errorf("metadata[%q] = %q, want %q", k, fe.Metadata[k], w)
		}
	}
	if got := fe.Error(); got != `FENCE_STALE: fence 16 < 17, the highest fence admitted for "orders/42"` {
		t.Errorf("message = %q", got)
	}
	if h, ok := g.Highest("orders/42"); !ok || h != 17 {
		t.Errorf("Highest = %d, %v; want 17, true", h, ok)
	}
}

// Writers with increasing fences race; the guard ends at the maximum, and no
// write is admitted after a higher fence was recorded.
func TestFenceGuardConcurrent(t *testing.T) {
	t.Parallel()
	var g FenceGuard
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for f := uint64(1); f <= 500; f++ {
				err := g.Admit("r", f*8+uint64(w))
				if err != nil && !errors.Is(err, ErrFenceStale) {
					t.Errorf("Admit: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if h, _ := g.Highest("r"); h != 500*8+7 {
		t.Fatalf("Highest = %d, want %d", h, 500*8+7)
	}
}

func TestErrorIs(t *testing.T) {
	t.Parallel()
	sentinels := []*Error{ErrInvalidArgument, ErrLeaseViolation, ErrStaleEpoch, ErrFutureEpoch, ErrFenceStale, ErrCertificateInvalid, ErrLeaseExpired}
	reasons := []string{ReasonInvalidArgument, ReasonLeaseViolation, ReasonStaleEpoch, ReasonFutureEpoch, ReasonFenceStale, ReasonCertificateInvalid, ReasonLeaseExpired}
	for i, s := range sentinels {
		t.Run(reasons[i], func(t *testing.T) {
			t.Parallel()
			if s.Reason != reasons[i] || s.Error() != reasons[i] {
				t.Fatalf("sentinel %d = %+v", i, s)
			}
			err := error(newError(reasons[i], "detail", "k", "v"))
			for j, other := range sentinels {
				if got := errors.Is(err, other); got != (i == j) {
					t.Errorf("errors.Is(%s, %s) = %v", reasons[i], other.Reason, got)
				}
			}
			var nilErr *Error
			if errors.Is(err, nilErr) {
				t.Error("matched a nil *Error")
			}
			if errors.Is(err, errors.New(reasons[i])) {
				t.Error("matched a non-*Error by text")
			}
		})
	}
}
