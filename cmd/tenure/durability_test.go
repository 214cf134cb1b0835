package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// crashServer is a `tenure server` process this test may kill -9.
type crashServer struct {
	dir, api, raft string
	cmd            *exec.Cmd
	exited         chan struct{}
}

func (s *crashServer) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(tenureBin, "server", "--data-dir", filepath.Join(s.dir, "data"), "--listen", s.api, "--raft-listen", s.raft, "--log-level", "warn")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); log.Close(); close(s.exited) }()
	waitFor(t, 20*time.Second, "server ready", func() bool {
		resp, err := http.Get("http://" + s.api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (s *crashServer) kill9() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// kill -9 of a durable single node under write load, restart on the same
// data directory: every acknowledged grant is present with its fence, and
// the next grant's fence is higher than every acknowledged one. A snapshot
// (with log truncation) taken during the load is part of the recovery.
func TestKill9UnderWriteLoadLosesNoAcknowledgedGrant(t *testing.T) {
	s := &crashServer{dir: t.TempDir(), api: freePort(), raft: freePort()}
	s.start(t)
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			s.kill9()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			t.Logf("server log:\n%s", b)
		}
	})
	leases := tenurev1connect.NewLeaseServiceClient(h2cClient(), "http://"+s.api, connect.WithGRPC())
	clusterc := tenurev1connect.NewClusterServiceClient(h2cClient(), "http://"+s.api, connect.WithGRPC())

	var mu sync.Mutex
	acked := map[string]uint64{} // lease id → fence
	var loadErr error            // the first failed Acquire; none before the kill
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && i < 100_000; i++ {
				resp, err := leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{
					Resource: fmt.Sprintf("crash/%d/%d", w, i), Holder: fmt.Sprintf("w%d", w)}))
				if err != nil {
					// The server died under us: unknown outcomes are not
					// acknowledged.
					mu.Lock()
					if loadErr == nil {
						loadErr = err
					}
					mu.Unlock()
					return
				}
				mu.Lock()
				acked[resp.Msg.Lease.LeaseId] = resp.Msg.Lease.Fence
				mu.Unlock()
			}
		}()
	}
	// count is polled before the kill, when a failed Acquire stops a
	// worker for nothing: say why rather than time out.
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		if loadErr != nil {
			t.Fatalf("Acquire before the kill: %v", loadErr)
		}
		return len(acked)
	}
	waitFor(t, 30*time.Second, "grants before the snapshot", func() bool { return count() >= 300 })
	if _, err := clusterc.Snapshot(context.Background(), connect.NewRequest(&tenurev1.SnapshotRequest{})); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	n := count()
	waitFor(t, 30*time.Second, "grants after the snapshot", func() bool { return count() >= n+300 })
	s.kill9()
	stopLoad()
	wg.Wait()
	t.Logf("%d grants acknowledged before kill -9", len(acked))

	s.start(t)
	ids := make([]string, 0, len(acked))
	var maxFence uint64
	for id, f := range acked {
		ids = append(ids, id)
		maxFence = max(maxFence, f)
	}
	for start := 0; start < len(ids); start += 1000 {
		batch := ids[start:min(start+1000, len(ids))]
		resp, err := leases.Verify(context.Background(), connect.NewRequest(&tenurev1.VerifyRequest{LeaseIds: batch}))
		if err != nil {
			t.Fatalf("Verify after restart: %v", err)
		}
		for _, r := range resp.Msg.Results {
			if !r.Found || r.Lease.Fence != acked[r.LeaseId] || r.Lease.State != tenurev1.State_STATE_ACTIVE {
				t.Fatalf("acknowledged lease %s lost or changed after kill -9: %+v", r.LeaseId, r)
			}
		}
	}
	resp, err := leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{Resource: "crash/after", Holder: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.Lease.Fence <= maxFence {
		t.Fatalf("fence %d after restart is not above the highest acknowledged %d", resp.Msg.Lease.Fence, maxFence)
	}

	// The durable ledger went through the crash too: it verifies, from
	// record 1 without gaps or duplicates, up to at least every grant
	// (once the node's ledger writer, which may trail the acknowledged
	// writes by the batches it has queued, has written them).
	var rep auditReport
	waitFor(t, 10*time.Second, "the ledger to reach every grant", func() bool {
		r := runTenure(t, "audit", "verify", "--data-dir", filepath.Join(s.dir, "data"), "-o", "json")
		rep = auditReport{}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
			t.Fatalf("audit verify after kill -9: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
		}
		return rep.Last >= uint64(len(acked))
	})
	if !rep.OK || rep.First != 1 || rep.Records != rep.Last || len(rep.Gaps) != 0 || rep.Last < uint64(len(acked)) || rep.Anchored == 0 {
		t.Fatalf("ledger after kill -9: %+v; want records 1..N, N >= %d, agreeing with the snapshot", rep, len(acked))
	}
}
