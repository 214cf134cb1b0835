package queue_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// A captured state is encoded beside later applies (the FSM's Persist):
// it must not share anything those applies change, or the snapshot would
// mix two states. Capture, change every part of the state, then encode
// the old capture: the bytes must be those of the state at capture.
func TestCaptureUnchangedByLaterApplies(t *testing.T) {
	e := setup(t)
	var ts []*logpb.NewTask
	for i := range 12 {
		ts = append(ts, &logpb.NewTask{TaskId: fmt.Sprintf("t%d", i), Payload: []byte{byte(i), 1, 2}})
	}
	e.mustEnqueue("q", ts...)
	first := e.claim("q", "w1", 4)
	if first.Err != nil || len(first.Tasks) != 4 {
		t.Fatalf("claim: %v, %d tasks", first.Err, len(first.Tasks))
	}
	e.after(10)
	if out := e.complete("q", first.Tasks[0].ID, first.Tasks[0].LeaseID, []byte("done")); out.Err != nil {
		t.Fatal(out.Err)
	}
	if out := e.fail("q", first.Tasks[1].ID, first.Tasks[1].LeaseID, "boom", nil); out.Err != nil {
		t.Fatal(out.Err)
	}

	captured := e.m.Capture()
	want, err := e.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}

	// Renew, complete, fail, claim, cancel, expire, enqueue: every list
	// and the chain head move on.
	e.after(10)
	if out := e.renew(first.Tasks[2].LeaseID); out.Err != nil {
		t.Fatal(out.Err)
	}
	if out := e.complete("q", first.Tasks[2].ID, first.Tasks[2].LeaseID, []byte("other")); out.Err != nil {
		t.Fatal(out.Err)
	}
	if out := e.fail("q", first.Tasks[3].ID, first.Tasks[3].LeaseID, "again", nil); out.Err != nil {
		t.Fatal(out.Err)
	}
	if out := e.claim("q", "w2", 3, 1000); out.Err != nil || len(out.Tasks) == 0 {
		t.Fatalf("claim: %v", out.Err)
	}
	if out := e.cancel("q", "t11"); out.Err != nil {
		t.Fatal(out.Err)
	}
	e.after(60_000).advance()
	e.mustEnqueue("q", &logpb.NewTask{TaskId: "late", Payload: []byte("x")})
	if now, _ := e.m.Snapshot(); bytes.Equal(now, want) {
		t.Fatal("the state did not change")
	}

	got, err := statemachine.EncodeSnapshot(captured)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the capture changed with later applies (%d vs %d bytes)", len(got), len(want))
	}
}
