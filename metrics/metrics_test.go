package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/metrics"
	"github.com/herdkit/herd/pubsub"
)

// The election's metrics follow it through every way a mastership begins
// and ends, and a slave joining and leaving.
func TestElectionMetricsFollowTheElection(t *testing.T) {
	mr, c := newMini(t)
	a := newElection(t, c, fastConfig("a"))
	ra := register(t, a)
	start(t, a)
	term := float64(a.Term())
	waitValues(t, ra, map[string]float64{
		"herd_election_is_master":     1,
		"herd_election_term":          term,
		"herd_election_observed_term": term,
		"herd_election_candidate":     1,
		"herd_election_slaves":        0,
		"herd_election_master_transitions_total{direction=\"acquired\"}": 1,
		"herd_election_master_transitions_total{direction=\"lost\"}":     0,
		"herd_election_duration_seconds_count{outcome=\"master\"}":       1,
		"herd_election_duration_seconds_count{outcome=\"slave\"}":        0,
	})
	atLeast(t, ra, `herd_election_renew_attempts_total{result="renewed"}`, 1)
	atLeast(t, ra, "herd_election_renew_duration_seconds_count", 1)

	// A slave joins, then leaves.
	b := newElection(t, newClient(t, mr.Addr()), fastConfig("b"))
	rb := register(t, b)
	start(t, b)
	waitValues(t, rb, map[string]float64{
		"herd_election_is_master":                                 0,
		"herd_election_term":                                      0,
		"herd_election_observed_term":                             term,
		"herd_election_duration_seconds_count{outcome=\"slave\"}": 1,
	})
	waitValues(t, ra, map[string]float64{"herd_election_slaves": 1, "herd_election_slave_joins_total": 1, "herd_election_slave_leaves_total": 0})
	stop(t, b)
	waitValues(t, ra, map[string]float64{"herd_election_slaves": 0, "herd_election_slave_joins_total": 1, "herd_election_slave_leaves_total": 1})

	// A hand-over, then candidacy again.
	a.SetCandidate(false)
	waitValues(t, ra, map[string]float64{
		"herd_election_is_master": 0, "herd_election_term": 0, "herd_election_candidate": 0,
		"herd_election_step_downs_total{reason=\"handed_over\"}":     1,
		"herd_election_master_transitions_total{direction=\"lost\"}": 1,
	})
	a.SetCandidate(true)
	waitValues(t, ra, map[string]float64{
		"herd_election_is_master": 1,
		"herd_election_master_transitions_total{direction=\"acquired\"}": 2,
		"herd_election_duration_seconds_count{outcome=\"master\"}":       2,
	})

	// The lock taken from under the master: its next renewal finds it gone.
	mr.Set(a.Keys().Master, "intruder")
	mr.SetTTL(a.Keys().Master, time.Minute)
	waitValues(t, ra, map[string]float64{
		"herd_election_is_master":                                    0,
		"herd_election_step_downs_total{reason=\"lock_lost\"}":       1,
		"herd_election_master_transitions_total{direction=\"lost\"}": 2,
	})
	atLeast(t, ra, `herd_election_renew_attempts_total{result="lock_lost"}`, 1)
	mr.Del(a.Keys().Master)
	waitValues(t, ra, map[string]float64{"herd_election_is_master": 1, "herd_election_master_transitions_total{direction=\"acquired\"}": 3})

	// Redis refuses everything: the master fences itself.
	mr.SetError("LOADING simulated outage")
	waitValues(t, ra, map[string]float64{
		"herd_election_is_master":                                    0,
		"herd_election_step_downs_total{reason=\"self_fenced\"}":     1,
		"herd_election_master_transitions_total{direction=\"lost\"}": 3,
	})
	atLeast(t, ra, `herd_election_renew_attempts_total{result="error"}`, 1)
	atLeast(t, ra, `herd_election_errors_total{kind="redis"}`, 1)
	mr.SetError("")
	waitValues(t, ra, map[string]float64{"herd_election_is_master": 1, "herd_election_master_transitions_total{direction=\"acquired\"}": 4})

	// Stop releases the lock.
	stop(t, a)
	waitValues(t, ra, map[string]float64{
		"herd_election_is_master":                                    0,
		"herd_election_step_downs_total{reason=\"stopped\"}":         1,
		"herd_election_master_transitions_total{direction=\"lost\"}": 4,
		"herd_election_step_downs_total{reason=\"other\"}":           0,
	})
}

// staleLeader is the view of a master that was replaced without noticing:
// it still believes it is master under its old term.
type staleLeader struct {
	id   string
	term int64
}

func (l staleLeader) NodeID() string { return l.id }
func (l staleLeader) IsMaster() bool { return true }
func (l staleLeader) Term() int64    { return l.term }

// The router's and the subscriber's metrics count each outcome of routed
// messages, on a real election.
func TestRoutingMetricsCountOutcomes(t *testing.T) {
	mr, c := newMini(t)
	cb := newClient(t, mr.Addr())
	a := newElection(t, c, fastConfig("a"))
	b := newElection(t, cb, fastConfig("b"))
	pcfg := pubsub.Config{LockName: testLock}
	router, err := pubsub.NewRouter(c, a, a, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg := pcfg
	scfg.Terms = b
	sub, err := pubsub.NewSubscriber(cb, b.NodeID(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.Handle("job", func(context.Context, pubsub.Message) error { return nil })
	_ = sub.Handle("fail", func(context.Context, pubsub.Message) error { return errors.New("refused") })
	ra := register(t, a, metrics.WithRouter(router))
	rb := register(t, b, metrics.WithSubscriber(sub))
	start(t, a)
	start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	term := a.Term()

	_ = router.Send(ctx, "b", "job", 1)      // delivered, handled
	_ = router.Send(ctx, "b", "fail", 1)     // delivered, handler_error
	_ = router.Send(ctx, "b", "other", 1)    // delivered, unknown_type
	_ = router.Send(ctx, "nobody", "job", 1) // no_subscriber
	_ = router.Send(ctx, "b", "", 1)         // invalid
	publish(t, cb, sub.Channel(), pubsub.Message{ID: "old", From: "a", Term: term - 1, Type: "job"})
	publish(t, cb, sub.Channel(), pubsub.Message{ID: "forged", From: "x", Term: 9e15, Type: "job"})
	if err := cb.Publish(ctx, sub.Channel(), "not an envelope").Err(); err != nil {
		t.Fatal(err)
	}
	waitValues(t, ra, map[string]float64{
		`herd_router_messages_total{outcome="delivered"}`:     3,
		`herd_router_messages_total{outcome="no_subscriber"}`: 1,
		`herd_router_messages_total{outcome="invalid"}`:       1,
		`herd_router_messages_total{outcome="not_master"}`:    0,
	})
	waitValues(t, rb, map[string]float64{
		`herd_subscriber_messages_total{outcome="handled"}`:         1,
		`herd_subscriber_messages_total{outcome="handler_error"}`:   1,
		`herd_subscriber_messages_total{outcome="unknown_type"}`:    1,
		`herd_subscriber_messages_total{outcome="stale_term"}`:      1,
		`herd_subscriber_messages_total{outcome="unverified_term"}`: 1,
		`herd_subscriber_messages_total{outcome="malformed"}`:       1,
		"herd_subscriber_highest_term":                              float64(term),
	})

	// a hands over to b: a's router refuses, and a router that still
	// believes in a's term is fenced by Redis.
	a.SetCandidate(false)
	waitValues(t, rb, map[string]float64{"herd_election_is_master": 1})
	_ = router.Send(ctx, "b", "job", 1)
	waitValues(t, ra, map[string]float64{`herd_router_messages_total{outcome="not_master"}`: 1})
	replaced, err := pubsub.NewRouter(c, staleLeader{id: "a", term: term}, nil, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	rs := register(t, a, metrics.WithRouter(replaced))
	_ = replaced.Send(ctx, "b", "job", 1)
	waitValues(t, rs, map[string]float64{`herd_router_messages_total{outcome="fenced"}`: 1, `herd_router_messages_total{outcome="delivered"}`: 0})
}

// publish sends m straight to channel, past the route script.
func publish(t testing.TB, c redis.UniversalClient, channel string, m pubsub.Message) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Publish(ctx, channel, data).Err(); err != nil {
		t.Fatal(err)
	}
}

// Register registers all or nothing, and Unregister frees the names.
func TestRegisterAndUnregister(t *testing.T) {
	_, c := newMini(t)
	e := newElection(t, c, fastConfig("a"))
	if _, err := metrics.Register(nil, e); err == nil {
		t.Error("Register with a nil Registerer: no error")
	}
	if _, err := metrics.Register(prometheus.NewRegistry(), nil); err == nil {
		t.Error("Register of a nil election: no error")
	}
	reg := prometheus.NewRegistry()
	mx, err := metrics.Register(reg, e, metrics.WithConstLabels(prometheus.Labels{"service": "billing"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.Register(reg, e, metrics.WithConstLabels(prometheus.Labels{"service": "billing"})); err == nil {
		t.Fatal("the same metrics registered twice: no error")
	}
	other, err := metrics.Register(reg, e, metrics.WithConstLabels(prometheus.Labels{"service": "billing", metrics.LockLabel: "other"}))
	if err != nil {
		t.Fatalf("metrics of another lock label: %v", err)
	}
	other.Unregister()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["service"] != "billing" || labels[metrics.LockLabel] != testLock {
				t.Fatalf("%s has labels %v, want service=billing and lock=%s", f.GetName(), labels, testLock)
			}
		}
	}
	mx.Unregister()
	mx.Unregister() // idempotent
	if families, _ := reg.Gather(); len(families) != 0 {
		t.Fatalf("%d metric families left after Unregister", len(families))
	}
	again, err := metrics.Register(reg, e, metrics.WithConstLabels(prometheus.Labels{"service": "billing"}))
	if err != nil {
		t.Fatalf("register again after Unregister: %v", err)
	}
	again.Unregister()
}

// Every metric is documented in docs/observability.md with its labels, and
// every documented metric exists; every label has a bounded set of values.
func TestMetricsAreDocumented(t *testing.T) {
	_, c := newMini(t)
	e := newElection(t, c, fastConfig("a"))
	router, err := pubsub.NewRouter(c, e, nil, pubsub.Config{LockName: testLock})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := pubsub.NewSubscriber(c, "a", pubsub.Config{LockName: testLock})
	if err != nil {
		t.Fatal(err)
	}
	con, err := durable.NewConsumer(c, "a", durable.Config{LockName: testLock})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := assign.NewWorker(c, e, assign.Config{})
	if err != nil {
		t.Fatal(err)
	}
	planner, err := assign.NewPlanner(c, e, assign.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := register(t, e, metrics.WithRouter(router), metrics.WithSubscriber(sub), metrics.WithConsumer(con),
		metrics.WithWorker(worker), metrics.WithPlanner(planner))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	// A metric's row: | `name` | type | `label`: `v1`, `v2` … | meaning |
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(herd_[a-z_]+)` \\|(.*)$").FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = m[2]
	}
	var names []string
	for _, f := range families {
		name := f.GetName()
		names = append(names, name)
		row, ok := rows[name]
		if !ok {
			t.Errorf("%s is not documented in docs/observability.md", name)
			continue
		}
		if !strings.HasPrefix(name, "herd_") || (f.GetType().String() == "COUNTER") != strings.HasSuffix(name, "_total") {
			t.Errorf("%s (%s) breaks the naming conventions", name, f.GetType())
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LockLabel {
					continue
				}
				if !strings.Contains(row, "`"+l.GetName()+"`") || !strings.Contains(row, "`"+l.GetValue()+"`") {
					t.Errorf("%s: label %s=%q is not documented in its row", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	for name := range rows {
		if !slices.Contains(names, name) {
			t.Errorf("docs/observability.md documents %s, which Register does not make", name)
		}
	}
	t.Logf("%d metric families, %s", len(families), strconv.Quote(strings.Join(names, " ")))
}
