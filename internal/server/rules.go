package server

import (
	"context"
	"sync"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// rulesEvery is how often the leader asks the members for their rules; a
// new term is noticed within rulesLook.
const (
	rulesEvery = time.Second
	rulesLook  = 10 * time.Millisecond
)

// rulesWatch keeps, while this member leads, the rules it stamps on
// commands at the lowest its members apply (cluster.Node.SetRules): a
// member of an older build applies commands stamped with newer rules by
// its own, older ones, and would write other records than the rest
// (found from outside: a rolling upgrade left two signed ledgers that
// disagree). Each member says its rules in Status; one that says none (a
// build from before they were reported) counts as
// statemachine.UnreportedRules; one that has not answered in this term
// counts as what the leader of the term before stamped, when it was a
// member then (that leader stamped its members' lowest), and as
// statemachine.UnreportedRules otherwise. (It counted as the latter
// alone: found from outside, a leader elected while a member was down,
// its predecessor say, stamped rules 3 until that member came back:
// dead tasks were pruned after an hour, and ResetPeer was refused as
// UNIMPLEMENTED, on a cluster all of one build.)
func (s *Server) rulesWatch() {
	defer s.bg.Done()
	tick := time.NewTicker(rulesLook)
	defer tick.Stop()
	clients := map[string]tenurev1connect.ClusterServiceClient{}
	var (
		term  uint64
		asked time.Time
		heard = map[string]uint32{} // member id → rules, this term
		prior = map[string]bool{}   // the members when this term was noticed
	)
	for {
		if t := s.node.Term(); s.node.IsLeader() && (t != term || time.Since(asked) >= rulesEvery) {
			if t != term {
				term = t
				clear(heard)
				clear(prior)
				if st, err := s.node.Status(); err == nil {
					for _, m := range st.Members {
						prior[m.ID] = true
					}
				}
			}
			asked = time.Now()
			s.askRules(clients, heard)
			if s.node.Term() == term && s.node.IsLeader() {
				s.node.SetRules(term, s.lowestRules(term, heard, prior))
			}
		}
		select {
		case <-s.closing:
			return
		case <-tick.C:
		}
	}
}

// askRules asks every other member, at once, for its rules, noting each
// answer in heard.
func (s *Server) askRules(clients map[string]tenurev1connect.ClusterServiceClient, heard map[string]uint32) {
	st, err := s.node.Status()
	if err != nil {
		return
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, m := range st.Members {
		if m.ID == s.node.ID() || m.APIAddress == "" {
			continue
		}
		cl, ok := clients[m.APIAddress]
		if !ok {
			cl = tenurev1connect.NewClusterServiceClient(s.fwd.http, s.fwd.scheme+m.APIAddress)
			clients[m.APIAddress] = cl
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(s.ctx, rulesEvery)
			defer cancel()
			req := connect.NewRequest(&tenurev1.StatusRequest{})
			s.fwd.own(req.Header())
			resp, err := cl.Status(ctx, req)
			if err != nil || resp.Msg.GetNodeId() != m.ID {
				return // not heard: what it said before in this term stands
			}
			s.reports.note(m.ID, resp.Msg)
			r := resp.Msg.GetRules()
			if r == 0 {
				r = statemachine.UnreportedRules
			}
			mu.Lock()
			heard[m.ID] = r
			mu.Unlock()
		})
	}
	wg.Wait()
}

// lowestRules is the lowest rules of the members of the configuration in
// term: this build's own, what each other member said in this term, and
// for one not heard from, what the leader of an earlier term stamped
// when the member was one at the start of this term (prior), else
// statemachine.UnreportedRules.
func (s *Server) lowestRules(term uint64, heard map[string]uint32, prior map[string]bool) uint32 {
	low := s.ownRules()
	unheard := uint32(statemachine.UnreportedRules)
	if before, ok := s.node.RulesBefore(term); ok {
		unheard = max(unheard, before)
	}
	st, err := s.node.Status()
	if err != nil {
		return min(low, statemachine.UnreportedRules)
	}
	for _, m := range st.Members {
		if m.ID == s.node.ID() {
			continue
		}
		r, ok := heard[m.ID]
		switch {
		case ok:
		case prior[m.ID]:
			r = unheard
		default:
			r = statemachine.UnreportedRules
		}
		low = min(low, r)
	}
	return low
}

// ownRules is the rules this member says it applies (Status).
func (s *Server) ownRules() uint32 {
	if r := s.reportRules.Load(); r != 0 {
		return r
	}
	return statemachine.Rules
}

// memberReports keeps what each other member said in its last Status
// answer to the leader (askRules): how far it applied the log, and why its
// own Raft log cannot be written, if so. A member whose disk filled still
// answers heartbeats, so the leader's view of Raft calls it healthy; only
// its own word says it does not replicate (found from outside: a follower
// with a full disk showed as a healthy follower in the leader's status).
type memberReports struct {
	mu sync.Mutex
	by map[string]memberReport
}

type memberReport struct {
	applied    uint64
	logFailure string
	at         time.Time
}

// reportFresh is how long a member's report is shown: a few of the
// leader's asks (one a second).
const reportFresh = 5 * time.Second

func (r *memberReports) note(id string, st *tenurev1.StatusResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]memberReport{}
	}
	r.by[id] = memberReport{applied: st.GetAppliedIndex(), logFailure: st.GetLogFailure(), at: time.Now()}
}

// fill sets m's applied_index and log_failure from its report, if fresh.
func (r *memberReports) fill(m *tenurev1.Member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep, ok := r.by[m.Id]; ok && time.Since(rep.at) < reportFresh {
		m.AppliedIndex, m.LogFailure = rep.applied, rep.logFailure
	}
}

// ownLogFailure is why this member's Raft log cannot be written ("" when
// it can).
func (s *Server) ownLogFailure() string {
	if f := s.reportLogFailure.Load(); f != nil {
		return *f
	}
	if err := s.node.LogFailure(); err != nil {
		return err.Error()
	}
	return ""
}
