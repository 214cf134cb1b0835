// Package testport hands tests free loopback ports for servers they start
// as separate processes (which need an address, not a listener).
package testport

import (
	"net"
	"sync"
)

var (
	mu    sync.Mutex
	given = map[string]bool{}
)

// Free returns a 127.0.0.1 address nobody listened on a moment ago, never
// the same one twice in a process: the kernel may hand a port it just got
// back out again, and a server's API and Raft ports are asked for in a row.
func Free() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		l.Close()
		if !given[addr] {
			given[addr] = true
			return addr, nil
		}
	}
}
