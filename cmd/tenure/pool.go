package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/server"
)

const poolHelp = `The piece pool: files split into pieces, each piece leased to one peer at a
time, peers ranked by their results (see tenure pool SUBCOMMAND --help).

A pool is one downloader's plan: the pieces it still wants, and the peers
(sources) it fetches them from. A peer's have-map is what that peer can
serve; a request leases wanted pieces to fetch from it, rarest first. A
swarm in which every node downloads runs one pool per downloading node.

  pool create POOL [--lease-duration --max-leases-per-peer --decay --bonus --penalty --min-score --peer-idle-timeout]
  pool want POOL --file N [--pieces COUNT] (--range 0-99,200-299 | --all)
  pool request POOL --peer P --have FILE:RANGES … [--max N]
  pool complete POOL --peer P --file N --piece I [--lease ID] (--success | --failure REASON)
  pool leases POOL --peer P
  pool rankings POOL
  pool status POOL
  pool stats POOL
  pool list
  pool delete POOL
  pool reset-peer POOL --peer P

Piece ranges are inclusive: 0-99 is pieces 0 to 99.`

const poolExamples = `  tenure pool create swarm --max-leases-per-peer 8
  tenure pool want swarm --file 0 --pieces 1000 --all
  tenure pool request swarm --peer p1 --have 0:0-499 --max 4
  tenure pool complete swarm --peer p1 --file 0 --piece 0 --lease 01M8… --success   # as the request granted it
  tenure pool leases swarm --peer p1                              # what p1 holds now
  tenure pool rankings swarm
  tenure pool reset-peer swarm --peer p2                          # p2 was fixed: rank it afresh
  tenure pool delete swarm                                        # when the download is over`

// poolSubcommands are the subcommands of tenure pool.
var poolSubcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"create":     runPoolCreate,
	"want":       runPoolWant,
	"request":    runPoolRequest,
	"complete":   runPoolComplete,
	"rankings":   runPoolRankings,
	"status":     runPoolStatus,
	"stats":      runPoolStats,
	"leases":     runPoolLeases,
	"list":       runPoolList,
	"delete":     runPoolDelete,
	"reset-peer": runPoolResetPeer,
}

// runPool is `tenure pool …`.
func runPool(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if sub, ok := poolSubcommands[args[0]]; ok {
			return sub(ctx, args[1:], stdout, stderr)
		}
	}
	c := newCLICommand("tenure pool", "create|want|request|complete|leases|rankings|status|stats|delete|reset-peer POOL [flags] | list", poolHelp, poolExamples, stdout, stderr)
	pos, err := c.parse(args, 1, -1)
	if err != nil {
		return err
	}
	return c.usageError("%s", unknownSubcommand(pos[0], "create", "want", "request", "complete", "leases", "rankings", "status", "stats", "list", "delete", "reset-peer"))
}

// poolCall is leaseCall for the PoolService.
func poolCall[Req, Resp any](ctx context.Context, r *remote,
	method func(tenurev1connect.PoolServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	req *Req) (*Resp, error) {
	return call(ctx, r.pools, method, req)
}

const poolCreateHelp = `Create a piece pool. Settings not given take the defaults: lease 300s, 4
leases per peer, decay 0.95 per hour, success bonus 0.5, failure penalty 1.0,
minimum score 0.2, peer idle timeout 1h (a peer holding no piece lease that
records no have-map, takes no lease and ends none for that long has its
have-maps forgotten; its score is kept). Creating an existing pool with the
same settings succeeds (and says so); with other settings it fails with
INVALID_ARGUMENT.`

const poolCreateExamples = `  tenure pool create swarm
  tenure pool create swarm --lease-duration 2m --max-leases-per-peer 8 --min-score 0.5`

func runPoolCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool create", "POOL [flags]", poolCreateHelp, poolCreateExamples, stdout, stderr)
	leaseDur := c.fs.Duration("lease-duration", 300*time.Second, "duration of each piece lease")
	maxLeases := c.uint32Flag("max-leases-per-peer", 4, "piece leases a peer may hold at once")
	decay := c.fs.Float64("decay", 0.95, "score decay factor per hour, in (0, 1]")
	bonus := c.fs.Float64("bonus", 0.5, "success bonus of the ranking formula")
	penalty := c.fs.Float64("penalty", 1.0, "failure penalty of the ranking formula")
	minScore := c.fs.Float64("min-score", 0.2, "peers scoring below this are refused")
	idle := c.fs.Duration("peer-idle-timeout", time.Hour, "forget the have-maps of a peer inactive this long (holding no lease)")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	cfg := &tenurev1.PoolConfig{LeaseDuration: c.durationIfGiven("lease-duration", *leaseDur),
		PeerIdleTimeout: c.durationIfGiven("peer-idle-timeout", *idle)}
	if c.given("max-leases-per-peer") {
		if *maxLeases == 0 {
			return c.usageError("--max-leases-per-peer must be at least 1")
		}
		cfg.MaxLeasesPerPeer = *maxLeases
	}
	if c.given("decay") {
		cfg.PeerRankingDecay = decay
	}
	if c.given("bonus") {
		cfg.SuccessBonus = bonus
	}
	if c.given("penalty") {
		cfg.FailurePenalty = penalty
	}
	if c.given("min-score") {
		cfg.MinPeerScore = minScore
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.CreatePool, &tenurev1.CreatePoolRequest{Pool: pos[0], Namespace: c.namespace, Config: cfg})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	if resp.GetCreated() {
		fmt.Fprintf(stdout, "created pool %s\n", pos[0])
	} else {
		fmt.Fprintf(stdout, "pool %s already exists with this configuration\n", pos[0])
	}
	return writePoolConfig(stdout, resp.GetConfig())
}

func writePoolConfig(w io.Writer, cfg *tenurev1.PoolConfig) error {
	tw := newTable(w)
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	fmt.Fprintf(tw, "lease duration\t%s\nmax leases per peer\t%d\ndecay per hour\t%s\nsuccess bonus\t%s\nfailure penalty\t%s\nmin score\t%s\npeer idle timeout\t%s\n",
		fmtPBDuration(cfg.GetLeaseDuration()), cfg.GetMaxLeasesPerPeer(), f(cfg.GetPeerRankingDecay()),
		f(cfg.GetSuccessBonus()), f(cfg.GetFailurePenalty()), f(cfg.GetMinPeerScore()), fmtPBDuration(cfg.GetPeerIdleTimeout()))
	return tw.Flush()
}

const poolWantHelp = `Add pieces of one file to the pool's wanted set: --all, or --range (inclusive
ranges, e.g. 0-99,200-299; may be repeated). --pieces is the file's piece count,
required the first time a file is named (0 afterwards: as before; --all then
reads the count from the pool's status). Pieces already done stay done; a pool
that does not exist yet is created with the default settings.`

const poolWantExamples = `  tenure pool want swarm --file 0 --pieces 1000 --all
  tenure pool want swarm --file 1 --pieces 500 --range 0-99,200-299
  tenure pool want swarm --file 0 --all`

// poolStringsFlag is a repeatable string flag.
type poolStringsFlag []string

func (s *poolStringsFlag) String() string     { return strings.Join(*s, " ") }
func (s *poolStringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func runPoolWant(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool want", "POOL --file N [--pieces COUNT] (--range RANGES | --all) [flags]", poolWantHelp, poolWantExamples, stdout, stderr)
	file := c.uint32Flag("file", 0, "file index (required)")
	pieces := c.uint32Flag("pieces", 0, "the file's piece count (required the first time)")
	all := c.fs.Bool("all", false, "want every piece of the file")
	var ranges poolStringsFlag
	c.fs.Var(&ranges, "range", "inclusive piece ranges, e.g. 0-99,200-299 (repeatable)")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	switch {
	case !c.given("file"):
		return c.usageError("--file is required")
	case *all == (len(ranges) > 0):
		return c.usageError("give exactly one of --range and --all")
	}
	req := &tenurev1.WantRequest{Pool: pos[0], Namespace: c.namespace, FileIndex: *file, PieceCount: *pieces}
	for _, s := range ranges {
		rs, err := tenure.ParseRanges(s)
		if err != nil {
			return c.usageError("--range: %v", err)
		}
		for _, r := range rs {
			req.Ranges = append(req.Ranges, &tenurev1.PieceRange{Start: r.Start, End: r.End})
		}
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	if *all {
		count := *pieces
		if count == 0 {
			// A file the pool knows keeps its piece count: read it.
			if count, err = poolFilePieces(ctx, r, c.namespace, pos[0], *file); err != nil {
				return err
			}
			if count == 0 {
				return c.usageError("--all needs --pieces: pool %s has no file %d yet", pos[0], *file)
			}
		}
		req.Ranges = []*tenurev1.PieceRange{{Start: 0, End: count}}
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.Want, req)
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	fmt.Fprintf(stdout, "%d pieces became wanted\n", resp.GetAdded())
	if n := resp.GetAlreadyDone(); n > 0 {
		fmt.Fprintf(stdout, "%d of the pieces named are done and stay done (a success is final)\n", n)
	}
	return writePoolFiles(stdout, resp.GetFile())
}

// poolFilePieces is the piece count of file in pool, from the pool's
// status: 0 when the pool or the file does not exist yet.
func poolFilePieces(ctx context.Context, r *remote, namespace, pool string, file uint32) (uint32, error) {
	st, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.Status, &tenurev1.PoolStatusRequest{Pool: pool, Namespace: namespace})
	if errors.Is(err, tenure.ErrPoolNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, f := range st.GetFiles() {
		if f.GetFileIndex() == file {
			return f.GetPieces(), nil
		}
	}
	return 0, nil
}

const poolFileHeader = "FILE\tPIECES\tWANTED\tLEASED\tDONE"

func writePoolFiles(w io.Writer, files ...*tenurev1.PoolFileStatus) error {
	tw := newTable(w)
	fmt.Fprintln(tw, poolFileHeader)
	for _, f := range files {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", f.GetFileIndex(), f.GetPieces(), f.GetWanted(), f.GetLeased(), f.GetDone())
	}
	return tw.Flush()
}

const poolRequestHelp = `Ask for piece leases for a peer among the pieces it can serve (--have
FILE:RANGES, repeatable; ranges inclusive): wanted pieces, not leased, rarest
first among the have-maps the pool has seen. Prints the granted pieces, rarest first. When
nothing is granted it exits 1 with the rejection reason first on stderr:
REJECTED_REASON_INVALID_REQUEST, _PEER_RANKING_TOO_LOW, _PEER_AT_CAPACITY or
_NO_AVAILABLE_PIECES (with -o json the response is printed too).`

const poolRequestExamples = `  tenure pool request swarm --peer p1 --have 0:0-999 --have 1:0-99,200-299 --max 4`

func runPoolRequest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool request", "POOL --peer P --have FILE:RANGES … [--max N] [flags]", poolRequestHelp, poolRequestExamples, stdout, stderr)
	peer := c.fs.String("peer", "", "the peer asking (required)")
	maxN := c.uint32Flag("max", 4, "at most this many pieces")
	var haves poolStringsFlag
	c.fs.Var(&haves, "have", "FILE:RANGES the peer has, e.g. 0:0-99,200-299 (repeatable)")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	switch {
	case *peer == "":
		return c.usageError("--peer is required")
	case len(haves) == 0:
		return c.usageError("--have is required")
	case *maxN == 0:
		return c.usageError("--max must be at least 1")
	}
	byFile := map[uint32]tenure.Bitset{}
	for _, h := range haves {
		fileStr, rangesStr, ok := strings.Cut(h, ":")
		file, err := strconv.ParseUint(fileStr, 10, 32)
		if !ok || err != nil {
			return c.usageError("--have %q: want FILE:RANGES, e.g. 0:0-99", h)
		}
		rs, err := tenure.ParseRanges(rangesStr)
		if err != nil {
			return c.usageError("--have %q: %v", h, err)
		}
		b := byFile[uint32(file)]
		for _, r := range rs {
			b.SetRange(r.Start, r.End)
		}
		byFile[uint32(file)] = b
	}
	req := &tenurev1.RequestLeasesRequest{Pool: pos[0], Namespace: c.namespace, Peer: *peer, Max: *maxN}
	files := make([]uint32, 0, len(byFile))
	for f := range byFile {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, f := range files {
		req.Have = append(req.Have, &tenurev1.HaveMap{FileIndex: f, Bits: byFile[f].Bytes()})
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.RequestLeases, req)
	if err != nil {
		return err
	}
	if c.json() {
		if err := writeJSON(stdout, resp); err != nil {
			return err
		}
	}
	if len(resp.GetLeases()) == 0 {
		msg := resp.GetMessage()
		if msg == "" {
			msg = resp.GetRejectedReason().String() + ": nothing granted"
		}
		return &tenure.RejectedError{Reason: tenure.RejectedReason(resp.GetRejectedReason().String()), Message: msg}
	}
	if c.json() {
		return nil
	}
	if err := writePieceLeases(stdout, resp.GetLeases()); err != nil {
		return err
	}
	// Fewer granted than asked for a reason other than the pieces (a
	// quota): the registrar says why in the message, as the json has it.
	if m := resp.GetMessage(); m != "" {
		fmt.Fprintln(stderr, m)
	}
	return nil
}

const poolCompleteHelp = `Report the outcome of a piece leased to a peer: --success (the piece is done
for good, the peer rewarded) or --failure REASON (verification_failed,
network_error, timeout or invalid_data: the piece is wanted again, the peer
penalised). Prints the peer's new ranking. Only the peer holding the piece's
lease may complete it (PIECE_NOT_LEASED otherwise). --lease names the lease
the request granted: a report on a lease that has since expired is then
refused (PIECE_NOT_LEASED) even when the peer was granted the piece again,
instead of ending the new lease. Without it, the report applies to whichever
lease the peer holds on the piece now.

A download that outlasts its piece lease renews it: tenure renew LEASE_ID
--holder PEER (the holder is the peer).

A peer's score starts at 1.0; with the default configuration one failure
(or one expired piece lease) before any success takes a new peer to the
floor, 0.1, below the minimum score 0.2, and its requests are refused
(PEER_RANKING_TOO_LOW) from then on: the score is kept, and decay applies
only at a peer's next outcome, which a refused peer never gets. That is the
seed's formula (rate = successes / (successes + failures)); to give new
peers a second chance, create the pool with a lower --min-score or a
smaller --penalty.`

const poolCompleteExamples = `  # FILE and PIECE as tenure pool request printed them for p1:
  tenure pool complete swarm --peer p1 --file 0 --piece 17 --lease 01M8R3K2J7XW0000000000017Q --success
  tenure pool complete swarm --peer p1 --file 0 --piece 18 --failure verification_failed`

// parsePieceFailureReason accepts "network_error", "NETWORK_ERROR" or
// "FAILURE_REASON_NETWORK_ERROR".
func parsePieceFailureReason(s string) (tenurev1.FailureReason, bool) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "FAILURE_REASON_") {
		name = "FAILURE_REASON_" + name
	}
	v, ok := tenurev1.FailureReason_value[name]
	if !ok || v == 0 {
		return 0, false
	}
	return tenurev1.FailureReason(v), true
}

func runPoolComplete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool complete", "POOL --peer P --file N --piece I [--lease ID] (--success | --failure REASON) [flags]", poolCompleteHelp, poolCompleteExamples, stdout, stderr)
	peer := c.fs.String("peer", "", "the peer holding the piece's lease (required)")
	file := c.uint32Flag("file", 0, "file index (required)")
	piece := c.uint32Flag("piece", 0, "piece index (required)")
	success := c.fs.Bool("success", false, "the piece was fetched and verified")
	failure := c.fs.String("failure", "", "the piece failed: verification_failed, network_error, timeout or invalid_data")
	lease := c.fs.String("lease", "", "the piece lease reported on (its LEASE ID): refused if it is no longer the piece's current lease")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	switch {
	case *peer == "":
		return c.usageError("--peer is required")
	case !c.given("file") || !c.given("piece"):
		return c.usageError("--file and --piece are required")
	case *success == c.given("failure"):
		return c.usageError("give exactly one of --success and --failure REASON")
	case c.given("lease") && *lease == "":
		return c.usageError("--lease is empty: give the LEASE ID the request printed, or leave --lease out")
	}
	req := &tenurev1.CompletePieceRequest{Pool: pos[0], Namespace: c.namespace, Peer: *peer, FileIndex: *file, PieceIndex: *piece,
		Result: tenurev1.CompletionResult_COMPLETION_RESULT_SUCCESS, LeaseId: *lease}
	if !*success {
		reason, ok := parsePieceFailureReason(*failure)
		if !ok {
			return c.usageError("--failure must be verification_failed, network_error, timeout or invalid_data, got %q", *failure)
		}
		req.Result, req.FailureReason = tenurev1.CompletionResult_COMPLETION_RESULT_FAILURE, reason
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.CompletePiece, req)
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	return writePoolRankings(stdout, resp.GetRanking())
}

func writePoolRankings(w io.Writer, rs ...*tenurev1.PeerRanking) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "PEER\tSCORE\tSUCCESSES\tFAILURES\tLEASES")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.4f\t%d\t%d\t%d\n", r.GetPeer(), r.GetScore(), r.GetSuccesses(), r.GetFailures(), r.GetCurrentLeases())
	}
	return tw.Flush()
}

const poolRankingsHelp = `Print the pool's peers by score, highest first: successes, failures and the
piece leases each holds now. A score is as of the peer's last outcome: the
hourly decay is applied at its next one, not when read.`

func runPoolRankings(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool rankings", "POOL [flags]", poolRankingsHelp, "  tenure pool rankings swarm -o json", stdout, stderr)
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.Rankings, &tenurev1.RankingsRequest{Pool: pos[0], Namespace: c.namespace})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	return writePoolRankings(stdout, resp.GetRankings()...)
}

const poolStatsHelp = `Count the pool's pieces by where they stand, in the columns of tenure queue
stats: queued (wanted, free for a peer), leased, succeeded (done); a pool never
gives a piece up or cancels one (failed, dead and cancelled stay 0). Then the
files, their pieces in all, the peers the pool knows and their failures.`

func runPoolStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool stats", "POOL [flags]", poolStatsHelp, "  tenure pool stats swarm -o json", stdout, stderr)
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.Stats, &tenurev1.PoolStatsRequest{Pool: pos[0], Namespace: c.namespace})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	tw := newTable(stdout)
	fmt.Fprintln(tw, "QUEUED\tLEASED\tSUCCEEDED\tFAILED\tDEAD\tCANCELLED\tFILES\tPIECES\tPEERS\tFAILURES")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", resp.GetQueued(), resp.GetLeased(), resp.GetSucceeded(),
		resp.GetFailed(), resp.GetDead(), resp.GetCancelled(), resp.GetFiles(), resp.GetPieces(), resp.GetPeers(), resp.GetFailures())
	return tw.Flush()
}

const poolStatusHelp = `Print a pool's configuration, its files (pieces wanted, leased and done) and
its peers' current piece leases.`

func runPoolStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool status", "POOL [flags]", poolStatusHelp, "  tenure pool status swarm", stdout, stderr)
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.Status, &tenurev1.PoolStatusRequest{Pool: pos[0], Namespace: c.namespace})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	fmt.Fprintf(stdout, "pool %s (namespace %s)\n", resp.GetPool(), resp.GetNamespace())
	if err := writePoolConfig(stdout, resp.GetConfig()); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := writePoolFiles(stdout, resp.GetFiles()...); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	tw := newTable(stdout)
	fmt.Fprintln(tw, "PEER\tLEASES")
	for _, p := range resp.GetPeers() {
		fmt.Fprintf(tw, "%s\t%d\n", p.GetPeer(), p.GetCurrentLeases())
	}
	return tw.Flush()
}

const poolLeasesHelp = `Print the piece leases a peer holds in the pool now (file, piece, lease id,
fence, expiry): what a peer that lost track of its leases (a restart, an
unknown outcome of a request) may still complete, renew or let expire.`

func runPoolLeases(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool leases", "POOL --peer P [flags]", poolLeasesHelp, "  tenure pool leases swarm --peer p1", stdout, stderr)
	peer := c.fs.String("peer", "", "the peer (required)")
	pos, r, err := c.poolAndPeer(args, peer)
	if err != nil {
		return err
	}
	// An unknown pool is POOL_NOT_FOUND, not an empty list.
	if _, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.Status, &tenurev1.PoolStatusRequest{Pool: pos[0], Namespace: c.namespace}); err != nil {
		return err
	}
	// Piece leases are ordinary leases on pool/POOL/FILE/PIECE held by the
	// peer.
	prefix := "pool/" + pos[0] + "/"
	req := &tenurev1.ListRequest{Namespace: c.namespace, Prefix: prefix, Holder: *peer,
		States: []tenurev1.State{tenurev1.State_STATE_ACTIVE}, PageSize: 1000}
	out := &tenurev1.RequestLeasesResponse{}
	for {
		resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.List, req)
		if err != nil {
			return err
		}
		for _, l := range resp.GetLeases() {
			f, p, ok := strings.Cut(strings.TrimPrefix(l.GetResource(), prefix), "/")
			fi, err1 := strconv.ParseUint(f, 10, 32)
			pi, err2 := strconv.ParseUint(p, 10, 32)
			if !ok || err1 != nil || err2 != nil {
				continue
			}
			out.Leases = append(out.Leases, &tenurev1.PieceLease{FileIndex: uint32(fi), PieceIndex: uint32(pi),
				LeaseId: l.GetLeaseId(), Fence: l.GetFence(), ExpiresAt: l.GetExpiresAt()})
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	slices.SortFunc(out.Leases, func(a, b *tenurev1.PieceLease) int {
		return cmp.Or(cmp.Compare(a.GetFileIndex(), b.GetFileIndex()), cmp.Compare(a.GetPieceIndex(), b.GetPieceIndex()))
	})
	if c.json() {
		// {"leases":[…]}: the pieces as RequestLeases answers them.
		b := []byte(`{"leases":[`)
		for i, l := range out.GetLeases() {
			j, err := server.MarshalJSON(l)
			if err != nil {
				return err
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, j...)
		}
		_, err := stdout.Write(append(b, "]}\n"...))
		return err
	}
	return writePieceLeases(stdout, out.GetLeases())
}

// writePieceLeases prints piece leases as a table.
func writePieceLeases(w io.Writer, ls []*tenurev1.PieceLease) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "FILE\tPIECE\tLEASE ID\tFENCE\tEXPIRES")
	for _, l := range ls {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\n", l.GetFileIndex(), l.GetPieceIndex(), l.GetLeaseId(), l.GetFence(), fmtTime(l.GetExpiresAt()))
	}
	return tw.Flush()
}

func runPoolList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool list", "[flags]", "Print the names of the namespace's pools.", "  tenure pool list --namespace swarms", stdout, stderr)
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.ListPools, &tenurev1.ListPoolsRequest{Namespace: c.namespace})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	for _, p := range resp.GetPools() {
		fmt.Fprintln(stdout, p)
	}
	return nil
}

const poolDeleteHelp = `Delete a pool: its piece leases are revoked (reason "pool deleted"; their
peers' completions then fail with POOL_NOT_FOUND), its files, peers and
rankings are dropped, and its pieces no longer count towards the
namespace's max_pool_pieces. A pool of the same name can be created again
(its piece leases' fences go on upward). Deleting a pool that does not
exist changes nothing and says so (exit 0, so that a retry is harmless).
Needs the admin role of the namespace on a server with authentication.`

func runPoolDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool delete", "POOL [flags]", poolDeleteHelp, "  tenure pool delete swarm --namespace swarms", stdout, stderr)
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.DeletePool, &tenurev1.DeletePoolRequest{Pool: pos[0], Namespace: c.namespace})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	ns := cmp.Or(c.namespace, tenure.DefaultNamespace)
	if !resp.GetDeleted() {
		_, err = fmt.Fprintf(stdout, "no pool %s in namespace %s: nothing deleted\n", pos[0], ns)
		return err
	}
	_, err = fmt.Fprintf(stdout, "deleted pool %s (namespace %s): %d files, %d pieces done, %d piece leases revoked\n",
		pos[0], ns, resp.GetFiles(), resp.GetPiecesDone(), resp.GetRevokedLeases())
	return err
}

// poolAndPeer parses the arguments of a command on one peer of a pool
// (POOL --peer P): the pool's name and the remote to call.
func (c *cliCommand) poolAndPeer(args []string, peer *string) ([]string, *remote, error) {
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return nil, nil, err
	}
	if *peer == "" {
		return nil, nil, c.usageError("--peer is required")
	}
	r, err := c.remote()
	return pos, r, err
}

const poolResetPeerHelp = `Give a peer a fresh start in a pool's ranking: score 1.0 (a new peer's),
no successes or failures. A peer whose score fell below the pool's minimum
is refused every request, and only an outcome changes a score (one failure
as a new peer is enough to be refused for good), so a peer that was fixed
needs this. Its current piece leases stay. A peer the pool does not know
changes nothing and says so (exit 0: a retry is harmless). Needs the admin
role of the namespace on a server with authentication, and every member
of the cluster on a build that knows it (UNIMPLEMENTED otherwise).`

func runPoolResetPeer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure pool reset-peer", "POOL --peer P [flags]", poolResetPeerHelp, "  tenure pool reset-peer swarm --peer p2", stdout, stderr)
	peer := c.fs.String("peer", "", "the peer to rank afresh (required)")
	pos, r, err := c.poolAndPeer(args, peer)
	if err != nil {
		return err
	}
	resp, err := poolCall(ctx, r, tenurev1connect.PoolServiceClient.ResetPeer, &tenurev1.ResetPeerRequest{Pool: pos[0], Namespace: c.namespace, Peer: *peer})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp)
	}
	if !resp.GetKnown() {
		_, err = fmt.Fprintf(stdout, "pool %s knows no peer %s: nothing reset\n", pos[0], *peer)
		return err
	}
	b := resp.GetBefore()
	if _, err := fmt.Fprintf(stdout, "reset peer %s in pool %s (was score %.4f, %d successes, %d failures)\n",
		*peer, pos[0], b.GetScore(), b.GetSuccesses(), b.GetFailures()); err != nil {
		return err
	}
	return writePoolRankings(stdout, resp.GetRanking())
}
