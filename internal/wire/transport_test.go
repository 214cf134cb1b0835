package wire

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
)

func envelope(body []byte) []byte {
	out := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(out[1:], uint32(len(body)))
	return append(out, body...)
}

// A body written as Connect writes it (prefix, then message, in two
// writes) is read an envelope at a time.
func TestEnvelopeBodyReadsWholeEnvelopes(t *testing.T) {
	pr, pw := io.Pipe()
	msgs := [][]byte{bytes.Repeat([]byte("a"), 3000), {}, []byte("short"), bytes.Repeat([]byte("b"), 70)}
	go func() {
		for _, m := range msgs {
			env := envelope(m)
			pw.Write(env[:5])
			if len(m) > 0 {
				pw.Write(env[5:])
			}
		}
		pw.Close()
	}()
	b := &envelopeBody{ReadCloser: pr}
	buf := make([]byte, 16<<10)
	for i, m := range msgs {
		n, err := b.Read(buf)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if want := envelope(m); !bytes.Equal(buf[:n], want) {
			t.Fatalf("read %d returned %d bytes, want the whole envelope of %d", i, n, len(want))
		}
	}
	if n, err := b.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the last envelope: %d, %v; want 0, EOF", n, err)
	}
}

// chunkReader returns its data in reads of random sizes.
type chunkReader struct {
	data []byte
	rng  *rand.Rand
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), 1+r.rng.IntN(40))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func (r *chunkReader) Close() error { return nil }

// However the bytes arrive and however small the reader's buffer, the
// stream read is the stream written, and a read ends inside an envelope
// only when the buffer is full.
func TestEnvelopeBodyKeepsTheStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var stream []byte
		var ends []int // offsets of envelope boundaries
		for range 1 + rng.IntN(8) {
			stream = append(stream, envelope(bytes.Repeat([]byte{byte(trial)}, rng.IntN(120)))...)
			ends = append(ends, len(stream))
		}
		b := &envelopeBody{ReadCloser: &chunkReader{data: bytes.Clone(stream), rng: rng}}
		size := 1 + rng.IntN(200)
		var got []byte
		for {
			buf := make([]byte, size)
			n, err := b.Read(buf)
			got = append(got, buf[:n]...)
			if n > 0 && n < size && !boundary(ends, len(got)) {
				t.Fatalf("trial %d: a read of %d bytes into %d ended inside an envelope at %d", trial, n, size, len(got))
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, stream) {
			t.Fatalf("trial %d: read %d bytes, want the %d written", trial, len(got), len(stream))
		}
	}
}

func boundary(ends []int, at int) bool {
	for _, e := range ends {
		if e == at {
			return true
		}
	}
	return false
}

type recordingTransport struct{ body io.Reader }

func (t *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.body = r.Body
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// Only enveloped (streaming) bodies are read by envelope; the caller's
// request is not modified.
func TestTransportWrapsOnlyEnvelopedBodies(t *testing.T) {
	for ct, wrapped := range map[string]bool{
		"application/grpc":           true,
		"application/grpc+proto":     true,
		"application/grpc-web+proto": true,
		"application/connect+proto":  true,
		"application/connect+json":   true,
		"application/proto":          false,
		"application/json":           false,
		"text/plain; charset=utf-8":  false,
	} {
		rec := &recordingTransport{}
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/x", bytes.NewReader([]byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		body := req.Body
		if _, err := Transport(rec).RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if _, ok := rec.body.(*envelopeBody); ok != wrapped {
			t.Errorf("%s: wrapped %v, want %v", ct, ok, wrapped)
		}
		if req.Body != body {
			t.Errorf("%s: the caller's request was modified", ct)
		}
	}
}
