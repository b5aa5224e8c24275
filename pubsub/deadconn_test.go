package pubsub_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/pubsub"
)

// blackhole is a TCP proxy whose existing connections can be made to
// swallow every byte in both directions without closing, as a silent
// network partition does. Connections opened afterwards work.
type blackhole struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	links  []*link
}

type link struct {
	client, server net.Conn
	dead           atomic.Bool
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", b.target)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		b.mu.Lock()
		b.links = append(b.links, l)
		b.mu.Unlock()
		b.wg.Add(2)
		go b.pump(l, c, s)
		go b.pump(l, s, c)
	}
}

// pump copies src to dst until either closes, dropping bytes once the link is dead.
func (b *blackhole) pump(l *link, src, dst net.Conn) {
	defer b.wg.Done()
	defer l.client.Close()
	defer l.server.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.dead.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// partition makes every current connection silent.
func (b *blackhole) partition() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.links {
		l.dead.Store(true)
	}
}

func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	for _, l := range b.links {
		l.client.Close()
		l.server.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// TestSubscriberReplacesSilentConnection: the subscription's connection stops
// answering without closing; the unanswered PING makes the loop open a new
// one, and delivery resumes.
func TestSubscriberReplacesSilentConnection(t *testing.T) {
	mr, direct := newMini(t)
	bh := newBlackhole(t, mr.Addr())
	opts := clientOptions(bh.addr())
	opts.ReadTimeout = 300 * time.Millisecond // the GET of the term on a silent pooled connection
	opts.MaxRetries = -1
	viaProxy := redis.NewClient(opts)
	t.Cleanup(func() { _ = viaProxy.Close() })

	r := newRouter(t, direct, newMaster(t, direct, "m", pubsub.Config{}), nil, pubsub.Config{})
	_, got, log := startSubscriber(t, viaProxy, "s1", pubsub.Config{PingInterval: 50 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
	mustSend(t, r, "s1", "t", "before")
	receive(t, got)

	bh.partition()
	// The server still counts the silent subscriber, so Send succeeds but
	// nothing arrives; the loop must notice by itself.
	for {
		err := log.next(t, pubsub.ErrConnection)
		if strings.Contains(err.Error(), "no reply to PING") {
			break
		}
	}
	ctx := testCtx(t)
	for {
		// Until the new connection has subscribed, the server counts the
		// silent one or nobody: wait until a probe is actually received.
		if err := r.Send(ctx, "s1", "t", "probe"); err != nil && !errors.Is(err, pubsub.ErrNoSubscriber) {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if string(m.Payload) != `"probe"` {
				t.Fatalf("received %s", m.Payload)
			}
		case <-time.After(20 * time.Millisecond):
			if ctx.Err() != nil {
				t.Fatal("delivery did not resume")
			}
			continue
		}
		break
	}
	mustSend(t, r, "s1", "t", "after")
	for {
		m := receive(t, got)
		if string(m.Payload) == `"after"` {
			break
		}
		if string(m.Payload) != `"probe"` {
			t.Fatalf("received %s", m.Payload)
		}
	}
	if n := log.count(pubsub.ErrStaleTerm) + log.count(pubsub.ErrMalformedEnvelope); n != 0 {
		t.Errorf("unexpected errors: %v", log.all())
	}
}
