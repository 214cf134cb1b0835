package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// poolName is a fresh pool name (no slashes: it is part of the piece
// leases' resource names).
func poolName() string { return fmt.Sprintf("swarm%x", time.Now().UnixNano()) }

func TestCLIPoolLifecycle(t *testing.T) {
	t.Parallel()
	pool := poolName()

	cr := parse(t, ok(t, "pool", "create", pool, "--max-leases-per-peer", "2", "--lease-duration", "1m", "-o", "json"), &tenurev1.CreatePoolResponse{})
	if !cr.GetCreated() || cr.GetConfig().GetMaxLeasesPerPeer() != 2 || cr.GetConfig().GetLeaseDuration().AsDuration() != time.Minute ||
		cr.GetConfig().GetSuccessBonus() != 0.5 || cr.GetConfig().GetMinPeerScore() != 0.2 {
		t.Fatalf("create: %v", cr)
	}
	if out := ok(t, "pool", "create", pool, "--max-leases-per-peer", "2", "--lease-duration", "1m"); !strings.Contains(out, "already exists") ||
		!strings.Contains(out, "max leases per peer  2") || !strings.Contains(out, "peer idle timeout    1h") {
		t.Fatalf("create again:\n%s", out)
	}
	fails(t, "INVALID_ARGUMENT", "pool", "create", pool, "--max-leases-per-peer", "2", "--lease-duration", "1m", "--peer-idle-timeout", "10m")
	if cr := parse(t, ok(t, "pool", "create", pool+"b", "--peer-idle-timeout", "10m", "-o", "json"), &tenurev1.CreatePoolResponse{}); cr.GetConfig().GetPeerIdleTimeout().AsDuration() != 10*time.Minute {
		t.Fatalf("create with --peer-idle-timeout: %v", cr)
	}
	fails(t, "INVALID_ARGUMENT: config.peer_idle_timeout", "pool", "create", pool+"c", "--peer-idle-timeout", "100ms")
	fails(t, "INVALID_ARGUMENT", "pool", "create", pool, "--max-leases-per-peer", "3")

	wr := parse(t, ok(t, "pool", "want", pool, "--file", "0", "--pieces", "10", "--all", "-o", "json"), &tenurev1.WantResponse{})
	if wr.GetAdded() != 10 || wr.GetFile().GetWanted() != 10 {
		t.Fatalf("want --all: %v", wr)
	}
	if out := ok(t, "pool", "want", pool, "--file", "1", "--pieces", "16", "--range", "0-1,2", "--range", "3"); !strings.Contains(out, "4 pieces became wanted") {
		t.Fatalf("want --range:\n%s", out)
	}
	fails(t, "INVALID_ARGUMENT", "pool", "want", pool, "--file", "1", "--pieces", "16", "--range", "10-16")

	rl := parse(t, ok(t, "pool", "request", pool, "--peer", "p1", "--have", "0:0-9", "--have", "1:0-15", "--max", "5", "-o", "json"), &tenurev1.RequestLeasesResponse{})
	if len(rl.GetLeases()) != 2 {
		t.Fatalf("request p1: %v", rl)
	}
	p1 := rl.GetLeases()[0]
	fails(t, "REJECTED_REASON_PEER_AT_CAPACITY", "pool", "request", pool, "--peer", "p1", "--have", "0:0-9")
	// With -o json a rejection still prints the response.
	r := runTenure(t, "pool", "request", pool, "--peer", "p1", "--have", "0:0-9", "-o", "json")
	if rej := parse(t, r.stdout, &tenurev1.RequestLeasesResponse{}); r.code != 1 ||
		rej.GetRejectedReason() != tenurev1.RejectedReason_REJECTED_REASON_PEER_AT_CAPACITY {
		t.Fatalf("rejection as json: exit %d %v", r.code, rej)
	}
	rl = parse(t, ok(t, "pool", "request", pool, "--peer", "p2", "--have", "0:0-9", "--max", "2", "-o", "json"), &tenurev1.RequestLeasesResponse{})
	if len(rl.GetLeases()) != 2 {
		t.Fatalf("request p2: %v", rl)
	}
	p2 := rl.GetLeases()[0]
	// The table: a header and one row per piece.
	out := ok(t, "pool", "request", pool, "--peer", "p3", "--have", "1:0-15", "--max", "1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "FILE") || !strings.HasPrefix(lines[1], "1 ") {
		t.Fatalf("request p3:\n%s", out)
	}

	// What p1 holds, found again: both of its pieces, by file and piece.
	held := parse(t, ok(t, "pool", "leases", pool, "--peer", "p1", "-o", "json"), &tenurev1.RequestLeasesResponse{})
	if len(held.GetLeases()) != 2 || held.GetLeases()[0].GetLeaseId() == "" {
		t.Fatalf("pool leases p1: %v", held)
	}
	ids := map[string]bool{}
	for _, l := range held.GetLeases() {
		ids[l.GetLeaseId()] = true
	}
	if !ids[p1.GetLeaseId()] {
		t.Fatalf("pool leases p1 %v lacks %s", held, p1.GetLeaseId())
	}
	if out := ok(t, "pool", "leases", pool, "--peer", "nobody"); strings.TrimSpace(out) != "FILE  PIECE  LEASE ID  FENCE  EXPIRES" {
		t.Fatalf("pool leases of a peer holding none:\n%q", out)
	}
	if r := runTenure(t, "pool", "leases", pool); r.code != 2 || !strings.Contains(r.stderr, "--peer is required") {
		t.Fatalf("pool leases without --peer: exit %d %q", r.code, r.stderr)
	}
	fails(t, "POOL_NOT_FOUND", "pool", "leases", "nosuchpool", "--peer", "p1")
	if out := ok(t, "pool", "leases", pool, "--peer", "p1", "-o", "json"); strings.Contains(out, "message") || !strings.HasPrefix(out, `{"leases":[{`) {
		t.Fatalf("pool leases -o json: %s", out)
	}
	if out := ok(t, "pool", "list"); !strings.Contains(out, pool+"\n") {
		t.Fatalf("pool list:\n%s", out)
	}

	file, piece := fmt.Sprint(p1.GetFileIndex()), fmt.Sprint(p1.GetPieceIndex())
	fails(t, "PIECE_NOT_LEASED", "pool", "complete", pool, "--peer", "p2", "--file", file, "--piece", piece, "--success")
	if r := runTenure(t, "pool", "complete", pool, "--peer", "p1", "--file", file, "--piece", piece, "--lease", "", "--success"); r.code != 2 {
		t.Fatalf("an empty --lease: exit %d %q", r.code, r.stderr)
	}
	// Naming another lease than the piece's current one: refused, nothing changes.
	fails(t, "PIECE_NOT_LEASED", "pool", "complete", pool, "--peer", "p1", "--file", file, "--piece", piece, "--lease", p2.GetLeaseId(), "--success")
	cp := parse(t, ok(t, "pool", "complete", pool, "--peer", "p1", "--file", file, "--piece", piece, "--lease", p1.GetLeaseId(), "--success", "-o", "json"), &tenurev1.CompletePieceResponse{})
	if s := cp.GetRanking().GetScore(); s < 1.499 || s > 1.5 || cp.GetRanking().GetSuccesses() != 1 {
		t.Fatalf("complete success: %v", cp)
	}
	fails(t, "PIECE_NOT_LEASED", "pool", "complete", pool, "--peer", "p1", "--file", file, "--piece", piece, "--success")
	// One failure from 1.0: 1.0 − 1.0 = 0, clamped to 0.1, below the minimum 0.2.
	out = ok(t, "pool", "complete", pool, "--peer", "p2", "--file", fmt.Sprint(p2.GetFileIndex()), "--piece", fmt.Sprint(p2.GetPieceIndex()), "--failure", "network_error")
	if !strings.Contains(out, "p2") || !strings.Contains(out, "0.1000") {
		t.Fatalf("complete failure:\n%s", out)
	}
	fails(t, "REJECTED_REASON_PEER_RANKING_TOO_LOW", "pool", "request", pool, "--peer", "p2", "--have", "0:0-9")

	rk := parse(t, ok(t, "pool", "rankings", pool, "-o", "json"), &tenurev1.RankingsResponse{})
	var order []string
	for _, r := range rk.GetRankings() {
		order = append(order, r.GetPeer())
	}
	if strings.Join(order, ",") != "p1,p3,p2" || rk.GetRankings()[2].GetScore() != 0.1 {
		t.Fatalf("rankings: %v", rk)
	}
	// p1's 1.5 decays while the test runs (0.95 an hour: 1.4998 after ~12 s).
	if out := ok(t, "pool", "rankings", pool); !strings.HasPrefix(out, "PEER") || !regexp.MustCompile(`(?m)^p1\s+1\.(5000|49\d\d)\s`).MatchString(out) {
		t.Fatalf("rankings table:\n%s", out)
	}

	st := parse(t, ok(t, "pool", "status", pool, "-o", "json"), &tenurev1.PoolStatusResponse{})
	var wanted, leased, done uint64
	for _, f := range st.GetFiles() {
		wanted, leased, done = wanted+f.GetWanted(), leased+f.GetLeased(), done+f.GetDone()
	}
	// 14 pieces: 1 done; leased: p1 1, p2 1, p3 1; the failed one wanted again.
	if len(st.GetFiles()) != 2 || done != 1 || leased != 3 || wanted != 10 || st.GetConfig().GetMaxLeasesPerPeer() != 2 {
		t.Fatalf("status: %v", st)
	}
	if out := ok(t, "pool", "status", pool); !strings.Contains(out, "FILE") || !strings.Contains(out, "PEER") || !strings.Contains(out, "lease duration") {
		t.Fatalf("status table:\n%s", out)
	}
	stats := parse(t, ok(t, "pool", "stats", pool, "-o", "json"), &tenurev1.PoolStatsResponse{})
	if stats.GetQueued() != 10 || stats.GetLeased() != 3 || stats.GetSucceeded() != 1 || stats.GetPieces() != 26 || stats.GetFailures() != 1 {
		t.Fatalf("stats: %v", stats)
	}
	if out := ok(t, "pool", "stats", pool); !strings.HasPrefix(out, "QUEUED") || !strings.Contains(out, "FAILURES") {
		t.Fatalf("stats table:\n%s", out)
	}
	fails(t, "POOL_NOT_FOUND", "pool", "status", "no-such-pool")
	fails(t, "POOL_NOT_FOUND", "pool", "stats", "no-such-pool")
	fails(t, "POOL_NOT_FOUND", "pool", "rankings", "no-such-pool")
	fails(t, "REJECTED_REASON_INVALID_REQUEST", "pool", "request", pool, "--peer", "p4", "--have", "7:0")
	fails(t, "REJECTED_REASON_NO_AVAILABLE_PIECES", "pool", "request", pool, "--peer", "p4", "--have", file+":"+piece)

	// p2, refused for its score, is ranked afresh and served again.
	out = ok(t, "pool", "reset-peer", pool, "--peer", "p2")
	if !strings.HasPrefix(out, "reset peer p2 in pool "+pool+" (was score 0.1000, 0 successes, 1 failures)\n") ||
		!regexp.MustCompile(`(?m)^p2\s+1\.0000\s+0\s+0\s+1$`).MatchString(out) {
		t.Fatalf("reset-peer:\n%s", out)
	}
	if rs := parse(t, ok(t, "pool", "reset-peer", pool, "--peer", "p2", "-o", "json"), &tenurev1.ResetPeerResponse{}); !rs.GetKnown() || rs.GetRanking().GetScore() != 1 {
		t.Fatalf("reset-peer -o json: %v", rs)
	}
	if out := ok(t, "pool", "reset-peer", pool, "--peer", "nobody"); out != "pool "+pool+" knows no peer nobody: nothing reset\n" {
		t.Fatalf("reset-peer of an unknown peer: %q", out)
	}
	fails(t, "POOL_NOT_FOUND", "pool", "reset-peer", "no-such-pool", "--peer", "p2")
	ok(t, "pool", "request", pool, "--peer", "p2", "--have", "0:0-9")

	// Deleted: the three leases left are revoked; then it is gone.
	if out := ok(t, "pool", "delete", pool); out != "deleted pool "+pool+" (namespace default): 2 files, 1 pieces done, 4 piece leases revoked\n" {
		t.Fatalf("delete: %q", out)
	}
	fails(t, "POOL_NOT_FOUND", "pool", "status", pool)
	if out := ok(t, "pool", "list"); strings.Contains(out, pool+"\n") {
		t.Fatalf("pool list after the delete:\n%s", out)
	}
	if out := ok(t, "pool", "delete", pool); out != "no pool "+pool+" in namespace default: nothing deleted\n" {
		t.Fatalf("delete again: %q", out)
	}
}

func TestCLIPoolUsageErrors(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no subcommand":           {"pool"},
		"unknown subcommand":      {"pool", "explode", "x"},
		"create without pool":     {"pool", "create"},
		"create zero leases":      {"pool", "create", "x", "--max-leases-per-peer", "0"},
		"want without pieces":     {"pool", "want", "x", "--file", "0", "--pieces", "10"},
		"want range and all":      {"pool", "want", "x", "--file", "0", "--pieces", "10", "--all", "--range", "0-3"},
		"want without file":       {"pool", "want", "x", "--pieces", "10", "--all"},
		"want bad range":          {"pool", "want", "x", "--file", "0", "--range", "9-3"},
		"request without peer":    {"pool", "request", "x", "--have", "0:0"},
		"request without have":    {"pool", "request", "x", "--peer", "p"},
		"request bad have":        {"pool", "request", "x", "--peer", "p", "--have", "zero:0-3"},
		"request max 0":           {"pool", "request", "x", "--peer", "p", "--have", "0:0", "--max", "0"},
		"complete both results":   {"pool", "complete", "x", "--peer", "p", "--file", "0", "--piece", "0", "--success", "--failure", "timeout"},
		"complete no result":      {"pool", "complete", "x", "--peer", "p", "--file", "0", "--piece", "0"},
		"complete bad reason":     {"pool", "complete", "x", "--peer", "p", "--file", "0", "--piece", "0", "--failure", "tired"},
		"complete without piece":  {"pool", "complete", "x", "--peer", "p", "--file", "0", "--success"},
		"rankings extra arg":      {"pool", "rankings", "x", "y"},
		"delete without pool":     {"pool", "delete"},
		"reset-peer without peer": {"pool", "reset-peer", "x"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runTenure(t, args...)
			if r.code != 2 || !strings.Contains(r.stderr, "usage") {
				t.Fatalf("exit %d, stderr %q; want 2 and a usage line", r.code, r.stderr)
			}
		})
	}
}

func TestCLIPoolHelp(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"", "create", "want", "request", "complete", "leases", "rankings", "status", "stats", "list", "delete", "reset-peer"} {
		args := []string{"pool", "--help"}
		name := "tenure pool"
		if sub != "" {
			args = []string{"pool", sub, "--help"}
			name += " " + sub
		}
		out := ok(t, args...)
		if !strings.HasPrefix(out, "usage: "+name) || !strings.Contains(out, "examples:") || !strings.Contains(out, "-endpoints") {
			t.Fatalf("help of %s:\n%s", name, out)
		}
	}
}

// A request cut short by the peer's lease quota says why on stderr, as
// the json output's message does (the table alone looked like a pool
// with only that many pieces free).
func TestCLIPoolRequestPartialSaysWhy(t *testing.T) {
	t.Parallel()
	pool, ns := poolName(), fmt.Sprintf("pq%x", time.Now().UnixNano())
	ok(t, "policy", "set", ns, "--max-active-per-holder", "2")
	ok(t, "pool", "want", pool, "--namespace", ns, "--file", "0", "--pieces", "8", "--all")
	r := runTenure(t, "pool", "request", pool, "--namespace", ns, "--peer", "p1", "--have", "0:0-7", "--max", "4")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 3 ||
		!strings.Contains(r.stderr, "granted 2 of 4: QUOTA_EXCEEDED") {
		t.Fatalf("partial grant: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// A request granted in full prints nothing on stderr.
	r = runTenure(t, "pool", "request", pool, "--namespace", ns, "--peer", "p2", "--have", "0:0-7", "--max", "1")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("full grant: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
