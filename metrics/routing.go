package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herdkit/herd/pubsub"
)

// watchRouter makes the router's metrics and observes it.
func (m *Metrics) watchRouter(r *pubsub.Router, labels prometheus.Labels) {
	routed := messagesByOutcome(subsystemRouter, labels,
		"Messages routed by this process as master, by outcome: delivered, no_subscriber, not_master, fenced, invalid, error.",
		pubsub.RouteDelivered, pubsub.RouteNoSubscriber, pubsub.RouteNotMaster,
		pubsub.RouteFenced, pubsub.RouteInvalid, pubsub.RouteFailed)
	m.add(routed)
	m.detach = append(m.detach, r.Observe(pubsub.Observer{
		Routed: func(outcome pubsub.RouteOutcome, n int) {
			routed.WithLabelValues(string(outcome)).Add(float64(n))
		},
	}))
}

// watchSubscriber makes the subscriber's metrics and observes it.
func (m *Metrics) watchSubscriber(s *pubsub.Subscriber, labels prometheus.Labels) {
	received := messagesByOutcome(subsystemSubscriber, labels,
		"Messages received on this process's slave channel (and refused notices), by outcome: handled, or the reason they were rejected or failed.",
		pubsub.ReceiveHandled, pubsub.ReceiveHandlerError, pubsub.ReceiveHandlerPanic,
		pubsub.ReceiveUnknownType, pubsub.ReceiveStaleTerm, pubsub.ReceiveUnverifiedTerm,
		pubsub.ReceiveMalformed, pubsub.ReceiveTooLarge, pubsub.ReceiveDropped)
	m.add(
		received,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystemSubscriber, Name: "highest_term", ConstLabels: labels,
			Help: "The fence of the subscriber: the highest master term it has verified (HighestTerm); read at scrape time.",
		}, func() float64 { return float64(s.HighestTerm()) }),
	)
	m.detach = append(m.detach, s.Observe(pubsub.Observer{
		Received: func(outcome pubsub.ReceiveOutcome) {
			received.WithLabelValues(string(outcome)).Inc()
		},
	}))
}

// messagesByOutcome returns the counter herd_<subsystem>_messages_total
// with its label outcome, every one of outcomes already at 0 (counterVec).
func messagesByOutcome[O ~string](subsystem string, labels prometheus.Labels, help string, outcomes ...O) *prometheus.CounterVec {
	values := make([]string, len(outcomes))
	for i, o := range outcomes {
		values[i] = string(o)
	}
	return counterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "messages_total", ConstLabels: labels, Help: help,
	}, "outcome", values...)
}
