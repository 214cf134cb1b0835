package tenure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// Lease trees (DESIGN §1.6, API.md): a lease may carry a Scope and a
// Budget; its holder derives narrower, budgeted child leases for
// sub-agents with Lease.Derive, spends with Lease.Consume and asks
// Lease.Authorize before touching something. Ending a lease ends its
// subtree at the registrar; a child derived through this client also
// ends (Done closes, Err is a *LostError whose cause is ErrParentEnded)
// as soon as its parent ends here.

// ErrParentEnded is the cause of a child lease's *LostError when its parent
// ended first.
var ErrParentEnded = errors.New("tenure: parent lease ended")

// Scope restricts what a lease authorizes. An empty list is unrestricted
// of that kind; in Derive it inherits the parent's list.
type Scope struct {
	Namespaces       []string
	ResourcePrefixes []string
	Actions          []string
}

func (s Scope) proto() *tenurev1.Scope {
	if len(s.Namespaces)+len(s.ResourcePrefixes)+len(s.Actions) == 0 {
		return nil
	}
	return &tenurev1.Scope{Namespaces: s.Namespaces, ResourcePrefixes: s.ResourcePrefixes, Actions: s.Actions}
}

// Budget maps counter names to limits. A child's budget is carved out of
// its parent's remaining when it is derived.
type Budget map[string]int64

func (b Budget) proto() *tenurev1.Budget {
	if len(b) == 0 {
		return nil
	}
	return &tenurev1.Budget{Limits: b}
}

// deriveConfig is the result of applying DeriveOptions.
type deriveConfig struct {
	namespace string
	holder    string
	ttl       time.Duration
	mode      Mode
	scope     Scope
	budget    Budget
}

// A DeriveOption configures one Derive: TTL, Namespace, DeriveFor,
// WithScope, WithBudget, or a Mode.
type DeriveOption interface{ applyDerive(*deriveConfig) }

type deriveFunc func(*deriveConfig)

func (f deriveFunc) applyDerive(d *deriveConfig) { f(d) }

// DeriveFor names the child's holder (default: this client's holder). The
// child is kept alive by this client either way; another process holding
// it as that holder takes it over with Client.Resume.
func DeriveFor(holder string) DeriveOption {
	return deriveFunc(func(d *deriveConfig) { d.holder = holder })
}

// ScopeOption sets a lease's scope: an AcquireOption (a root's scope) and a
// DeriveOption (a child's, within its parent's).
type ScopeOption Scope

// WithScope sets the scope of an acquired or derived lease.
func WithScope(s Scope) ScopeOption { return ScopeOption(s) }

func (s ScopeOption) applyAcquire(a *acquireConfig) { a.scope = Scope(s) }
func (s ScopeOption) applyDerive(d *deriveConfig)   { d.scope = Scope(s) }

// BudgetOption sets a lease's budget: an AcquireOption and a DeriveOption.
type BudgetOption Budget

// WithBudget sets the budget of an acquired or derived lease.
func WithBudget(b Budget) BudgetOption { return BudgetOption(b) }

func (b BudgetOption) applyAcquire(a *acquireConfig) { a.budget = Budget(b) }
func (b BudgetOption) applyDerive(d *deriveConfig)   { d.budget = Budget(b) }

func (n NamespaceOption) applyDerive(d *deriveConfig) { d.namespace = string(n) }
func (m Mode) applyDerive(d *deriveConfig)            { d.mode = m }
func (t TTLOption) applyDerive(d *deriveConfig)       { d.ttl = time.Duration(t) }

// Derive issues a child lease on resource under l, for l's holder to hand
// to a sub-agent: its scope within l's (SCOPE_VIOLATION otherwise), its
// budget carved out of l's remaining (BUDGET_EXHAUSTED otherwise), its
// expiry capped at l's. The child is kept alive by this client like an
// acquired lease, never past its parent; its Done closes when it ends,
// including when l (or any ancestor) ends.
func (l *Lease) Derive(ctx context.Context, resource string, opts ...DeriveOption) (*Lease, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	c := l.c
	dc := deriveConfig{holder: c.cfg.holder}
	for _, o := range opts {
		if o != nil {
			o.applyDerive(&dc)
		}
	}
	req := &tenurev1.DeriveRequest{
		ParentLeaseId: l.id, Holder: l.holder, NewHolder: dc.holder, Namespace: dc.namespace,
		Resource: resource, Mode: tenurev1.Mode(dc.mode), Scope: dc.scope.proto(), Budget: dc.budget.proto(),
	}
	if dc.ttl != 0 {
		req.Ttl = durationpb.New(dc.ttl)
	}
	var (
		granted *tenurev1.Lease
		sent    time.Time
	)
	// A derive is not repeated after an unknown outcome: a second child
	// could be issued, holding a second share of the budget.
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		now := c.clock.Now()
		resp, err := ep.lease.Derive(ctx, connect.NewRequest(req))
		if err == nil {
			granted, sent = resp.Msg.GetLease(), now
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if granted.GetLeaseId() == "" || granted.GetTtl().AsDuration() <= 0 {
		return nil, fmt.Errorf("tenure: derive %q: the registrar answered without a lease id or ttl", resource)
	}
	child := newLease(c, granted, false)
	// A ttl longer than the parent has left was shortened by the
	// registrar: the child lives, and is heartbeated, on what it got.
	child.ttl = pbTTL(granted, child.ttl)
	child.margin = c.cfg.marginFor(child.ttl)
	trusted := sent.Add(pbTTL(granted, child.ttl) - child.margin)
	child.update(nil, trusted)
	if err := c.track(child, sent, trusted); err != nil {
		c.abandon(child)
		return nil, err
	}
	go func() {
		select {
		case <-l.Done():
			c.hb.lose(child, ErrParentEnded)
		case <-child.Done():
		}
	}()
	return child, nil
}

// Consume charges amount of counter to the lease and returns what it has
// left of each counter it limits. Over its budget: a *Error matching
// ErrBudgetExhausted whose metadata gives counter, used, limit and the
// lease that ran out; nothing is charged then. Not repeated after an
// unknown outcome (it would charge twice).
func (l *Lease) Consume(ctx context.Context, counter string, amount int64) (map[string]int64, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	return l.c.Consume(ctx, l.id, counter, amount)
}

// Consume charges amount of counter to the lease leaseID (see Lease.Consume).
func (c *Client) Consume(ctx context.Context, leaseID, counter string, amount int64) (map[string]int64, error) {
	var remaining map[string]int64
	err := c.call(ctx, writeCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.Consume(ctx, connect.NewRequest(&tenurev1.ConsumeRequest{LeaseId: leaseID, Counter: counter, Amount: amount}))
		if err == nil {
			remaining = resp.Msg.GetRemaining()
		}
		return err
	})
	return remaining, err
}

// Access is what Authorize asks about: a resource (in Namespace, default
// the lease's), an action, or both.
type Access struct {
	Namespace string
	Resource  string
	Action    string
}

// Authorize answers nil when the lease's scope allows a, or a *Error
// matching ErrScopeViolation whose message names the rule. Other errors
// (the lease ended, bad input) say why no answer could be given.
func (l *Lease) Authorize(ctx context.Context, a Access) error {
	if err := l.Err(); err != nil {
		return err
	}
	return l.c.Authorize(ctx, l.id, a)
}

// Authorize answers for the lease leaseID (see Lease.Authorize).
func (c *Client) Authorize(ctx context.Context, leaseID string, a Access) error {
	var resp *tenurev1.AuthorizeResponse
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		r, err := ep.lease.Authorize(ctx, connect.NewRequest(&tenurev1.AuthorizeRequest{
			LeaseId: leaseID, Namespace: a.Namespace, Resource: a.Resource, Action: a.Action,
		}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return err
	}
	if resp.GetAllowed() {
		return nil
	}
	msg := resp.GetReason()
	if !strings.HasPrefix(msg, string(ReasonScopeViolation)) {
		msg = string(ReasonScopeViolation) + ": " + msg
	}
	return &Error{Reason: ReasonScopeViolation, Code: connect.CodePermissionDenied, Message: msg,
		Metadata: map[string]string{"lease_id": leaseID}}
}

// Tree returns the lease leaseID and its descendants, parents before
// children, each with its parentLeaseId, scope, budget, used and reserved.
func (c *Client) Tree(ctx context.Context, leaseID string) ([]*tenurev1.Lease, error) {
	var out []*tenurev1.Lease
	err := c.call(ctx, readCall, func(ctx context.Context, ep *endpoint) error {
		resp, err := ep.lease.Tree(ctx, connect.NewRequest(&tenurev1.TreeRequest{LeaseId: leaseID}))
		if err == nil {
			out = resp.Msg.GetLeases()
		}
		return err
	})
	return out, err
}
