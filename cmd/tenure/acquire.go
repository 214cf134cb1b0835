package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
)

const acquireHelp = `Acquire a lease on RESOURCE and print it.

Without --hold the lease is left to its ttl: renew it with tenure renew and end
it with tenure release (the default holder, user@host, is the same for every
invocation so that this works). With --hold the command keeps the lease alive
with heartbeats until Ctrl-C or SIGTERM, then releases it; it exits 1 if the
lease is lost meanwhile (and the default holder is user@host:pid).`

const acquireExamples = `  tenure acquire orders/42 --ttl 30s
  tenure acquire orders/42 --wait 1m -o json
  tenure acquire reports/daily --hold --ttl 15s
  tenure acquire orders/42 --certificate -o json > lease.json
  tenure acquire job/42 --ttl 2m --scope-prefix job/42/,repo/ --scope-action read,write --budget tokens=1000`

// runAcquire is `tenure acquire`.
func runAcquire(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure acquire", "RESOURCE [flags]", acquireHelp, acquireExamples, stdout, stderr)
	ttl := c.fs.Duration("ttl", 0, "lease ttl (default: the namespace policy's, 60s)")
	mode := c.fs.String("mode", "exclusive", "exclusive or shared")
	wait := c.fs.Duration("wait", 0, "queue for up to this long when the resource is held (0: fail at once with LEASE_HELD)")
	hold := c.fs.Bool("hold", false, "keep the lease alive until interrupted, then release it")
	cert := c.fs.Bool("certificate", false, "ask for a signed lease certificate (see tenure cert verify)")
	sf := c.scopeFlags()
	c.holderFlag("", "user@host, or user@host:pid with --hold")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	budget, err := sf.limits()
	if err != nil {
		return c.usageError("%v", err)
	}

	m, err := parseMode(*mode)
	if err != nil {
		return c.usageError("%v", err)
	}
	if err := c.notNegative("wait", *wait); err != nil {
		return err
	}
	if *hold {
		// The Go client that keeps the lease alive takes a zero ttl for
		// "the policy default", so a non-positive --ttl cannot reach the
		// server from here: refuse it rather than hold a 60 s lease.
		if c.given("ttl") && *ttl <= 0 {
			return c.usageError("--ttl must be positive, got %v (omit it for the namespace's default)", *ttl)
		}
		opts := []tenure.AcquireOption{m}
		if sc := sf.scope(); sc != nil {
			opts = append(opts, tenure.WithScope(tenure.Scope{Namespaces: sc.Namespaces, ResourcePrefixes: sc.ResourcePrefixes, Actions: sc.Actions}))
		}
		if budget != nil {
			opts = append(opts, tenure.WithBudget(budget.Limits))
		}
		return holdLease(ctx, c, pos[0], *ttl, *wait, *cert, opts...)
	}
	if c.holder == "" && !c.principalHolder {
		c.holder = stableHolder()
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	req := &tenurev1.AcquireRequest{
		Namespace: c.namespace, Resource: pos[0], Holder: c.holder,
		Mode: tenurev1.Mode(m), Certificate: *cert, Scope: sf.scope(), Budget: budget,
	}
	req.Ttl, req.Wait = c.durationIfGiven("ttl", *ttl), c.durationIfGiven("wait", *wait)
	var lease *tenurev1.Lease
	if *wait > 0 {
		lease, err = acquireWaiting(ctx, r, req, *wait)
	} else {
		var resp *tenurev1.AcquireResponse
		if resp, err = leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Acquire, req); err == nil {
			lease = resp.GetLease()
		}
	}
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, lease)
	}
	return writeLeaseDetail(stdout, lease)
}

// acquireWaiting is an Acquire that waits (req.Wait, wait long) and goes on
// waiting through a change of leader. Queued acquires end when the leader
// changes, their callers told OUTCOME_UNKNOWN (or left without an answer
// by a leader that died), and it then queues again for what is left of
// the wait; once the wait is spent, one Acquire without wait has the last
// word. It never takes a lease of its holder it finds as its own: the
// default holder (user@host) is every invocation's on the host, so such a
// lease may be another's. If the broken call was granted after all, that
// lease ends at its ttl (nothing renews it) and this one queues behind it.
func acquireWaiting(ctx context.Context, r *remote, req *tenurev1.AcquireRequest, wait time.Duration) (*tenurev1.Lease, error) {
	start := time.Now()
	// No call outlives the wait by more than a moment: a member that hangs
	// (stopped, cut off) would hold it until HTTP/2 gives up on it.
	ctx, cancel := context.WithDeadline(ctx, start.Add(wait+waitSlack))
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Acquire, req)
		if err == nil {
			return resp.GetLease(), nil
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("OUTCOME_UNKNOWN: no answer within the wait of %v (and %v): a member may hang; "+
				"an acquire granted meanwhile is given back or ends at its ttl: %w", wait, waitSlack, err)
		}
		if ctx.Err() != nil || req.Wait == nil || !waitBroken(err) {
			return nil, err
		}
		pause(ctx, backoff)
		backoff = min(2*backoff, time.Second)
		req.Wait = nil
		if left := wait - time.Since(start); left > 0 {
			req.Wait = durationpb.New(left)
		}
	}
}

// waitSlack is how long past its wait a waiting acquire's last call may
// take to answer.
const waitSlack = 5 * time.Second

// waitBroken reports whether a waiting Acquire's error leaves its outcome
// open: its call ended without an answer, or with OUTCOME_UNKNOWN, or no
// leader took it (an election).
func waitBroken(err error) bool {
	switch tenure.ReasonOf(err) {
	case tenure.ReasonOutcomeUnknown, tenure.ReasonNotLeader, tenure.ReasonUnavailable:
		return true
	case "":
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal:
			return true
		}
	}
	return false
}

// holdLease is `tenure acquire --hold`: acquire through the Go client, print
// the lease, keep it alive until ctx ends (SIGINT/SIGTERM) and release it.
func holdLease(ctx context.Context, c *cliCommand, resource string, ttl time.Duration, wait time.Duration, cert bool, opts ...tenure.AcquireOption) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	if ttl != 0 {
		opts = append(opts, tenure.TTL(ttl))
	}
	if wait > 0 {
		opts = append(opts, tenure.Wait(wait))
	}
	if cert {
		opts = append(opts, tenure.RequestCertificate())
	}
	l, err := cl.Acquire(ctx, resource, opts...)
	if err != nil {
		return err
	}
	if c.json() {
		err = writeJSON(c.stdout, l.Proto())
	} else {
		err = writeLeaseDetail(c.stdout, l.Proto())
		fmt.Fprintf(c.stderr, "holding lease %s on %s; Ctrl-C to release\n", l.ID(), resource)
	}
	if err != nil {
		return err
	}
	select {
	case <-l.Done():
		return lostError(l)
	case <-ctx.Done():
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Release(rctx, tenure.ReleaseCompleted); err != nil {
		return err
	}
	if !c.json() {
		fmt.Fprintf(c.stderr, "released lease %s\n", l.ID())
	}
	return nil
}

// lostError says why a held lease was lost, starting with the registrar's
// reason when there is one.
func lostError(l *tenure.Lease) error { return lostLease(l.ID(), l.Resource(), l.Err()) }

// lostLease is lostError of lease id on resource, ended with err.
func lostLease(id, resource string, err error) error {
	var te *tenure.Error
	// A registrar's answer is why, unless it is only the last error of
	// renewals that went unconfirmed until the trust window passed.
	if !errors.Is(err, tenure.ErrTrustWindowPassed) && errors.As(err, &te) {
		return &lostLeaseError{fmt.Errorf("%w (lease %s on %s lost)", te, id, resource)}
	}
	// The lost error names the lease and resource too: say them once.
	var lost *tenure.LostError
	if errors.As(err, &lost) && lost.Cause != nil {
		err = lost.Cause
	}
	return &lostLeaseError{fmt.Errorf("LEASE_LOST: lease %s on %s: %s", id, resource, strings.TrimPrefix(err.Error(), "tenure: "))}
}

// lostLeaseError is a lease lost after it was granted: the server did
// answer, so run gives no hint about reaching one.
type lostLeaseError struct{ err error }

func (e *lostLeaseError) Error() string { return e.err.Error() }
func (e *lostLeaseError) Unwrap() error { return e.err }
