// Package tcpfault is a TCP proxy for tests that inject network faults
// between a client and a real server on 127.0.0.1: the test points its
// client at the proxy's Addr, and the proxy forwards bytes both ways to the
// target until the test asks for a fault. Only tests import it.
//
//	p := tcpfault.New(t, inst.Addr)
//	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
//	p.DropReplies(true) // the server's replies are lost on the way
//	p.Cut()             // and every connection is closed, as a blip does
//	p.DropReplies(false)
//
// # Faults
//
//   - DropReplies(true): every byte the target sends, on every connection
//     (open now or opened while it is on), is read and thrown away; what the
//     client sends still reaches the target. DropReplies(false) forwards
//     again from the next read on: what was thrown away stays lost.
//   - Silence: every connection open now swallows every byte in both
//     directions, for good, without being closed (a silent partition).
//     Connections opened afterwards work.
//   - Cut: every connection open now is closed on both sides. The listener
//     stays open, so a client that reconnects gets a working connection.
//
// The proxy decides per chunk it reads (at most 32 KiB), so a fault applies
// from the first read after the call returns: a chunk already read may
// still be forwarded.
//
// # Guarantees
//
//   - The proxy listens on 127.0.0.1 on a port of its own.
//   - A connection whose target cannot be dialled is closed at once.
//   - When one side of a connection closes (or a write fails), both sides
//     are closed.
//   - A t.Cleanup registered by New closes the listener and every
//     connection, and returns only once every goroutine of the proxy has
//     ended, so the proxy leaves nothing for goleak to find.
//
// All methods are safe for concurrent use.
package tcpfault

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections from Addr to a target, and injects the
// faults its methods name.
type Proxy struct {
	ln          net.Listener
	target      string
	dropReplies atomic.Bool
	dropped     atomic.Int64 // bytes thrown away, for this package's tests
	wg          sync.WaitGroup

	mu     sync.Mutex
	links  []*link // the connections open since the last Cut
	closed bool
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	silent         atomic.Bool
}

// New starts a proxy to target (host:port) on 127.0.0.1; a t.Cleanup stops
// it. It fails the test if it cannot listen.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropReplies turns on or off the loss of what the target sends, on every
// connection, current and future.
func (p *Proxy) DropReplies(on bool) { p.dropReplies.Store(on) }

// Silence makes every connection open now swallow every byte in both
// directions, for good, without closing it.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.silent.Store(true)
	}
}

// Cut closes both sides of every connection open now. It does not wait for
// the proxy to notice.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.close()
	}
	p.links = nil
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.links = append(p.links, l)
		p.wg.Go(func() { p.pump(l, c, s, false) })
		p.wg.Go(func() { p.pump(l, s, c, true) })
		p.mu.Unlock()
	}
}

// pump copies src to dst until either fails, throwing away what it reads
// while the link is silent, or while replies are dropped if src is the
// target; then it closes both sides.
func (p *Proxy) pump(l *link, src, dst net.Conn, reply bool) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if l.silent.Load() || (reply && p.dropReplies.Load()) {
				p.dropped.Add(int64(n))
			} else if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *link) close() {
	_ = l.client.Close()
	_ = l.server.Close()
}

// close stops accepting, closes every connection and waits for every
// goroutine of the proxy.
func (p *Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, l := range p.links {
		l.close()
	}
	p.links = nil
	p.mu.Unlock()
	p.wg.Wait()
}
