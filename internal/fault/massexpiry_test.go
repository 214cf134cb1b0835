package fault

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// pipelineAcquire acquires n resources prefix/0… for holder through one
// Pipeline stream, batches of 1,000 in flight, and fails t on any error.
func pipelineAcquire(t *testing.T, lc tenurev1connect.LeaseServiceClient, prefix, holder string, n int, ttl time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream := lc.Pipeline(ctx)
	errc := make(chan error, 1)
	go func() {
		const batch = 1000
		for start := 0; start < n; start += batch {
			req := &tenurev1.PipelineRequest{}
			for i := start; i < min(start+batch, n); i++ {
				req.Ops = append(req.Ops, &tenurev1.PipelineOp{Id: uint64(i + 1), Op: &tenurev1.PipelineOp_Acquire{Acquire: &tenurev1.AcquireRequest{
					Resource: fmt.Sprintf("%s/%d", prefix, i), Holder: holder, Ttl: durationpb.New(ttl)}}})
			}
			if err := stream.Send(req); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for got := 0; got < n; {
		resp, err := stream.Receive()
		if err != nil {
			t.Fatalf("pipeline after %d grants: %v", got, err)
		}
		for _, r := range resp.Results {
			if e := r.GetError(); e != nil {
				t.Fatalf("pipeline acquire %d: %s", r.Id, e.Message)
			}
			got++
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("pipeline send: %v", err)
	}
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
}

// histogram reads a Prometheus histogram's cumulative buckets and count
// from /metrics.
func histogram(t *testing.T, api, name string) (buckets map[string]float64, count float64) {
	t.Helper()
	resp, err := http.Get("http://" + api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buckets = map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(f[0], name+`_bucket{le="`):
			buckets[strings.TrimSuffix(strings.TrimPrefix(f[0], name+`_bucket{le="`), `"}`)] = v
		case f[0] == name+"_count":
			count = v
		}
	}
	return buckets, count
}

// 100,000 leases due at the same tick on a durable node (the real
// binary): every one is expired within 1 s of its deadline, and the
// server's tenure_expiry_lateness_seconds histogram shows it (every
// observation in the le="1" bucket).
func TestMassExpiry100kWithinOneSecond(t *testing.T) {
	const n = 100_000
	c := StartCluster(t, tenureBin, 1)
	api := c.Members[0].API
	hc := h2c()
	lc := tenurev1connect.NewLeaseServiceClient(hc, "http://"+api, connect.WithGRPC())
	cc := tenurev1connect.NewClusterServiceClient(hc, "http://"+api, connect.WithGRPC())
	ctx := context.Background()
	if _, err := Retry(t, time.Minute, func(ctx context.Context) (*connect.Response[tenurev1.SetPolicyResponse], error) {
		return cc.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{
			Namespace: "default", Policy: &tenurev1.NamespacePolicy{MaxActivePerHolder: n}}))
	}); err != nil {
		t.Fatal(err)
	}
	// Granted with a ttl long enough for all of them to be granted, then
	// renewed together with it, which puts every expiry on one tick.
	const ttl = 20 * time.Second
	began := time.Now()
	pipelineAcquire(t, lc, "mass", "mass", n, ttl)
	t.Logf("granted %d leases in %v", n, time.Since(began).Round(time.Millisecond))
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	sent := time.Now()
	resp, err := lc.Renew(rctx, connect.NewRequest(&tenurev1.RenewRequest{Holder: "mass", AllOfHolder: true, Ttl: durationpb.New(ttl)}))
	cancel()
	if err != nil {
		t.Fatalf("renew all: %v", err)
	}
	if len(resp.Msg.Leases) != n {
		t.Fatalf("renew all renewed %d leases, want %d (failures: %v)", len(resp.Msg.Leases), n, resp.Msg.Failures[:min(3, len(resp.Msg.Failures))])
	}
	due := resp.Msg.Leases[0].ExpiresTick
	for _, l := range resp.Msg.Leases {
		if l.ExpiresTick != due {
			t.Fatalf("leases due at different ticks: %d and %d", due, l.ExpiresTick)
		}
	}
	active := func() uint64 {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := lc.List(actx, connect.NewRequest(&tenurev1.ListRequest{PageSize: 1}))
		if err != nil {
			t.Fatal(err)
		}
		return l.Msg.Counts.GetActive()
	}
	if a := active(); a != n {
		t.Fatalf("%d active before the deadline, want %d", a, n)
	}
	waitFor(t, ttl+time.Minute, "every lease expired", func() bool { return active() == 0 })
	// The renewal's send time + ttl is a lower bound of the deadline in
	// real time, so this over-states lateness, never under-states it.
	late := time.Since(sent.Add(ttl))
	buckets, count := histogram(t, api, "tenure_expiry_lateness_seconds")
	t.Logf("all %d expired within %v of send time + ttl (client side, polling); lateness histogram: count %v, le=0.1 %v, le=0.25 %v, le=1 %v",
		n, late.Round(time.Millisecond), count, buckets["0.1"], buckets["0.25"], buckets["1"])
	if count < n {
		t.Errorf("lateness histogram observed %v expiries, want at least %d", count, n)
	}
	if buckets["1"] != count {
		t.Errorf("%v of %v expiries were more than 1 s late", count-buckets["1"], count)
	}
	if late > 2*time.Second {
		t.Errorf("the last lease was seen expired %v after send time + ttl, want within 1 s (+ the renewal and polling, hence 2 s)", late)
	}
}
