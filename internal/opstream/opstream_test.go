package opstream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/opstream"
)

// scripted is a LeaseService whose Pipeline answers each acquire by its
// resource: "refuse" → an operation error, "break" → the stream ends with
// an error, "hold" → no answer until the stream ends, "late" → a lease
// once late is closed (lateSeen is closed when it arrives); anything else
// → a lease named after the resource.
type scripted struct {
	tenurev1connect.UnimplementedLeaseServiceHandler
	mu             sync.Mutex
	messages       int // request messages received
	held           chan struct{}
	late, lateSeen chan struct{}
}

func (s *scripted) Pipeline(ctx context.Context, stream *connect.BidiStream[tenurev1.PipelineRequest, tenurev1.PipelineResponse]) error {
	for {
		req, err := stream.Receive()
		if err != nil {
			return nil
		}
		s.mu.Lock()
		s.messages++
		s.mu.Unlock()
		var out []*tenurev1.PipelineResult
		for _, op := range req.GetOps() {
			res := op.GetAcquire().GetResource()
			switch res {
			case "refuse":
				out = append(out, &tenurev1.PipelineResult{Id: op.GetId(), Result: &tenurev1.PipelineResult_Error{Error: &tenurev1.PipelineError{
					Code: "failed_precondition", Reason: "LEASE_HELD", Message: "LEASE_HELD: refuse is held",
					Metadata: map[string]string{"holder": "someone"},
				}}})
			case "break":
				return connect.NewError(connect.CodeUnavailable, errors.New("broken on purpose"))
			case "hold":
				close(s.held)
			case "late":
				close(s.lateSeen)
				<-s.late
				out = append(out, &tenurev1.PipelineResult{Id: op.GetId(), Result: &tenurev1.PipelineResult_Acquire{
					Acquire: &tenurev1.AcquireResponse{Lease: &tenurev1.Lease{LeaseId: res}}}})
			default:
				out = append(out, &tenurev1.PipelineResult{Id: op.GetId(), Result: &tenurev1.PipelineResult_Acquire{
					Acquire: &tenurev1.AcquireResponse{Lease: &tenurev1.Lease{LeaseId: res}}}})
			}
		}
		if len(out) > 0 {
			if err := stream.Send(&tenurev1.PipelineResponse{Results: out}); err != nil {
				return err
			}
		}
	}
}

func serve(t *testing.T, h tenurev1connect.LeaseServiceHandler, opts ...connect.HandlerOption) tenurev1connect.LeaseServiceClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(tenurev1connect.NewLeaseServiceHandler(h, opts...))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protos}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	hc := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	return tenurev1connect.NewLeaseServiceClient(hc, "http://"+ln.Addr().String())
}

func acquire(res string) *tenurev1.PipelineOp {
	return &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{Resource: res}}}
}

func TestConcurrentOperationsShareMessagesAndGetTheirOwnResults(t *testing.T) {
	h := &scripted{}
	set := opstream.OpenLease(t.Context(), serve(t, h), 1)
	defer set.Close()
	const callers, each = 16, 50
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				want := fmt.Sprintf("r-%d-%d", c, i)
				r, err := set.Do(t.Context(), acquire(want))
				if err != nil {
					t.Error(err)
					return
				}
				if got := r.GetAcquire().GetLease().GetLeaseId(); got != want {
					t.Errorf("result %q for operation %q", got, want)
				}
			}
		})
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.messages >= callers*each {
		t.Errorf("%d messages for %d operations: nothing was batched", h.messages, callers*each)
	}
	if set.Broken() {
		t.Error("stream broken after a clean run")
	}
}

func TestOperationErrorCarriesCodeReasonAndMetadata(t *testing.T) {
	set := opstream.OpenLease(t.Context(), serve(t, &scripted{}), 1)
	defer set.Close()
	_, err := set.Do(t.Context(), acquire("refuse"))
	var oe *opstream.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("err = %v (%T), want an OpError", err, err)
	}
	if oe.Code() != connect.CodeFailedPrecondition || oe.Reason() != "LEASE_HELD" || oe.GetMetadata()["holder"] != "someone" || oe.Error() != "LEASE_HELD: refuse is held" {
		t.Errorf("OpError = code %v reason %q metadata %v message %q", oe.Code(), oe.Reason(), oe.GetMetadata(), oe.Error())
	}
	// The stream goes on after an operation's error.
	if r, err := set.Do(t.Context(), acquire("ok")); err != nil || r.GetAcquire().GetLease().GetLeaseId() != "ok" {
		t.Fatalf("after the refusal: %v %v", r, err)
	}
}

func TestBrokenStreamFailsWaitingAndLaterOperations(t *testing.T) {
	h := &scripted{held: make(chan struct{})}
	set := opstream.OpenLease(t.Context(), serve(t, h), 1)
	defer set.Close()
	waiting := make(chan error, 1)
	go func() {
		_, err := set.Do(t.Context(), acquire("hold"))
		waiting <- err
	}()
	<-h.held
	_, err := set.Do(t.Context(), acquire("break"))
	var se *opstream.StreamError
	if !errors.As(err, &se) || !se.Sent || connect.CodeOf(se.Err) != connect.CodeUnavailable {
		t.Fatalf("the breaking operation: %v (%T), want a sent StreamError with code unavailable", err, err)
	}
	select {
	case err := <-waiting:
		if !errors.As(err, &se) || !se.Sent {
			t.Errorf("the operation in flight: %v, want a sent StreamError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the operation in flight never ended")
	}
	if !set.Broken() {
		t.Error("Broken() = false after the stream broke")
	}
	_, err = set.Do(t.Context(), acquire("later"))
	if !errors.As(err, &se) || se.Sent {
		t.Errorf("an operation after the break: %v, want an unsent StreamError", err)
	}
}

// TestStreamNeverConnectedSentNothing: operations on a stream whose
// connection was never made (nothing listens) end unsent, so the caller
// may send them elsewhere.
func TestStreamNeverConnectedSentNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	for _, base := range []string{"http://" + addr, "http://not a host"} {
		set := opstream.OpenLease(t.Context(), tenurev1connect.NewLeaseServiceClient(hc, base), 1)
		_, err := set.Do(t.Context(), acquire("x"))
		set.Close()
		var se *opstream.StreamError
		if !errors.As(err, &se) || se.Sent {
			t.Errorf("%s: %v (%T), want an unsent StreamError", base, err, err)
		}
	}
}

func TestCancelledCallerLeavesTheStreamUsable(t *testing.T) {
	h := &scripted{held: make(chan struct{})}
	set := opstream.OpenLease(t.Context(), serve(t, h), 1)
	defer set.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := set.Do(ctx, acquire("hold"))
		done <- err
	}()
	<-h.held
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	if r, err := set.Do(t.Context(), acquire("next")); err != nil || r.GetAcquire().GetLease().GetLeaseId() != "next" {
		t.Fatalf("after a cancelled caller: %v %v", r, err)
	}
}

// TestOrphanedResultGoesToOnOrphan: the result of an operation whose
// caller gave up after it went out goes to the OnOrphan function (which
// gives back what it granted); a result with a caller, or an error, does
// not.
func TestOrphanedResultGoesToOnOrphan(t *testing.T) {
	h := &scripted{late: make(chan struct{}), lateSeen: make(chan struct{})}
	orphans := make(chan string, 10)
	set := opstream.OpenLease(t.Context(), serve(t, h), 1).OnOrphan(func(r *tenurev1.PipelineResult) {
		orphans <- r.GetAcquire().GetLease().GetLeaseId()
	})
	defer set.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := set.Do(ctx, acquire("late"))
		done <- err
	}()
	<-h.lateSeen
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	close(h.late)
	select {
	case id := <-orphans:
		if id != "late" {
			t.Fatalf("orphan %q, want the late lease", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late result did not reach OnOrphan")
	}
	if _, err := set.Do(t.Context(), acquire("refuse")); err == nil {
		t.Fatal("refuse succeeded")
	}
	if r, err := set.Do(t.Context(), acquire("next")); err != nil || r.GetAcquire().GetLease().GetLeaseId() != "next" {
		t.Fatalf("after the orphan: %v %v", r, err)
	}
	select {
	case id := <-orphans:
		t.Fatalf("a result with a caller went to OnOrphan: %q", id)
	default:
	}
}

// TestEndedContextSendsNothing: an operation whose context has already
// ended is not sent (the select that hands it to the stream would pick
// at random between the two).
func TestEndedContextSendsNothing(t *testing.T) {
	h := &scripted{held: make(chan struct{})}
	set := opstream.OpenLease(t.Context(), serve(t, h), 1)
	defer set.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 50 {
		if _, err := set.Do(ctx, acquire("orphan")); !errors.Is(err, context.Canceled) {
			t.Fatalf("ended context: %v", err)
		}
	}
	if r, err := set.Do(t.Context(), acquire("next")); err != nil || r.GetAcquire().GetLease().GetLeaseId() != "next" {
		t.Fatalf("after: %v %v", r, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.messages != 1 {
		t.Fatalf("the server received %d messages, want only the last operation's", h.messages)
	}
}

func TestUnimplementedPipeline(t *testing.T) {
	set := opstream.OpenLease(t.Context(), serve(t, tenurev1connect.UnimplementedLeaseServiceHandler{}), 1)
	defer set.Close()
	_, err := set.Do(t.Context(), acquire("x"))
	var se *opstream.StreamError
	if !errors.As(err, &se) || connect.CodeOf(se.Err) != connect.CodeUnimplemented {
		t.Fatalf("err = %v, want a StreamError with code unimplemented", err)
	}
}

func TestGatherTakesWhatWaitsUpToMaxAndStopsAtClose(t *testing.T) {
	ch := make(chan int, 10)
	for i := range 5 {
		ch <- i
	}
	gather := func(batch []int, max, maxBytes int) string {
		got, over, ok := opstream.Gather(batch, ch, max, maxBytes)
		if ok {
			return fmt.Sprint(got, " over ", over)
		}
		return fmt.Sprint(got)
	}
	if got := gather([]int{-1}, 4, 1<<20); got != "[-1 0 1 2]" {
		t.Errorf("up to max: %v", got)
	}
	if got := gather(nil, 10, 1<<20); got != "[3 4]" {
		t.Errorf("what waits: %v", got)
	}
	for i := range 4 {
		ch <- 10 + i
	}
	if got := gather([]int{9}, 10, 24); got != "[9 10 11] over 12" { // 8 bytes an item
		t.Errorf("up to max bytes: %v", got)
	}
	if got := gather([]int{12}, 10, 4); got != "[12 13]" && got != "[12] over 13" {
		t.Errorf("past max bytes with what it was given: %v", got)
	}
	ch <- 7
	close(ch)
	if got := gather(nil, 10, 1<<20); got != "[7]" {
		t.Errorf("closed: %v", got)
	}
}

// TestLargeOperationsSpreadOverMessages: operations that would not fit in
// one message the server accepts go out in several; none fails.
func TestLargeOperationsSpreadOverMessages(t *testing.T) {
	h := &scripted{}
	set := opstream.OpenLease(t.Context(), serve(t, h, connect.WithReadMaxBytes(1<<20)), 1)
	defer set.Close()
	const callers = 16
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			want := fmt.Sprintf("%d-%s", c, strings.Repeat("x", 200<<10))
			r, err := set.Do(t.Context(), acquire(want))
			if err != nil {
				t.Error(err)
				return
			}
			if got := r.GetAcquire().GetLease().GetLeaseId(); got != want {
				t.Errorf("result %.10q for operation %.10q", got, want)
			}
		})
	}
	wg.Wait()
	if set.Broken() {
		t.Error("stream broken")
	}
}

// TestCloseReturns: Close returns however its sender sees the end (the
// set's context, or the stream marked dead, whichever its select takes
// first): the request is half-closed either way, so the server ends the
// stream and the receiver stops. (A sender that returned on dead alone
// left the request body open, and Close waited for good.)
func TestCloseReturns(t *testing.T) {
	// One P: Close's cancel and dead are both ready before the sender
	// runs again, so its select takes either (on a busy machine it does
	// with more Ps too).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	client := serve(t, &scripted{})
	for i := range 100 {
		set := opstream.OpenLease(t.Context(), client, 1)
		if _, err := set.Do(t.Context(), acquire(fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		go func() { set.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("Close of set %d did not return", i)
		}
	}
}
