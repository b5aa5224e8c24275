package metrics

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herdkit/herd/assign"
)

// watchWorker makes the metrics of an assign Worker, read from it at scrape
// time, labelled with its item set.
func (m *Metrics) watchWorker(w *assign.Worker, labels prometheus.Labels) {
	l := maps.Clone(labels)
	l["set"] = w.Set()
	m.add(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystemAssign, Name: "owned_items", ConstLabels: l,
		Help: "Items of the set this process owns now (Worker.Owned); read at scrape time.",
	}, func() float64 { return float64(len(w.Owned())) }))
	m.add(outcomeCounters(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystemAssign, Name: "ownership_changes_total", ConstLabels: l,
		Help: "Items this process came to own (claimed), gave up because the plan moved them (revoked), or lost because it could not renew in time (expired); read at scrape time.",
	}, outcomeFunc{"claimed", w.Claimed}, outcomeFunc{"revoked", w.Revoked}, outcomeFunc{"expired", w.Expired})...)
}

// watchPlanner makes the metrics of an assign Planner, read from it at
// scrape time, labelled with its item set. They move only while this
// process is master.
func (m *Metrics) watchPlanner(p *assign.Planner, labels prometheus.Labels) {
	l := maps.Clone(labels)
	l["set"] = p.Set()
	m.add(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystemAssign, Name: "unassigned_items", ConstLabels: l,
			Help: "Items of the set no slave had room for in this process's last plan (Planner.Last); read at scrape time.",
		}, func() float64 { return float64(len(p.Last().Unassigned)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystemAssign, Name: "plan_moves_total", ConstLabels: l,
			Help: "Item owners this process's plans changed in Redis (Planner.Moves); read at scrape time.",
		}, func() float64 { return float64(p.Moves()) }),
	)
}
