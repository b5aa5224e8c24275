package masterelection

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/dialgate"
	"github.com/herdkit/herd/internal/testkit/redistest"
)

// TestFeedSharesAndReconnects: on a real server, a master's notice feed and
// slave tracker, and a second election of the same client, hold one pub/sub
// connection. When the server kills it, each election reports one error
// event, and the feeds are subscribed again on one new connection.
func TestFeedSharesAndReconnects(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	admin := inst.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 100)
	start := func(id string) *MasterElection {
		m, err := New(c, testConfig(id))
		if err != nil {
			t.Fatal(err)
		}
		m.OnError(func(err error) { errs <- err })
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		return m
	}
	a, b := start("a"), start("b")
	if !a.IsMaster() {
		t.Fatal("a is not master")
	}
	conns := func() int {
		list, err := admin.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, "\n")
	}
	// Each feed's channels, and the tracker's, on one connection.
	subscribed := func() bool {
		k := a.Keys()
		channels := append(a.core.feedChannels(), b.core.feedChannels()...)
		channels = append(channels, k.RegistryEvents)
		n, err := admin.PubSubNumSub(t.Context(), channels...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range channels {
			if n[ch] != 1 {
				return false
			}
		}
		return conns() == 1
	}
	for !subscribed() {
		if ctx.Err() != nil {
			t.Fatalf("%d pub/sub connections, or a channel not subscribed once", conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // one per election
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "notice feed") {
				t.Fatalf("error event %v, want one about the notice feed", err)
			}
		case <-ctx.Done():
			t.Fatal("the killed connection was not reported")
		}
	}
	for !subscribed() {
		if ctx.Err() != nil {
			t.Fatalf("after the kill: %d pub/sub connections, or a channel not subscribed once", conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-errs:
		t.Errorf("another error event: %v", err)
	default:
	}
}

// TestMasterStartDoesNotWaitForTheFeed: Start returns as master while the
// notice feed's connection is still being dialled (a master hears no
// release while it holds the lock), with no error reported; the feed is
// subscribed once the dial goes through. A Start that waits for the feed
// returns only when its ctx ends.
func TestMasterStartDoesNotWaitForTheFeed(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := redis.NewClient(inst.Options())
	t.Cleanup(func() { _ = c.Close() })
	admin := inst.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	gate := gateAfterWarming(ctx, t, c)

	m, err := New(c, testConfig("a"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 10)
	m.OnError(func(err error) { errs <- err })
	// Start's ctx ends long after a Start that does not wait for the dial
	// has returned, and long before the test's.
	startCtx, startCancel := context.WithTimeout(ctx, 8*time.Second)
	defer startCancel()
	if err := m.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	t.Cleanup(gate.Open) // first: a Stop waits for the feed's dial
	if startCtx.Err() != nil {
		t.Fatal("Start returned only when its ctx ended: it waited for the feed's dial")
	}
	if !m.IsMaster() {
		t.Fatal("the only candidate of a fresh lock is not master")
	}
	if n := gate.Waiting(); n < 1 {
		t.Fatal("Start returned with no dial waiting at the gate: the feed's connection was dialled")
	}
	subscribed := func() (n int) {
		counts, err := admin.PubSubNumSub(t.Context(), m.core.feedChannels()...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range m.core.feedChannels() {
			n += int(min(counts[ch], 1))
		}
		return n
	}
	if n := subscribed(); n != 0 {
		t.Fatalf("%d of the feed's channels subscribed while its dial waits", n)
	}
	select {
	case err := <-errs:
		t.Fatalf("error event before the feed's dial went through: %v", err)
	default:
	}

	gate.Open()
	waitFor(t, "the feed subscribed", func() bool { return subscribed() == len(m.core.feedChannels()) })
	select {
	case err := <-errs:
		t.Fatalf("error event: %v", err)
	default:
	}
}

// TestStopWhileTheFeedDials: a master stopped while its feed's connection
// is still being dialled stops at once, leaving no goroutine behind: the
// dial holds no lock that the feed's and the slave tracker's closing
// subscriptions wait for (internal/subhub), and the last one's close ends
// it. Before, Stop waited for the dial to time out (DialTimeout, here far
// beyond Stop's ctx).
func TestStopWhileTheFeedDials(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	opt := inst.Options()
	opt.DialTimeout = time.Minute
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	gate := gateAfterWarming(ctx, t, c)
	t.Cleanup(gate.Open) // should Stop not end the dial

	m, err := New(c, testConfig("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.IsMaster() || gate.Waiting() < 1 {
		t.Fatalf("master %v with %d dials waiting, want master with the feed's dial waiting", m.IsMaster(), gate.Waiting())
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	defer stopCancel()
	if err := m.Stop(stopCtx); err != nil {
		t.Fatalf("Stop while the feed dials: %v", err)
	}
	waitFor(t, "the dial ended", func() bool { return gate.Waiting() == 0 })
}

// gateAfterWarming dials the command path's connections of c before a
// gate holds its later dials: four at once, then idle in the pool (Start
// needs fewer at a time), so that the dial held is the feed's.
func gateAfterWarming(ctx context.Context, t *testing.T, c *redis.Client) *dialgate.Gate {
	t.Helper()
	var conns []*redis.Conn
	for range 4 {
		cn := c.Conn()
		if err := cn.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		_ = cn.Close()
	}
	gate := dialgate.New()
	c.AddHook(gate)
	return gate
}
