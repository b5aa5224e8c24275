package durable_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/tcpfault"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// The tests in this file each reproduce one way durable routing used to
// lose a message whose Send returned nil, on real servers: a master change
// (its backlog dropped as stale), a lost read reply (entries stranded in
// the pending list), a slave removed after the send (its inbox never
// reassigned), and a message whose handler always fails (delivered forever).

// handledLog records, per message id, the deliveries that handlers
// finished.
type handledLog struct {
	mu   sync.Mutex
	seen map[string][]durable.Delivery
}

func (h *handledLog) handler(wait time.Duration) durable.Handler {
	return func(_ context.Context, d durable.Delivery) error {
		if wait > 0 {
			time.Sleep(wait)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.seen == nil {
			h.seen = map[string][]durable.Delivery{}
		}
		h.seen[d.ID] = append(h.seen[d.ID], d)
		return nil
	}
}

func (h *handledLog) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen[id])
}

func (h *handledLog) missing(ids []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, id := range ids {
		if len(h.seen[id]) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// termSource is a Config.Terms that the test raises as an election's
// notices would.
type termSource struct{ term atomic.Int64 }

func (s *termSource) ObservedTerm() int64 { return s.term.Load() }

// TestIntegrationMasterKilledAfterBurstLosesNothing: a master process sends
// a burst of 1,000 messages to three slaves that stall after 50 (a slow
// downstream) and is killed with SIGKILL right after; a new master takes over once its lock
// expires and the slaves learn the new term at once. Every message the dead
// master stored is handled, under the new master's term once adopted, and
// none under a term older than one its slave had handled.
func TestIntegrationMasterKilledAfterBurstLosesNothing(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		c := inst.Client(t)
		register(t, c, "s1", "s2", "s3")
		const n, ledger = 1000, "test:stored"
		terms := &termSource{}
		log := &handledLog{}
		var fenceBroken, started atomic.Int64
		gate := make(chan struct{})
		for _, id := range []string{"s1", "s2", "s3"} {
			cfg := fast()
			cfg.Terms = terms
			con, err := durable.NewConsumer(c, id, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var handledTerm atomic.Int64
			h := log.handler(0)
			con.HandleDefault(func(ctx context.Context, d durable.Delivery) error {
				// The slaves handle a few, then stall (a slow downstream)
				// until the new master is there: most of the burst is
				// still in the inboxes when the master dies.
				if started.Add(1) > 50 {
					select {
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				if d.Term < handledTerm.Load() {
					fenceBroken.Add(1)
				}
				handledTerm.Store(max(handledTerm.Load(), d.Term))
				return h(ctx, d)
			})
			if err := con.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = con.Close() })
		}

		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), burstEnv+"="+strconv.Itoa(n), nodeAddrEnv+"="+inst.Addr, nodeLedgerEnv+"="+ledger)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "sent" {
			t.Fatalf("the master process did not finish its burst: %q", line)
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL, right after the burst
			t.Fatal(err)
		}
		_ = cmd.Wait()
		stored, err := c.LRange(testCtx(t), ledger, 0, -1).Result()
		if err != nil || len(stored) != n {
			t.Fatalf("%d messages recorded as stored, %v", len(stored), err)
		}

		// The new master: the dead one's lock expires (deleted here rather
		// than waited for), the next candidate acquires, its term is known
		// to the slaves at once, then its Maintain runs.
		next := takeOver(t, c, "m2")
		terms.term.Store(next.Term())
		close(gate)
		live := &slaveList{}
		live.set("s1", "s2", "s3")
		r := newRouter(t, c, next, live, fast())
		ev := &fakeEvents{}
		stop := r.Maintain(ev, nil)
		defer stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ev.acquired(ctx, next.Term())

		eventually(t, "every stored message handled", func() bool { return len(log.missing(stored)) == 0 })
		adopted, dups := 0, 0
		for _, id := range stored {
			ds := log.seen[id]
			dups += len(ds) - 1
			if ds[len(ds)-1].Term == next.Term() {
				adopted++
			}
		}
		if fenceBroken.Load() != 0 {
			t.Errorf("%d handlings under a term older than one the same slave had handled", fenceBroken.Load())
		}
		t.Logf("%s: %d stored, all handled; %d of them adopted by the new master, %d duplicates", srv.Name, n, adopted, dups)
	})
}

// TestIntegrationLostReadReplyIsRecovered: Redis delivers an entry to the
// slave's XREADGROUP, the reply is lost and the connection reset (go-redis
// retries the read by itself, so the Consumer may not even see an error):
// the entry sits in the slave's pending list, and the Consumer's periodic
// look at its pending entries hands it to the handler, as its second
// delivery, while newer entries go on. None of it calls OnError.
func TestIntegrationLostReadReplyIsRecovered(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		admin := inst.Client(t)
		proxy := tcpfault.New(t, inst.Addr)
		c := redis.NewClient(clientOptions(proxy.Addr()))
		t.Cleanup(func() { _ = c.Close() })
		r := newRouter(t, admin, newMaster(t, admin, "m"), nil, fast())
		log := &handledLog{}
		errs := &errLog{}
		cfg := durable.Config{Block: time.Second, RetryDelay: time.Second, OnError: errs.add}
		register(t, admin, "s1")
		con, err := durable.NewConsumer(c, "s1", cfg)
		if err != nil {
			t.Fatal(err)
		}
		con.HandleDefault(log.handler(0))
		if err := con.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = con.Close() })
		// Each attempt sends a message while the server's replies are
		// dropped; it counts when Redis delivered the message to s1's
		// blocked read (the entry is pending), which needs s1 to be in that
		// read and not in another command when the drop begins.
		inbox := r.Inbox("s1")
		var lost string
		var reset time.Time
		for attempt := 0; lost == "" && attempt < 10; attempt++ {
			eventually(t, "s1's inbox drained", func() bool { return admin.XLen(testCtx(t), inbox).Val() == 0 })
			time.Sleep(100 * time.Millisecond) // s1 is in its blocking read again
			proxy.DropReplies(true)
			id, err := r.Send(testCtx(t), "s1", "work", "lost")
			if err != nil {
				t.Fatal(err)
			}
			delivered := false
			for wait := time.Now(); time.Since(wait) < 2*time.Second && !delivered; time.Sleep(5 * time.Millisecond) {
				p, err := admin.XPendingExt(testCtx(t), &redis.XPendingExtArgs{Stream: inbox, Group: keyspace.InboxGroup, Start: "-", End: "+", Count: 10}).Result()
				delivered = err == nil && len(p) == 1 && p[0].Consumer == "s1" && p[0].RetryCount == 1
			}
			reset = time.Now()
			proxy.Cut()
			proxy.DropReplies(false)
			if delivered {
				lost = id
			}
		}
		if lost == "" {
			t.Fatal("no attempt had its entry delivered to the blocked read while replies were dropped")
		}
		after, err := r.Send(testCtx(t), "s1", "work", "after")
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the entry whose reply was lost is handled", func() bool { return log.count(lost) == 1 })
		eventually(t, "the entry after it is handled", func() bool { return log.count(after) == 1 })
		if d := log.seen[lost][0]; d.Deliveries != 2 {
			t.Errorf("the recovered entry's delivery %+v; want its second delivery", d)
		}
		for _, err := range errs.all() {
			t.Errorf("a lost reply, healed by the next read, is no error: OnError(%v)", err)
		}
		t.Logf("%s: handled %s after the reset (the bound is 2 × RetryDelay = %s plus the handling of the entries ahead)",
			srv.Name, time.Since(reset).Round(time.Millisecond), 2*cfg.RetryDelay)
	})
}

// TestIntegrationSendsReachOnlyLiveSlaves: a send to a process that never
// registered, or whose registry entry is gone, is refused; an entry stored
// for a slave that left the registry before it read it is moved by the
// master's sweep to a live slave and handled there.
func TestIntegrationSendsReachOnlyLiveSlaves(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		register(t, c, "s1", "s2")
		live := &slaveList{}
		live.set("s1", "s2")
		cfg := fast()
		cfg.SweepInterval = 50 * time.Millisecond
		r := newRouter(t, c, newMaster(t, c, "m"), live, cfg)
		if _, err := r.Send(testCtx(t), "ghost", "work", 1); !errors.Is(err, durable.ErrNotRegistered) {
			t.Errorf("send to a process that never registered: %v; want ErrNotRegistered", err)
		}
		res, err := r.SendBatch(testCtx(t), []pubsub.Outgoing{{SlaveID: "ghost", Type: "work"}, {SlaveID: "s1", Type: "work"}})
		if err != nil || !errors.Is(res.Outcomes[0].Err, durable.ErrNotRegistered) || res.Outcomes[1].Err != nil {
			t.Errorf("batch: %+v, %v", res.Outcomes, err)
		}
		if n := c.Exists(testCtx(t), r.Inbox("ghost")).Val(); n != 0 {
			t.Error("a send to an unknown process created its inbox")
		}
		// s2 has not read its message yet when its entry expires.
		id, err := r.Send(testCtx(t), "s2", "work", "orphaned")
		if err != nil {
			t.Fatal(err)
		}
		unregister(t, c, "s2")
		live.set("s1")
		if _, err := r.Send(testCtx(t), "s2", "work", 2); !errors.Is(err, durable.ErrNotRegistered) {
			t.Errorf("send to a removed process: %v; want ErrNotRegistered", err)
		}
		log := &handledLog{}
		con, err := durable.NewConsumer(c, "s1", fast())
		if err != nil {
			t.Fatal(err)
		}
		con.HandleDefault(log.handler(0))
		if err := con.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = con.Close() })
		ev := &fakeEvents{}
		stop := r.Maintain(ev, nil) // no slave-removed event comes: the periodic sweep finds it
		defer stop()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ev.acquired(ctx, 0)
		eventually(t, "the removed slave's message handled by s1", func() bool { return log.count(id) == 1 })
		eventually(t, "the removed slave's inbox deleted", func() bool { return c.Exists(testCtx(t), r.Inbox("s2")).Val() == 0 })
	})
}

// TestIntegrationPoisonMessageIsDeadLettered: a message whose handler
// always fails is delivered MaxDeliveries times, with a growing wait, then
// moves to the dead-letter stream with its last error; the operator's
// retry sends it again, and a handler that now succeeds handles it.
func TestIntegrationPoisonMessageIsDeadLettered(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		register(t, c, "s1")
		r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
		cfg := fast()
		cfg.MaxDeliveries = 4
		var dead []durable.DeadLetter
		var mu sync.Mutex
		cfg.OnDead = func(d durable.DeadLetter) { mu.Lock(); dead = append(dead, d); mu.Unlock() }
		con, err := durable.NewConsumer(c, "s1", cfg)
		if err != nil {
			t.Fatal(err)
		}
		var attempts []time.Time
		fixed := atomic.Bool{}
		log := &handledLog{}
		ok := log.handler(0)
		_ = con.Handle("poison", func(ctx context.Context, d durable.Delivery) error {
			if fixed.Load() {
				return ok(ctx, d)
			}
			mu.Lock()
			attempts = append(attempts, time.Now())
			mu.Unlock()
			return fmt.Errorf("attempt %d: cannot parse", d.Deliveries)
		})
		if err := con.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = con.Close() })
		id, err := r.Send(testCtx(t), "s1", "poison", "x")
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "dead-lettered", func() bool { return con.Dead() == 1 })
		mu.Lock()
		if len(attempts) != 4 || len(dead) != 1 || dead[0].Message.ID != id || dead[0].Deliveries != 4 || !strings.Contains(dead[0].Error, "attempt 4") {
			t.Fatalf("%d attempts, dead letters %+v", len(attempts), dead)
		}
		mu.Unlock()
		if n := c.XLen(testCtx(t), r.Inbox("s1")).Val(); n != 0 {
			t.Errorf("the dead letter is still in the inbox (%d entries)", n)
		}
		dl, err := durable.NewDeadLetters(c, durable.Config{})
		if err != nil {
			t.Fatal(err)
		}
		list, err := dl.List(testCtx(t), "", 0)
		if err != nil || len(list) != 1 || list[0].ID != dead[0].ID || list[0].Inbox != "s1" || list[0].Process != "s1" || list[0].Message.Type != "poison" {
			t.Fatalf("list: %+v, %v", list, err)
		}
		fixed.Store(true)
		if _, err := dl.Retry(testCtx(t), list[0].ID, "ghost"); !errors.Is(err, durable.ErrNotRegistered) {
			t.Errorf("retry to an unknown process: %v", err)
		}
		if _, err := dl.Retry(testCtx(t), list[0].ID, ""); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the retried message handled", func() bool { return log.count(id) == 1 })
		if d := log.seen[id][0]; d.Deliveries != 1 {
			t.Errorf("the retry's delivery %+v; want its deliveries counted from 1 again", d)
		}
		if n, err := dl.Count(testCtx(t)); err != nil || n != 0 {
			t.Errorf("%d dead letters left, %v", n, err)
		}
	})
}

// lostClaims is a client hook that lets Redis run the next n XCLAIMs and
// then loses their replies, as a connection cut mid-reply does: Redis has
// counted a delivery of every entry claimed, and the Consumer sees an
// error.
type lostClaims struct{ left atomic.Int32 }

func (h *lostClaims) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostClaims) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lostClaims) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && cmd.Name() == "xclaim" && h.left.Add(-1) >= 0 {
			err = errors.New("injected: the XCLAIM reply was lost")
			cmd.SetErr(err)
		}
		return err
	}
}

// TestIntegrationLostClaimRepliesDoNotCount: an entry whose handler failed
// once is claimed again by the pending passes, and the replies of four
// claims in a row are lost (Redis counts each as a delivery). The entry is
// handled at its second delivery that reached the Consumer, not buried as
// over MaxDeliveries (3): no handler saw the lost ones. Before, a
// connection that kept cutting replies sent healthy entries to the dead
// letters.
func TestIntegrationLostClaimRepliesDoNotCount(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		admin := inst.Client(t)
		register(t, admin, "s1")
		r := newRouter(t, admin, newMaster(t, admin, "m"), nil, fast())
		c := redis.NewClient(clientOptions(inst.Addr))
		t.Cleanup(func() { _ = c.Close() })
		hook := &lostClaims{}
		c.AddHook(hook)
		cfg := fast()
		cfg.MaxDeliveries = 3
		con, err := durable.NewConsumer(c, "s1", cfg)
		if err != nil {
			t.Fatal(err)
		}
		log := &handledLog{}
		ok := log.handler(0)
		var failedOnce atomic.Bool
		con.HandleDefault(func(ctx context.Context, d durable.Delivery) error {
			if !failedOnce.Swap(true) {
				hook.left.Store(4) // the claims that follow lose their replies
				return errors.New("injected: first attempt fails")
			}
			return ok(ctx, d)
		})
		if err := con.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = con.Close() })
		id, err := r.Send(testCtx(t), "s1", "work", "x")
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "handled, or dead-lettered", func() bool { return log.count(id) == 1 || con.Dead() > 0 })
		if con.Dead() != 0 || hook.left.Load() > 0 {
			t.Fatalf("dead letters %d, lost claims still to come %d; want the entry handled after 4 lost claims", con.Dead(), hook.left.Load())
		}
		if d := log.seen[id][0]; d.Deliveries != 2 {
			t.Errorf("handled at delivery %d; want 2 (the lost claims not counted)", d.Deliveries)
		}
	})
}
