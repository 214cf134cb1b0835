package tenure

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTokenAuthAgainstRealServer: against `tenure server --auth-file`,
// WhoAmI names the token's principal; a client acting as another holder
// is refused, one acting as its principal acquires, heartbeats (KeepAlive
// is authorized per message) and releases; an unknown token is
// ErrUnauthenticated.
func TestTokenAuthAgainstRealServer(t *testing.T) {
	authFile := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(authFile, []byte(`{"tokens":[{"token":"tok-w1","principal":"w1","roles":["holder"],"namespaces":["default"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &realServer{t: t, bin: tenureBinary(t), dir: t.TempDir(), api: freePort(t), raft: freePort(t), extra: []string{"--auth-file", authFile}}
	s.start()
	t.Cleanup(s.kill)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	anon, err := New([]string{s.api}, WithToken("tok-nobody"), WithRetryBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.WhoAmI(ctx); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("unknown token: %v, want ErrUnauthenticated", err)
	}

	other, err := New([]string{s.api}, WithToken("tok-w1"), WithHolder("someone-else"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	who, err := other.WhoAmI(ctx)
	if err != nil || !who.Authenticated || who.Principal != "w1" || who.Method != "token" {
		t.Fatalf("WhoAmI: %v %v", who, err)
	}
	if _, err := other.Acquire(ctx, "orders/1"); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("acquire as another holder: %v, want ErrPermissionDenied", err)
	}

	c, err := New([]string{s.api}, WithToken("tok-w1"), WithHolder(who.Principal))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, "orders/1", TTL(time.Second))
	if err != nil {
		t.Fatalf("acquire as the principal: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		pb, err := c.Get(ctx, l.ID())
		if err != nil {
			t.Fatal(err)
		}
		if pb.RenewalCount >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was never renewed by the heartbeat")
		}
		select {
		case <-l.Done():
			t.Fatalf("lease lost: %v", l.Err())
		case <-time.After(50 * time.Millisecond): // polling a condition
		}
	}
	if err := l.Release(ctx, ReleaseCompleted); err != nil {
		t.Fatalf("release: %v", err)
	}
}
