package masterelection

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPausedMasterHandsOver(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	var handlerEnded atomic.Bool
	a.OnMasterAcquired(func(ctx context.Context, _ int64) {
		<-ctx.Done()
		handlerEnded.Store(true)
	})
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")

	a.SetCandidate(false)
	// No fake time passes: the release notice alone brings b in.
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
	waitFor(t, "b takes over", b.IsMaster)
	if !handlerEnded.Load() {
		t.Fatal("lock released before a's master handler returned")
	}
	// Paused, a never contends, even when the lock is free.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	w.advance(5*time.Second, 250*time.Millisecond, a)
	if a.IsMaster() {
		t.Fatal("a paused candidate became master")
	}
	// Resumed, it takes the free lock at once.
	a.SetCandidate(true)
	waitFor(t, "a resumes and takes the lock", func() bool {
		settle(a)
		a.clk.Advance(a.cfg.ElectionJitter)
		return a.IsMaster()
	})
	if !a.Candidate() {
		t.Fatal("Candidate() false after SetCandidate(true)")
	}
}

func TestRunIfMaster(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	w.start(b)

	ran, err := b.RunIfMaster(context.Background(), func(context.Context, int64) error {
		t.Error("fn ran on a slave")
		return nil
	})
	if ran || !errors.Is(err, ErrNotMaster) {
		t.Fatalf("on a slave: ran %v, err %v", ran, err)
	}

	boom := errors.New("boom")
	ran, err = a.RunIfMaster(context.Background(), func(_ context.Context, term int64) error {
		if term != a.Term() {
			t.Errorf("fn got term %d, want %d", term, a.Term())
		}
		return boom
	})
	if !ran || !errors.Is(err, boom) {
		t.Fatalf("on the master: ran %v, err %v", ran, err)
	}

	// fn's ctx ends with the mastership.
	started := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		_, err := a.RunIfMaster(context.Background(), func(ctx context.Context, _ int64) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		result <- err
	}()
	<-started
	a.SetCandidate(false)
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("fn returned %v, want canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fn's ctx not cancelled when the mastership ended")
	}
}

func TestStandaloneIsMasterWithoutRedis(t *testing.T) {
	cfg := testConfig("solo")
	cfg.Standalone = true
	m, err := New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rec.waitEvents(t, "started", "acquired", "completed:master")
	if !m.IsMaster() || m.Term() == 0 {
		t.Fatalf("standalone: master %v term %d", m.IsMaster(), m.Term())
	}
	if id, term, err := m.Master(ctx); id != "solo" || term != m.Term() || err != nil {
		t.Fatalf("Master() = %q %d %v", id, term, err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
	if m.IsMaster() {
		t.Fatal("still master after Stop")
	}
}
