package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/testlog"
)

// tenure backup save, inspect and restore, end to end: a backup of the
// test server, restored into a new data dir that a new tenure server runs
// on, holds the lease it had; new fences start above the bump.
func TestCLIBackupRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := "backup/" + uniq(t)
	l := acquire(t, res, "--ttl", "5m", "--holder", "w1")
	file := filepath.Join(dir, "state.backup")

	out := ok(t, "backup", "save", file)
	if !strings.Contains(out, "(leader)") || !strings.Contains(out, "sha256") {
		t.Fatalf("backup save:\n%s", out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", fi, err)
	}
	info := parse(t, ok(t, "backup", "inspect", file, "-o", "json"), &tenurev1.SnapshotInfo{})
	if info.GetNextFence() <= l.GetFence() || info.GetActiveLeases() == 0 || !info.GetLeader() {
		t.Fatalf("backup inspect: %v (lease fence %d)", info, l.GetFence())
	}

	// Damaged or missing files, and a restore without a data dir.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.backup")
	if err := os.WriteFile(cut, b[:len(b)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, "INVALID_ARGUMENT", "backup", "inspect", cut)
	fails(t, "INVALID_ARGUMENT", "backup", "restore", cut, "--data-dir", filepath.Join(dir, "never"))
	if _, err := os.Stat(filepath.Join(dir, "never")); err == nil {
		t.Error("a refused restore made its data dir")
	}
	if r := runTenure(t, "backup", "restore", file); r.code != 2 || !strings.Contains(r.stderr, "--data-dir") {
		t.Errorf("restore without --data-dir: exit %d\n%s", r.code, r.stderr)
	}

	data, api, raft := filepath.Join(dir, "restored"), freePort(), freePort()
	ok(t, "backup", "restore", file, "--data-dir", data, "--node-id", "r1", "--raft-listen", raft, "--bump-fences", "5000")
	srv := exec.Command(tenureBin, "server", "--data-dir", data, "--node-id", "r1", "--listen", api, "--raft-listen", raft, "--log-level", "warn")
	var log testlog.Buffer
	srv.Stdout, srv.Stderr = &log, &log
	exited := startBackground(t, srv)
	waitReady(t, http.DefaultClient, "http://"+api+"/readyz", exited, &log)

	got := parse(t, ok(t, "get", l.GetLeaseId(), "--endpoints", api, "-o", "json"), &tenurev1.Lease{})
	if got.GetState() != tenurev1.State_STATE_ACTIVE || got.GetFence() != l.GetFence() || got.GetHolder() != "w1" {
		t.Fatalf("the lease in the restored cluster: %v", got)
	}
	next := acquire(t, res+"/next", "--endpoints", api)
	if next.GetFence() < info.GetNextFence()+5000 {
		t.Fatalf("a fence in the restored cluster %d, want at least %d", next.GetFence(), info.GetNextFence()+5000)
	}
}
