package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/metrics"
	"github.com/herdkit/herd/pubsub"
)

// The durable Consumer's metrics count each outcome of the entries of a
// slave's inbox on a real Redis: handled, failed until dead, stale and
// unverified terms, and the redeliveries.
func TestConsumerMetricsCountOutcomes(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	ca, cb := newClient(t, inst.Addr), newClient(t, inst.Addr)
	a := newElection(t, ca, fastConfig("a"))
	b := newElection(t, cb, fastConfig("b"))
	start(t, a)
	start(t, b) // registered: a durable Router sends only to live processes
	router, err := durable.NewRouter(ca, a, nil, durable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	con, err := durable.NewConsumer(cb, "b", durable.Config{Terms: b, RetryDelay: 10 * time.Millisecond, MaxDeliveries: 3, Block: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = con.Handle("job", func(context.Context, durable.Delivery) error { return nil })
	_ = con.Handle("fail", func(context.Context, durable.Delivery) error { return errors.New("refused") })
	rb := register(t, b, metrics.WithConsumer(con))
	// Every outcome is there at 0 before anything happens.
	waitValues(t, rb, map[string]float64{
		`herd_consumer_messages_total{outcome="handled"}`:         0,
		`herd_consumer_messages_total{outcome="failed"}`:          0,
		`herd_consumer_messages_total{outcome="stale_term"}`:      0,
		`herd_consumer_messages_total{outcome="unverified_term"}`: 0,
		`herd_consumer_messages_total{outcome="dead"}`:            0,
		"herd_consumer_redelivered_total":                         0,
		"herd_consumer_highest_term":                              0,
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := con.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	term := a.Term()

	for _, typ := range []string{"job", "fail"} {
		if _, err := router.Send(ctx, "b", typ, 1); err != nil {
			t.Fatalf("send %s: %v", typ, err)
		}
	}
	// Entries of a replaced master and of a term Redis never minted, written
	// past the router.
	for _, e := range []pubsub.Message{{ID: "old", From: "a", Term: term - 1, Type: "job"}, {ID: "forged", From: "x", Term: 9e15, Type: "job"}} {
		env, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.XAdd(ctx, &redis.XAddArgs{Stream: con.Inbox(), Values: []any{rdb.InboxFieldMessage, string(env), rdb.InboxFieldTerm, e.Term}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitValues(t, rb, map[string]float64{
		`herd_consumer_messages_total{outcome="handled"}`:         1,
		`herd_consumer_messages_total{outcome="failed"}`:          3,
		`herd_consumer_messages_total{outcome="stale_term"}`:      1,
		`herd_consumer_messages_total{outcome="unverified_term"}`: 1,
		`herd_consumer_messages_total{outcome="dead"}`:            1,
		"herd_consumer_redelivered_total":                         2,
		"herd_consumer_highest_term":                              float64(term),
	})
}
