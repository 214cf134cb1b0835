package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// What a curl user meets at the edge of the protocol gets a Connect error
// with its reason, as every other bad input does, not a bare HTTP status:
// an unknown RPC, a content type the RPC does not take, plain JSON posted
// to a streaming RPC, a deadline that passes while the call waits, a GET,
// a compression or a Connect protocol version the server does not have.
func TestProtocolEdgesAnswerWithAReason(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var lastHeader http.Header // of the last answer
	send := func(method, path, ct string, header http.Header, body []byte) (int, string, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, b.base+path, bytes.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		lastHeader = resp.Header
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatalf("POST %s: %q is not JSON", path, raw)
			}
		}
		return resp.StatusCode, string(raw), out
	}
	post := func(path, ct string, header http.Header, body []byte) (int, string, map[string]any) {
		t.Helper()
		return send(http.MethodPost, path, ct, header, body)
	}
	acquire := []byte(`{"resource":"edge/1","holder":"w1"}`)

	tests := []struct {
		name, path, ct     string
		body               []byte
		status             int
		code, reason, text string
	}{
		{"misspelt RPC", "/tenure.v1.LeaseService/Aquire", "application/json", acquire, http.StatusNotImplemented,
			"unimplemented", "UNIMPLEMENTED", "UNIMPLEMENTED: no RPC /tenure.v1.LeaseService/Aquire"},
		{"unknown service", "/tenure.v1.Nope/Acquire", "application/json", acquire, http.StatusNotImplemented,
			"unimplemented", "UNIMPLEMENTED", "no RPC"},
		{"another package version", "/tenure.v2.LeaseService/Acquire", "application/json", acquire, http.StatusNotImplemented,
			"unimplemented", "UNIMPLEMENTED", "UNIMPLEMENTED: no RPC /tenure.v2.LeaseService/Acquire"},
		{"package left out", "/LeaseService/Acquire", "application/json", acquire, http.StatusNotImplemented,
			"unimplemented", "UNIMPLEMENTED", "UNIMPLEMENTED: no RPC /LeaseService/Acquire"},
		{"curl's default content type", "/tenure.v1.LeaseService/Acquire", "application/x-www-form-urlencoded", acquire, http.StatusBadRequest,
			"invalid_argument", "INVALID_ARGUMENT", `content type "application/x-www-form-urlencoded" is not one`},
		{"no content type", "/tenure.v1.LeaseService/Acquire", "", acquire, http.StatusBadRequest,
			"invalid_argument", "INVALID_ARGUMENT", "application/json"},
		{"unary JSON to a stream", "/tenure.v1.LeaseService/Watch", "application/json", []byte(`{}`), http.StatusBadRequest,
			"invalid_argument", "INVALID_ARGUMENT", "application/connect+json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, raw, out := post(tt.path, tt.ct, nil, tt.body)
			if msg, _ := out["message"].(string); status != tt.status || out["code"] != tt.code || !strings.Contains(msg, tt.text) {
				t.Fatalf("HTTP %d %s, want %d, code %s, %q", status, raw, tt.status, tt.code, tt.text)
			}
			if got := errorReason(t, out); got != tt.reason {
				t.Fatalf("reason %s, want %s", got, tt.reason)
			}
		})
	}
	// What Connect answers with a bare 405, or without ErrorInfo: a
	// method other than POST (Allow kept), a compression it does not
	// have, a Connect protocol version other than 1.
	get := []byte(`{"leaseId":"x"}`)
	for _, tt := range []struct {
		name, method, path, ct string
		header                 http.Header
		body                   []byte
		status                 int
		code, reason, text     string
		wantHeader, want       string
	}{
		{name: "GET", method: http.MethodGet, path: "/tenure.v1.LeaseService/Get", status: http.StatusMethodNotAllowed,
			code: "unimplemented", reason: "UNIMPLEMENTED", text: "UNIMPLEMENTED: /tenure.v1.LeaseService/Get is called with POST, not GET",
			wantHeader: "Allow", want: "POST"},
		{name: "PUT to a stream", method: http.MethodPut, path: "/tenure.v1.LeaseService/Watch", ct: "application/connect+json", body: connectEnvelope([]byte(`{}`)),
			status: http.StatusMethodNotAllowed, code: "unimplemented", reason: "UNIMPLEMENTED", text: "UNIMPLEMENTED: /tenure.v1.LeaseService/Watch is called with POST, not PUT", wantHeader: "Allow", want: "POST"},
		{name: "unsupported compression", method: http.MethodPost, path: "/tenure.v1.LeaseService/Get", ct: "application/json",
			header: http.Header{"Content-Encoding": {"br"}}, body: get, status: http.StatusNotImplemented,
			code: "unimplemented", reason: "UNIMPLEMENTED", text: `UNIMPLEMENTED: compression "br" (Content-Encoding) is not supported`,
			wantHeader: "Accept-Encoding", want: "gzip"},
		{name: "Connect protocol version 2", method: http.MethodPost, path: "/tenure.v1.LeaseService/Get", ct: "application/json",
			header: http.Header{"Connect-Protocol-Version": {"2"}}, body: get, status: http.StatusBadRequest,
			code: "invalid_argument", reason: "INVALID_ARGUMENT", text: `INVALID_ARGUMENT: Connect-Protocol-Version "2"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, raw, out := send(tt.method, tt.path, tt.ct, tt.header, tt.body)
			if msg, _ := out["message"].(string); status != tt.status || out["code"] != tt.code || !strings.HasPrefix(msg, tt.text) {
				t.Fatalf("HTTP %d %s, want %d, code %s, %q", status, raw, tt.status, tt.code, tt.text)
			}
			if got := errorReason(t, out); got != tt.reason {
				t.Fatalf("reason %s, want %s", got, tt.reason)
			}
			if tt.wantHeader != "" && lastHeader.Get(tt.wantHeader) != tt.want {
				t.Fatalf("%s: %q, want %q", tt.wantHeader, lastHeader.Get(tt.wantHeader), tt.want)
			}
		})
	}
	// In a Connect stream, the same errors end the stream with a reason.
	for _, h := range []http.Header{{"Connect-Content-Encoding": {"br"}}, {"Connect-Protocol-Version": {"2"}}} {
		status, raw, _ := post("/tenure.v1.LeaseService/Watch", "application/connect+json", h, connectEnvelope([]byte(`{}`)))
		if status != http.StatusOK || !strings.Contains(raw, `"error":{"code":"`) || !strings.Contains(raw, "ErrorInfo") ||
			!(strings.Contains(raw, `"message":"UNIMPLEMENTED: compression`) || strings.Contains(raw, `"message":"INVALID_ARGUMENT: Connect-Protocol-Version`)) {
			t.Fatalf("watch with %v: HTTP %d %q", h, status, raw)
		}
	}
	// gRPC: a compression it does not have is refused with the reason;
	// gzip is served, over gRPC and Connect alike.
	for _, opt := range []connect.ClientOption{connect.WithGRPC(), connect.WithGRPCWeb()} {
		br := tenurev1connect.NewLeaseServiceClient(h2cClient(), b.base, opt,
			connect.WithAcceptCompression("br", func() connect.Decompressor { return &nopDecompressor{} }, func() connect.Compressor { return &nopCompressor{} }),
			connect.WithSendCompression("br"))
		_, err := br.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: "x"}))
		wantReason(t, err, connect.CodeUnimplemented, "UNIMPLEMENTED")
	}
	for _, opt := range []connect.ClientOption{connect.WithGRPC(), connect.WithGRPCWeb(), connect.WithProtoJSON()} {
		gz := tenurev1connect.NewLeaseServiceClient(h2cClient(), b.base, opt, connect.WithSendGzip())
		_, err := gz.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: "x"}))
		wantReason(t, err, connect.CodeNotFound, "LEASE_NOT_FOUND")
	}

	// Timeouts Connect or gRPC cannot parse, and a Watch of no or two
	// messages, are refused with a reason too.
	for _, bad := range []struct{ header, value string }{{"Connect-Timeout-Ms", "abc"}, {"Connect-Timeout-Ms", "-5"},
		{"Connect-Timeout-Ms", "12345678901"}} {
		status, raw, out := post("/tenure.v1.LeaseService/Acquire", "application/json", http.Header{bad.header: {bad.value}}, acquire)
		if status != http.StatusBadRequest || out["code"] != "invalid_argument" || errorReason(t, out) != "INVALID_ARGUMENT" {
			t.Fatalf("%s: %s: HTTP %d %s", bad.header, bad.value, status, raw)
		}
	}
	for _, body := range [][]byte{nil, append(connectEnvelope([]byte(`{}`)), connectEnvelope([]byte(`{}`))...)} {
		_, raw, _ := post("/tenure.v1.LeaseService/Watch", "application/connect+json", nil, body)
		if !strings.Contains(raw, `"code":"invalid_argument"`) || !strings.Contains(raw, "exactly one request message") || !strings.Contains(raw, "ErrorInfo") {
			t.Fatalf("a watch of %d bytes ended with %q", len(body), raw)
		}
	}
	// Nothing was acquired by any of them.
	if l, err := b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Prefix: "edge/"})); err != nil || len(l.Msg.Leases) != 0 {
		t.Fatalf("after the refusals: %v %v", l, err)
	}

	// Plain JSON to a Connect stream (no envelope): the stream ends with
	// INVALID_ARGUMENT and its reason, not internal.
	// {} is too short for an envelope; a longer body reads as a huge one.
	for _, body := range []string{`{}`, `{"prefix":"edge/"}`} {
		status, raw, _ := post("/tenure.v1.LeaseService/Watch", "application/connect+json", nil, []byte(body))
		var end struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if status != http.StatusOK || len(raw) < 5 {
			t.Fatalf("unenveloped watch %s: HTTP %d %q", body, status, raw)
		} else if err := json.Unmarshal([]byte(raw[5:]), &end); err != nil || end.Error.Code != "invalid_argument" ||
			!strings.HasPrefix(end.Error.Message, "INVALID_ARGUMENT: a message of the stream does not decode") || !strings.Contains(raw, "ErrorInfo") {
			t.Fatalf("unenveloped watch %s ended with %q", body, raw)
		}
	}

	// A deadline that passes while the acquire waits: deadline_exceeded
	// with its reason, and the waiter is gone.
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "edge/held", Holder: "w1"})
	status, raw, out := post("/tenure.v1.LeaseService/Acquire", "application/json", http.Header{"Connect-Timeout-Ms": {"300"}},
		[]byte(`{"resource":"edge/held","holder":"w2","wait":"10s"}`))
	if status != http.StatusGatewayTimeout || out["code"] != "deadline_exceeded" || !strings.HasPrefix(out["message"].(string), "DEADLINE_EXCEEDED: ") {
		t.Fatalf("acquire past its deadline: HTTP %d %s", status, raw)
	}
	if got := errorReason(t, out); got != "DEADLINE_EXCEEDED" {
		t.Fatalf("reason %s", got)
	}
}

// Namespace names with '*' or white space at either end are refused
// where requests come in, unary and pipelined alike (the state machine
// still applies them from a log written before: see
// registrar.TestValidation_LoggedNamespacesStillApply).
func TestNamespaceNamesRefusedAtTheAPI(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, ns := range []string{"*", "team-*", " default", "q "} {
		_, err := b.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Namespace: ns, Resource: "r", Holder: "w"}))
		wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
		_, err = b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Namespace: ns}))
		wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
		qc := tenurev1connect.NewQueueServiceClient(b.http, b.base)
		_, err = qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: ns, Queue: "q", Tasks: []*tenurev1.NewTask{{Payload: []byte("x")}}}))
		wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
		pc := tenurev1connect.NewPoolServiceClient(b.http, b.base)
		rl, err := pc.RequestLeases(ctx, connect.NewRequest(&tenurev1.RequestLeasesRequest{Namespace: ns, Pool: "p", Peer: "x", Max: 1}))
		if err != nil || rl.Msg.RejectedReason != tenurev1.RejectedReason_REJECTED_REASON_INVALID_REQUEST || !strings.Contains(rl.Msg.Message, "namespace") {
			t.Fatalf("RequestLeases in %q: %v %v", ns, rl, err)
		}
		// Pipelined, the same.
		ps := b.leases.Pipeline(ctx)
		if err := ps.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{{Id: 1, Op: &tenurev1.PipelineOp_Acquire{
			Acquire: &tenurev1.AcquireRequest{Namespace: ns, Resource: "r", Holder: "w"}}}}}); err != nil {
			t.Fatal(err)
		}
		pr, err := ps.Receive()
		if err != nil || pr.GetResults()[0].GetError().GetReason() != "INVALID_ARGUMENT" {
			t.Fatalf("pipelined acquire in %q: %v %v", ns, pr, err)
		}
		ps.CloseRequest()
		ps.CloseResponse()
	}
	// The server-wide defaults keep their name.
	if _, err := b.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "*",
		Policy: &tenurev1.NamespacePolicy{MaxTtl: durationpb.New(10 * time.Minute)}})); err != nil {
		t.Fatalf("SetPolicy of the defaults: %v", err)
	}
	if l, err := b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{})); err != nil || len(l.Msg.Leases) != 0 {
		t.Fatalf("leases after the refusals: %v %v", l, err)
	}
}

// nopDecompressor and nopCompressor are a compression that changes
// nothing: enough to send a body labelled with a compression the server
// does not have.
type nopDecompressor struct{ io.Reader }

func (*nopDecompressor) Close() error              { return nil }
func (d *nopDecompressor) Reset(r io.Reader) error { d.Reader = r; return nil }

type nopCompressor struct{ io.Writer }

func (*nopCompressor) Close() error        { return nil }
func (c *nopCompressor) Reset(w io.Writer) { c.Writer = w }
