// Package testlog holds what tests use to read logs while they are
// written: by a server's loggers, or by a process the test started.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for writers and a reader at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
