package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/atomicmax"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

// pubsubConns returns how many pub/sub connections the server of c has.
func pubsubConns(t testing.TB, c *redis.Client) int {
	t.Helper()
	list, err := c.Do(testCtx(t), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	return len(strings.Fields(strings.ReplaceAll(list, " ", "_")))
}

// waitConns waits until the server of c has want pub/sub connections.
func waitConns(t testing.TB, c *redis.Client, want int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for n := pubsubConns(t, c); n != want; n = pubsubConns(t, c) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pub/sub connections, want %d", n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOneConnectionPerClient: an election (master, so with its slave
// tracker), a Subscriber and a Reports on one client hold one pub/sub
// connection on the server, and they work through it; a second process
// adds one; stopping everything leaves none.
func TestOneConnectionPerClient(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	ctx := testCtx(t)
	admin := inst.Client(t)
	process := func(id string) (*masterelection.MasterElection, *pubsub.Subscriber, *pubsub.Reports, chan pubsub.Message, chan pubsub.Message) {
		c := inst.Client(t)
		cfg := masterelection.DefaultConfig()
		cfg.NodeID = id
		m, err := masterelection.New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := pubsub.NewSubscriber(c, id, pubsub.Config{Terms: m})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan pubsub.Message, 10)
		s.HandleDefault(pubsub.Chan(got))
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := pubsub.NewReports(c, m, pubsub.Config{})
		if err != nil {
			t.Fatal(err)
		}
		reports := make(chan pubsub.Message, 10)
		rep.HandleDefault(pubsub.Chan(reports))
		if err := rep.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return m, s, rep, got, reports
	}
	ma, sa, ina, _, reportsA := process("a")
	if !ma.IsMaster() {
		t.Fatal("a is not master")
	}
	if n := pubsubConns(t, admin); n != 1 {
		t.Fatalf("%d pub/sub connections for an election, a Subscriber and a Reports on one client, want 1", n)
	}
	mb, sb, inb, gotB, _ := process("b")
	waitConns(t, admin, 2)

	// Every user works through the shared connections.
	r, err := pubsub.NewRouter(admin, ma, nil, pubsub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Send(ctx, "b", "job", 1); err != nil {
		t.Fatalf("send to b: %v", err)
	}
	if m := receive(t, gotB); m.Type != "job" {
		t.Fatalf("b received %+v", m)
	}
	if err := sb.ReportToMaster(ctx, "done", 1); err != nil {
		t.Fatalf("report: %v", err)
	}
	if m := receive(t, reportsA); m.From != "b" {
		t.Fatalf("a's inbox received %+v", m)
	}
	for _, c := range []interface{ Close() error }{sa, ina, sb, inb} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*masterelection.MasterElection{ma, mb} {
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitConns(t, admin, 0)
}

// TestSlowHandlerBacklog: a handler that blocks holds up only its own
// Subscriber; what does not fit in its backlog is dropped and reported as
// ErrBacklogFull, while a Reports on the same connection keeps receiving.
func TestSlowHandlerBacklog(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	cfg := pubsub.Config{MaxBacklog: 4 << 10}
	r := newRouter(t, c, newMaster(t, c, "m", cfg), nil, cfg)
	log := newErrLog()
	scfg := cfg
	scfg.OnError = log.add
	s, err := pubsub.NewSubscriber(c, "s1", scfg)
	if err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Int64 // what observers see (metrics: outcome "dropped")
	s.Observe(pubsub.Observer{Received: func(o pubsub.ReceiveOutcome) {
		if o == pubsub.ReceiveDropped {
			dropped.Add(1)
		}
	}})
	release := make(chan struct{})
	handled := make(chan pubsub.Message, 1000)
	s.HandleDefault(func(ctx context.Context, m pubsub.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		handled <- m
		return nil
	})
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// The Reports' own backlog is the default: at 4 KiB, a burst of reports
	// that the connection's reader queues before the Reports' handler is
	// scheduled (GOMAXPROCS=1, or a busy machine) overflows it, and drops
	// are what MaxBacklog is for; this test is about the slow Subscriber.
	rep, err := pubsub.NewReports(c, nil, pubsub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan pubsub.Message, 1000)
	rep.HandleDefault(pubsub.Chan(reports))
	if err := rep.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rep.Close() })

	const total = 100
	payload := strings.Repeat("x", 200)
	for i := range total {
		mustSend(t, r, "s1", "t", payload)
		if err := s.ReportToMaster(testCtx(t), "r", i); err != nil {
			t.Fatal(err)
		}
	}
	for range total {
		receive(t, reports) // the slow handler does not hold the Reports up
	}
	// The drop is reported in order, after the messages queued before it:
	// once the handler moves again.
	close(release)
	err = log.next(t, pubsub.ErrBacklogFull)
	if !strings.Contains(err.Error(), "messages on") || errors.Is(err, pubsub.ErrConnection) {
		t.Errorf("backlog error %q", err)
	}
	n := 0
	for {
		select {
		case <-handled:
			n++
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	if n == 0 || n >= total {
		t.Errorf("%d of %d messages handled, want some dropped, some handled", n, total)
	}
	if d := dropped.Load(); int(d) != total-n {
		t.Errorf("observers saw %d messages dropped, want %d (%d of %d handled)", d, total-n, n, total)
	}
}

// TestTwoConnectionsPerProcess: six processes, each an election and a
// Subscriber on a client of its own, all started at once, hold one pub/sub
// connection each, and a slave never has two calls in flight from its
// Start until it has settled nor sends a pipeline: go-redis opens a second
// command connection only for a second call at once (or a pipeline pool's
// first pipeline), and keeps it open, idle, for the client's life (issue
// 28: four to five connections per process).
func TestTwoConnectionsPerProcess(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	ctx := testCtx(t)
	admin := inst.Client(t)
	const n = 6
	ms := make([]*masterelection.MasterElection, n)
	clients := make([]*redis.Client, n)
	calls := make([]*callCounter, n)
	started := make(chan error, n)
	for i := range n {
		clients[i] = redis.NewClient(inst.Options())
		calls[i] = &callCounter{}
		clients[i].AddHook(calls[i])
		t.Cleanup(func() { _ = clients[i].Close() })
		cfg := masterelection.DefaultConfig()
		cfg.LockName, cfg.NodeID, cfg.LockTTL = "conns", fmt.Sprintf("p%d", i), 3*time.Second
		m, err := masterelection.New(clients[i], cfg)
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
	}
	for _, m := range ms {
		go func() { started <- m.Start(ctx) }()
	}
	for range n {
		if err := <-started; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // what the start set off has settled
	for i, m := range ms {
		if most, pipes := calls[i].most.Load(), calls[i].pipelines.Load(); !m.IsMaster() && (most > 1 || pipes > 0) {
			t.Errorf("slave %s had up to %d calls in flight at once and sent %d pipelines, want 1 and 0", m.NodeID(), most, pipes)
		}
	}
	for i, m := range ms {
		s, err := pubsub.NewSubscriber(clients[i], m.NodeID(), pubsub.Config{LockName: "conns", Terms: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
	}
	waitConns(t, admin, n)
}

// callCounter is a go-redis hook that keeps the most calls (commands and
// pipelines) a client had in flight at once, and counts its pipelines; a
// new connection's handshake (HELLO, CLIENT SETINFO), which go-redis runs
// through the hooks too, is left out.
type callCounter struct {
	inFlight, most, pipelines atomic.Int64
}

func (c *callCounter) enter() func() {
	atomicmax.Raise(&c.most, c.inFlight.Add(1))
	return func() { c.inFlight.Add(-1) }
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if wiretap.Handshake(cmd) {
			return next(ctx, cmd)
		}
		defer c.enter()()
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && wiretap.Handshake(cmds[0]) {
			return next(ctx, cmds)
		}
		c.pipelines.Add(1)
		defer c.enter()()
		return next(ctx, cmds)
	}
}
