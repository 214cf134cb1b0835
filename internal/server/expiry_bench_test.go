package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// BenchmarkMassExpiry100k: 100,000 leases due at the same tick (granted,
// then renewed together by one all-of-holder renewal) on a durable single
// node; reports how long after their common expiry the last one was
// expired by the leader's expirer, and the p99 lateness from the
// tenure_expiry_lateness_seconds histogram. Run with -benchtime 1x.
func BenchmarkMassExpiry100k(b *testing.B) {
	const n = 100_000
	const ttl = time.Minute
	for b.Loop() {
		bd := setup(b)
		ctx := context.Background()
		if _, err := bd.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{
			Namespace: "default", Policy: &tenurev1.NamespacePolicy{MaxActivePerHolder: n}})); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 64 {
					if _, err := bd.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{
						Resource: fmt.Sprintf("mass/%d", i), Holder: "mass", Ttl: durationpb.New(ttl)})); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		// Renewing with the same ttl moves every expiry to the same tick
		// (never earlier: each lease was granted before now).
		resp, err := bd.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{Holder: "mass", AllOfHolder: true, Ttl: durationpb.New(ttl)}))
		if err != nil {
			b.Fatalf("renew all: %v", err)
		}
		if len(resp.Msg.Leases) != n {
			b.Fatalf("renew all renewed %d leases; failures %v", len(resp.Msg.Leases), resp.Msg.Failures[:min(3, len(resp.Msg.Failures))])
		}
		due := resp.Msg.Leases[0].ExpiresAt.AsTime()
		active := func() uint64 {
			l, err := bd.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{PageSize: 1}))
			if err != nil {
				b.Fatal(err)
			}
			return l.Msg.Counts.GetActive()
		}
		waitFor(b, "all leases expired", 2*time.Minute, func() bool { return active() == 0 })
		b.ReportMetric(time.Since(due).Seconds()*1000, "ms-after-due")
		hr, err := http.Get(bd.base + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(hr.Body)
		hr.Body.Close()
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "tenure_expiry_lateness_seconds") {
				b.Log(l)
			}
		}
	}
}
