package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// scopeFlags are the --scope-* and --budget flags of acquire and derive.
type scopeFlags struct {
	namespaces, prefixes, actions, budget string
}

func (c *cliCommand) scopeFlags() *scopeFlags {
	s := &scopeFlags{}
	c.fs.StringVar(&s.namespaces, "scope-namespace", "", "comma-separated namespaces the lease may touch (empty: any; derive: the parent's)")
	c.fs.StringVar(&s.prefixes, "scope-prefix", "", "comma-separated resource prefixes the lease may touch (empty: any; derive: the parent's)")
	c.fs.StringVar(&s.actions, "scope-action", "", "comma-separated actions the lease may take (empty: any; derive: the parent's)")
	c.fs.StringVar(&s.budget, "budget", "", "budget limits, COUNTER=N,… (derive: carved out of the parent's)")
	return s
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func (s *scopeFlags) scope() *tenurev1.Scope {
	sc := &tenurev1.Scope{Namespaces: splitList(s.namespaces), ResourcePrefixes: splitList(s.prefixes), Actions: splitList(s.actions)}
	if len(sc.Namespaces)+len(sc.ResourcePrefixes)+len(sc.Actions) == 0 {
		return nil
	}
	return sc
}

// limits parses --budget (COUNTER=N,…).
func (s *scopeFlags) limits() (*tenurev1.Budget, error) {
	if s.budget == "" {
		return nil, nil
	}
	b := &tenurev1.Budget{Limits: map[string]int64{}}
	for _, kv := range splitList(s.budget) {
		name, n, ok := strings.Cut(kv, "=")
		v, err := strconv.ParseInt(n, 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("--budget: %s: %s is out of range (at most %d)", kv, n, int64(math.MaxInt64))
		}
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("--budget: %q is not COUNTER=N", kv)
		}
		b.Limits[name] = v
	}
	return b, nil
}

// budgetText renders a lease's counters: "tokens 40/100 (+20 reserved), calls 3".
func budgetText(l *tenurev1.Lease) string {
	names := map[string]bool{}
	for k := range l.GetBudget().GetLimits() {
		names[k] = true
	}
	for k := range l.GetUsed() {
		names[k] = true
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range names {
			if !yield(k) {
				return
			}
		}
	}) {
		used := l.GetUsed()[k]
		limit, limited := l.GetBudget().GetLimits()[k]
		p := fmt.Sprintf("%s %d", k, used)
		if limited {
			p = fmt.Sprintf("%s %d/%d", k, used, limit)
		}
		if r := l.GetReserved()[k]; r != 0 {
			p += fmt.Sprintf(" (+%d reserved)", r)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// scopeText renders a lease's scope: "prefixes job/1/ · actions read,write".
func scopeText(s *tenurev1.Scope) string {
	var parts []string
	if v := s.GetNamespaces(); len(v) > 0 {
		parts = append(parts, "namespaces "+strings.Join(v, ","))
	}
	if v := s.GetResourcePrefixes(); len(v) > 0 {
		parts = append(parts, "prefixes "+strings.Join(v, ","))
	}
	if v := s.GetActions(); len(v) > 0 {
		parts = append(parts, "actions "+strings.Join(v, ","))
	}
	return strings.Join(parts, " · ")
}
