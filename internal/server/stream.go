package server

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	v1c "github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// watchBatch bounds the records read from the feed per wake-up.
const watchBatch = 512

// Watch streams events matching the namespace ("" = every namespace) and
// resource prefix. With after_index it resumes after that index (from the
// in-memory feed; an index that has left it is INVALID_ARGUMENT); without,
// it starts live. Headers are flushed as soon as the stream is open. With
// progress_interval, a stream quiet for that long is sent how far it has
// got (a response without an event).
func (h *leaseService) Watch(ctx context.Context, req *connect.Request[tenurev1.WatchRequest], stream *connect.ServerStream[tenurev1.WatchResponse]) error {
	s, m := h.s, req.Msg
	if err := registrar.CheckNamespace("namespace", m.Namespace, false); err != nil {
		return s.toConnect(err)
	}
	if err := registrar.CheckPrefix("prefix", m.Prefix); err != nil {
		return s.toConnect(err)
	}
	interval, err := progressInterval(m.ProgressInterval)
	if err != nil {
		return s.toConnect(err)
	}
	if err := s.authorize(ctx, v1c.LeaseServiceWatchProcedure, m); err != nil {
		return s.toConnect(err)
	}
	visible := watchScope(ctx)
	feed := s.node.Feed()
	// Registered first: what is appended from here on is offered to w,
	// and whatever of it is read in order below is skipped there.
	w := s.watchers.add(m.Namespace, m.Prefix)
	defer s.watchers.remove(w)
	after := m.AfterIndex
	if after == 0 {
		after = feed.Head()
	}
	if err := stream.Send(nil); err != nil { // flush headers
		return err
	}
	if err := s.awaitHead(ctx, feed, after); err != nil {
		return s.toConnect(err)
	}
	retained := s.retainedSince(ctx)
	// Progress notifications, when asked for: progress fires once the
	// stream has sent nothing for the interval (nil, never, without them).
	// sent says an event went out since the timer was last set; the timer
	// is set again lazily, not on every event, which a busy stream sends
	// by the thousand.
	var progress <-chan time.Time
	var progressTimer *time.Timer
	sent := false
	if interval > 0 {
		progressTimer = time.NewTimer(interval)
		defer progressTimer.Stop()
		progress = progressTimer.C
	}
	notify := func() error {
		if sent { // the stream was not quiet: the interval starts again
			sent = false
		} else if err := stream.Send(&tenurev1.WatchResponse{ProgressIndex: proto.Uint64(after)}); err != nil {
			return err
		}
		progressTimer.Reset(interval)
		return nil
	}
	send := func(sl statemachine.Sealed) error {
		after = sl.Record.Index
		if ns, res := eventScope(sl.Record); !w.matches(ns, res) || !visible(ns) || !retained(ns, sl.Record) {
			return nil
		}
		m, err := s.events.response(sl)
		if err != nil {
			return err
		}
		sent = true
		return stream.Conn().Send(m)
	}
	// A resume reads the feed in order up to its head, as does a watcher
	// whose pending indexes ran over; otherwise only the records the hub
	// offered are read.
	inOrder := m.AfterIndex != 0
	hw := heldWriterOf(ctx) // one flush per round of events, not per event
	defer hw.release()
	// Every second: a member removed from the cluster hears of no more
	// records, so the watch ends and the caller goes on from another
	// member; and a token revoked since the watch began ends it.
	recheck := time.NewTicker(watchRecheck)
	defer recheck.Stop()
	stillWanted := func() error {
		if err := s.stillValid(ctx, req.Header()); err != nil {
			return err
		}
		if !s.node.IsVoter() {
			return s.toConnect(notVoter(after))
		}
		return nil
	}
	for {
		select {
		case <-recheck.C: // a busy watch too
			if err := stillWanted(); err != nil {
				return err
			}
		case <-progress: // a watch reading records that match nothing too
			if err := notify(); err != nil {
				return err
			}
		default:
		}
		hw.hold()
		if inOrder {
			recs, _, err := feed.Read(after, watchBatch)
			if err != nil {
				// The records after it have left the feed (a resume from an
				// older index, or a watcher that fell behind): the ledger
				// files hold them.
				if after, err = s.watchFromLedger(ctx, after, w, visible, retained, send); err != nil {
					return s.toConnect(err)
				}
				continue
			}
			s.node.Settle(ctx) // no expiry shown before its deadline
			for _, sl := range recs {
				if err := send(sl); err != nil {
					return err
				}
			}
			if len(recs) == watchBatch {
				continue
			}
			inOrder = false
		}
		// Read before take: a record is offered to w under the same lock
		// as it is appended, so every matching record up to head is among
		// the indexes taken, now or before.
		head := feed.Head()
		idxs, overflow := w.take()
		if overflow {
			inOrder = true
			continue
		}
		if len(idxs) > 0 {
			s.node.Settle(ctx)
		}
		for _, i := range idxs {
			if i <= after {
				continue
			}
			sl, ok := feed.At(i)
			if !ok {
				inOrder = true // left the feed meanwhile: read in order, from the files
				break
			}
			if err := send(sl); err != nil {
				return err
			}
		}
		if len(idxs) > 0 {
			continue
		}
		// Nothing pending: every matching record up to head has been sent,
		// so the watch has got to head, not only to the last record it
		// sent, and a progress notification (or an error naming where to
		// resume) says so.
		after = max(after, head)
		if sent && progressTimer != nil {
			sent = false
			progressTimer.Reset(interval)
		}
		hw.release()
		select {
		case <-progress:
			if err := notify(); err != nil {
				return err
			}
		case <-w.wake:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The caller's deadline: say so, so that it is not taken
				// for the end of the feed.
				// With its reason and where to resume, as every error.
				return wireError(connect.CodeDeadlineExceeded, registrar.ReasonDeadlineExceeded, map[string]string{"last_index": utoa(after)},
					"DEADLINE_EXCEEDED: the watch reached the caller's deadline; resume after index "+utoa(after))
			}
			return nil // the caller went away
		case <-s.closing:
			return errShuttingDown()
		case <-recheck.C:
			if err := stillWanted(); err != nil {
				return err
			}
		}
	}
}

// watchFromLedger sends a watch the records after index after that have
// left the feed, from this member's ledger files, a chunk at a time until
// the feed holds the rest, and returns the index it got to. Events not
// retained (older than their namespace's history retention, which History
// does not answer either) are not sent, and each chunk after the first
// costs the caller one request of its rate limit (a chunk may be read
// whole and send the caller nothing). When the files do not hold the
// records either (pruned, a member begun from a snapshot) the watch ends
// with the compacted error, which names the index the member can resume
// from: the caller resumes there, from another member, or reads the
// state again.
func (s *Server) watchFromLedger(ctx context.Context, after uint64, w *watcher, visible func(string) bool,
	retained func(string, *logpb.Record) bool, send func(statemachine.Sealed) error) (uint64, error) {
	feed := s.node.Feed()
	for chunk := 0; ; chunk++ {
		oldest := feed.Oldest()
		if oldest == 0 || after+1 >= oldest {
			return after, nil
		}
		if p := principalOf(ctx); p != nil && chunk > 0 {
			if err := s.charge(p, 1); err != nil {
				return after, err
			}
		}
		found, err := s.node.ReadLedger(ctx, ledger.Query{From: after + 1, To: oldest, MaxBytes: cmp.Or(s.cfg.WatchReadBytes, DefaultWatchReadBytes),
			Keep: func(rec *logpb.Record) bool {
				ns, res := eventScope(rec)
				return w.matches(ns, res) && visible(ns) && retained(ns, rec)
			}})
		if err != nil {
			return after, err
		}
		if found.From != after+1 || found.Next <= after+1 {
			from := oldest // the files begin where they do: resume from there
			if found.From > after+1 && found.From < oldest {
				from = found.From
			}
			return after, cluster.Compacted(after, from)
		}
		for _, r := range found.Records {
			if err := send(statemachine.Sealed{Record: r.Record, Bytes: r.Bytes, Hash: r.Hash}); err != nil {
				return after, err
			}
		}
		after = found.Next - 1
	}
}

// retainedSince returns whether a record of namespace ns is within that
// namespace's history retention, measured from this member's registrar
// time when the namespace is first asked about (a watch's live events
// are; a resumed one's older events may not be). Records of no
// namespace are.
func (s *Server) retainedSince(ctx context.Context) func(ns string, rec *logpb.Record) bool {
	cutoffs := map[string]registrar.Tick{}
	return func(ns string, rec *logpb.Record) bool {
		if ns == "" {
			return true
		}
		cutoff, ok := cutoffs[ns]
		if !ok {
			err := s.node.Read(ctx, true, func(mc *statemachine.Machine, t registrar.Tick) error {
				cutoff = t - registrar.Tick(mc.Registrar().Policy(ns).HistoryRetention)
				return nil
			})
			if err != nil {
				return true // the read ends with ctx: what is sent no longer matters
			}
			cutoffs[ns] = cutoff
		}
		return registrar.Tick(rec.Tick) >= cutoff
	}
}

// notVoter ends a watch on a member that is not a voter, after index after.
func notVoter(after uint64) error {
	return &registrar.Error{Reason: registrar.ReasonUnavailable,
		Metadata: map[string]string{"last_index": utoa(after)},
		Message: string(registrar.ReasonUnavailable) + ": this member is not a voter of the cluster's configuration " +
			"(removed, or not yet added) and hears of no new events: watch from another member, after index " + utoa(after)}
}

// Bounds of WatchRequest.progress_interval: more often than 100 ms would
// be a busy loop over the network, and an hour is more than any proxy
// keeps an idle stream open.
const (
	minProgressInterval = 100 * time.Millisecond
	maxProgressInterval = time.Hour
)

// progressInterval returns a Watch's progress interval, 0 for none.
func progressInterval(d *durationpb.Duration) (time.Duration, error) {
	if _, err := durationMs("progress_interval", d); err != nil || d == nil {
		return 0, err
	}
	// AsDuration saturates at ±292 years, which is out of range all the
	// same; compared as it is, not rounded to the millisecond, so that
	// 99.9 ms is below the floor.
	iv := d.AsDuration()
	if iv == 0 {
		return 0, nil
	}
	if iv < minProgressInterval || iv > maxProgressInterval {
		return 0, invalidArg("progress_interval", "must be 0 (none) or between "+minProgressInterval.String()+" and "+maxProgressInterval.String())
	}
	return iv, nil
}

// watchRecheck is how often a quiet Watch checks that its member is
// still in the cluster and its token still valid.
const watchRecheck = time.Second

// watchAhead is how often a Watch resuming past this member's last record
// checks whether the member is in step with the cluster.
const watchAhead = 2 * time.Second

// awaitHead waits until the feed holds the record after is the index of.
// A member in step with the cluster (the leader, or a follower that has
// applied what the leader committed) that still lacks it after
// watchAhead refuses the index: it names a record this cluster never had
// (another cluster's index, a data dir wiped since), and waiting for it
// would keep the watcher silent. A member catching up keeps waiting.
func (s *Server) awaitHead(ctx context.Context, feed *cluster.Feed, after uint64) error {
	timer := time.NewTimer(watchAhead)
	defer timer.Stop()
	voter := time.NewTicker(watchRecheck)
	defer voter.Stop()
	for {
		_, changed, err := feed.Read(after, 0)
		if err != nil {
			return nil // before the feed: the ledger files' to send
		}
		head := feed.Head()
		if head >= after {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-voter.C:
			if !s.node.IsVoter() { // a removed member will not reach after
				return notVoter(after)
			}
		case <-timer.C:
			if !s.inStep(ctx) {
				timer.Reset(watchAhead)
				continue
			}
			return registrar.NewError(registrar.ReasonInvalidArgument,
				map[string]string{"field": "after_index", "head_index": utoa(head)},
				"after_index: %d is past the last record, %d: an index of another cluster, or of a data dir wiped since? "+
					"Watch from now (no after_index) after reading the state again", after, head)
		}
	}
}

// inStep reports whether this member has applied what the cluster
// committed: it leads, or follows and has caught up (readiness).
func (s *Server) inStep(ctx context.Context) bool {
	if s.node.IsLeader() {
		return true
	}
	if !s.node.Ready(ctx) {
		return false
	}
	ok, _ := s.caughtUp(ctx)
	return ok
}

// KeepAlive renews the leases named in each message and answers each with
// the renewed leases and per-lease failures, echoing request_id. Invalid
// input or a cluster error ends the stream with that error. Once a message
// sets notify_ended, the stream also sends, unasked (request_id 0), the
// failures of leases it renewed that end other than by their holder's
// release (endHub).
func (h *leaseService) KeepAlive(ctx context.Context, stream *connect.BidiStream[tenurev1.KeepAliveRequest, tenurev1.KeepAliveResponse]) error {
	s := h.s
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Messages are received on their own goroutine so that the stream can
	// send ends while it waits for the next one.
	msgs := make(chan *tenurev1.KeepAliveRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var ends *endWatch
	defer func() {
		if ends != nil {
			s.ends.remove(ends)
		}
	}()
	for {
		var wake chan struct{}
		if ends != nil {
			wake = ends.wake
		}
		var m *tenurev1.KeepAliveRequest
		select {
		case m = <-msgs:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-wake:
			if f := s.ends.take(ends); len(f) > 0 {
				if err := stream.Send(&tenurev1.KeepAliveResponse{Failures: f}); err != nil {
					return err
				}
			}
			continue
		}
		if err := s.stillValid(ctx, stream.RequestHeader()); err != nil {
			return err
		}
		if m.NotifyEnded && ends == nil {
			ends = s.ends.add()
		}
		if len(m.FollowLeaseIds) > 0 {
			if err := s.followEnds(ctx, m.FollowLeaseIds, ends); err != nil {
				return err
			}
			if len(m.LeaseIds) == 0 {
				continue // a follow alone is not answered
			}
		}
		resp, err := s.keepAlive(ctx, m, stream.RequestHeader(), ends)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-s.closing:
			return errShuttingDown()
		default:
		}
	}
}

// followEnds has ends follow the leases named (follow_lease_ids) that the
// caller may renew, and tells at once those that have ended already. It
// does nothing without notify_ended (ends nil).
func (s *Server) followEnds(ctx context.Context, ids []string, ends *endWatch) error {
	if ends == nil {
		return nil
	}
	if p := principalOf(ctx); p != nil {
		if err := s.charge(p, 1); err != nil {
			return s.toConnect(err)
		}
	}
	ids, _ = splitLeaseIDs(ids)
	own, _, err := s.ownLeases(ctx, ids)
	if err != nil || len(own) == 0 {
		return nil // not known here (yet): its first renewal follows it
	}
	// Followed before the look, so that an end applied between the two is
	// told by the hub, and one applied before by the look.
	s.ends.follow(ends, leaseSeqs(own)...)
	type end struct {
		seq uint64
		f   *tenurev1.RenewFailure
	}
	var gone []end
	_ = s.node.Read(ctx, true, func(m *statemachine.Machine, t registrar.Tick) error {
		for _, id := range own {
			if l, err := m.Registrar().Get(id, t); err == nil && l.State.Terminal() {
				gone = append(gone, end{l.Fence, endedFailureOf(l)})
			}
		}
		return nil
	})
	for _, e := range gone {
		s.ends.endedBefore(ends, e.seq, e.f)
	}
	return nil
}

// keepAlive answers one KeepAlive message; ends, when set, follows the
// leases it renews.
func (s *Server) keepAlive(ctx context.Context, m *tenurev1.KeepAliveRequest, header http.Header, ends *endWatch) (*tenurev1.KeepAliveResponse, error) {
	p := principalOf(ctx)
	if p != nil {
		if err := s.charge(p, 1); err != nil {
			return nil, s.toConnect(err)
		}
	}
	resp := &tenurev1.KeepAliveResponse{RequestId: m.RequestId}
	// A malformed message is answered with its failures, not by ending
	// the stream, which would stop the keepalive of every other lease on
	// it: a malformed id fails on its own and the others are renewed; a
	// bad ttl or an empty message fails whole.
	ids, bad := splitLeaseIDs(m.LeaseIds)
	ttl, err := durationMs("ttl", m.Ttl)
	if err == nil {
		err = positiveTTL("ttl", ttl)
	}
	if err == nil && len(ids) == 0 && len(bad) == 0 {
		err = invalidArg("lease_ids", "name at least one lease")
	}
	c := &logpb.Renew{LeaseIds: ids, TtlMs: ttl}
	if err == nil && len(ids) > 0 {
		err = validateRenew(c)
	}
	if err != nil || len(ids) == 0 {
		if err != nil {
			bad = append(bad, registrar.Failure{Err: err})
		}
		resp.Failures = failures(bad)
		return resp, nil
	}
	// Each message is a Renew, authorized as one: the holder is the
	// caller, so only its own leases are renewed.
	rr := &tenurev1.RenewRequest{LeaseIds: ids, Ttl: m.Ttl}
	if p != nil {
		if err := s.authorize(ctx, v1c.LeaseServiceRenewProcedure, rr); err != nil {
			return nil, s.toConnect(err)
		}
	}
	c.Holder = rr.Holder
	if fr, ok, err := s.forward(ctx, v1c.LeaseServiceRenewProcedure, rr, header); ok {
		if err := keepAliveForwarded(resp, fr, err, c.LeaseIds); err != nil {
			return nil, err
		}
		resp.Failures = append(failures(bad), resp.Failures...)
		if ends != nil {
			// Followed from the leader's answer: an end applied here
			// before it is caught by the next renewal instead.
			seqs := make([]uint64, len(resp.Leases))
			for i, l := range resp.Leases {
				seqs[i] = l.GetFence()
			}
			s.ends.follow(ends, seqs...)
		}
		return resp, nil
	}
	// Leases the caller may not renew are listed as failures.
	own, denied, err := s.ownLeases(ctx, c.LeaseIds)
	if err != nil {
		return nil, s.toConnect(err)
	}
	c.LeaseIds = own
	if ends != nil {
		// Followed before the renewal is proposed, so that no end applied
		// after it goes unnoticed; those the renewal fails are dropped.
		s.ends.follow(ends, leaseSeqs(own)...)
	}
	var out registrar.Outcome
	if len(own) > 0 {
		cmd := &logpb.Command{Op: &logpb.Command_Renew{Renew: c}}
		stampActor(ctx, cmd)
		res, err := s.node.Propose(ctx, cmd)
		if err != nil {
			return nil, s.toConnect(err)
		}
		out = res.Outcome
	}
	if out.Err != nil {
		// A single-id renew answers its failure as Err; list it instead.
		id := ""
		if len(c.LeaseIds) == 1 {
			id = c.LeaseIds[0]
		}
		out.Failures = append(out.Failures, registrar.Failure{LeaseID: id, Err: out.Err})
		s.metrics.rejections.WithLabelValues(string(registrar.ReasonOf(out.Err))).Inc()
	}
	if ends != nil && len(out.Failures) > 0 {
		failed := make([]string, len(out.Failures))
		for i, f := range out.Failures {
			failed[i] = f.LeaseID
		}
		s.ends.unfollow(ends, leaseSeqs(failed)...)
	}
	out.Failures = append(append(bad, denied...), out.Failures...)
	if resp.Leases, err = s.leaseProtos(out.Leases, false); err != nil {
		return nil, s.toConnect(err)
	}
	resp.Failures = failures(out.Failures)
	return resp, nil
}

// leaseSeqs returns the fences of well-formed lease ids.
func leaseSeqs(ids []string) []uint64 {
	seqs := make([]uint64, 0, len(ids))
	for _, id := range ids {
		if _, _, seq, err := registrar.ParseLeaseID(id); err == nil {
			seqs = append(seqs, seq)
		}
	}
	return seqs
}

// splitLeaseIDs separates well-formed lease ids from malformed ones,
// listed as failures.
func splitLeaseIDs(ids []string) (ok []string, bad []registrar.Failure) {
	for i, id := range ids {
		if err := registrar.CheckLeaseIDText("lease_ids["+strconv.Itoa(i)+"]", id); err != nil {
			bad = append(bad, registrar.Failure{LeaseID: id, Err: err})
		} else {
			ok = append(ok, id)
		}
	}
	return ok, bad
}

// keepAliveForwarded fills a KeepAlive answer from a Renew the leader
// answered: a single-id renewal's rejection becomes a listed failure, as
// locally; a cluster error (unavailable, canceled…) ends the stream.
func keepAliveForwarded(resp *tenurev1.KeepAliveResponse, fr connect.AnyResponse, err error, ids []string) error {
	if err == nil {
		rr := fr.Any().(*tenurev1.RenewResponse)
		resp.Leases, resp.Failures = rr.Leases, rr.Failures
		return nil
	}
	pe := pipelineError(err)
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeCanceled, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeInternal:
		return err
	}
	if pe.Reason == "" || pe.Reason == string(registrar.ReasonInvalidArgument) {
		return err
	}
	id := ""
	if len(ids) == 1 {
		id = ids[0]
	}
	resp.Failures = append(resp.Failures, &tenurev1.RenewFailure{LeaseId: id, Reason: pe.Reason, Message: pe.Message})
	return nil
}

// watchScope returns which event namespaces the caller may see: all
// without authentication; else those matching its patterns, and events
// of no namespace (cluster-wide ones) only for a caller of every
// namespace.
func watchScope(ctx context.Context) func(ns string) bool {
	p := principalOf(ctx)
	if p == nil {
		return func(string) bool { return true }
	}
	return func(ns string) bool {
		if ns == "" {
			return p.AllNamespaces()
		}
		return p.InNamespace(ns)
	}
}
