package masterelection

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// subscription is the election's subscription to its events channel (and
// control channel), made by Start while the rest of Start goes on.
type subscription struct {
	ps *redis.PubSub
	// ready is closed when the subscription is confirmed by the server or
	// its attempts have failed (then go-redis keeps subscribing again by
	// itself once listen reads ps, and polling covers the gap); confirmed
	// is closed only in the first case, before ready.
	ready, confirmed chan struct{}
	cancel           context.CancelFunc // ends the attempts
}

// close ends the attempts, closes the subscription and waits for the
// goroutine that made it.
func (s *subscription) close() {
	s.cancel()
	_ = s.ps.Close()
	<-s.ready
}

// prepare does what Start needs before the election loop runs: it opens
// the process registry (membership and slave tracking need it from the
// first election on), reads the eviction policy and refuses a lock key that
// holds garbage, and it subscribes to the events channel. The questions
// these put to Redis (the registry's backend probe, INFO memory, the lock
// check) go out as one pipeline, one round trip on one connection (ask);
// the subscription, which dials a connection of its own, goes on meanwhile,
// and while the loop makes its first attempt (follow checks the lock again
// if that attempt was answered before the subscription was in place, and
// Start returns only once it is). Start thus waits for the slower of the
// two, not for their sum (docs/performance.md, row 3s). What Redis did not
// answer at first (it was unreachable, and the registry kept probing until
// it answered) is asked again once the registry is open, so a Redis that
// comes up late gets the same checks as one that was there all along.
// runCtx ends when Stop is called.
//
// The subscription is returned for run; on an error Start fails, and
// every goroutine prepare started has returned.
func (m *MasterElection) prepare(ctx, runCtx context.Context) (*subscription, error) {
	openCtx, stopOpen := context.WithCancel(ctx)
	defer stopOpen()
	go func() {
		select {
		case <-runCtx.Done(): // Stop while Start waits
			stopOpen()
		case <-openCtx.Done():
		}
	}()

	opened := make(chan struct{}) // the registry is open: Redis answers
	sub := m.subscribe(runCtx, opened)
	first := m.ask(openCtx)
	if first.refused != nil { // no election can work as this user
		sub.close()
		return nil, first.refused
	}
	reg, err := m.openFirst(openCtx, first)
	if err != nil {
		sub.close()
		return nil, err
	}
	close(opened)
	m.mu.Lock()
	m.reg = reg
	m.mu.Unlock()

	eviction := first.eviction
	if eviction.err != nil && !eviction.refused() {
		eviction = m.readEviction(openCtx)
	}
	m.reportEviction(eviction)
	garbage, answered := first.garbage, first.checked
	if !answered {
		garbage, _ = m.garbageLock(openCtx)
	}
	if garbage != nil { // no election can work on this lock
		sub.close()
		return nil, garbage
	}
	return sub, nil
}

// answers is what Start's first round trip (ask) found.
type answers struct {
	probed   *registry.Probed // the registry's backend probe; nil when it failed
	probeErr error            // why it failed
	eviction evictionRead
	garbage  error // the lock check's verdict (garbageLock), when checked
	checked  bool  // the lock check was answered
	refused  error // the user cannot work at all (refusal), wrapping ErrPermission
}

// refusal returns an error wrapping ErrPermission when Redis refused the
// user (a wrong password: the pipeline's error pipeErr) or the user's ACL
// refuses commands the election runs (access's answer), naming what Redis
// said; nil otherwise, also when the access check could not run for another
// reason (Redis unreachable: Start's other questions report that).
func (m *MasterElection) refusal(pipeErr error, access *scripts.AccessCall) error {
	// The pipeline's error is that of its first failed command, which may
	// be one herd can do without (INFO, for the eviction check): only a
	// refused connection counts here.
	if pipeErr != nil && (strings.Contains(pipeErr.Error(), "WRONGPASS") || strings.Contains(pipeErr.Error(), "NOAUTH")) {
		return fmt.Errorf("%w: %w", ErrPermission, pipeErr)
	}
	if access == nil {
		return nil
	}
	refused, err := access.Result()
	switch {
	case scripts.IsRefusal(err):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case err != nil || len(refused) == 0:
		return nil
	}
	return fmt.Errorf("%w: the ACL of this Redis user refuses %s (NOPERM); the election needs them all, see docs/topologies.md",
		ErrPermission, strings.Join(refused, ", "))
}

// ask puts Start's three questions to the server that holds the election's
// keys in one pipeline, one round trip on one connection: the registry's
// backend probe, INFO memory (the eviction check) and the lock check.
// Three calls at once would each take a connection of its own from the
// client's pool, and open it (a dial, then HELLO and CLIENT SETINFO, a
// round trip each) on a client that holds a single idle connection, as a
// warm one does.
//
// go-redis gives pipelines a pool of their own, so the first pipeline of a
// client opens a connection there; every later one (a master's slave
// tracker reads the registry with one) finds it idle. Client.Conn would
// take the idle connection of the main pool instead, but go-redis 9.23
// guards the client's Options with a lock of each derived client's own: a
// Conn that opens a connection while the subscription's is being opened,
// on a server that refuses CLIENT MAINT_NOTIFICATIONS (miniredis in this
// package's tests), writes them beside it, and the race detector says so.
//
// The two scripts go as EVAL (scripts.QueueRegistryProbe, QueueCheck), so
// they need no NOSCRIPT fallback. A question whose answer is an error is
// asked again by prepare: the probe by New's own probe, the others once the
// registry is open.
func (m *MasterElection) ask(ctx context.Context) answers {
	pctx, cancel := context.WithTimeout(ctx, m.opTimeout())
	defer cancel()
	srv, addr, err := serverOf(pctx, m.client, m.keys.Master)
	if err != nil {
		return answers{probeErr: err, eviction: evictionRead{err: err}, refused: m.refusal(err, nil)}
	}
	var (
		access *scripts.AccessCall
		probe  *scripts.RegistryProbeCall
		info   *redis.StringCmd
		check  *scripts.CheckCall
	)
	queue := func(pipe redis.Pipeliner) error {
		access = scripts.QueueAccess(pctx, pipe, m.keys)
		probe = scripts.QueueRegistryProbe(pctx, pipe, m.keys)
		info = pipe.Info(pctx, "memory")
		check = scripts.QueueCheck(pctx, pipe, m.keys)
		return nil
	}
	// Each command's error is read on its own, but a connection that Redis
	// refused (WRONGPASS) fails them all with the pipeline's error.
	_, pipeErr := srv.Pipelined(pctx, queue)

	var a answers
	a.refused = m.refusal(pipeErr, access)
	if native, hpexpire, err := probe.Result(); err != nil {
		a.probeErr = err
	} else {
		a.probed = &registry.Probed{Native: native, HPExpire: hpexpire}
	}
	a.eviction = memoryRead(addr, info)
	st, err := check.Result()
	a.garbage, a.checked = m.garbageIn(pctx, st, err)
	return a
}

// openFirst opens the registry with the backend probe's answer from ask.
// When the probe failed, or its answer does not do (a configured backend
// the server does not run), that is reported as openRegistry reports the
// errors of its attempts, and openRegistry takes over: it probes again at
// once, then after each backoff, until ctx ends.
func (m *MasterElection) openFirst(ctx context.Context, a answers) (*registry.Registry, error) {
	err := a.probeErr
	if a.probed != nil {
		var reg *registry.Registry
		reg, err = registry.NewProbed(clock.With(ctx, m.clock), m.client, m.keys, m.registryConfig(), *a.probed)
		if err == nil || errors.Is(err, registry.ErrInvalidConfig) {
			return reg, err
		}
	}
	if ctx.Err() != nil {
		return nil, m.withDialCause(ctx, fmt.Errorf("open process registry: %w (last error: %w)", ctx.Err(), err), err)
	}
	m.emitError(fmt.Errorf("open process registry: %w", err))
	return m.openRegistry(ctx)
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
