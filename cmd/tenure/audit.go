package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/fencing"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/statemachine"
)

const auditHelp = `Check or export a node's durable ledger, offline: the append-only NDJSON
files in DATA-DIR/ledger, which every node writes as it applies records
(the server may be running or stopped).

  verify   checks that every record hashes to its stated hash, that the
           records chain (SHA-256 of each record is the next one's previous
           hash) without missing, reordered or inserted records, and that
           every checkpoint signs the chain head before it with the
           registrar's Ed25519 key. It prints the first bad record (index and
           what is wrong) and exits 1 on tampering; otherwise a summary (the
           records, checkpoints and range held, gaps where the node caught up
           from a snapshot, a torn last line left by a crash) and exit 0.
           It also checks the ledger against the chain head recorded in the
           node's newest Raft snapshot (DATA-DIR/snapshots): the ledger must
           reach it with the same hash, so a truncated or rewritten ledger
           fails even where no checkpoint signs it yet (once the node has
           taken a snapshot: before its first, a ledger cut after its last
           signed checkpoint cannot be told from one that ends there).
           The key is --public-key: hex, @FILE, or "cluster" (fetched from
           --endpoints); by default DATA-DIR/ledger/public-key, or else the
           ledger's own first record (which only proves self-consistency).
           A gap's start marker is not signed: anyone who can write the files
           can turn removed records into a gap. --complete makes any gap
           (other than the oldest records, pruned) a failure, for a node that
           never caught up from a snapshot; otherwise check a gap's range on a
           member that holds it.
  export   prints the records as NDJSON events, in the form of
           "tenure watch -o json", plus start markers {"start":"N","prevHash":…}.
  prune    removes the oldest whole ledger files whose records all come
           before --before, after verifying the whole ledger (it refuses to
           prune one that does not verify). The ledger then starts with a
           marker, and verify reports the pruned range. The file a node
           appends to is never removed; safe while the server runs.`

const auditExamples = `  tenure audit verify --data-dir /var/lib/tenure
  tenure audit verify --data-dir ./tenure-data --public-key cluster --endpoints 10.0.0.1:7070
  tenure audit export --data-dir ./tenure-data --after 1000 --limit 50
  tenure audit prune --data-dir ./tenure-data --before 5000000`

// runAudit is `tenure audit verify|export`.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure audit", "verify|export|prune --data-dir DIR [flags]", auditHelp, auditExamples, stdout, stderr)
	dataDir := c.fs.String("data-dir", env("data-dir", "./tenure-data"), "the node's data dir, or its ledger dir (env TENURE_DATA_DIR)")
	pubFlag := c.fs.String("public-key", "", `verify, prune: registrar public key: hex, @FILE, or "cluster" (default: DATA-DIR/ledger/public-key)`)
	after := c.fs.Uint64("after", 0, "export: start after this index")
	limit := c.fs.Int("limit", 0, "export: at most this many records (0: all)")
	before := c.fs.Uint64("before", 0, "prune: remove the files whose records all come before this index")
	complete := c.fs.Bool("complete", false, "verify: fail (exit 1) on a gap, records missing other than the oldest, pruned ones")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "verify", "prune":
	case "export":
		if *pubFlag != "" {
			return c.usageError("--public-key is for verify and prune: export does not check signatures")
		}
	default:
		return c.usageError("%s", unknownSubcommand(pos[0], "verify", "export", "prune"))
	}
	dir := ledgerDir(*dataDir)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("INVALID_ARGUMENT: no ledger at %s: %v", dir, err)
	}
	switch pos[0] {
	case "verify":
		return auditVerify(ctx, c, dir, *pubFlag, *complete)
	case "export":
		return auditExport(dir, *after, *limit, stdout, stderr)
	default: // prune
		if *before == 0 {
			return c.usageError("prune needs --before INDEX")
		}
		return auditPrune(ctx, c, dir, *pubFlag, *before)
	}
}

// ledgerDir accepts a data dir or the ledger dir inside it.
func ledgerDir(dir string) string {
	if st, err := os.Stat(filepath.Join(dir, ledger.DirName)); err == nil && st.IsDir() {
		return filepath.Join(dir, ledger.DirName)
	}
	return dir
}

// auditKey resolves the verification key and says where it came from.
func auditKey(ctx context.Context, c *cliCommand, dir, flag string) (ed25519.PublicKey, string, error) {
	switch flag {
	case "":
		k, err := ledger.ReadPublicKey(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil, "", nil
		}
		return k, filepath.Join(dir, ledger.PublicKeyFile), err
	case "cluster":
		r, err := c.remote()
		if err != nil {
			return nil, "", err
		}
		var k ed25519.PublicKey
		err = r.cluster(func(cl tenurev1connect.ClusterServiceClient) error {
			res, err := cl.PublicKey(ctx, connect.NewRequest(&tenurev1.PublicKeyRequest{}))
			if err == nil {
				k = res.Msg.GetPublicKey()
			}
			return err
		})
		return k, "the cluster at " + c.endpoints, err
	}
	k, err := c.publicKeyArg(flag)
	if err != nil {
		return nil, "", err
	}
	return k, "--public-key", nil
}

// auditReport is verify's -o json output.
type auditReport struct {
	OK    bool   `json:"ok"`
	Dir   string `json:"dir"`
	KeyID string `json:"keyId,omitempty"`
	Key   string `json:"keySource"`
	// AnchorSource names the Raft snapshot checked against (if any).
	AnchorSource string `json:"anchorSource,omitempty"`
	ledger.Report
	// FirstBadIndex and Problem describe the first bad record.
	FirstBadIndex uint64 `json:"firstBadIndex,omitempty"`
	Problem       string `json:"problem,omitempty"`
}

func auditVerify(ctx context.Context, c *cliCommand, dir, keyFlag string, complete bool) error {
	pub, source, err := auditKey(ctx, c, dir, keyFlag)
	if err != nil {
		return err
	}
	// The newest Raft snapshot's chain head is a second witness: the
	// ledger is fsynced before every snapshot, so it must reach that point.
	anchor, aerr := cluster.SnapshotAnchor(filepath.Dir(dir))
	if aerr != nil {
		fmt.Fprintf(c.stderr, "tenure audit: not checking against the Raft snapshot: %v\n", aerr)
	}
	start, last := time.Now(), time.Now()
	rep, verr := ledger.Verify(dir, ledger.VerifyOptions{PublicKey: pub, Anchor: anchor, Progress: func(n uint64) {
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(c.stderr, "verified %d records (%s)…\n", n, time.Since(start).Round(time.Second))
		}
	}})
	if verr == nil && complete {
		for _, g := range rep.Gaps {
			if !g.Pruned {
				verr = &ledger.BrokenError{Index: g.From, Reason: fmt.Sprintf("records %d..%d are not in this ledger, and --complete allows no gap", g.From, g.To)}
				break
			}
		}
	}
	out := auditReport{OK: verr == nil, Dir: dir, Report: rep, Key: source}
	if anchor != nil {
		out.AnchorSource = anchor.Source
	}
	if pub == nil && rep.KeyFromLedger {
		out.Key = "the ledger's own Initialized record (self-consistency only)"
	}
	if pub != nil {
		out.KeyID = fencing.KeyID(pub)
	}
	var be *ledger.BrokenError
	if errors.As(verr, &be) {
		out.FirstBadIndex, out.Problem = be.Index, be.Reason
	} else if verr != nil && !errors.Is(verr, ledger.ErrNoKey) {
		return verr // not a verdict: the ledger could not be read
	} else if verr != nil {
		out.Problem = verr.Error()
	}
	if c.json() {
		b, _ := json.Marshal(out)
		fmt.Fprintf(c.stdout, "%s\n", b)
		if verr != nil {
			return &exitStatus{code: 1}
		}
		return nil
	}
	w := c.stdout
	fmt.Fprintf(w, "ledger %s: %d segment file(s)\n", dir, rep.Segments)
	if rep.Records > 0 {
		fmt.Fprintf(w, "records %d..%d verified (%d records), %d checkpoint(s)", rep.First, rep.Last, rep.Records, rep.Checkpoints)
		if rep.Checkpoints > 0 {
			fmt.Fprintf(w, ", signed through %d", rep.SignedThrough)
		}
		fmt.Fprintln(w)
		if rep.Unsigned > 0 && verr == nil {
			fmt.Fprintf(w, "note: the last %d record(s) are chained but not yet covered by a signed checkpoint\n", rep.Unsigned)
		}
	}
	if out.Key != "" {
		fmt.Fprintf(w, "public key %s from %s\n", out.KeyID, out.Key)
	}
	if rep.Anchored > 0 {
		fmt.Fprintf(w, "record %d matches the chain head in the node's %s\n", rep.Anchored, out.AnchorSource)
	}
	if rep.AnchorNotHeld > 0 {
		fmt.Fprintf(w, "note: record %d, the chain head in the node's %s, is not in this ledger (pruned, or in a gap): not compared; "+
			"a ledger budget that holds more than a snapshot interval of history keeps it\n", rep.AnchorNotHeld, out.AnchorSource)
	}
	for _, g := range rep.Gaps {
		if g.Pruned {
			fmt.Fprintf(w, "pruned: records %d..%d were removed from this ledger (tenure audit prune, or the server's --ledger-max-size)\n", g.From, g.To)
			continue
		}
		fmt.Fprintf(w, "gap: records %d..%d are not in this ledger (the node caught up from a snapshot); check them on another member\n", g.From, g.To)
	}
	for _, u := range rep.UnsignedBeforeGaps {
		fmt.Fprintf(w, "unsigned: records %d..%d are chained but no checkpoint signs them (a gap follows them, and a start marker is not signed): "+
			"they could have been rewritten; compare them with another member's ledger\n", u.From, u.To)
	}
	if rep.Torn != nil {
		fmt.Fprintf(w, "torn tail: a partial last line of %d bytes in %s (a crash between writes), ignored\n", rep.Torn.Bytes, rep.Torn.Segment)
	}
	if verr != nil {
		return verr // LEDGER_CORRUPT: record N: …
	}
	fmt.Fprintln(w, "OK")
	return nil
}

// auditExport prints the ledger as NDJSON events.
func auditExport(dir string, after uint64, limit int, stdout, stderr io.Writer) error {
	n := 0
	torn, err := ledger.Scan(dir, func(l ledger.Line) error {
		if l.Start > 0 {
			if l.Start <= after {
				return nil
			}
			b, _ := json.Marshal(struct {
				Start    uint64 `json:"start,string"`
				PrevHash string `json:"prevHash"`
				Pruned   bool   `json:"pruned,omitempty"`
			}{l.Start, l.Prev, l.Pruned})
			_, err := fmt.Fprintf(stdout, "%s\n", b)
			return err
		}
		if l.Index <= after {
			return nil
		}
		if limit > 0 && n >= limit {
			return ledger.ErrStop
		}
		rec := &logpb.Record{}
		if err := proto.Unmarshal(l.Record, rec); err != nil {
			return &ledger.BrokenError{Index: l.Index, Reason: "undecodable record: " + err.Error()}
		}
		var h ledger.Hash
		if _, err := hex.Decode(h[:], []byte(l.Hash)); err != nil {
			return &ledger.BrokenError{Index: l.Index, Reason: "malformed hash"}
		}
		n++
		return writeJSON(stdout, server.RenderEvent(statemachine.Sealed{Record: rec, Bytes: l.Record, Hash: h}))
	})
	if err != nil {
		return err
	}
	if torn != nil {
		fmt.Fprintf(stderr, "tenure audit export: ignored a torn last line of %d bytes in %s\n", torn.Bytes, torn.Segment)
	}
	return nil
}

// auditPrune is `tenure audit prune`: verify everything, then cut.
func auditPrune(ctx context.Context, c *cliCommand, dir, keyFlag string, before uint64) error {
	pub, _, err := auditKey(ctx, c, dir, keyFlag)
	if err != nil {
		return err
	}
	anchor, aerr := cluster.SnapshotAnchor(filepath.Dir(dir))
	if aerr != nil {
		fmt.Fprintf(c.stderr, "tenure audit: not checking against the Raft snapshot: %v\n", aerr)
	}
	if _, err := ledger.Verify(dir, ledger.VerifyOptions{PublicKey: pub, Anchor: anchor}); err != nil {
		return fmt.Errorf("not pruning a ledger that does not verify: %w", err)
	}
	p, err := ledger.Prune(dir, before)
	if err != nil {
		return err
	}
	if c.json() {
		b, _ := json.Marshal(struct {
			Before  uint64 `json:"before,string"`
			Removed int    `json:"removedFiles"`
			Start   uint64 `json:"start,string,omitempty"`
		}{before, p.Removed, p.Start})
		_, err := fmt.Fprintf(c.stdout, "%s\n", b)
		return err
	}
	if p.Start == 0 {
		fmt.Fprintf(c.stdout, "nothing to prune: no whole file ends before record %d\n", before)
		return nil
	}
	fmt.Fprintf(c.stdout, "removed %d file(s); the ledger now starts at record %d (records 1..%d pruned)\n", p.Removed, p.Start, p.Start-1)
	return nil
}
