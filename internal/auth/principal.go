package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Role is what a principal may do (see the package comment).
type Role string

// The roles of the auth file.
const (
	RoleHolder Role = "holder"
	RoleWorker Role = "worker"
	RoleReader Role = "reader"
	RoleAdmin  Role = "admin"
)

// Roles lists every role, in the order the docs give them.
var Roles = []Role{RoleHolder, RoleWorker, RoleReader, RoleAdmin}

func parseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q (want holder, worker, reader or admin)", s)
}

// DefaultNamespace is what an empty namespace in a request means.
const DefaultNamespace = "default"

// Principal is an authenticated caller.
type Principal struct {
	// Name is the principal's name: the holder of what it acquires.
	Name string
	// Roles the principal has; admin implies every other role.
	Roles []Role
	// Namespaces are the patterns of the namespaces it may touch.
	Namespaces []string
	// Certificate is true when a client certificate (not a token)
	// authenticated it.
	Certificate bool
	// limiter is the principal's request budget (nil: unlimited).
	limiter *Limiter
}

// Has reports whether p has role r (admin has every role).
func (p *Principal) Has(r Role) bool {
	return slices.Contains(p.Roles, r) || slices.Contains(p.Roles, RoleAdmin)
}

// HasAny reports whether p has at least one of rs (admin: always).
func (p *Principal) HasAny(rs ...Role) bool {
	for _, r := range rs {
		if p.Has(r) {
			return true
		}
	}
	return false
}

// Admin reports whether p is an administrator.
func (p *Principal) Admin() bool { return slices.Contains(p.Roles, RoleAdmin) }

// InNamespace reports whether ns ("" = default) matches one of p's
// namespace patterns.
func (p *Principal) InNamespace(ns string) bool {
	if ns == "" {
		ns = DefaultNamespace
	}
	for _, pat := range p.Namespaces {
		if MatchNamespace(pat, ns) {
			return true
		}
	}
	return false
}

// AllNamespaces reports whether one of p's patterns is "*".
func (p *Principal) AllNamespaces() bool { return slices.Contains(p.Namespaces, "*") }

// Limiter returns p's request budget (nil: unlimited).
func (p *Principal) Limiter() *Limiter { return p.limiter }

// MatchNamespace reports whether ns matches pattern: equal, or pattern
// ends in "*" and ns starts with what precedes it.
func MatchNamespace(pattern, ns string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(ns, prefix)
	}
	return pattern == ns
}

// checkPattern validates a namespace pattern of the auth file.
func checkPattern(p string) error {
	body := strings.TrimSuffix(p, "*")
	switch {
	case p == "":
		return fmt.Errorf("empty namespace pattern")
	case strings.Contains(body, "*"):
		return fmt.Errorf("namespace pattern %q: '*' is only allowed at the end", p)
	case len(p) > 129:
		return fmt.Errorf("namespace pattern %q is longer than 128 bytes", p)
	}
	return checkPrintable("namespace pattern", body)
}

// checkPrintable refuses control characters and invalid UTF-8.
func checkPrintable(what, s string) error {
	for i, r := range s {
		if r == 0xFFFD && !strings.HasPrefix(s[i:], "\uFFFD") {
			return fmt.Errorf("%s is not valid UTF-8", what)
		}
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s contains a control character", what)
		}
	}
	return nil
}
