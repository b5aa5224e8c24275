package dashboard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/herdkit/herd/registry"
)

// collector reports the herd as the dashboard's watcher last read it. Every
// metric is named herd_cluster_* (the herd as seen from outside, apart from
// the herd_election_* metrics a process reports about itself) and carries
// the label lock.
type collector struct {
	h                                              *hub
	up, hasMaster, term, held, processes, warnings *prometheus.Desc
	failovers, lastGap, deadLetters                *prometheus.Desc
}

func newCollector(h *hub) *collector {
	lock := prometheus.Labels{"lock": h.conn.Lock}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("herd_cluster_"+name, help, labels, lock)
	}
	return &collector{
		h:           h,
		up:          desc("up", "1 when the last read of Redis succeeded, else 0."),
		hasMaster:   desc("has_master", "1 when a process holds the lock, else 0."),
		term:        desc("term", "The fencing term of the current master; 0 without a master."),
		held:        desc("master_held_seconds", "How long the current master has held the lock; 0 without a master."),
		processes:   desc("processes", "Registered processes, by role.", "role"),
		warnings:    desc("warnings", "Inconsistencies the last read found (herd status lists them)."),
		failovers:   desc("failovers_total", "Failovers (a new master after another) seen since the dashboard started."),
		lastGap:     desc("last_failover_gap_seconds", "The time without a master of the last failover seen."),
		deadLetters: desc("dead_letters", "Dead letters of durable routing (herd dead list); absent when they cannot be counted."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.hasMaster, c.term, c.held, c.processes, c.warnings, c.failovers, c.lastGap, c.deadLetters} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; it reports nothing before the
// first read.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	g, ok := c.h.gauges()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.up, b2f(g.up))
	gauge(c.hasMaster, b2f(g.hasMaster))
	gauge(c.term, float64(g.term))
	gauge(c.held, max(g.held.Seconds(), 0))
	for _, r := range []registry.Role{registry.RoleMaster, registry.RoleSlave} {
		gauge(c.processes, float64(g.byRole[r]), string(r))
	}
	gauge(c.warnings, float64(g.warnings))
	ch <- prometheus.MustNewConstMetric(c.failovers, prometheus.CounterValue, float64(g.failovers))
	gauge(c.lastGap, g.lastGap.Seconds())
	if g.deadLetters >= 0 {
		gauge(c.deadLetters, float64(g.deadLetters))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
