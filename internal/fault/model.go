package fault

import (
	"fmt"
	"hash/fnv"
	"math"

	"github.com/anishathalye/porcupine"
)

// regState is the sequential model's state of one resource. Exp is a
// lower bound of the current holder's expiry tick (exact after an
// acknowledged grant or renewal), ExpHi an upper bound (0: unbounded, after
// an operation of unknown outcome). Holder "?" is a lease granted by an
// operation of unknown outcome: nobody knows its id.
type regState struct {
	Holder string
	Fence  uint64 // highest fence granted (a lower bound after unknowns)
	Exp    int64
	ExpHi  int64
	Tick   int64 // registrar time of the last linearized operation (lower bound)
	Epoch  uint64
	Data   string
}

const phantom = "?"

// Model is the porcupine model of the registrar, partitioned per
// resource: acquire, renew, release, transfer, guarded write and read.
// Operations of unknown outcome may or may not have happened (the model
// is nondeterministic over them; they are given the end of the history as
// their return time), and what they would have produced is bounded rather
// than guessed, so that the model never rejects a history the registrar
// could have produced.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var order []string
			for _, o := range h {
				r := o.Input.(Op).Resource
				if _, ok := by[r]; !ok {
					order = append(order, r)
				}
				by[r] = append(by[r], o)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, r := range order {
				out = append(out, by[r])
			}
			return out
		},
		Init: func() []any { return []any{regState{}} },
		Step: func(state, input, _ any) []any {
			return step(state.(regState), input.(Op))
		},
		Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
		Hash: func(s any) uint64 {
			h := fnv.New64a()
			fmt.Fprintf(h, "%+v", s.(regState))
			return h.Sum64()
		},
		DescribeOperation: func(input, _ any) string { return describe(input.(Op)) },
		DescribeState: func(s any) string {
			st := s.(regState)
			return fmt.Sprintf("holder=%s fence=%d exp=[%d,%d] tick=%d epoch=%d data=%q", short(st.Holder), st.Fence, st.Exp, st.ExpHi, st.Tick, st.Epoch, st.Data)
		},
	}
	return nm.ToModel()
}

func short(id string) string {
	if len(id) > 8 {
		return "…" + id[len(id)-6:]
	}
	return id
}

func describe(o Op) string {
	in := ""
	switch o.Kind {
	case KindAcquire:
		in = fmt.Sprintf("acquire(%s, %dms)", o.Holder, o.TTLms)
	case KindRenew, KindRelease:
		in = fmt.Sprintf("%s(%s)", o.Kind, short(o.LeaseID))
	case KindTransfer:
		in = fmt.Sprintf("transfer(%s→%s)", short(o.LeaseID), o.To)
	case KindWrite:
		in = fmt.Sprintf("write(%s, e%d, %q)", short(o.LeaseID), o.Expected, o.Data)
	case KindRead:
		in = "read()"
	}
	switch o.Outcome {
	case Unknown:
		return in + " → ?"
	case Failed:
		if o.HeldBy != "" {
			return in + " → " + o.Reason + " by " + short(o.HeldBy)
		}
		return in + " → " + o.Reason
	}
	switch o.Kind {
	case KindAcquire, KindTransfer:
		return fmt.Sprintf("%s → %s fence %d ticks [%d,%d)", in, short(o.NewLease), o.Fence, o.IssuedTick, o.ExpiresTick)
	case KindRenew:
		return fmt.Sprintf("%s → until %d", in, o.ExpiresTick)
	case KindRelease:
		return fmt.Sprintf("%s → ok (already terminal %v)", in, o.AlreadyTerminal)
	case KindWrite:
		return fmt.Sprintf("%s → e%d", in, o.Epoch)
	case KindRead:
		return fmt.Sprintf("%s → e%d %q", in, o.Epoch, o.OutData)
	}
	return in
}

// canExpire: a failure that says the lease is no longer live is possible
// for the holder (its expiry tick is never known to be in the future).
func canExpire(reason string) bool {
	switch reason {
	case "LEASE_EXPIRED", "LEASE_VIOLATION", "RENEWAL_DOES_NOT_EXTEND", "RENEWAL_LIMIT_EXCEEDED", "LIFETIME_EXCEEDED":
		return true
	}
	return false
}

// live: could the holder's lease still be live at tick t?
func (s regState) live(t int64) bool { return s.ExpHi == 0 || t < s.ExpHi }

// unknownGrant is the state after a grant of unknown outcome: a lease
// nobody knows, issued no earlier than now and no earlier than the end of
// the current holder (if any), so its expiry is at least that plus ttl.
func (s regState) unknownGrant(ttl int64) regState {
	base := s.Tick
	if s.Holder != "" {
		base = max(base, s.Exp)
	}
	n := s
	n.Holder, n.Fence, n.Exp, n.ExpHi, n.Tick = phantom, s.Fence+1, base+ttl, 0, base
	return n
}

func step(s regState, o Op) []any {
	one := []any{s}
	switch o.Kind {
	case KindAcquire:
		switch o.Outcome {
		case OK:
			if o.IssuedTick < s.Tick || o.Fence <= s.Fence || (s.Holder != "" && o.IssuedTick < s.Exp) {
				return nil
			}
			return []any{regState{Holder: o.NewLease, Fence: o.Fence, Exp: o.ExpiresTick, ExpHi: o.ExpiresTick, Tick: o.IssuedTick, Epoch: s.Epoch, Data: s.Data}}
		case Failed:
			if o.Reason == "LEASE_HELD" {
				if s.Holder == "" || (s.Holder != phantom && o.HeldBy != "" && o.HeldBy != s.Holder) {
					return nil
				}
			}
			return one
		case Unknown:
			return []any{s, s.unknownGrant(o.TTLms)}
		}
	case KindRenew:
		mine := s.Holder == o.LeaseID
		switch o.Outcome {
		case OK:
			t := o.ExpiresTick - o.TTLms
			if !mine || t < s.Tick || !s.live(t) {
				return nil
			}
			n := s
			n.Exp, n.ExpHi, n.Tick = o.ExpiresTick, o.ExpiresTick, t
			return []any{n}
		case Failed:
			if mine && !canExpire(o.Reason) {
				return nil
			}
			return one
		case Unknown:
			if !mine {
				return one
			}
			n := s
			n.Exp, n.ExpHi = max(s.Exp, s.Tick+o.TTLms), 0
			return []any{s, n}
		}
	case KindRelease:
		mine := s.Holder == o.LeaseID
		switch o.Outcome {
		case OK:
			if o.AlreadyTerminal {
				return one // expired (if it was the holder): later grants are bounded by Exp anyway
			}
			if !mine {
				return nil
			}
			n := s
			n.Holder, n.Exp, n.ExpHi = "", 0, 0
			return []any{n}
		case Failed:
			if mine && (o.Reason == "NOT_HOLDER" || o.Reason == "LEASE_NOT_FOUND") {
				return nil
			}
			return one
		case Unknown:
			if !mine {
				return one
			}
			n := s
			n.Holder, n.Exp, n.ExpHi = "", 0, 0
			return []any{s, n}
		}
	case KindTransfer:
		mine := s.Holder == o.LeaseID
		switch o.Outcome {
		case OK:
			if !mine || o.IssuedTick < s.Tick || !s.live(o.IssuedTick) || o.Fence <= s.Fence {
				return nil
			}
			return []any{regState{Holder: o.NewLease, Fence: o.Fence, Exp: o.ExpiresTick, ExpHi: o.ExpiresTick, Tick: o.IssuedTick, Epoch: s.Epoch, Data: s.Data}}
		case Failed:
			// INVALID_ARGUMENT (a transfer to the lease's own holder)
			// says nothing of whether the lease is live.
			if mine && !canExpire(o.Reason) && o.Reason != "INVALID_ARGUMENT" {
				return nil
			}
			return one
		case Unknown:
			if !mine {
				return one
			}
			n := s
			n.Holder = "" // the old lease ends in the same step
			n = n.unknownGrant(o.TTLms)
			return []any{s, n}
		}
	case KindWrite:
		mine := s.Holder == o.LeaseID
		switch o.Outcome {
		case OK:
			if !mine || o.Expected != s.Epoch || o.Epoch != s.Epoch+1 {
				return nil
			}
			n := s
			n.Epoch, n.Data = o.Epoch, o.Data
			return []any{n}
		case Failed:
			switch o.Reason {
			case "STALE_EPOCH":
				if o.Expected >= s.Epoch {
					return nil
				}
			case "FUTURE_EPOCH":
				if o.Expected <= s.Epoch {
					return nil
				}
			case "LEASE_VIOLATION":
			}
			return one
		case Unknown:
			if !mine || o.Expected != s.Epoch {
				return one
			}
			n := s
			n.Epoch, n.Data = s.Epoch+1, o.Data
			return []any{s, n}
		}
	case KindRead:
		if o.Outcome == OK && (o.Epoch != s.Epoch || o.OutData != s.Data) {
			return nil
		}
		return one
	}
	return one
}

// Operations turns a history into porcupine operations: operations that
// provably had no effect (and reads without an answer) are left out, and
// operations of unknown outcome return at the end of the history.
func Operations(ops []Op) []porcupine.Operation {
	var end int64
	for _, o := range ops {
		end = max(end, o.Return)
	}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		if o.Outcome == NoEffect || (o.Kind == KindRead && o.Outcome != OK) {
			continue
		}
		ret := o.Return
		if o.Outcome == Unknown {
			ret = min(end+1, math.MaxInt64)
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: ret})
	}
	return out
}
