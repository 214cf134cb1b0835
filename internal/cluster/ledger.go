package cluster

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/fencing"
	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// ledgerHealEvery is how often a ledger writer stopped by a disk's error
// is tried again.
const ledgerHealEvery = 5 * time.Second

// ledgerQueue bounds the batches handed to the ledger writer and not yet
// written; a full queue holds the FSM back until the disk catches up.
const ledgerQueue = 256

// durableLedger writes the sealed records of every applied batch to the
// ledger files in the data dir (ledger.Writer), without an fsync of its
// own: the entries are durable in the Raft log, and Raft re-applies
// whatever the ledger lacks after a crash. It fsyncs before every
// snapshot, because Raft may then drop the entries the lines came from.
//
// The writing happens on a goroutine of its own, fed in apply order
// through a bounded queue, so that the FSM (and so every caller waiting
// for a result) does not wait for the encoding and the write syscall. The
// files therefore trail the applied state by the batches still queued
// (microseconds, unless the disk stalls). Writes, restores, sync requests
// and the close take that one queue, so they happen in the order the FSM
// asked for them: a sync answers once everything queued before it is on
// disk. A nil *durableLedger does nothing.
type durableLedger struct {
	dir string
	w   *ledger.Writer
	log *slog.Logger
	// maxBytes is the files' budget (0: none); prunedAt is the segment
	// the writer was on when the files were last brought within it.
	maxBytes int64
	prunedAt string
	ops      chan ledgerOp
	// done is closed when the writer goroutine has drained ops.
	done chan struct{}
	// keySaved is the writer goroutine's.
	keySaved bool
	// failed is set when writing stopped (atomic: the FSM and the
	// metrics read it).
	failed atomic.Bool
	// lastFail is the error the ledger last logged stopping for, and when
	// (under failMu): a retry that fails alike within a minute is not
	// logged again (a full disk, retried every few seconds).
	failMu   sync.Mutex
	lastFail string
	failAt   time.Time
	// lastAtOpen is the index of the last record the files held at start
	// (checkHistory), and diverged is told when the node applies another
	// history than the files hold (ledger.ErrOtherHistory).
	lastAtOpen uint64
	diverged   func(error)

	// segSize is the files' segment size, for reopening them.
	segSize int64
	// Healing (startHealing): while a disk's error stops the writer
	// (healable), it is tried again every so often, refilling the files
	// from feed, which holds the records applied since.
	feed     *Feed
	healable atomic.Bool
	stopHeal chan struct{}
	healWG   sync.WaitGroup
	// finding admits one search of the files (find) at a time, which
	// filters spares the segments without the resource searched for;
	// reading admits one read of them in order (read, for watches), apart,
	// so that watchers reading the files cannot hold History's searches
	// up.
	finding, reading chan struct{}
	filters          *segFilters
}

// ledgerOp is one request to the writer goroutine: the records of an
// applied batch, a restored snapshot's chain head (resume), or a sync
// (synced set, answered with its error).
type ledgerOp struct {
	sealed []statemachine.Sealed
	pub    ed25519.PublicKey
	resume bool
	next   uint64
	head   ledger.Hash
	synced chan error
	heal   chan error
}

func openLedger(dataDir string, segSize, maxBytes int64, scope func(*logpb.Record) (ns, resource string), log *slog.Logger) (*durableLedger, error) {
	dir := filepath.Join(dataDir, ledger.DirName)
	w, rec, err := ledger.OpenWriter(dir, segSize)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if rec.TornBytes > 0 {
		log.Warn("ledger: cut a partial last line left by a crash; Raft re-applies the records it held",
			"segment", rec.Segment, "bytes", rec.TornBytes, "last_index", rec.Last)
	}
	d := &durableLedger{dir: dir, w: w, log: log, maxBytes: maxBytes, ops: make(chan ledgerOp, ledgerQueue), done: make(chan struct{}),
		lastAtOpen: rec.Last, segSize: segSize, finding: make(chan struct{}, 1), reading: make(chan struct{}, 1)}
	if scope != nil {
		d.filters = newSegFilters(scope, segSize)
	}
	d.keepWithinBudget()
	go d.run()
	return d, nil
}

// find searches the files (ledger.Find) for the records of resource ns,
// res, one search at a time: each may read and decode up to its query's
// byte budget, but not the segments whose filter says they hold none (res
// empty: every segment).
// Records the writer has not written yet are not found (the answer then
// ends before q.To).
func (d *durableLedger) find(ctx context.Context, ns, res string, q ledger.Query) (ledger.Found, error) {
	if d == nil {
		return ledger.Found{From: q.From, Next: q.From}, nil
	}
	if err := take(ctx, d.finding); err != nil {
		return ledger.Found{From: q.From, Next: q.From}, err
	}
	defer func() { <-d.finding }()
	if d.filters != nil && res != "" {
		if segs, err := ledger.Segments(d.dir); err == nil {
			d.filters.keep(segs)
		}
		q.Skip = func(seg string) (uint64, bool) { return d.filters.absent(seg, ns, res) }
		q.Learn = d.filters.learn
	}
	return ledger.Find(ctx, d.dir, q)
}

// read reads the files in order (ledger.Find, every segment), one read
// at a time, beside find's searches.
func (d *durableLedger) read(ctx context.Context, q ledger.Query) (ledger.Found, error) {
	if d == nil {
		return ledger.Found{From: q.From, Next: q.From}, nil
	}
	if err := take(ctx, d.reading); err != nil {
		return ledger.Found{From: q.From, Next: q.From}, err
	}
	defer func() { <-d.reading }()
	return ledger.Find(ctx, d.dir, q)
}

// take takes slot, or answers ctx's error.
func take(ctx context.Context, slot chan struct{}) error {
	select {
	case slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write queues the sealed records of an applied batch; pub is the
// registrar's public key as of the batch (nil before bootstrap).
func (d *durableLedger) write(sealed []statemachine.Sealed, pub ed25519.PublicKey) {
	if d == nil || len(sealed) == 0 || d.failed.Load() {
		return
	}
	d.ops <- ledgerOp{sealed: sealed, pub: pub}
}

// restored queues positioning the ledger at a restored snapshot's chain
// head, and storing the snapshot's public key.
func (d *durableLedger) restored(next uint64, head ledger.Hash, pub ed25519.PublicKey) {
	if d == nil {
		return
	}
	d.ops <- ledgerOp{resume: true, next: next, head: head, pub: pub}
}

// sync returns once everything queued before it is written and fsynced,
// or why it is not.
func (d *durableLedger) sync() error {
	if d == nil {
		return nil
	}
	synced := make(chan error, 1)
	d.ops <- ledgerOp{synced: synced}
	return <-synced
}

// close writes what is queued, fsyncs and closes the files. Nothing may
// be queued after it (Raft is shut down first).
func (d *durableLedger) close() error {
	if d == nil {
		return nil
	}
	if d.stopHeal != nil {
		close(d.stopHeal)
		d.healWG.Wait()
	}
	close(d.ops)
	<-d.done
	return d.w.Close()
}

// run is the writer goroutine.
func (d *durableLedger) run() {
	defer close(d.done)
	for op := range d.ops {
		switch {
		case op.synced != nil:
			op.synced <- d.syncNow()
		case op.heal != nil:
			op.heal <- d.healNow()
		case op.resume:
			d.resumeNow(op.next, op.head)
			d.savePublicKey(op.pub)
		default:
			d.writeNow(op.sealed, op.pub)
		}
	}
}

func (d *durableLedger) writeNow(sealed []statemachine.Sealed, pub ed25519.PublicKey) {
	if d.failed.Load() {
		return
	}
	for _, s := range sealed {
		if err := d.w.Append(s.Record.Index, s.Record.PrevHash, s.Hash, s.Bytes); err != nil {
			d.fail(err)
			return
		}
		if d.filters != nil {
			seg := d.w.Segment()
			d.filters.note(seg, ledger.FirstIndex(seg), s.Record)
		}
	}
	if err := d.w.Flush(); err != nil {
		d.fail(err)
		return
	}
	d.savePublicKey(pub)
	d.keepWithinBudget()
}

// keepWithinBudget prunes the oldest ledger files past maxBytes, once
// per segment the writer starts (the files grow a segment at a time). A
// failure is logged and leaves the files as they are: pruning is upkeep,
// the records are safe either way.
func (d *durableLedger) keepWithinBudget() {
	if d.maxBytes <= 0 || d.w.Segment() == d.prunedAt {
		return
	}
	d.prunedAt = d.w.Segment()
	// Room for the segment just started, which grows to a segment's size
	// before the next pruning: the files stay within the budget, not one
	// segment past it (the newest is always kept).
	seg := d.segSize
	if seg <= 0 {
		seg = ledger.DefaultSegmentSize
	}
	p, err := ledger.PruneToSize(d.dir, max(d.maxBytes-seg, 0))
	switch {
	case err != nil:
		d.log.Warn("ledger: pruning the oldest files to stay within the size budget", "err", err, "max_bytes", d.maxBytes)
	case p.Removed > 0:
		d.log.Info("ledger: pruned the oldest files to stay within the size budget (--ledger-max-size)",
			"files_removed", p.Removed, "first_index_kept", p.Start, "max_bytes", d.maxBytes)
	}
}

// fail stops the ledger until the node restarts: snapshots fail from now
// on, so Raft keeps the log the missing lines can be rebuilt from. Safe
// for concurrent use.
func (d *durableLedger) fail(err error) {
	d.failed.Store(true)
	if errors.Is(err, ledger.ErrOtherHistory) && d.diverged != nil {
		d.healable.Store(false)
		// Not a disk's trouble: the Raft log (or snapshot) this node
		// applied derives other records than it once did. Serving from it
		// could grant again what was granted.
		d.diverged(fmt.Errorf("cluster: %w; the Raft log or snapshot in the data dir was damaged or replaced (the ledger files in %s "+
			"record what was applied before). Refusing to serve: restore the data dir from a backup, or in a cluster remove this "+
			"member, wipe its data dir and --join it again", err, d.dir))
		return
	}
	d.healable.Store(!errors.Is(err, ledger.ErrOtherHistory))
	d.failMu.Lock()
	again := d.lastFail == err.Error() && time.Since(d.failAt) < time.Minute
	if !again {
		d.lastFail, d.failAt = err.Error(), time.Now()
	}
	d.failMu.Unlock()
	if again {
		return
	}
	if d.stopHeal != nil {
		d.log.Error("ledger: writing stopped; it is tried again every few seconds, and resumes once the cause is fixed "+
			"(or restart the node: Raft's log refills it)", "err", err)
		return
	}
	d.log.Error("ledger: writing stopped; restart the node once the cause is fixed, and Raft's log refills it", "err", err)
}

// startHealing tries a stopped writer again every `every`, refilling the
// files from feed (healNow).
func (d *durableLedger) startHealing(feed *Feed, every time.Duration) {
	d.feed, d.stopHeal = feed, make(chan struct{})
	d.healWG.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-d.stopHeal:
				return
			case <-t.C:
			}
			if !d.healable.Load() {
				continue
			}
			res := make(chan error, 1)
			select {
			case d.ops <- ledgerOp{heal: res}:
			case <-d.stopHeal:
				return
			}
			<-res
		}
	})
}

// healNow reopens the files of a writer a disk's error stopped (cutting a
// partial last line) and writes the records applied since, which the
// feed holds, then lets applied batches through again. Those applied
// while it reads the feed are queued behind it, and the ones it already
// wrote are skipped. When the feed no longer reaches back to the files'
// end, only a restart (Raft's log) can refill them.
func (d *durableLedger) healNow() error {
	if !d.failed.Load() || !d.healable.Load() || d.feed == nil {
		return nil
	}
	_ = d.w.Close() // its error is what stopped it; closing twice is harmless
	w, rec, err := ledger.OpenWriter(d.dir, d.segSize)
	if err != nil {
		return err // still stopped, the old writer closed
	}
	d.w = w
	d.filters.spoil(w.Segment()) // refilled below without its filter
	if oldest := d.feed.Oldest(); oldest == 0 || oldest > rec.Last+1 {
		if d.feed.Head() > rec.Last {
			d.healable.Store(false)
			d.log.Error("ledger: the files end at a record the in-memory feed no longer holds; restart the node once the "+
				"cause is fixed, and Raft's log refills them (it writes every record since: free about four times what "+
				"the Raft log grew meanwhile)", "files_end", rec.Last, "feed_oldest", oldest)
			return errors.New("ledger: cannot refill from the feed")
		}
	}
	d.failed.Store(false)
	after := rec.Last
	for {
		recs, _, err := d.feed.Read(after, 4096)
		if err != nil {
			d.fail(err)
			return err
		}
		if len(recs) == 0 {
			break
		}
		for _, s := range recs {
			if err := d.w.Append(s.Record.Index, s.Record.PrevHash, s.Hash, s.Bytes); err != nil {
				d.fail(err)
				return err
			}
		}
		after = recs[len(recs)-1].Record.Index
		if err := d.w.Flush(); err != nil {
			d.fail(err)
			return err
		}
	}
	if err := d.w.Sync(); err != nil {
		d.fail(err)
		return err
	}
	d.log.Info("ledger: writing again; refilled from the in-memory feed", "from_index", rec.Last+1, "to_index", after)
	return nil
}

func (d *durableLedger) syncNow() error {
	if d.failed.Load() {
		return fmt.Errorf("cluster: not snapshotting: the ledger stopped writing (see the log), and the Raft log is what can refill it")
	}
	if err := d.w.Sync(); err != nil {
		d.fail(err)
		return fmt.Errorf("cluster: not snapshotting: %w", err)
	}
	return nil
}

func (d *durableLedger) resumeNow(next uint64, head ledger.Hash) {
	if d.failed.Load() {
		return
	}
	// The chain breaks here: the segments around the break are read.
	d.filters.spoil(d.w.Segment())
	if err := d.w.Resume(next, head); err != nil {
		d.fail(err)
	}
	d.filters.spoil(d.w.Segment())
}

// tail reads back from the files up to max records (and maxBytes of
// recordCost) ending at index last with hash head (ledger.Tail), for the
// feed of a restarted node. It is called before the writer goroutine has
// anything to write, and logs rather than fails: the feed is a
// convenience, the files stay as they are.
func (d *durableLedger) tail(last uint64, head ledger.Hash, max, maxBytes int) []statemachine.Sealed {
	if d == nil || last == 0 {
		return nil
	}
	start := time.Now()
	recs, damaged, err := ledger.Tail(d.dir, last, head, max, maxBytes, recordCost)
	if err != nil {
		d.log.Warn("ledger: reading back the recent history for History and Watch", "err", err)
		return nil
	}
	if damaged != 0 {
		d.log.Error("ledger: the files do not hold an intact chain at record "+strconv.FormatUint(damaged, 10)+
			" (altered or damaged): History and Watch on this member reach back only past it; "+
			"run tenure audit verify --data-dir on this member's data dir, and compare with another member's ledger",
			"record", damaged)
	}
	out := make([]statemachine.Sealed, len(recs))
	for i, r := range recs {
		out[i] = statemachine.Sealed{Record: r.Record, Bytes: r.Bytes, Hash: r.Hash}
	}
	if len(out) > 0 {
		d.log.Info("ledger: read back the recent history for History and Watch", "records", len(out),
			"from_index", out[0].Record.Index, "to_index", last, "took", time.Since(start).Round(time.Millisecond).String())
	}
	return out
}

func (d *durableLedger) savePublicKey(pub ed25519.PublicKey) {
	if d.keySaved || pub == nil {
		return
	}
	if old, err := ledger.ReadPublicKey(d.dir); err == nil && !old.Equal(pub) {
		// The registrar's key never changes: these files were written
		// by another registrar (another cluster's ledger put here).
		d.keySaved = true
		d.log.Error("ledger: the ledger files were written under another registrar key ("+fencing.KeyID(old)+", this registrar's is "+
			fencing.KeyID(pub)+"): another cluster's ledger was put in this data dir; its records and this member's are not one history. "+
			"Move the ledger directory away (the member writes a new one from its state and Raft log) and run tenure audit verify on it",
			"dir", d.dir)
		return
	}
	if err := ledger.SavePublicKey(d.dir, pub); err != nil {
		d.log.Warn("ledger: storing the registrar's public key", "err", err)
		return
	}
	d.keySaved = true
}
