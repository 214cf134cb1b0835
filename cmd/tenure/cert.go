package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/fencing"
	"github.com/tenurehq/tenure/internal/wire"
)

const certHelp = `Verify a lease certificate offline, as a downstream service would: the
registrar's Ed25519 signature over the lease's claim, and that the lease has
not expired (treating it as expired --skew before its expiry, for clock
differences). The lease is read as JSON, as printed by
"tenure get ID --certificate -o json" or "tenure acquire --certificate -o json"
(a bare lease or an object with a "lease" field), from --file or stdin. The
public key is --public-key (hex, or @FILE holding hex or the 32 raw bytes), or
else fetched from the cluster (ClusterService.PublicKey).

Prints VALID, or the reason and exits 1.`

const certExamples = `  tenure get 01JD3… --certificate -o json | tenure cert verify
  tenure cert verify --file lease.json --public-key @registrar.key --skew 2s`

// runCert is `tenure cert verify`.
func runCert(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure cert", "verify [flags]", certHelp, certExamples, stdout, stderr)
	file := c.fs.String("file", "-", "the lease JSON (- for stdin)")
	pubFlag := c.fs.String("public-key", "", "registrar public key: hex, or @FILE (default: fetched from the cluster)")
	skew := c.fs.Duration("skew", time.Second, "clock-skew margin: the lease counts as expired this long before its expiry")
	pos, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if pos[0] != "verify" {
		return c.usageError("%s", unknownSubcommand(pos[0], "verify"))
	}
	if *skew < 0 {
		return c.usageError("--skew must not be negative, got %v", *skew)
	}
	// The key named first: a bad one is reported without reading the
	// lease (from stdin, a terminal would wait for it).
	var pub ed25519.PublicKey
	if *pubFlag != "" {
		if pub, err = c.publicKeyArg(*pubFlag); err != nil {
			return err
		}
	}
	var in []byte
	if *file == "-" {
		in, err = io.ReadAll(stdin)
	} else {
		in, err = os.ReadFile(*file)
	}
	if err != nil {
		return err
	}
	lease, err := parseLeaseJSON(in)
	if err != nil {
		return err
	}
	if pub == nil {
		r, err := c.remote()
		if err != nil {
			return err
		}
		err = r.cluster(func(cl tenurev1connect.ClusterServiceClient) error {
			res, err := cl.PublicKey(ctx, connect.NewRequest(&tenurev1.PublicKeyRequest{}))
			if err == nil {
				pub = res.Msg.GetPublicKey()
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	claim := tenure.ClaimOf(lease)
	verr := fencing.VerifyCertificate(pub, claim, lease.GetSignature(), time.Now(), *skew)
	if len(lease.GetSignature()) == 0 {
		verr = fmt.Errorf("%s: lease %s carries no certificate (ask for one with --certificate; only an active lease gets one, and this one is %s)", fencing.ReasonInvalidArgument, lease.GetLeaseId(), leaseState(lease))
	}
	if c.json() {
		out := struct {
			Valid     bool   `json:"valid"`
			LeaseID   string `json:"leaseId"`
			KeyID     string `json:"keyId"`
			Fence     uint64 `json:"fence,string"`
			ExpiresAt string `json:"expiresAt"`
			Error     string `json:"error,omitempty"`
		}{verr == nil, claim.LeaseID, fencing.KeyID(pub), claim.Fence, claim.ExpiresAt.UTC().Format(time.RFC3339Nano), ""}
		if verr != nil {
			out.Error = verr.Error()
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(stdout, "%s\n", b)
	} else if verr == nil {
		fmt.Fprintf(stdout, "VALID lease %s on %s (holder %s, fence %d) until %s, key %s\n",
			claim.LeaseID, claim.Resource, claim.Holder, claim.Fence, fmtTime(lease.GetExpiresAt()), fencing.KeyID(pub))
	}
	return verr
}

// parseLeaseJSON reads a lease, bare or wrapped in {"lease": …}.
func parseLeaseJSON(in []byte) (*tenurev1.Lease, error) {
	opts := protojson.UnmarshalOptions{DiscardUnknown: true}
	var wrapped tenurev1.GetResponse
	if err := opts.Unmarshal(in, &wrapped); err == nil && wrapped.GetLease().GetLeaseId() != "" {
		return wrapped.GetLease(), nil
	}
	var l tenurev1.Lease
	if err := opts.Unmarshal(in, &l); err != nil {
		return nil, fmt.Errorf("%s: the input is not a lease in JSON: %s", fencing.ReasonInvalidArgument, wire.DecodeError(err))
	}
	if l.GetLeaseId() == "" {
		return nil, fmt.Errorf("%s: the input JSON has no leaseId", fencing.ReasonInvalidArgument)
	}
	return &l, nil
}

// publicKeyArg parses a --public-key argument (parsePublicKey).
func (c *cliCommand) publicKeyArg(s string) (ed25519.PublicKey, error) {
	k, err := parsePublicKey(s)
	if err != nil {
		return nil, c.fileArgError("--public-key", err)
	}
	return k, nil
}

// parsePublicKey reads hex, or @FILE holding hex or the raw key.
func parsePublicKey(s string) (ed25519.PublicKey, error) {
	b := []byte(s)
	if name, ok := strings.CutPrefix(s, "@"); ok {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			return nil, err
		}
		if len(b) == ed25519.PublicKeySize {
			return b, nil
		}
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("not hex: %v", err)
	}
	if len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%d bytes, an Ed25519 public key has %d", len(k), ed25519.PublicKeySize)
	}
	return k, nil
}
