package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// TestAcquireWaitThroughLeaderKill: `tenure acquire --wait` goes on
// waiting when the leader is killed (kill -9) during its wait (queued
// acquires end with the leader), and is granted the resource once its
// holder's lease expires, after it: never alongside.
func TestAcquireWaitThroughLeaderKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var apis, peers []string
	for i := range 3 {
		apis = append(apis, freePort())
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, freePort()))
	}
	servers := map[string]func(){}
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		cmd := startServerProcess(t, dir, id, []string{"server", "--node-id", id, "--data-dir", filepath.Join(dir, id), "--listen", apis[i],
			"--raft-listen", strings.TrimPrefix(peers[i], id+"="), "--peers", strings.Join(peers, ","), "--log-level", "warn"})
		servers[id] = func() { _ = cmd.Process.Kill() }
	}
	all := strings.Join(apis, ",")
	res := "failover/" + uniq(t)
	var held tenurev1.Lease
	waitFor(t, 30*time.Second, "a grant (the cluster formed)", func() bool {
		r := runTenure(t, "acquire", res, "--holder", "A", "--ttl", "4s", "-o", "json", "--endpoints", all)
		return r.code == 0 && protojson.Unmarshal([]byte(r.stdout), &held) == nil
	})
	waiter, out, stderr := startTenure(t, "acquire", res, "--holder", "B", "--wait", "40s", "--ttl", "30s", "-o", "json", "--endpoints", all)
	waitFor(t, 10*time.Second, "the waiter to queue", func() bool {
		r := runTenure(t, "ls", "--resource", res, "-o", "json", "--endpoints", all)
		var l tenurev1.ListResponse
		return r.code == 0 && protojson.Unmarshal([]byte(r.stdout), &l) == nil && len(l.GetWaiters()) == 1
	})
	var st tenurev1.StatusResponse
	if err := protojson.Unmarshal([]byte(ok(t, "cluster", "status", "-o", "json", "--endpoints", all)), &st); err != nil || servers[st.GetLeaderId()] == nil {
		t.Fatalf("cluster status: %v, %v", &st, err)
	}
	servers[st.GetLeaderId()]()
	if code, _ := waitExit(t, waiter, time.Now()); code != 0 {
		t.Fatalf("acquire --wait through the leader's death: exit %d: %s", code, stderr)
	}
	var got tenurev1.Lease
	if err := protojson.Unmarshal([]byte(nextLine(t, out)), &got); err != nil {
		t.Fatal(err)
	}
	if got.GetHolder() != "B" || got.GetFence() <= held.GetFence() || got.GetAcquiredTick() < held.GetExpiresTick() {
		t.Fatalf("granted %v while %v held the resource", &got, &held)
	}
}
