package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
)

// keyPair is a certificate and key read from files, re-read by reload
// (SIGHUP), so that a renewed certificate takes effect without a restart.
// A failed reload keeps the pair in force.
type keyPair struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

func loadKeyPair(certFile, keyFile string) (*keyPair, error) {
	k := &keyPair{certFile: certFile, keyFile: keyFile}
	return k, k.reload()
}

func (k *keyPair) reload() error {
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	k.cur.Store(&c)
	return nil
}

func (k *keyPair) serverCert(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.cur.Load(), nil
}

func (k *keyPair) clientCert(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.cur.Load(), nil
}

// certPool reads a PEM file of CA certificates.
func certPool(flagName, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flagName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--%s: %s holds no PEM certificate", flagName, path)
	}
	return pool, nil
}

// apiTLS builds the API's server TLS config and the client TLS config
// members use to call each other (forwarding, joining): they trust
// --tls-ca (default: the system's CAs, plus --tls-client-ca) and present
// this member's own certificate, which members requiring client
// certificates check like any other.
func apiTLS(kp *keyPair, clientCA, peerCA string) (server, peer *tls.Config, err error) {
	server = &tls.Config{GetCertificate: kp.serverCert, MinVersion: tls.VersionTLS12}
	peer = &tls.Config{GetClientCertificate: kp.clientCert, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		if server.ClientCAs, err = certPool("tls-client-ca", clientCA); err != nil {
			return nil, nil, err
		}
		server.ClientAuth = tls.RequireAndVerifyClientCert
	}
	switch {
	case peerCA != "":
		if peer.RootCAs, err = certPool("tls-ca", peerCA); err != nil {
			return nil, nil, err
		}
	case clientCA != "":
		// One CA for everything is the common setup: trust it for
		// members too, besides the system's CAs.
		if peer.RootCAs, err = x509.SystemCertPool(); err != nil {
			peer.RootCAs = x509.NewCertPool()
		}
		pem, _ := os.ReadFile(clientCA)
		peer.RootCAs.AppendCertsFromPEM(pem)
	}
	return server, peer, nil
}
