package masterelection

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// membership is the registry loop: it registers this process whenever its
// role changes and heartbeats its entry, every HeartbeatInterval as master
// and every CheckInterval as slave, until ctx ends. A master entry is
// fenced by Redis (registry.ErrNotMaster): once refused, the process is
// registered as a slave until the election gives it a role again.
func (m *MasterElection) membership(ctx context.Context) {
	var (
		role       registry.Role
		term       int64
		pending    bool // the current role is not registered yet
		registered bool // a registration succeeded: the start is over
		retry      backoff
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
		limit := m.opTimeout()
		if !registered {
			limit = m.startTimeout()
		}
		rctx, cancel := context.WithTimeout(ctx, limit)
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
			registered = registered || pending
			pending = false
			retry.reset()
		}
		timer.Reset(next)
	}
}

// openRegistry makes the registry, retrying while Redis is unreachable,
// until ctx ends. Errors are reported as error events.
func (m *MasterElection) openRegistry(ctx context.Context) (*registry.Registry, error) {
	var retry backoff
	var last error // the previous attempt's error
	for {
		rctx, cancel := context.WithTimeout(ctx, m.startTimeout())
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

// registryConfig is the configuration of the election's registry, for
// openFirst and openRegistry's attempts.
func (m *MasterElection) registryConfig() registry.Config {
	return registry.Config{
		ProcessTTL: m.cfg.ProcessTTL,
		Backend:    m.cfg.RegistryBackend,
		Logger:     m.log,
		OnError:    m.emitError,
	}
}
