// Package opstream multiplexes operations over the Pipeline streams of
// Tenure's services (LeaseService, QueueService and PoolService): many
// operations in flight on one bidirectional stream, whatever is waiting
// batched into one message, results matched to their callers by id. The
// Go client and `tenure bench` use it; a pipelined caller shares Raft
// entries through group commit without paying for an HTTP/2 request per
// operation.
package opstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// Shape describes one service's Pipeline messages.
type Shape[Req, Res, Op, Result any] struct {
	Wrap    func([]*Op) *Req                      // a request carrying ops
	Results func(*Res) []*Result                  // a response's results
	ID      func(*Result) uint64                  // the id of the op a result answers
	SetID   func(*Op, uint64)                     // numbers an op
	Err     func(*Result) *tenurev1.PipelineError // a failed op's error, or nil
}

// Lease, Queue and Pool are the shapes of the three services' pipelines.
var (
	Lease = Shape[tenurev1.PipelineRequest, tenurev1.PipelineResponse, tenurev1.PipelineOp, tenurev1.PipelineResult]{
		Wrap:    func(ops []*tenurev1.PipelineOp) *tenurev1.PipelineRequest { return &tenurev1.PipelineRequest{Ops: ops} },
		Results: (*tenurev1.PipelineResponse).GetResults,
		ID:      (*tenurev1.PipelineResult).GetId,
		SetID:   func(op *tenurev1.PipelineOp, id uint64) { op.Id = id },
		Err:     (*tenurev1.PipelineResult).GetError,
	}
	Queue = Shape[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse, tenurev1.QueueOp, tenurev1.QueueResult]{
		Wrap: func(ops []*tenurev1.QueueOp) *tenurev1.QueuePipelineRequest {
			return &tenurev1.QueuePipelineRequest{Ops: ops}
		},
		Results: (*tenurev1.QueuePipelineResponse).GetResults,
		ID:      (*tenurev1.QueueResult).GetId,
		SetID:   func(op *tenurev1.QueueOp, id uint64) { op.Id = id },
		Err:     (*tenurev1.QueueResult).GetError,
	}
	Pool = Shape[tenurev1.PoolPipelineRequest, tenurev1.PoolPipelineResponse, tenurev1.PoolOp, tenurev1.PoolResult]{
		Wrap: func(ops []*tenurev1.PoolOp) *tenurev1.PoolPipelineRequest {
			return &tenurev1.PoolPipelineRequest{Ops: ops}
		},
		Results: (*tenurev1.PoolPipelineResponse).GetResults,
		ID:      (*tenurev1.PoolResult).GetId,
		SetID:   func(op *tenurev1.PoolOp, id uint64) { op.Id = id },
		Err:     (*tenurev1.PoolResult).GetError,
	}
)

// LeaseSet, QueueSet and PoolSet are sets of the three services' streams.
type (
	LeaseSet = Set[tenurev1.PipelineRequest, tenurev1.PipelineResponse, tenurev1.PipelineOp, tenurev1.PipelineResult]
	QueueSet = Set[tenurev1.QueuePipelineRequest, tenurev1.QueuePipelineResponse, tenurev1.QueueOp, tenurev1.QueueResult]
	PoolSet  = Set[tenurev1.PoolPipelineRequest, tenurev1.PoolPipelineResponse, tenurev1.PoolOp, tenurev1.PoolResult]
)

// OpenLease, OpenQueue and OpenPool open n streams of a service.
func OpenLease(ctx context.Context, c tenurev1connect.LeaseServiceClient, n int) *LeaseSet {
	return Open(ctx, Lease, n, c.Pipeline)
}

func OpenQueue(ctx context.Context, c tenurev1connect.QueueServiceClient, n int) *QueueSet {
	return Open(ctx, Queue, n, c.Pipeline)
}

func OpenPool(ctx context.Context, c tenurev1connect.PoolServiceClient, n int) *PoolSet {
	return Open(ctx, Pool, n, c.Pipeline)
}

// OpError is an operation the server answered with an error. Its
// PipelineError holds what a unary call's error would: the Connect code
// name, the reason, the message and the reason's metadata.
type OpError struct{ *tenurev1.PipelineError }

func (e *OpError) Error() string { return e.GetMessage() }

// Code is the error's Connect code (CodeUnknown if the name is unknown).
func (e *OpError) Code() connect.Code {
	var c connect.Code
	if c.UnmarshalText([]byte(e.GetCode())) != nil {
		return connect.CodeUnknown
	}
	return c
}

// Reason is the error's reason, else its code name.
func (e *OpError) Reason() string {
	if r := e.GetReason(); r != "" {
		return r
	}
	return e.GetCode()
}

// StreamError is an operation whose stream broke before its result came
// back. Sent reports whether the operation had been handed to the stream:
// if so, the server may have run it.
type StreamError struct {
	Err  error
	Sent bool
}

func (e *StreamError) Error() string { return "pipeline stream closed: " + e.Err.Error() }
func (e *StreamError) Unwrap() error { return e.Err }

// Set sends operations over a set of Pipeline streams of one service,
// spread round-robin. A stream that breaks stays broken (Broken); open a
// new Set to go on.
type Set[Req, Res, Op, Result any] struct {
	shape   Shape[Req, Res, Op, Result]
	streams []*stream[Req, Res, Op, Result]
	next    atomic.Uint64
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the streams' goroutines
	orphan  func(*Result)  // see OnOrphan
}

// OnOrphan sets fn to run, on a goroutine of its own, with the successful
// result of an operation whose caller stopped waiting (its ctx ended)
// after handing it to a stream: what the operation was granted (a lease,
// claimed tasks) can then be given back instead of being held by no one.
// Call it before the first Do.
func (p *Set[Req, Res, Op, Result]) OnOrphan(fn func(*Result)) *Set[Req, Res, Op, Result] {
	p.orphan = fn
	return p
}

// orphaned hands r, the result of an operation its caller gave up on, to
// the OnOrphan function.
func (p *Set[Req, Res, Op, Result]) orphaned(r *Result) {
	if p.orphan != nil && p.shape.Err(r) == nil {
		go p.orphan(r)
	}
}

type stream[Req, Res, Op, Result any] struct {
	set    *Set[Req, Res, Op, Result]
	stream *connect.BidiStreamForClient[Req, Res]
	ops    chan *Op
	dead   chan struct{} // closed when the stream broke
	once   sync.Once
	err    error

	mu     sync.Mutex
	nextID uint64
	// waiting holds the channel of each operation in flight, or nil once
	// its caller gave up on it (its result goes to the set's orphan).
	waiting map[uint64]chan *Result
}

// Open opens n streams (at least one) with open. They live until ctx ends
// or Close.
func Open[Req, Res, Op, Result any](ctx context.Context, shape Shape[Req, Res, Op, Result], n int,
	open func(context.Context) *connect.BidiStreamForClient[Req, Res]) *Set[Req, Res, Op, Result] {
	p := &Set[Req, Res, Op, Result]{shape: shape}
	ctx, p.cancel = context.WithCancel(ctx)
	for range max(n, 1) {
		s := &stream[Req, Res, Op, Result]{
			set:     p,
			stream:  open(ctx),
			ops:     make(chan *Op, 4096),
			dead:    make(chan struct{}),
			waiting: make(map[uint64]chan *Result),
		}
		p.wg.Go(s.receive)
		p.wg.Go(func() { s.send(ctx) })
		p.streams = append(p.streams, s)
	}
	return p
}

// Close ends the streams; operations in flight end with a StreamError.
// It returns once the streams' goroutines have, so that their connections
// are idle.
func (p *Set[Req, Res, Op, Result]) Close() {
	p.cancel() // the senders half-close their streams
	for _, s := range p.streams {
		s.fail(errors.New("closed"))
	}
	p.wg.Wait()
}

// Broken reports whether any of the streams broke.
func (p *Set[Req, Res, Op, Result]) Broken() bool {
	for _, s := range p.streams {
		select {
		case <-s.dead:
			return true
		default:
		}
	}
	return false
}

// Do runs op and returns its result, an *OpError for an operation the
// server refused, a *StreamError if the stream broke, or ctx's error if ctx
// ended first (the operation may still run: the stream does not cancel
// it).
func (p *Set[Req, Res, Op, Result]) Do(ctx context.Context, op *Op) (*Result, error) {
	// A context that has ended sends nothing: below, select would pick at
	// random between it and a free place on the stream.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := p.streams[p.next.Add(1)%uint64(len(p.streams))]
	ch := make(chan *Result, 1)
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	p.shape.SetID(op, id)
	s.waiting[id] = ch
	s.mu.Unlock()
	abandon := func() {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
	}
	select {
	case <-s.dead: // checked first: a broken stream must not take the op
		abandon()
		return nil, &StreamError{Err: s.err}
	default:
	}
	select {
	case s.ops <- op:
	case <-s.dead:
		abandon()
		return nil, &StreamError{Err: s.err}
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	}
	select {
	case r := <-ch:
		if e := p.shape.Err(r); e != nil {
			return nil, &OpError{e}
		}
		return r, nil
	case <-s.dead:
		abandon()
		// A result that arrived just before the stream broke still counts.
		select {
		case r := <-ch:
			if e := p.shape.Err(r); e != nil {
				return nil, &OpError{e}
			}
			return r, nil
		default:
		}
		return nil, &StreamError{Err: s.err, Sent: !neverConnected(s.err)}
	case <-ctx.Done():
		// Handed to the stream: the operation runs anyway. Its result,
		// when it comes, is an orphan.
		s.mu.Lock()
		if _, ok := s.waiting[id]; ok {
			s.waiting[id] = nil
		}
		s.mu.Unlock()
		select {
		case r := <-ch: // it came back as ctx ended
			p.orphaned(r)
		default:
		}
		return nil, ctx.Err()
	}
}

// neverConnected reports whether a stream's error says its connection
// was never made (a refused or failed dial, an address that does not
// resolve or parse): then none of its operations reached a server, and
// they may go elsewhere (a dead first endpoint used to fail every
// pipelined call with "may or may not have been applied").
func neverConnected(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var ue *url.Error
	return errors.As(err, &ue) && ue.Op == "parse"
}

func (s *stream[Req, Res, Op, Result]) fail(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.dead)
	})
}

func (s *stream[Req, Res, Op, Result]) receive() {
	for {
		resp, err := s.stream.Receive()
		if err != nil {
			s.fail(err)
			return
		}
		var orphans []*Result
		s.mu.Lock()
		for _, r := range s.set.shape.Results(resp) {
			id := s.set.shape.ID(r)
			if ch, ok := s.waiting[id]; ok {
				delete(s.waiting, id)
				if ch == nil {
					orphans = append(orphans, r)
					continue
				}
				ch <- r
			}
		}
		s.mu.Unlock()
		for _, r := range orphans {
			s.set.orphaned(r)
		}
	}
}

// maxBatch bounds the operations sent in one message, and MaxBatchBytes
// their encoded size: a server reads messages of up to 1 MiB, and a
// batch of large operations (Complete with a result of 256 KiB each) must
// go out as several messages, never as one the server refuses, breaking
// the stream.
const (
	maxBatch      = 1000
	MaxBatchBytes = 512 << 10
)

func (s *stream[Req, Res, Op, Result]) send(ctx context.Context) {
	// However the sender ends (the set's context, the stream dead, a Send
	// that failed: one after the context ended fails with its error), it
	// half-closes the request. A server shutting down gracefully waits for
	// streams whose requests are still open; and Go's HTTP/2 transport
	// notices a cancelled context only once the request body ends, so a
	// request left open kept the receiver, and Close, waiting for good.
	defer func() { _ = s.stream.CloseRequest() }()
	var op *Op
	var carried bool // op is the one the last message had no room for
	for {
		if !carried {
			select {
			case op = <-s.ops:
			case <-ctx.Done():
				return
			case <-s.dead:
				return
			}
		}
		// Callers just woken by results enqueue their next operation
		// into this message rather than each into its own.
		var ops []*Op
		ops, op, carried = Gather([]*Op{op}, s.ops, maxBatch, MaxBatchBytes)
		if err := s.stream.Send(s.set.shape.Wrap(ops)); err != nil {
			// io.EOF: the server ended the stream, and receive gets
			// its reason.
			if !errors.Is(err, io.EOF) {
				s.fail(err)
			}
			return
		}
	}
}

// Gather appends to batch what is waiting on ch, up to max items and
// maxBytes of encoded messages in all, and yields the processor once when
// ch runs empty, so that goroutines just woken can add theirs: one message
// per round of work, not one per item (the senders of both ends of a
// Pipeline stream). It stops early at a closed ch. An item taken from ch
// that would pass maxBytes is returned as over (with ok set), for the next
// batch; a batch always holds at least the items it was given.
func Gather[T any](batch []T, ch <-chan T, max, maxBytes int) (out []T, over T, ok bool) {
	size := 0
	for _, v := range batch {
		size += encodedSize(v)
	}
	for yielded := false; len(batch) < max; {
		select {
		case v, open := <-ch:
			if !open {
				return batch, over, false
			}
			n := encodedSize(v)
			if size+n > maxBytes {
				return batch, v, true
			}
			size += n
			batch = append(batch, v)
			yielded = false
			continue
		default:
		}
		if yielded {
			break
		}
		runtime.Gosched()
		yielded = true
	}
	return batch, over, false
}

// encodedSize is v's size in a repeated field of a message: its encoding
// and room for the field's tag and length.
func encodedSize(v any) int {
	const framing = 8
	switch m := v.(type) {
	case interface{ SizeVT() int }:
		return m.SizeVT() + framing
	case proto.Message:
		return proto.Size(m) + framing
	}
	return framing
}
