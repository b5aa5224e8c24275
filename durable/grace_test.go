package durable_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/herdkit/herd/durable"
)

// TestGraceKeepsTheInboxOfARestart: a slave this Router saw live leaves
// the registry; within Grace its inbox stays in place (Swept.Waiting), and
// when a process with its id registers again it finds its entries there:
// nothing moved.
func TestGraceKeepsTheInboxOfARestart(t *testing.T) {
	_, c := newMini(t)
	live := &slaveList{}
	cfg := fast()
	cfg.Grace = time.Hour
	r := newRouter(t, c, newMaster(t, c, "m"), live, cfg)
	register(t, c, "s1", "s2")
	live.set("s1", "s2")
	for i := range 3 {
		if _, err := r.Send(testCtx(t), "s1", "seq", i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Sweep(testCtx(t), nil); err != nil { // sees s1 live
		t.Fatal(err)
	}
	unregister(t, c, "s1")
	live.set("s2")
	s, err := r.Sweep(testCtx(t), nil)
	if err != nil || !slices.Equal(s.Waiting, []string{"s1"}) || len(s.Moved) != 0 {
		t.Fatalf("sweep within the grace: %+v, %v; want s1 waiting, nothing moved", s, err)
	}
	if n := c.XLen(testCtx(t), r.Inbox("s1")).Val(); n != 3 {
		t.Fatalf("s1's inbox holds %d of 3 entries within the grace", n)
	}
	register(t, c, "s1") // the restart
	live.set("s1", "s2")
	s, err = r.Sweep(testCtx(t), nil)
	if err != nil || len(s.Waiting)+len(s.Moved) != 0 {
		t.Fatalf("sweep after the restart: %+v, %v; want nothing waiting or moved", s, err)
	}
	if n := c.XLen(testCtx(t), r.Inbox("s1")).Val(); n != 3 {
		t.Fatalf("s1's inbox holds %d of 3 entries after its restart", n)
	}
}

// TestGraceEndsAndTheInboxMoves: under Maintain, a slave that leaves and
// does not come back keeps its inbox until its grace ends (counted from its
// slave-removed event), then the entries move to the live slave, with no
// further event needed; an inbox of a process this Router never saw live
// moves at once.
func TestGraceEndsAndTheInboxMoves(t *testing.T) {
	_, c := newMini(t)
	live := &slaveList{}
	cfg := fast()
	const grace = 300 * time.Millisecond
	cfg.Grace = grace
	cfg.SweepInterval = time.Hour // only events and the grace's end sweep
	swept := make(chan durable.Swept, 16)
	cfg.OnSweep = func(s durable.Swept) { swept <- s }
	r := newRouter(t, c, newMaster(t, c, "m"), live, cfg)
	register(t, c, "s1", "s2", "never")
	live.set("s1", "s2")
	for i := range 3 {
		if _, err := r.Send(testCtx(t), "s1", "seq", i); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Send(testCtx(t), "never", "seq", i); err != nil {
			t.Fatal(err)
		}
	}
	unregister(t, c, "never") // gone before this Router swept
	ev := &fakeEvents{}
	stop := r.Maintain(ev, nil)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev.acquired(ctx, 1)
	s := <-swept
	if s.Moved["never"] != 3 || len(s.Waiting) != 0 {
		t.Fatalf("first sweep %+v: want the 3 entries of a process never seen live moved at once", s)
	}

	held := c.XLen(testCtx(t), r.Inbox("s1")).Val() // its 3, and what it took of never's
	unregister(t, c, "s1")
	live.set("s2")
	left := time.Now()
	ev.removed("s1")
	var moved time.Time
	for moved.IsZero() {
		select {
		case s = <-swept:
		case <-time.After(waitLimit):
			t.Fatal("no sweep moved s1's inbox")
		}
		if s.Moved["s1"] > 0 {
			moved = time.Now()
		}
	}
	if int64(s.Moved["s1"]) != held || len(s.Waiting) != 0 {
		t.Fatalf("sweep after the grace %+v: want s1's %d entries moved", s, held)
	}
	if d := moved.Sub(left); d < grace {
		t.Fatalf("s1's inbox moved %v after its removal, within its grace of %v", d, grace)
	}
	if n := c.XLen(testCtx(t), r.Inbox("s2")).Val(); n != 6 {
		t.Fatalf("s2's inbox holds %d entries, want 6", n)
	}
}
