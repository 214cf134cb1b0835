package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// JSON answers carry zero numbers, strings and booleans (piece 0 is
// "pieceIndex": 0, not missing), but no zero enum at any depth, and
// decode back to the same message.
func TestJSONCodecZeros(t *testing.T) {
	cases := []struct {
		name    string
		msg     proto.Message
		present []string // top-level keys that must be there
		absent  []string // … and must not
		nested  func(obj map[string]any) error
	}{
		{"granted pieces", &tenurev1.RequestLeasesResponse{Leases: []*tenurev1.PieceLease{{FileIndex: 0, PieceIndex: 0, LeaseId: "l", Fence: 1}}},
			[]string{"leases", "message"}, []string{"rejectedReason"}, func(obj map[string]any) error {
				l := obj["leases"].([]any)[0].(map[string]any)
				if l["fileIndex"] != json.Number("0") || l["pieceIndex"] != json.Number("0") {
					return fmt.Errorf("piece lease %v lacks its zero indexes", l)
				}
				return nil
			}},
		{"active lease", &tenurev1.GetResponse{Lease: &tenurev1.Lease{LeaseId: "l", State: tenurev1.State_STATE_ACTIVE,
			Mode: tenurev1.Mode_MODE_EXCLUSIVE, Ttl: durationpb.New(0)}}, []string{"lease"}, nil, func(obj map[string]any) error {
			l := obj["lease"].(map[string]any)
			if _, ok := l["releaseReason"]; ok {
				return fmt.Errorf("active lease has a releaseReason: %v", l)
			}
			if l["renewalCount"] != json.Number("0") || l["state"] != "STATE_ACTIVE" || l["ttl"] != "0s" {
				return fmt.Errorf("lease %v", l)
			}
			return nil
		}},
		{"rejection", &tenurev1.RequestLeasesResponse{RejectedReason: tenurev1.RejectedReason_REJECTED_REASON_NO_AVAILABLE_PIECES, Message: "m"},
			[]string{"rejectedReason", "leases"}, nil, nil},
		{"release", &tenurev1.ReleaseResponse{}, []string{"alreadyTerminal"}, nil, nil},
		{"event details are data", &tenurev1.WatchResponse{Event: &tenurev1.Event{Index: 1, Details: map[string]string{"mode": "MODE_UNSPECIFIED"}}}, []string{"event"}, nil, func(obj map[string]any) error {
			d := obj["event"].(map[string]any)["details"].(map[string]any)
			if d["mode"] != "MODE_UNSPECIFIED" {
				return fmt.Errorf("details changed: %v", d)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := jsonCodec{}.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			if err := dec.Decode(&obj); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			for _, k := range c.present {
				if _, ok := obj[k]; !ok {
					t.Errorf("%s lacks %q", b, k)
				}
			}
			for _, k := range c.absent {
				if _, ok := obj[k]; ok {
					t.Errorf("%s has %q", b, k)
				}
			}
			if c.nested != nil {
				if err := c.nested(obj); err != nil {
					t.Errorf("%s: %v", b, err)
				}
			}
			back := c.msg.ProtoReflect().New().Interface()
			if err := (jsonCodec{}).Unmarshal(b, back); err != nil || !proto.Equal(back, c.msg) {
				t.Errorf("round trip of %s: %v, got %v", b, err, back)
			}
		})
	}
}

// Times in an event's details have three fractional digits, as the
// event's own timestamps in protobuf JSON.
func TestWallStringMilliseconds(t *testing.T) {
	for ms, want := range map[int64]string{
		1_764_000_000_500: "2025-11-24T16:00:00.500Z",
		1_764_000_000_000: "2025-11-24T16:00:00.000Z",
		1_764_000_000_007: "2025-11-24T16:00:00.007Z",
	} {
		if got := wallString(ms); got != want {
			t.Errorf("wallString(%d) = %s, want %s", ms, got, want)
		}
	}
}
