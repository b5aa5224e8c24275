package pubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

// TestNamesComeFromTheElection: a custom slave prefix and lock name set once,
// on the election, reach the registry's ProcessChannel, the Router and the
// Subscriber; a routed message arrives on the channel ProcessChannel names.
// (The prefix used to be honoured inside pubsub only: the registry and the
// election named "worker:slave:<id>" whatever the Subscriber listened on.)
func TestNamesComeFromTheElection(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newElection := func(id string) *masterelection.MasterElection {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		cfg := masterelection.DefaultConfig()
		cfg.LockName, cfg.NodeID, cfg.SlavePrefix = "jobs", id, "jobs:worker:"
		m, err := masterelection.New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		return m
	}
	a, b := newElection("a"), newElection("b")
	if !a.IsMaster() {
		t.Fatal("a is not master")
	}
	var ch string
	var err error
	for ch, err = a.ProcessChannel(ctx, "b"); err != nil && ctx.Err() == nil; ch, err = a.ProcessChannel(ctx, "b") {
		time.Sleep(5 * time.Millisecond) // b registers itself just after its Start
	}
	if err != nil || ch != "jobs:worker:b" {
		t.Fatalf("ProcessChannel(b) = %q, %v; want jobs:worker:b", ch, err)
	}
	bc := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer bc.Close()
	sub, err := pubsub.NewSubscriber(bc, "b", pubsub.Config{Terms: b})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Channel() != ch {
		t.Fatalf("the subscriber listens on %q, the registry names %q", sub.Channel(), ch)
	}
	got := make(chan pubsub.Message, 1)
	if err := sub.Handle("job", func(_ context.Context, m pubsub.Message) error { got <- m; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ac := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer ac.Close()
	r, err := pubsub.NewRouter(ac, a, nil, pubsub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Send(ctx, "b", "job", map[string]int{"n": 1}); err != nil {
		t.Fatalf("send to b: %v", err)
	}
	select {
	case m := <-got:
		if m.Term != a.Term() {
			t.Fatalf("message term %d, want %d", m.Term, a.Term())
		}
	case <-ctx.Done():
		t.Fatal("the message did not arrive")
	}
	if _, err := pubsub.NewRouter(ac, a, nil, pubsub.Config{LockName: "other"}); err == nil {
		t.Fatal("a Router with a lock name other than its election's was accepted")
	}
}
