package metrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/metrics"
	"github.com/herdkit/herd/pubsub"
)

// routingNode is an election with its router and subscriber, and their
// metrics in a registry of their own.
type routingNode struct {
	e      *masterelection.MasterElection
	router *pubsub.Router
	sub    *pubsub.Subscriber
}

func newRoutingNode(t *testing.T, addr, id string) (*routingNode, *prometheus.Registry) {
	t.Helper()
	c := newClient(t, addr)
	n := &routingNode{e: newElection(t, c, fastConfig(id))}
	pcfg := pubsub.Config{LockName: testLock}
	var err error
	if n.router, err = pubsub.NewRouter(c, n.e, n.e, pcfg); err != nil {
		t.Fatal(err)
	}
	scfg := pcfg
	scfg.Terms = n.e
	if n.sub, err = pubsub.NewSubscriber(c, id, scfg); err != nil {
		t.Fatal(err)
	}
	_ = n.sub.Handle("job", func(context.Context, pubsub.Message) error { return nil })
	reg := register(t, n.e, metrics.WithRouter(n.router), metrics.WithSubscriber(n.sub))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := n.sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.sub.Close() })
	return n, reg
}

// A scrape of real registries follows two processes on a real Redis
// through an election, a slave joining, routed messages of every outcome,
// a hand-over, a master fencing itself while Redis is frozen, a Transfer,
// and Stop.
func TestMetricsOnRealRedis(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		a, ra := newRoutingNode(t, inst.Addr, "a")
		b, rb := newRoutingNode(t, inst.Addr, "b")
		start(t, a.e)
		start(t, b.e)
		waitValues(t, ra, map[string]float64{
			"herd_election_is_master": 1, "herd_election_slaves": 1, "herd_election_slave_joins_total": 1,
			`herd_election_master_transitions_total{direction="acquired"}`: 1,
			`herd_election_duration_seconds_count{outcome="master"}`:       1,
		})
		waitValues(t, rb, map[string]float64{
			"herd_election_is_master": 0, "herd_subscriber_highest_term": float64(a.e.Term()),
			`herd_election_duration_seconds_count{outcome="slave"}`: 1,
		})
		atLeast(t, ra, `herd_election_renew_attempts_total{result="renewed"}`, 1)
		atLeast(t, ra, "herd_election_renew_duration_seconds_count", 1)

		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = a.router.Send(ctx, "b", "job", 1)
		_ = a.router.Send(ctx, "c", "job", 1)
		waitValues(t, ra, map[string]float64{`herd_router_messages_total{outcome="delivered"}`: 1, `herd_router_messages_total{outcome="no_subscriber"}`: 1})
		waitValues(t, rb, map[string]float64{`herd_subscriber_messages_total{outcome="handled"}`: 1})

		// a hands over to b.
		old := a.e.Term()
		a.e.SetCandidate(false)
		waitValues(t, ra, map[string]float64{
			"herd_election_is_master": 0, `herd_election_step_downs_total{reason="handed_over"}`: 1,
			`herd_election_master_transitions_total{direction="lost"}`: 1,
		})
		waitValues(t, rb, map[string]float64{
			"herd_election_is_master": 1, "herd_election_slaves": 1, "herd_election_slave_joins_total": 1,
			`herd_election_master_transitions_total{direction="acquired"}`: 1,
		})
		_ = a.router.Send(ctx, "b", "job", 1)
		waitValues(t, ra, map[string]float64{`herd_router_messages_total{outcome="not_master"}`: 1})
		replaced, err := pubsub.NewRouter(newClient(t, inst.Addr), staleLeader{id: "a", term: old}, nil, pubsub.Config{LockName: testLock})
		if err != nil {
			t.Fatal(err)
		}
		rs := register(t, a.e, metrics.WithRouter(replaced))
		_ = replaced.Send(ctx, "b", "job", 1)
		waitValues(t, rs, map[string]float64{`herd_router_messages_total{outcome="fenced"}`: 1})
		_ = b.router.Send(ctx, "a", "job", 1)
		publish(t, newClient(t, inst.Addr), a.sub.Channel(), pubsub.Message{ID: "late", From: "a", Term: old, Type: "job"})
		waitValues(t, rb, map[string]float64{`herd_router_messages_total{outcome="delivered"}`: 1})
		waitValues(t, ra, map[string]float64{
			`herd_subscriber_messages_total{outcome="handled"}`:    1,
			`herd_subscriber_messages_total{outcome="stale_term"}`: 1,
		})

		// Redis freezes: b cannot renew and fences itself.
		inst.Pause(t)
		waitValues(t, rb, map[string]float64{"herd_election_is_master": 0, `herd_election_step_downs_total{reason="self_fenced"}`: 1})
		atLeast(t, rb, `herd_election_renew_attempts_total{result="error"}`, 1)
		atLeast(t, rb, `herd_election_errors_total{kind="timeout"}`, 1)
		inst.Resume(t)
		waitValues(t, rb, map[string]float64{"herd_election_is_master": 1, `herd_election_master_transitions_total{direction="acquired"}`: 2})

		// b transfers the mastership to a, a candidate again.
		a.e.SetCandidate(true)
		if err := b.e.Transfer(ctx, "a"); err != nil {
			t.Fatalf("transfer to a: %v", err)
		}
		waitValues(t, rb, map[string]float64{
			"herd_election_is_master": 0, `herd_election_step_downs_total{reason="transferred"}`: 1,
			`herd_election_master_transitions_total{direction="lost"}`: 2,
		})
		waitValues(t, ra, map[string]float64{"herd_election_is_master": 1, `herd_election_master_transitions_total{direction="acquired"}`: 2})

		stop(t, a.e)
		waitValues(t, ra, map[string]float64{
			"herd_election_is_master": 0, `herd_election_step_downs_total{reason="stopped"}`: 1,
			`herd_election_master_transitions_total{direction="lost"}`: 2,
		})
	})
}
