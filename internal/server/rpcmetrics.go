package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// rpcMetrics counts every RPC the API serves, by procedure and result
// code, times unary calls and gauges open streams: the per-call view an
// operator expects next to the registrar's own counters. Calls a follower
// forwards are counted on both members. Pipeline operations are not
// calls: their stream is, and each operation in ops, by the unary RPC it
// stands for.
type rpcMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	waits    *prometheus.HistogramVec
	streams  *prometheus.GaugeVec
	ops      *prometheus.CounterVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_rpc_requests_total",
			Help: "RPCs answered (streams: ended), by procedure and code (ok or the Connect code).",
		}, []string{"procedure", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_rpc_duration_seconds",
			Help: "Time to answer a unary RPC, by procedure; calls that asked to wait (Acquire, Claim with wait) are in tenure_rpc_wait_duration_seconds.",
			// 100 µs to ~2.4 s.
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}, []string{"procedure"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tenure_rpc_wait_duration_seconds",
			Help: "Time to answer a unary RPC that asked to wait (Acquire, Claim with wait), by procedure: mostly the wait.",
			// 1 ms to ~10 min.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 11),
		}, []string{"procedure"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_rpc_streams_open",
			Help: "Streams (Watch, KeepAlive, Pipeline) open now, by procedure.",
		}, []string{"procedure"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_pipeline_operations_total",
			Help: "Operations answered on Pipeline streams, by the unary procedure each stands for and code (ok or the Connect code).",
		}, []string{"procedure", "code"}),
	}
	reg.MustRegister(m.requests, m.duration, m.waits, m.streams, m.ops)
	return m
}

// op counts one Pipeline operation's answer: code is "ok" or the Connect
// code of its error.
func (m *rpcMetrics) op(proc, code string) {
	if proc == "" {
		proc = "unknown"
	}
	m.ops.WithLabelValues(proc, code).Inc()
}

// asksToWait reports whether a request may wait on purpose: an Acquire
// or Claim with a wait, whose time is mostly the wait, not the server's.
func asksToWait(msg any) bool {
	switch m := msg.(type) {
	case *tenurev1.AcquireRequest:
		return m.GetWait().AsDuration() > 0
	case *tenurev1.ClaimRequest:
		return m.GetWait().AsDuration() > 0
	}
	return false
}

func codeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled):
		// A client that went away (or closed its stream by cancelling).
		return connect.CodeCanceled.String()
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded.String()
	}
	return connect.CodeOf(err).String()
}

func (m *rpcMetrics) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		proc := req.Spec().Procedure
		h := m.duration
		if asksToWait(req.Any()) {
			h = m.waits
		}
		h.WithLabelValues(proc).Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(proc, codeOf(err)).Inc()
		return resp, err
	}
}

func (m *rpcMetrics) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (m *rpcMetrics) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		proc := conn.Spec().Procedure
		open := m.streams.WithLabelValues(proc)
		open.Inc()
		err := next(ctx, conn)
		open.Dec()
		m.requests.WithLabelValues(proc, codeOf(err)).Inc()
		return err
	}
}
