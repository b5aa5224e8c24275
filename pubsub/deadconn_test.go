package pubsub_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/tcpfault"
	"github.com/herdkit/herd/pubsub"
)

// TestSubscriberReplacesSilentConnection: the subscription's connection stops
// answering without closing; the unanswered PING makes the loop open a new
// one, and delivery resumes.
func TestSubscriberReplacesSilentConnection(t *testing.T) {
	mr, direct := newMini(t)
	proxy := tcpfault.New(t, mr.Addr())
	opts := clientOptions(proxy.Addr())
	opts.ReadTimeout = 300 * time.Millisecond // the GET of the term on a silent pooled connection
	opts.MaxRetries = -1
	viaProxy := redis.NewClient(opts)
	t.Cleanup(func() { _ = viaProxy.Close() })

	r := newRouter(t, direct, newMaster(t, direct, "m", pubsub.Config{}), nil, pubsub.Config{})
	_, got, log := startSubscriber(t, viaProxy, "s1", pubsub.Config{PingInterval: 50 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond})
	mustSend(t, r, "s1", "t", "before")
	receive(t, got)

	proxy.Silence()
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
