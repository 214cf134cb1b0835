package cluster

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// durableLedger writes the sealed records of every applied batch to the
// ledger files in the data dir (ledger.Writer), without an fsync of its
// own: the entries are durable in the Raft log, and Raft re-applies
// whatever the ledger lacks after a crash. It fsyncs before every
// snapshot, because Raft may then drop the entries the lines came from.
// A nil *durableLedger does nothing.
type durableLedger struct {
	dir      string
	w        *ledger.Writer
	log      *slog.Logger
	keySaved bool
	// failed is set when writing stopped (atomic: the metrics read it).
	failed atomic.Bool
}

func openLedger(dataDir string, segSize int64, log *slog.Logger) (*durableLedger, error) {
	dir := filepath.Join(dataDir, ledger.DirName)
	w, rec, err := ledger.OpenWriter(dir, segSize)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if rec.TornBytes > 0 {
		log.Warn("ledger: cut a partial last line left by a crash; Raft re-applies the records it held",
			"segment", rec.Segment, "bytes", rec.TornBytes, "last_index", rec.Last)
	}
	return &durableLedger{dir: dir, w: w, log: log}, nil
}

func (d *durableLedger) write(sealed []statemachine.Sealed, pub ed25519.PublicKey) {
	if d == nil || d.failed.Load() {
		return
	}
	for _, s := range sealed {
		if err := d.w.Append(s.Record.Index, s.Record.PrevHash, s.Hash, s.Bytes); err != nil {
			d.fail(err)
			return
		}
	}
	if err := d.w.Flush(); err != nil {
		d.fail(err)
		return
	}
	d.savePublicKey(pub)
}

// fail stops the ledger until the node restarts: snapshots fail from now
// on, so Raft keeps the log the missing lines can be rebuilt from.
func (d *durableLedger) fail(err error) {
	d.failed.Store(true)
	d.log.Error("ledger: writing stopped; restart the node once the cause is fixed, and Raft's log refills it", "err", err)
}

func (d *durableLedger) sync() error {
	if d == nil {
		return nil
	}
	if d.failed.Load() {
		return fmt.Errorf("cluster: not snapshotting: the ledger stopped writing (see the log), and the Raft log is what can refill it")
	}
	if err := d.w.Sync(); err != nil {
		d.fail(err)
		return fmt.Errorf("cluster: not snapshotting: %w", err)
	}
	return nil
}

// restored positions the ledger at a restored snapshot's chain head.
func (d *durableLedger) restored(next uint64, head ledger.Hash) {
	if d == nil || d.failed.Load() {
		return
	}
	if err := d.w.Resume(next, head); err != nil {
		d.fail(err)
	}
}

func (d *durableLedger) savePublicKey(pub ed25519.PublicKey) {
	if d == nil || d.keySaved || pub == nil {
		return
	}
	if err := ledger.SavePublicKey(d.dir, pub); err != nil {
		d.log.Warn("ledger: storing the registrar's public key", "err", err)
		return
	}
	d.keySaved = true
}

func (d *durableLedger) close() error {
	if d == nil {
		return nil
	}
	return d.w.Close()
}
