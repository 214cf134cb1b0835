package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// allProcedures lists every RPC of every service, with its kind.
func allProcedures() map[string]protoreflect.MethodDescriptor {
	out := map[string]protoreflect.MethodDescriptor{}
	for _, fd := range []protoreflect.FileDescriptor{tenurev1.File_tenure_v1_lease_proto, tenurev1.File_tenure_v1_queue_proto,
		tenurev1.File_tenure_v1_pool_proto, tenurev1.File_tenure_v1_cluster_proto} {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				out["/"+string(sd.FullName())+"/"+string(md.Name())] = md
			}
		}
	}
	return out
}

// TestEveryRPCHasAnAccessRule: a new RPC cannot be added without saying
// who may call it (and the table names no RPC that does not exist).
func TestEveryRPCHasAnAccessRule(t *testing.T) {
	t.Parallel()
	procs := allProcedures()
	for p := range procs {
		if _, ok := rules[p]; !ok {
			t.Errorf("%s has no access rule", p)
		}
	}
	for p := range rules {
		if _, ok := procs[p]; !ok {
			t.Errorf("rule for unknown procedure %s", p)
		}
	}
}

// drainBackup reads a SaveSnapshot stream to its end and returns its
// error.
func drainBackup(s *connect.ServerStreamForClient[tenurev1.SaveSnapshotResponse], err error) error {
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
	}
	return s.Err()
}

// callRaw calls any procedure with an empty request (proto binary: a
// zero-length message decodes as any request type) and returns the error.
func callRaw(ctx context.Context, hc connect.HTTPClient, base, proc string, md protoreflect.MethodDescriptor, opts ...connect.ClientOption) error {
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, base+proc, opts...)
	switch {
	case md.IsStreamingClient():
		s := c.CallBidiStream(ctx)
		if err := s.Send(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_ = s.CloseRequest()
		_, err := s.Receive()
		_ = s.CloseResponse()
		return err
	case md.IsStreamingServer():
		s, err := c.CallServerStream(ctx, connect.NewRequest(&emptypb.Empty{}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	_, err := c.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
	return err
}

// TestEveryRPCWithoutCredentialsIsUnauthenticated: every RPC of every
// service, in the Connect and gRPC protocols, answers UNAUTHENTICATED
// (with the reason in ErrorInfo) when the caller sends no token, a
// malformed header or an unknown token; health checks stay open.
func TestEveryRPCWithoutCredentialsIsUnauthenticated(t *testing.T) {
	b := startSecure(t, nil)
	hc := h2cClient()
	creds := map[string]string{"none": "", "unknown token": "Bearer tok-nobody", "basic": "Basic dzE6dzE=", "empty bearer": "Bearer "}
	for proc, md := range allProcedures() {
		for name, header := range creds {
			for _, proto := range []string{"connect", "grpc"} {
				t.Run(shortProc(proc)+"/"+name+"/"+proto, func(t *testing.T) {
					opts := []connect.ClientOption{connect.WithInterceptors(rawAuth(header))}
					if proto == "grpc" {
						opts = append(opts, connect.WithGRPC())
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					err := callRaw(ctx, hc, b.base, proc, md, opts...)
					wantReason(t, err, connect.CodeUnauthenticated, "UNAUTHENTICATED")
					problem := map[string]string{"none": "missing", "unknown token": "unknown_token", "basic": "malformed", "empty bearer": "malformed"}[name]
					if m := errorMeta(t, err); m["problem"] != problem || m["credentials"] != "bearer" {
						t.Errorf("metadata %v; want problem %s, credentials bearer", m, problem)
					}
				})
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(b.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s without credentials", path, resp.Status)
		}
	}
	// The dashboard's static files hold no data: no credentials needed
	// (this build serves none, so not found rather than unauthorized).
	if resp, err := http.Get(b.base + "/ui/index.html"); err != nil || resp.StatusCode == http.StatusUnauthorized {
		t.Errorf("/ui/ without credentials: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// /metrics needs a principal (any role).
	resp, err := http.Get(b.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("/metrics without a token: %s %v", resp.Status, resp.Header)
	}
	req, _ := http.NewRequest("GET", b.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer tok-r1")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with a token: %s", resp.Status)
	}
	// Two Authorization headers, even both valid, are refused: a proxy
	// in front might read the other one.
	req, _ = http.NewRequest("GET", b.base+"/metrics", nil)
	req.Header.Add("Authorization", "Bearer tok-r1")
	req.Header.Add("Authorization", "Bearer tok-r1")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics with two Authorization headers: %s", resp.Status)
	}
}

// rawAuth sets the Authorization header verbatim ("" = none).
type rawAuth string

func (a rawAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if a != "" {
			req.Header().Set("Authorization", string(a))
		}
		return next(ctx, req)
	}
}

func (a rawAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if a != "" {
			conn.RequestHeader().Set("Authorization", string(a))
		}
		return conn
	}
}

func (a rawAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func ttl(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// TestWrongRoleOrNamespaceIsDenied: a principal without the RPC's role,
// or naming a namespace outside its patterns, gets PERMISSION_DENIED.
func TestWrongRoleOrNamespaceIsDenied(t *testing.T) {
	b := startSecure(t, nil)
	w1, r1, q1 := b.as("tok-w1"), b.as("tok-r1"), b.as("tok-q1")
	ctx := context.Background()
	req := connect.NewRequest[tenurev1.AcquireRequest]
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"reader acquires", func() error {
			_, err := r1.leases.Acquire(ctx, req(&tenurev1.AcquireRequest{Namespace: "team-a", Resource: "x"}))
			return err
		}},
		{"holder acquires outside its namespace", func() error {
			_, err := w1.leases.Acquire(ctx, req(&tenurev1.AcquireRequest{Namespace: "team-a", Resource: "x"}))
			return err
		}},
		{"holder lists", func() error {
			_, err := w1.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{}))
			return err
		}},
		{"reader lists a foreign namespace", func() error {
			_, err := r1.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{Namespace: "default"}))
			return err
		}},
		{"reader lists the default namespace by omission", func() error {
			_, err := r1.leases.List(ctx, connect.NewRequest(&tenurev1.ListRequest{}))
			return err
		}},
		{"reader reads history of a foreign namespace", func() error {
			_, err := r1.leases.History(ctx, connect.NewRequest(&tenurev1.HistoryRequest{Namespace: "default", Resource: "x"}))
			return err
		}},
		{"holder grants a scope over a foreign namespace", func() error {
			_, err := w1.leases.Acquire(ctx, req(&tenurev1.AcquireRequest{Resource: "scoped",
				Scope: &tenurev1.Scope{Namespaces: []string{"default", "team-a"}}}))
			return err
		}},
		{"namespace admin grants a scope past its namespaces", func() error {
			_, err := b.as("tok-teamadmin").leases.Acquire(ctx, req(&tenurev1.AcquireRequest{Namespace: "team-a", Resource: "x",
				Holder: "w1", Scope: &tenurev1.Scope{Namespaces: []string{"team-b", "default"}}}))
			return err
		}},
		{"holder revokes", func() error {
			_, err := w1.leases.Revoke(ctx, connect.NewRequest(&tenurev1.RevokeRequest{LeaseId: "01ABC"}))
			return err
		}},
		{"holder sets a policy", func() error {
			_, err := w1.cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "default"}))
			return err
		}},
		{"namespace admin sets the server-wide defaults", func() error {
			_, err := b.as("tok-teamadmin").cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "*"}))
			return err
		}},
		{"namespace admin sets another namespace's policy", func() error {
			_, err := b.as("tok-teamadmin").cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "default"}))
			return err
		}},
		{"namespace admin acquires outside its namespaces", func() error {
			_, err := b.as("tok-teamadmin").leases.Acquire(ctx, req(&tenurev1.AcquireRequest{Resource: "x", Holder: "w1"}))
			return err
		}},
		{"namespace admin snapshots every namespace", func() error {
			_, err := b.as("tok-teamadmin").cluster.Snapshot(ctx, connect.NewRequest(&tenurev1.SnapshotRequest{}))
			return err
		}},
		{"namespace admin adds a voter", func() error {
			_, err := b.as("tok-teamadmin").cluster.AddVoter(ctx, connect.NewRequest(&tenurev1.AddVoterRequest{Id: "evil", RaftAddress: "127.0.0.1:1"}))
			return err
		}},
		{"namespace admin removes a member", func() error {
			_, err := b.as("tok-teamadmin").cluster.RemoveServer(ctx, connect.NewRequest(&tenurev1.RemoveServerRequest{Id: "n1"}))
			return err
		}},
		{"namespace admin moves the leadership", func() error {
			_, err := b.as("tok-teamadmin").cluster.TransferLeadership(ctx, connect.NewRequest(&tenurev1.TransferLeadershipRequest{}))
			return err
		}},
		{"namespace admin backs up every namespace", func() error {
			return drainBackup(b.as("tok-teamadmin").cluster.SaveSnapshot(ctx, connect.NewRequest(&tenurev1.SaveSnapshotRequest{})))
		}},
		{"reader backs up", func() error {
			return drainBackup(r1.cluster.SaveSnapshot(ctx, connect.NewRequest(&tenurev1.SaveSnapshotRequest{})))
		}},
		{"reader snapshots", func() error {
			_, err := r1.cluster.Snapshot(ctx, connect.NewRequest(&tenurev1.SnapshotRequest{}))
			return err
		}},
		{"worker removes a member", func() error {
			_, err := q1.cluster.RemoveServer(ctx, connect.NewRequest(&tenurev1.RemoveServerRequest{Id: "n1"}))
			return err
		}},
		{"worker claims outside its namespace", func() error {
			_, err := q1.queues.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Namespace: "default", Queue: "q", Max: 1}))
			return err
		}},
		{"holder enqueues", func() error {
			_, err := w1.queues.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: "default", Queue: "q",
				Tasks: []*tenurev1.NewTask{{Payload: []byte("x")}}}))
			return err
		}},
		{"reader requests pieces", func() error {
			_, err := r1.pools.RequestLeases(ctx, connect.NewRequest(&tenurev1.RequestLeasesRequest{Namespace: "team-a", Pool: "p", Max: 1}))
			return err
		}},
		{"worker reads a foreign pool", func() error {
			_, err := q1.pools.Status(ctx, connect.NewRequest(&tenurev1.PoolStatusRequest{Namespace: "team-a", Pool: "p"}))
			return err
		}},
		{"worker deletes a pool in its namespace", func() error {
			_, err := q1.pools.DeletePool(ctx, connect.NewRequest(&tenurev1.DeletePoolRequest{Namespace: "jobs", Pool: "p"}))
			return err
		}},
		{"namespace admin deletes another namespace's pool", func() error {
			_, err := b.as("tok-teamadmin").pools.DeletePool(ctx, connect.NewRequest(&tenurev1.DeletePoolRequest{Namespace: "default", Pool: "p"}))
			return err
		}},
		{"holder watches", func() error {
			s, err := w1.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{}))
			if err != nil {
				return err
			}
			defer s.Close()
			s.Receive()
			return s.Err()
		}},
		{"reader watches a foreign namespace", func() error {
			s, err := r1.leases.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Namespace: "default"}))
			if err != nil {
				return err
			}
			defer s.Close()
			s.Receive()
			return s.Err()
		}},
		{"reader keeps leases alive", func() error {
			s := r1.leases.KeepAlive(ctx)
			_ = s.Send(&tenurev1.KeepAliveRequest{LeaseIds: []string{"01ABC"}})
			_, err := s.Receive()
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantReason(t, tc.call(), connect.CodePermissionDenied, "PERMISSION_DENIED")
		})
	}
	// Pipelined, the same.
	ps := w1.leases.Pipeline(ctx)
	defer ps.CloseResponse()
	if err := ps.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{{Id: 1, Op: &tenurev1.PipelineOp_Acquire{
		Acquire: &tenurev1.AcquireRequest{Resource: "scoped", Scope: &tenurev1.Scope{Namespaces: []string{"team-a"}}}}}}}); err != nil {
		t.Fatal(err)
	}
	if pr, err := ps.Receive(); err != nil {
		t.Fatal(err)
	} else if got := pr.GetResults()[0].GetError().GetReason(); got != "PERMISSION_DENIED" {
		t.Errorf("pipelined Acquire with a scope over a foreign namespace: %v, want PERMISSION_DENIED", pr.GetResults()[0])
	}
	// A scope within the caller's namespaces is granted.
	if _, err := w1.leases.Acquire(ctx, req(&tenurev1.AcquireRequest{Resource: "scoped-ok",
		Scope: &tenurev1.Scope{Namespaces: []string{"default"}}})); err != nil {
		t.Errorf("holder acquires with a scope over its own namespace: %v", err)
	}
	// A worker's pool is deleted by its namespace's admin.
	if _, err := q1.pools.CreatePool(ctx, connect.NewRequest(&tenurev1.CreatePoolRequest{Namespace: "jobs", Pool: "p"})); err != nil {
		t.Fatal(err)
	}
	if dp, err := b.as("tok-root").pools.DeletePool(ctx, connect.NewRequest(&tenurev1.DeletePoolRequest{Namespace: "jobs", Pool: "p"})); err != nil || !dp.Msg.Deleted {
		t.Errorf("admin deletes a worker's pool: %v %v", dp, err)
	}
	// Within its namespaces the namespace admin may change the policy.
	if _, err := b.as("tok-teamadmin").cluster.SetPolicy(ctx, connect.NewRequest(&tenurev1.SetPolicyRequest{Namespace: "team-a",
		Policy: &tenurev1.NamespacePolicy{MaxActivePerHolder: 5}})); err != nil {
		t.Errorf("namespace admin SetPolicy in scope: %v", err)
	}
}

// TestNoForeignNamespaceLeaks: what a caller may not see appears nowhere
// in the bytes of List, Watch (with no namespace filter), Get and Verify.
func TestNoForeignNamespaceLeaks(t *testing.T) {
	b := startSecure(t, nil)
	root, r1 := b.as("tok-root"), b.as("tok-r1")
	ctx := context.Background()
	acquire := func(ns, res, holder string) *tenurev1.Lease {
		t.Helper()
		resp, err := root.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Namespace: ns, Resource: res, Holder: holder, Ttl: ttl(time.Minute)}))
		if err != nil {
			t.Fatalf("admin acquire in %s: %v", ns, err)
		}
		return resp.Msg.Lease
	}

	// A live Watch of every namespace, as raw Connect stream bytes.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	watch := rawWatch(t, wctx, b.base, "tok-r1")
	defer watch.Close()

	secret := acquire("secret-ns", "secret-resource", "secret-holder")
	visible := acquire("team-a", "visible-resource", "h1")

	// The visible event arrives; nothing before it names the secret.
	var seen bytes.Buffer
	for !bytes.Contains(seen.Bytes(), []byte("visible-resource")) {
		msg, err := readEnvelope(watch)
		if err != nil {
			t.Fatalf("watch: %v (so far %q)", err, seen.String())
		}
		seen.Write(msg)
	}
	if bytes.Contains(seen.Bytes(), []byte("secret")) {
		t.Fatalf("watch stream of r1 names the foreign namespace: %s", seen.String())
	}

	body := connectJSON(t, b.base, "/tenure.v1.LeaseService/List", "tok-r1", `{"namespace":"team-a"}`)
	if !strings.Contains(body, "visible-resource") || strings.Contains(body, "secret") {
		t.Errorf("List: %s", body)
	}
	body = connectJSON(t, b.base, "/tenure.v1.LeaseService/Get", "tok-r1", `{"leaseId":"`+secret.LeaseId+`"}`)
	if !strings.Contains(body, "LEASE_NOT_FOUND") || strings.Contains(body, "secret") {
		t.Errorf("Get of a foreign lease: %s", body)
	}
	body = connectJSON(t, b.base, "/tenure.v1.LeaseService/Verify", "tok-r1", `{"leaseIds":["`+secret.LeaseId+`","`+visible.LeaseId+`"]}`)
	if strings.Contains(body, "secret") || !strings.Contains(body, "visible-resource") {
		t.Errorf("Verify: %s", body)
	}
	vr, err := r1.leases.Verify(ctx, connect.NewRequest(&tenurev1.VerifyRequest{LeaseIds: []string{secret.LeaseId, visible.LeaseId}}))
	if err != nil {
		t.Fatal(err)
	}
	if vr.Msg.Results[0].Found || !vr.Msg.Results[1].Found {
		t.Errorf("Verify results: %v", vr.Msg.Results)
	}
	// Pipeline reads are filtered the same way.
	ps := r1.leases.Pipeline(ctx)
	if err := ps.Send(&tenurev1.PipelineRequest{Ops: []*tenurev1.PipelineOp{
		{Id: 1, Op: &tenurev1.PipelineOp_Get{Get: &tenurev1.GetRequest{LeaseId: secret.LeaseId}}},
	}}); err != nil {
		t.Fatal(err)
	}
	pr, err := ps.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if e := pr.Results[0].GetError(); e == nil || e.Reason != "LEASE_NOT_FOUND" || strings.Contains(e.Message, "secret") {
		t.Errorf("pipelined Get of a foreign lease: %v", pr.Results[0])
	}
	_ = ps.CloseRequest()
	_ = ps.CloseResponse()
}

// rawWatch opens LeaseService/Watch with no namespace in the Connect
// streaming protocol and returns the response body.
func rawWatch(t *testing.T, ctx context.Context, base, token string) io.ReadCloser {
	t.Helper()
	msg := []byte(`{}`)
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	env = append(env, msg...)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/tenure.v1.LeaseService/Watch", bytes.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Watch: %s", resp.Status)
	}
	return resp.Body
}

// readEnvelope reads one Connect stream envelope's payload.
func readEnvelope(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

// connectJSON makes a unary Connect JSON call and returns the body.
func connectJSON(t *testing.T, base, path, token, body string) string {
	t.Helper()
	req, err := http.NewRequest("POST", base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// errorMeta returns a Connect error's ErrorInfo metadata.
func errorMeta(t *testing.T, err error) map[string]string {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("not a Connect error: %v", err)
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Metadata
			}
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return nil
}

// A request refused before its body is read (here: no credentials) is
// answered at once over HTTP/1.1 even when its body never comes, and the
// connection then closes. It used to wait for the body, without end.
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	b := startSecure(t, nil)
	addr := strings.TrimPrefix(b.base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The test's own bound, not a measurement: a hang fails it.
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	req := "POST /tenure.v1.LeaseService/Get HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("answer %d (close %v), want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
}
