package main

import (
	"context"
	"flag"
	"io"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const deriveHelp = `Derive a child lease on RESOURCE under the active lease PARENT_ID, for a
sub-agent (--new-holder). Only PARENT_ID's holder (--holder) may. The child's
scope must lie within the parent's (an omitted kind inherits the parent's;
wider → SCOPE_VIOLATION), its budget is carved out of what the parent has left
(BUDGET_EXHAUSTED otherwise), its expiry is capped at the parent's, and it
ends when the parent ends. --namespace names the child's namespace (default:
the parent's). Prints the child lease.`

const deriveExamples = `  tenure derive 01JD3… job/42/a --new-holder agent-a --budget tokens=400,tool_calls=10 --scope-action read,write
  tenure derive 01JD3… job/42/a/1 --holder agent-a --new-holder agent-b --scope-prefix job/42/a/ --ttl 30s -o json`

// runDerive is `tenure derive`.
func runDerive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure derive", "PARENT_ID RESOURCE [flags]", deriveHelp, deriveExamples, stdout, stderr)
	ttl := c.fs.Duration("ttl", 0, "child ttl (default: the namespace policy's; capped at the parent's expiry)")
	newHolder := c.fs.String("new-holder", "", "the child's holder (default: --holder)")
	mode := c.fs.String("mode", "exclusive", "exclusive or shared")
	cert := c.fs.Bool("certificate", false, "ask for a signed lease certificate")
	sf := c.scopeFlags()
	c.holderFlag(stableHolder(), "user@host")
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	m, err := parseMode(*mode)
	if err != nil {
		return c.usageError("%v", err)
	}
	budget, err := sf.limits()
	if err != nil {
		return c.usageError("%v", err)
	}
	req := &tenurev1.DeriveRequest{
		ParentLeaseId: pos[0], Resource: pos[1], Holder: c.holder, NewHolder: *newHolder,
		Mode: tenurev1.Mode(m), Scope: sf.scope(), Budget: budget, Certificate: *cert,
	}
	// The child's namespace defaults to its parent's, not to --namespace's
	// default: only an explicit --namespace (or TENURE_NAMESPACE) moves it.
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name == "namespace" {
			req.Namespace = c.namespace
		}
	})
	if envOr("TENURE_NAMESPACE", "") != "" {
		req.Namespace = c.namespace
	}
	req.Ttl = c.durationIfGiven("ttl", *ttl)
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Derive, req)
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(stdout, resp.GetLease())
	}
	return writeLeaseDetail(stdout, resp.GetLease())
}
