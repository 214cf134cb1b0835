package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
)

// Workload runs concurrent clients against a cluster and records every
// operation they make.
type Workload struct {
	Rec         *Recorder
	Endpoints   []string
	Resources   []string
	Clients     int
	TTL         time.Duration
	CallTimeout time.Duration // a call that takes longer is an unknown outcome
	Pace        time.Duration // pause between one client's operations
}

// Run runs the clients until ctx ends.
func (w *Workload) Run(ctx context.Context) {
	hc := h2c()
	var wg sync.WaitGroup
	for i := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.worker(hc, i).run(ctx)
		}()
	}
	wg.Wait()
	hc.CloseIdleConnections()
}

// worker returns client id of the workload, starting on one member.
func (w *Workload) worker(hc *http.Client, id int) *worker {
	clients := map[string]tenurev1connect.LeaseServiceClient{}
	for _, e := range w.Endpoints {
		clients[e] = tenurev1connect.NewLeaseServiceClient(hc, "http://"+e, connect.WithGRPC())
	}
	return &worker{w: w, id: id, clients: clients, endpoint: w.Endpoints[id%len(w.Endpoints)],
		rnd: rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))}
}

type worker struct {
	w        *Workload
	id       int
	clients  map[string]tenurev1connect.LeaseServiceClient
	endpoint string
	rnd      *rand.Rand
	seq      int
	pace     *time.Ticker
}

// classify maps a call's error to an outcome and a reason.
func classify(err error) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	r := tenure.ReasonOf(tenure.ParseError(err))
	switch r {
	case "":
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return NoEffect, ""
		}
		return Unknown, ""
	case tenure.ReasonOutcomeUnknown:
		return Unknown, string(r)
	case tenure.ReasonNotLeader, "UNAVAILABLE":
		// The server's contract: nothing was proposed.
		return NoEffect, string(r)
	}
	return Failed, string(r)
}

// call runs one operation against the worker's endpoint and records it;
// f fills in the outputs from a successful call.
func (c *worker) call(ctx context.Context, op Op, f func(ctx context.Context, lc tenurev1connect.LeaseServiceClient, op *Op) error) Op {
	op.Client, op.Member = c.id, c.endpoint
	rec := c.w.Rec
	cctx, cancel := context.WithTimeout(context.Background(), c.w.CallTimeout)
	op.Call = rec.Now()
	err := f(cctx, c.clients[c.endpoint], &op)
	op.Return = rec.Now()
	cancel()
	op.Outcome, op.Reason = classify(err)
	if err != nil {
		op.Err = err.Error()
		var held *tenure.HeldError
		if errors.As(tenure.ParseError(err), &held) {
			op.HeldBy = held.LeaseID
		}
	}
	rec.Add(op)
	if op.Outcome == Unknown || op.Outcome == NoEffect {
		// Like a client with several endpoints: try another member next.
		c.endpoint = c.w.Endpoints[c.rnd.IntN(len(c.w.Endpoints))]
	}
	return op
}

func (c *worker) run(ctx context.Context) {
	c.pace = time.NewTicker(c.w.Pace)
	defer c.pace.Stop()
	for ctx.Err() == nil {
		c.cycle(ctx)
	}
}

// wait paces the worker; false when the run is over.
func (c *worker) wait(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.pace.C:
		return true
	}
}

func (c *worker) holder() string { return fmt.Sprintf("c%d", c.id) }

// cycle acquires a random resource and, while it holds it, renews,
// reads, writes guarded state and transfers it; then releases it or
// abandons it to expire.
func (c *worker) cycle(ctx context.Context) {
	res := c.w.Resources[c.rnd.IntN(len(c.w.Resources))]
	ttl := c.w.TTL
	if !c.wait(ctx) {
		return
	}
	if c.rnd.IntN(4) == 0 {
		c.read(ctx, res)
		return
	}
	holder := c.holder()
	a := c.call(ctx, Op{Kind: KindAcquire, Resource: res, Holder: holder, TTLms: ttl.Milliseconds()}, func(ctx context.Context, lc tenurev1connect.LeaseServiceClient, op *Op) error {
		resp, err := lc.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: res, Holder: holder, Ttl: durationpb.New(ttl)}))
		if err == nil {
			setLease(op, resp.Msg.Lease)
		}
		return err
	})
	if a.Outcome != OK {
		return
	}
	lease := a.NewLease
	epoch, known := uint64(0), false
	for range 1 + c.rnd.IntN(6) {
		if !c.wait(ctx) {
			return
		}
		var o Op
		switch p := c.rnd.IntN(10); {
		case p < 4:
			o = c.call(ctx, Op{Kind: KindRenew, Resource: res, LeaseID: lease, Holder: holder, TTLms: ttl.Milliseconds()}, func(ctx context.Context, lc tenurev1connect.LeaseServiceClient, op *Op) error {
				resp, err := lc.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{lease}, Ttl: durationpb.New(ttl)}))
				if err == nil {
					if len(resp.Msg.Leases) != 1 {
						return fmt.Errorf("renew answered %d leases and %d failures", len(resp.Msg.Leases), len(resp.Msg.Failures))
					}
					op.ExpiresTick = resp.Msg.Leases[0].ExpiresTick
				}
				return err
			})
		case p < 5:
			o = c.read(ctx, res)
			if o.Outcome == OK {
				epoch, known = o.Epoch, true
			}
		case p < 9:
			if !known {
				o = c.read(ctx, res)
				if o.Outcome == OK {
					epoch, known = o.Epoch, true
				}
				break
			}
			c.seq++
			data := fmt.Sprintf("c%d-%d", c.id, c.seq)
			exp := epoch
			o = c.call(ctx, Op{Kind: KindWrite, Resource: res, LeaseID: lease, Expected: exp, Data: data}, func(ctx context.Context, lc tenurev1connect.LeaseServiceClient, op *Op) error {
				resp, err := lc.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: res, LeaseId: lease, ExpectedEpoch: exp, Data: []byte(data)}))
				if err == nil {
					op.Epoch = resp.Msg.Epoch
				}
				return err
			})
			if o.Outcome == OK {
				epoch = o.Epoch
			} else {
				known = false
			}
		default:
			to := fmt.Sprintf("c%d-t%d", c.id, c.rnd.IntN(1000))
			from := holder
			o = c.call(ctx, Op{Kind: KindTransfer, Resource: res, LeaseID: lease, Holder: from, To: to, TTLms: ttl.Milliseconds()}, func(ctx context.Context, lc tenurev1connect.LeaseServiceClient, op *Op) error {
				resp, err := lc.Transfer(ctx, connect.NewRequest(&tenurev1.TransferRequest{LeaseId: lease, Holder: from, NewHolder: to, Ttl: durationpb.New(ttl)}))
				if err == nil {
					setLease(op, resp.Msg.Lease)
				}
				return err
			})
			if o.Outcome == OK {
				lease, holder = o.NewLease, to
			}
		}
		if o.Outcome != OK && o.Kind != KindRead {
			return // lost it, or unsure: abandon it
		}
	}
	if c.rnd.IntN(5) == 0 || !c.wait(ctx) {
		return // abandoned: it expires
	}
	c.call(ctx, Op{Kind: KindRelease, Resource: res, LeaseID: lease, Holder: holder}, func(ctx context.Context, lc tenurev1connect.LeaseServiceClient, op *Op) error {
		resp, err := lc.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: lease, Holder: holder, Reason: tenurev1.ReleaseReason_RELEASE_REASON_COMPLETED}))
		if err == nil {
			op.AlreadyTerminal = resp.Msg.AlreadyTerminal
		}
		return err
	})
}

func (c *worker) read(ctx context.Context, res string) Op {
	return c.call(ctx, Op{Kind: KindRead, Resource: res}, func(ctx context.Context, lc tenurev1connect.LeaseServiceClient, op *Op) error {
		resp, err := lc.ReadState(ctx, connect.NewRequest(&tenurev1.ReadStateRequest{Resource: res}))
		if err == nil {
			op.Epoch, op.OutData = resp.Msg.Epoch, string(resp.Msg.Data)
		}
		return err
	})
}

func setLease(op *Op, l *tenurev1.Lease) {
	op.NewLease, op.Fence, op.IssuedTick, op.ExpiresTick = l.GetLeaseId(), l.GetFence(), l.GetIssuedTick(), l.GetExpiresTick()
	op.IssuedAtUnixMs = l.GetIssuedAt().AsTime().UnixMilli()
}
