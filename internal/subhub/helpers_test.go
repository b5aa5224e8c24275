package subhub_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/subhub"
)

// waitLimit bounds every wait in these tests: it turns a hang into a
// failure and is never asserted as a timing.
const waitLimit = 20 * time.Second

// testCtx returns a context bounded by waitLimit.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// recorder collects what a subscription's callbacks receive.
type recorder struct {
	msgs       chan *redis.Message
	subscribed chan string
	errs       chan error

	mu      sync.Mutex
	dropped int
}

func newRecorder() *recorder {
	return &recorder{msgs: make(chan *redis.Message, 10000), subscribed: make(chan string, 100), errs: make(chan error, 100)}
}

// options are Options that record into r.
func (r *recorder) options(inline bool, channels ...string) subhub.Options {
	return subhub.Options{
		Channels:     channels,
		Inline:       inline,
		OnMessage:    func(_ context.Context, m *redis.Message) { r.msgs <- m },
		OnSubscribed: func(_ context.Context, ch string) { r.subscribed <- ch },
		OnError:      func(err error) { r.errs <- err },
		OnDropped: func(n int) {
			r.mu.Lock()
			r.dropped += n
			r.mu.Unlock()
		},
	}
}

// message waits for the next message and checks its channel and payload.
func (r *recorder) message(t testing.TB, channel, payload string) {
	t.Helper()
	select {
	case m := <-r.msgs:
		if m.Channel != channel || m.Payload != payload {
			t.Fatalf("received %q on %q, want %q on %q", m.Payload, m.Channel, payload, channel)
		}
	case <-time.After(waitLimit):
		t.Fatalf("no message %q on %q", payload, channel)
	}
}

// resubscribed waits until OnSubscribed was called for each of channels.
func (r *recorder) resubscribed(t testing.TB, channels ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, c := range channels {
		want[c] = true
	}
	deadline := time.After(waitLimit)
	for len(want) > 0 {
		select {
		case c := <-r.subscribed:
			delete(want, c)
		case <-deadline:
			t.Fatalf("OnSubscribed not called again for %v", want)
		}
	}
}

// subscribe subscribes, fails the test on error and closes at cleanup.
func subscribe(t testing.TB, c redis.UniversalClient, o subhub.Options) *subhub.Subscription {
	t.Helper()
	s, err := subhub.Subscribe(testCtx(t), c, o)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", o.Channels, err)
	}
	t.Cleanup(s.Close)
	return s
}

// subscribeAll subscribes with o and drains the OnSubscribed calls of
// Subscribe itself from r.
func subscribeAll(t testing.TB, c redis.UniversalClient, r *recorder, o subhub.Options) *subhub.Subscription {
	t.Helper()
	s := subscribe(t, c, o)
	r.resubscribed(t, o.Channels...)
	return s
}

// pubsubConns returns how many pub/sub connections the server of c has.
func pubsubConns(t testing.TB, c *redis.Client) int {
	t.Helper()
	return clientCount(t, c, "CLIENT", "LIST", "TYPE", "pubsub")
}

// clientCount returns how many lines the CLIENT LIST command args answers.
func clientCount(t testing.TB, c *redis.Client, args ...any) int {
	t.Helper()
	list, err := c.Do(testCtx(t), args...).Text()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return len(strings.FieldsFunc(list, func(r rune) bool { return r == '\n' }))
}

// waitConns waits until the server of c has want pub/sub connections.
func waitConns(t testing.TB, c *redis.Client, want int) {
	t.Helper()
	waitCount(t, c, want, "CLIENT", "LIST", "TYPE", "pubsub")
}

// waitCount waits until the CLIENT LIST command args answers want lines.
func waitCount(t testing.TB, c *redis.Client, want int, args ...any) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		n := clientCount(t, c, args...)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v: %d connections, want %d", args, n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// publish publishes and returns how many subscribers received it.
func publish(t testing.TB, c redis.UniversalClient, channel, payload string) int64 {
	t.Helper()
	n, err := c.Publish(testCtx(t), channel, payload).Result()
	if err != nil {
		t.Fatalf("PUBLISH %s: %v", channel, err)
	}
	return n
}

// waitReceivers waits until a PUBLISH on channel reaches want connections,
// and returns how many messages it published to get there.
func waitReceivers(t testing.TB, c redis.UniversalClient, channel string, want int64) int {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for sent := 1; ; sent++ {
		if publish(t, c, channel, "probe") == want {
			return sent
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUBLISH %s does not reach %d subscribers", channel, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
