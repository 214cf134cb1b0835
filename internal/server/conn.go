package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// System calls are most of what a busy Pipeline stream costs on a small
// virtual machine (a loopback write and the wake-up it causes cost tens of
// microseconds). The two wrappers below cut their number without changing
// a byte on the wire.

// readBufferSize is what one read of a connection asks the kernel for.
const readBufferSize = 16 << 10

var readBuffers = sync.Pool{New: func() any { b := make([]byte, readBufferSize); return &b }}

// bufferedListener hands out connections whose reads are buffered.
//
// Go's HTTP/2 server reads a cleartext connection frame by frame straight
// from the socket: two system calls per frame (its 9-byte header, then its
// payload), and a Pipeline message is two frames. Buffered, one read takes
// in whatever the client has sent. TLS connections buffer records already
// and are not wrapped.
type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &bufferedConn{TCPConn: tc}, nil
	}
	return c, nil
}

// bufferedConn reads through a buffer borrowed from a pool while it holds
// unread bytes: an idle connection holds none.
type bufferedConn struct {
	*net.TCPConn
	buf     *[]byte // nil when no unread bytes are held
	r, w    int     // unread bytes are (*buf)[r:w]
	readErr error   // returned once the buffered bytes are read
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.buf == nil {
		if c.readErr != nil {
			err := c.readErr
			c.readErr = nil
			return 0, err
		}
		if len(p) >= readBufferSize {
			return c.TCPConn.Read(p)
		}
		buf := readBuffers.Get().(*[]byte)
		n, err := c.TCPConn.Read(*buf)
		if n == 0 {
			readBuffers.Put(buf)
			return 0, err
		}
		c.buf, c.r, c.w, c.readErr = buf, 0, n, err
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		readBuffers.Put(c.buf)
		c.buf = nil
	}
	return n, nil
}

// messageWriter holds what a streaming handler writes until it flushes,
// then hands it on in one Write.
//
// Connect writes a message as two writes (its 5-byte prefix, then its
// body), and Go's HTTP/2 server cuts what a handler writes into 4 KiB
// chunks, each a separate hand-off to the connection's goroutine and a
// separate system call: a Pipeline answer of 64 results took three. In
// one Write it goes out as one. Connect flushes after every message it
// sends, so nothing waits here longer than the handler's own Send.
type messageWriter struct {
	http.ResponseWriter
	buf []byte
	err error // the last failed write, returned by the next Write
}

// bufferMessages wraps a streaming handler's ResponseWriter in a
// messageWriter.
func bufferMessages(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw := &messageWriter{ResponseWriter: w}
		defer mw.write() // what a handler wrote without flushing
		h.ServeHTTP(mw, r)
	})
}

func (w *messageWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *messageWriter) write() {
	if len(w.buf) == 0 || w.err != nil {
		return
	}
	if _, err := w.ResponseWriter.Write(w.buf); err != nil {
		w.err = err
	}
	if cap(w.buf) > 1<<20 {
		w.buf = nil // do not keep one huge message's buffer for the stream's life
	} else {
		w.buf = w.buf[:0]
	}
}

func (w *messageWriter) Flush() {
	w.write()
	if w.err == nil {
		if err := http.NewResponseController(w.ResponseWriter).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			w.err = err
		}
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *messageWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// heldWriter is a Watch stream's writer: while the handler holds it
// (sending what it found waiting), Connect's flush after each message
// only buffers, and the handler flushes once when it has sent them all:
// a watch used to cost a write system call per event (30 watchers of a
// busy namespace spent a fifth of the server's CPU in them).
type heldWriter struct {
	messageWriter
	held bool
}

type heldWriterKey struct{}

// watchWriteGrace is how long a Watch stream may go on writing once the
// server shuts down: a healthy one ends at once (UNAVAILABLE), one whose
// client has stopped reading (its HTTP/2 window full, the handler blocked
// in a write) is cut when it passes, rather than holding the drain until
// Close's context ends (10 s for tenure server).
const watchWriteGrace = time.Second

// holdFlushes wraps a streaming handler's ResponseWriter in a heldWriter,
// which the handler finds with heldWriterOf. Once shutdown begins
// (shutdown done), the stream's writes get a deadline of watchWriteGrace.
func holdFlushes(shutdown context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The deadline is set only while the handler runs: the
		// ResponseWriter is not to be used after it returns.
		var mu sync.Mutex
		running := true
		stop := context.AfterFunc(shutdown, func() {
			mu.Lock()
			defer mu.Unlock()
			if running {
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(watchWriteGrace))
			}
		})
		defer func() {
			stop()
			mu.Lock()
			running = false
			mu.Unlock()
		}()
		hw := &heldWriter{messageWriter: messageWriter{ResponseWriter: w}}
		defer hw.write()
		h.ServeHTTP(hw, r.WithContext(context.WithValue(r.Context(), heldWriterKey{}, hw)))
	})
}

// heldWriterOf returns the heldWriter of a handler's context, or nil.
func heldWriterOf(ctx context.Context) *heldWriter {
	hw, _ := ctx.Value(heldWriterKey{}).(*heldWriter)
	return hw
}

// hold makes flushes buffer until release.
func (w *heldWriter) hold() {
	if w != nil {
		w.held = true
	}
}

// release flushes what was buffered and ends the hold.
func (w *heldWriter) release() {
	if w != nil {
		w.held = false
		w.messageWriter.Flush()
	}
}

// heldFlushBytes bounds what a held writer buffers before it writes
// anyway.
const heldFlushBytes = 64 << 10

func (w *heldWriter) Flush() {
	if w.held && len(w.buf) < heldFlushBytes {
		return
	}
	w.messageWriter.Flush()
}
