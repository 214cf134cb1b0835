package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const stateHelp = `Read or write a resource's guarded state: a small blob with an epoch that
grows by one per write. A write names the resource's active exclusive lease
and the epoch it read; the registrar refuses it otherwise (LEASE_VIOLATION,
STALE_EPOCH, FUTURE_EPOCH).

  state get RESOURCE [--raw]
  state put RESOURCE --lease ID --epoch N (--data STRING | --file PATH | data on stdin)`

const stateExamples = `  tenure state get orders/42
  tenure state get orders/42 --raw > state.bin
  tenure state put orders/42 --lease 01JD3… --epoch 3 --data '{"step":4}'
  echo done | tenure state put orders/42 --lease 01JD3… --epoch 4`

// runState is `tenure state get|put`.
func runState(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure state", "get|put RESOURCE [flags]", stateHelp, stateExamples, stdout, stderr)
	raw := c.fs.Bool("raw", false, "get: print only the data, as is")
	lease := c.fs.String("lease", "", "put: the writing lease (the resource's active exclusive lease)")
	epoch := c.fs.String("epoch", "", "put: the epoch read (the current one)")
	data := c.fs.String("data", "", "put: the new data")
	file := c.fs.String("file", "", "put: read the new data from this file")
	pos, err := c.parse(args, 1, 2)
	if err != nil {
		return err
	}
	if pos[0] != "get" && pos[0] != "put" {
		return c.usageError("%s", unknownSubcommand(pos[0], "get", "put"))
	}
	if len(pos) < 2 {
		return c.usageError("%s: missing argument RESOURCE", pos[0])
	}
	switch pos[0] {
	case "get":
		if *lease != "" || *epoch != "" || *data != "" || *file != "" {
			return c.usageError("state get takes no --lease, --epoch, --data or --file")
		}
		return stateGet(ctx, c, pos[1], *raw)
	case "put":
		if *lease == "" || *epoch == "" {
			return c.usageError("state put needs --lease and --epoch")
		}
		n, err := strconv.ParseUint(*epoch, 10, 64)
		if err != nil {
			return c.usageError("--epoch must be a whole number (the epoch state get printed), got %q", *epoch)
		}
		var b []byte
		switch {
		case *data != "" && *file != "":
			return c.usageError("give --data or --file, not both")
		case *data != "":
			b = []byte(*data)
		case *file != "":
			if b, err = os.ReadFile(*file); err != nil {
				return err
			}
		default:
			if b, err = io.ReadAll(stdin); err != nil {
				return err
			}
		}
		return statePut(ctx, c, pos[1], *lease, n, b)
	}
	return c.usageError("%s", unknownSubcommand(pos[0], "get", "put"))
}

func stateGet(ctx context.Context, c *cliCommand, resource string, raw bool) error {
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.ReadState, &tenurev1.ReadStateRequest{Namespace: c.namespace, Resource: resource})
	switch {
	case err != nil:
		return err
	case raw:
		_, err = c.stdout.Write(resp.GetData())
		return err
	case c.json():
		return writeJSON(c.stdout, resp)
	}
	return writeState(c.stdout, resp)
}

// writeState prints a guarded state as a table. The data is whatever the
// lease's holder wrote: printed as it is when it is text a terminal shows
// as such, else quoted, as queue payloads are (an escape sequence in it must
// not drive the reader's terminal; --raw prints the bytes).
func writeState(w io.Writer, resp *tenurev1.ReadStateResponse) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "epoch\t%d\n", resp.GetEpoch())
	if d := resp.GetData(); terminalSafe(string(d)) {
		fmt.Fprintf(tw, "data\t%s\n", d)
	} else {
		fmt.Fprintf(tw, "data\t%q\n", d)
	}
	return tw.Flush()
}

func statePut(ctx context.Context, c *cliCommand, resource, leaseID string, epoch uint64, data []byte) error {
	r, err := c.remote()
	if err != nil {
		return err
	}
	resp, err := leaseCall(ctx, r, tenurev1connect.LeaseServiceClient.WriteState, &tenurev1.WriteStateRequest{
		Namespace: c.namespace, Resource: resource, LeaseId: leaseID, ExpectedEpoch: epoch, Data: data,
	})
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(c.stdout, resp)
	}
	_, err = fmt.Fprintf(c.stdout, "epoch  %d\n", resp.GetEpoch())
	return err
}
