package cluster

import (
	"context"
	"time"

	"github.com/tenurehq/tenure/internal/statemachine"
)

// termRules is the rules a leader stamps in one term.
type termRules struct {
	term  uint64
	rules uint32
}

// SetRules sets the rules this node stamps on the commands it proposes
// while it leads in term: the lowest its cluster's members apply (a
// member of an older build applies commands stamped with newer rules by
// its own, and derives other records), found by asking them
// (server.rulesWatch). Never above this build's own.
func (n *Node) SetRules(term uint64, rules uint32) {
	n.rules.Store(&termRules{term: term, rules: min(rules, statemachine.Rules)})
}

// stampRules is the rules for the next entry: those set for the current
// term, or statemachine.UnreportedRules until they are (a new leader has
// not asked the members yet).
func (n *Node) stampRules() uint32 {
	if r := n.rules.Load(); r != nil && r.term == n.raft.CurrentTerm() {
		return r.rules
	}
	return min(statemachine.UnreportedRules, statemachine.Rules)
}

// RulesBefore is the rules stamped on the last command entry applied
// from a term before term: what the leader of an earlier term knew all
// its members to apply (it stamps their lowest). Not known (false) when
// no such entry was applied since the node started or restored a
// snapshot.
func (n *Node) RulesBefore(term uint64) (uint32, bool) {
	p := n.fsm.stamps.Load()
	switch {
	case p == nil:
		return 0, false
	case p.last.term < term:
		return p.last.rules, true
	case p.prev != nil && p.prev.term < term:
		return p.prev.rules, true
	}
	return 0, false
}

// StampRules is the rules this node would stamp on a command now.
func (n *Node) StampRules() uint32 { return n.stampRules() }

// Term is the current Raft term of this node.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// AwaitRules returns the rules this node stamps once they are set for its
// current term, waiting at most wait (a new leader asks its members first:
// milliseconds when they answer); the floor it stamps until then after
// that. A command only newer rules know is decided on it.
func (n *Node) AwaitRules(ctx context.Context, wait time.Duration) uint32 {
	n.pollUntil(ctx, wait, func() bool {
		r := n.rules.Load()
		return r != nil && r.term == n.raft.CurrentTerm()
	})
	return n.stampRules()
}
