package fault

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"
)

// Kind is the kind of a recorded operation.
type Kind string

// The operations the workload records.
const (
	KindAcquire  Kind = "acquire"
	KindRenew    Kind = "renew"
	KindRelease  Kind = "release"
	KindTransfer Kind = "transfer"
	KindWrite    Kind = "write" // WriteState, the guarded write
	KindRead     Kind = "read"  // ReadState, a linearizable read
)

// Outcome is what a client learnt of an operation.
type Outcome string

// Outcomes. Unknown is a timeout, a broken connection or OUTCOME_UNKNOWN:
// the operation may or may not have taken effect. NoEffect is an answer
// that proves nothing was proposed (NOT_LEADER, UNAVAILABLE, a refused
// connection).
const (
	OK       Outcome = "ok"
	Failed   Outcome = "failed"
	Unknown  Outcome = "unknown"
	NoEffect Outcome = "no_effect"
)

// Op is one recorded operation: its inputs, its invocation and response
// times (nanoseconds on the recorder's monotonic clock) and its outputs.
type Op struct {
	Client   int    `json:"client"`
	Member   string `json:"member"` // the API address it was sent to
	Kind     Kind   `json:"kind"`
	Resource string `json:"resource"`
	Holder   string `json:"holder,omitempty"`
	LeaseID  string `json:"lease_id,omitempty"` // the lease the op acts on
	To       string `json:"to,omitempty"`       // transfer: the new holder
	TTLms    int64  `json:"ttl_ms,omitempty"`
	Expected uint64 `json:"expected_epoch,omitempty"`
	Data     string `json:"data,omitempty"`

	Call   int64 `json:"call_ns"`
	Return int64 `json:"return_ns"` // for Unknown: when the client gave up

	Outcome Outcome `json:"outcome"`
	Reason  string  `json:"reason,omitempty"`
	Err     string  `json:"err,omitempty"`

	// Outputs of an OK acquire or transfer (the new lease), renew (its new
	// expiry), write (the new epoch), read (epoch and data), release
	// (AlreadyTerminal); HeldBy for LEASE_HELD.
	NewLease        string `json:"new_lease,omitempty"`
	Fence           uint64 `json:"fence,omitempty"`
	IssuedTick      int64  `json:"issued_tick,omitempty"`
	ExpiresTick     int64  `json:"expires_tick,omitempty"`
	Epoch           uint64 `json:"epoch,omitempty"`
	OutData         string `json:"out_data,omitempty"`
	AlreadyTerminal bool   `json:"already_terminal,omitempty"`
	HeldBy          string `json:"held_by,omitempty"`
	// IssuedAtUnixMs is the lease's informative wall time (issued_at):
	// the wall-clock-offset fault checks that it moved while validity
	// did not.
	IssuedAtUnixMs int64 `json:"issued_at_unix_ms,omitempty"`
}

// Recorder collects operations from concurrent clients.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	notes []Note
}

// Note is a nemesis event in the history (a fault injected or healed).
type Note struct {
	At   int64  `json:"at_ns"`
	What string `json:"what"`
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the recorder's clock: nanoseconds since the history started
// (monotonic).
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Add records a finished operation.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Note records a nemesis event.
func (r *Recorder) Note(what string) {
	r.mu.Lock()
	r.notes = append(r.notes, Note{At: r.Now(), What: what})
	r.mu.Unlock()
}

// Ops returns the operations sorted by invocation time.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	out := append([]Op(nil), r.ops...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// Notes returns the nemesis events.
func (r *Recorder) Notes() []Note {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Note(nil), r.notes...)
}

// WriteJSON writes the history (operations and nemesis events) to path.
func (r *Recorder) WriteJSON(path string) error {
	b, err := json.MarshalIndent(struct {
		Ops   []Op   `json:"ops"`
		Notes []Note `json:"nemesis"`
	}{r.Ops(), r.Notes()}, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
