package server

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestSilentConnectionClosed: an HTTP/2 connection whose client stops
// answering (a stopped process: its kernel still acknowledges TCP) is
// checked with a PING once silent, and closed when no answer comes, so
// it does not hold its streams open for good.
func TestSilentConnectionClosed(t *testing.T) {
	b := setupWith(t, t.TempDir(), func(c *Config) { c.PingAfter, c.PingTimeout = 200*time.Millisecond, 200*time.Millisecond })
	conn, err := net.Dial("tcp", b.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The client preface and an empty SETTINGS frame, then nothing: no
	// ACK of the server's settings, no answer to its PING.
	preface := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	if _, err := conn.Write(append([]byte(preface), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	n, err := io.Copy(io.Discard, conn) // until the server closes it
	if err != nil {
		t.Fatalf("the silent connection was not closed (%d bytes read in %v): %v", n, time.Since(start), err)
	}
}
