package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

// join asks the member at addr (any member: it forwards to the leader) to
// add this node as a voter, with its id, Raft and API addresses. It
// retries with backoff while the cluster cannot answer (unavailable: no
// leader, leader unreachable, outcome unknown — adding again is
// harmless), and gives up on any other error, after JoinTimeout, or when
// start (the start's ctx) ends.
func (s *Server) join(start context.Context, addr string) error {
	timeout := s.cfg.JoinTimeout
	if timeout <= 0 {
		timeout = DefaultJoinTimeout
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(start, cancel)
	defer stop()
	c := tenurev1connect.NewClusterServiceClient(s.fwd.http, s.fwd.scheme+addr)
	// Only called on an empty data dir (Start): fresh.
	req := &tenurev1.AddVoterRequest{Id: s.node.ID(), RaftAddress: s.node.RaftAddr(), ApiAddress: s.Addr(), Fresh: true}
	backoff := 50 * time.Millisecond
	garbled := 0 // answers in a row that were not HTTP/2 at all
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		creq := connect.NewRequest(req)
		s.fwd.own(creq.Header())
		_, err := c.AddVoter(actx, creq)
		acancel()
		if err == nil {
			s.log.Info("joined the cluster", "via", addr, "attempts", attempt)
			return nil
		}
		if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded && !isTransport(err) {
			return fmt.Errorf("server: joining via %s: %w", addr, err)
		}
		// Something listens there but does not speak the API: most likely
		// a member's Raft port. Connection refused, by contrast, is a
		// member not up yet, worth waiting for.
		if garbled++; !notTheAPI(err) {
			garbled = 0
		} else if garbled >= 5 {
			return fmt.Errorf("server: joining via %s: it does not answer as a Tenure API (%v); --join takes a member's API address (its --listen), not its Raft address", addr, err)
		}
		s.log.Info("join: retrying", "via", addr, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			if start.Err() != nil {
				return fmt.Errorf("server: joining via %s: stopped before the cluster answered: %w", addr, start.Err())
			}
			return fmt.Errorf("server: joining via %s: gave up after %s: %w", addr, timeout, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// notTheAPI reports a transport error of a peer that took the connection
// and did not answer as HTTP/2 (its connection ended, reset, or said
// something else); connection refused (nothing listens yet), a name that
// does not resolve and a TLS refusal (it says why itself) are not.
func notTheAPI(err error) bool {
	if !isTransport(err) {
		return false
	}
	msg := err.Error()
	for _, not := range []string{"connection refused", "no such host", "tls:", "x509:"} {
		if strings.Contains(msg, not) {
			return false
		}
	}
	return true
}

// isTransport reports an error that did not come from a Tenure server.
func isTransport(err error) bool {
	var ce *connect.Error
	return !errors.As(err, &ce) || !connect.IsWireError(ce)
}

// publishSelf keeps this member's API address in the replicated members
// map: the leader publishes itself when it takes office and members it
// adds, but the other initial members of a --peers cluster (and a member
// restarted on another API address) must ask. A member that is in the
// Raft configuration but missing from (or stale in) the members map asks
// the leader to add it again with its addresses, which Raft treats as a
// no-op change and the leader publishes.
func (s *Server) publishSelf() {
	defer s.bg.Done()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	c := map[string]tenurev1connect.ClusterServiceClient{}
	for {
		select {
		case <-s.closing:
			return
		case <-tick.C:
		}
		if s.node.IsLeader() || !s.node.NeedsPublish() {
			continue
		}
		id, addr := s.node.Leader()
		if id == "" || addr == "" || id == s.node.ID() {
			continue
		}
		cl, ok := c[addr]
		if !ok {
			cl = tenurev1connect.NewClusterServiceClient(s.fwd.http, s.fwd.scheme+addr)
			c[addr] = cl
		}
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		req := connect.NewRequest(&tenurev1.AddVoterRequest{Id: s.node.ID(), RaftAddress: s.node.RaftAddr(), ApiAddress: s.Addr()})
		req.Header().Set(HeaderForwardedBy, s.node.ID())
		s.fwd.own(req.Header())
		if _, err := cl.AddVoter(ctx, req); err != nil {
			s.log.Debug("publishing this member's address", "leader", id, "err", err)
		}
		cancel()
	}
}
