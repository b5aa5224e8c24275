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
	r := &member{m: m, firstRegistered: firstRegistered}
	timer := m.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case rc := <-m.roles:
			r.role, r.term, r.pending = rc.role, rc.term, true
		case <-m.infoChanged:
			r.pending = r.role != ""
		case <-timer.C():
			if wait := m.heartbeatRides(); wait > 0 {
				timer.Reset(wait) // the follow loop's checks carry the heartbeat
				continue
			}
		}
		m.beats.ride.Store(false)
		next, done := r.after(ctx, r.write(ctx))
		if done {
			return
		}
		timer.Reset(next)
	}
}

// member is the membership loop's state. Only that loop touches it.
type member struct {
	m               *MasterElection
	firstRegistered chan<- struct{}
	role            registry.Role
	term            int64
	pending         bool // the current role is not registered yet
	registered      bool // a registration succeeded: the start is over
	retry           backoff
	quiet           quietWait // the wait for another incarnation's entry to go quiet (twins.go)
}

// heartbeatRides returns how long until the membership loop must stand in
// for the follow loop's checks, which carry a slave's heartbeat while they
// may (slaveBeats); 0 when it must write now.
func (m *MasterElection) heartbeatRides() time.Duration {
	standIn := m.cfg.CheckInterval + m.cfg.CheckInterval/2
	if !m.beats.ride.Load() {
		return 0
	}
	if since := m.beats.since(m.clock.Now()); since < standIn {
		return standIn - since
	}
	return 0
}

// write registers the current role when it is pending, else heartbeats the
// entry (nothing before the election gave a role).
func (r *member) write(ctx context.Context) error {
	m := r.m
	limit := m.opTimeout()
	if !r.registered {
		limit = m.startTimeout()
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	switch {
	case r.pending:
		info := m.processInfo(r.role)
		info.Term = r.term
		if err := m.reg.Register(rctx, info); err != nil {
			return fmt.Errorf("register process as %s: %w", r.role, err)
		}
	case r.role != "":
		if err := m.reg.Heartbeat(rctx, m.cfg.NodeID); err != nil {
			return fmt.Errorf("heartbeat process: %w", err)
		}
	}
	return nil
}

// after handles the outcome of a write: it returns when to write next, or
// done when the loop ends (ctx ended, or the process steps aside for a
// twin).
func (r *member) after(ctx context.Context, err error) (next time.Duration, done bool) {
	m := r.m
	if inUse := (*registry.InUseError)(nil); errors.As(err, &inUse) && ctx.Err() == nil {
		wait, twin := m.inUse(&r.quiet, r.registered, inUse)
		if twin {
			m.stepAside(inUse)
			return 0, true
		}
		return wait, false // pending stays set: register again then
	}
	if errors.Is(err, registry.ErrNotMaster) {
		// Redis refused the master entry: this process no longer holds the
		// lock under term (a pause outlived it, say), and the entry was
		// written as a slave's. That is reported; the loop ends the
		// mastership and hands over the slave role shortly.
		m.emitError(err)
		r.role, r.term, err = registry.RoleSlave, 0, nil
	}
	next = m.cfg.CheckInterval
	if r.role == registry.RoleMaster {
		next = m.cfg.HeartbeatInterval
	}
	switch {
	case ctx.Err() != nil:
		return 0, true
	case err != nil:
		m.emitError(err)
		next = r.retry.next(m.cfg)
	default:
		r.wrote()
	}
	m.beats.ride.Store(r.role == registry.RoleSlave && r.registered && !r.pending)
	return next, false
}

// wrote records a successful write: the first registration closes
// firstRegistered.
func (r *member) wrote() {
	if !r.registered && r.pending {
		close(r.firstRegistered)
	}
	r.registered = r.registered || r.pending
	r.pending = false
	r.retry.reset()
	if r.role != "" {
		r.m.beats.wrote(r.m.clock.Now())
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
