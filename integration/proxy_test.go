package integration

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy is a TCP proxy in front of one Redis. Cut closes every connection
// through it and refuses new ones, so the clients behind it lose Redis while
// everyone else still reaches it; Blackhole keeps the connections but drops
// what they carry, as a silent partition does; Heal lets everything through
// again (a blackholed connection resumes where it is).
type proxy struct {
	ln     net.Listener
	target string
	drop   atomic.Int32 // the directions blackholed
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// direction is a direction of the traffic through a proxy.
type direction int32

const (
	requests direction = 1 << iota // client to Redis
	replies                        // Redis to client
)

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c, requests)
		go p.pipe(c, up, replies)
	}
}

func (p *proxy) pipe(dst, src net.Conn, dir direction) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && direction(p.drop.Load())&dir == 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut drops every connection and refuses new ones until Heal.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Blackhole drops the traffic in dirs from now on, keeping every
// connection open: calls through the proxy get no answer.
func (p *proxy) Blackhole(dirs direction) { p.drop.Store(int32(dirs)) }

// Heal accepts connections again and ends a blackhole.
func (p *proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.drop.Store(0)
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
