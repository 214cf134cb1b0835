package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/testlog"
)

func TestCLIPolicy(t *testing.T) {
	t.Parallel()
	ns := "pol" + uniq(t)
	// A namespace without a policy of its own follows the defaults.
	if out := ok(t, "policy", "get", ns); !strings.Contains(out, "max-ttl                   5m0s") || !strings.Contains(out, "max-renewals              unlimited") {
		t.Fatalf("get before set:\n%s", out)
	}
	out := ok(t, "policy", "set", ns, "--max-ttl", "1m", "--default-ttl", "30s", "--max-renewals", "3")
	for _, want := range []string{"default-ttl               30.0s", "max-ttl                   1m0s", "max-renewals              3", "max-grace                 15.0s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("set: no %q in\n%s", want, out)
		}
	}
	// Set changes only what it names.
	p := parse(t, ok(t, "policy", "set", ns, "--max-active-per-holder", "9", "-o", "json"), &tenurev1.NamespacePolicy{})
	if p.GetMaxTtl().AsDuration() != time.Minute || p.GetMaxRenewals() != 3 || p.GetMaxActivePerHolder() != 9 {
		t.Fatalf("second set: %v", p)
	}
	if p := parse(t, ok(t, "policy", "get", "--namespace", ns, "-o", "json"), &tenurev1.NamespacePolicy{}); p.GetDefaultTtl().AsDuration() != 30*time.Second ||
		p.GetTaskMaxRenewals() != 10 || p.GetTaskMaxLifetime().AsDuration() != 2*time.Hour {
		t.Fatalf("get with --namespace: %v", p)
	}
	// Back to unlimited renewals: 0 is a value, not "unchanged" (it was
	// silently ignored once).
	if out := ok(t, "policy", "set", ns, "--max-renewals", "0"); !strings.Contains(out, "max-renewals              unlimited") {
		t.Fatalf("set --max-renewals 0:\n%s", out)
	}
	if out := ok(t, "policy", "get", ns); !strings.Contains(out, "max-renewals              unlimited") {
		t.Fatalf("get after --max-renewals 0:\n%s", out)
	}
	// Task leases' limits: unlimited renewals, a lifetime of a day; a claim
	// in the namespace gets them.
	out = ok(t, "policy", "set", ns, "--task-max-renewals", "0", "--task-max-lifetime", "24h")
	if !strings.Contains(out, "task-max-renewals         unlimited") || !strings.Contains(out, "task-max-lifetime         24h0m0s") {
		t.Fatalf("set task limits:\n%s", out)
	}
	ok(t, "queue", "push", "long", "--namespace", ns, "--data", "x")
	claimed := parse(t, ok(t, "queue", "claim", "long", "--namespace", ns, "-o", "json"), &tenurev1.ClaimResponse{})
	if len(claimed.GetTasks()) != 1 {
		t.Fatalf("claim: %v", claimed)
	}
	l := parse(t, ok(t, "get", claimed.GetTasks()[0].GetLeaseId(), "--namespace", ns, "-o", "json"), &tenurev1.Lease{})
	if l.GetMaxRenewals() != 0 || l.GetMaxLifetime().AsDuration() != 24*time.Hour {
		t.Fatalf("task lease limits: renewals %d, lifetime %v; want unlimited and 24h", l.GetMaxRenewals(), l.GetMaxLifetime().AsDuration())
	}
	fails(t, "TTL_OUT_OF_RANGE", "acquire", "x", "--namespace", ns, "--ttl", "2m")
	// The registrar checks the policy a set makes.
	fails(t, "INVALID_ARGUMENT", "policy", "set", ns, "--min-ttl", "5m")
	for _, args := range [][]string{
		{"policy", "set", ns},
		{"policy", "get", ns, "--max-ttl", "1m"},
		{"policy", "set"},
		{"policy", "unset", ns},
		{"policy", "set", ns, "--max-ttl", "soon"},
		{"policy", "set", ns, "--max-renewals", "-1"},
		{"policy", "set", ns, "--always-certify", "maybe"},
	} {
		if r := runTenure(t, args...); r.code != 2 {
			t.Errorf("tenure %s: exit %d (%s), want 2", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// TestServerPolicyDefaults: tenure server's policy flags and policy file
// make the defaults at bootstrap, and a restart with others changes them.
func TestServerPolicyDefaults(t *testing.T) {
	dir := t.TempDir()
	api := freePort()
	start := func(args ...string) func() {
		t.Helper()
		srv := exec.Command(tenureBin, append([]string{"server", "--data-dir", filepath.Join(dir, "data"), "--listen", api,
			"--raft-listen", freePort(), "--log-level", "warn"}, args...)...)
		srv.Env = append(os.Environ(), "TENURE_MAX_WAITERS_PER_RESOURCE=12")
		var log testlog.Buffer
		srv.Stdout, srv.Stderr = &log, &log
		exited := startBackground(t, srv)
		waitReady(t, http.DefaultClient, "http://"+api+"/readyz", exited, &log)
		return func() {
			_ = srv.Process.Signal(syscall.SIGTERM)
			<-exited
		}
	}
	get := func() *tenurev1.NamespacePolicy {
		t.Helper()
		return parse(t, ok(t, "policy", "get", "*", "--endpoints", api, "-o", "json"), &tenurev1.NamespacePolicy{})
	}
	stop := start("--max-ttl", "10m", "--max-renewals", "5")
	p := get()
	if p.GetMaxTtl().AsDuration() != 10*time.Minute || p.GetMaxRenewals() != 5 || p.GetMaxWaitersPerResource() != 12 ||
		p.GetDefaultTtl().AsDuration() != time.Minute {
		t.Fatalf("bootstrapped defaults: %v", p)
	}
	// A namespace without a policy of its own follows them.
	ok(t, "acquire", "long", "--ttl", "8m", "--endpoints", api)
	stop()
	file := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(file, []byte(`{"max-ttl": "15m", "max-active-per-holder": 7, "always-certify": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stop = start("--policy-file", file, "--max-ttl", "20m")
	// The new leader applies them once it leads: wait for that.
	waitFor(t, 20*time.Second, "the restarted server's defaults", func() bool { return get().GetMaxActivePerHolder() == 7 })
	p = get()
	if p.GetMaxTtl().AsDuration() != 20*time.Minute || p.GetMaxRenewals() != 5 || !p.GetAlwaysCertify() || p.GetMaxWaitersPerResource() != 12 {
		t.Fatalf("defaults after a restart with other settings: %v", p)
	}
	stop()
}

// TestSIGTERMWhileJoining: a member still asking to join (nobody answers
// at --join) stops at once on SIGTERM, as a running one does.
func TestSIGTERMWhileJoining(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := exec.Command(tenureBin, "server", "--data-dir", filepath.Join(dir, "data"), "--listen", freePort(),
		"--raft-listen", freePort(), "--node-id", "late", "--join", freePort())
	var log testlog.Buffer
	srv.Stdout, srv.Stderr = &log, &log
	exited := startBackground(t, srv)
	waitFor(t, 20*time.Second, "the join to be retrying", func() bool { return strings.Contains(log.String(), "join: retrying") })
	sent := time.Now()
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after SIGTERM:\n%s", log.String())
	}
	if code := srv.ProcessState.ExitCode(); code != 0 || !strings.Contains(log.String(), "stopped before the node started") {
		t.Fatalf("exit %d %v after SIGTERM:\n%s", code, time.Since(sent), log.String())
	}
}
