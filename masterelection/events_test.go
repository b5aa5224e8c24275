package masterelection

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPanickingHandlerIsReported(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	a.OnMasterAcquired(func(context.Context, int64) { panic("boom") })
	var completed atomic.Bool
	a.OnElectionCompleted(func(bool) { completed.Store(true) })
	w.start(a)
	waitFor(t, "panic reported", func() bool {
		for _, err := range a.rec.errors() {
			if errors.Is(err, ErrHandlerPanic) && strings.Contains(err.Error(), "boom") {
				return true
			}
		}
		return false
	})
	waitFor(t, "other handlers still run", completed.Load)
	if !a.IsMaster() {
		t.Fatalf("a handler panic cost the mastership")
	}
}

func TestBlockedHandlerDoesNotDelayRenewals(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	release := make(chan struct{})
	defer close(release)
	a.OnMasterAcquired(func(context.Context, int64) { <-release })
	a.OnElectionCompleted(func(bool) { <-release })
	a.OnError(func(error) { <-release })
	w.start(a)
	w.start(b)
	// Several lock lifetimes pass while every handler of a is stuck.
	w.advance(4*a.cfg.LockTTL, 100*time.Millisecond, a, b)
	if !a.IsMaster() || b.IsMaster() {
		t.Fatalf("a master %v, b master %v: a blocked handler cost the lock", a.IsMaster(), b.IsMaster())
	}
}

func TestStopWaitsForMasterHandlersThenReleases(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	var (
		handlerDone    atomic.Bool
		lockAtCtxEnd   atomic.Bool
		ctxErrOnReturn atomic.Value
	)
	a.OnMasterAcquired(func(ctx context.Context, term int64) {
		<-ctx.Done()
		lockAtCtxEnd.Store(w.mr.Exists(a.Keys().Master))
		time.Sleep(20 * time.Millisecond) // cleanup work that Stop must wait for
		ctxErrOnReturn.Store(ctx.Err())
		handlerDone.Store(true)
	})
	w.start(a)
	w.start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !handlerDone.Load() {
		t.Fatal("Stop returned before the OnMasterAcquired handler")
	}
	if !lockAtCtxEnd.Load() {
		t.Fatal("lock released before the handler's ctx was cancelled and it returned")
	}
	if err, _ := ctxErrOnReturn.Load().(error); !errors.Is(err, context.Canceled) {
		t.Fatalf("handler ctx error %v, want canceled", err)
	}
	if a.IsMaster() {
		t.Fatal("still master after Stop")
	}
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
	waitFor(t, "b takes over", b.IsMaster)
}

func TestMasterCtxCancelledOnLoss(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	ended := make(chan int64, 1)
	a.OnMasterAcquired(func(ctx context.Context, term int64) {
		<-ctx.Done()
		ended <- term
	})
	w.start(a)
	term := a.Term()
	w.mr.Del(a.Keys().Master)
	w.mr.Set(a.Keys().Master, "other")
	w.mr.SetTTL(a.Keys().Master, time.Minute)
	w.until(func() bool { return !a.IsMaster() }, 3*time.Second, 100*time.Millisecond, "step down", a)
	select {
	case got := <-ended:
		if got != term {
			t.Fatalf("ctx of term %d ended, want %d", got, term)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler ctx not cancelled when the mastership ended")
	}
}

func TestUnsubscribeStopsDelivery(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	var calls atomic.Int32
	unsubscribe := a.OnMasterLost(func() { calls.Add(1) })
	unsubscribe()
	unsubscribe() // twice is fine
	w.start(a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
	if n := calls.Load(); n != 0 {
		t.Fatalf("unsubscribed handler called %d times", n)
	}
}

func TestStopBeforeStartAndLifecycleErrors(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	if _, err := a.WaitForElectionComplete(context.Background()); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("wait before start = %v", err)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("start after stop = %v", err)
	}
	if _, err := a.WaitForElectionComplete(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("wait after stop = %v", err)
	}
	b := w.node(testConfig("b"))
	w.start(b)
	if err := b.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Fatalf("second start = %v", err)
	}
}

func TestEveryLostFollowsAcquired(t *testing.T) {
	// Three nodes, repeated graceful handovers: per node, acquired and lost
	// alternate, and each acquisition completes its election.
	w := newWorld(t)
	nodes := []*node{w.node(testConfig("a")), w.node(testConfig("b")), w.node(testConfig("c"))}
	for _, n := range nodes {
		w.start(n)
	}
	for round := 0; round < 2; round++ {
		var master *node
		waitFor(t, "a master", func() bool {
			for _, n := range nodes {
				if n.IsMaster() {
					master = n
					return true
				}
			}
			return false
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := master.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		var rest []*node
		for _, n := range nodes {
			if n != master {
				rest = append(rest, n)
			}
		}
		nodes = rest
	}
	waitFor(t, "last master", nodes[0].IsMaster)
	for _, n := range []*node{nodes[0]} {
		evs := n.rec.roleEvents()
		holding := false
		for i, e := range evs {
			switch e {
			case "acquired":
				if holding || i+1 >= len(evs) || evs[i+1] != "completed:master" {
					t.Fatalf("%s: events %v", n.NodeID(), evs)
				}
				holding = true
			case "lost":
				if !holding {
					t.Fatalf("%s: lost without acquired: %v", n.NodeID(), evs)
				}
				holding = false
			}
		}
	}
}

func TestMasterIsFencedBeforeItsReleaseIsAnnounced(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.start(a)
	c := w.client()
	ps := c.Subscribe(context.Background(), a.Keys().Events)
	defer ps.Close()
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped <- a.Stop(ctx)
	}()
	for {
		msg, err := ps.ReceiveMessage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(msg.Payload, `"released"`) {
			// Any slave woken by this notice may be master a round trip
			// from now: a must already have stopped calling itself master.
			if a.IsMaster() {
				t.Fatal("IsMaster still true when the release notice arrived")
			}
			break
		}
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
