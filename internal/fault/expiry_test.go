package fault

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// acquireOp records one Acquire through lc.
func acquireOp(rec *Recorder, client int, lc tenurev1connect.LeaseServiceClient, member, res, holder string, ttl time.Duration) Op {
	op := Op{Client: client, Member: member, Kind: KindAcquire, Resource: res, Holder: holder, TTLms: ttl.Milliseconds()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	op.Call = rec.Now()
	resp, err := lc.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: res, Holder: holder, Ttl: durationpb.New(ttl)}))
	op.Return = rec.Now()
	op.Outcome, op.Reason = classify(err)
	if err == nil {
		setLease(&op, resp.Msg.Lease)
	} else {
		op.Err = err.Error()
	}
	rec.Add(op)
	return op
}

// A lease whose leader is killed -9 after the cluster sat idle expires at
// most the election time + 100 ms late (time stands still only while
// there is no leader), and never before send time + ttl. The next holder
// polls for the resource every 10 ms through a surviving member.
func TestExpiryAcrossFailoverIsAtMostElectionPlus100msLate(t *testing.T) {
	c := StartCluster(t, tenureBin, 3)
	rec := NewRecorder()
	c.Rec = rec
	const ttl = 4 * time.Second
	const poll = 10 * time.Millisecond
	l := c.WaitLeader(30 * time.Second)
	s := c.Other(l)
	lc := tenurev1connect.NewLeaseServiceClient(h2c(), "http://"+s.API, connect.WithGRPC())
	var a Op
	waitFor(t, 10*time.Second, "the first grant", func() bool {
		a = acquireOp(rec, 0, lc, s.API, "failover/x", "a", ttl)
		return a.Outcome == OK
	})
	// Nothing happens for a while before the leader dies: registrar time
	// must not stand still from the last command, only from the failure.
	hold(context.Background(), 1500*time.Millisecond)
	killed := rec.Now()
	rec.Note("kill -9 " + l.ID)
	l.Kill()

	// The next holder polls from the moment of the kill: the first answer
	// of the registrar (LEASE_HELD) marks the new leader serving, which
	// ends the election as clients see it.
	var b, served Op
	tick := time.NewTicker(poll)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for b.Outcome != OK {
		if time.Now().After(deadline) {
			t.Fatal("the lease never expired")
		}
		<-tick.C
		b = acquireOp(rec, 1, lc, s.API, "failover/x", "b", ttl)
		if served.Kind == "" && (b.Outcome == Failed || b.Outcome == OK) {
			served = b
			rec.Note("a new leader serves")
		}
	}
	election := time.Duration(served.Return - killed)
	late := time.Duration(b.Return - (a.Return + int64(ttl)))
	bound := election + 100*time.Millisecond + 2*poll
	t.Logf("expired %v after grant return + ttl; election (kill to first answer of a new leader) took %v (bound %v)", late, election, bound)
	if late > bound {
		t.Errorf("lease expired %v late across a failover whose election took %v: more than election + 100 ms (+ %v polling)", late, election, 2*poll)
	}
	Check(t, rec, c, time.Minute)
}
