package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herdkit/herd/durable"
)

// Outcomes of herd_consumer_messages_total, the values of its outcome label.
const (
	// consumerHandled counts entries handled and acknowledged
	// (Consumer.Handled).
	consumerHandled = "handled"
	// consumerFailed counts deliveries that failed: a handler error or
	// panic, no handler, an acknowledgement or term check that did not go
	// through (Consumer.Failed). Each failed entry is delivered again, or
	// becomes a dead letter.
	consumerFailed = "failed"
	// consumerStaleTerm counts entries left unhandled for a term older than
	// the highest seen, for the new master to adopt (Consumer.Rejected).
	consumerStaleTerm = "stale_term"
	// consumerUnverifiedTerm counts entries refused because Redis did not
	// confirm their term (Consumer.Unverified).
	consumerUnverifiedTerm = "unverified_term"
	// consumerDead counts entries moved to the dead-letter stream after
	// Config.MaxDeliveries deliveries (Consumer.Dead).
	consumerDead = "dead"
)

// watchConsumer makes the metrics of a durable Consumer. They are read from
// its counters at scrape time: a Consumer has no observer hooks.
func (m *Metrics) watchConsumer(c *durable.Consumer, labels prometheus.Labels) {
	m.add(outcomeCounters(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystemConsumer, Name: "messages_total", ConstLabels: labels,
		Help: "Entries of this process's durable inbox, by outcome: handled; failed (per delivery: delivered again, or dead at the last); stale_term, unverified_term (not handled); dead (moved to the dead letters). Read from the Consumer at scrape time.",
	}, outcomeFunc{consumerHandled, c.Handled}, outcomeFunc{consumerFailed, c.Failed}, outcomeFunc{consumerStaleTerm, c.Rejected},
		outcomeFunc{consumerUnverifiedTerm, c.Unverified}, outcomeFunc{consumerDead, c.Dead})...)
	m.add(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystemConsumer, Name: "redelivered_total", ConstLabels: labels,
			Help: "Deliveries of entries delivered before (Consumer.Redelivered): after a failure, or a stop before the acknowledgement; read at scrape time.",
		}, func() float64 { return float64(c.Redelivered()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystemConsumer, Name: "highest_term", ConstLabels: labels,
			Help: "The fence of the consumer: the highest master term it has seen (HighestTerm); read at scrape time.",
		}, func() float64 { return float64(c.HighestTerm()) }),
	)
}
