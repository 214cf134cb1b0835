package server

import (
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
)

func TestPeerHaveEvent(t *testing.T) {
	for _, c := range []struct {
		idle      bool
		forgotten string
	}{{false, ""}, {true, "idle"}} {
		ev, d := &tenurev1.Event{}, map[string]string{}
		renderPoolEvent(ev, d, &logpb.PoolRecord{Namespace: "ns", Pool: "p", Event: &logpb.PoolRecord_Have{
			Have: &logpb.PeerHave{Peer: "a", FileIndex: 3, Idle: c.idle}}})
		if ev.Type != EventPeerHave || ev.Holder != "a" || ev.Namespace != "ns" || d["pool"] != "p" || d["file_index"] != "3" || d["forgotten"] != c.forgotten {
			t.Fatalf("idle %v: event %v, data %v", c.idle, ev, d)
		}
	}
}
