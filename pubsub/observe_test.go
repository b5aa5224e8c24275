package pubsub_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdkit/herd/pubsub"
)

// outcomes counts what an Observer was given, by outcome.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) add(outcome string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[outcome] += n
}

func (o *outcomes) get() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.n)
}

// waitFor waits until the counts equal want, and fails the test with what
// they are when they do not within waitLimit.
func (o *outcomes) waitFor(t *testing.T, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !maps.Equal(o.get(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("outcomes %v, want %v", o.get(), want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Every message a Router sends reaches Routed once with its outcome.
func TestRouterObserverCountsOutcomes(t *testing.T) {
	_, c := newMini(t)
	cfg := pubsub.DefaultConfig()
	mastership := newMaster(t, c, "m", cfg)
	startSubscriber(t, c, "s1", cfg)
	r := newRouter(t, c, mastership, slaveList{ids: []string{"s1", "gone"}}, cfg)
	var got outcomes
	remove := r.Observe(pubsub.Observer{Routed: func(o pubsub.RouteOutcome, n int) { got.add(string(o), n) }})
	ctx := testCtx(t)

	_ = r.Send(ctx, "s1", "job", 1)   // delivered
	_ = r.Send(ctx, "gone", "job", 1) // no_subscriber
	_ = r.Send(ctx, "s1", "", 1)      // invalid
	_, _ = r.Broadcast(ctx, "job", 1) // delivered, no_subscriber
	_, _ = r.SendBatch(ctx, []pubsub.Outgoing{
		{SlaveID: "s1", Type: "job"},   // delivered
		{SlaveID: "s1", Type: ""},      // invalid
		{SlaveID: "gone", Type: "job"}, // no_subscriber
	})
	got.waitFor(t, map[string]int{"delivered": 3, "no_subscriber": 3, "invalid": 2})

	takeOver(t, c, cfg, "other") // the Router's term is fenced in Redis from now on
	_ = r.Send(ctx, "s1", "job", 1)
	_, _ = r.SendBatch(ctx, []pubsub.Outgoing{{SlaveID: "s1", Type: "job"}, {SlaveID: "gone", Type: "job"}})
	mastership.set(0) // the election says: not master
	_ = r.Send(ctx, "s1", "job", 1)
	_, _ = r.Broadcast(ctx, "job", 1)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	mastership.set(mastership.term.Load() + 1)
	_ = r.Send(cctx, "s1", "job", 1) // a cancelled context: error
	got.waitFor(t, map[string]int{"delivered": 3, "no_subscriber": 3, "invalid": 2, "fenced": 3, "not_master": 2, "error": 1})

	remove()
	_ = r.Send(ctx, "s1", "", 1)
	if got.get()["invalid"] != 2 {
		t.Fatalf("a removed Observer saw %v", got.get())
	}
}

// Every message a Subscriber receives reaches Received once with what
// became of it, and so does every notice it refuses.
func TestSubscriberObserverCountsOutcomes(t *testing.T) {
	_, c := newMini(t)
	cfg := pubsub.DefaultConfig()
	mastership := newMaster(t, c, "m", cfg)
	r := newRouter(t, c, mastership, nil, cfg)
	log := newErrLog()
	cfg.OnError = log.add
	s, err := pubsub.NewSubscriber(c, "s1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got outcomes
	s.Observe(pubsub.Observer{Received: func(o pubsub.ReceiveOutcome) { got.add(string(o), 1) }})
	_ = s.Handle("ok", func(context.Context, pubsub.Message) error { return nil })
	_ = s.Handle("fail", func(context.Context, pubsub.Message) error { return errors.New("refused by the application") })
	_ = s.Handle("boom", func(context.Context, pubsub.Message) error { panic("boom") })
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	for _, typ := range []string{"ok", "ok", "fail", "boom", "unknown"} {
		mustSend(t, r, "s1", typ, 1)
	}
	old := mastership.term.Load()
	takeOver(t, c, cfg, "other") // its acquired notice raises the subscriber's fence
	bypass(t, c, s.Channel(), pubsub.Message{From: "m", Term: old, Type: "ok"})
	bypass(t, c, s.Channel(), pubsub.Message{From: "forger", Term: 9e15, Type: "ok"})
	ctx := testCtx(t)
	_ = c.Publish(ctx, s.Channel(), "not an envelope").Err()
	_ = c.Publish(ctx, s.Channel(), strings.Repeat(" ", pubsub.MaxEnvelopeSize+1)).Err()
	_ = c.Publish(ctx, cfg.MasterInbox(), "not for the subscriber").Err()
	got.waitFor(t, map[string]int{
		"handled": 2, "handler_error": 1, "handler_panic": 1, "unknown_type": 1,
		"stale_term": 1, "unverified_term": 1, "malformed": 1, "too_large": 1,
	})
	if s.Rejected() != 1 || s.Unverified() != 1 {
		t.Fatalf("Rejected %d, Unverified %d; want 1 and 1", s.Rejected(), s.Unverified())
	}
}
