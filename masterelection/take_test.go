package masterelection

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
)

// afterTake is a go-redis hook that runs then after the call of Start's
// questions with its first attempt at the lock (rdb.AskTaking) was
// answered; then's result is the call's.
type afterTake func(ctx context.Context, cmd redis.Cmder, ran error) error

// DialHook implements redis.Hook.
func (afterTake) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (afterTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (then afterTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ran := next(ctx, cmd)
		if scriptOf(cmd) != rdb.TakeSHA || ran != nil && strings.HasPrefix(ran.Error(), "NOSCRIPT") {
			return ran
		}
		return then(ctx, cmd, ran)
	}
}

// TestStopRightAfterStartTookTheLock: a Stop that comes once Start's first
// round trip took the lock, before the election loop runs, releases that
// lock and removes the registration it carried: nobody waits LockTTL for
// a process that is gone.
func TestStopRightAfterStartTookTheLock(t *testing.T) {
	w := newWorld(t)
	var a *peer
	stopped := make(chan error, 1)
	a = w.nodeWith(testConfig("a"), afterTake(func(ctx context.Context, cmd redis.Cmder, ran error) error {
		go func() { stopped <- a.Stop(context.Background()) }()
		<-ctx.Done() // Stop ends what Start waits for, this call's ctx among them
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("Start's call ended by %v, want Stop's cancellation", ctx.Err())
		}
		return ran
	}))
	if err := a.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start = %v, want ErrStopped", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if holder, _ := w.mr.Get(a.keys.Master); holder != "" {
		t.Errorf("the lock is held by %q after Stop, want it released", holder)
	}
	if v := w.mr.HGet(a.keys.Processes, "a"); v != "" {
		t.Errorf("a's entry %s outlived Stop", v)
	}
}

// TestCandidacyChangeRightAfterStartTookTheLock: a process that stops
// being a candidate once Start's first round trip took the lock, before
// the election loop runs, is master of that lock and hands it over; it
// never takes its own lock for a twin's.
func TestCandidacyChangeRightAfterStartTookTheLock(t *testing.T) {
	w := newWorld(t)
	var a *peer
	a = w.nodeWith(testConfig("a"), afterTake(func(ctx context.Context, cmd redis.Cmder, ran error) error {
		a.SetCandidate(false)
		return ran
	}))
	w.start(a)
	a.rec.waitPrefix(t, "started", "acquired", "completed:master", "lost")
	waitFor(t, "the lock released", func() bool { holder, _ := w.mr.Get(a.keys.Master); return holder == "" })
	for _, err := range a.rec.errors() {
		if errors.Is(err, ErrDuplicateNodeID) {
			t.Errorf("its own lock was taken for a twin's: %v", err)
		}
	}
	if a.IsMaster() {
		t.Error("a non-candidate is master")
	}
}

// TestStartFailsAfterALostTake: when the reply of Start's first round trip,
// which took the lock and registered the process as master, is lost and
// Start then fails (its ctx ended), the registration is removed; the lock,
// whose term the process never learnt, is left to expire.
func TestStartFailsAfterALostTake(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := w.nodeWith(testConfig("a"), afterTake(func(_ context.Context, cmd redis.Cmder, ran error) error {
		if ran != nil {
			return ran
		}
		if v := w.mr.HGet("test:processes", "a"); v == "" {
			t.Error("the call did not register a: the test tests nothing")
		}
		cancel()
		err := errors.New("injected: connection reset by peer")
		cmd.SetErr(err)
		return err
	}))
	if err := a.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v, want an error wrapping context.Canceled", err)
	}
	if v := w.mr.HGet(a.keys.Processes, "a"); v != "" {
		t.Errorf("a's entry %s outlived its failed Start", v)
	}
	if holder, _ := w.mr.Get(a.keys.Master); holder != "a" {
		t.Errorf("the lock is held by %q, want a's left to expire (its term unknown)", holder)
	}
}

// TestFirstRenewal: a mastership renews first HeartbeatInterval after its
// acquire was sent, as every later renewal comes HeartbeatInterval after
// the last one's send; at once when that has passed, as when Start's other
// work ran between the acquire and the mastership's start.
func TestFirstRenewal(t *testing.T) {
	cfg := Config{LockTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second, StepDownMargin: 3 * time.Second}
	for _, tt := range []struct{ remaining, want time.Duration }{
		{27 * time.Second, 10 * time.Second}, // acquired this instant
		{26 * time.Second, 9 * time.Second},  // a second after the send
		{20 * time.Second, 3 * time.Second},
		{17 * time.Second, 0},
		{5 * time.Second, 0},
		{-time.Second, 0},
		{40 * time.Second, 10 * time.Second}, // never later than HeartbeatInterval
	} {
		if got := firstRenewal(cfg, tt.remaining); got != tt.want {
			t.Errorf("firstRenewal(remaining %v) = %v, want %v", tt.remaining, got, tt.want)
		}
	}
}

// TestTakeAnsweredAfterItsDeadline: when Start's first round trip took the
// lock but its answer came (or Start's other work ended) after the
// self-fencing deadline that the send set, that mastership is never
// begun: the process releases the lock it holds under that term and is
// elected again under a new one.
func TestTakeAnsweredAfterItsDeadline(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("a")
	var a *peer
	var took atomic.Value // the term key when the take was answered (the hook's goroutine)
	a = w.nodeWith(cfg, afterTake(func(_ context.Context, cmd redis.Cmder, ran error) error {
		term, _ := w.mr.Get(a.keys.Term)
		took.Store(term)
		a.clk.Advance(cfg.LockTTL) // the answer comes late, on this process's clock
		return ran
	}))
	started := make(chan error, 1)
	go func() { started <- a.Start(context.Background()) }()
	w.until(func() bool { return len(started) > 0 }, 2*cfg.LockTTL, 50*time.Millisecond, "a started", a)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	w.until(a.IsMaster, 2*cfg.LockTTL, 50*time.Millisecond, "a master", a)
	// The event runner delivers master-acquired on its own goroutine: read
	// the recorded terms under the recorder's lock, once there is one.
	first := func() (int64, bool) {
		a.rec.mu.Lock()
		defer a.rec.mu.Unlock()
		if len(a.rec.terms) == 0 {
			return 0, false
		}
		return a.rec.terms[0], true
	}
	w.until(func() bool { _, ok := first(); return ok }, 2*cfg.LockTTL, 50*time.Millisecond, "master-acquired recorded", a)
	term, _ := first()
	late, _ := took.Load().(string)
	if late == "" {
		t.Fatal("the hook never saw the take answered")
	}
	if strconv.FormatInt(term, 10) == late {
		t.Errorf("master-acquired of term %s, the late take's, whose deadline had passed", late)
	}
}
