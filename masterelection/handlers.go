package masterelection

import (
	"context"
	"sync"

	"github.com/herdkit/herd/registry"
)

// OnMasterAcquired registers fn for master-acquired: this process became
// master with the given term. ctx is done the moment the mastership ends
// (lock lost, self-fencing deadline passed, Transfer, or Stop), never later
// than IsMaster turns false, so fn may run the master's work until ctx is
// done; Stop waits for fn to return before it releases the lock, for as long
// as Stop's ctx allows (see Stop for what happens when it ends first). Like every
// handler, fn runs on a goroutine of its own, never on the election's loop
// (see the package documentation, "Event handlers").
func (m *MasterElection) OnMasterAcquired(fn func(ctx context.Context, term int64)) (unsubscribe func()) {
	return m.bus.subscribe(topicMasterAcquired, func(p payload) { fn(p.mastership.ctx, p.term) })
}

// OnMasterLost registers fn for master-lost: this process is no longer
// master. It follows every master-acquired exactly once.
// fn runs on a goroutine of its own, one event at a time in order; Stop
// waits, bounded by its ctx, for fn to finish the events already queued
// (package documentation, "Event handlers").
func (m *MasterElection) OnMasterLost(fn func()) (unsubscribe func()) {
	return m.bus.subscribe(topicMasterLost, func(payload) { fn() })
}

// OnElectionStarted registers fn for election-started: this process is
// about to contend for the lock (at Start, and whenever it found the lock
// free while slave). A process with Config.NonCandidate emits it once, at
// Start.
// fn runs on a goroutine of its own, one event at a time in order; Stop
// waits, bounded by its ctx, for fn to finish the events already queued
// (package documentation, "Event handlers").
func (m *MasterElection) OnElectionStarted(fn func()) (unsubscribe func()) {
	return m.bus.subscribe(topicElectionStarted, func(payload) { fn() })
}

// OnElectionCompleted registers fn for election-completed: the election
// that election-started announced has resolved, with this process as master
// (after master-acquired) or as slave.
// fn runs on a goroutine of its own, one event at a time in order; Stop
// waits, bounded by its ctx, for fn to finish the events already queued
// (package documentation, "Event handlers").
func (m *MasterElection) OnElectionCompleted(fn func(isMaster bool)) (unsubscribe func()) {
	return m.bus.subscribe(topicElectionCompleted, func(p payload) { fn(p.isMaster) })
}

// OnSlaveRegistered registers fn for slave-registered, emitted on the master
// when a slave joins. When this process becomes master it is emitted once
// for every slave already registered, so a handler that builds its view
// from these events alone starts from the full set.
// fn runs on a goroutine of its own, one event at a time in order; Stop
// waits, bounded by its ctx, for fn to finish the events already queued
// (package documentation, "Event handlers").
func (m *MasterElection) OnSlaveRegistered(fn func(registry.SlaveNode)) (unsubscribe func()) {
	return m.bus.subscribe(topicSlaveRegistered, func(p payload) { fn(p.slave) })
}

// OnSlaveRemoved registers fn for slave-removed, emitted on the master when
// a slave unregisters, stops heartbeating for longer than the slave timeout,
// or its registry entry expires. Each leave is reported once per mastership.
// fn runs on a goroutine of its own, one event at a time in order; Stop
// waits, bounded by its ctx, for fn to finish the events already queued
// (package documentation, "Event handlers").
func (m *MasterElection) OnSlaveRemoved(fn func(nodeID string)) (unsubscribe func()) {
	return m.bus.subscribe(topicSlaveRemoved, func(p payload) { fn(p.nodeID) })
}

// OnError registers fn for error events: Redis errors of the loops (which
// keep retrying), unexpected values found in herd's keys, and handler
// panics. Errors are wrapped with what was being done; use errors.Is, and
// Transient to tell a failover's errors, which heal by themselves, from
// those that need a person. fn
// runs on a goroutine of its own, in order; at most 1,024 error events wait
// for it, further ones are dropped and counted (DroppedErrors). Stop waits,
// bounded by its ctx, for fn to finish the events already queued (package
// documentation, "Event handlers").
func (m *MasterElection) OnError(fn func(error)) (unsubscribe func()) {
	return m.bus.subscribe(topicError, func(p payload) { fn(p.err) })
}

// OnEvent registers fn for every event of this election. Unlike handlers
// registered per event, fn sees all of them in the one order they happened
// (master-acquired before its election-completed, for example), one at a
// time on a goroutine of its own; Stop waits, bounded by its ctx, for fn to
// finish the events already queued (package documentation, "Event
// handlers").
func (m *MasterElection) OnEvent(fn func(Event)) (unsubscribe func()) {
	return m.bus.subscribe(topicAll, func(p payload) {
		fn(Event{Kind: EventKind(p.topic), Term: p.term, IsMaster: p.isMaster, Slave: p.slave, NodeID: p.nodeID, Reason: p.reason, Err: p.err})
	})
}

// DroppedErrors returns how many error events were dropped because a
// handler had 1,024 of them waiting.
func (m *MasterElection) DroppedErrors() uint64 { return m.bus.droppedErrors() }

// Observe adds o to the election's observers and returns the function that
// removes it. It may be called at any time, before or after Start; what
// happened before it was called is not reported.
func (m *MasterElection) Observe(o Observer) (remove func()) {
	p := &o
	m.bus.obs.add(p, m.clock.Now)
	var once sync.Once
	return func() { once.Do(func() { m.bus.obs.remove(p) }) }
}
