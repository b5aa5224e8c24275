package masterelection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/beat"
	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

// checkBeat is the follow loop's check with the slave's heartbeat in the
// same script call. It falls back to a plain check when the registry has
// no entry of this process to renew. A heartbeat that fails on its own
// (the check answered) is an error event, as the membership loop's.
func (mb *membership) checkBeat(ctx context.Context) (rdb.MasterState, error) {
	reg := mb.registry()
	if reg == nil {
		return rdb.Check(ctx, mb.client, mb.keys)
	}
	var st rdb.MasterState
	var callErr error
	sent := false
	err := beat.HeartbeatWith(ctx, reg, mb.cfg.NodeID, func(ctx context.Context, p rdb.Put) (rdb.Stored, error) {
		sent = true
		var stored rdb.Stored
		var beatErr error
		st, stored, beatErr, callErr = rdb.CheckBeat(ctx, mb.client, mb.keys, p)
		if callErr != nil {
			return rdb.Stored{}, callErr
		}
		return stored, beatErr
	})
	switch {
	case !sent:
		return rdb.Check(ctx, mb.client, mb.keys)
	case callErr != nil:
		return rdb.MasterState{}, callErr
	case mb.stepAsideIfTwin(err):
	case err != nil:
		mb.emitError(fmt.Errorf("heartbeat process: %w", err))
	default:
		mb.beats.wrote(mb.clock.Now())
	}
	return st, nil
}

// startLoop starts the registry loop (loop) until ctx ends or halt is
// called; halt also waits for it to return. The loop closes registered at
// the first registration.
func (mb *membership) startLoop(ctx context.Context) (halt func()) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	mb.bg.Add(1)
	go func() {
		defer mb.bg.Done()
		defer close(done)
		mb.loop(lctx, mb.registered)
	}()
	return func() {
		cancel()
		<-done
	}
}

// wait waits for every goroutine membership started: the loop and the
// slave trackers of masterships that have ended.
func (mb *membership) wait() { mb.bg.Wait() }

// loop is the registry loop: it registers this process whenever its
// role changes and heartbeats its entry, every HeartbeatInterval as master
// and every CheckInterval as slave, until ctx ends. A slave's heartbeat
// rides the follow loop's check (slaveBeats) once its role is registered:
// the loop then only stands in when none rode. A master entry is fenced by
// Redis (registry.ErrNotMaster): once refused, the process is registered as
// a slave until the election gives it a role again.
//
// It closes firstRegistered at its first registration.
func (mb *membership) loop(ctx context.Context, firstRegistered chan<- struct{}) {
	r := &member{mb: mb, firstRegistered: firstRegistered}
	timer := mb.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		written := false // the role came registered (the acquire's call)
		select {
		case <-ctx.Done():
			return
		case rc := <-mb.roles:
			r.role, r.term, r.pending, r.track, r.of = rc.role, rc.term, true, rc.track, rc.track
			// An info change since Start's acquire took the info it
			// registered (a handler of its master-acquired calling
			// SetMetadata): write the role again.
			written = rc.written && mb.acquireInfo.Load() == mb.infoGen.Load()
			r.byAcquire = rc.written
		case <-mb.infoChanged:
			if r.role != "" && r.byAcquire && mb.acquireInfo.Load() == mb.infoGen.Load() {
				// A change made before Start's acquire read the info
				// (metadata set between New and Start): the role's
				// registration carried it.
				continue
			}
			r.pending = r.role != ""
		case <-timer.C():
			if wait := mb.heartbeatRides(); wait > 0 {
				timer.Reset(wait) // the follow loop's checks carry the heartbeat
				continue
			}
		}
		mb.beats.ride.Store(false)
		var err error
		if !written || !mb.recordedAs(r.role, r.term) {
			// Not registered by the acquire, or a write of the role before
			// landed after it (a SetMetadata, a registration in flight):
			// write the role now.
			err = r.write(ctx)
		}
		next, done := r.after(ctx, err)
		if done {
			return
		}
		if r.track != nil { // the master's registration had its first attempt (answered, failed or refused)
			mb.startTracker(r.track)
			r.track = nil
		}
		timer.Reset(next)
	}
}

// member is the membership loop's state. Only that loop touches it.
type member struct {
	mb              *membership
	firstRegistered chan<- struct{}
	role            registry.Role
	term            int64
	pending         bool        // the current role is not registered yet
	track           *mastership // the mastership whose tracker starts after the next write; nil when none
	byAcquire       bool        // the role came registered by Start's acquire (with the info of generation acquireInfo)
	of              *mastership // the mastership the master role is for; nil for a slave
	registered      bool        // a registration succeeded: the start is over
	retry           backoff
	quiet           quietWait // the wait for another incarnation's entry to go quiet (twins.go)
}

// heartbeatRides returns how long until the membership loop must stand in
// for the follow loop's checks, which carry a slave's heartbeat while they
// may (slaveBeats); 0 when it must write now.
func (mb *membership) heartbeatRides() time.Duration {
	standIn := slaveBeatStandIn(mb.cfg.CheckInterval)
	if !mb.beats.ride.Load() {
		return 0
	}
	if since := mb.beats.since(mb.clock.Now()); since < standIn {
		return standIn - since
	}
	return 0
}

// write registers the current role when it is pending, else heartbeats the
// entry (nothing before the election gave a role).
func (r *member) write(ctx context.Context) error {
	mb := r.mb
	limit := mb.opTimeout()
	if !r.registered {
		limit = mb.startTimeout()
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	switch {
	case r.pending:
		info := mb.processInfo(r.role)
		info.Term = r.term
		if err := mb.reg.Register(rctx, info); err != nil {
			return fmt.Errorf("register process as %s: %w", r.role, err)
		}
	case r.role != "":
		if err := mb.reg.Heartbeat(rctx, mb.cfg.NodeID); err != nil {
			return fmt.Errorf("heartbeat process: %w", err)
		}
	}
	return nil
}

// after handles the outcome of a write: it returns when to write next, or
// done when the loop ends (ctx ended, or the process steps aside for a
// twin).
func (r *member) after(ctx context.Context, err error) (next time.Duration, done bool) {
	mb := r.mb
	if inUse := (*registry.InUseError)(nil); errors.As(err, &inUse) && ctx.Err() == nil {
		return r.idInUse(inUse)
	}
	if errors.Is(err, registry.ErrNotMaster) {
		// Redis refused the master entry: this process no longer holds the
		// lock under term, and the entry was written as a slave's. When
		// the process gave the lock up itself while the write was on its
		// way (a hand-over after SetCandidate(false), whose new entry this
		// write carried, or a Transfer), that is expected; otherwise (a
		// pause outlived the lock, say) it is reported. Either way the
		// loop ends the mastership and hands over the slave role shortly.
		if r.of != nil && r.of.resigned.Load() {
			mb.log.Debug().Err(err).Msg("master entry written after the lock was given up: stored as a slave's")
		} else {
			mb.emitError(err)
		}
		r.role, r.term, err = registry.RoleSlave, 0, nil
	}
	switch {
	case ctx.Err() != nil:
		return 0, true
	case err != nil:
		mb.emitError(err)
		next = r.retry.next(mb.cfg)
	default:
		r.wrote()
		next = r.interval()
	}
	mb.beats.ride.Store(r.role == registry.RoleSlave && r.registered && !r.pending)
	return next, false
}

// idInUse handles a write refused because another incarnation wrote the
// node id's entry lately: wait to see whether it lives, or, once it is
// known to, step aside (done). pending stays set: the loop registers again
// after the wait.
func (r *member) idInUse(e *registry.InUseError) (next time.Duration, done bool) {
	wait, twin := r.mb.inUse(&r.quiet, r.registered, e)
	if twin {
		r.mb.stepAside(e)
		return 0, true
	}
	return wait, false
}

// interval is the time between heartbeats of the current role: the
// master's HeartbeatInterval, else the slaves' CheckInterval.
func (r *member) interval() time.Duration {
	if r.role == registry.RoleMaster {
		return r.mb.cfg.HeartbeatInterval
	}
	return r.mb.cfg.CheckInterval
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
		r.mb.beats.wrote(r.mb.clock.Now())
	}
}

// openRegistry makes the registry, retrying while Redis is unreachable,
// until ctx ends. Errors are reported as error events.
func (mb *membership) openRegistry(ctx context.Context) (*registry.Registry, error) {
	var retry backoff
	var last error // the previous attempt's error
	for {
		rctx, cancel := context.WithTimeout(ctx, mb.startTimeout())
		reg, err := registry.New(clock.With(rctx, mb.clock), mb.client, mb.keys, mb.registryConfig())
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
			return nil, mb.withDialCause(ctx, fmt.Errorf("open process registry: %w (last error: %w)", ctx.Err(), err), err)
		}
		last = err
		mb.emitError(fmt.Errorf("open process registry: %w", err))
		timer := mb.clock.NewTimer(retry.next(mb.cfg))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, mb.withDialCause(ctx, fmt.Errorf("open process registry: %w (last error: %w)", ctx.Err(), err), err)
		case <-timer.C():
		}
	}
}

// registryConfig is the configuration of the election's registry, for
// openFirst and openRegistry's attempts.
func (mb *membership) registryConfig() registry.Config {
	return registry.Config{
		ProcessTTL: mb.cfg.ProcessTTL,
		Backend:    mb.cfg.RegistryBackend,
		Logger:     mb.log,
		OnError:    mb.emitError,
		Quiet:      mb.quiet(),
	}
}
