package metrics

import (
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

// Metric name parts: every metric is herd_<subsystem>_<name>.
const (
	namespace = "herd"

	subsystemElection   = "election"
	subsystemRouter     = "router"
	subsystemSubscriber = "subscriber"
	subsystemConsumer   = "consumer"
	subsystemAssign     = "assign"
)

// LockLabel is the constant label that carries the election's lock name on
// every metric, so that the metrics of several elections of one process can
// share a registry.
const LockLabel = "lock"

// Metrics is the set of metrics Register made for one election (and its
// router, subscriber and durable consumer). It is a prometheus.Collector,
// already registered with the Registerer given to Register. It is safe for
// concurrent use.
type Metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
	detach     []func() // removes the event handler and the observers
	once       sync.Once
}

// Option configures Register.
type Option func(*options)

type options struct {
	router          *pubsub.Router
	subscriber      *pubsub.Subscriber
	consumer        *durable.Consumer
	workers         []*assign.Worker
	planners        []*assign.Planner
	labels          prometheus.Labels
	renewBuckets    []float64
	electionBuckets []float64
}

// WithRouter adds the metrics of the election's Router (the master's side
// of routing): herd_router_messages_total.
func WithRouter(r *pubsub.Router) Option { return func(o *options) { o.router = r } }

// WithSubscriber adds the metrics of the election's Subscriber (the
// slave's side of routing): herd_subscriber_messages_total and
// herd_subscriber_highest_term.
func WithSubscriber(s *pubsub.Subscriber) Option { return func(o *options) { o.subscriber = s } }

// WithConsumer adds the metrics of the election's durable Consumer (the
// slave's side of durable routing): herd_consumer_messages_total,
// herd_consumer_redelivered_total and herd_consumer_highest_term, read from
// the Consumer's counters at scrape time.
func WithConsumer(c *durable.Consumer) Option { return func(o *options) { o.consumer = c } }

// WithWorker adds the metrics of an assign Worker (the slave's side of an
// item set): herd_assign_owned_items and
// herd_assign_ownership_changes_total, labelled with its set. It may be
// given once per set.
func WithWorker(w *assign.Worker) Option {
	return func(o *options) { o.workers = append(o.workers, w) }
}

// WithPlanner adds the metrics of an assign Planner (the master's side of
// an item set): herd_assign_unassigned_items and
// herd_assign_plan_moves_total, labelled with its set. It may be given
// once per set.
func WithPlanner(p *assign.Planner) Option {
	return func(o *options) { o.planners = append(o.planners, p) }
}

// WithConstLabels adds constant labels to every metric, for example the
// service or the instance when several processes' metrics end up in one
// place. They must have a bounded set of values. A "lock" label replaces
// the election's lock name.
func WithConstLabels(l prometheus.Labels) Option {
	return func(o *options) { o.labels = maps.Clone(l) }
}

// WithRenewBuckets sets the buckets of herd_election_renew_duration_seconds,
// in seconds. Default: 0.5ms doubling up to about 4s (14 buckets).
func WithRenewBuckets(b []float64) Option {
	return func(o *options) { o.renewBuckets = append([]float64(nil), b...) }
}

// WithElectionBuckets sets the buckets of herd_election_duration_seconds, in
// seconds. Default: 1ms doubling up to about 33s (16 buckets).
func WithElectionBuckets(b []float64) Option {
	return func(o *options) { o.electionBuckets = append([]float64(nil), b...) }
}

// Register makes the metrics of election e, and of the router, subscriber
// and consumer given with WithRouter, WithSubscriber and WithConsumer, and
// registers them with reg in one step: all of them or none. It subscribes to
// e's events and adds Observers to e, the router and the subscriber;
// Unregister undoes both. Call it before e.Start so that the first election
// is counted. The router, the subscriber and the consumer must belong to
// e's election (their metrics carry its lock name).
//
// It returns an error when e is nil, or when reg refuses the metrics (most
// likely because metrics of the same lock name and constant labels are
// registered already).
func Register(reg prometheus.Registerer, e *masterelection.MasterElection, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: register: nil Registerer")
	}
	if e == nil {
		return nil, errors.New("metrics: register: nil election")
	}
	o := options{
		renewBuckets:    prometheus.ExponentialBuckets(0.0005, 2, 14),
		electionBuckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}
	for _, opt := range opts {
		opt(&o)
	}
	labels := prometheus.Labels{LockLabel: e.LockName()}
	maps.Copy(labels, o.labels)

	m := &Metrics{reg: reg}
	m.watchElection(e, labels, o)
	if o.router != nil {
		m.watchRouter(o.router, labels)
	}
	if o.subscriber != nil {
		m.watchSubscriber(o.subscriber, labels)
	}
	if o.consumer != nil {
		m.watchConsumer(o.consumer, labels)
	}
	for _, w := range o.workers {
		m.watchWorker(w, labels)
	}
	for _, p := range o.planners {
		m.watchPlanner(p, labels)
	}
	if err := reg.Register(m); err != nil {
		m.stop()
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	return m, nil
}

// Unregister removes the metrics from the Registerer and stops updating
// them. It may be called more than once.
func (m *Metrics) Unregister() {
	m.once.Do(func() {
		m.reg.Unregister(m)
		m.stop()
	})
}

func (m *Metrics) stop() {
	for _, f := range m.detach {
		f()
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// add keeps collectors for Describe and Collect.
func (m *Metrics) add(cs ...prometheus.Collector) { m.collectors = append(m.collectors, cs...) }

// counterVec returns a counter vector with every value of its one label
// already at 0, so that rates work from the first scrape.
func counterVec(opts prometheus.CounterOpts, label string, values ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(opts, []string{label})
	for _, x := range values {
		v.WithLabelValues(x)
	}
	return v
}

// outcomeFunc is one series of a counter by outcome that is read at scrape
// time: its value of the outcome label and the function that reads it.
type outcomeFunc struct {
	outcome string
	read    func() uint64
}

// outcomeCounters returns one counter of opts per outcome, labelled with
// it ("outcome", beside opts.ConstLabels) and read at scrape time.
func outcomeCounters(opts prometheus.CounterOpts, outcomes ...outcomeFunc) []prometheus.Collector {
	cs := make([]prometheus.Collector, 0, len(outcomes))
	for _, o := range outcomes {
		oo := opts
		oo.ConstLabels = maps.Clone(opts.ConstLabels)
		oo.ConstLabels["outcome"] = o.outcome
		cs = append(cs, prometheus.NewCounterFunc(oo, func() float64 { return float64(o.read()) }))
	}
	return cs
}

// boolValue is 1 for true and 0 for false.
func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
