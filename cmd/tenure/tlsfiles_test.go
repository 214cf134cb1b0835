package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestKeyPairReload: reload (SIGHUP) swaps in a renewed certificate; a
// broken file leaves the one in force.
func TestKeyPairReload(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeServerPKI(t, a)
	writeServerPKI(t, b)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "api.pem"), filepath.Join(dir, "api.key")
	install := func(from string) {
		t.Helper()
		for src, dst := range map[string]string{"server.crt": cert, "server.key": key} {
			data, err := os.ReadFile(filepath.Join(from, src))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(a)
	kp, err := loadKeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := kp.serverCert(nil)
	install(b)
	if err := kp.reload(); err != nil {
		t.Fatal(err)
	}
	second, _ := kp.serverCert(nil)
	if bytes.Equal(first.Certificate[0], second.Certificate[0]) {
		t.Fatal("reload kept the old certificate")
	}
	if c, _ := kp.clientCert(nil); !bytes.Equal(c.Certificate[0], second.Certificate[0]) {
		t.Error("the member's client certificate was not reloaded with the server's")
	}
	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kp.reload(); err == nil {
		t.Fatal("reload accepted a broken key")
	}
	if c, _ := kp.serverCert(nil); !bytes.Equal(c.Certificate[0], second.Certificate[0]) {
		t.Error("a failed reload dropped the certificate in force")
	}
}
