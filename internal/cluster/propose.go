package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// proposal is one command waiting for its result: on done (Propose), or
// handed to then (ProposeThen).
type proposal struct {
	cmd  *logpb.Command
	done chan proposalResult
	then func(statemachine.Result, error)
}

// answer hands the proposal its result.
func (p *proposal) answer(r proposalResult) {
	if p.then != nil {
		p.then(r.res, r.err)
		return
	}
	p.done <- r
}

type proposalResult struct {
	res statemachine.Result
	err error
}

// inflight is one proposed Raft entry and the proposals it carries.
type inflight struct {
	future raft.ApplyFuture
	data   []byte
	batch  []*proposal
	start  time.Time
	// term and tick are the entry's stamp (see expiresAny).
	term *term
	tick registrar.Tick
}

// Propose replicates one command and returns what applying it produced.
// The command's tick and wall are stamped by the leader. Errors are
// *registrar.Error with reason NOT_LEADER (nothing was proposed),
// OUTCOME_UNKNOWN (it may have been applied) or UNAVAILABLE, or the
// context's error when ctx ends before the command was handed over. A
// rejection by the registrar is in Result.Outcome.Err, not in the error.
func (n *Node) Propose(ctx context.Context, cmd *logpb.Command) (statemachine.Result, error) {
	if n.leader.Load() == nil {
		return statemachine.Result{}, n.notLeader()
	}
	p := &proposal{cmd: cmd, done: make(chan proposalResult, 1)}
	select {
	case n.in <- p:
	case <-ctx.Done():
		return statemachine.Result{}, ctx.Err()
	case <-n.stop:
		return statemachine.Result{}, unavailable("the node is shutting down")
	}
	select {
	case r := <-p.done:
		return r.res, r.err
	case <-ctx.Done():
		return statemachine.Result{}, n.outcomeUnknown("request_ended", "the request ended before its commit was confirmed")
	}
}

// ProposeThen is Propose for a caller that does not wait: it hands cmd
// to the proposer and returns, and then receives what Propose would have
// returned. then runs on the node's completion goroutine, in commit
// order, so it must be quick and must not block (nor read the state
// machine, which the next entry may be holding). ctx bounds only the
// hand-over: once the command is proposed, then always runs with its
// result.
func (n *Node) ProposeThen(ctx context.Context, cmd *logpb.Command, then func(statemachine.Result, error)) {
	if n.leader.Load() == nil {
		then(statemachine.Result{}, n.notLeader())
		return
	}
	select {
	case n.in <- &proposal{cmd: cmd, then: then}:
	case <-ctx.Done():
		then(statemachine.Result{}, ctx.Err())
	case <-n.stop:
		then(statemachine.Result{}, unavailable("the node is shutting down"))
	}
}

func unavailable(why string) error {
	return &registrar.Error{Reason: registrar.ReasonUnavailable,
		Message: string(registrar.ReasonUnavailable) + ": " + why + "; nothing was proposed"}
}

// propose is the proposer loop: it drains arrived commands into one batch,
// stamps them with one tick and proposes the batch as one Raft entry.
// With MaxInflightEntries entries proposed and not yet applied it waits
// (group commit): the commands that arrive while an entry is written
// share the next one instead of each taking its own entry, which costs
// Raft, the log and the FSM far more per command.
func (n *Node) propose() {
	defer n.wg.Done()
	defer close(n.inflight)
	var clock stamper
	batch := make([]*proposal, 0, n.cfg.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case <-n.stop:
			n.drainProposals()
			return
		case p := <-n.in:
			batch = append(batch, p)
		}
		// Group commit: while the maximum of entries is in flight, hold
		// the batch open so that what arrives meanwhile shares one entry.
		select {
		case n.slots.take() <- struct{}{}:
		case <-n.stop:
			batch[0].answer(proposalResult{err: unavailable("the node is shutting down")})
			n.drainProposals()
			return
		}
	fill:
		for len(batch) < n.cfg.MaxBatch {
			select {
			case p := <-n.in:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		t := n.leader.Load()
		if t == nil {
			err := n.notLeader()
			for _, p := range batch {
				p.answer(proposalResult{err: err})
			}
			n.slots.put()
			continue
		}
		tick := clock.stamp(t, n.fsm.maxTick.load())
		wall := t.wall()
		cmds := make([]*logpb.Command, len(batch))
		for i, p := range batch {
			p.cmd.Tick, p.cmd.Wall = int64(tick), wall
			cmds[i] = p.cmd
		}
		b := n.fsm.batchOf(cmds, n.stampRules())
		data, err := proto.Marshal(b)
		if err != nil {
			for _, p := range batch {
				p.answer(proposalResult{err: unavailable("encoding the command: " + err.Error())})
			}
			n.slots.put()
			continue
		}
		n.metrics.batchSize.Observe(float64(len(batch)))
		n.slots.hold(data)
		f := n.raft.Apply(data, n.cfg.ApplyTimeout)
		n.inflight <- &inflight{future: f, data: data, batch: append([]*proposal(nil), batch...), start: time.Now(), term: t, tick: tick}
	}
}

func (n *Node) drainProposals() {
	for {
		select {
		case p := <-n.in:
			p.answer(proposalResult{err: unavailable("the node is shutting down")})
		default:
			return
		}
	}
}

// complete waits for proposed entries, in order, and routes each command's
// result to its caller.
func (n *Node) complete() {
	defer n.wg.Done()
	for in := range n.inflight {
		// Once Raft is down, an entry it never answered may or may not
		// have been applied: OUTCOME_UNKNOWN (raftError).
		err := awaitFuture(in.future, n.raftDown, raft.ErrRaftShutdown)
		n.slots.release(in.data)
		var results []statemachine.Result
		if err == nil {
			switch r := in.future.Response().(type) {
			case []statemachine.Result:
				results = r
			case error:
				err = r
			}
		}
		n.metrics.applyLatency.Observe(time.Since(in.start).Seconds())
		if err == nil && len(results) != len(in.batch) {
			err = errors.New("result count does not match the batch")
		}
		if err != nil {
			err = n.raftError(err)
		} else if expiresAny(results) {
			// Stamped with the clock rounded up, the entry ended a lease
			// whose deadline the clock may not have reached yet: its
			// callers (one granted the resource, say) hear of it once it
			// has (term.settle). Entries that expire nothing, nearly all,
			// are answered at once.
			in.term.settle(in.term.ctx, in.tick)
		}
		for i, p := range in.batch {
			if err != nil {
				p.answer(proposalResult{err: err})
			} else {
				p.answer(proposalResult{res: results[i]})
			}
		}
	}
}

// expiresAny reports whether results hold a lease's expiry.
func expiresAny(results []statemachine.Result) bool {
	for _, r := range results {
		for _, sl := range r.Records {
			if e := sl.Record.GetEnded(); e != nil && e.State == tenurev1.State_STATE_EXPIRED {
				return true
			}
		}
	}
	return false
}

// raftError classifies a failed apply: refused before appending (nothing
// proposed) or broken off after (outcome unknown).
func (n *Node) raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return n.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return unavailable("raft did not accept the command in time")
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Raft refuses new entries while it hands leadership over, before
		// appending them: nothing was proposed, so the caller may retry
		// (it used to answer OUTCOME_UNKNOWN, found by the fault tests).
		return &registrar.Error{Reason: registrar.ReasonNotLeader,
			Message:  string(registrar.ReasonNotLeader) + ": this node is handing its leadership over; nothing was proposed, retry shortly",
			Metadata: map[string]string{"leader_id": "", "leader": ""}}
	}
	return n.outcomeUnknown("raft", err.Error())
}

// stamper hands out the ticks the proposer stamps on batches: the term's
// clock, never below the last applied tick nor below what it stamped
// before in the same term.
type stamper struct {
	term *term
	last registrar.Tick
}

// stamp returns the tick for the next batch of term t. What an earlier
// term stamped does not count: a leader that was paused or cut off keeps
// stamping ticks from its own clock on entries that never commit, and
// carrying those into a later term of the same node moved registrar time
// forward by the pause, expiring leases early (the fault tests' soak run
// found it). What did commit is in applied.
func (s *stamper) stamp(t *term, applied registrar.Tick) registrar.Tick {
	if s.term != t {
		s.term, s.last = t, 0
	}
	s.last = max(t.now(), s.last, applied)
	return s.last
}
