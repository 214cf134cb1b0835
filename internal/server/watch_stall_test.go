package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// TestShutdownCutsStalledWatch: a Watch whose client has stopped reading
// (its HTTP/2 window full, the handler blocked writing) does not hold the
// server's shutdown until Close's context ends: it is cut within
// watchWriteGrace of the shutdown.
func TestShutdownCutsStalledWatch(t *testing.T) {
	b := setup(t)

	// A client that opens a Watch and never reads it, with a small
	// receive window so that a few hundred events fill it.
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	stalled := &http.Client{Transport: &http.Transport{Protocols: &p,
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10}}}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	wc := tenurev1connect.NewLeaseServiceClient(stalled, b.base, connect.WithGRPC())
	stream, err := wc.Watch(sctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "stall/"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	// And a healthy one, read throughout, on another prefix.
	healthy, err := b.leases.Watch(sctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "healthy/"}))
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for healthy.Receive() {
		}
		ended <- healthy.Err()
	}()
	waitFor(t, "both watches to be registered", 10*time.Second, func() bool {
		b.srv.watchers.mu.Lock()
		defer b.srv.watchers.mu.Unlock()
		return len(b.srv.watchers.subs) == 2
	})

	// Far more events than the window and the server's buffers hold.
	pipe := b.leases.Pipeline(context.Background())
	for round := 0; round < 6; round++ {
		req := &tenurev1.PipelineRequest{}
		for i := 0; i < 500; i++ {
			req.Ops = append(req.Ops, &tenurev1.PipelineOp{Id: uint64(i + 1), Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{
				Resource: fmt.Sprintf("stall/%d/%d/%s", round, i, "padding-to-make-each-event-a-little-larger"),
				Holder:   "a-holder-with-a-fairly-long-name", Ttl: durationpb.New(time.Minute)}}})
		}
		if err := pipe.Send(req); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < len(req.Ops) {
			r, err := pipe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			got += len(r.Results)
		}
	}
	_ = pipe.CloseRequest()
	_ = pipe.CloseResponse()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.srv.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	b.srv = nil
	if ctx.Err() != nil {
		t.Fatalf("Close waited %v, its whole context, for a Watch whose client stopped reading", time.Since(start).Round(time.Millisecond))
	}
	// The healthy watch still hears why it ended.
	err = <-ended
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || !strings.HasPrefix(ce.Message(), "UNAVAILABLE: the server is shutting down") {
		t.Errorf("the healthy watch ended with %v, want UNAVAILABLE: the server is shutting down", err)
	}
}
