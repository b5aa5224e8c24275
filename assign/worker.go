package assign

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/keyspace"
)

// Worker is a slave's side of an item set: it owns the items the master's
// plan gives it, one at a time per item across the herd, and runs the
// OnAssigned handler for each with a ctx that ends when the item stops
// being its own. Its methods are safe for concurrent use.
type Worker struct {
	client redis.UniversalClient
	e      WorkerElection // its node id, incarnation and whether it stepped aside
	keys   keyspace.AssignKeys
	id     string
	cfg    Config

	mu       sync.Mutex
	fn       func(ctx context.Context, item string) // set before Start
	started  bool
	leases   map[string]*lease // guarded by mu: the items owned, by their ctx
	released []string          // guarded by mu: items whose ctx ended, to give up on Redis
	// ending holds the items whose ctx ended while their handler still
	// runs: given up on Redis when it returns (guarded by mu).
	ending map[string]*lease

	kick       chan struct{}
	stop       chan struct{}
	loopDone   chan struct{}
	listenDone chan struct{}
	handlers   sync.WaitGroup

	claimed, revoked, expired atomic.Uint64
}

// NewWorker returns the Worker of e's process (its node id, which the
// Planner plans for) for e's keys, its timings' defaults following e's
// LockTTL; e is the process's election (*masterelection.MasterElection).
// It does no I/O; e need not be started yet.
func NewWorker(client redis.UniversalClient, e WorkerElection, cfg Config) (*Worker, error) {
	if nilclient.Is(client) {
		return nil, fmt.Errorf("%w: the Redis client is nil", ErrInvalidConfig)
	}
	if nilclient.Is(e) {
		return nil, fmt.Errorf("%w: the election is nil", ErrInvalidConfig)
	}
	if err := cfg.validate(e.LockTTL()); err != nil {
		return nil, err
	}
	keys, id := e.Keys(), e.NodeID()
	cfg = cfg.withDefaults(e.LockTTL())
	return &Worker{
		client: client, e: e, keys: keys.Assign(cfg.Set), id: id, cfg: cfg,
		leases: map[string]*lease{}, ending: map[string]*lease{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), loopDone: make(chan struct{}), listenDone: make(chan struct{}),
	}, nil
}

// OnAssigned sets the handler run, in a goroutine of its own, each time
// this Worker comes to own an item. Its ctx ends when the item is no longer
// this Worker's: revoked by a new plan (the Worker gives the item up only
// once the handler returned, so the next owner starts after it, or once
// the ownership expired on Redis, at most LeaseTTL after the last
// renewal, if it never returns), the ownership expired
// because the Worker could not renew it (the ctx ends at the Worker's own
// deadline, Margin before the ownership on Redis can pass to another), or
// Stop. Check ctx.Err() right before acting on the item. The handler's
// return does not give the item up: it stays owned until the plan moves it.
// Set it before Start; it returns ErrStarted after.
func (w *Worker) OnAssigned(fn func(ctx context.Context, item string)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	w.fn = fn
	return nil
}

// Start claims the items the plan gives this Worker (one round trip) and
// starts the loop that renews them every RenewInterval, and the
// subscription to its notice channel (on the client's shared pub/sub
// connection) on which it hears of a move at once. It returns the first
// round trip's error; the Worker runs on either way, and Stop ends it.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrStarted
	}
	w.started = true
	w.mu.Unlock()
	err := w.sync(ctx)
	go w.loop()
	go w.listen()
	return err
}

// listen holds the subscription to the notice channel until Stop: the
// master's plan and the slaves that give up an item planned for this one
// publish there, and every notice (or subscription, after which a notice
// may have been missed) kicks the loop. A subscription that fails (an ACL
// without the channel, no connection) is reported and tried again every
// RenewInterval; the timer syncs meanwhile.
func (w *Worker) listen() {
	defer close(w.listenDone)
	base, cancel := w.untilStop()
	defer cancel()
	for {
		sub, err := w.subscribe(base)
		if err == nil {
			<-w.stop
			sub.Close()
			return
		}
		if w.stopped() {
			return
		}
		w.cfg.report(fmt.Errorf("assign: worker %s: subscribe to its notices (the timer syncs meanwhile): %w", w.id, err))
		if !w.sleep(w.cfg.RenewInterval) {
			return
		}
	}
}

// subscribe makes one attempt, bounded by RenewInterval, to subscribe to
// the notice channel.
func (w *Worker) subscribe(base context.Context) (*subhub.Subscription, error) {
	ctx, cancel := context.WithTimeout(base, w.cfg.RenewInterval)
	defer cancel()
	return subhub.Subscribe(ctx, w.client, subhub.Options{
		Channels:     []string{w.keys.PlanOf(w.id)},
		OnMessage:    func(context.Context, *redis.Message) { w.poke() },
		OnSubscribed: func(context.Context, string) { w.poke() },
		OnError:      func(err error) { w.cfg.report(fmt.Errorf("assign: worker %s: notices: %w", w.id, err)) },
		Inline:       true,
	})
}

// untilStop returns a ctx that ends at Stop, or when cancel is called.
func (w *Worker) untilStop() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// sleep waits d on the Worker's clock; false when Stop came first.
func (w *Worker) sleep(d time.Duration) bool {
	t := w.cfg.clock.NewTimer(d)
	select {
	case <-w.stop:
		t.Stop()
		return false
	case <-t.C():
		return true
	}
}

// stopped reports whether Stop was called.
func (w *Worker) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// poke asks the loop to sync now; a request already waiting covers it.
func (w *Worker) poke() { signal(w.kick) }

// loop renews every RenewInterval, and at once after a notice or after a
// handler's ctx ended, so that the item is given up without delay.
func (w *Worker) loop() {
	defer close(w.loopDone)
	t := w.cfg.clock.NewTimer(w.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C():
		case <-w.kick:
			drain(t)
		}
		if w.stopped() { // a kick and Stop at once: Stop wins
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.RenewInterval)
		w.cfg.report(w.sync(ctx))
		cancel()
		t.Reset(w.cfg.RenewInterval)
	}
}

// drain stops t and takes a fire it sent already, so that a Reset times
// afresh.
func drain(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
}

// sync is one round trip: give up the released items, claim and renew the
// planned ones, end the ctx of every item no longer owned.
func (w *Worker) sync(ctx context.Context) error {
	w.mu.Lock()
	released := w.released
	w.released = nil
	w.mu.Unlock()
	now := w.cfg.clock.Now
	sent := now()
	s, err := rdb.AssignSync(ctx, w.client, w.keys, w.id, w.e.Incarnation(), w.cfg.LeaseTTL, w.e.SteppedAside() != nil, released)
	if err != nil {
		// Not renewed: the leases end at their own deadlines. The released
		// items are given up with the next round trip.
		w.mu.Lock()
		w.released = append(released, w.released...)
		w.mu.Unlock()
		return fmt.Errorf("assign: worker %s: renew: %w", w.id, err)
	}
	deadline := sent.Add(w.cfg.LeaseTTL - w.cfg.Margin)
	if !now().Before(deadline) {
		// The reply came after the deadline it grants (the process was
		// paused mid-call): a handler started now would get a ctx already
		// done. Take nothing; the next round trip claims again.
		return fmt.Errorf("assign: worker %s: renewal answered %v after its own deadline; items not taken", w.id, now().Sub(deadline).Round(time.Millisecond))
	}
	w.mu.Lock()
	if w.stopped() {
		w.mu.Unlock()
		return nil // Stop gives everything up
	}
	owned, start := w.claim(s.Owned, deadline)
	ended := w.revoke(owned)
	for _, item := range start {
		w.run(w.leases[item], item)
	}
	w.mu.Unlock()
	if ended {
		w.poke()
	}
	return nil
}

// claim takes items, those the round trip says this Worker owns until
// deadline: a live lease moves to deadline, an item whose last handler
// still runs is taken again once that returned, and every other item gets
// a new lease. It returns the items owned and those whose handler is to
// start. w.mu is held.
func (w *Worker) claim(items []string, deadline time.Time) (map[string]bool, []string) {
	owned := make(map[string]bool, len(items))
	var start []string
	for _, item := range items {
		owned[item] = true
		if l := w.leases[item]; l != nil && l.extend(deadline) {
			continue
		}
		if w.ending[item] != nil {
			continue // its last handler still runs: taken again once it returned
		}
		w.leases[item] = newLease(w.cfg.clock, deadline)
		w.claimed.Add(1)
		start = append(start, item)
	}
	return owned, start
}

// revoke ends the lease of every item not in owned (revoked by the plan,
// or expired) and gives the item up: at the next round trip, or, while its
// handler runs, once that returned. It reports whether an item waits for
// the next round trip. w.mu is held.
func (w *Worker) revoke(owned map[string]bool) (ended bool) {
	for item, l := range w.leases {
		if owned[item] {
			continue
		}
		if errors.Is(l.Err(), context.DeadlineExceeded) {
			w.expired.Add(1)
		} else {
			w.revoked.Add(1)
		}
		l.end(context.Canceled)
		delete(w.leases, item)
		if l.running {
			w.ending[item] = l // given up when the handler returns
			continue
		}
		w.released = append(w.released, item)
		ended = true
	}
	return ended
}

// run starts the handler for item under l. w.mu is held.
func (w *Worker) run(l *lease, item string) {
	if w.fn == nil {
		return
	}
	fn := w.fn
	w.handlers.Add(1)
	l.running = true
	go func() {
		defer w.handlers.Done()
		defer w.returned(l, item)
		defer func() {
			if r := recover(); r != nil {
				w.cfg.report(fmt.Errorf("assign: OnAssigned handler for item %q panicked: %v\n%s", item, r, debug.Stack()))
			}
		}()
		fn(l, item)
	}()
}

// returned records that the handler of item under l returned: an item
// whose ctx ended meanwhile is given up on Redis now.
func (w *Worker) returned(l *lease, item string) {
	w.mu.Lock()
	l.running = false
	release := w.ending[item] == l
	if release {
		delete(w.ending, item)
		w.released = append(w.released, item)
	}
	w.mu.Unlock()
	if release {
		w.poke()
	}
}

// Set returns the name of the Worker's item set (Config.Set).
func (w *Worker) Set() string { return w.cfg.Set }

// Claimed returns how many times this Worker came to own an item (each
// started an OnAssigned handler).
func (w *Worker) Claimed() uint64 { return w.claimed.Load() }

// Revoked returns how many of its items this Worker gave up because the
// plan moved or removed them.
func (w *Worker) Revoked() uint64 { return w.revoked.Load() }

// Expired returns how many of its items this Worker lost because it could
// not renew them before its own deadline.
func (w *Worker) Expired() uint64 { return w.expired.Load() }

// Owned returns, sorted, the items this Worker owns now (their ctx live).
func (w *Worker) Owned() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for item, l := range w.leases {
		if l.Err() == nil {
			out = append(out, item)
		}
	}
	slices.Sort(out)
	return out
}

// Stop ends every item's ctx, waits for the handlers (as long as ctx
// allows), and gives every item up on Redis in one round trip, so their
// next owners start without waiting for the ownership to expire. It
// returns an error wrapping ErrHandlersRunning when ctx ended first (the
// items are given up all the same: their ctxs have ended). Stop is
// idempotent; a Worker cannot be started again.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if w.stopped() {
		w.mu.Unlock()
		<-w.loopDone
		return nil
	}
	close(w.stop)
	if !w.started {
		w.started = true // never to start
		close(w.loopDone)
		close(w.listenDone)
		w.mu.Unlock()
		return nil
	}
	for item, l := range w.leases {
		l.end(context.Canceled)
		delete(w.leases, item)
	}
	w.mu.Unlock()
	<-w.loopDone
	<-w.listenDone
	return errors.Join(w.awaitHandlers(ctx), w.giveUpAll(ctx))
}

// awaitHandlers waits for the handlers to return, as long as ctx allows;
// an error wrapping ErrHandlersRunning when ctx ended first.
func (w *Worker) awaitHandlers(ctx context.Context) error {
	done := make(chan struct{})
	go func() { w.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrHandlersRunning, ctx.Err())
	}
}

// giveUpAll gives every item up on Redis in one round trip, bounded by
// RenewInterval also when ctx has ended, so that the next owners start
// without waiting for the ownership to expire.
func (w *Worker) giveUpAll(ctx context.Context) error {
	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RenewInterval)
	defer cancel()
	if _, err := rdb.AssignSync(leaveCtx, w.client, w.keys, w.id, w.e.Incarnation(), w.cfg.LeaseTTL, true, nil); err != nil {
		return fmt.Errorf("assign: worker %s: give up items: %w", w.id, err)
	}
	return nil
}
