package assign_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/testsync"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
)

// live is one span during which a Worker's ctx for an item was seen live:
// first is taken before the first observation that saw it live, last after
// the last one, so a true overlap cannot hide between two probes.
type live struct {
	worker      string
	first, last time.Time
}

// spans records, per item, the spans of every Worker's ctx, probing each
// ctx every millisecond as a handler that acts on the item would.
type spans struct {
	mu    sync.Mutex
	items map[string][]live
	wg    sync.WaitGroup
}

func newSpans() *spans { return &spans{items: map[string][]live{}} }

func (s *spans) handler(worker string) func(context.Context, string) {
	return func(ctx context.Context, item string) {
		s.wg.Add(1)
		defer s.wg.Done()
		var l live
		l.worker = worker
		for {
			before := time.Now()
			if ctx.Err() != nil {
				break
			}
			after := time.Now()
			if l.first.IsZero() {
				l.first = before
			}
			l.last = after
			time.Sleep(time.Millisecond)
		}
		if l.first.IsZero() {
			return
		}
		s.mu.Lock()
		s.items[item] = append(s.items[item], l)
		s.mu.Unlock()
	}
}

// overlaps returns every pair of spans of one item, of two Workers, that
// intersect.
func (s *spans) overlaps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for item, ls := range s.items {
		sort.Slice(ls, func(i, j int) bool { return ls[i].first.Before(ls[j].first) })
		for i := range ls {
			for j := i + 1; j < len(ls); j++ {
				if ls[i].worker != ls[j].worker && !ls[i].last.Before(ls[j].first) {
					out = append(out, fmt.Sprintf("item %s: %s live until %v after %s began", item, ls[i].worker, ls[i].last.Sub(ls[j].first), ls[j].worker))
				}
			}
		}
	}
	return out
}

// cutter is a go-redis hook that fails every command while cut is set: a
// process cut off from Redis.
type cutter struct{ cut atomic.Bool }

var errCut = errors.New("test: cut off from redis")

func (c *cutter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cutter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.cut.Load() {
			return errCut
		}
		return next(ctx, cmd)
	}
}
func (c *cutter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.cut.Load() {
			return errCut
		}
		return next(ctx, cmds)
	}
}

// fixture is a Redis server, a lock held by "m" and a plan writer.
type fixture struct {
	inst  *redistest.Instance
	admin *redis.Client
	k     keyspace.Keys
	a     keyspace.AssignKeys
	term  int64
	cfg   assign.Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	inst := redistest.Start(t, redistest.Default(t))
	f := &fixture{inst: inst, admin: inst.Client(t), k: keyspace.NewKeys("svc", false),
		cfg: assign.Config{LeaseTTL: time.Second, RenewInterval: 100 * time.Millisecond, Margin: 100 * time.Millisecond}}
	f.a = f.k.Assign(assign.DefaultSet)
	acq, err := rdb.Acquire(context.Background(), f.admin, f.k, "m", time.Hour, nil, 0)
	if err != nil || acq.Term == 0 {
		t.Fatalf("acquire = %+v, %v", acq, err)
	}
	f.term = acq.Term
	return f
}

// plan gives every item to owner.
func (f *fixture) plan(t *testing.T, owner string, items []string) {
	t.Helper()
	before, err := f.admin.HGetAll(context.Background(), f.a.Plan).Result()
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{}
	for _, item := range items {
		owners[item] = owner
	}
	if _, err := rdb.AssignPlan(context.Background(), f.admin, f.k, f.a, "m", f.term, before, owners); err != nil {
		t.Fatal(err)
	}
}

// election returns the election, never started, of node id on the
// fixture's lock: a Worker takes its keys, node id and LockTTL.
func (f *fixture) election(t *testing.T, c *redis.Client, id string) *masterelection.MasterElection {
	t.Helper()
	e, err := masterelection.New(c, masterelection.Config{LockName: f.k.LockName, NodeID: id})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (f *fixture) worker(t *testing.T, id string, s *spans, hooks ...redis.Hook) *assign.Worker {
	t.Helper()
	c := f.inst.Client(t)
	for _, h := range hooks {
		c.AddHook(h)
	}
	w, err := assign.NewWorker(c, f.election(t, c, id), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.OnAssigned(s.handler(id)); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("item-%02d", i)
	}
	return out
}

// waitOwned waits until w owns exactly want.
func waitOwned(t *testing.T, w *assign.Worker, want []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !slices.Equal(w.Owned(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("worker owns %v after %v, want %v", w.Owned(), within, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRevokedItemsMoveWithoutOverlap: a plan that moves every item from a
// to b ends each of a's ctxs before b's begins, and b gets them all.
func TestRevokedItemsMoveWithoutOverlap(t *testing.T) {
	f := newFixture(t)
	s := newSpans()
	items := names(20)
	f.plan(t, "a", items)
	wa := f.worker(t, "a", s)
	wb := f.worker(t, "b", s)
	waitOwned(t, wa, items, 5*time.Second)
	f.plan(t, "b", items)
	waitOwned(t, wb, items, 5*time.Second)
	waitOwned(t, wa, nil, 5*time.Second)
	if wa.Claimed() != 20 || wa.Revoked() != 20 || wa.Expired() != 0 || wb.Claimed() != 20 {
		t.Errorf("a claimed %d, revoked %d, expired %d; b claimed %d; want 20, 20, 0; 20", wa.Claimed(), wa.Revoked(), wa.Expired(), wb.Claimed())
	}
	if err := wa.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := wb.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.wg.Wait()
	if o := s.overlaps(); len(o) > 0 {
		t.Fatalf("overlaps:\n%v", o)
	}
	for _, item := range items {
		if n := len(s.items[item]); n != 2 {
			t.Errorf("item %s had %d owners' spans, want 2 (a, then b)", item, n)
		}
	}
	// Stop gave everything up.
	if n, _ := f.admin.HLen(context.Background(), f.a.Own).Result(); n != 0 {
		t.Errorf("%d items still owned on redis after both workers stopped", n)
	}
}

// TestCutOffOwnerEndsBeforeTheNextOwnerStarts: a Worker cut off from Redis
// cannot renew; its ctxs end at its own deadline, and the next owner claims
// the items only once their ownership expired on Redis: never both at once.
func TestCutOffOwnerEndsBeforeTheNextOwnerStarts(t *testing.T) {
	f := newFixture(t)
	s := newSpans()
	items := names(10)
	f.plan(t, "a", items)
	cut := &cutter{}
	wa := f.worker(t, "a", s, cut)
	wb := f.worker(t, "b", s)
	waitOwned(t, wa, items, 5*time.Second)
	cut.cut.Store(true)
	f.plan(t, "b", items)
	waitOwned(t, wb, items, 5*time.Second)
	// a learns it lost them when it reaches Redis again.
	cut.cut.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for wa.Expired() != 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if wa.Expired() != 10 || wa.Revoked() != 0 {
		t.Errorf("cut-off worker: expired %d, revoked %d; want 10, 0", wa.Expired(), wa.Revoked())
	}
	if got := wa.Owned(); len(got) != 0 {
		t.Errorf("cut-off worker still owns %v", got)
	}
	_ = wb.Stop(context.Background())
	_ = wa.Stop(context.Background())
	s.wg.Wait()
	if o := s.overlaps(); len(o) > 0 {
		t.Fatalf("overlaps:\n%v", o)
	}
	for _, item := range items {
		ls := s.items[item]
		if len(ls) != 2 || ls[0].worker != "a" || ls[1].worker != "b" {
			t.Errorf("item %s spans %+v, want a then b", item, ls)
		}
	}
}

// TestWorkerLifecycle: Stop before Start and twice returns nil; Start and
// OnAssigned after Stop or a first Start return ErrStarted; bad config is
// refused naming the field.
func TestWorkerLifecycle(t *testing.T) {
	f := newFixture(t)
	w, err := assign.NewWorker(f.admin, f.election(t, f.admin, "a"), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); !errors.Is(err, assign.ErrStarted) {
		t.Errorf("Start after Stop = %v, want ErrStarted", err)
	}
	if err := w.OnAssigned(func(context.Context, string) {}); !errors.Is(err, assign.ErrStarted) {
		t.Errorf("OnAssigned after Stop = %v, want ErrStarted", err)
	}
	for _, tc := range []struct {
		cfg  assign.Config
		want string
	}{
		{assign.Config{LeaseTTL: time.Second, Margin: time.Second}, "Margin 1s must be at least 0 and below LeaseTTL 1s"},
		{assign.Config{LeaseTTL: time.Second, RenewInterval: 950 * time.Millisecond}, "RenewInterval 950ms must be above 0 and below LeaseTTL - Margin = 900ms"},
		{assign.Config{Set: "a b"}, "Set \"a b\" contains whitespace"},
		{assign.Config{Grace: 400 * 24 * time.Hour}, "Grace 9600h0m0s is above 8760h0m0s"},
	} {
		_, err := assign.NewWorker(f.admin, f.election(t, f.admin, "a"), tc.cfg)
		if !errors.Is(err, assign.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewWorker(%+v) = %v, want ErrInvalidConfig naming %q", tc.cfg, err, tc.want)
		}
	}
	var nilClient *redis.Client
	if _, err := assign.NewWorker(nilClient, f.election(t, f.admin, "a"), f.cfg); !errors.Is(err, assign.ErrInvalidConfig) {
		t.Errorf("NewWorker(typed nil client) = %v, want ErrInvalidConfig", err)
	}
}

// slowReply is a go-redis hook that holds the reply of the first delay
// calls for d: a process paused while its round trip was in flight.
type slowReply struct {
	d     time.Duration
	calls atomic.Int64
	delay int64
}

func (h *slowReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.calls.Add(1) <= h.delay {
			time.Sleep(h.d)
		}
		return err
	}
}
func (h *slowReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLateReplyTakesNothing: a renewal whose reply arrives after the
// deadline it grants starts no handler (its ctx would be done already);
// the next round trip claims the items.
func TestLateReplyTakesNothing(t *testing.T) {
	f := newFixture(t)
	items := names(3)
	f.plan(t, "a", items)
	c := f.inst.Client(t)
	c.AddHook(&slowReply{d: f.cfg.LeaseTTL, delay: 1})
	w, err := assign.NewWorker(c, f.election(t, c, "a"), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var deadAtStart atomic.Int64
	s := newSpans()
	work := s.handler("a")
	if err := w.OnAssigned(func(ctx context.Context, item string) {
		if ctx.Err() != nil {
			deadAtStart.Add(1)
		}
		work(ctx, item)
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "after its own deadline") {
		t.Errorf("Start with a late reply = %v, want the late renewal named", err)
	}
	waitOwned(t, w, items, 5*time.Second)
	_ = w.Stop(context.Background())
	s.wg.Wait()
	if n := deadAtStart.Load(); n != 0 {
		t.Errorf("%d handlers started with a ctx already done", n)
	}
}

// TestLeaseFollowsTheElection: with LeaseTTL left to its default, an item's
// ownership on Redis lasts the election's LockTTL / 3 (1s for a LockTTL of
// 3s), not a fixed 10s, so a dead slave's items are free before the master
// has removed it. Before, the lease was 10s whatever the LockTTL: a killed
// slave's items had no owner for up to 10s.
func TestLeaseFollowsTheElection(t *testing.T) {
	f := newFixture(t)
	f.plan(t, "a", []string{"item"})
	c := f.inst.Client(t)
	e, err := masterelection.New(c, masterelection.Config{LockName: f.k.LockName, NodeID: "a", LockTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := assign.NewWorker(c, e, assign.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	ctx := context.Background()
	own, err := f.admin.HGet(ctx, f.a.Own, "item").Result()
	if err != nil {
		t.Fatalf("the item is not owned after Start: %v", err)
	}
	now, err := f.admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var deadline int64
	var owner string
	if _, err := fmt.Sscanf(own, "%d %s", &deadline, &owner); err != nil || owner != "a" {
		t.Fatalf("ownership %q: %v", own, err)
	}
	if left := time.Duration(deadline-now.UnixMilli()) * time.Millisecond; left <= 0 || left > time.Second {
		t.Fatalf("the ownership lasts %v more, want at most LockTTL/3 = 1s", left)
	}
}

// TestPlannedMoveIsPushed: a plan that moves items reaches both Workers
// over their notice channels: the old owner ends the items' ctxs and gives
// them up, and the new owner claims them as soon as they are free, long
// before either Worker's timer (RenewInterval: a minute) would have synced;
// no item is ever live in both.
func TestPlannedMoveIsPushed(t *testing.T) {
	f := newFixture(t)
	f.cfg = assign.Config{LeaseTTL: 5 * time.Minute, RenewInterval: time.Minute, Margin: time.Second}
	items := names(20)
	f.plan(t, "a", items)
	s := newSpans()
	a := f.worker(t, "a", s)
	b := f.worker(t, "b", s)
	waitOwned(t, a, items, 10*time.Second) // Start's own round trip
	f.plan(t, "b", items[:15])
	waitOwned(t, b, items[:15], 30*time.Second)
	waitOwned(t, a, items[15:], 30*time.Second)
	f.plan(t, "a", items)
	waitOwned(t, a, items, 30*time.Second)
	waitOwned(t, b, nil, 30*time.Second)
	_ = a.Stop(context.Background())
	_ = b.Stop(context.Background())
	s.wg.Wait()
	if o := s.overlaps(); len(o) > 0 {
		t.Fatalf("overlaps:\n%v", o)
	}
	if a.Revoked() != 15 || b.Revoked() != 15 {
		t.Errorf("revoked %d by a and %d by b, want 15 each", a.Revoked(), b.Revoked())
	}
}

// TestWorkerWithoutNotices: a user whose ACL refuses the notice channel
// (no channels at all) still gets a Worker that starts, owns its items on
// its timer, reports the refusal to OnError, and stops.
func TestWorkerWithoutNotices(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.admin.Do(ctx, "ACL", "SETUSER", "nochan", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	opts := f.inst.Options()
	opts.Username, opts.Password = "nochan", "pw"
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	var refused atomic.Int64
	cfg := f.cfg
	cfg.OnError = func(err error) {
		if strings.Contains(err.Error(), "NOPERM") {
			refused.Add(1)
		}
	}
	w, err := assign.NewWorker(c, f.election(t, c, "a"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := newSpans()
	if err := w.OnAssigned(s.handler("a")); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- w.Start(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return with the notice channel refused")
	}
	items := names(3)
	f.plan(t, "a", items)
	waitOwned(t, w, items, 30*time.Second) // on its timer: no notice reaches it
	testsync.WaitFor(t, "the refusal reported", func() bool { return refused.Load() > 0 })
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	s.wg.Wait()
}

// TestItemCtxHasNoDeadline: an item's ctx reports no deadline (its
// Worker's own deadline moves with each renewal, and a ctx's Deadline must
// not), yet a ctx derived from it ends when the item is revoked.
func TestItemCtxHasNoDeadline(t *testing.T) {
	f := newFixture(t)
	f.plan(t, "a", []string{"x"})
	c := f.inst.Client(t)
	w, err := assign.NewWorker(c, f.election(t, c, "a"), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	if err := w.OnAssigned(func(ctx context.Context, _ string) { got <- ctx }); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	ctx := <-got
	if d, ok := ctx.Deadline(); ok {
		t.Fatalf("item ctx Deadline = %v, true; want none", d)
	}
	derived, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	f.plan(t, "b", []string{"x"})
	select {
	case <-derived.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a ctx derived from the item's did not end when the item moved")
	}
}

// TestTwinTakesNoItemOfTheOther: two processes under one node id (each its
// own election, so its own incarnation) never work an item at once: the
// second waits while the first renews, and takes the items only once the
// first gave them up; its handlers never overlap the first's.
func TestTwinTakesNoItemOfTheOther(t *testing.T) {
	f := newFixture(t)
	s := newSpans()
	items := names(12)
	f.plan(t, "a", items)
	first := f.worker(t, "a", s)
	waitOwned(t, first, items, 5*time.Second)

	c := f.inst.Client(t)
	twin, err := assign.NewWorker(c, f.election(t, c, "a"), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := twin.OnAssigned(s.handler("a (twin)")); err != nil {
		t.Fatal(err)
	}
	if err := twin.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = twin.Stop(context.Background()) })
	time.Sleep(5 * f.cfg.RenewInterval) // renewals of both
	if got := twin.Owned(); len(got) != 0 {
		t.Fatalf("the twin owns %v while the first process renews them", got)
	}
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, twin, items, 5*time.Second)
	if err := twin.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.wg.Wait()
	if o := s.overlaps(); len(o) > 0 {
		t.Fatalf("overlaps:\n%v", o)
	}
}

// TestNextOwnerStartsAfterTheHandlerReturned: a handler that goes on after
// its ctx ended (flushing its last state, say) holds the item until it
// returns: the next owner's handler starts after that.
func TestNextOwnerStartsAfterTheHandlerReturned(t *testing.T) {
	f := newFixture(t)
	f.plan(t, "a", []string{"x"})
	var returned, started atomic.Int64
	wa := f.worker(t, "a", newSpans())
	c := f.inst.Client(t)
	slow, err := assign.NewWorker(c, f.election(t, c, "slow"), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = slow.OnAssigned(func(ctx context.Context, item string) {
		<-ctx.Done()
		time.Sleep(300 * time.Millisecond) // the last write after the end
		returned.Store(time.Now().UnixNano())
	})
	if err := wa.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.plan(t, "slow", []string{"x"})
	if err := slow.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Stop(context.Background()) })
	waitOwned(t, slow, []string{"x"}, 5*time.Second)

	c2 := f.inst.Client(t)
	next, err := assign.NewWorker(c2, f.election(t, c2, "next"), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = next.OnAssigned(func(ctx context.Context, item string) {
		started.CompareAndSwap(0, time.Now().UnixNano())
		<-ctx.Done()
	})
	if err := next.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Stop(context.Background()) })
	f.plan(t, "next", []string{"x"})
	waitOwned(t, next, []string{"x"}, 5*time.Second)
	if r, s := returned.Load(), started.Load(); r == 0 || s < r {
		t.Fatalf("the next owner started %v before the last handler returned", time.Duration(r-s))
	}
}
