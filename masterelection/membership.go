package masterelection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/registry"
)

// roleChange tells the membership loop this process's role as of now.
type roleChange struct {
	role registry.Role
	term int64
}

// setRole hands the latest role to the membership loop; only the latest
// matters, so an unread older value is replaced.
func (m *MasterElection) setRole(role registry.Role, term int64) {
	for {
		select {
		case m.roles <- roleChange{role, term}:
			return
		default:
		}
		select {
		case <-m.roles:
		default:
		}
	}
}

// openRegistry makes the registry, retrying while Redis is unreachable,
// until ctx ends. Errors are reported as error events.
func (m *MasterElection) openRegistry(ctx context.Context) (*registry.Registry, error) {
	var retry backoff
	var last error // the previous attempt's error
	for {
		rctx, cancel := context.WithTimeout(ctx, m.opTimeout())
		reg, err := registry.New(clock.With(rctx, m.clock), m.client, m.keys, m.registryConfig())
		cancel()
		if err == nil {
			return reg, nil
		}
		if errors.Is(err, registry.ErrInvalidConfig) {
			return nil, err
		}
		if ctx.Err() != nil {
			if last != nil {
				err = last // this attempt was cut short by ctx: the one before tells why
			}
			return nil, m.withDialCause(ctx, fmt.Errorf("open process registry: %w (last error: %w)", ctx.Err(), err), err)
		}
		last = err
		m.emitError(fmt.Errorf("open process registry: %w", err))
		timer := m.clock.NewTimer(retry.next(m.cfg))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, m.withDialCause(ctx, fmt.Errorf("open process registry: %w (last error: %w)", ctx.Err(), err), err)
		case <-timer.C():
		}
	}
}

// membership is the registry loop: it registers this process whenever its
// role changes and heartbeats its entry, every HeartbeatInterval as master
// and every CheckInterval as slave, until ctx ends. A master entry is
// fenced by Redis (registry.ErrNotMaster): once refused, the process is
// registered as a slave until the election gives it a role again.
func (m *MasterElection) membership(ctx context.Context) {
	var (
		role    registry.Role
		term    int64
		pending bool // the current role is not registered yet
		retry   backoff
	)
	timer := m.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case rc := <-m.roles:
			role, term, pending = rc.role, rc.term, true
		case <-m.infoChanged:
			pending = role != ""
		case <-timer.C():
		}
		rctx, cancel := context.WithTimeout(ctx, m.opTimeout())
		var err error
		if pending {
			info := m.processInfo(role)
			info.Term = term
			if err = m.reg.Register(rctx, info); err != nil {
				err = fmt.Errorf("register process as %s: %w", role, err)
			}
		} else if role != "" {
			if err = m.reg.Heartbeat(rctx, m.cfg.NodeID); err != nil {
				err = fmt.Errorf("heartbeat process: %w", err)
			}
		}
		cancel()
		if errors.Is(err, registry.ErrNotMaster) {
			// Redis refused the master entry: this process no longer holds
			// the lock under term (a pause outlived it, say), and the entry
			// was written as a slave's. That is reported; the loop ends the
			// mastership and hands over the slave role shortly.
			m.emitError(err)
			role, term, err = registry.RoleSlave, 0, nil
		}
		next := m.cfg.CheckInterval
		if role == registry.RoleMaster {
			next = m.cfg.HeartbeatInterval
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			m.emitError(err)
			next = retry.next(m.cfg)
		default:
			pending = false
			retry.reset()
		}
		timer.Reset(next)
	}
}

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

// Registry returns the process registry of the election, or nil before
// Start and in standalone mode.
func (m *MasterElection) Registry() *registry.Registry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reg
}

func (m *MasterElection) registry() (*registry.Registry, error) {
	if r := m.Registry(); r != nil {
		return r, nil
	}
	return nil, ErrNoRegistry
}

// RegisterProcess writes info into the registry (the specification's
// registerProcess). herd registers this process by itself; use this for
// processes herd does not run.
func (m *MasterElection) RegisterProcess(ctx context.Context, info registry.ProcessInfo) error {
	r, err := m.registry()
	if err != nil {
		return err
	}
	return r.Register(ctx, info)
}

// UpdateProcessHeartbeat renews the registry entry of a process registered
// with RegisterProcess (the specification's updateProcessHeartbeat).
func (m *MasterElection) UpdateProcessHeartbeat(ctx context.Context, processID string) error {
	r, err := m.registry()
	if err != nil {
		return err
	}
	return r.Heartbeat(ctx, processID)
}

// UnregisterProcess removes a process from the registry (the
// specification's unregisterProcess).
func (m *MasterElection) UnregisterProcess(ctx context.Context, processID string) error {
	r, err := m.registry()
	if err != nil {
		return err
	}
	return r.Unregister(ctx, processID)
}

// Processes returns every live process (the specification's getAllProcesses).
func (m *MasterElection) Processes(ctx context.Context) ([]registry.ProcessInfo, error) {
	r, err := m.registry()
	if err != nil {
		return nil, err
	}
	return r.Processes(ctx)
}

// Process returns the live process processID, or registry.ErrNotFound.
func (m *MasterElection) Process(ctx context.Context, processID string) (registry.ProcessInfo, error) {
	r, err := m.registry()
	if err != nil {
		return registry.ProcessInfo{}, err
	}
	return r.Process(ctx, processID)
}

// ProcessesByRole returns the live processes with role (the specification's
// getProcessesByRole).
func (m *MasterElection) ProcessesByRole(ctx context.Context, role registry.Role) ([]registry.ProcessInfo, error) {
	r, err := m.registry()
	if err != nil {
		return nil, err
	}
	return r.ProcessesByRole(ctx, role)
}

// MasterProcess returns the master's info (the specification's
// getMasterProcess), or registry.ErrNotFound when there is no master.
func (m *MasterElection) MasterProcess(ctx context.Context) (registry.ProcessInfo, error) {
	r, err := m.registry()
	if err != nil {
		return registry.ProcessInfo{}, err
	}
	return r.MasterProcess(ctx)
}

// Slaves returns every live slave (the specification's getSlaves).
func (m *MasterElection) Slaves(ctx context.Context) ([]registry.SlaveNode, error) {
	r, err := m.registry()
	if err != nil {
		return nil, err
	}
	return r.Slaves(ctx)
}

// Slave returns the live slave nodeID (the specification's getSlave), or
// registry.ErrNotFound.
func (m *MasterElection) Slave(ctx context.Context, nodeID string) (registry.SlaveNode, error) {
	r, err := m.registry()
	if err != nil {
		return registry.SlaveNode{}, err
	}
	return r.Slave(ctx, nodeID)
}

// SlaveCount returns the number of live slaves (the specification's getSlaveCount).
func (m *MasterElection) SlaveCount(ctx context.Context) (int, error) {
	r, err := m.registry()
	if err != nil {
		return 0, err
	}
	return r.SlaveCount(ctx)
}

// ProcessChannel returns the routing channel of the live process processID
// (the specification's getProcessChannel).
func (m *MasterElection) ProcessChannel(ctx context.Context, processID string) (string, error) {
	r, err := m.registry()
	if err != nil {
		return "", err
	}
	return r.ProcessChannel(ctx, processID)
}
