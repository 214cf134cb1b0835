package queue_test

import (
	"fmt"
	"testing"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// BenchmarkTaskCycle measures the state machine's cost of one task's life:
// its share of an Enqueue of 500, of a Claim of 8, and its Complete (what
// the server applies per task in BenchmarkQueueThroughput). ns/op is per
// task.
func BenchmarkTaskCycle(b *testing.B) {
	e := setup(b)
	e.log = nil
	payload := []byte("x")
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(500, b.N-done)
		ts := make([]*logpb.NewTask, n)
		for i := range ts {
			ts[i] = &logpb.NewTask{Payload: payload}
		}
		if out := e.enqueue("bench", ts...); out.Err != nil {
			b.Fatal(out.Err)
		}
		for left := n; left > 0; {
			out := e.claim("bench", fmt.Sprintf("w%d", left%64), 8)
			if out.Err != nil || len(out.Tasks) == 0 {
				b.Fatalf("claim: %v, %d tasks", out.Err, len(out.Tasks))
			}
			for _, t := range out.Tasks {
				if c := e.complete("bench", t.ID, t.LeaseID, nil); c.Err != nil {
					b.Fatal(c.Err)
				}
				left--
			}
			e.after(1)
		}
		done += n
		e.log = e.log[:0]
	}
}

// BenchmarkSnapshot measures a snapshot of a state holding 200,000 queued
// tasks (100-byte payloads): capture is what holds applies back (on the
// FSM goroutine), encode what a snapshot's Persist does beside them.
func BenchmarkSnapshot(b *testing.B) {
	e := setup(b)
	payload := make([]byte, 100)
	for range 400 {
		ts := make([]*logpb.NewTask, 500)
		for i := range ts {
			ts[i] = &logpb.NewTask{Payload: payload}
		}
		if out := e.enqueue("bench", ts...); out.Err != nil {
			b.Fatal(out.Err)
		}
		e.log = e.log[:0]
	}
	b.Run("capture", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if s := e.m.Capture(); len(s.Tasks) != 200_000 {
				b.Fatalf("%d tasks captured", len(s.Tasks))
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			b.StopTimer()
			s := e.m.Capture()
			b.StartTimer()
			out, err := statemachine.EncodeSnapshot(s)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(out)))
		}
	})
}
