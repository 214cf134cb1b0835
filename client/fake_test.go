package tenure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// This file is a small in-process fake of the parts of LeaseService the
// client tests need, served by the real generated Connect handler over HTTP/2
// cleartext on an in-memory network (net.Pipe), so that the tests can run in
// a testing/synctest bubble: every goroutine involved blocks durably and fake
// time advances only when all of them are idle.

// memNet is an in-memory network of named listeners.
type memNet struct {
	mu        sync.Mutex
	listeners map[string]*memListener
}

func newMemNet() *memNet { return &memNet{listeners: make(map[string]*memListener)} }

func (n *memNet) listen(addr string) *memListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &memListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
	n.listeners[addr] = l
	return l
}

func (n *memNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: "mem", Err: errors.New("connection refused")}
	if l == nil {
		return nil, refused
	}
	c1, c2 := net.Pipe()
	select {
	case l.conns <- c2:
		return c1, nil
	case <-l.closed:
		return nil, refused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memListener struct {
	addr   string
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// tenureError builds a connect error as the server does: the message starts
// with the reason, and an ErrorInfo detail carries reason and metadata.
func tenureError(code connect.Code, reason Reason, md map[string]string, msg string) *connect.Error {
	e := connect.NewError(code, errors.New(string(reason)+": "+msg))
	d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: string(reason), Domain: "tenure", Metadata: md})
	if err != nil {
		panic(err)
	}
	e.AddDetail(d)
	return e
}

// fakeRegistry is the lease state shared by the fake members of a cluster.
type fakeRegistry struct {
	mu     sync.Mutex
	leases map[string]*fakeLease
	seq    int
	fence  uint64
}

type fakeLease struct {
	pb      *tenurev1.Lease
	expires time.Time
}

func newFakeRegistry() *fakeRegistry { return &fakeRegistry{leases: make(map[string]*fakeLease)} }

// active returns the active lease of resource, expiring leases as it goes.
func (r *fakeRegistry) active(ns, resource string, now time.Time) *fakeLease {
	for _, l := range r.leases {
		r.expire(l, now)
		if l.pb.GetState() == tenurev1.State_STATE_ACTIVE && l.pb.GetNamespace() == ns && l.pb.GetResource() == resource {
			return l
		}
	}
	return nil
}

func (r *fakeRegistry) expire(l *fakeLease, now time.Time) {
	if l.pb.GetState() == tenurev1.State_STATE_ACTIVE && !now.Before(l.expires) {
		l.pb.State = tenurev1.State_STATE_EXPIRED
	}
}

func (r *fakeRegistry) acquire(req *tenurev1.AcquireRequest, now time.Time) (*tenurev1.Lease, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := req.GetNamespace()
	if held := r.active(ns, req.GetResource(), now); held != nil {
		return nil, tenureError(connect.CodeFailedPrecondition, ReasonLeaseHeld, map[string]string{
			"namespace":    ns,
			"resource":     req.GetResource(),
			"lease_id":     held.pb.GetLeaseId(),
			"holder":       held.pb.GetHolder(),
			"fence":        strconv.FormatUint(held.pb.GetFence(), 10),
			"mode":         "EXCLUSIVE",
			"remaining_ms": strconv.FormatInt(held.expires.Sub(now).Milliseconds(), 10),
			"waiters":      "0",
			"wait_ended":   strconv.FormatBool(req.GetWait().AsDuration() > 0),
		}, req.GetResource()+" is held by lease "+held.pb.GetLeaseId())
	}
	ttl := req.GetTtl().AsDuration()
	if ttl == 0 {
		ttl = time.Minute
	}
	r.seq++
	r.fence++
	mode := req.GetMode()
	if mode == tenurev1.Mode_MODE_UNSPECIFIED {
		mode = tenurev1.Mode_MODE_EXCLUSIVE
	}
	pb := &tenurev1.Lease{
		LeaseId:   fmt.Sprintf("L%03d", r.seq),
		Namespace: ns,
		Resource:  req.GetResource(),
		Holder:    req.GetHolder(),
		Mode:      mode,
		State:     tenurev1.State_STATE_ACTIVE,
		Fence:     r.fence,
		Ttl:       durationpb.New(ttl),
		IssuedAt:  timestamppb.New(now),
		ExpiresAt: timestamppb.New(now.Add(ttl)),
	}
	if req.GetCertificate() {
		pb.Signature, pb.KeyId = make([]byte, 64), "k1"
	}
	r.leases[pb.LeaseId] = &fakeLease{pb: pb, expires: now.Add(ttl)}
	return proto.Clone(pb).(*tenurev1.Lease), nil
}

func (r *fakeRegistry) renew(id string, now time.Time) (*tenurev1.Lease, *tenurev1.RenewFailure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.leases[id]
	if l == nil {
		return nil, &tenurev1.RenewFailure{LeaseId: id, Reason: string(ReasonLeaseNotFound), Message: "LEASE_NOT_FOUND: " + id}
	}
	r.expire(l, now)
	switch l.pb.GetState() {
	case tenurev1.State_STATE_ACTIVE:
	case tenurev1.State_STATE_EXPIRED:
		return nil, &tenurev1.RenewFailure{LeaseId: id, Reason: string(ReasonLeaseExpired), Message: "LEASE_EXPIRED: " + id}
	default:
		return nil, &tenurev1.RenewFailure{LeaseId: id, Reason: string(ReasonLeaseTerminal), Message: "LEASE_TERMINAL: " + id + " is " + l.pb.GetState().String()}
	}
	ttl := l.pb.GetTtl().AsDuration()
	l.expires = now.Add(ttl)
	l.pb.ExpiresAt = timestamppb.New(l.expires)
	l.pb.RenewalCount++
	return proto.Clone(l.pb).(*tenurev1.Lease), nil
}

func (r *fakeRegistry) end(id string, state tenurev1.State) *tenurev1.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.leases[id]
	if l == nil {
		return nil
	}
	if l.pb.GetState() == tenurev1.State_STATE_ACTIVE {
		l.pb.State = state
	}
	return proto.Clone(l.pb).(*tenurev1.Lease)
}

func (r *fakeRegistry) state(id string) tenurev1.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.leases[id]; l != nil {
		return l.pb.GetState()
	}
	return tenurev1.State_STATE_UNSPECIFIED
}

// kaMode says how a fake member answers KeepAlive requests.
type kaMode int

const (
	kaRenew  kaMode = iota // renew every id and answer
	kaSilent               // read requests, never answer
)

// kaRecord is one KeepAlive request as the fake received it.
type kaRecord struct {
	at     time.Time
	ids    []string
	id     uint64
	follow []string // follow_lease_ids
}

// fakeMember is one fake cluster member.
type fakeMember struct {
	tenurev1connect.UnimplementedLeaseServiceHandler

	addr string
	reg  *fakeRegistry

	mu sync.Mutex
	// ka says how KeepAlive requests are answered.
	ka kaMode
	// fail answers a renewal of the lease with this reason instead.
	fail map[string]Reason
	// streamErr, when set, is returned as soon as a KeepAlive stream opens.
	streamErr error
	// acquireHook, when set, runs in Acquire before anything else; a
	// non-nil error is answered, after making the grant if applyFirst.
	acquireHook func(req *tenurev1.AcquireRequest) (applyFirst bool, err error)
	// acquireDelay holds each Acquire for this long (a wait in the queue).
	acquireDelay time.Duration
	// releaseDelay holds each Release this long before it applies.
	releaseDelay time.Duration
	// kaWrongID answers KeepAlive requests with a request id nobody sent.
	kaWrongID bool
	// kaDelay holds each KeepAlive answer this long (a slow link).
	kaDelay     time.Duration
	kaLog       []kaRecord
	acquires    int
	authHeaders []string // Authorization of each Acquire and KeepAlive
	consistency []string // Tenure-Consistency of each Get
	renews      int
	releases    []string
	streams     int
	// watchEvents are what Watch streams (those after the request's
	// index), unless watchErr is set: then Watch answers it.
	watchEvents []*tenurev1.Event
	watchErr    error
	// watchProgress, when set, is sent as a progress notification to a
	// Watch that asks for them, after its events; the stream then ends
	// (unavailable). watchReqs are the Watch requests received.
	watchProgress uint64
	watchReqs     []*tenurev1.WatchRequest
	// renewFail: each unary Renew takes the first reason off this list
	// and answers it for every lease instead of renewing.
	renewFail []Reason
	// members, when set, is the member list ClusterService.Status answers
	// (unset: Status is unimplemented, and the client learns no member).
	members []*tenurev1.Member
}

// fakeClusterService is the ClusterService of a fake member: Status only.
type fakeClusterService struct {
	tenurev1connect.UnimplementedClusterServiceHandler
	m *fakeMember
}

func (f fakeClusterService) Status(ctx context.Context, req *connect.Request[tenurev1.StatusRequest]) (*connect.Response[tenurev1.StatusResponse], error) {
	f.m.mu.Lock()
	members := f.m.members
	f.m.mu.Unlock()
	if members == nil {
		return f.UnimplementedClusterServiceHandler.Status(ctx, req)
	}
	return connect.NewResponse(&tenurev1.StatusResponse{Members: members}), nil
}

func (m *fakeMember) Watch(ctx context.Context, req *connect.Request[tenurev1.WatchRequest], stream *connect.ServerStream[tenurev1.WatchResponse]) error {
	m.mu.Lock()
	evs, werr, progress := m.watchEvents, m.watchErr, m.watchProgress
	m.watchReqs = append(m.watchReqs, req.Msg)
	m.mu.Unlock()
	if werr != nil {
		return werr
	}
	for _, ev := range evs {
		if ev.GetIndex() > req.Msg.GetAfterIndex() {
			if err := stream.Send(&tenurev1.WatchResponse{Event: ev}); err != nil {
				return err
			}
		}
	}
	if progress != 0 && req.Msg.GetProgressInterval() != nil {
		if err := stream.Send(&tenurev1.WatchResponse{ProgressIndex: proto.Uint64(progress)}); err != nil {
			return err
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("the stream broke"))
	}
	<-ctx.Done()
	return nil
}

func (m *fakeMember) Acquire(ctx context.Context, req *connect.Request[tenurev1.AcquireRequest]) (*connect.Response[tenurev1.AcquireResponse], error) {
	m.mu.Lock()
	m.acquires++
	m.authHeaders = append(m.authHeaders, req.Header().Get("Authorization"))
	hook, delay := m.acquireHook, m.acquireDelay
	m.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay) // fake time: every fake-server test runs in a synctest bubble
	}
	if hook != nil {
		applyFirst, err := hook(req.Msg)
		if err != nil {
			if applyFirst {
				if _, aerr := m.reg.acquire(req.Msg, time.Now()); aerr != nil {
					return nil, aerr
				}
			}
			return nil, err
		}
	}
	pb, err := m.reg.acquire(req.Msg, time.Now())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tenurev1.AcquireResponse{Lease: pb}), nil
}

func (m *fakeMember) Renew(ctx context.Context, req *connect.Request[tenurev1.RenewRequest]) (*connect.Response[tenurev1.RenewResponse], error) {
	m.mu.Lock()
	m.renews++
	var fail Reason
	if len(m.renewFail) > 0 {
		fail, m.renewFail = m.renewFail[0], m.renewFail[1:]
	}
	m.mu.Unlock()
	if fail != "" {
		return nil, tenureError(connect.CodeFailedPrecondition, fail, nil, string(fail)+": refused by the test")
	}
	resp := &tenurev1.RenewResponse{}
	for _, id := range req.Msg.GetLeaseIds() {
		pb, f := m.reg.renew(id, time.Now())
		if f != nil {
			if len(req.Msg.GetLeaseIds()) == 1 {
				return nil, tenureError(connect.CodeFailedPrecondition, Reason(f.GetReason()), map[string]string{"lease_id": id}, f.GetMessage())
			}
			resp.Failures = append(resp.Failures, f)
			continue
		}
		resp.Leases = append(resp.Leases, pb)
	}
	return connect.NewResponse(resp), nil
}

func (m *fakeMember) Release(ctx context.Context, req *connect.Request[tenurev1.ReleaseRequest]) (*connect.Response[tenurev1.ReleaseResponse], error) {
	m.mu.Lock()
	m.releases = append(m.releases, req.Msg.GetLeaseId())
	delay := m.releaseDelay
	m.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay) // fake time
	}
	pb := m.reg.end(req.Msg.GetLeaseId(), tenurev1.State_STATE_RELEASED)
	return connect.NewResponse(&tenurev1.ReleaseResponse{Lease: pb}), nil
}

func (m *fakeMember) Get(ctx context.Context, req *connect.Request[tenurev1.GetRequest]) (*connect.Response[tenurev1.GetResponse], error) {
	m.mu.Lock()
	m.consistency = append(m.consistency, req.Header().Get(HeaderConsistency))
	m.mu.Unlock()
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	l := m.reg.leases[req.Msg.GetLeaseId()]
	if l == nil {
		return nil, tenureError(connect.CodeNotFound, ReasonLeaseNotFound, nil, req.Msg.GetLeaseId())
	}
	m.reg.expire(l, time.Now())
	return connect.NewResponse(&tenurev1.GetResponse{Lease: proto.Clone(l.pb).(*tenurev1.Lease)}), nil
}

func (m *fakeMember) KeepAlive(ctx context.Context, stream *connect.BidiStream[tenurev1.KeepAliveRequest, tenurev1.KeepAliveResponse]) error {
	m.mu.Lock()
	m.streams++
	m.authHeaders = append(m.authHeaders, stream.RequestHeader().Get("Authorization"))
	err := m.streamErr
	m.mu.Unlock()
	if err != nil {
		return err
	}
	for {
		req, err := stream.Receive()
		if err != nil {
			return nil
		}
		now := time.Now()
		m.mu.Lock()
		m.kaLog = append(m.kaLog, kaRecord{at: now, ids: req.GetLeaseIds(), id: req.GetRequestId(), follow: req.GetFollowLeaseIds()})
		if err := m.streamErr; err != nil {
			m.mu.Unlock()
			return err
		}
		mode, wrongID, delay := m.ka, m.kaWrongID, m.kaDelay
		fail := make(map[string]Reason, len(m.fail))
		for k, v := range m.fail {
			fail[k] = v
		}
		m.mu.Unlock()
		if mode == kaSilent || len(req.GetLeaseIds()) == 0 && len(req.GetFollowLeaseIds()) > 0 {
			continue // a follow alone is not answered
		}
		resp := &tenurev1.KeepAliveResponse{RequestId: req.GetRequestId()}
		if wrongID {
			resp.RequestId += 1000
		}
		for _, id := range req.GetLeaseIds() {
			if r, ok := fail[id]; ok {
				resp.Failures = append(resp.Failures, &tenurev1.RenewFailure{LeaseId: id, Reason: string(r), Message: string(r) + ": " + id})
				continue
			}
			pb, f := m.reg.renew(id, now)
			if f != nil {
				resp.Failures = append(resp.Failures, f)
				continue
			}
			resp.Leases = append(resp.Leases, pb)
		}
		if delay > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (m *fakeMember) set(f func(m *fakeMember)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

func (m *fakeMember) auth() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.authHeaders...)
}

func (m *fakeMember) acquireCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acquires
}

func (m *fakeMember) releaseCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.releases)
}

func (m *fakeMember) renewCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.renews
}

func (m *fakeMember) streamCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.streams
}

// keepalives returns the KeepAlive requests received so far.
func (m *fakeMember) keepalives() []kaRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]kaRecord(nil), m.kaLog...)
}

// fakeCluster is a set of fake members sharing one registry, reachable on
// an in-memory network, and a client of them.
type fakeCluster struct {
	t       *testing.T
	net     *memNet
	reg     *fakeRegistry
	members map[string]*fakeMember
	servers map[string]*http.Server
	tr      *http.Transport
}

// setup starts fake members at addrs. It must run inside a synctest bubble.
func setup(t *testing.T, addrs ...string) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{
		t:       t,
		net:     newMemNet(),
		reg:     newFakeRegistry(),
		members: make(map[string]*fakeMember),
		servers: make(map[string]*http.Server),
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	fc.tr = &http.Transport{Protocols: &p, DialContext: fc.net.dial}
	for _, a := range addrs {
		fc.start(a)
	}
	t.Cleanup(func() {
		for a := range fc.servers {
			fc.stop(a)
		}
		fc.tr.CloseIdleConnections()
	})
	return fc
}

func (fc *fakeCluster) start(addr string) *fakeMember {
	m := &fakeMember{addr: addr, reg: fc.reg, fail: make(map[string]Reason)}
	mux := http.NewServeMux()
	mux.Handle(tenurev1connect.NewLeaseServiceHandler(m))
	mux.Handle(tenurev1connect.NewClusterServiceHandler(fakeClusterService{m: m}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	l := fc.net.listen(addr)
	go func() { _ = srv.Serve(l) }()
	fc.members[addr] = m
	fc.servers[addr] = srv
	return m
}

// stop kills a member: its listener and every connection close.
func (fc *fakeCluster) stop(addr string) {
	if srv := fc.servers[addr]; srv != nil {
		_ = srv.Close()
		delete(fc.servers, addr)
	}
}

// client returns a Client of the fake cluster, closed at the end of the test.
func (fc *fakeCluster) client(endpoints []string, opts ...Option) *Client {
	fc.t.Helper()
	c, err := New(endpoints, append([]Option{WithHTTPClient(&http.Client{Transport: fc.tr}), WithHolder("tester")}, opts...)...)
	if err != nil {
		fc.t.Fatal(err)
	}
	fc.t.Cleanup(func() { _ = c.Close() })
	return c
}
