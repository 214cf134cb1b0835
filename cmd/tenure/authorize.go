package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const authorizeHelp = `Ask whether the lease ID's scope allows a resource (--resource, in
--namespace, default the lease's) and/or an action (--action). Prints
"allowed" (exit 0), or the SCOPE_VIOLATION naming the rule (exit 1).`

const authorizeExamples = `  tenure authorize 01JD3… --resource job/42/a/out.txt
  tenure authorize 01JD3… --action exec -o json`

// runAuthorize is `tenure authorize`.
func runAuthorize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure authorize", "ID [--resource R] [--action A] [flags]", authorizeHelp, authorizeExamples, stdout, stderr)
	res := c.fs.String("resource", "", "resource to check")
	action := c.fs.String("action", "", "action to check")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if *res == "" && *action == "" {
		return c.usageError("give --resource, --action or both")
	}
	req := &tenurev1.AuthorizeRequest{LeaseId: pos[0], Resource: *res, Action: *action}
	if *res != "" && c.namespace != "" {
		ns := ""
		c.fs.Visit(func(f *flag.Flag) {
			if f.Name == "namespace" {
				ns = c.namespace
			}
		})
		req.Namespace = ns
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.Authorize, req)
	if err != nil {
		return err
	}
	if c.json() {
		if err := writeJSON(stdout, resp); err != nil {
			return err
		}
	} else if resp.GetAllowed() {
		fmt.Fprintln(stdout, "allowed")
	}
	if !resp.GetAllowed() {
		return errors.New(resp.GetReason())
	}
	return nil
}
