package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
)

// testPKI is a throwaway CA with certificates for 127.0.0.1 and clients.
type testPKI struct {
	pool   *x509.CertPool
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tenure test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{pool: pool, caCert: ca, caKey: key}
}

// issue signs a certificate for cn, valid for 127.0.0.1, usable by
// servers and clients.
func (p *testPKI) issue(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLSRequiredWhenConfigured: a TLS server refuses plain-text HTTP/2
// and HTTP/1.1; over TLS a token works as before.
func TestTLSRequiredWhenConfigured(t *testing.T) {
	pki := newPKI(t)
	srvCert := pki.issue(t, "127.0.0.1")
	b := startSecure(t, func(c *Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, MinVersion: tls.VersionTLS12}
	})
	ctx := context.Background()
	plain := strings.Replace(b.base, "https://", "http://", 1)
	c := &secureBundle{base: plain}
	_, err := c.as("tok-r1").cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
	if err == nil {
		t.Fatal("a plain-text h2c call to a TLS server succeeded")
	}
	if body := connectJSON(t, plain, "/tenure.v1.ClusterService/Status", "tok-r1", `{}`); !strings.Contains(body, "HTTP request to an HTTPS server") {
		t.Errorf("plain HTTP/1.1 to a TLS server: %q", body)
	}
	good := b.as("tok-r1", &tls.Config{RootCAs: pki.pool})
	if _, err := good.cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{})); err != nil {
		t.Fatalf("Status over TLS with a token: %v", err)
	}
	_, err = b.as("", &tls.Config{RootCAs: pki.pool}).cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
	wantReason(t, err, connect.CodeUnauthenticated, "UNAUTHENTICATED")
}

// TestClientCertificatePrincipal: with client CAs, the handshake needs a
// certificate; a verified one authenticates its subject common name with
// the roles of its auth file entry, and one named by no entry may do
// nothing. A bearer token on the same connection takes precedence.
func TestClientCertificatePrincipal(t *testing.T) {
	pki := newPKI(t)
	srvCert := pki.issue(t, "127.0.0.1")
	b := startSecure(t, func(c *Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pki.pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	})
	ctx := context.Background()
	status := func(c clients) error {
		_, err := c.cluster.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		return err
	}
	if err := status(b.as("tok-root", &tls.Config{RootCAs: pki.pool})); err == nil {
		t.Fatal("a TLS client without a certificate got through")
	}
	other := newPKI(t)
	if err := status(b.as("", &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{other.issue(t, "svc.test")}})); err == nil {
		t.Fatal("a certificate of another CA got through")
	}

	svc := b.as("", &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.issue(t, "svc.test")}})
	if _, err := svc.queues.Enqueue(ctx, connect.NewRequest(&tenurev1.EnqueueRequest{Namespace: "jobs", Queue: "q",
		Tasks: []*tenurev1.NewTask{{Payload: []byte("p")}}})); err != nil {
		t.Fatalf("certificate principal enqueues: %v", err)
	}
	cr, err := svc.queues.Claim(ctx, connect.NewRequest(&tenurev1.ClaimRequest{Namespace: "jobs", Queue: "q", Max: 1}))
	if err != nil || len(cr.Msg.Tasks) != 1 || cr.Msg.Tasks[0].Worker != "svc.test" {
		t.Fatalf("claim by the certificate principal: %v %v", cr, err)
	}
	_, err = svc.leases.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Resource: "x"}))
	wantReason(t, err, connect.CodePermissionDenied, "PERMISSION_DENIED")

	stranger := b.as("", &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.issue(t, "stranger")}})
	wantReason(t, status(stranger), connect.CodePermissionDenied, "PERMISSION_DENIED")

	// Token wins over the certificate: root through the stranger's connection.
	both := b.as("tok-root", &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.issue(t, "stranger")}})
	if err := status(both); err != nil {
		t.Fatalf("token over a certificate connection: %v", err)
	}
}
