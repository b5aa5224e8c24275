package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herdkit/herd/pubsub"
)

// watchRouter makes the router's metrics and observes it.
func (m *Metrics) watchRouter(r *pubsub.Router, labels prometheus.Labels) {
	routed := counterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystemRouter, Name: "messages_total", ConstLabels: labels,
		Help: "Messages routed by this process as master, by outcome: delivered, no_subscriber, not_master, fenced, invalid, error.",
	}, "outcome",
		string(pubsub.RouteDelivered), string(pubsub.RouteNoSubscriber), string(pubsub.RouteNotMaster),
		string(pubsub.RouteFenced), string(pubsub.RouteInvalid), string(pubsub.RouteFailed))
	m.add(routed)
	m.detach = append(m.detach, r.Observe(pubsub.Observer{
		Routed: func(outcome pubsub.RouteOutcome, n int) {
			routed.WithLabelValues(string(outcome)).Add(float64(n))
		},
	}))
}

// watchSubscriber makes the subscriber's metrics and observes it.
func (m *Metrics) watchSubscriber(s *pubsub.Subscriber, labels prometheus.Labels) {
	received := counterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystemSubscriber, Name: "messages_total", ConstLabels: labels,
		Help: "Messages received on this process's slave channel (and refused notices), by outcome: handled, or the reason they were rejected or failed.",
	}, "outcome",
		string(pubsub.ReceiveHandled), string(pubsub.ReceiveHandlerError), string(pubsub.ReceiveHandlerPanic),
		string(pubsub.ReceiveUnknownType), string(pubsub.ReceiveStaleTerm), string(pubsub.ReceiveUnverifiedTerm),
		string(pubsub.ReceiveMalformed), string(pubsub.ReceiveTooLarge))
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
