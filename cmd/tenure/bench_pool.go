package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/opstream"
)

// poolTransport carries the pool workload's operations.
type poolTransport interface {
	request(ctx context.Context, req *tenurev1.RequestLeasesRequest) (*tenurev1.RequestLeasesResponse, error)
	complete(ctx context.Context, req *tenurev1.CompletePieceRequest) error
}

// unaryPoolOps makes one unary call per operation.
type unaryPoolOps struct{ r *remote }

func (u unaryPoolOps) request(ctx context.Context, req *tenurev1.RequestLeasesRequest) (*tenurev1.RequestLeasesResponse, error) {
	return poolCall(ctx, u.r, tenurev1connect.PoolServiceClient.RequestLeases, req)
}

func (u unaryPoolOps) complete(ctx context.Context, req *tenurev1.CompletePieceRequest) error {
	_, err := poolCall(ctx, u.r, tenurev1connect.PoolServiceClient.CompletePiece, req)
	return err
}

// poolPipe sends the pool workload's operations over PoolService.Pipeline.
type poolPipe struct{ p *opstream.PoolSet }

func (q poolPipe) request(ctx context.Context, req *tenurev1.RequestLeasesRequest) (*tenurev1.RequestLeasesResponse, error) {
	r, err := q.p.Do(ctx, &tenurev1.PoolOp{Op: &tenurev1.PoolOp_RequestLeases{RequestLeases: req}})
	if err != nil {
		return nil, err
	}
	return r.GetRequestLeases(), nil
}

func (q poolPipe) complete(ctx context.Context, req *tenurev1.CompletePieceRequest) error {
	_, err := q.p.Do(ctx, &tenurev1.PoolOp{Op: &tenurev1.PoolOp_CompletePiece{CompletePiece: req}})
	return err
}

// benchPool runs the pool workload: a pool of --files files of --pieces
// pieces, all wanted, and --concurrency peers, each with a have-map of a
// random half of every file (a swarm where pieces are spread unevenly, so
// that rarity matters). Each peer requests up to --batch pieces with its
// have-maps, completes what it was granted (SUCCESS, concurrently), and
// goes on. Ops are requests answered with leases; latency is per round
// (the request and its completions). A peer whose pieces are all done
// moves on to the next generation of files (file indexes --files
// higher), which the first peer to get there adds.
func benchPool(ctx context.Context, c *cliCommand, cfg benchConfig) (*benchResult, error) {
	r, err := c.remote()
	if err != nil {
		return nil, err
	}
	var q poolTransport = unaryPoolOps{r}
	if !cfg.unary {
		// Outlives an interrupt, so that the pieces granted then are
		// still completed; Close ends the streams.
		p := opstream.OpenPool(context.WithoutCancel(ctx), r.pools[0], cfg.streams)
		defer p.Close()
		q = poolPipe{p}
	}
	name := cfg.holder // bench-<run id>: one pool per run
	if _, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.CreatePool, &tenurev1.CreatePoolRequest{Namespace: c.namespace, Pool: name,
		Config: &tenurev1.PoolConfig{LeaseDuration: durationpb.New(cfg.ttl), MaxLeasesPerPeer: uint32(cfg.batch)}}); err != nil {
		return nil, fmt.Errorf("%w (while creating pool %s)", err, name)
	}
	var genMu sync.Mutex
	gens := 0 // generations of files wanted so far
	// want makes sure generation g's files are wanted.
	want := func(ctx context.Context, g int) error {
		genMu.Lock()
		defer genMu.Unlock()
		for ; gens <= g; gens++ {
			for f := range cfg.files {
				req := &tenurev1.WantRequest{Namespace: c.namespace, Pool: name, FileIndex: uint32(gens*cfg.files + f),
					PieceCount: uint32(cfg.pieces), Ranges: []*tenurev1.PieceRange{{Start: 0, End: uint32(cfg.pieces)}}}
				if _, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.Want, req); err != nil {
					return fmt.Errorf("%w (while adding file %d to pool %s)", err, req.FileIndex, name)
				}
			}
		}
		return nil
	}
	if err := want(ctx, 0); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.stderr, "pool %s: %d files of %d pieces, %d peers\n", name, cfg.files, cfg.pieces, cfg.concurrency)

	stats := &benchStats{reasons: make(map[string]int64)}
	var pieces atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	stopProgress := startProgress(c.stderr, func(elapsed time.Duration) string {
		n, e, p := stats.ops.Load(), stats.errs.Load(), pieces.Load()
		return fmt.Sprintf("pool %s: %d requests, %.0f requests/s, %d pieces completed, %d errors", fmtDuration(elapsed), n, float64(n)/elapsed.Seconds(), p, e)
	})
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.concurrency {
		wg.Go(func() {
			peer := cfg.holderOf(w)
			bits := halfOf(uint64(w), cfg.files, cfg.pieces)
			var lat []time.Duration
			reasons := make(map[string]int64)
			fail := func(err error) { stats.failed(ctx, runCtx, reasons, benchReason(err), err) }
			defer func() { stats.record(lat, reasons) }()
			// A request sent is waited for and what it granted is
			// completed even when ctx ends meanwhile (Ctrl-C), so that
			// the run leaves no piece leased.
			opCtx := context.WithoutCancel(ctx)
			for g := 0; runCtx.Err() == nil; {
				have := make([]*tenurev1.HaveMap, cfg.files)
				for f := range have {
					have[f] = &tenurev1.HaveMap{FileIndex: uint32(g*cfg.files + f), Bits: bits[f]}
				}
				t0 := time.Now()
				res, err := q.request(opCtx, &tenurev1.RequestLeasesRequest{Namespace: c.namespace, Pool: name, Peer: peer, Have: have, Max: uint32(cfg.batch)})
				if err != nil {
					fail(err)
					continue
				}
				if res.GetRejectedReason() == tenurev1.RejectedReason_REJECTED_REASON_NO_AVAILABLE_PIECES {
					// Everything this peer has is done or leased to
					// others: on to the next files.
					g++
					if err := want(runCtx, g); err != nil {
						if runCtx.Err() == nil {
							reasons[benchReason(err)]++
							stats.errs.Add(1)
						}
						return
					}
					continue
				}
				if r := res.GetRejectedReason(); r != tenurev1.RejectedReason_REJECTED_REASON_UNSPECIFIED {
					stats.failed(ctx, runCtx, reasons, r.String(), nil) // a refusal, counted by its reason
					continue
				}
				errs := make([]error, len(res.GetLeases()))
				var done sync.WaitGroup
				for i, l := range res.GetLeases() {
					done.Go(func() {
						errs[i] = q.complete(opCtx, &tenurev1.CompletePieceRequest{Namespace: c.namespace, Pool: name, Peer: peer,
							FileIndex: l.GetFileIndex(), PieceIndex: l.GetPieceIndex(), LeaseId: l.GetLeaseId(),
							Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS})
					})
				}
				done.Wait()
				ok := true
				for _, err := range errs {
					if err != nil {
						fail(err)
						ok = false
						continue
					}
					pieces.Add(1)
				}
				if ok {
					lat = append(lat, time.Since(t0))
					stats.ops.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	n, p := stats.ops.Load(), pieces.Load()
	return &benchResult{
		Workload: cfg.workload, Transport: cfg.transport(), Concurrency: cfg.concurrency,
		Seconds: elapsed.Seconds(), Ops: n, OpsPerSec: float64(n) / elapsed.Seconds(),
		Errors: stats.reasons, Latency: percentiles(stats.lat),
		Pool: name, Pieces: p, PiecesPerSec: float64(p) / elapsed.Seconds(),
	}, nil
}

// halfOf is a have-map per file for peer w: a random half of the pieces,
// the same on every run.
func halfOf(w uint64, files, pieces int) [][]byte {
	rng := rand.New(rand.NewPCG(w, 0x7e2e))
	out := make([][]byte, files)
	for f := range out {
		b := make([]byte, (pieces+7)/8)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if rest := pieces % 8; rest != 0 { // no bit past the last piece
			b[len(b)-1] &= byte(1)<<rest - 1
		}
		out[f] = b
	}
	return out
}
