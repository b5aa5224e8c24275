package subhub_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/internal/testkit/dialgate"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/tcpfault"
)

// TestSharing: three subscriptions of one client, queued and inline, hold
// one connection; another client has its own.
func TestSharing(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	ra, rb, ri := newRecorder(), newRecorder(), newRecorder()
	subscribeAll(t, c, ra, ra.options(false, "a", "shared"))
	subscribeAll(t, c, rb, rb.options(false, "b", "shared"))
	subscribeAll(t, c, ri, ri.options(true, "i"))
	if n := pubsubConns(t, c); n != 1 {
		t.Fatalf("%d pub/sub connections for three subscriptions of one client, want 1", n)
	}
	if n := publish(t, c, "shared", "x"); n != 1 {
		t.Errorf("PUBLISH shared reached %d connections, want 1", n)
	}
	ra.message(t, "shared", "x")
	rb.message(t, "shared", "x")
	publish(t, c, "a", "to a")
	publish(t, c, "i", "to i")
	ra.message(t, "a", "to a")
	ri.message(t, "i", "to i")

	other := inst.Client(t)
	ro := newRecorder()
	subscribeAll(t, other, ro, ro.options(false, "shared"))
	if n := pubsubConns(t, c); n != 2 {
		t.Fatalf("%d pub/sub connections for two clients, want 2", n)
	}
}

// TestChannelRefcount: a channel two subscriptions hold stays subscribed
// when one of them closes; a channel only the closed one held does not.
// A subscription to channels already confirmed returns at once, even with
// the server frozen; one that needs the server gives up with its ctx and
// leaves nothing behind, and the same channel can be subscribed again.
func TestChannelRefcount(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	ra, rb := newRecorder(), newRecorder()
	a := subscribeAll(t, c, ra, ra.options(false, "shared", "only-a"))
	subscribeAll(t, c, rb, rb.options(false, "shared"))
	a.Close()
	waitReceivers(t, c, "only-a", 0)
	if n := publish(t, c, "shared", "after"); n != 1 {
		t.Fatalf("PUBLISH shared reached %d connections after one holder closed, want 1", n)
	}
	rb.message(t, "shared", "after")
	if got := subhub.HubChannels(c); !slices.Equal(got, []string{"shared"}) {
		t.Errorf("hub channels %q, want [shared]", got)
	}

	inst.Pause(t)
	rc := newRecorder()
	ctx, cancel := context.WithTimeout(testCtx(t), 2*time.Second)
	sc, err := subhub.Subscribe(ctx, c, rc.options(false, "shared"))
	cancel()
	if err != nil {
		inst.Resume(t)
		t.Fatalf("Subscribe to a confirmed channel with the server frozen: %v", err)
	}
	t.Cleanup(sc.Close)
	ctx, cancel = context.WithTimeout(testCtx(t), 300*time.Millisecond)
	_, err = subhub.Subscribe(ctx, c, rc.options(false, "shared", "new"))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		inst.Resume(t)
		t.Fatalf("Subscribe to a new channel with the server frozen: %v, want the deadline", err)
	}
	if got := subhub.HubChannels(c); !slices.Equal(got, []string{"shared"}) {
		t.Errorf("hub channels %q after a failed Subscribe, want [shared]", got)
	}
	inst.Resume(t)
	rn := newRecorder()
	subscribeAll(t, c, rn, rn.options(false, "new"))
	if n := publish(t, c, "new", "n"); n != 1 {
		t.Fatalf("PUBLISH new reached %d connections, want 1", n)
	}
	rn.message(t, "new", "n")
}

// TestSlowConsumer: a queued subscription whose callback blocks delays
// neither an inline one nor another queued one on the same channel; its
// queue holds MaxQueue bytes and the rest is dropped and reported.
func TestSlowConsumer(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	const total, size = 100, 100
	payload := strings.Repeat("p", size)
	release := make(chan struct{})
	slow := newRecorder()
	o := slow.options(false, "ch")
	o.MaxQueue = 10 * (len("ch") + size)
	o.OnMessage = func(ctx context.Context, m *redis.Message) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		slow.msgs <- m
	}
	subscribeAll(t, c, slow, o)
	inline, queued := newRecorder(), newRecorder()
	subscribeAll(t, c, inline, inline.options(true, "ch"))
	subscribeAll(t, c, queued, queued.options(false, "ch"))
	for range total {
		publish(t, c, "ch", payload)
	}
	for range total {
		inline.message(t, "ch", payload)
		queued.message(t, "ch", payload)
	}
	close(release)
	delivered := 0
	deadline := time.After(waitLimit)
	for {
		slow.mu.Lock()
		dropped := slow.dropped
		slow.mu.Unlock()
		if delivered+dropped == total {
			// Ten fit in the queue, and one more when the callback took the
			// first before the others came.
			if delivered < 10 || delivered > 11 {
				t.Errorf("slow subscription got %d messages and %d dropped, want 10 or 11 delivered", delivered, dropped)
			}
			return
		}
		select {
		case <-slow.msgs:
			delivered++
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("slow subscription: %d delivered, %d dropped of %d", delivered, dropped, total)
		}
	}
}

// TestReconnect: when the server kills the connection, every subscription
// hears of it, and of each of its channels subscribed again, and messages
// flow again on one connection.
func TestReconnect(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	rq, ri := newRecorder(), newRecorder()
	subscribeAll(t, c, rq, rq.options(false, "a", "b"))
	subscribeAll(t, c, ri, ri.options(true, "b"))
	if err := c.Do(testCtx(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recorder{rq, ri} {
		select {
		case err := <-r.errs:
			if !strings.Contains(err.Error(), "receive") {
				t.Errorf("error %q", err)
			}
		case <-time.After(waitLimit):
			t.Fatal("no error reported")
		}
	}
	rq.resubscribed(t, "a", "b")
	ri.resubscribed(t, "b")
	waitConns(t, c, 1)
	publish(t, c, "a", "again")
	rq.message(t, "a", "again")
}

// TestSilentConnection: a connection that stops answering without closing
// is replaced after an unanswered PING.
func TestSilentConnection(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	direct := inst.Client(t)
	proxy := tcpfault.New(t, inst.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, DisableIdentity: true})
	t.Cleanup(func() { _ = viaProxy.Close() })
	r := newRecorder()
	o := r.options(false, "ch")
	o.PingInterval = 50 * time.Millisecond
	subscribeAll(t, viaProxy, r, o)
	proxy.Silence()
	select {
	case err := <-r.errs:
		if !strings.Contains(err.Error(), "no reply to PING within 50ms") {
			t.Errorf("error %q", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("silent connection not noticed")
	}
	r.resubscribed(t, "ch") // the new connection is subscribed
	publish(t, direct, "ch", "after")
	r.message(t, "ch", "after")
}

// TestLastCloseClosesConnection: the connection stays while a subscription
// does, and goes with the last one, with the hub and its goroutines.
func TestLastCloseClosesConnection(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	before := clientCount(t, c, "CLIENT", "LIST") // the client's command connection
	ignore := goleak.IgnoreCurrent()              // the server's, the client's
	ra, rb := newRecorder(), newRecorder()
	a, err := subhub.Subscribe(testCtx(t), c, ra.options(false, "x"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := subhub.Subscribe(testCtx(t), c, rb.options(true, "y"))
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Close() // idempotent
	waitConns(t, c, 1)
	b.Close()
	waitCount(t, c, before, "CLIENT", "LIST") // closed, not only unsubscribed
	if n := subhub.HubCount(); n != 0 {
		t.Errorf("%d hubs left", n)
	}
	goleak.VerifyNone(t, ignore)
}

// TestSubscribeWithoutServer: Subscribe gives up when its ctx ends, says
// why the connection failed, and leaves no hub or goroutine behind.
func TestSubscribeWithoutServer(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	ignore := goleak.IgnoreCurrent() // the server's, the client's
	inst.Stop(t)
	r := newRecorder()
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	_, err := subhub.Subscribe(ctx, c, r.options(false, "x"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last error: connect:") {
		t.Fatalf("Subscribe without a server: %v", err)
	}
	if n := subhub.HubCount(); n != 0 {
		t.Errorf("%d hubs left", n)
	}
	goleak.VerifyNone(t, ignore)
}

// TestConcurrentSubscribeClose: subscriptions come and go on shared
// channels from many goroutines while messages flow; each one that
// Subscribe returned receives what is published after, and nothing is
// left at the end.
func TestConcurrentSubscribeClose(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	stop := make(chan struct{})
	var pub sync.WaitGroup
	ctx := testCtx(t)
	pub.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = c.Publish(ctx, "c0", "noise").Err()
			}
		}
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				mine := []string{"c0", "c" + string(rune('1'+(g+i)%3))}
				got := make(chan string, 1000)
				s, err := subhub.Subscribe(ctx, c, subhub.Options{
					Channels: mine,
					Inline:   (g+i)%2 == 0,
					OnMessage: func(_ context.Context, m *redis.Message) {
						select {
						case got <- m.Payload:
						default:
						}
					},
				})
				if err != nil {
					t.Error(err)
					return
				}
				want := "hello " + mine[1]
				if err := c.Publish(ctx, mine[1], want).Err(); err != nil {
					t.Error(err)
				}
			wait:
				for {
					select {
					case p := <-got:
						if p == want {
							break wait
						}
					case <-ctx.Done():
						t.Errorf("%q not received", want)
						break wait
					}
				}
				s.Close()
			}
		})
	}
	wg.Wait()
	close(stop)
	pub.Wait()
	waitConns(t, c, 0)
	if n := subhub.HubCount(); n != 0 {
		t.Errorf("%d hubs left", n)
	}
}

// TestCluster: under Redis Cluster the hub is per slot of the first
// channel, and its connection is on that slot's node, also after a
// reconnect, whatever other channels it holds.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.Default(t), 3)
	c := cl.Client(t)
	tag := "{lock}"
	// Channels of other slots than the tag's, as slave channels are.
	var others []string
	for i := 0; len(others) < 8; i++ {
		if ch := "worker:slave:" + string(rune('a'+i)); subhub.Slot(ch) != subhub.Slot(tag) {
			others = append(others, ch)
		}
	}
	r1, r2 := newRecorder(), newRecorder()
	subscribeAll(t, c, r1, r1.options(false, append([]string{tag + ":events"}, others[:4]...)...))
	subscribeAll(t, c, r2, r2.options(true, append([]string{tag + ":inbox"}, others[4:]...)...))
	node := cl.NodeForSlot(t, subhub.Slot(tag)).Client(t)
	check := func() {
		t.Helper()
		waitConns(t, node, 1)
		for _, ch := range []string{tag + ":events", tag + ":inbox"} {
			n, err := node.Publish(testCtx(t), ch, "x").Result()
			if err != nil || n != 1 {
				t.Fatalf("PUBLISH %s on the slot's node reached %d (%v), want 1", ch, n, err)
			}
		}
	}
	check()
	// Kill it on every node; the reconnection picks the slot's node again.
	for range 5 {
		for _, addr := range cl.Addrs() {
			n := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
			_ = n.Do(testCtx(t), "CLIENT", "KILL", "TYPE", "pubsub").Err()
			_ = n.Close()
		}
		r1.resubscribed(t, tag+":events")
		r2.resubscribed(t, tag+":inbox")
		check()
	}
	// A hub per slot: a subscription led by a channel of another node's
	// slot has its own connection, on that node.
	tagNode := cl.NodeForSlot(t, subhub.Slot(tag))
	var other string
	for _, ch := range others {
		if cl.NodeForSlot(t, subhub.Slot(ch)) != tagNode {
			other = ch
			break
		}
	}
	r3 := newRecorder()
	subscribeAll(t, c, r3, r3.options(false, other))
	n, err := cl.NodeForSlot(t, subhub.Slot(other)).Client(t).Publish(testCtx(t), other, "y").Result()
	if err != nil || n != 1 {
		t.Fatalf("PUBLISH %s on its node reached %d (%v), want 1 (the subscription led by it)", other, n, err)
	}
	waitConns(t, node, 1)
}

// TestRefusedChannel: the server refuses a channel the ACL does not allow;
// the subscription that wants it fails and says why, the others keep
// their channels, also across a reconnection made while one still waits
// for the refused channel.
func TestRefusedChannel(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	admin := inst.Client(t)
	if err := admin.Do(testCtx(t), "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "resetchannels", "&ok").Err(); err != nil {
		t.Fatal(err)
	}
	o := inst.Options()
	o.Username, o.Password = "limited", "pw"
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	rok := newRecorder()
	subscribeAll(t, c, rok, rok.options(false, "ok"))

	ctx, cancel := context.WithTimeout(testCtx(t), 500*time.Millisecond)
	_, err := subhub.Subscribe(ctx, c, newRecorder().options(false, "secret"))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Subscribe to a refused channel: %v, want the deadline and the refusal", err)
	}

	waitCtx, stopWaiting := context.WithCancel(testCtx(t))
	var waiting sync.WaitGroup
	waiting.Go(func() { _, _ = subhub.Subscribe(waitCtx, c, newRecorder().options(false, "secret")) })
	defer waiting.Wait()
	defer stopWaiting()
	for len(subhub.HubChannels(c)) != 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // its refusal comes back
	if n := len(rok.subscribed); n != 0 {
		t.Fatalf("%q subscribed again %d times: a refusal replaced the connection", "ok", n)
	}
	if err := admin.Do(testCtx(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	rok.resubscribed(t, "ok")
	publish(t, admin, "ok", "still")
	rok.message(t, "ok", "still")
}

// TestChangesDuringTheDial: subscriptions made and closed while the hub's
// connection is still being dialled neither wait for the dial nor are lost:
// once it goes through, the channels added meanwhile are subscribed and
// those closed meanwhile are not. With the dial held under the lock that
// orders the hub's commands, the Close waits for the dial.
func TestChangesDuringTheDial(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := redis.NewClient(inst.Options())
	t.Cleanup(func() { _ = c.Close() })
	admin := inst.Client(t)
	gate := dialgate.New()
	c.AddHook(gate)

	// The first subscription starts the reader, whose dial waits at the gate.
	first := make(chan error, 1)
	go func() {
		s, err := subhub.Subscribe(testCtx(t), c, newRecorder().options(false, "a"))
		if err == nil {
			t.Cleanup(s.Close)
		}
		first <- err
	}()
	waitFor(t, "the dial at the gate", func() bool { return gate.Waiting() == 1 })

	// Made and closed during the dial: its ctx ends before the dial does.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
		defer cancel()
		if s, err := subhub.Subscribe(ctx, c, newRecorder().options(false, "gone")); err == nil {
			s.Close()
		}
	}()
	select {
	case <-gone:
	case <-time.After(waitLimit):
		t.Fatal("a subscription whose ctx ended during the dial did not return until the dial did")
	}
	if n := gate.Waiting(); n != 1 {
		t.Fatalf("%d dials at the gate, want the reader's (1)", n)
	}

	// Made during the dial: ready once the dial goes through.
	second := make(chan error, 1)
	go func() {
		s, err := subhub.Subscribe(testCtx(t), c, newRecorder().options(false, "b"))
		if err == nil {
			t.Cleanup(s.Close)
		}
		second <- err
	}()
	gate.Open()
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if n := pubsubConns(t, admin); n != 1 {
		t.Fatalf("%d pub/sub connections, want 1", n)
	}
	waitFor(t, "the channels held subscribed, the one closed not", func() bool {
		n, err := admin.PubSubNumSub(testCtx(t), "a", "b", "gone").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n["a"] == 1 && n["b"] == 1 && n["gone"] == 0
	})
}

// waitFor waits (real time, at most waitLimit) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitLimit)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestRefusedChannelDuringTheDial: of the subscriptions made while the
// hub's connection is dialled, one to a channel the ACL refuses costs only
// its own channel; the others are subscribed once the dial goes through.
func TestRefusedChannelDuringTheDial(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	admin := inst.Client(t)
	if err := admin.Do(testCtx(t), "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "resetchannels", "&a", "&b").Err(); err != nil {
		t.Fatal(err)
	}
	o := inst.Options()
	o.Username, o.Password = "limited", "pw"
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	gate := dialgate.New()
	c.AddHook(gate)
	t.Cleanup(gate.Open)

	results := make(chan error, 2)
	go func() {
		s, err := subhub.Subscribe(testCtx(t), c, newRecorder().options(false, "a"))
		if err == nil {
			t.Cleanup(s.Close)
		}
		results <- err
	}()
	waitFor(t, "the dial at the gate", func() bool { return gate.Waiting() == 1 })
	go func() {
		s, err := subhub.Subscribe(testCtx(t), c, newRecorder().options(false, "b"))
		if err == nil {
			t.Cleanup(s.Close)
		}
		results <- err
	}()
	refusedCtx, stopRefused := context.WithCancel(testCtx(t))
	var refused sync.WaitGroup
	refused.Go(func() { _, _ = subhub.Subscribe(refusedCtx, c, newRecorder().options(false, "secret")) })
	defer refused.Wait()
	defer stopRefused()
	waitFor(t, "the three subscriptions made", func() bool { return len(subhub.HubChannels(c)) == 3 })
	gate.Open()
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("a subscription to an allowed channel made during the dial: %v", err)
		}
	}
}
