package ledger_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// history runs a state machine through n acquisitions (checkpoints every
// `every` records) and returns its sealed records and public key.
func history(t testing.TB, n int, every uint64) ([]statemachine.Sealed, ed25519.PublicKey) {
	t.Helper()
	cfg := statemachine.DefaultConfig()
	cfg.CheckpointEvery = every
	m := statemachine.New(cfg)
	var out []statemachine.Sealed
	tick := int64(1000)
	do := func(cmd *logpb.Command) {
		tick++
		cmd.Tick, cmd.Wall = tick, 1_764_000_000_000+tick
		res := m.Apply(cmd)
		if res.Outcome.Err != nil {
			t.Fatal(res.Outcome.Err)
		}
		out = append(out, res.Records...)
	}
	do(&logpb.Command{Op: &logpb.Command_Bootstrap{Bootstrap: &logpb.Bootstrap{KeySeed: bytes.Repeat([]byte{7}, ed25519.SeedSize)}}})
	ttl := int64(60_000)
	for i := range n {
		h := fmt.Sprintf("w%d", i%100)
		do(&logpb.Command{Actor: h, Op: &logpb.Command_Acquire{Acquire: &logpb.Acquire{Resource: fmt.Sprintf("r/%d", i), Holder: h, TtlMs: &ttl}}})
	}
	return out, m.PublicKey()
}

func write(t testing.TB, dir string, segSize int64, recs []statemachine.Sealed) ledger.Recovered {
	t.Helper()
	w, rec, err := ledger.OpenWriter(dir, segSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range recs {
		if err := w.Append(s.Record.Index, s.Record.PrevHash, s.Hash, s.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return rec
}

func lines(t testing.TB, dir string) (string, []string) {
	t.Helper()
	segs, err := ledger.Segments(dir)
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v; want one", segs, err)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	return segs[0], strings.SplitAfter(string(b), "\n")
}

func verify(t testing.TB, dir string, pub ed25519.PublicKey) (ledger.Report, error) {
	t.Helper()
	return ledger.Verify(dir, ledger.VerifyOptions{PublicKey: pub})
}

func TestLedgerIntactVerifies(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 100, 16)
	dir := t.TempDir()
	write(t, dir, 0, recs)
	rep, err := verify(t, dir, pub)
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1].Record.Index
	var cps, covered uint64
	for _, s := range recs {
		if cp := s.Record.GetCheckpoint(); cp != nil {
			cps++
			covered = cp.CoversIndex
		}
	}
	if cps == 0 {
		t.Fatal("the history has no checkpoint")
	}
	if rep.Records != uint64(len(recs)) || rep.First != 1 || rep.Last != last || rep.Checkpoints != cps ||
		rep.SignedThrough != covered || rep.Torn != nil || len(rep.Gaps) != 0 || rep.KeyFromLedger {
		t.Fatalf("report %+v; want %d records 1..%d, %d checkpoints, signed through %d", rep, len(recs), last, cps, covered)
	}
	// Without a key, the Initialized record's key is taken (and said so).
	if rep, err := verify(t, dir, nil); err != nil || !rep.KeyFromLedger {
		t.Fatalf("without a key: %+v, %v", rep, err)
	}
	// Another key fails on the first record.
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	wantBroken(t, dir, other, 1, "another public key")
}

func wantBroken(t *testing.T, dir string, pub ed25519.PublicKey, index uint64, why string) {
	t.Helper()
	_, err := verify(t, dir, pub)
	var be *ledger.BrokenError
	if !errors.As(err, &be) {
		t.Fatalf("verify: got %v, want a broken chain at %d", err, index)
	}
	if be.Index != index || !strings.Contains(be.Reason, why) {
		t.Fatalf("verify: broken at %d (%s); want %d (%s)", be.Index, be.Reason, index, why)
	}
	if !errors.Is(err, ledger.ErrBroken) {
		t.Fatal("not ErrBroken")
	}
}

// entry decodes line i (index i+1).
func entry(t testing.TB, line string) (ledger.Entry, *logpb.Record) {
	t.Helper()
	var e ledger.Entry
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatal(err)
	}
	rec := &logpb.Record{}
	if err := proto.Unmarshal(e.Record, rec); err != nil {
		t.Fatal(err)
	}
	return e, rec
}

// reencode writes rec back into a line with a consistent line hash, as
// an attacker who knows the format would.
func reencode(t testing.TB, rec *logpb.Record) string {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	out, _ := json.Marshal(ledger.Entry{Index: rec.Index, Prev: hex.EncodeToString(rec.PrevHash), Hash: hex.EncodeToString(h[:]), Record: b})
	return string(out) + "\n"
}

func TestLedgerTamperingDetected(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 60, 16)
	var cpIndex int // line of the first checkpoint
	for i, s := range recs {
		if s.Record.GetCheckpoint() != nil {
			cpIndex = i
			break
		}
	}
	if cpIndex == 0 {
		t.Fatal("no checkpoint")
	}
	const at = 20 // line 20 holds record 21
	cases := []struct {
		name  string
		edit  func(ls []string) []string
		index uint64
		why   string
	}{
		{"byte flipped in a record", func(ls []string) []string {
			e, _ := entry(t, ls[at])
			b64 := base64.StdEncoding.EncodeToString(e.Record)
			pos := len(b64) / 2
			c := "A"
			if b64[pos] == 'A' {
				c = "B"
			}
			flipped := b64[:pos] + c + b64[pos+1:]
			ls[at] = strings.Replace(ls[at], b64, flipped, 1)
			return ls
		}, at + 1, "do not hash"},
		{"byte flipped in a hash", func(ls []string) []string {
			e, _ := entry(t, ls[at])
			h := []byte(e.Hash)
			h[5] ^= 1
			ls[at] = strings.Replace(ls[at], e.Hash, string(h), 1)
			return ls
		}, at + 1, "do not hash"},
		{"record altered, line hash recomputed", func(ls []string) []string {
			_, rec := entry(t, ls[at])
			rec.Actor = "mallory"
			ls[at] = reencode(t, rec)
			return ls
		}, at + 2, "previous-hash mismatch"},
		{"record deleted", func(ls []string) []string { return append(ls[:at], ls[at+1:]...) }, at + 1, "missing or reordered"},
		{"records reordered", func(ls []string) []string { ls[at], ls[at+1] = ls[at+1], ls[at]; return ls }, at + 1, "missing or reordered"},
		{"checkpoint signature altered", func(ls []string) []string {
			_, rec := entry(t, ls[cpIndex])
			rec.GetCheckpoint().Signature[3] ^= 0x10
			ls[cpIndex] = reencode(t, rec)
			return ls
		}, uint64(cpIndex) + 1, "signature does not verify"},
		{"line index altered", func(ls []string) []string {
			ls[at] = strings.Replace(ls[at], fmt.Sprintf(`"index":%d,`, at+1), fmt.Sprintf(`"index":%d,`, at+7), 1)
			return ls
		}, at + 1, "the line says index"},
		{"line mangled", func(ls []string) []string { ls[at] = "{" + ls[at]; return ls }, at + 1, "not a ledger entry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, 0, recs)
			path, ls := lines(t, dir)
			if err := os.WriteFile(path, []byte(strings.Join(tc.edit(ls), "")), 0o600); err != nil {
				t.Fatal(err)
			}
			wantBroken(t, dir, pub, tc.index, tc.why)
		})
	}

	t.Run("deleted records behind a start marker show as a gap", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, 0, recs)
		path, ls := lines(t, dir)
		e, _ := entry(t, ls[at+5])
		marker := fmt.Sprintf(`{"start":%d,"prev":"%s"}`+"\n", e.Index, e.Prev)
		ls = append(append(ls[:at:at], marker), ls[at+5:]...)
		if err := os.WriteFile(path, []byte(strings.Join(ls, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := verify(t, dir, pub)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Gaps) != 1 || rep.Gaps[0] != (ledger.Gap{From: at + 1, To: at + 5}) {
			t.Fatalf("gaps %+v; want records %d..%d", rep.Gaps, at+1, at+5)
		}
	})

	// Prune cuts only the oldest records: its marker after records is a
	// forgery hiding records removed by hand.
	t.Run("deleted records behind a pruned marker are refused", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, 0, recs)
		path, ls := lines(t, dir)
		e, _ := entry(t, ls[at+5])
		marker := fmt.Sprintf(`{"start":%d,"prev":"%s","pruned":true}`+"\n", e.Index, e.Prev)
		ls = append(append(ls[:at:at], marker), ls[at+5:]...)
		if err := os.WriteFile(path, []byte(strings.Join(ls, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		wantBroken(t, dir, pub, at+1, "pruned marker after records")
	})
}

func TestLedgerTornTail(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 30, 8)
	for _, tail := range []string{`{"index":99,"prev":"ab`, "\x00\x00\x00\x00\x00", "\x00\x00\n\x00"} {
		dir := t.TempDir()
		write(t, dir, 0, recs[:20])
		path, ls := lines(t, dir)
		if err := os.WriteFile(path, []byte(strings.Join(ls, "")+tail), 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := verify(t, dir, pub)
		if err != nil || rep.Torn == nil || rep.Torn.Bytes != len(tail) || rep.Records != 20 {
			t.Fatalf("tail %q: report %+v, %v; want 20 records and a torn tail of %d bytes", tail, rep, err, len(tail))
		}
		// The writer cuts the tail and goes on where the ledger ends.
		got := write(t, dir, 0, recs)
		if got.TornBytes != len(tail) || got.Last != 20 {
			t.Fatalf("tail %q: recovered %+v", tail, got)
		}
		rep, err = verify(t, dir, pub)
		if err != nil || rep.Torn != nil || rep.Records != uint64(len(recs)) {
			t.Fatalf("tail %q, after reopening: %+v, %v", tail, rep, err)
		}
	}
	// A partial line anywhere but at the end is corruption.
	dir := t.TempDir()
	write(t, dir, 0, recs)
	path, ls := lines(t, dir)
	ls[10] = strings.TrimSuffix(ls[10], "\n")
	if err := os.WriteFile(path, []byte(strings.Join(ls, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	wantBroken(t, dir, pub, 11, "not a ledger entry")
}

func TestLedgerRestartAndSnapshotGap(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 120, 16)
	dir := t.TempDir()
	write(t, dir, 0, recs[:40])
	// A restart re-applies from an earlier point: nothing is written twice.
	if got := write(t, dir, 0, recs[:60]); got.Last != 40 {
		t.Fatalf("recovered %+v, want last 40", got)
	}
	// A snapshot restore jumps ahead: the ledger resumes at 80.
	write(t, dir, 0, recs[79:])
	rep, err := verify(t, dir, pub)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Gap{From: 61, To: 79}
	if rep.Records != uint64(len(recs)-19) || len(rep.Gaps) != 1 || rep.Gaps[0] != want || rep.Last != uint64(len(recs)) {
		t.Fatalf("report %+v; want %d records and the gap %+v", rep, len(recs)-19, want)
	}
	if rep.SignedThrough < 100 {
		t.Fatalf("checkpoints after the gap were not verified: signed through %d", rep.SignedThrough)
	}
	// The records between the last checkpoint before the gap and the gap
	// are signed by nothing (the marker's previous hash is not signed):
	// they are named, not counted as signed by the checkpoints after.
	var lastCP uint64
	for _, r := range recs[:60] {
		if r.Record.GetCheckpoint() != nil {
			lastCP = r.Record.Index
		}
	}
	if lastCP == 60 || len(rep.UnsignedBeforeGaps) != 1 || rep.UnsignedBeforeGaps[0] != (ledger.Gap{From: lastCP + 1, To: 60}) {
		t.Fatalf("unsigned before the gap: %+v; want records %d..60", rep.UnsignedBeforeGaps, lastCP+1)
	}
	// A ledger that starts after a snapshot starts with a marker.
	dir = t.TempDir()
	write(t, dir, 0, recs[50:])
	rep, err = verify(t, dir, pub)
	if err != nil || len(rep.Gaps) != 1 || rep.Gaps[0] != (ledger.Gap{From: 1, To: 50}) || rep.First != 51 {
		t.Fatalf("late start: %+v, %v", rep, err)
	}
	// A record that contradicts the ledger's last one is refused.
	w, _, err := ledger.OpenWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := recs[len(recs)-1]
	if err := w.Append(s.Record.Index, s.Record.PrevHash, sha256.Sum256([]byte("other")), s.Bytes); err == nil {
		t.Fatal("a conflicting record was accepted")
	}
}

func TestLedgerSegments(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 200, 32)
	dir := t.TempDir()
	write(t, dir, 4096, recs[:100])
	write(t, dir, 4096, recs) // reopened: appends to the last segment, rotates on
	segs, err := ledger.Segments(dir)
	if err != nil || len(segs) < 4 {
		t.Fatalf("segments %d, %v; want several", len(segs), err)
	}
	rep, err := verify(t, dir, pub)
	if err != nil || rep.Records != uint64(len(recs)) || rep.Segments != len(segs) {
		t.Fatalf("report %+v, %v", rep, err)
	}
	// A segment removed from the middle is a hole at its first index.
	first := strings.TrimLeft(strings.TrimSuffix(filepath.Base(segs[2]), ".ndjson"), "0")
	if err := os.Remove(segs[2]); err != nil {
		t.Fatal(err)
	}
	var idx uint64
	fmt.Sscan(first, &idx)
	wantBroken(t, dir, pub, idx, "missing or reordered")
}

// BenchmarkWriterAppend measures what the durable ledger adds to applying
// one record: encoding its line and, per batch of 256, one write.
func BenchmarkWriterAppend(b *testing.B) {
	recs, _ := history(b, 4096, 1024)
	w, _, err := ledger.OpenWriter(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	var idx uint64
	b.ReportAllocs()
	for b.Loop() {
		s := recs[1+int(idx)%(len(recs)-1)]
		idx++
		if err := w.Append(idx, s.Record.PrevHash, s.Hash, s.Bytes); err != nil {
			b.Fatal(err)
		}
		if idx%256 == 0 {
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestLedgerAnchor(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 40, 16)
	at := recs[28] // record 29
	anchor := &ledger.Anchor{Next: 30, Head: at.Hash, Source: "the test's snapshot"}
	check := func(dir string) (ledger.Report, error) {
		return ledger.Verify(dir, ledger.VerifyOptions{PublicKey: pub, Anchor: anchor})
	}

	dir := t.TempDir()
	write(t, dir, 0, recs)
	if rep, err := check(dir); err != nil || rep.Anchored != 29 {
		t.Fatalf("intact: %+v, %v; want anchored at 29", rep, err)
	}

	// Truncated before the anchor.
	dir = t.TempDir()
	write(t, dir, 0, recs[:25])
	_, err := check(dir)
	var be *ledger.BrokenError
	if !errors.As(err, &be) || be.Index != 26 || !strings.Contains(be.Reason, "records 26..29 are missing") {
		t.Fatalf("truncated: %v", err)
	}

	// A ledger that resumes right after the anchor, with its marker.
	dir = t.TempDir()
	w, _, err := ledger.OpenWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Resume(30, at.Hash); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := check(dir); err != nil || rep.Anchored != 29 || len(rep.Gaps) != 1 || rep.Records != 0 {
		t.Fatalf("marker only: %+v, %v", rep, err)
	}
	write(t, dir, 0, recs[29:])
	if rep, err := check(dir); err != nil || rep.Anchored != 29 || rep.First != 30 {
		t.Fatalf("after the marker: %+v, %v", rep, err)
	}

	// A ledger that resumes past the anchor (its record caught up from a
	// later snapshot, or pruned): not compared, and it says so.
	dir = t.TempDir()
	if w, _, err = ledger.OpenWriter(dir, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Resume(36, recs[34].Hash); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	write(t, dir, 0, recs[35:])
	if rep, err := check(dir); err != nil || rep.Anchored != 0 || rep.AnchorNotHeld != 29 {
		t.Fatalf("resumed past the anchor: %+v, %v; want the anchor reported as not held", rep, err)
	}

	// A history rewritten consistently (chain recomputed, as with another
	// key) no longer matches the anchor.
	dir = t.TempDir()
	write(t, dir, 0, recs)
	anchor.Head[0] ^= 1
	_, err = check(dir)
	if !errors.As(err, &be) || be.Index != 29 || !strings.Contains(be.Reason, "the test's snapshot") {
		t.Fatalf("other head: %v", err)
	}
}

// BenchmarkVerify measures tenure audit verify's pace, per record.
func BenchmarkVerify(b *testing.B) {
	recs, pub := history(b, 20_000, 1024)
	dir := b.TempDir()
	write(b, dir, 0, recs)
	b.ResetTimer()
	for b.Loop() {
		rep, err := ledger.Verify(dir, ledger.VerifyOptions{PublicKey: pub})
		if err != nil || rep.Records != uint64(len(recs)) {
			b.Fatal(rep, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

func TestLedgerPrune(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 300, 32)
	dir := t.TempDir()
	write(t, dir, 4096, recs[:250])
	segs, _ := ledger.Segments(dir)
	if len(segs) < 5 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	if p, err := ledger.Prune(dir, 1); err != nil || p.Start != 0 || p.Removed != 0 {
		t.Fatalf("prune before 1: %+v, %v", p, err)
	}
	p, err := ledger.Prune(dir, 100)
	if err != nil || p.Start == 0 || p.Start > 100 || p.Removed == 0 {
		t.Fatalf("prune before 100: %+v, %v", p, err)
	}
	rep, err := verify(t, dir, pub)
	if err != nil || len(rep.Gaps) != 1 || rep.Gaps[0] != (ledger.Gap{From: 1, To: p.Start - 1, Pruned: true}) || rep.First != p.Start {
		t.Fatalf("after pruning: %+v, %v", rep, err)
	}
	// Again, further: one marker, the older one gone.
	p2, err := ledger.Prune(dir, 200)
	if err != nil || p2.Start <= p.Start {
		t.Fatalf("second prune: %+v, %v", p2, err)
	}
	markers, _ := filepath.Glob(filepath.Join(dir, "*.pruned.ndjson"))
	if len(markers) != 1 {
		t.Fatalf("markers %v, want one", markers)
	}
	// The node appends on; the last segment is never pruned.
	write(t, dir, 4096, recs)
	if _, err := ledger.Prune(dir, 1<<60); err != nil {
		t.Fatal(err)
	}
	rep, err = verify(t, dir, pub)
	last := recs[len(recs)-1].Record.Index
	if err != nil || rep.Last != last || len(rep.Gaps) != 1 || !rep.Gaps[0].Pruned || rep.Records == 0 {
		t.Fatalf("after pruning all but the last segment: %+v, %v", rep, err)
	}
	// Without its marker, the pruned ledger does not verify.
	markers, _ = filepath.Glob(filepath.Join(dir, "*.pruned.ndjson"))
	if err := os.Remove(markers[0]); err != nil {
		t.Fatal(err)
	}
	wantBroken(t, dir, pub, 1, "missing or reordered")
}

// PruneToSize removes the oldest whole segments until the files fit the
// budget, never the newest one, and leaves a ledger that verifies with
// the pruned range reported.
// TestLedgerPruneOnAFullDisk: Prune writes its marker before it removes
// anything, so on a full disk it could free nothing (found from outside:
// neither the server nor tenure audit prune could prune a full disk). A
// ledger dir keeps a reserve file that Prune deletes to make room for the
// marker, and makes again once the pruned segments are gone.
func TestLedgerPruneOnAFullDisk(t *testing.T) {
	// Not parallel: it replaces how Prune writes its marker.
	recs, pub := history(t, 300, 32)
	dir := t.TempDir()
	write(t, dir, 4096, recs[:250])
	reserve := filepath.Join(dir, ledger.ReserveName)
	if _, err := os.Stat(reserve); err != nil {
		t.Fatalf("no reserve file after the writer opened the dir: %v", err)
	}
	// The disk is full while the reserve is there.
	defer ledger.SetWriteMarker(func(path string, b []byte) error {
		if _, err := os.Stat(reserve); err == nil {
			return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
		}
		return ledger.WriteFileAtomic(path, b)
	})()
	p, err := ledger.Prune(dir, 100)
	if err != nil || p.Removed == 0 {
		t.Fatalf("prune on a full disk: %+v, %v", p, err)
	}
	if rep, err := verify(t, dir, pub); err != nil || len(rep.Gaps) != 1 || !rep.Gaps[0].Pruned {
		t.Fatalf("after pruning: %+v, %v", rep, err)
	}
	if _, err := os.Stat(reserve); err != nil {
		t.Fatalf("the reserve was not made again once the segments were gone: %v", err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) > 0 {
		t.Fatalf("left behind: %v", tmps)
	}
}

func TestLedgerPruneToSize(t *testing.T) {
	t.Parallel()
	recs, pub := history(t, 300, 32)
	dir := t.TempDir()
	write(t, dir, 4096, recs)
	size := func() (total int64, n int) {
		segs, _ := ledger.Segments(dir)
		for _, s := range segs {
			st, err := os.Stat(s)
			if err != nil {
				t.Fatal(err)
			}
			total += st.Size()
		}
		return total, len(segs)
	}
	before, nBefore := size()
	if p, err := ledger.PruneToSize(dir, before); err != nil || p.Removed != 0 {
		t.Fatalf("within the budget: %+v, %v", p, err)
	}
	p, err := ledger.PruneToSize(dir, before/2)
	if err != nil || p.Removed == 0 {
		t.Fatalf("half the budget: %+v, %v", p, err)
	}
	after, nAfter := size()
	if after > before/2 || after < before/2-2*4096 || nAfter >= nBefore {
		t.Fatalf("after pruning to %d bytes: %d bytes in %d files (from %d in %d)", before/2, after, nAfter, before, nBefore)
	}
	rep, err := verify(t, dir, pub)
	if err != nil || len(rep.Gaps) != 1 || !rep.Gaps[0].Pruned || rep.First != p.Start || rep.Last != recs[len(recs)-1].Record.Index {
		t.Fatalf("after pruning: %+v, %v", rep, err)
	}
	// A budget smaller than one segment keeps the newest one (and the marker).
	if _, err := ledger.PruneToSize(dir, 1); err != nil {
		t.Fatal(err)
	}
	segs, _ := ledger.Segments(dir)
	if len(segs) != 2 {
		t.Fatalf("segments %v, want the marker and the newest", segs)
	}
	if rep, err := verify(t, dir, pub); err != nil || rep.Last != recs[len(recs)-1].Record.Index {
		t.Fatalf("after pruning to one segment: %+v, %v", rep, err)
	}
}
