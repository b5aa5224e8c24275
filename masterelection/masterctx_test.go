package masterelection

import (
	"context"
	"testing"
	"time"
)

// TestMasterCtxEndsWithIsMaster: every ctx handed out for a mastership (the
// OnMasterAcquired ctx, a RunIfMaster fn ctx) answers Err() != nil the
// instant IsMaster turns false, with the election loop blocked (here on
// trackMu, as behind a slave event stuck in a Redis call), and its Done
// closes without the loop, as does the Done of a ctx derived from it.
func TestMasterCtxEndsWithIsMaster(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	handlerCtx := make(chan context.Context, 1)
	a.OnMasterAcquired(func(ctx context.Context, term int64) {
		handlerCtx <- ctx
		<-ctx.Done()
	})
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	hctx := <-handlerCtx
	derived, cancelDerived := context.WithCancel(hctx)
	defer cancelDerived()
	fnCtx := make(chan context.Context, 1)
	fnDone := make(chan error, 1)
	go func() {
		_, err := a.RunIfMaster(context.Background(), func(ctx context.Context, term int64) error {
			fnCtx <- ctx
			<-ctx.Done()
			return nil
		})
		fnDone <- err
	}()
	fctx := <-fnCtx
	for name, ctx := range map[string]context.Context{"handler": hctx, "RunIfMaster": fctx, "derived": derived} {
		if ctx.Err() != nil {
			t.Fatalf("%s ctx done while master: %v", name, ctx.Err())
		}
	}

	w.mr.SetError("LOADING simulated outage") // every renewal now fails
	a.clk.Advance(a.cfg.HeartbeatInterval)
	waitFor(t, "a failed renewal reported", func() bool { return len(a.rec.errors()) > 0 })
	a.members.trackMu.Lock() // the loop cannot finish endMastership
	defer a.members.trackMu.Unlock()
	a.clk.Advance(a.cfg.LockTTL - a.cfg.StepDownMargin - a.cfg.HeartbeatInterval)
	if a.IsMaster() {
		t.Fatal("still master at the self-fencing deadline")
	}
	// At once: no goroutine of herd has to run for these answers.
	for name, ctx := range map[string]context.Context{"handler": hctx, "RunIfMaster": fctx} {
		if ctx.Err() == nil {
			t.Errorf("%s ctx: Err() nil when IsMaster is false", name)
		}
		select {
		case <-ctx.Done():
		default:
			t.Errorf("%s ctx: Done() not closed when IsMaster is false", name)
		}
	}
	waitFor(t, "the derived ctx done", func() bool { return derived.Err() != nil })
	if err := <-fnDone; err != nil {
		t.Fatalf("RunIfMaster: %v", err)
	}
}

// TestMasterCtxDoneByTimer: Done closes at the deadline on its own, with
// nobody calling Err or Done and the loop blocked.
func TestMasterCtxDoneByTimer(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	l := a.core.mastership.Load()
	done := l.ctx.done // the channel itself: reading it does not poll
	w.mr.SetError("LOADING simulated outage")
	a.members.trackMu.Lock()
	defer a.members.trackMu.Unlock()
	a.clk.Advance(a.cfg.HeartbeatInterval)
	a.clk.Advance(a.cfg.LockTTL - a.cfg.StepDownMargin - a.cfg.HeartbeatInterval)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed by the deadline timer")
	}
}
