package main

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	tenure "github.com/tenurehq/tenure/client"
)

// An UNAUTHENTICATED answer names the command line's way to give a token
// (its message speaks of an HTTP header); other errors get no such hint.
func TestCredentialHint(t *testing.T) {
	unauth := &tenure.Error{Reason: tenure.ReasonUnauthenticated, Code: connect.CodeUnauthenticated,
		Message: `UNAUTHENTICATED: no credentials: send "Authorization: Bearer <token>"`}
	if h := credentialHint(unauth); !strings.Contains(h, "--token") || !strings.Contains(h, "TENURE_TOKEN") {
		t.Errorf("hint for %v: %q, want it to name --token and TENURE_TOKEN", unauth, h)
	}
	noLeader := &tenure.Error{Reason: tenure.ReasonNotLeader, Code: connect.CodeUnavailable,
		Message: "NOT_LEADER: this node is not the leader and knows no leader: an election is under way"}
	if h := credentialHint(noLeader); !strings.Contains(h, "--stale") {
		t.Errorf("hint for %v: %q, want it to name --stale", noLeader, h)
	}
	for _, err := range []error{
		&tenure.Error{Reason: tenure.ReasonNotLeader, Code: connect.CodeUnavailable, Message: `NOT_LEADER: this node is not the leader; the leader is n2 at 127.0.0.1:7071`},
		&tenure.Error{Reason: tenure.ReasonPermissionDenied, Code: connect.CodePermissionDenied, Message: "PERMISSION_DENIED: principal w1 may not use namespace x"},
		&tenure.Error{Reason: tenure.ReasonLeaseHeld, Code: connect.CodeFailedPrecondition, Message: "LEASE_HELD: x is held"},
		errors.New("UNAVAILABLE: dial tcp 127.0.0.1:1: connect: connection refused"),
	} {
		if h := credentialHint(err); h != "" {
			t.Errorf("hint for %v: %q, want none", err, h)
		}
	}
}
