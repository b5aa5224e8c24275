package masterelection

import (
	"context"
	"errors"
	"fmt"
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
	nodes := []*peer{w.node(testConfig("a")), w.node(testConfig("b")), w.node(testConfig("c"))}
	for _, n := range nodes {
		w.start(n)
	}
	for round := 0; round < 2; round++ {
		var master *peer
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
		var rest []*peer
		for _, n := range nodes {
			if n != master {
				rest = append(rest, n)
			}
		}
		nodes = rest
	}
	// IsMaster turns true before the election-completed that follows
	// master-acquired is emitted: wait for that event too.
	waitFor(t, "last master, its election completed", func() bool {
		evs := nodes[0].rec.roleEvents()
		return nodes[0].IsMaster() && len(evs) > 0 && evs[len(evs)-1] == "completed:master"
	})
	for _, n := range []*peer{nodes[0]} {
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

// The tests below drive the bus alone, without an election.

func newTestBus(t *testing.T) *bus {
	t.Helper()
	b := newBus(func(topic string, v any, _ []byte) { t.Errorf("%s handler panicked: %v", topic, v) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.close(ctx); err != nil {
			t.Error(err)
		}
	})
	return b
}

func TestBusAllTopicsInEmissionOrder(t *testing.T) {
	b := newTestBus(t)
	got := make(chan string, 100)
	b.subscribe(topicAll, func(p payload) { got <- p.topic })
	var lost []string
	b.subscribe(topicMasterLost, func(p payload) { lost = append(lost, p.topic) })
	want := []string{topicElectionStarted, topicMasterAcquired, topicElectionCompleted, topicSlaveRegistered,
		topicError, topicSlaveRemoved, topicMasterLost, topicElectionStarted, topicElectionCompleted}
	for _, topic := range want {
		p := payload{}
		if topic == topicError {
			p.err = errors.New("x")
		}
		b.emit(topic, p)
	}
	for i, w := range want {
		select {
		case g := <-got:
			if g != w {
				t.Fatalf("event %d: topic %q, want %q", i, g, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d (%s) not delivered", i, w)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(lost) != 1 || lost[0] != topicMasterLost {
		t.Fatalf("master-lost subscriber got %v", lost)
	}
}

func TestBusCountsMasterAcquiredHandlers(t *testing.T) {
	b := newTestBus(t)
	release := make(chan struct{})
	var ran atomic.Int32
	for range 2 {
		b.subscribe(topicMasterAcquired, func(payload) { <-release; ran.Add(1) })
	}
	b.subscribe(topicAll, func(payload) { <-release; ran.Add(1) })
	b.subscribe(topicMasterLost, func(payload) { t.Error("master-lost handler got master-acquired") })
	l := &mastership{term: 7}
	b.emit(topicMasterAcquired, payload{term: 7, mastership: l})
	waited := make(chan struct{})
	go func() { l.handlers.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("the handlers' count reached zero while all three were blocked")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the handlers' count did not reach zero after they returned")
	}
	if n := ran.Load(); n != 3 {
		t.Fatalf("%d handlers ran, want 3", n)
	}
}

func TestBusDropsOnlyErrorsOfASlowSubscriber(t *testing.T) {
	b := newTestBus(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var errs, lost atomic.Int32
	b.subscribe(topicAll, func(p payload) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		switch p.topic {
		case topicError:
			errs.Add(1)
		case topicMasterLost:
			lost.Add(1)
		}
	})
	var fast atomic.Int32
	b.subscribe(topicError, func(payload) { fast.Add(1) })
	b.emit(topicElectionStarted, payload{})
	<-entered // the runner holds that one; everything below waits in its queue
	const extra = 5
	for range maxPendingErrors + extra {
		b.emit(topicError, payload{err: errors.New("x")})
		b.emit(topicMasterLost, payload{})
	}
	if n := b.droppedErrors(); n != extra {
		t.Fatalf("%d error events dropped, want %d", n, extra)
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := errs.Load(); n != maxPendingErrors {
		t.Fatalf("slow subscriber got %d error events, want %d", n, maxPendingErrors)
	}
	if n := lost.Load(); n != maxPendingErrors+extra {
		t.Fatalf("slow subscriber got %d master-lost events, want %d: a role event was dropped", n, maxPendingErrors+extra)
	}
	if n := fast.Load(); n < maxPendingErrors || n > maxPendingErrors+extra {
		t.Fatalf("the other error subscriber got %d events", n)
	}
}

func TestBusUnsubscribeDropsQueuedAndCountsThemDone(t *testing.T) {
	b := newTestBus(t)
	release := make(chan struct{})
	entered := make(chan int64, 2)
	unsubscribe := b.subscribe(topicMasterAcquired, func(p payload) { entered <- p.term; <-release })
	l1, l2 := &mastership{term: 1}, &mastership{term: 2}
	b.emit(topicMasterAcquired, payload{term: 1, mastership: l1})
	if term := <-entered; term != 1 {
		t.Fatalf("handler got term %d first", term)
	}
	b.emit(topicMasterAcquired, payload{term: 2, mastership: l2}) // queued behind the blocked call
	unsubscribe()
	b.emit(topicMasterAcquired, payload{term: 3, mastership: l2}) // after unsubscribe: not delivered, not counted
	close(release)
	for _, l := range []*mastership{l1, l2} {
		waited := make(chan struct{})
		go func() { l.handlers.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			t.Fatalf("term %d: handler count not back to zero after unsubscribe", l.term)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case term := <-entered:
		t.Fatalf("handler got term %d after unsubscribe", term)
	default:
	}
}

func TestBusCloseRunsQueuedAndIsBoundedByCtx(t *testing.T) {
	b := newBus(func(string, any, []byte) {})
	release := make(chan struct{})
	var ran atomic.Int32
	b.subscribe(topicSlaveRegistered, func(payload) { <-release; ran.Add(1) })
	for range 3 {
		b.emit(topicSlaveRegistered, payload{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	err := b.close(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with a blocked handler = %v, want a deadline error", err)
	}
	b.subscribe(topicSlaveRegistered, func(payload) { t.Error("subscribed after close") })
	l := &mastership{}
	b.emit(topicSlaveRegistered, payload{mastership: l}) // after close: reaches no handler, counted off
	l.handlers.Wait()
	close(release)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 3 {
		t.Fatalf("%d queued events ran before close returned, want 3", n)
	}
}

func TestBusRecoversPanicsAndCallsObserversFirst(t *testing.T) {
	panics := make(chan string, 1)
	b := newBus(func(topic string, v any, _ []byte) { panics <- fmt.Sprint(topic, ": ", v) })
	defer func() { _ = b.close(context.Background()) }()
	var observed atomic.Bool
	b.obs.add(&Observer{ElectionDone: func(ElectionResult) { observed.Store(true) }}, time.Now)
	b.subscribe(topicElectionCompleted, func(payload) {
		if !observed.Load() {
			t.Error("handler ran before the observer saw the event")
		}
		panic("boom")
	})
	b.emit(topicElectionStarted, payload{})
	b.emit(topicElectionCompleted, payload{isMaster: true})
	select {
	case got := <-panics:
		if got != topicElectionCompleted+": boom" {
			t.Fatalf("panic reported as %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("panic not reported")
	}
}

func TestBusOrderAcrossOverflow(t *testing.T) {
	// A handler that falls behind and catches up, again and again, moves
	// the events from the emitter's channel to the overflow queue and back:
	// every event still arrives once, in order, and no role event is lost.
	b := newTestBus(t)
	const n = 20 * listenerCap
	var got []int64
	done := make(chan struct{})
	b.subscribe(topicSlaveRegistered, func(p payload) {
		got = append(got, p.term)
		if p.term%(listenerCap/2) == 0 {
			time.Sleep(time.Millisecond) // behind, for a while
		}
		if p.term == n {
			close(done)
		}
	})
	for i := int64(1); i <= n; i++ {
		b.emit(topicSlaveRegistered, payload{term: i})
		if i%(3*listenerCap) == 0 {
			time.Sleep(5 * time.Millisecond) // let it catch up
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d events delivered", len(got), n)
	}
	for i, term := range got {
		if term != int64(i+1) {
			t.Fatalf("event %d has term %d: out of order", i+1, term)
		}
	}
}

func TestBusEmitDoesNotWaitForAFullChannel(t *testing.T) {
	b := newTestBus(t)
	release := make(chan struct{})
	b.subscribe(topicMasterLost, func(payload) { <-release })
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for range 4 * listenerCap {
			b.emit(topicMasterLost, payload{})
		}
	}()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("emit waited for a blocked handler")
	}
	close(release)
}

func TestBusUnsubscribeDropsOverflowAndCountsItDone(t *testing.T) {
	// Events queued in the emitter's channel and beyond it, in the overflow
	// queue, are all dropped on unsubscribe and counted done, so Stop's
	// wait for the master-acquired handlers ends.
	b := newTestBus(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var ran atomic.Int32
	unsubscribe := b.subscribe(topicMasterAcquired, func(payload) {
		ran.Add(1)
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	})
	l := &mastership{term: 1}
	b.emit(topicMasterAcquired, payload{term: 1, mastership: l})
	<-entered
	for range 2 * listenerCap {
		b.emit(topicMasterAcquired, payload{term: 1, mastership: l})
	}
	unsubscribe()
	close(release)
	waited := make(chan struct{})
	go func() { l.handlers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("handler count not back to zero after unsubscribe")
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: queued events ran after unsubscribe", n)
	}
}

// TestBusSubscribeWhileEmitting: handlers registered while another
// goroutine emits (durable's Maintain subscribing while the master's
// tracker reports slaves) race with nothing (the race detector watches
// admit's read of the listener channel) and each gets every event emitted
// after its registration returned.
func TestBusSubscribeWhileEmitting(t *testing.T) {
	b := newTestBus(t)
	stop := make(chan struct{})
	emitted := make(chan struct{})
	go func() {
		defer close(emitted)
		for {
			select {
			case <-stop:
				return
			default:
				b.emit(topicSlaveRegistered, payload{})
			}
		}
	}()
	var got []*atomic.Int64
	for range 50 {
		n := &atomic.Int64{}
		got = append(got, n)
		b.subscribe(topicSlaveRegistered, func(payload) { n.Add(1) })
		time.Sleep(200 * time.Microsecond) // emits in between: the race detector's window
	}
	close(stop)
	<-emitted
	b.emit(topicSlaveRegistered, payload{}) // after every registration
	for i, n := range got {
		waitFor(t, fmt.Sprintf("handler %d got the last event", i), func() bool { return n.Load() > 0 })
	}
}
