package masterelection

import (
	"context"
	"errors"
	"fmt"
)

// Stop leaves the election. On the master it cancels the ctx given to the
// OnMasterAcquired handlers, waits for them to return, releases the lock
// (the release notice makes a slave take over at once) and emits
// master-lost. On every process it then stops the loops and waits for every
// goroutine, including event handlers finishing the events already queued.
// All waiting is bounded by ctx. Stop may be called more than once and from
// several goroutines; later calls wait for the first and return its result.
//
// When ctx ends before the OnMasterAcquired handlers have returned, Stop
// does not wait for them any longer: IsMaster turns false, the lock is
// released all the same (with a fresh ctx bounded by HeartbeatInterval, so
// that the others need not wait LockTTL), master-lost is emitted, and Stop
// returns an error wrapping ErrHandlersRunning and ctx's error that says the
// lock was released while a handler still ran. Another process may then be
// master while that handler still runs: a handler must return when its ctx
// is done, and write only with the term it was given (which fencing
// refuses once another process is master).
func (m *MasterElection) Stop(ctx context.Context) error {
	m.mu.Lock()
	if m.state == stateStopping {
		m.mu.Unlock()
		select {
		case <-m.stopped:
			return m.stopErr
		case <-ctx.Done():
			return fmt.Errorf("masterelection: stop: %w", ctx.Err())
		}
	}
	wasStarted := m.state == stateStarted
	m.state = stateStopping
	m.mu.Unlock()

	var errs []error
	if wasStarted {
		errs = m.stopStarted(ctx)
	} else {
		m.core.closeDone()
	}
	errs = append(errs, m.bus.close(ctx))
	m.stopErr = errors.Join(errs...)
	if m.stopErr != nil {
		m.stopErr = fmt.Errorf("masterelection: stop: %w", m.stopErr)
	}
	close(m.stopped)
	return m.stopErr
}

// stopStarted is Stop's work for a started election: resign first (a
// master), end the loops, resign what the loop left, unregister. It returns
// what went wrong.
func (m *MasterElection) stopStarted(ctx context.Context) []error {
	var errs []error
	if m.core.mastership.Load() != nil && !m.cfg.Standalone { // standalone: nothing to release
		errs = append(errs, m.resignFirst(ctx))
	}
	m.cancel()
	select {
	case <-m.core.done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("election loop still running: %w", ctx.Err()))
	}
	if l := m.core.mastership.Load(); l != nil {
		_, err := m.core.resign(ctx, l, 0, "stopped", "", 0)
		errs = append(errs, err)
	}
	return append(errs, m.unregister(ctx))
}

// unregister deletes this process's registry entry, unless it stepped
// aside for a twin, which leaves the entry to the other process.
func (m *MasterElection) unregister(ctx context.Context) error {
	reg := m.Registry()
	if reg == nil || m.SteppedAside() != nil {
		return nil
	}
	rctx, cancel := m.cleanupContext(ctx)
	defer cancel()
	if err := reg.Unregister(rctx, m.cfg.NodeID); err != nil {
		return fmt.Errorf("unregister process: %w", err)
	}
	return nil
}

// resignFirst has the election loop resign a master's mastership (cancel
// the handlers' ctx, wait for them, release the lock, emit master-lost)
// before Stop tears anything down, so that the slave that takes over on the
// release notice does so while this process stops its loops, its notice
// feed and its slave tracker, not after (docs/performance.md, row
// 4). It returns the resignation's error. When the loop has returned, or is
// not master by the time it reads the request, there is nothing to resign
// here; Stop resigns after the loop has stopped whatever mastership is
// left, as it always did.
func (m *MasterElection) resignFirst(ctx context.Context) error {
	req := &stopRequest{ctx: ctx, done: make(chan struct{})}
	select {
	case m.core.stops <- req:
	case <-m.core.done:
		return nil
	case <-ctx.Done():
		return nil // Stop reports its ctx's end while waiting for the loop
	}
	<-req.done // the resignation is bounded by ctx
	return req.err
}
