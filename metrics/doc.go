// Package metrics exposes an election, its process registry, its router, its
// subscriber and its durable consumer as Prometheus metrics, and the
// election's health as HTTP handlers for liveness and readiness probes.
//
// The library itself (masterelection, registry, pubsub, durable) does not
// depend on Prometheus: this package builds its metrics on their events, on
// their dependency-free Observer hooks and on their counters, and only
// programs that import it pull in client_golang.
//
// # Usage
//
//	reg := prometheus.NewRegistry()
//	mx, err := metrics.Register(reg, election, // before Start, to see the first election
//		metrics.WithRouter(router), metrics.WithSubscriber(subscriber),
//		metrics.WithConsumer(consumer)) // a *durable.Consumer
//	if err != nil { … }
//	defer mx.Unregister()
//
//	mux := http.NewServeMux()
//	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//	mux.Handle("/livez", metrics.Liveness(election))
//	mux.Handle("/readyz", metrics.Readiness(election, time.Second))
//
// Every metric is named herd_<subsystem>_<name> (subsystems election,
// router, subscriber, consumer), gives times in seconds (_seconds) and
// counters with _total, and carries the constant label lock (the election's lock name)
// plus those given with WithConstLabels. No label takes a node id, message
// id or other unbounded value: each label has a fixed set of values, listed
// with every metric in docs/observability.md.
//
// # What the values mean
//
// The gauges is_master, term, observed_term and candidate are read from the
// election when scraped, so is_master turns 0 the instant the master fences
// itself; so are the consumer's metrics, from its counters. The counters and
// histograms of the election are updated by its events (delivered to a
// handler goroutine, so a scrape right after an event may not show it yet)
// and by its Observer hooks (synchronously). What happened
// before Register is not counted: register before Start.
//
// # What is not guaranteed
//
// Counters count what this process saw: summed over a fleet they describe
// the fleet only as far as every process is scraped. A master counts each
// slave's join once per mastership (a new mastership counts every
// registered slave again). The router counts a message delivered when
// Redis handed it to a subscriber's connection, not when a handler ran:
// the subscriber's handled count says that, on the slave.
package metrics
