package wire

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"
)

// Transport wraps an HTTP/2 client transport so that each message of a
// streaming request goes out in one DATA frame.
//
// Connect writes a stream's message as two writes into the request body
// (the 5-byte envelope prefix, then the body), and Go's HTTP/2 transport
// sends what each read of the body returns as its own frame, with its own
// flush: two system calls on the client and two frames for the server to
// read per message, where one does. Reads of a streamed body made through
// Transport return whole envelopes; nothing on the wire changes but the
// framing.
func Transport(rt http.RoundTripper) http.RoundTripper { return envelopeTransport{rt} }

type envelopeTransport struct{ http.RoundTripper }

func (t envelopeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || !enveloped(r.Header.Get("Content-Type")) {
		return t.RoundTripper.RoundTrip(r)
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.Body = &envelopeBody{ReadCloser: r.Body}
	return t.RoundTripper.RoundTrip(r2)
}

// CloseIdleConnections closes the wrapped transport's idle connections
// (http.Client.CloseIdleConnections looks for this method).
func (t envelopeTransport) CloseIdleConnections() {
	if c, ok := t.RoundTripper.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// enveloped reports whether a request body of this content type is a
// sequence of 5-byte-prefixed envelopes: gRPC, gRPC-Web and Connect
// streaming. (Connect's unary requests are bare messages.)
func enveloped(contentType string) bool {
	return strings.HasPrefix(contentType, "application/grpc") ||
		strings.HasPrefix(contentType, "application/connect+")
}

// envelopeBody reads a body of envelopes so that a read that has begun an
// envelope goes on until the envelope is complete or p is full. The
// writer writes an envelope's parts back to back, so the reads that
// complete it do not wait for anything else.
type envelopeBody struct {
	io.ReadCloser
	prefix [5]byte
	got    int    // prefix bytes of the current envelope read so far
	left   uint32 // body bytes of the current envelope not yet read
}

func (b *envelopeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.advance(p[:n])
	for err == nil && n < len(p) && b.got > 0 {
		var m int
		m, err = b.ReadCloser.Read(p[n:])
		b.advance(p[n : n+m])
		n += m
	}
	return n, err
}

// advance follows the envelope boundaries through data just read.
func (b *envelopeBody) advance(data []byte) {
	for len(data) > 0 {
		if b.got < len(b.prefix) {
			k := copy(b.prefix[b.got:], data)
			b.got += k
			data = data[k:]
			if b.got == len(b.prefix) {
				b.left = binary.BigEndian.Uint32(b.prefix[1:])
			}
		} else {
			k := uint32(min(uint64(len(data)), uint64(b.left)))
			b.left -= k
			data = data[k:]
		}
		if b.got == len(b.prefix) && b.left == 0 {
			b.got = 0 // at a boundary
		}
	}
}
