package tenure

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// Like keepalive_test.go, this runs in a testing/synctest bubble: time.Sleep
// only moves the bubble's fake clock, and synctest.Wait is the
// synchronisation.

// renewLimitMember is a fake member whose grants of resources under prefix
// carry a renewal limit, as the registrar's task leases do, enforced on
// KeepAlive as the registrar does: the renewal after the limit-th is
// refused with RENEWAL_LIMIT_EXCEEDED.
type renewLimitMember struct {
	*fakeMember
	prefix string
	limit  uint32
}

// startRenewLimited starts a renewLimitMember at addr in fc, as fc.start
// starts a plain one.
func startRenewLimited(fc *fakeCluster, addr, prefix string, limit uint32) *fakeMember {
	m := &renewLimitMember{
		fakeMember: &fakeMember{addr: addr, reg: fc.reg, fail: make(map[string]Reason)},
		prefix:     prefix,
		limit:      limit,
	}
	mux := http.NewServeMux()
	mux.Handle(tenurev1connect.NewLeaseServiceHandler(m, connect.WithInterceptors(m)))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	l := fc.net.listen(addr)
	go func() { _ = srv.Serve(l) }()
	fc.members[addr] = m.fakeMember
	fc.servers[addr] = srv
	return m.fakeMember
}

func (m *renewLimitMember) Acquire(ctx context.Context, req *connect.Request[tenurev1.AcquireRequest]) (*connect.Response[tenurev1.AcquireResponse], error) {
	resp, err := m.fakeMember.Acquire(ctx, req)
	if err != nil || !strings.HasPrefix(req.Msg.GetResource(), m.prefix) {
		return resp, err
	}
	pb := resp.Msg.GetLease()
	pb.MaxRenewals = m.limit
	m.reg.mu.Lock()
	m.reg.leases[pb.GetLeaseId()].pb.MaxRenewals = m.limit
	m.reg.mu.Unlock()
	return resp, nil
}

func (m *renewLimitMember) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (m *renewLimitMember) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler marks, before the fake member handles a KeepAlive
// request, the leases of it that have used up their renewals as refused.
func (m *renewLimitMember) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, renewLimitConn{StreamingHandlerConn: conn, m: m})
	}
}

type renewLimitConn struct {
	connect.StreamingHandlerConn
	m *renewLimitMember
}

func (c renewLimitConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	req, ok := msg.(*tenurev1.KeepAliveRequest)
	if !ok {
		return nil
	}
	var spent []string
	c.m.reg.mu.Lock()
	for _, id := range req.GetLeaseIds() {
		if l := c.m.reg.leases[id]; l != nil && l.pb.GetMaxRenewals() > 0 && l.pb.GetRenewalCount() >= l.pb.GetMaxRenewals() {
			spent = append(spent, id)
		}
	}
	c.m.reg.mu.Unlock()
	c.m.set(func(fm *fakeMember) {
		for _, id := range spent {
			fm.fail[id] = ReasonRenewalLimitExceeded
		}
	})
	return nil
}

// renewalTimes returns when, after t0, the KeepAlive requests in log that
// renewed lease id were received.
func renewalTimes(log []kaRecord, id string, t0 time.Time) []time.Duration {
	var out []time.Duration
	for _, r := range log {
		if slices.Contains(r.ids, id) {
			out = append(out, r.at.Sub(t0))
		}
	}
	return out
}

// every returns step, 2·step, …, n·step.
func every(step time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * step
	}
	return out
}

// The audit's case: a task lease (10 renewals) held next to a 1.5 s plain
// lease, whose renewals go out every 0.5 s. The task lease must not be
// pulled into them: it is renewed every ttl/3 on its own schedule and
// refused at its 11th renewal, 11·ttl/3 = 22 s after the grant (the old
// scheduler renewed it every ttl/6 and lost it at 11 s). A plain lease of
// the same ttl keeps being renewed with the short lease, every ttl/6.
func TestRenewalLimitedLeaseIsNotRenewedEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			ttl      = 6 * time.Second
			shortTTL = 1500 * time.Millisecond
			limit    = 10
		)
		fc := setup(t)
		m := startRenewLimited(fc, "a:1", "queue/", limit)
		c := fc.client([]string{"a:1"})
		t0 := time.Now()
		task, err := c.Acquire(t.Context(), "queue/jobs/t1", TTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := c.Acquire(t.Context(), "plain", TTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		short, err := c.Acquire(t.Context(), "short", TTL(shortTTL))
		if err != nil {
			t.Fatal(err)
		}
		if got := task.Proto().GetMaxRenewals(); got != limit {
			t.Fatalf("task lease granted with max_renewals %d, want %d", got, limit)
		}

		refused := t0.Add((limit + 1) * ttl / 3)
		time.Sleep(time.Until(refused) - time.Millisecond)
		synctest.Wait()
		if isDone(task) {
			var lost *LostError
			errors.As(task.Err(), &lost)
			t.Fatalf("task lease lost %v after the grant, before its %dth renewal was due at %v: %v",
				lost.At.Sub(t0), limit+1, refused.Sub(t0), task.Err())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !isDone(task) || !errors.Is(task.Err(), ErrRenewalLimitExceeded) {
			t.Fatalf("Done=%v Err=%v, want lost with RENEWAL_LIMIT_EXCEEDED at its %dth renewal", isDone(task), task.Err(), limit+1)
		}
		var lost *LostError
		if errors.As(task.Err(), &lost); !lost.At.Equal(refused) {
			t.Errorf("task lease lost at %v, want %v", lost.At.Sub(t0), refused.Sub(t0))
		}

		log := m.keepalives()
		tests := []struct {
			name  string
			lease *Lease
			want  []time.Duration
		}{
			{"limited lease on its own ttl/3", task, every(ttl/3, limit+1)},
			{"plain lease pulled forward as before", plain, every(ttl/6, 22)},
			{"short plain lease every ttl/3", short, every(shortTTL/3, 44)},
		}
		for _, tt := range tests {
			if got := renewalTimes(log, tt.lease.ID(), t0); !slices.Equal(got, tt.want) {
				t.Errorf("%s: renewals at %v, want %v", tt.name, got, tt.want)
			}
		}
		for _, l := range []*Lease{plain, short} {
			if isDone(l) {
				t.Errorf("plain lease %s lost: %v", l.Resource(), l.Err())
			}
		}
	})
}
