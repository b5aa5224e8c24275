package masterelection

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
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

// slaveBeats is how a slave's registry heartbeat rides its periodic look at
// the lock (scripts.CheckBeat): one script call per CheckInterval instead
// of two. The membership loop says when the slave's heartbeat may ride
// (the slave role is registered and nothing is pending) and sends it
// itself only when none rode for 1.5 CheckInterval (the follow loop was
// contending, waiting out a data loss, or failing).
type slaveBeats struct {
	ride atomic.Bool  // the follow loop may send the heartbeat (set by the membership loop)
	last atomic.Int64 // when the entry was last written, by either loop (m.clock, UnixNano)
}

// wrote records a write of the entry at t.
func (b *slaveBeats) wrote(t time.Time) { b.last.Store(t.UnixNano()) }

// since is how long ago the entry was last written.
func (b *slaveBeats) since(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, b.last.Load()))
}

// due tells the follow loop, at now, to send the heartbeat with its check:
// it may, and the last write is half a CheckInterval old (a check sent
// sooner after a notice carries none).
func (m *MasterElection) beatDue(now time.Time) bool {
	return m.beats.ride.Load() && m.beats.since(now) >= m.cfg.CheckInterval/2
}

// checkBeat is the follow loop's check with the slave's heartbeat in the
// same script call. It falls back to a plain check when the registry has
// no entry of this process to renew. A heartbeat that fails on its own
// (the check answered) is an error event, as the membership loop's.
func (m *MasterElection) checkBeat(ctx context.Context) (scripts.MasterState, error) {
	reg := m.Registry()
	if reg == nil {
		return scripts.Check(ctx, m.client, m.keys)
	}
	var st scripts.MasterState
	var callErr error
	sent := false
	err := reg.HeartbeatWith(ctx, m.cfg.NodeID, func(ctx context.Context, p scripts.Put) (scripts.Stored, error) {
		sent = true
		var stored scripts.Stored
		var beatErr error
		st, stored, beatErr, callErr = scripts.CheckBeat(ctx, m.client, m.keys, p)
		if callErr != nil {
			return scripts.Stored{}, callErr
		}
		return stored, beatErr
	})
	switch {
	case !sent:
		return scripts.Check(ctx, m.client, m.keys)
	case callErr != nil:
		return scripts.MasterState{}, callErr
	case m.stepAsideIfTwin(err):
	case err != nil:
		m.emitError(fmt.Errorf("heartbeat process: %w", err))
	default:
		m.beats.wrote(m.clock.Now())
	}
	return st, nil
}

// membership is the registry loop: it registers this process whenever its
// role changes and heartbeats its entry, every HeartbeatInterval as master
// and every CheckInterval as slave, until ctx ends. A slave's heartbeat
// rides the follow loop's check (slaveBeats) once its role is registered:
// the loop then only stands in when none rode. A master entry is fenced by
// Redis (registry.ErrNotMaster): once refused, the process is registered as
// a slave until the election gives it a role again.
//
// It closes firstRegistered at its first registration.
func (m *MasterElection) membership(ctx context.Context, firstRegistered chan<- struct{}) {
	var (
		role       registry.Role
		term       int64
		pending    bool // the current role is not registered yet
		registered bool // a registration succeeded: the start is over
		retry      backoff
		quiet      quietWait // the wait for another incarnation's entry to go quiet (twins.go)
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
			if standIn := m.cfg.CheckInterval + m.cfg.CheckInterval/2; m.beats.ride.Load() {
				if since := m.beats.since(m.clock.Now()); since < standIn {
					timer.Reset(standIn - since) // the follow loop's checks carry the heartbeat
					continue
				}
			}
		}
		m.beats.ride.Store(false)
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
		if inUse := (*registry.InUseError)(nil); errors.As(err, &inUse) && ctx.Err() == nil {
			wait, twin := m.inUse(&quiet, registered, inUse)
			if twin {
				m.stepAside(inUse)
				return
			}
			timer.Reset(wait) // pending stays set: register again then
			continue
		}
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
			if !registered && pending {
				close(firstRegistered)
			}
			registered = registered || pending
			pending = false
			retry.reset()
			if role != "" {
				m.beats.wrote(m.clock.Now())
			}
		}
		m.beats.ride.Store(role == registry.RoleSlave && registered && !pending)
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
		Quiet:      m.quiet(),
	}
}
