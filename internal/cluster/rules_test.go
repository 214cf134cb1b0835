package cluster

import (
	"testing"

	"github.com/tenurehq/tenure/internal/statemachine"
)

// TestStampRulesOfTheTerm: a leader stamps the rules set for its current
// term, never above this build's own; rules set for another term (an
// earlier leadership) give way to the floor until set again.
func TestStampRulesOfTheTerm(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	if got := n.StampRules(); got != min(statemachine.UnreportedRules, statemachine.Rules) {
		t.Fatalf("before any SetRules: %d", got)
	}
	n.SetRules(n.Term(), statemachine.Rules-1)
	if got := n.StampRules(); got != statemachine.Rules-1 {
		t.Fatalf("set for this term: %d, want %d", got, statemachine.Rules-1)
	}
	n.SetRules(n.Term(), statemachine.Rules+5)
	if got := n.StampRules(); got != statemachine.Rules {
		t.Fatalf("set above this build's own: %d, want %d", got, statemachine.Rules)
	}
	n.SetRules(n.Term()+1, statemachine.Rules-2)
	if got := n.StampRules(); got != min(statemachine.UnreportedRules, statemachine.Rules) {
		t.Fatalf("set for another term: %d, want the floor", got)
	}
}
