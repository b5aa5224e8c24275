package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// Label values of herd_election_master_transitions_total.
const (
	directionAcquired = "acquired"
	directionLost     = "lost"
)

// sentinelKinds are the errors errorKind tests first, in this order, each
// with its value of the kind label of herd_election_errors_total.
var sentinelKinds = []struct {
	err  error
	kind string
}{
	{masterelection.ErrDataLoss, "data_loss"},
	{masterelection.ErrGarbage, "garbage"},
	{masterelection.ErrDuplicateNodeID, "duplicate_node_id"},
	{masterelection.ErrReplicas, "replicas"},
	{masterelection.ErrEvictionPolicy, "eviction_policy"},
	{masterelection.ErrUnconfirmedNotice, "unconfirmed_notice"},
	{masterelection.ErrHandlerPanic, "handler_panic"},
	{registry.ErrCorruptEntry, "corrupt_entry"},
}

// errorKinds returns the values of the kind label of
// herd_election_errors_total, in the order errorKind tests them.
func errorKinds() []string {
	var kinds []string
	for _, s := range sentinelKinds {
		kinds = append(kinds, s.kind)
	}
	return append(kinds, "timeout", "connection", "redis", "other")
}

// errorKind classifies an error event of the election.
func errorKind(err error) string {
	for _, s := range sentinelKinds {
		if errors.Is(err, s.err) {
			return s.kind
		}
	}
	var rerr redis.Error
	var nerr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.As(err, &nerr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrClosed):
		return "connection"
	case errors.As(err, &rerr):
		return "redis"
	}
	return "other"
}

// electionMetrics are the metrics that events and observations update.
type electionMetrics struct {
	transitions  *prometheus.CounterVec
	elections    *prometheus.HistogramVec
	renewLatency prometheus.Histogram
	renewals     *prometheus.CounterVec
	stepDowns    *prometheus.CounterVec
	slaves       prometheus.Gauge
	joins        prometheus.Counter
	leaves       prometheus.Counter
	errors       *prometheus.CounterVec

	mu       sync.Mutex
	slaveSet map[string]struct{} // the slaves of the current mastership
}

// watchElection makes e's metrics, subscribes to its events and observes it.
func (m *Metrics) watchElection(e *masterelection.MasterElection, labels prometheus.Labels, o options) {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Subsystem: subsystemElection, Name: name, Help: help, ConstLabels: labels}
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts(name, help)), f)
	}
	em := &electionMetrics{
		transitions: counterVec(prometheus.CounterOpts(opts("master_transitions_total",
			"Changes of this process's role: acquired (became master) and lost (stopped being master).")),
			"direction", directionAcquired, directionLost),
		elections: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystemElection, Name: "duration_seconds", ConstLabels: labels,
			Help:    "Time from election-started to election-completed, by outcome (master or slave).",
			Buckets: o.electionBuckets,
		}, []string{"outcome"}),
		renewLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystemElection, Name: "renew_duration_seconds", ConstLabels: labels,
			Help:    "Round trip of the master's renew attempts that Redis answered (renewed or lock_lost).",
			Buckets: o.renewBuckets,
		}),
		renewals: counterVec(prometheus.CounterOpts(opts("renew_attempts_total",
			"Renew attempts of the master, by result: renewed, lock_lost, error, abandoned.")),
			"result", string(masterelection.RenewRenewed), string(masterelection.RenewLockLost),
			string(masterelection.RenewFailed), string(masterelection.RenewAbandoned)),
		stepDowns: counterVec(prometheus.CounterOpts(opts("step_downs_total",
			"Ends of this process's masterships, by reason; self_fenced counts the self-fencing step-downs.")),
			"reason", string(masterelection.StepDownSelfFenced), string(masterelection.StepDownLockLost),
			string(masterelection.StepDownHandedOver), string(masterelection.StepDownTransferred),
			string(masterelection.StepDownStopped), string(masterelection.StepDownOther)),
		slaves: prometheus.NewGauge(prometheus.GaugeOpts(opts("slaves",
			"Slaves known to this process while it is master (joined and not left in this mastership); 0 while slave."))),
		joins: prometheus.NewCounter(prometheus.CounterOpts(opts("slave_joins_total",
			"Slave-registered events on this process as master, including the slaves already registered when a mastership begins."))),
		leaves: prometheus.NewCounter(prometheus.CounterOpts(opts("slave_leaves_total",
			"Slave-removed events on this process as master: a slave unregistered, timed out or expired."))),
		errors: counterVec(prometheus.CounterOpts(opts("errors_total",
			"Error events of the election, by kind.")), "kind", errorKinds()...),
		slaveSet: map[string]struct{}{},
	}
	em.elections.WithLabelValues("master")
	em.elections.WithLabelValues("slave")
	m.add(
		gauge("is_master", "1 while this process is master (IsMaster), else 0; read at scrape time.",
			func() float64 { return boolValue(e.IsMaster()) }),
		gauge("term", "The fencing term of this process's mastership (Term), 0 while slave; read at scrape time.",
			func() float64 { return float64(e.Term()) }),
		gauge("observed_term", "The highest term this process has seen on its lock name (ObservedTerm); read at scrape time.",
			func() float64 { return float64(e.ObservedTerm()) }),
		gauge("candidate", "1 while this process contends for mastership (Candidate), else 0; read at scrape time.",
			func() float64 { return boolValue(e.Candidate()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("dropped_error_events_total",
			"Error events dropped because a handler had 1,024 of them waiting (DroppedErrors).")),
			func() float64 { return float64(e.DroppedErrors()) }),
		em.transitions, em.elections, em.renewLatency, em.renewals, em.stepDowns,
		em.slaves, em.joins, em.leaves, em.errors,
	)
	m.detach = append(m.detach,
		e.OnEvent(em.event),
		e.Observe(masterelection.Observer{
			RenewDone:    em.renewDone,
			SteppedDown:  em.steppedDown,
			ElectionDone: em.electionDone,
		}),
	)
}

// event updates the metrics that events drive. OnEvent calls it one event
// at a time, in order.
func (em *electionMetrics) event(ev masterelection.Event) {
	switch ev.Kind {
	case masterelection.EventMasterAcquired:
		em.transitions.WithLabelValues(directionAcquired).Inc()
		em.resetSlaves()
	case masterelection.EventMasterLost:
		em.transitions.WithLabelValues(directionLost).Inc()
		em.resetSlaves()
	case masterelection.EventSlaveRegistered:
		em.joins.Inc()
		em.mu.Lock()
		em.slaveSet[ev.Slave.NodeID] = struct{}{}
		em.slaves.Set(float64(len(em.slaveSet)))
		em.mu.Unlock()
	case masterelection.EventSlaveRemoved:
		em.leaves.Inc()
		em.mu.Lock()
		delete(em.slaveSet, ev.NodeID)
		em.slaves.Set(float64(len(em.slaveSet)))
		em.mu.Unlock()
	case masterelection.EventError:
		em.errors.WithLabelValues(errorKind(ev.Err)).Inc()
	}
}

// resetSlaves forgets the slaves: a mastership begins or ends.
func (em *electionMetrics) resetSlaves() {
	em.mu.Lock()
	clear(em.slaveSet)
	em.slaves.Set(0)
	em.mu.Unlock()
}

func (em *electionMetrics) renewDone(a masterelection.RenewAttempt) {
	em.renewals.WithLabelValues(string(a.Result)).Inc()
	if a.Result == masterelection.RenewRenewed || a.Result == masterelection.RenewLockLost {
		em.renewLatency.Observe(a.Latency.Seconds())
	}
}

func (em *electionMetrics) steppedDown(s masterelection.StepDown) {
	em.stepDowns.WithLabelValues(string(s.Reason)).Inc()
}

func (em *electionMetrics) electionDone(r masterelection.ElectionResult) {
	outcome := "slave"
	if r.IsMaster {
		outcome = "master"
	}
	em.elections.WithLabelValues(outcome).Observe(r.Duration.Seconds())
}
