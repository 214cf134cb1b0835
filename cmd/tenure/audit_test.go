package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// TestAuditVerifyAndExport runs a server of its own, writes through it,
// and checks its durable ledger with tenure audit, running and stopped,
// intact, torn and tampered.
func TestAuditVerifyAndExport(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	api := freePort()
	srv := exec.Command(tenureBin, "server", "--data-dir", data, "--listen", api, "--raft-listen", freePort(), "--log-level", "warn")
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("server log:\n%s", b)
		}
	})
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	waitFor(t, 20*time.Second, "the server", func() bool {
		resp, err := http.Get("http://" + api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for i := range 5 {
		ok(t, "acquire", fmt.Sprintf("audit/%d", i), "--endpoints", api, "--holder", "auditor")
	}
	// The node's ledger writer may trail an acknowledged write by the
	// batches it has queued (cluster package, "Durable ledger").
	waitFor(t, 10*time.Second, "the ledger to hold the last acquire", func() bool {
		return strings.Contains(ok(t, "audit", "export", "--data-dir", data), `"resource":"audit/4"`)
	})

	// While running, with the key fetched from the cluster.
	out := ok(t, "audit", "verify", "--data-dir", data, "--public-key", "cluster", "--endpoints", api)
	if !strings.Contains(out, "OK") || !strings.Contains(out, "from the cluster") {
		t.Fatalf("verify of a running node:\n%s", out)
	}
	var rep auditReport
	if err := json.Unmarshal([]byte(ok(t, "audit", "verify", "--data-dir", data, "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.First != 1 || rep.Records < 6 || rep.KeyFromLedger || rep.Key == "" {
		t.Fatalf("report %+v", rep)
	}
	exp := ok(t, "audit", "export", "--data-dir", data)
	for i := range 5 {
		if !strings.Contains(exp, fmt.Sprintf(`"resource":"audit/%d"`, i)) {
			t.Fatalf("export lacks audit/%d:\n%s", i, exp)
		}
	}
	if got := strings.Count(ok(t, "audit", "export", "--data-dir", data, "--after", "2", "--limit", "2"), "\n"); got != 2 {
		t.Fatalf("export --limit 2 printed %d lines", got)
	}

	_ = srv.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Fatalf("server: %v", err)
	}
	exited <- nil // for the deferred stop

	segs, err := ledger.Segments(filepath.Join(data, ledger.DirName))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	orig, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}

	// A torn last line is reported and ignored.
	if err := os.WriteFile(segs[0], append(append([]byte(nil), orig...), `{"index":`...), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, "audit", "verify", "--data-dir", data); !strings.Contains(out, "torn tail") || !strings.Contains(out, "OK") {
		t.Fatalf("verify with a torn tail:\n%s", out)
	}

	// Records removed behind a start marker: a gap, which --complete
	// refuses.
	lines := strings.SplitAfter(string(orig), "\n")
	var after ledger.Entry
	if err := json.Unmarshal([]byte(lines[6]), &after); err != nil {
		t.Fatal(err)
	}
	gapped := append(append(append([]string(nil), lines[:3]...),
		fmt.Sprintf(`{"start":%d,"prev":"%s"}`+"\n", after.Index, after.Prev)), lines[6:]...)
	if err := os.WriteFile(segs[0], []byte(strings.Join(gapped, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, "audit", "verify", "--data-dir", data); !strings.Contains(out, "gap: records") || !strings.Contains(out, "OK") {
		t.Fatalf("verify with a gap:\n%s", out)
	}
	if r := runTenure(t, "audit", "verify", "--data-dir", data, "--complete"); r.code != 1 || !strings.HasPrefix(r.stderr, "LEDGER_CORRUPT: record ") {
		t.Fatalf("verify --complete with a gap: exit %d, stderr %q", r.code, r.stderr)
	}

	// A record altered in place: exit 1 naming it.
	var e ledger.Entry
	if err := json.Unmarshal([]byte(lines[3]), &e); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(e.Record)
	alt := []byte(b64)
	alt[len(alt)/2] ^= 'A' ^ 'B'
	if alt[len(alt)/2] == b64[len(alt)/2] {
		t.Fatal("no change")
	}
	lines[3] = strings.Replace(lines[3], b64, string(alt), 1)
	if err := os.WriteFile(segs[0], []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runTenure(t, "audit", "verify", "--data-dir", data)
	if want := fmt.Sprintf("LEDGER_CORRUPT: record %d:", e.Index); r.code != 1 || !strings.HasPrefix(r.stderr, want) {
		t.Fatalf("tampered ledger: exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, want)
	}
	r = runTenure(t, "audit", "verify", "--data-dir", data, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.OK || rep.FirstBadIndex != e.Index {
		t.Fatalf("tampered ledger, json: exit %d, %+v, %v", r.code, rep, err)
	}
}

// ledgerFixture writes a ledger of n acquisitions in small files, with
// its public key, and returns its dir.
func ledgerFixture(t *testing.T, n int) string {
	t.Helper()
	cfg := statemachine.DefaultConfig()
	cfg.CheckpointEvery = 32
	m := statemachine.New(cfg)
	dir := filepath.Join(t.TempDir(), ledger.DirName)
	w, _, err := ledger.OpenWriter(dir, 4096)
	if err != nil {
		t.Fatal(err)
	}
	tick := int64(1000)
	apply := func(cmd *logpb.Command) {
		tick++
		cmd.Tick, cmd.Wall = tick, 1_764_000_000_000+tick
		res := m.Apply(cmd)
		if res.Outcome.Err != nil {
			t.Fatal(res.Outcome.Err)
		}
		for _, s := range res.Records {
			if err := w.Append(s.Record.Index, s.Record.PrevHash, s.Hash, s.Bytes); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: make([]byte, 32)}}})
	ttl := int64(60_000)
	for i := range n {
		apply(&logpb.Command{Actor: "w", Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: fmt.Sprintf("r/%d", i), Holder: "w", TtlMs: &ttl}}})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ledger.SavePublicKey(dir, m.PublicKey()); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestAuditPrune(t *testing.T) {
	dir := ledgerFixture(t, 200)
	runIn := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := run(context.Background(), args, &out, &out)
		return code, out.String()
	}
	if code, out := runIn("audit", "prune", "--data-dir", dir); code != 2 || !strings.Contains(out, "--before") {
		t.Fatalf("prune without --before: %d %s", code, out)
	}

	// A tampered ledger is not pruned.
	segs, _ := ledger.Segments(dir)
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(b, []byte(`"index":3,`), []byte(`"index":4,`), 1)
	if err := os.WriteFile(segs[0], bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runIn("audit", "prune", "--data-dir", dir, "--before", "100"); code != 1 || !strings.Contains(out, "not pruning") {
		t.Fatalf("prune of a tampered ledger: %d %s", code, out)
	}
	if after, _ := ledger.Segments(dir); len(after) != len(segs) {
		t.Fatal("files were removed from a tampered ledger")
	}
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}

	code, out := runIn("audit", "prune", "--data-dir", dir, "--before", "100")
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("prune: %d %s", code, out)
	}
	// Again: nothing left to prune, said in JSON when asked.
	code, out = runIn("audit", "prune", "--data-dir", dir, "--before", "100", "-o", "json")
	var again struct {
		Before  string `json:"before"`
		Removed *int   `json:"removedFiles"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &again) != nil || again.Before != "100" || again.Removed == nil || *again.Removed != 0 {
		t.Fatalf("prune again, -o json: %d %s", code, out)
	}
	code, out = runIn("audit", "verify", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "pruned: records 1..") || !strings.Contains(out, "OK") {
		t.Fatalf("verify after prune: %d %s", code, out)
	}
}
