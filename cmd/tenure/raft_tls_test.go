package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRaftTLSFlagsTogether(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		out  string
	}{
		{"cert only", []string{"--raft-tls-cert", junk}, "--raft-tls-key is missing"},
		{"cert and key", []string{"--raft-tls-cert", junk, "--raft-tls-key", junk}, "--raft-tls-ca is missing"},
		{"ca only", []string{"--raft-tls-ca", junk}, "--raft-tls-cert is missing"},
		{"unreadable files", []string{"--raft-tls-cert", junk, "--raft-tls-key", junk, "--raft-tls-ca", junk}, "raft TLS certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:0"}, tc.args...)
			code := run(context.Background(), args, &out, &out)
			if code != 2 || !strings.Contains(out.String(), tc.out) {
				t.Fatalf("exit %d, output %q; want 2 containing %q", code, out.String(), tc.out)
			}
		})
	}
}
