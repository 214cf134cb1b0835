package registrar

import (
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Tick is registrar time in milliseconds. The leader stamps every command
// with one; it is authoritative for expiry and never goes backwards. Wall
// times (unix ms, UTC) travel beside ticks for people and audit only.
type Tick int64

// Ms converts a duration to whole milliseconds, rounding up so that a
// deadline computed from it is never earlier than asked.
func Ms(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}

// Dur converts milliseconds to a duration.
func Dur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// WallTime converts a unix-ms wall time to a UTC time (zero stays zero).
func WallTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Mode is how a lease holds its resource.
type Mode uint8

// Modes; the numbers match tenure.v1.Mode.
const (
	Exclusive Mode = Mode(tenurev1.Mode_MODE_EXCLUSIVE)
	Shared    Mode = Mode(tenurev1.Mode_MODE_SHARED)
)

func (m Mode) String() string {
	if m == Shared {
		return "SHARED"
	}
	return "EXCLUSIVE"
}

// State is a lease's lifecycle state; the numbers match tenure.v1.State.
type State uint8

// Lease states. Active → one of Released, Expired, Revoked; terminal states
// never change again (INV-0101).
const (
	Active   State = State(tenurev1.State_STATE_ACTIVE)
	Released State = State(tenurev1.State_STATE_RELEASED)
	Expired  State = State(tenurev1.State_STATE_EXPIRED)
	Revoked  State = State(tenurev1.State_STATE_REVOKED)
)

// Terminal reports whether the state can never change again (INV-0102).
func (s State) Terminal() bool { return s != Active }

func (s State) String() string {
	switch s {
	case Active:
		return "ACTIVE"
	case Released:
		return "RELEASED"
	case Expired:
		return "EXPIRED"
	case Revoked:
		return "REVOKED"
	}
	return "UNSPECIFIED"
}
