package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
)

// TLSRefused reports whether err is a TLS handshake the client itself
// broke off before sending anything: it did not trust the server's
// certificate (unknown CA, wrong name, invalid), or the endpoint does not
// speak TLS. (A server that refuses the client's certificate is not
// among them: in TLS 1.3 the client may have written its request by
// then, and sees its alert, or a broken pipe, only afterwards.)
func TLSRefused(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	return errors.As(err, &verify) || errors.As(err, &unknownCA) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &header) ||
		err != nil && strings.Contains(err.Error(), httpToHTTPS)
}

// httpToHTTPS is the error net/http makes of the tls.RecordHeaderError of
// an endpoint that answered the handshake in plain HTTP (a server without
// TLS): the record header is not kept, only this text.
const httpToHTTPS = "http: server gave HTTP response to HTTPS client"
