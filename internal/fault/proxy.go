package fault

import (
	"io"
	"net"
	"sync"
)

// proxy is a fault-injecting TCP proxy in front of one member's Raft
// listener. Members dial each other from their own loopback IPs, so the
// proxy knows which member a connection comes from; a blocked source is
// refused and its open connections are cut. Cutting the link a–b blocks a
// at b's proxy and b at a's proxy: Raft uses a connection in one
// direction only (requests one way, answers back), so both are needed.
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	blocked map[string]bool              // source IPs refused
	conns   map[string]map[net.Conn]bool // open client-side connections by source IP
	closed  bool
	wg      sync.WaitGroup
}

func newProxy(listen, target string) (*proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, blocked: map[string]bool{}, conns: map[string]map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func sourceIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		src := sourceIP(c)
		p.mu.Lock()
		if p.closed || p.blocked[src] {
			p.mu.Unlock()
			c.Close()
			continue
		}
		if p.conns[src] == nil {
			p.conns[src] = map[net.Conn]bool{}
		}
		p.conns[src][c] = true
		p.mu.Unlock()
		p.wg.Add(1)
		go p.pipe(c, src)
	}
}

func (p *proxy) pipe(c net.Conn, src string) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns[src], c)
		p.mu.Unlock()
		c.Close()
	}()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done // either side gone (or cut): close both, which ends the other copy
	c.Close()
	up.Close()
	<-done
}

// block refuses connections from src and cuts the open ones.
func (p *proxy) block(src string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked[src] = true
	for c := range p.conns[src] {
		c.Close()
	}
}

// unblock accepts connections from src again.
func (p *proxy) unblock(src string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.blocked, src)
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for _, cs := range p.conns {
		for c := range cs {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
