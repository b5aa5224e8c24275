package masterelection

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/registry"
)

// trackSlaves runs the slave tracker for mastership l until it ends. Its
// slave events go through slaveEvent, so none is emitted by a process that
// is not master at that instant, and none follows the master-lost of l.
func (m *MasterElection) trackSlaves(l *leadership) {
	defer m.bg.Done()
	tracker, err := registry.NewSlaveTracker(m.reg, registry.TrackerConfig{
		SlaveTimeout:  m.cfg.SlaveTimeout,
		SweepInterval: m.cfg.CheckInterval,
		Self:          m.cfg.NodeID,
		OnJoin: func(s registry.SlaveNode) {
			m.slaveEvent(l, topicSlaveRegistered, payload{slave: s})
		},
		OnLeave: func(id string) {
			m.slaveEvent(l, topicSlaveRemoved, payload{nodeID: id})
		},
		OnError: func(err error) { m.emitError(fmt.Errorf("track slaves: %w", err)) },
	})
	if err != nil {
		m.emitError(fmt.Errorf("track slaves: %w", err))
		return
	}
	// The registry's notices go to their own channel, which only the master
	// listens to. Subscribing before Run (whose first sweep reads the whole
	// registry) loses no registration in between.
	ps := m.client.Subscribe(l.ctx, m.keys.RegistryEvents)
	defer ps.Close()
	if _, err := ps.Receive(l.ctx); err != nil && l.ctx.Err() == nil {
		m.emitError(fmt.Errorf("track slaves: subscribe to %s: %w", m.keys.RegistryEvents, err))
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		for msg := range ps.Channel(redis.WithChannelHealthCheckInterval(healthCheckInterval)) {
			tracker.Notice([]byte(msg.Payload))
		}
	}()
	if err := tracker.Run(l.ctx); err != nil {
		m.emitError(fmt.Errorf("track slaves: %w", err))
	}
}

// slaveEvent emits a slave event of mastership l, only while l is this
// process's mastership and its self-fencing deadline has not passed: the
// tracker may reach an event after the deadline before the loop has ended
// l (a process resumed after a pause runs both at once), and a process that
// IsMaster calls slave must not report slaves. It runs under trackMu, which
// endLeadership holds to emit master-lost, so no slave event of l follows it.
// An event not emitted is not reported later: the next mastership starts
// from every slave registered.
func (m *MasterElection) slaveEvent(l *leadership, topic string, p payload) {
	m.trackMu.Lock()
	defer m.trackMu.Unlock()
	if l.ctx.Err() != nil || m.lead.Load() != l || !m.holds(l, m.clock.Now()) {
		m.log.Debug().Str("event", topic).Int64("term", l.term).Msg("slave event dropped: no longer master")
		return
	}
	m.bus.emit(topic, p)
}
