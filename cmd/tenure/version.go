package main

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const versionHelp = `Print the version of this binary; with --server, also the version of the
member answering at --endpoints.`

const versionExamples = `  tenure version
  tenure version --server --endpoints 10.0.0.1:7070`

// runVersion is `tenure version`.
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure version", "[flags]", versionHelp, versionExamples, stdout, stderr)
	server := c.fs.Bool("server", false, "also ask the server for its version")
	if _, err := c.parse(args, 0, 0); err != nil {
		return err
	}
	var sv string
	if *server {
		r, err := c.remote()
		if err != nil {
			return err
		}
		err = r.cluster(func(cl tenurev1connect.ClusterServiceClient) error {
			res, err := cl.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
			if err == nil {
				sv = res.Msg.GetVersion()
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	if c.json() {
		if sv != "" {
			_, err := fmt.Fprintf(stdout, "{\"version\":%q,\"serverVersion\":%q}\n", version, sv)
			return err
		}
		_, err := fmt.Fprintf(stdout, "{\"version\":%q}\n", version)
		return err
	}
	fmt.Fprintf(stdout, "tenure %s\n", version)
	if sv != "" {
		fmt.Fprintf(stdout, "server %s\n", sv)
	}
	return nil
}
