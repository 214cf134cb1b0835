package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection, the accepted
// end read through a bufferedConn.
func tcpPair(t *testing.T) (client net.Conn, server *bufferedConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := bufferedListener{ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	return client, c.(*bufferedConn)
}

func TestBufferedConnReads(t *testing.T) {
	client, server := tcpPair(t)
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	sent := []byte("header12payload-of-the-frame")
	if _, err := client.Write(sent); err != nil {
		t.Fatal(err)
	}
	// Small reads, as the HTTP/2 framer makes them, come out of one
	// buffer in order.
	var got []byte
	for len(got) < len(sent) {
		p := make([]byte, 9)
		n, err := server.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("read %q, want %q", got, sent)
	}
	if server.buf != nil {
		t.Fatal("a drained connection still holds its buffer")
	}
	// A read as large as the buffer goes straight to the socket.
	big := bytes.Repeat([]byte("x"), 100)
	client.Write(big)
	p := make([]byte, readBufferSize)
	n, err := server.Read(p)
	if err != nil || !bytes.Equal(p[:n], big[:n]) || server.buf != nil {
		t.Fatalf("large read: %d bytes, %v, buffer held %v", n, err, server.buf != nil)
	}
	io.ReadFull(server, p[:len(big)-n])
	// Bytes that arrived before the peer closed are read before EOF.
	client.Write([]byte("last"))
	client.Close()
	all, err := io.ReadAll(server)
	if err != nil || string(all) != "last" {
		t.Fatalf("read %q, %v; want \"last\" then EOF", all, err)
	}
}

// recordingWriter is a ResponseWriter that records its writes.
type recordingWriter struct {
	*httptest.ResponseRecorder
	writes  []string
	flushes int
	fail    error
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.fail != nil {
		return 0, w.fail
	}
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func (w *recordingWriter) Flush() { w.flushes++ }

func TestMessageWriterWritesAMessageAtOnce(t *testing.T) {
	rec := &recordingWriter{ResponseRecorder: httptest.NewRecorder()}
	h := bufferMessages(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Fatal("a streaming handler's writer must flush")
		}
		w.Write([]byte("\x00\x00\x00\x00\x03"))
		w.Write([]byte("abc"))
		if len(rec.writes) != 0 {
			t.Error("written before the flush")
		}
		f.Flush()
		w.Write([]byte("tail")) // written when the handler returns
	}))
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", nil))
	want := []string{"\x00\x00\x00\x00\x03abc", "tail"}
	if len(rec.writes) != 2 || rec.writes[0] != want[0] || rec.writes[1] != want[1] || rec.flushes != 1 {
		t.Fatalf("writes %q, %d flushes; want %q, 1 flush", rec.writes, rec.flushes, want)
	}
}

func TestMessageWriterReportsAFailedWrite(t *testing.T) {
	broken := errors.New("connection reset")
	rec := &recordingWriter{ResponseRecorder: httptest.NewRecorder(), fail: broken}
	var second error
	bufferMessages(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("one"))
		w.(http.Flusher).Flush()
		_, second = w.Write([]byte("two"))
	})).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", nil))
	if !errors.Is(second, broken) {
		t.Fatalf("write after a failed flush: %v, want %v", second, broken)
	}
	if rec.flushes != 0 {
		t.Fatal("flushed after the write failed")
	}
}
