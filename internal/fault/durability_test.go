package fault

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// ackedWrite is a grant and a guarded write the server acknowledged.
type ackedWrite struct {
	resource string
	fence    uint64
	data     string // "" when the write was not acknowledged
}

// kill -9 of every member at once under heavy write load (grants and
// guarded writes through every member), then a restart on the same data
// directories: every acknowledged grant is there with its fence, every
// acknowledged guarded write with its data, and the next grant's fence is
// above every acknowledged one. A single durable node and a 3-node cluster.
func TestKill9UnderLoadLosesNoAcknowledgedWrite(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d-node", size), func(t *testing.T) {
			c := StartCluster(t, tenureBin, size)
			hc := h2c()
			var mu sync.Mutex
			acked := map[string]*ackedWrite{} // lease id → what was acknowledged
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for w := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					api := c.Members[w%size].API
					lc := tenurev1connect.NewLeaseServiceClient(hc, "http://"+api, connect.WithGRPC())
					for i := 0; ctx.Err() == nil; i++ {
						res := fmt.Sprintf("crash/%d/%d", w, i)
						a, err := lc.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: res, Holder: fmt.Sprintf("w%d", w)}))
						if err != nil {
							if o, _ := classify(err); o == NoEffect {
								continue // an election: nothing was proposed
							}
							return // killed under us: not acknowledged
						}
						id := a.Msg.Lease.LeaseId
						mu.Lock()
						acked[id] = &ackedWrite{resource: res, fence: a.Msg.Lease.Fence}
						mu.Unlock()
						data := "v-" + id
						if _, err := lc.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: res, LeaseId: id, Data: []byte(data)})); err == nil {
							mu.Lock()
							acked[id].data = data
							mu.Unlock()
						}
					}
				}()
			}
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
			waitFor(t, time.Minute, "grants under load", func() bool { return count() >= 1500 })
			for _, m := range c.Members {
				m.Kill()
			}
			stop()
			wg.Wait()
			t.Logf("%d grants acknowledged before kill -9 of all %d members", len(acked), size)

			for _, m := range c.Members {
				m.Start()
			}
			for _, m := range c.Members {
				m.WaitReady(time.Minute)
			}
			lc := tenurev1connect.NewLeaseServiceClient(hc, "http://"+c.Members[0].API, connect.WithGRPC())
			ids := make([]string, 0, len(acked))
			var maxFence uint64
			writes := 0
			for id, a := range acked {
				ids = append(ids, id)
				maxFence = max(maxFence, a.fence)
			}
			for start := 0; start < len(ids); start += 1000 {
				resp, err := Retry(t, time.Minute, func(ctx context.Context) (*connect.Response[tenurev1.VerifyResponse], error) {
					return lc.Verify(ctx, connect.NewRequest(&tenurev1.VerifyRequest{LeaseIds: ids[start:min(start+1000, len(ids))]}))
				})
				if err != nil {
					t.Fatalf("Verify after restart: %v", err)
				}
				for _, r := range resp.Msg.Results {
					if a := acked[r.LeaseId]; !r.Found || r.Lease.Fence != a.fence {
						t.Errorf("acknowledged lease %s (fence %d) lost or changed after kill -9: %+v", r.LeaseId, a.fence, r)
					}
				}
			}
			for _, a := range acked {
				if a.data == "" {
					continue
				}
				writes++
				st, err := Retry(t, time.Minute, func(ctx context.Context) (*connect.Response[tenurev1.ReadStateResponse], error) {
					return lc.ReadState(ctx, connect.NewRequest(&tenurev1.ReadStateRequest{Resource: a.resource}))
				})
				if err != nil {
					t.Fatalf("ReadState after restart: %v", err)
				}
				if string(st.Msg.Data) != a.data || st.Msg.Epoch != 1 {
					t.Errorf("acknowledged write to %s lost after kill -9: epoch %d data %q, want epoch 1 %q", a.resource, st.Msg.Epoch, st.Msg.Data, a.data)
				}
			}
			resp, err := Retry(t, time.Minute, func(ctx context.Context) (*connect.Response[tenurev1.AcquireResponse], error) {
				return lc.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "crash/after", Holder: "w"}))
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Msg.Lease.Fence <= maxFence {
				t.Errorf("fence %d after restart is not above the highest acknowledged %d", resp.Msg.Lease.Fence, maxFence)
			}
			t.Logf("all %d grants and %d guarded writes present after restart", len(acked), writes)
		})
	}
}
