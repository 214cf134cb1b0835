package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestWatchProgressNotifications: a watch that asks for them is told, while
// it has nothing to send, how far it has got; resuming from there misses
// nothing.
func TestWatchProgressNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "quiet/",
		ProgressInterval: durationpb.New(200 * time.Millisecond)}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	// next returns the next message; the context's timeout bounds the wait.
	next := func(what string) *tenurev1.WatchResponse {
		t.Helper()
		if !stream.Receive() {
			t.Fatalf("waiting for %s: the stream ended: %v", what, stream.Err())
		}
		return stream.Msg()
	}

	// Idle: a progress notification, with no event and an index.
	m := next("the first progress notification")
	if m.Event != nil || m.GetProgressIndex() == 0 {
		t.Fatalf("an idle watch received %v; want a progress notification with an index", m)
	}

	l := b.acquire(t, &tenurev1.AcquireRequest{Resource: "quiet/1", Holder: "w1"})
	var issued *tenurev1.Event
	for issued == nil {
		m = next("the event")
		if m.Event != nil {
			if issued = m.Event; m.ProgressIndex != nil {
				t.Fatalf("an event with a progress index: %v", m)
			}
		} else if m.GetProgressIndex() == 0 {
			t.Fatalf("progress notification without an index: %v", m)
		}
	}
	if issued.LeaseId != l.LeaseId || issued.Index == 0 {
		t.Fatalf("event %v; want the issue of %s", issued, l.LeaseId)
	}
	if m = next("a progress notification after the event"); m.Event != nil || m.GetProgressIndex() < issued.Index {
		t.Fatalf("after event %d received %v; want a progress notification at or after it", issued.Index, m)
	}

	// Records the watch does not match move its progress on too: it has
	// considered them.
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "loud/1", Holder: "w1"})
	head := b.status(t).LedgerIndex
	var progress uint64
	for progress < head {
		if m = next("progress past the records not watched"); m.Event != nil {
			t.Fatalf("the watch of quiet/ received %v", m.Event)
		}
		progress = m.GetProgressIndex()
	}
	stream.Close()

	// Resuming from the progress index misses nothing and repeats nothing.
	l2 := b.acquire(t, &tenurev1.AcquireRequest{Resource: "quiet/2", Holder: "w1"})
	resumed, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "quiet/", AfterIndex: progress}))
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if !resumed.Receive() {
		t.Fatalf("resumed watch ended: %v", resumed.Err())
	}
	if ev := resumed.Msg().Event; ev == nil || ev.LeaseId != l2.LeaseId || ev.Type != "lease.issued" {
		t.Fatalf("resumed after %d, received %v; want the issue of %s", progress, resumed.Msg(), l2.LeaseId)
	}
}

func TestWatchProgressIntervalIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name string
		d    *durationpb.Duration
	}{
		{"negative", durationpb.New(-time.Second)},
		{"below the floor", durationpb.New(99*time.Millisecond + 900*time.Microsecond)},
		{"above the cap", durationpb.New(time.Hour + time.Millisecond)},
		{"invalid", &durationpb.Duration{Seconds: 1, Nanos: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{ProgressInterval: tc.d}))
			if err == nil {
				stream.Receive()
				err = stream.Err()
				stream.Close()
			}
			wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
			if !strings.Contains(err.Error(), "progress_interval") || fieldOf(err) != "progress_interval" {
				t.Errorf("%v: does not name progress_interval", err)
			}
		})
	}
}

// fieldOf returns the field an INVALID_ARGUMENT's ErrorInfo names.
func fieldOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, _ := d.Value(); v != nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Metadata["field"]
			}
		}
	}
	return ""
}
