package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/fencing"
	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/queue"
)

// postJSON sends a Connect JSON unary request the way curl would.
func (b *bundle) postJSON(t *testing.T, method, body string) (int, map[string]any) {
	t.Helper()
	resp, err := b.http.Post(b.base+"/tenure.v1."+method, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: response is not JSON: %q", method, raw)
	}
	return resp.StatusCode, out
}

func errorReason(t *testing.T, body map[string]any) string {
	t.Helper()
	details, _ := body["details"].([]any)
	for _, d := range details {
		dm := d.(map[string]any)
		if dm["type"] == "google.rpc.ErrorInfo" {
			if dm["value"] == nil {
				t.Errorf("ErrorInfo detail has no binary value: %v", dm)
			}
			dbg, _ := dm["debug"].(map[string]any)
			if dbg == nil {
				t.Fatalf("ErrorInfo detail has no debug JSON: %v", dm)
			}
			return dbg["reason"].(string)
		}
	}
	t.Fatalf("no ErrorInfo detail in %v", body)
	return ""
}

func TestConnectJSONShapes(t *testing.T) {
	b := setup(t)
	code, out := b.postJSON(t, "LeaseService/Acquire",
		`{"resource":"orders/42","holder":"w1","ttl":"60s","mode":"MODE_EXCLUSIVE"}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %v", code, out)
	}
	l := out["lease"].(map[string]any)
	if id, _ := l["leaseId"].(string); id == "" {
		t.Errorf("leaseId = %v", l["leaseId"])
	}
	if f, ok := l["fence"].(string); !ok || f == "" || f == "0" {
		t.Errorf("fence should be a non-zero uint64 string, got %#v", l["fence"])
	}
	if l["ttl"] != "60s" {
		t.Errorf("ttl = %v, want \"60s\"", l["ttl"])
	}
	for _, k := range []string{"issuedAt", "expiresAt"} {
		if s, _ := l[k].(string); !strings.HasSuffix(s, "Z") {
			t.Errorf("%s = %v, want RFC 3339 UTC", k, l[k])
		}
	}
	if l["mode"] != "MODE_EXCLUSIVE" || l["state"] != "STATE_ACTIVE" || l["namespace"] != "default" {
		t.Errorf("mode/state/namespace = %v/%v/%v", l["mode"], l["state"], l["namespace"])
	}

	code, out = b.postJSON(t, "LeaseService/Acquire", `{"resource":"orders/42","holder":"w2"}`)
	if code == http.StatusOK || out["code"] != "failed_precondition" {
		t.Fatalf("second acquire: %d %v", code, out)
	}
	if r := errorReason(t, out); r != "LEASE_HELD" {
		t.Errorf("reason = %s", r)
	}
	if msg, _ := out["message"].(string); !strings.HasPrefix(msg, "LEASE_HELD: orders/42 is held by lease "+l["leaseId"].(string)) {
		t.Errorf("message = %q", msg)
	}

	code, out = b.postJSON(t, "LeaseService/Release", fmt.Sprintf(`{"leaseId":%q,"holder":"w1"}`, l["leaseId"]))
	if code != http.StatusOK {
		t.Fatalf("release: %d %v", code, out)
	}
	if rl := out["lease"].(map[string]any); rl["state"] != "STATE_RELEASED" || rl["releaseReason"] != "RELEASE_REASON_VOLUNTARY" {
		t.Errorf("released lease: %v", rl)
	}
}

// An oversized unary body of unknown length (chunked; no Content-Length)
// is INVALID_ARGUMENT like one that announces its length, in JSON and in
// binary; it was Connect's resource_exhausted (HTTP 429), with no reason.
func TestOversizedBodyOfUnknownLength(t *testing.T) {
	b := setup(t)
	before := b.status(t)
	for _, ct := range []string{"application/json", "application/proto"} {
		body := io.MultiReader(strings.NewReader(`{"resource":"r","holder":"w","namespace":"`), strings.NewReader(strings.Repeat("n", 2<<20)), strings.NewReader(`"}`))
		req, err := http.NewRequest(http.MethodPost, b.base+"/tenure.v1.LeaseService/Acquire", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: %d %q", ct, resp.StatusCode, raw)
		}
		if resp.StatusCode != http.StatusBadRequest || out["code"] != "invalid_argument" || errorReason(t, out) != "INVALID_ARGUMENT" {
			t.Errorf("%s: %d %v", ct, resp.StatusCode, out)
		}
	}
	if after := b.status(t); after.CommitIndex != before.CommitIndex {
		t.Errorf("commit index moved: %d → %d", before.CommitIndex, after.CommitIndex)
	}
}

// Without authentication (on loopback), only requests addressed to a
// loopback host are served: a web page cannot reach the API through DNS
// rebinding.
func TestNoAuthServesLoopbackHostsOnly(t *testing.T) {
	b := setup(t)
	_, port, _ := net.SplitHostPort(b.srv.Addr())
	for host, served := range map[string]bool{
		"127.0.0.1:" + port: true, "localhost:" + port: true, "[::1]:" + port: true, "LOCALHOST": true, "app.localhost:" + port: true, "localhost.:" + port: true,
		"attacker.example:" + port: false, "10.0.0.1:" + port: false, "127.0.0.1.attacker.example": false,
	} {
		req, err := http.NewRequest(http.MethodPost, b.base+"/tenure.v1.ClusterService/WhoAmI", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Host = host
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if served && resp.StatusCode != http.StatusOK || !served && resp.StatusCode != http.StatusForbidden {
			t.Errorf("Host %q: %d %s", host, resp.StatusCode, raw)
		}
		if !served && !strings.Contains(string(raw), "PERMISSION_DENIED") {
			t.Errorf("Host %q: %s", host, raw)
		}
	}
}

// "application/json; charset=utf-8" is the same JSON as plain
// "application/json": strict requests (compressed ones too), answers with
// their zero values.
func TestJSONWithCharset(t *testing.T) {
	b := setup(t)
	post := func(body []byte, gz bool) (int, map[string]any) {
		t.Helper()
		if gz {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			zw.Write(body)
			zw.Close()
			body = zb.Bytes()
		}
		req, err := http.NewRequest(http.MethodPost, b.base+"/tenure.v1.LeaseService/Acquire", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	code, out := post([]byte(`{"resource":"cs/1","holder":"h","ttl":"5s"}`), false)
	if code != http.StatusOK {
		t.Fatalf("acquire: %d %v", code, out)
	}
	if l := out["lease"].(map[string]any); l["renewalCount"] != float64(0) {
		t.Errorf("lease without its zero renewalCount: %v", l)
	}
	for _, gz := range []bool{false, true} {
		if code, out := post([]byte(`{"resource":"cs/2","holder":"h","bogus":1}`), gz); code == http.StatusOK || out["code"] != "invalid_argument" {
			t.Errorf("unknown field (gzip %v): %d %v", gz, code, out)
		}
	}
}

// TestBinaryBodyThatDoesNotDecode: a binary request (Connect's
// application/proto, gRPC) that does not decode, a string that is not
// UTF-8 or malformed wire data, is INVALID_ARGUMENT with its ErrorInfo
// and a message that starts with the reason, as in JSON.
func TestBinaryBodyThatDoesNotDecode(t *testing.T) {
	b := setup(t)
	fd := (&tenurev1.AcquireRequest{}).ProtoReflect().Descriptor().Fields()
	str := func(name, v string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, fd.ByName(protoreflect.Name(name)).Number(), protowire.BytesType), v)
	}
	notUTF8 := append(str("resource", "r\xff\xfe"), str("holder", "w")...)
	truncated := str("resource", "orders/42")[:5]
	for name, body := range map[string][]byte{"invalid UTF-8": notUTF8, "truncated": truncated} {
		code, out := b.postProto(t, "/tenure.v1.LeaseService/Acquire", body)
		if out["code"] != "invalid_argument" {
			t.Fatalf("%s, application/proto: %d %v", name, code, out)
		}
		if r := errorReason(t, out); r != "INVALID_ARGUMENT" {
			t.Errorf("%s, application/proto: reason %s", name, r)
		}
		if msg, _ := out["message"].(string); !strings.HasPrefix(msg, "INVALID_ARGUMENT: ") {
			t.Errorf("%s, application/proto: message %q", name, msg)
		}
		if status, msg := b.postGRPC(t, "/tenure.v1.LeaseService/Acquire", body); status != "3" || !strings.HasPrefix(msg, "INVALID_ARGUMENT") {
			t.Errorf("%s, gRPC: status %q message %q", name, status, msg)
		}
	}
	// A body that decodes is served as before, in both.
	good, err := proto.Marshal(&tenurev1.AcquireRequest{Resource: "bin/ok", Holder: "w"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.http.Post(b.base+"/tenure.v1.LeaseService/Acquire", "application/proto", bytes.NewReader(good))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a good application/proto acquire: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestRenewListsTheBadID: a Renew of several ids lists a malformed one
// as its own failure, naming the entry, and renews the others (API.md:
// with several ids the call succeeds and lists each failure); a Renew of
// one malformed id is refused whole.
func TestRenewListsTheBadID(t *testing.T) {
	b := setup(t)
	code, out := b.postJSON(t, "LeaseService/Acquire", `{"resource":"rn/a","holder":"w","ttl":"10s"}`)
	if code != http.StatusOK {
		t.Fatalf("acquire: %d %v", code, out)
	}
	id := out["lease"].(map[string]any)["leaseId"].(string)
	code, out = b.postJSON(t, "LeaseService/Renew", `{"leaseIds":["`+id+`","","nope"],"ttl":"20s"}`)
	if code != http.StatusOK {
		t.Fatalf("renew of three ids: %d %v, want 200", code, out)
	}
	if leases, _ := out["leases"].([]any); len(leases) != 1 || leases[0].(map[string]any)["leaseId"] != id {
		t.Errorf("renewed %v, want only %s", out["leases"], id)
	}
	fs, _ := out["failures"].([]any)
	if len(fs) != 2 {
		t.Fatalf("failures %v, want two", out["failures"])
	}
	if f := fs[0].(map[string]any); f["reason"] != "INVALID_ARGUMENT" || !strings.HasPrefix(f["message"].(string), "INVALID_ARGUMENT: lease_ids[1]: ") {
		t.Errorf("first failure %v, want INVALID_ARGUMENT naming lease_ids[1]", f)
	}
	if f := fs[1].(map[string]any); f["reason"] != "LEASE_NOT_FOUND" || f["leaseId"] != "nope" {
		t.Errorf("second failure %v, want LEASE_NOT_FOUND for nope", f)
	}
	// Every id malformed: still answered per id, unless the rest of the
	// request is bad too.
	code, out = b.postJSON(t, "LeaseService/Renew", `{"leaseIds":["",""]}`)
	if fs, _ := out["failures"].([]any); code != http.StatusOK || len(fs) != 2 {
		t.Errorf("renew of two empty ids: %d %v, want 200 with two failures", code, out)
	}
	code, out = b.postJSON(t, "LeaseService/Renew", `{"leaseIds":["",""],"ttl":"-1s"}`)
	if code == http.StatusOK || errorReason(t, out) != "TTL_OUT_OF_RANGE" {
		t.Errorf("renew with a negative ttl: %d %v, want TTL_OUT_OF_RANGE", code, out)
	}
	code, out = b.postJSON(t, "LeaseService/Renew", `{"leaseIds":[""]}`)
	if code == http.StatusOK || errorReason(t, out) != "INVALID_ARGUMENT" {
		t.Fatalf("renew of one empty id: %d %v, want INVALID_ARGUMENT", code, out)
	}
	if msg, _ := out["message"].(string); !strings.HasPrefix(msg, "INVALID_ARGUMENT: lease_ids[0]: ") {
		t.Errorf("message %q does not name lease_ids[0]", msg)
	}
}

// TestConsistencyHeaderChecked: a Tenure-Consistency value other than
// stale or linearizable is refused, not taken for the default.
func TestConsistencyHeaderChecked(t *testing.T) {
	b := setup(t)
	for value, want := range map[string]int{"stale": http.StatusOK, "Linearizable": http.StatusOK, "stal": http.StatusBadRequest} {
		req, err := http.NewRequest(http.MethodPost, b.base+"/tenure.v1.LeaseService/List", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Tenure-Consistency", value)
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Tenure-Consistency %q: %d %s, want %d", value, resp.StatusCode, raw, want)
		}
		if want != http.StatusOK && !strings.Contains(string(raw), "INVALID_ARGUMENT: Tenure-Consistency: ") {
			t.Errorf("Tenure-Consistency %q: %s does not name the header", value, raw)
		}
	}
}

// TestBadInputChangesNothing sends malformed requests; each must answer
// invalid_argument, propose nothing and leave the server healthy.
func TestBadInputChangesNothing(t *testing.T) {
	b := setup(t)
	before := b.status(t)
	cases := []struct {
		name, method, body string
		reason             string
	}{
		{"malformed JSON", "LeaseService/Acquire", `{"resource":"r","holder":`, "INVALID_ARGUMENT"},
		{"unknown enum", "LeaseService/Acquire", `{"resource":"r","holder":"w","mode":"MODE_BOGUS"}`, "INVALID_ARGUMENT"},
		{"invalid UTF-8", "LeaseService/Acquire", "{\"resource\":\"r\xff\xfe\",\"holder\":\"w\"}", "INVALID_ARGUMENT"},
		{"unknown field", "LeaseService/Acquire", `{"resource":"r","holder":"w","bogus":1}`, "INVALID_ARGUMENT"},
		{"misspelt field", "LeaseService/Acquire", `{"resource":"r","holder":"w","tll":"5s"}`, "INVALID_ARGUMENT"},
		{"wrong field type", "LeaseService/Acquire", `{"resource":"r","holder":"w","ttl":30}`, "INVALID_ARGUMENT"},
		{"bad duration", "QueueService/Claim", `{"queue":"q","worker":"w","wait":"soon"}`, "INVALID_ARGUMENT"},
		{"not an object", "PoolService/Status", `[1,2]`, "INVALID_ARGUMENT"},
		{"empty body", "ClusterService/Status", ``, "INVALID_ARGUMENT"},
		{"control character", "LeaseService/Acquire", `{"resource":"r\u0001","holder":"w"}`, "INVALID_ARGUMENT"},
		{"missing resource", "LeaseService/Acquire", `{"holder":"w"}`, "INVALID_ARGUMENT"},
		{"missing holder", "LeaseService/Acquire", `{"resource":"r"}`, "INVALID_ARGUMENT"},
		{"oversized holder", "LeaseService/Acquire", `{"resource":"r","holder":"` + strings.Repeat("h", 129) + `"}`, "INVALID_ARGUMENT"},
		{"zero ttl", "LeaseService/Acquire", `{"resource":"r","holder":"w","ttl":"0s"}`, "TTL_OUT_OF_RANGE"},
		{"negative ttl", "LeaseService/Acquire", `{"resource":"r","holder":"w","ttl":"-5s"}`, "TTL_OUT_OF_RANGE"},
		{"ttl above max", "LeaseService/Acquire", `{"resource":"r","holder":"w","ttl":"301s"}`, "TTL_OUT_OF_RANGE"},
		{"ttl of 10,000 years", "LeaseService/Acquire", `{"resource":"r","holder":"w","ttl":"315576000000s"}`, "TTL_OUT_OF_RANGE"},
		{"ttl below floor", "LeaseService/Acquire", `{"resource":"r","holder":"w","ttl":"0.5s"}`, "TTL_OUT_OF_RANGE"},
		{"numeric unknown mode", "LeaseService/Acquire", `{"resource":"r","holder":"w","mode":7}`, "INVALID_ARGUMENT"},
		{"negative budget", "LeaseService/Acquire", `{"resource":"r","holder":"w","budget":{"limits":{"tokens":"-1"}}}`, "INVALID_ARGUMENT"},
		{"empty scope action", "LeaseService/Acquire", `{"resource":"r","holder":"w","scope":{"actions":[""]}}`, "INVALID_ARGUMENT"},
		{"derive no resource", "LeaseService/Derive", `{"parentLeaseId":"x","holder":"w"}`, "INVALID_ARGUMENT"},
		{"task lease resource", "LeaseService/Acquire", `{"resource":"queue/q/t1","holder":"w"}`, "INVALID_ARGUMENT"},
		{"piece lease resource", "LeaseService/Acquire", `{"resource":"pool/p/0/1","holder":"w"}`, "INVALID_ARGUMENT"},
		{"derive onto a task resource", "LeaseService/Derive", `{"parentLeaseId":"x","holder":"w","resource":"queue/q/t1"}`, "INVALID_ARGUMENT"},
		{"inverted ttl bounds", "ClusterService/SetPolicy", `{"namespace":"pol","policy":{"minTtl":"20s","maxTtl":"10s"}}`, "INVALID_ARGUMENT"},
		{"renew all and ids", "LeaseService/Renew", `{"holder":"w","allOfHolder":true,"leaseIds":["x"]}`, "INVALID_ARGUMENT"},
		{"consume zero", "LeaseService/Consume", `{"leaseId":"x","counter":"c","amount":"0"}`, "INVALID_ARGUMENT"},
		{"empty lease id", "LeaseService/Release", `{"leaseId":"","holder":"w"}`, "INVALID_ARGUMENT"},
		{"oversized lease id", "LeaseService/Renew", `{"leaseIds":["` + strings.Repeat("x", 129) + `"]}`, "INVALID_ARGUMENT"},
		{"renew nothing", "LeaseService/Renew", `{}`, "INVALID_ARGUMENT"},
		{"verify nothing", "LeaseService/Verify", `{"leaseIds":[]}`, "INVALID_ARGUMENT"},
		{"reserved release reason", "LeaseService/Release", `{"leaseId":"x","holder":"w","reason":"RELEASE_REASON_TRANSFERRED"}`, "INVALID_ARGUMENT"},
		{"state too big", "LeaseService/WriteState", fmt.Sprintf(`{"resource":"r","leaseId":"x","data":%q}`, strings.Repeat("QUFB", 22000)), "INVALID_ARGUMENT"},
		{"oversized body", "LeaseService/Acquire", `{"resource":"r","holder":"w","namespace":"` + strings.Repeat("n", 2<<20) + `"}`, "INVALID_ARGUMENT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out := b.postJSON(t, tc.method, tc.body)
			if code == http.StatusOK || out["code"] != "invalid_argument" {
				t.Fatalf("got %d %v, want invalid_argument", code, out)
			}
			if r := errorReason(t, out); r != tc.reason {
				t.Errorf("reason = %s, want %s", r, tc.reason)
			}
			if msg, _ := out["message"].(string); !strings.HasPrefix(msg, tc.reason) {
				t.Errorf("message %q does not start with the reason", msg)
			} else if strings.Contains(msg, "unmarshal into") || strings.Contains(msg, "proto:") {
				t.Errorf("message %q carries the decoder's own prefixes", msg)
			}
		})
	}
	after := b.status(t)
	if after.CommitIndex != before.CommitIndex || after.LedgerIndex != before.LedgerIndex {
		t.Errorf("bad input changed the log: commit %d→%d, ledger %d→%d",
			before.CommitIndex, after.CommitIndex, before.LedgerIndex, after.LedgerIndex)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := b.http.Get(b.base + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s after bad input: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "r", Holder: "w"})
}

func TestLeaseLifecycleOverH2C(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	l := b.acquire(t, &tenurev1.AcquireRequest{Resource: "jobs/1", Holder: "w1", Ttl: durationpb.New(30 * time.Second), Certificate: true})
	if l.Fence == 0 || l.LeaseId == "" || l.Ttl.AsDuration() != 30*time.Second {
		t.Fatalf("lease: %v", l)
	}
	pk, err := b.cluster.PublicKey(ctx, connect.NewRequest(&tenurev1.PublicKeyRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	claim := fencing.Claim{LeaseID: l.LeaseId, Namespace: l.Namespace, Resource: l.Resource, Holder: l.Holder,
		Mode: fencing.Mode(l.Mode), Fence: l.Fence, IssuedAt: l.IssuedAt.AsTime(), ExpiresAt: l.ExpiresAt.AsTime()}
	if err := fencing.VerifyCertificate(ed25519.PublicKey(pk.Msg.PublicKey), claim, l.Signature, time.Now(), time.Second); err != nil {
		t.Errorf("certificate does not verify: %v", err)
	}
	if l.KeyId != pk.Msg.KeyId {
		t.Errorf("key id %q, want %q", l.KeyId, pk.Msg.KeyId)
	}

	renewed, err := b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{l.LeaseId}, Ttl: durationpb.New(60 * time.Second)}))
	if err != nil || len(renewed.Msg.Leases) != 1 || renewed.Msg.Leases[0].RenewalCount != 1 {
		t.Fatalf("Renew: %v %v", renewed, err)
	}
	got, err := b.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: l.LeaseId}))
	if err != nil || got.Msg.Lease.State != tenurev1.State_STATE_ACTIVE || got.Msg.Lease.Ttl.AsDuration() != time.Minute {
		t.Fatalf("Get: %v %v", got, err)
	}
	fence, err := b.leases.CheckFence(ctx, connect.NewRequest(&tenurev1.CheckFenceRequest{Resource: "jobs/1", Fence: l.Fence}))
	if err != nil || !fence.Msg.Current || fence.Msg.ActiveFence != l.Fence {
		t.Fatalf("CheckFence: %v %v", fence, err)
	}
	ws, err := b.leases.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: "jobs/1", LeaseId: l.LeaseId, Data: []byte("step 1")}))
	if err != nil || ws.Msg.Epoch != 1 {
		t.Fatalf("WriteState: %v %v", ws, err)
	}
	rs, err := b.leases.ReadState(ctx, connect.NewRequest(&tenurev1.ReadStateRequest{Resource: "jobs/1"}))
	if err != nil || string(rs.Msg.Data) != "step 1" || rs.Msg.Epoch != 1 {
		t.Fatalf("ReadState: %v %v", rs, err)
	}
	tr, err := b.leases.Transfer(ctx, connect.NewRequest(&tenurev1.TransferRequest{LeaseId: l.LeaseId, Holder: "w1", NewHolder: "w2"}))
	if err != nil || tr.Msg.Lease.Holder != "w2" || tr.Msg.Lease.Fence <= l.Fence ||
		tr.Msg.Released.ReleaseReason != tenurev1.ReleaseReason_RELEASE_REASON_TRANSFERRED {
		t.Fatalf("Transfer: %v %v", tr, err)
	}
	v, err := b.leases.Verify(ctx, connect.NewRequest(&tenurev1.VerifyRequest{LeaseIds: []string{tr.Msg.Lease.LeaseId, "nope"}}))
	if err != nil || len(v.Msg.Results) != 2 || !v.Msg.Results[0].Found || v.Msg.Results[1].Found || v.Msg.Results[1].LeaseId != "nope" {
		t.Fatalf("Verify: %v %v", v, err)
	}
	list, err := b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Prefix: "jobs/"}))
	if err != nil || len(list.Msg.Leases) != 2 || list.Msg.Counts.Active != 1 || list.Msg.Counts.Released != 1 {
		t.Fatalf("List: %v %v", list, err)
	}
	dr, err := b.leases.DeclareRestart(ctx, connect.NewRequest(&tenurev1.DeclareRestartRequest{Holder: "w2"}))
	if err != nil || len(dr.Msg.Leases) != 1 {
		t.Fatalf("DeclareRestart: %v %v", dr, err)
	}
	rv, err := b.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: tr.Msg.Lease.LeaseId, Reason: "maintenance"}))
	if err != nil || rv.Msg.Lease.State != tenurev1.State_STATE_REVOKED {
		t.Fatalf("Revoke: %v %v", rv, err)
	}
	rel, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: tr.Msg.Lease.LeaseId, Holder: "w2"}))
	if err != nil || !rel.Msg.AlreadyTerminal {
		t.Fatalf("Release of a revoked lease: %v %v", rel, err)
	}
	hist, err := b.leases.History(ctx, connect.NewRequest(&tenurev1.HistoryRequest{Resource: "jobs/1"}))
	if err != nil {
		t.Fatal(err)
	}
	var types, actors []string
	for _, e := range hist.Msg.Events {
		types = append(types, e.Type)
		actors = append(actors, e.Actor)
	}
	want := "lease.issued lease.renewed state.written lease.transferred lease.issued lease.grace lease.revoked"
	if strings.Join(types, " ") != want {
		t.Errorf("history = %v, want %s", types, want)
	}
	// Without authentication the actor is the holder the request names,
	// else anonymous (a renewal, a write or a revocation by lease id).
	if want := "w1 anonymous anonymous w1 w1 w2 anonymous"; strings.Join(actors, " ") != want {
		t.Errorf("actors = %v, want %s", actors, want)
	}
	if hist.Msg.OldestIndex != 0 || hist.Msg.OldestTime != nil {
		t.Errorf("a full history says it is cut short at %d", hist.Msg.OldestIndex)
	}
	// latest: the newest events, still oldest first.
	last, err := b.leases.History(ctx, connect.NewRequest(&tenurev1.HistoryRequest{Resource: "jobs/1", Limit: 3, Latest: true}))
	if err != nil || len(last.Msg.Events) != 3 || last.Msg.Events[0].Type != "lease.issued" || last.Msg.Events[2].Type != "lease.revoked" ||
		last.Msg.Events[2].Index != hist.Msg.Events[len(hist.Msg.Events)-1].Index {
		t.Errorf("the latest 3 events: %v, %v", last, err)
	}
}

// TestHistoryPastTheFeed: once the in-memory feed no longer reaches back
// to a resource's first events, History finds them in the member's ledger
// files (within the retention), oldest first, ahead of the feed's, and
// latest takes the newest across both; when the files cannot bridge the
// range up to the feed, the answer is the feed's and says from which index
// (and when) it holds events, and a History from after that index does
// not.
func TestHistoryPastTheFeed(t *testing.T) {
	dir := t.TempDir()
	// Small ledger segments: History reads those that may hold the
	// resource (their filters), past the others.
	b := setupWith(t, dir, func(c *Config) { c.Cluster.FeedSize, c.Cluster.LedgerSegmentSize = 20, 2048 })
	ctx := context.Background()
	history := func(req *tenurev1.HistoryRequest) *tenurev1.HistoryResponse {
		t.Helper()
		resp, err := b.leases.History(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	types := func(h *tenurev1.HistoryResponse) string {
		var out []string
		for _, e := range h.Events {
			out = append(out, e.Type)
		}
		return strings.Join(out, " ")
	}
	first := b.acquire(t, &tenurev1.AcquireRequest{Resource: "early", Holder: "h"})
	mixed := b.acquire(t, &tenurev1.AcquireRequest{Resource: "mixed", Holder: "h"})
	qc := tenurev1connect.NewQueueServiceClient(h2cClient(), b.base)
	if _, err := qc.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Queue: "q", Tasks: []*tenurev1.NewTask{{TaskId: "t1", Payload: []byte("x")}}})); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		b.acquire(t, &tenurev1.AcquireRequest{Resource: fmt.Sprintf("later/%d", i), Holder: "h"})
	}
	if _, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: mixed.LeaseId, Holder: "h"})); err != nil {
		t.Fatal(err)
	}
	h := history(&tenurev1.HistoryRequest{Resource: "early"})
	if types(h) != "lease.issued" || h.Events[0].LeaseId != first.LeaseId || h.OldestIndex != 0 {
		t.Fatalf("history of early, whose events left the feed: %v", h)
	}
	if h := history(&tenurev1.HistoryRequest{Resource: "mixed"}); types(h) != "lease.issued lease.released" || h.OldestIndex != 0 {
		t.Fatalf("history of mixed, in the files and the feed: %v", h)
	}
	if h := history(&tenurev1.HistoryRequest{Resource: "mixed", Limit: 1}); types(h) != "lease.issued" {
		t.Fatalf("the first event of mixed: %v", h)
	}
	if h := history(&tenurev1.HistoryRequest{Resource: "mixed", Limit: 1, Latest: true}); types(h) != "lease.released" {
		t.Fatalf("the latest event of mixed: %v", h)
	}
	if h := history(&tenurev1.HistoryRequest{Resource: "mixed", Limit: 5, Latest: true}); types(h) != "lease.issued lease.released" {
		t.Fatalf("the latest 5 events of mixed: %v", h)
	}
	if h := history(&tenurev1.HistoryRequest{Resource: queue.Resource("q", "t1")}); !strings.HasPrefix(types(h), "task.enqueued") {
		t.Fatalf("history of task t1: %v", h)
	}

	// With the first file gone (pruned), the answer says from which index
	// it is complete.
	segs, err := ledger.Segments(filepath.Join(dir, "ledger"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("ledger segments: %v %v", segs, err)
	}
	if err := os.Remove(segs[0]); err != nil {
		t.Fatal(err)
	}
	h = history(&tenurev1.HistoryRequest{Resource: "early"})
	if len(h.Events) != 0 || h.OldestIndex != ledger.FirstIndex(segs[1]) || h.OldestTime == nil {
		t.Fatalf("history of early with the first file pruned: %v; want complete from %d", h, ledger.FirstIndex(segs[1]))
	}

	// Without the files (here: removed), the feed's alone, saying so.
	for _, s := range segs[1:] {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	h = history(&tenurev1.HistoryRequest{Resource: "early"})
	if len(h.Events) != 0 || h.OldestIndex <= 1 || h.OldestTime == nil {
		t.Fatalf("history of early without the files: %v", h)
	}
	h = history(&tenurev1.HistoryRequest{Resource: "later/29", AfterIndex: h.OldestIndex})
	if len(h.Events) != 1 || h.OldestIndex != 0 {
		t.Fatalf("history from the oldest index held: %v", h)
	}
}

// TestErrorReasons drives each error reason reachable on a single node
// through the generated gRPC client.
func TestErrorReasons(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	// A namespace with short ttls and tight limits.
	_, err := b.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "tight", Policy: &tenurev1.NamespacePolicy{
		MinTtl: durationpb.New(10 * time.Millisecond), DefaultTtl: durationpb.New(time.Second), MaxTtl: durationpb.New(time.Minute),
		MaxRenewals: proto.Uint32(1), MaxActivePerHolder: 2,
	}}))
	if err != nil {
		t.Fatalf("SetPolicy: %v", err)
	}
	held := b.acquire(t, &tenurev1.AcquireRequest{Resource: "r", Holder: "w1"})

	_, err = b.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Holder: "w2"}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_HELD")
	_, err = b.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "r", Holder: "w2", Ttl: durationpb.New(time.Hour)}))
	wantReason(t, err, connect.CodeInvalidArgument, "TTL_OUT_OF_RANGE")
	_, err = b.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "", Holder: "w2"}))
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	_, err = b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{"no-such-lease"}}))
	wantReason(t, err, connect.CodeNotFound, "LEASE_NOT_FOUND")
	_, err = b.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: "no-such-lease"}))
	wantReason(t, err, connect.CodeNotFound, "LEASE_NOT_FOUND")
	_, err = b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: held.LeaseId, Holder: "w2"}))
	wantReason(t, err, connect.CodePermissionDenied, "NOT_HOLDER")
	_, err = b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{held.LeaseId}, Ttl: durationpb.New(time.Second)}))
	wantReason(t, err, connect.CodeFailedPrecondition, "RENEWAL_DOES_NOT_EXTEND")
	_, err = b.leases.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: "r", LeaseId: held.LeaseId, ExpectedEpoch: 1}))
	wantReason(t, err, connect.CodeAborted, "FUTURE_EPOCH")
	if _, err := b.leases.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: "r", LeaseId: held.LeaseId})); err != nil {
		t.Fatal(err)
	}
	_, err = b.leases.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: "r", LeaseId: held.LeaseId}))
	wantReason(t, err, connect.CodeAborted, "STALE_EPOCH")

	if _, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: held.LeaseId, Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	_, err = b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{held.LeaseId}}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_TERMINAL")
	_, err = b.leases.WriteState(ctx, connect.NewRequest(&tenurev1.WriteStateRequest{Resource: "r", LeaseId: held.LeaseId, ExpectedEpoch: 1}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_VIOLATION")

	// Policy-driven reasons in the tight namespace.
	a := b.acquire(t, &tenurev1.AcquireRequest{Namespace: "tight", Resource: "a", Holder: "w1", Ttl: durationpb.New(30 * time.Second)})
	if _, err := b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{a.LeaseId}, Ttl: durationpb.New(40 * time.Second)})); err != nil {
		t.Fatal(err)
	}
	_, err = b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{a.LeaseId}, Ttl: durationpb.New(50 * time.Second)}))
	wantReason(t, err, connect.CodeFailedPrecondition, "RENEWAL_LIMIT_EXCEEDED")
	b.acquire(t, &tenurev1.AcquireRequest{Namespace: "tight", Resource: "b", Holder: "w1"})
	_, err = b.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Namespace: "tight", Resource: "c", Holder: "w1"}))
	wantReason(t, err, connect.CodeResourceExhausted, "QUOTA_EXCEEDED")

	short := b.acquire(t, &tenurev1.AcquireRequest{Namespace: "tight", Resource: "short", Holder: "w2", Ttl: durationpb.New(20 * time.Millisecond)})
	waitFor(t, "the short lease to expire", 5*time.Second, func() bool {
		g, err := b.leases.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{LeaseId: short.LeaseId}))
		return err == nil && g.Msg.Lease.State == tenurev1.State_STATE_EXPIRED
	})
	_, err = b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{short.LeaseId}}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_EXPIRED")

	// A batch renew succeeds and lists each failure, in the order of
	// the ids asked for (a malformed one too, which is found first).
	resp, err := b.leases.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{LeaseIds: []string{short.LeaseId, "zzz-no-such-lease", short.LeaseId, ""}}))
	var got []string
	for _, f := range resp.Msg.GetFailures() {
		got = append(got, f.LeaseId+" "+f.Reason)
	}
	if want := []string{short.LeaseId + " LEASE_EXPIRED", "zzz-no-such-lease LEASE_NOT_FOUND", short.LeaseId + " LEASE_EXPIRED", " INVALID_ARGUMENT"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("batch renew: %q %v, want %q", got, err, want)
	}
}

func TestAcquireWaitGrantedOnRelease(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	first := b.acquire(t, &tenurev1.AcquireRequest{Resource: "line/head", Holder: "w1"})
	type result struct {
		l   *tenurev1.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := b.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{
			Resource: "line/head", Holder: "w2", Wait: durationpb.New(30 * time.Second)}))
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{l: resp.Msg.Lease}
	}()
	waitFor(t, "the waiter to queue", 5*time.Second, func() bool {
		l, err := b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{}))
		return err == nil && l.Msg.Counts.Waiters == 1
	})
	// List of the resource names its queue (the dashboard's waiters);
	// a list of no one resource, or of another, names none, and a holder
	// filter narrows the queue too.
	l, err := b.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Resource: "line/head"}))
	if err != nil || len(l.Msg.Waiters) != 1 || l.Msg.Waiters[0].Holder != "w2" || l.Msg.Waiters[0].WaiterId == "" ||
		l.Msg.Waiters[0].WaitRemaining.AsDuration() <= 0 || l.Msg.Waiters[0].WaitRemaining.AsDuration() > 30*time.Second {
		t.Fatalf("List of the resource: %v, %v", l, err)
	}
	for _, q := range []*tenurev1.ListRequest{{}, {Resource: "line/other"}, {Resource: "line/head", Holder: "w1"}} {
		if l, err := b.leases.List(ctx, connect.NewRequest(q)); err != nil || len(l.Msg.Waiters) != 0 {
			t.Fatalf("List %v: %v, %v", q, l, err)
		}
	}
	if _, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: first.LeaseId, Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.l.Holder != "w2" || r.l.Fence <= first.Fence || r.l.State != tenurev1.State_STATE_ACTIVE {
			t.Fatalf("waiter got %v %v", r.l, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter was not granted")
	}

	// A wait that runs out answers LEASE_HELD.
	_, err = b.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{
		Resource: "line/head", Holder: "w3", Wait: durationpb.New(30 * time.Millisecond)}))
	wantReason(t, err, connect.CodeFailedPrecondition, "LEASE_HELD")
}

// TestWatchResumesFromTheLedger: a Watch resumed from an index whose
// records have left the in-memory feed gets them from the member's ledger
// files, in order, then goes on live, without the events past their
// namespace's history retention; when the files no longer hold them
// either, it is refused as compacted, naming the oldest index held.
func TestWatchResumesFromTheLedger(t *testing.T) {
	dir := t.TempDir()
	b := setupWith(t, dir, func(c *Config) { c.Cluster.FeedSize, c.Cluster.LedgerSegmentSize = 20, 2048 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	from := b.status(t).LedgerIndex
	early := b.acquire(t, &tenurev1.AcquireRequest{Resource: "w/early", Holder: "h"})
	for i := range 40 {
		b.acquire(t, &tenurev1.AcquireRequest{Resource: fmt.Sprintf("other/%d", i), Holder: "h"})
	}
	mid := b.acquire(t, &tenurev1.AcquireRequest{Resource: "w/mid", Holder: "h"})
	for i := range 40 {
		b.acquire(t, &tenurev1.AcquireRequest{Resource: fmt.Sprintf("more/%d", i), Holder: "h"})
	}
	stream, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "w/", AfterIndex: from}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	late := b.acquire(t, &tenurev1.AcquireRequest{Resource: "w/late", Holder: "h"})
	var got []string
	var last uint64
	for _, want := range []string{early.LeaseId, mid.LeaseId, late.LeaseId} {
		if !stream.Receive() {
			t.Fatalf("stream ended after %q: %v", got, stream.Err())
		}
		ev := stream.Msg().Event
		got = append(got, ev.Resource)
		if ev.LeaseId != want || ev.Type != "lease.issued" || ev.Index <= last {
			t.Fatalf("events %q: %v; want lease %s next", got, ev, want)
		}
		last = ev.Index
	}

	// Events older than their namespace's history retention are not sent,
	// from the files or the feed (as History does not answer them).
	if _, err := b.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "default",
		Policy: &tenurev1.NamespacePolicy{HistoryRetention: durationpb.New(time.Second)}})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "w/late's events to pass the retention", 5*time.Second, func() bool {
		h, err := b.leases.History(ctx, connect.NewRequest(&tenurev1.HistoryRequest{Resource: "w/late"}))
		return err == nil && len(h.Msg.Events) == 0
	})
	recent := b.acquire(t, &tenurev1.AcquireRequest{Resource: "w/recent", Holder: "h"})
	kept, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "w/", AfterIndex: from}))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	if !kept.Receive() || kept.Msg().Event.LeaseId != recent.LeaseId {
		t.Fatalf("a watch resumed past the retention: %v %v; want w/recent's grant first", kept.Msg(), kept.Err())
	}
	if _, err := b.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "default",
		Policy: &tenurev1.NamespacePolicy{HistoryRetention: durationpb.New(time.Hour)}})); err != nil {
		t.Fatal(err)
	}

	// The first file gone (pruned): a resume from before it is refused,
	// naming where the files begin.
	segs, err := ledger.Segments(filepath.Join(dir, "ledger"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("ledger segments: %v %v", segs, err)
	}
	if err := os.Remove(segs[0]); err != nil {
		t.Fatal(err)
	}
	gone, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "w/", AfterIndex: from}))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	if gone.Receive() {
		t.Fatalf("a watch from before the files received %v", gone.Msg())
	}
	wantReason(t, gone.Err(), connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	if m := metadataOf(gone.Err()); m["oldest_index"] != fmt.Sprint(ledger.FirstIndex(segs[1])) {
		t.Fatalf("compacted watch: metadata %v; want oldest_index %d", m, ledger.FirstIndex(segs[1]))
	}
}

func TestWatchReceivesEvents(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	from := b.status(t).LedgerIndex
	stream, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "watched/", AfterIndex: from}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "other", Holder: "w1"})
	l := b.acquire(t, &tenurev1.AcquireRequest{Resource: "watched/1", Holder: "w1"})
	if !stream.Receive() {
		t.Fatalf("stream ended: %v", stream.Err())
	}
	ev := stream.Msg().Event
	if ev.Type != "lease.issued" || ev.LeaseId != l.LeaseId || ev.Fence != l.Fence || ev.Resource != "watched/1" ||
		ev.Index <= from || ev.Time == nil || len(ev.Hash) != 32 || ev.Details["mode"] != "MODE_EXCLUSIVE" || ev.Details["ttl"] != "60s" {
		t.Fatalf("event: %v", ev)
	}
	if _, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: l.LeaseId, Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().Event.Type != "lease.released" {
		t.Fatalf("want lease.released, got %v %v", stream.Msg(), stream.Err())
	}

	// A resume past the last record (another cluster's index, a data dir
	// wiped since) is refused after a short wait, not followed in silence.
	head := b.status(t).LedgerIndex
	ahead, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{AfterIndex: head + 1_000_000}))
	if err != nil {
		t.Fatal(err)
	}
	if ahead.Receive() {
		t.Fatalf("a watch past the head received %v", ahead.Msg())
	}
	wantReason(t, ahead.Err(), connect.CodeInvalidArgument, "INVALID_ARGUMENT")
	ahead.Close()

	// A prefix with a control character is refused like List's.
	bad, err := b.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "a\x01"}))
	if err == nil {
		bad.Receive()
		err = bad.Err()
		bad.Close()
	}
	wantReason(t, err, connect.CodeInvalidArgument, "INVALID_ARGUMENT")

	// A live watch (no afterIndex) over Connect JSON flushes its headers at once.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/tenure.v1.LeaseService/Watch",
		bytes.NewReader(connectEnvelope([]byte(`{}`))))
	req.Header.Set("Content-Type", "application/connect+json")
	resp, err := b.http.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("live watch: %v %v", resp, err)
	}
	resp.Body.Close()

	// A watch that reaches the caller's deadline ends with
	// deadline_exceeded, not as if the feed had ended.
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/tenure.v1.LeaseService/Watch",
		bytes.NewReader(connectEnvelope([]byte(`{}`))))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Timeout-Ms", "200")
	resp, err = b.http.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch with a deadline: %v %v", resp, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Contains(body, []byte(`"code":"deadline_exceeded"`)) {
		t.Fatalf("watch past its deadline ended with %q, %v; want deadline_exceeded", body, err)
	}
	// With its reason, as every error has (API.md), and where to resume.
	if !bytes.Contains(body, []byte(`"message":"DEADLINE_EXCEEDED: `)) || !bytes.Contains(body, []byte(`"reason":"DEADLINE_EXCEEDED"`)) ||
		!bytes.Contains(body, []byte(`"last_index":`)) {
		t.Fatalf("watch past its deadline ended with %q; want reason DEADLINE_EXCEEDED, a message starting with it and last_index", body)
	}
}

// connectEnvelope frames one Connect streaming message.
func connectEnvelope(msg []byte) []byte {
	return append([]byte{0, byte(len(msg) >> 24), byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

func TestKeepAlive(t *testing.T) {
	b := setup(t)
	l := b.acquire(t, &tenurev1.AcquireRequest{Resource: "ka", Holder: "w1", Ttl: durationpb.New(10 * time.Second)})
	stream := b.leases.KeepAlive(context.Background())
	if err := stream.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{l.LeaseId, "gone"}, RequestId: 7, Ttl: durationpb.New(20 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if resp.RequestId != 7 || len(resp.Leases) != 1 || resp.Leases[0].RenewalCount != 1 || len(resp.Failures) != 1 || resp.Failures[0].Reason != "LEASE_NOT_FOUND" {
		t.Fatalf("keepalive: %v", resp)
	}
	if err := stream.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{"gone"}, RequestId: 8}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Receive(); err != nil || resp.RequestId != 8 || len(resp.Failures) != 1 {
		t.Fatalf("keepalive single failure: %v %v", resp, err)
	}
	// A malformed message is answered with its failures and the stream
	// goes on: a malformed id fails alone, the others are renewed; an
	// empty message or a bad ttl fails whole.
	if err := stream.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{"", l.LeaseId, strings.Repeat("x", 129)}, RequestId: 9}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Receive(); err != nil || resp.RequestId != 9 || len(resp.Leases) != 1 || len(resp.Failures) != 2 ||
		resp.Failures[0].Reason != "INVALID_ARGUMENT" || resp.Failures[1].Reason != "INVALID_ARGUMENT" {
		t.Fatalf("keepalive with malformed ids: %v %v", resp, err)
	}
	for id, m := range map[uint64]*tenurev1.KeepAliveRequest{
		10: {},
		11: {LeaseIds: []string{l.LeaseId}, Ttl: durationpb.New(0)},
	} {
		m.RequestId = id
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		if resp, err = stream.Receive(); err != nil || resp.RequestId != id || len(resp.Leases) != 0 || len(resp.Failures) != 1 {
			t.Fatalf("keepalive message %d: %v %v", id, resp, err)
		}
	}
	if err := stream.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{l.LeaseId}, RequestId: 12}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Receive(); err != nil || resp.RequestId != 12 || len(resp.Leases) != 1 {
		t.Fatalf("keepalive after malformed messages: %v %v", resp, err)
	}
	stream.CloseRequest()
	stream.CloseResponse()
}

// A KeepAlive stream asked to (notify_ended) tells of a lease it renews
// that is revoked or expires, unasked and at once, but not of its holder's
// own release.
func TestKeepAliveNotifiesEnds(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := durationpb.New(time.Minute)
	revoked := b.acquire(t, &tenurev1.AcquireRequest{Resource: "ka/revoked", Holder: "w1", Ttl: ttl})
	released := b.acquire(t, &tenurev1.AcquireRequest{Resource: "ka/released", Holder: "w1", Ttl: ttl})
	short := b.acquire(t, &tenurev1.AcquireRequest{Resource: "ka/short", Holder: "w1", Ttl: durationpb.New(time.Second)})
	stream := b.leases.KeepAlive(ctx)
	defer func() {
		stream.CloseRequest()
		stream.CloseResponse()
	}()
	// A receive that waits for a message never sent fails at ctx's end
	// (the context alone does not unblock it).
	defer context.AfterFunc(ctx, func() { stream.CloseResponse() })()
	renew := func(id uint64, leases ...*tenurev1.Lease) {
		t.Helper()
		m := &tenurev1.KeepAliveRequest{RequestId: id, NotifyEnded: true}
		for _, l := range leases {
			m.LeaseIds = append(m.LeaseIds, l.LeaseId)
		}
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Receive()
		if err != nil || resp.RequestId != id || len(resp.Leases) != len(leases) {
			t.Fatalf("renewal %d: %v, %v", id, resp, err)
		}
	}
	// pushed receives the next unasked message and returns its failures.
	pushed := func() []*tenurev1.RenewFailure {
		t.Helper()
		resp, err := stream.Receive()
		if err != nil || resp.RequestId != 0 || len(resp.Leases) != 0 {
			t.Fatalf("want an unasked message, got %v, %v", resp, err)
		}
		return resp.Failures
	}
	renew(1, revoked, released, short)
	if _, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: released.LeaseId, Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: revoked.LeaseId, Reason: "maintenance"})); err != nil {
		t.Fatal(err)
	}
	// The short lease, left to expire, is told as its renewal would be
	// (whichever comes first).
	told := map[string]*tenurev1.RenewFailure{}
	for len(told) < 2 {
		for _, f := range pushed() {
			if told[f.LeaseId] != nil {
				t.Fatalf("lease %s told twice", f.LeaseId)
			}
			told[f.LeaseId] = f
		}
	}
	if f := told[revoked.LeaseId]; f == nil || f.Reason != "LEASE_TERMINAL" ||
		f.Message != "LEASE_TERMINAL: lease "+revoked.LeaseId+" is REVOKED: maintenance" {
		t.Fatalf("revocation told as %v (all: %v)", f, told)
	}
	if f := told[short.LeaseId]; f == nil || f.Reason != "LEASE_EXPIRED" {
		t.Fatalf("expiry told as %v (all: %v)", f, told)
	}
	// Nothing else is pending: the next message answers the next request.
	again := b.acquire(t, &tenurev1.AcquireRequest{Resource: "ka/again", Holder: "w1", Ttl: ttl})
	renew(2, again)
	// A stream that did not ask is told nothing unasked.
	plain := b.leases.KeepAlive(ctx)
	defer func() {
		plain.CloseRequest()
		plain.CloseResponse()
	}()
	if err := plain.Send(&tenurev1.KeepAliveRequest{RequestId: 1, LeaseIds: []string{again.LeaseId}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := plain.Receive(); err != nil || resp.RequestId != 1 {
		t.Fatalf("plain renewal: %v, %v", resp, err)
	}
	if _, err := b.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: again.LeaseId})); err != nil {
		t.Fatal(err)
	}
	if err := plain.Send(&tenurev1.KeepAliveRequest{RequestId: 2, LeaseIds: []string{again.LeaseId}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := plain.Receive(); err != nil || resp.RequestId != 2 || len(resp.Failures) != 1 || resp.Failures[0].Reason != "LEASE_TERMINAL" {
		t.Fatalf("plain renewal of the revoked lease: %v, %v", resp, err)
	}
	// The asking stream still follows it (the plain one never did): told.
	f := pushed()
	if len(f) != 1 || f[0].LeaseId != again.LeaseId {
		t.Fatalf("revocation of a lease renewed on both streams told as %v", f)
	}
}

func TestRestartKeepsLeases(t *testing.T) {
	b := setup(t)
	l := b.acquire(t, &tenurev1.AcquireRequest{Resource: "durable", Holder: "w1", Ttl: durationpb.New(time.Minute)})
	dir := b.dir
	b.stop(t)

	b = setup(t, dir)
	got, err := b.leases.Get(context.Background(), connect.NewRequest(&tenurev1.GetRequest{LeaseId: l.LeaseId}))
	if err != nil || got.Msg.Lease.State != tenurev1.State_STATE_ACTIVE || got.Msg.Lease.Fence != l.Fence {
		t.Fatalf("after restart: %v %v", got, err)
	}
	next := b.acquire(t, &tenurev1.AcquireRequest{Resource: "durable2", Holder: "w1"})
	if next.Fence <= l.Fence {
		t.Fatalf("fence after restart %d, want > %d", next.Fence, l.Fence)
	}
}

func TestOpsEndpoints(t *testing.T) {
	b := setup(t)
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "m", Holder: "w"})
	if _, err := b.leases.Acquire(context.Background(), connect.NewRequest(&tenurev1.AcquireRequest{Resource: "m", Holder: "w2"})); err == nil {
		t.Fatal("second acquire of m succeeded")
	}
	// An acquire that asked to wait is timed apart: its time is the wait's.
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "m-wait", Holder: "w", Wait: durationpb.New(time.Second)})
	resp, err := b.http.Get(b.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"tenure_grants_total 2", "tenure_leases_active 2", "tenure_raft_commit_index", "tenure_raft_apply_seconds", "tenure_is_leader 1", "tenure_has_leader 1", "tenure_leader_changes_seen_total 1",
		`tenure_rpc_requests_total{code="ok",procedure="/tenure.v1.LeaseService/Acquire"} 2`,
		`tenure_rpc_requests_total{code="failed_precondition",procedure="/tenure.v1.LeaseService/Acquire"} 1`,
		`tenure_rpc_duration_seconds_count{procedure="/tenure.v1.LeaseService/Acquire"} 2`,
		`tenure_rpc_wait_duration_seconds_count{procedure="/tenure.v1.LeaseService/Acquire"} 1`} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %q", m)
		}
	}
	// The ledger's size and the last snapshot are there for operators.
	for _, re := range []string{`(?m)^tenure_ledger_bytes [1-9]`, `(?m)^tenure_raft_last_snapshot_index \d`} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	// What the retention caps bound.
	if !strings.Contains(string(body), "tenure_leases_retained 0") || !strings.Contains(string(body), "tenure_tasks_finished_retained 0") {
		t.Errorf("/metrics before any lease ended:\n%s", body)
	}
	l := b.acquire(t, &tenurev1.AcquireRequest{Resource: "m2", Holder: "w"})
	if _, err := b.leases.Release(context.Background(), connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: l.LeaseId, Holder: "w"})); err != nil {
		t.Fatal(err)
	}
	resp, err = b.http.Get(b.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "tenure_leases_retained 1") {
		t.Errorf("/metrics after a release lacks tenure_leases_retained 1")
	}
	st := b.status(t)
	if st.LeaderId != "node1" || st.NodeId != "node1" || len(st.Members) != 1 || st.Members[0].Role != tenurev1.Role_ROLE_LEADER ||
		st.LeaderApiAddress != b.srv.Addr() || st.AppliedIndex < st.CommitIndex-1 {
		t.Errorf("status: %v", st)
	}
	snap, err := b.cluster.Snapshot(context.Background(), connect.NewRequest(&tenurev1.SnapshotRequest{}))
	if err != nil || snap.Msg.Index == 0 {
		t.Errorf("Snapshot: %v %v", snap, err)
	}
	// A grant after the snapshot is replayed from the log at the restart:
	// not counted again (a counter starts from zero in a new process).
	b.acquire(t, &tenurev1.AcquireRequest{Resource: "m3", Holder: "w"})
	// Restored from that snapshot, the node reports the leases it holds
	// (it used to count from zero, and below as they ended).
	b.stop(t)
	b = setup(t, b.dir)
	resp, err = b.http.Get(b.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "tenure_leases_active 3\n") || !strings.Contains(string(body), "tenure_waiters 0\n") ||
		!regexp.MustCompile(`(?m)^tenure_raft_last_snapshot_index [1-9]`).Match(body) {
		t.Errorf("/metrics after a restart from a snapshot with two active leases and one more in the log:\n%s", body)
	}
	for _, m := range []string{"tenure_grants_total 0\n", `tenure_leases_ended_total{state="EXPIRED"} 0` + "\n"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics after a restart lacks %q (replayed entries counted again?)", m)
		}
	}
}

// TestKeepAliveFollowsWithoutRenewing: follow_lease_ids has the stream
// tell the end of a lease it has not renewed (one just granted), at once
// for one that has ended already; the follow itself is not answered, and
// a lease released by its holder is not told.
func TestKeepAliveFollowsWithoutRenewing(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := durationpb.New(time.Minute)
	fresh := b.acquire(t, &tenurev1.AcquireRequest{Resource: "fo/fresh", Holder: "w1", Ttl: ttl})
	gone := b.acquire(t, &tenurev1.AcquireRequest{Resource: "fo/gone", Holder: "w1", Ttl: ttl})
	mine := b.acquire(t, &tenurev1.AcquireRequest{Resource: "fo/mine", Holder: "w1", Ttl: ttl})
	if _, err := b.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: gone.LeaseId, Reason: "early"})); err != nil {
		t.Fatal(err)
	}
	stream := b.leases.KeepAlive(ctx)
	defer func() {
		stream.CloseRequest()
		stream.CloseResponse()
	}()
	defer context.AfterFunc(ctx, func() { stream.CloseResponse() })()
	if err := stream.Send(&tenurev1.KeepAliveRequest{NotifyEnded: true,
		FollowLeaseIds: []string{fresh.LeaseId, gone.LeaseId, mine.LeaseId}}); err != nil {
		t.Fatal(err)
	}
	// The lease revoked before the follow: told at once, unasked.
	resp, err := stream.Receive()
	if err != nil || resp.RequestId != 0 || len(resp.Failures) != 1 || resp.Failures[0].LeaseId != gone.LeaseId ||
		resp.Failures[0].Message != "LEASE_TERMINAL: lease "+gone.LeaseId+" is REVOKED: early" {
		t.Fatalf("a lease revoked before it was followed: %v, %v", resp, err)
	}
	if _, err := b.leases.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{LeaseId: mine.LeaseId, Holder: "w1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: fresh.LeaseId, Reason: "now"})); err != nil {
		t.Fatal(err)
	}
	// The next message is the fresh lease's revocation: the follow was
	// not answered, and the holder's release was not told.
	resp, err = stream.Receive()
	if err != nil || resp.RequestId != 0 || len(resp.Failures) != 1 || resp.Failures[0].LeaseId != fresh.LeaseId {
		t.Fatalf("revocation of a followed lease: %v, %v", resp, err)
	}
}

// postProto posts body (a request message's wire bytes) to path as
// Connect's application/proto, and returns the HTTP status and the error
// body (Connect answers errors in JSON).
func (b *bundle) postProto(t *testing.T, path string, body []byte) (int, map[string]any) {
	t.Helper()
	resp, err := b.http.Post(b.base+path, "application/proto", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %d %q is not a JSON error", path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// postGRPC posts body (a request message's wire bytes) to path as one
// uncompressed gRPC frame, and returns the call's gRPC status and message
// (from the trailers, or the headers of a trailers-only answer).
func (b *bundle) postGRPC(t *testing.T, path string, body []byte) (status, msg string) {
	t.Helper()
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	req, _ := http.NewRequest(http.MethodPost, b.base+path, bytes.NewReader(append(frame, body...)))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	status, msg = resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" {
		status, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	return status, msg
}

// TestInvalidUTF8NamesTheField: a string that is not UTF-8 is refused
// with the field named in the ErrorInfo (API.md: "non-UTF-8 input; the
// metadata names the field"), as the path of proto field names, in
// Connect JSON, Connect's binary proto and gRPC; and nothing changes.
func TestInvalidUTF8NamesTheField(t *testing.T) {
	b := setup(t)
	before := b.status(t)
	fieldOf := func(t *testing.T, out map[string]any) string {
		t.Helper()
		for _, d := range out["details"].([]any) {
			if dbg, _ := d.(map[string]any)["debug"].(map[string]any); dbg != nil {
				md, _ := dbg["metadata"].(map[string]any)
				f, _ := md["field"].(string)
				return f
			}
		}
		t.Fatalf("no ErrorInfo in %v", out)
		return ""
	}
	for _, tc := range []struct{ name, method, body, field string }{
		{"resource", "LeaseService/Acquire", "{\"resource\":\"r\xff\",\"holder\":\"w\"}", "resource"},
		{"holder after a valid one", "LeaseService/Acquire", "{\"resource\":\"r\",\"holder\":\"w\xfe\"}", "holder"},
		{"nested, camelCase", "QueueService/Enqueue", "{\"queue\":\"q\",\"tasks\":[{\"taskId\":\"a\"},{\"taskId\":\"b\xff\"}]}", "tasks.task_id"},
		{"a map's key", "LeaseService/Acquire", "{\"resource\":\"r\",\"holder\":\"w\",\"budget\":{\"limits\":{\"tok\xffens\":\"5\"}}}", "budget.limits.tok\ufffdens"},
		{"after an object", "LeaseService/Acquire", "{\"budget\":{\"limits\":{\"t\":\"5\"}},\"holder\":\"w\xff\",\"resource\":\"r\"}", "holder"},
	} {
		t.Run("json "+tc.name, func(t *testing.T) {
			code, out := b.postJSON(t, tc.method, tc.body)
			if code == http.StatusOK || out["code"] != "invalid_argument" || errorReason(t, out) != "INVALID_ARGUMENT" {
				t.Fatalf("got %d %v, want INVALID_ARGUMENT", code, out)
			}
			if f := fieldOf(t, out); f != tc.field {
				t.Errorf("field %q, want %q (%v)", f, tc.field, out["message"])
			}
			if msg, _ := out["message"].(string); !strings.HasPrefix(msg, "INVALID_ARGUMENT: "+tc.field+" is not valid UTF-8") {
				t.Errorf("message %q", msg)
			}
		})
	}

	fd := (&tenurev1.EnqueueRequest{}).ProtoReflect().Descriptor().Fields()
	taskID := (&tenurev1.NewTask{}).ProtoReflect().Descriptor().Fields().ByName("task_id").Number()
	task := protowire.AppendString(protowire.AppendTag(nil, taskID, protowire.BytesType), "t\xff")
	body := protowire.AppendString(protowire.AppendTag(nil, fd.ByName("queue").Number(), protowire.BytesType), "q")
	body = protowire.AppendBytes(protowire.AppendTag(body, fd.ByName("tasks").Number(), protowire.BytesType), task)
	t.Run("proto", func(t *testing.T) {
		code, out := b.postProto(t, "/tenure.v1.QueueService/Enqueue", body)
		if out["code"] != "invalid_argument" {
			t.Fatalf("%d %v", code, out)
		}
		if f := fieldOf(t, out); f != "tasks.task_id" {
			t.Errorf("field %q, want tasks.task_id", f)
		}
	})
	t.Run("grpc", func(t *testing.T) {
		if status, msg := b.postGRPC(t, "/tenure.v1.QueueService/Enqueue", body); status != "3" || !strings.HasPrefix(msg, "INVALID_ARGUMENT: tasks.task_id is not valid UTF-8") {
			t.Errorf("status %q message %q", status, msg)
		}
	})
	if after := b.status(t); after.CommitIndex != before.CommitIndex {
		t.Errorf("bad input changed the log: commit %d→%d", before.CommitIndex, after.CommitIndex)
	}
}
