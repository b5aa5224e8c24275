package tcpfault

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdkit/herd/internal/testkit/testsync"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echo is a TCP server on 127.0.0.1 that writes back what it reads and
// counts the bytes it received.
type echo struct {
	ln       net.Listener
	received atomic.Int64
	wg       sync.WaitGroup
}

func newEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					e.received.Add(int64(n))
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	// Registered before the proxy's: runs after it, once the proxy has
	// closed its side of every connection.
	t.Cleanup(func() { _ = ln.Close(); e.wg.Wait() })
	return e
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads it back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(testsync.DefaultWait))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("read back %q, %v; want %q", got, err, msg)
	}
}

// nothingArrives checks that c stays open and receives nothing for a while.
func nothingArrives(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.Read(make([]byte, 16))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want nothing and the connection open", n, err)
	}
}

// isClosed checks that the proxy has closed c.
func isClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(testsync.DefaultWait))
	n, err := c.Read(make([]byte, 16))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
}

func TestForwards(t *testing.T) {
	p := New(t, newEcho(t).ln.Addr().String())
	a, b := dial(t, p), dial(t, p)
	roundTrip(t, a, "one")
	roundTrip(t, b, "two")
	roundTrip(t, a, "three")
}

func TestDropReplies(t *testing.T) {
	e := newEcho(t)
	p := New(t, e.ln.Addr().String())
	before := dial(t, p)
	roundTrip(t, before, "ok")

	p.DropReplies(true)
	during := dial(t, p) // opened while replies are dropped: dropped too
	for _, c := range []net.Conn{before, during} {
		if _, err := c.Write([]byte("lost")); err != nil {
			t.Fatal(err)
		}
	}
	testsync.WaitFor(t, "both requests received and both replies dropped", func() bool {
		return e.received.Load() == int64(len("ok")+2*len("lost")) && p.dropped.Load() == int64(2*len("lost"))
	})
	nothingArrives(t, before)
	nothingArrives(t, during)

	p.DropReplies(false)
	// The dropped replies stay lost: the next read is the next reply.
	roundTrip(t, before, "back")
	roundTrip(t, during, "back")
}

func TestSilence(t *testing.T) {
	e := newEcho(t)
	p := New(t, e.ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, old, "ok")

	p.Silence()
	if _, err := old.Write([]byte("void")); err != nil {
		t.Fatal(err)
	}
	testsync.WaitFor(t, "the request swallowed", func() bool { return p.dropped.Load() == int64(len("void")) })
	if n := e.received.Load(); n != int64(len("ok")) {
		t.Errorf("the server received %d bytes; want only the %d before Silence", n, len("ok"))
	}
	nothingArrives(t, old)

	roundTrip(t, dial(t, p), "fresh") // a connection opened afterwards works
	nothingArrives(t, old)            // and the old one stays silent
}

func TestCut(t *testing.T) {
	p := New(t, newEcho(t).ln.Addr().String())
	a, b := dial(t, p), dial(t, p)
	roundTrip(t, a, "ok")
	roundTrip(t, b, "ok")

	p.Cut()
	isClosed(t, a)
	isClosed(t, b)
	roundTrip(t, dial(t, p), "again") // the listener still accepts
}

func TestUnreachableTargetClosesTheConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	_ = ln.Close()
	isClosed(t, dial(t, New(t, gone)))
}

// TestCleanupClosesOpenConnections: the proxy's cleanup returns with
// connections still open (and one silenced), closing them; goleak in
// TestMain checks that none of its goroutines is left.
func TestCleanupClosesOpenConnections(t *testing.T) {
	var c net.Conn
	t.Run("proxy", func(t *testing.T) {
		p := New(t, newEcho(t).ln.Addr().String())
		var err error
		c, err = net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c, "ok")
		p.Silence()
		roundTrip(t, dial(t, p), "ok")
	})
	defer c.Close()
	isClosed(t, c)
}
