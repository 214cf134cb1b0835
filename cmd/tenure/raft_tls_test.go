package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
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

// writePKI writes a CA and member certificates (PEM) into dir and returns
// the CA's path; member n gets n.crt and n.key, valid for 127.0.0.1 too.
func writePKI(t *testing.T, dir, caName string, members ...string) string {
	t.Helper()
	put := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: caName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	put(caName+".crt", "CERTIFICATE", caDER)
	for i, m := range members {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: m},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		put(m+".crt", "CERTIFICATE", der)
		put(m+".key", "PRIVATE KEY", kder)
	}
	return filepath.Join(dir, caName+".crt")
}

// TestRaftTLSClusterOfBinaries: three servers with --raft-tls-* replicate;
// a fourth whose certificate comes from another CA cannot --join.
func TestRaftTLSClusterOfBinaries(t *testing.T) {
	dir := t.TempDir()
	ca := writePKI(t, dir, "ca", "n1", "n2", "n3")
	writePKI(t, dir, "other", "n4")
	tlsArgs := func(name, ca string) []string {
		return []string{"--raft-tls-cert", filepath.Join(dir, name+".crt"), "--raft-tls-key", filepath.Join(dir, name+".key"), "--raft-tls-ca", ca}
	}
	var apis, rafts []string
	var peers []string
	for i := range 3 {
		apis, rafts = append(apis, freePort()), append(rafts, freePort())
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, rafts[i]))
	}
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		args := append([]string{"server", "--node-id", id, "--data-dir", filepath.Join(dir, id), "--listen", apis[i],
			"--raft-listen", rafts[i], "--peers", strings.Join(peers, ","), "--log-level", "warn"}, tlsArgs(id, ca)...)
		startServerProcess(t, dir, id, args)
	}
	all := strings.Join(apis, ",")
	var l tenurev1.Lease
	attempt := 0
	waitFor(t, 30*time.Second, "a grant (the cluster formed)", func() bool {
		attempt++ // a fresh resource each time: an unknown outcome may have been applied
		r := runTenure(t, "acquire", fmt.Sprintf("tls/%d", attempt), "--holder", "h", "-o", "json", "--endpoints", apis[0])
		return r.code == 0 && protojson.Unmarshal([]byte(r.stdout), &l) == nil
	})
	// Every member applied the grant: it is in each one's own ledger.
	for i := range 3 {
		data := filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		waitFor(t, 20*time.Second, "the grant in "+data, func() bool {
			r := runTenure(t, "audit", "export", "--data-dir", data)
			return r.code == 0 && strings.Contains(r.stdout, `"leaseId":"`+l.LeaseId+`"`)
		})
	}

	// n4 with another CA's certificate: the join is refused and n4 exits.
	api4 := freePort()
	cmd := exec.Command(tenureBin, append([]string{"server", "--node-id", "n4", "--data-dir", filepath.Join(dir, "n4"), "--listen", api4,
		"--raft-listen", freePort(), "--join", apis[0], "--log-level", "warn"}, tlsArgs("n4", filepath.Join(dir, "other.crt"))...)...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "PERMISSION_DENIED") {
		t.Fatalf("n4 with a foreign certificate: %v\n%s", err, out)
	}
	st := ok(t, "cluster", "status", "--endpoints", all, "-o", "json")
	if strings.Contains(st, `"n4"`) {
		t.Fatalf("n4 is in the cluster: %s", st)
	}
}

// startServerProcess starts `tenure server` with args and stops it when
// the test ends.
func startServerProcess(t *testing.T, dir, name string, args []string) *exec.Cmd {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", name, b)
		}
	})
	cmd := exec.Command(tenureBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	startBackground(t, cmd)
	return cmd
}
