package fault

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// Concurrent clients acquire, renew, transfer, release and write guarded
// state on a handful of resources of a real 3-node cluster while the
// nemesis kills the leader, kills a follower, pauses the leader past the
// election timeout, isolates the leader, cuts the link between the leader
// and one follower, and hands the leadership to a
// member whose wall clock is an hour off. The history must be
// linearizable against the registrar model (porcupine, per resource), no
// grant may overlap or come before send time + ttl of the previous holder,
// fences must follow real time, and every acknowledged grant must be
// there, with its fence, once the cluster has healed. Short mode: one
// round of every fault; TENURE_FAULT_DURATION=10m runs rounds for that
// long.
func TestLinearizableUnderFaults(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, tenureBin, 3)
	rec := NewRecorder()
	c.Rec = rec
	var resources []string
	for i := range 6 {
		resources = append(resources, fmt.Sprintf("fault/r%d", i))
	}
	w := &Workload{Rec: rec, Endpoints: c.Endpoints(), Resources: resources, Clients: 6,
		TTL: 2 * time.Second, CallTimeout: 2 * time.Second, Pace: 25 * time.Millisecond}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.Run(ctx) }()

	nem := &Nemesis{T: t, C: c, Rec: rec, Hold: 3 * time.Second}
	long := soak(t)
	hold(context.Background(), time.Second) // some history before the first fault
	for round := 0; round == 0 || time.Since(start) < long; round++ {
		for _, f := range Faults {
			nem.Inject(context.Background(), f)
			hold(context.Background(), time.Second) // quiet time between faults
		}
	}
	stop()
	wg.Wait()

	// After the cluster healed: a last read of every resource (part of the
	// history, so the guarded state is checked too), and every acknowledged
	// grant must be found with its fence.
	for _, r := range resources {
		wk := w.worker(h2c(), w.Clients)
		var o Op
		waitFor(t, time.Minute, "a final read of "+r, func() bool {
			o = wk.read(context.Background(), r)
			return o.Outcome != NoEffect
		})
		if o.Outcome != OK {
			t.Errorf("final read of %s after healing: %s %s", r, o.Outcome, o.Err)
		}
	}
	extra := checkPresent(t, c, rec)
	extra = append(extra, checkWallOffset(rec, nem)...)
	for _, o := range rec.Ops() {
		// Raft refuses entries during a leadership transfer before
		// appending them: that is no effect, never an unknown outcome.
		if o.Outcome == Unknown && strings.Contains(o.Err, "leadership transfer in progress") {
			extra = append(extra, fmt.Sprintf("%s at %s answered OUTCOME_UNKNOWN for a write Raft refused during a leadership transfer: %s", o.Kind, o.Member, o.Err))
			break
		}
	}
	rep := Check(t, rec, c, 2*time.Minute, extra...)
	var faults []string
	for k, v := range nem.Injected {
		faults = append(faults, fmt.Sprintf("%s×%d", k, v))
	}
	t.Logf("ran %v: %d operations recorded, %d checked by porcupine (%d of unknown outcome), %d acknowledged grants; faults: %s; linearizable: %s",
		time.Since(start).Round(time.Second), rep.Ops, rep.Checked, rep.Unknown, len(Acknowledged(rec.Ops())), strings.Join(faults, ", "), rep.Linearizable)
}

// checkPresent verifies every acknowledged grant of the history on the
// healed cluster: found, same fence, and released only if its holder
// tried to release or transfer it.
func checkPresent(t *testing.T, c *Cluster, rec *Recorder) []string {
	acked := Acknowledged(rec.Ops())
	ids := make([]string, 0, len(acked))
	for id := range acked {
		ids = append(ids, id)
	}
	lc := tenurev1connect.NewLeaseServiceClient(h2c(), "http://"+c.Endpoints()[0], connect.WithGRPC())
	var bad []string
	for start := 0; start < len(ids); start += 500 {
		batch := ids[start:min(start+500, len(ids))]
		resp, err := Retry(t, time.Minute, func(ctx context.Context) (*connect.Response[tenurev1.VerifyResponse], error) {
			return lc.Verify(ctx, connect.NewRequest(&tenurev1.VerifyRequest{LeaseIds: batch}))
		})
		if err != nil {
			t.Fatalf("Verify after healing: %v", err)
		}
		for _, r := range resp.Msg.Results {
			g := acked[r.LeaseId]
			switch {
			case !r.Found && rec.Now() > g.DeadlineNs+int64(50*time.Minute):
				// Possibly ended and pruned after the default lease
				// retention (1 h): only soak runs get here.
			case !r.Found:
				bad = append(bad, fmt.Sprintf("acknowledged lease %s (%s, fence %d) lost", r.LeaseId, g.Resource, g.Fence))
			case r.Lease.Fence != g.Fence:
				bad = append(bad, fmt.Sprintf("acknowledged lease %s has fence %d, was granted %d", r.LeaseId, r.Lease.Fence, g.Fence))
			case r.Lease.State == tenurev1.State_STATE_RELEASED && !g.MaybeEnded:
				bad = append(bad, fmt.Sprintf("acknowledged lease %s is RELEASED though its holder never released it", r.LeaseId))
			case r.Lease.State == tenurev1.State_STATE_ACTIVE && !g.MaybeEnded && rec.Now() > g.DeadlineNs+int64(30*time.Second):
				bad = append(bad, fmt.Sprintf("lease %s is still active 30 s past send time + ttl (never expired)", r.LeaseId))
			}
		}
	}
	return bad
}

// checkWallOffset: leases granted while a member with an offset wall
// clock led carry that wall time (the fault took effect), while their
// validity, checked by CheckGrants, did not move.
func checkWallOffset(rec *Recorder, nem *Nemesis) []string {
	if len(nem.WallOffsetLeaders) == 0 {
		return []string{"the wall-offset fault never got an offset member to lead"}
	}
	base := rec.start.UnixMilli()
	for _, o := range rec.Ops() {
		if o.Outcome != OK || o.IssuedAtUnixMs == 0 {
			continue
		}
		skew := o.IssuedAtUnixMs - (base + o.Call/int64(time.Millisecond))
		if skew > int64(30*time.Minute/time.Millisecond) || skew < -int64(30*time.Minute/time.Millisecond) {
			return nil
		}
	}
	return []string{"no lease was issued with an offset wall time: the wall-offset fault did not take effect"}
}
