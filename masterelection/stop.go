package masterelection

import (
	"context"
	"errors"
	"fmt"
	"time"
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
		if m.mastership.Load() != nil && !m.cfg.Standalone { // standalone: nothing to release
			errs = append(errs, m.resignFirst(ctx))
		}
		m.cancel()
		select {
		case <-m.done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("election loop still running: %w", ctx.Err()))
		}
		if l := m.mastership.Load(); l != nil {
			_, err := m.resign(ctx, l, 0, "stopped", "", 0)
			errs = append(errs, err)
		}
		if reg := m.Registry(); reg != nil && m.SteppedAside() == nil { // a twin leaves the entry to the other

			rctx, cancel := m.cleanupContext(ctx)
			if err := reg.Unregister(rctx, m.cfg.NodeID); err != nil {
				errs = append(errs, fmt.Errorf("unregister process: %w", err))
			}
			cancel()
		}
	} else {
		m.closeDone()
	}
	errs = append(errs, m.bus.close(ctx))
	m.stopErr = errors.Join(errs...)
	if m.stopErr != nil {
		m.stopErr = fmt.Errorf("masterelection: stop: %w", m.stopErr)
	}
	close(m.stopped)
	return m.stopErr
}

func (m *MasterElection) closeDone() { m.doneOnce.Do(func() { close(m.done) }) }

// cleanupContext returns ctx when it is still live, or a fresh context
// bounded by the operation timeout when ctx has already ended, so cleanup
// that matters to others (the release) still gets its chance.
func (m *MasterElection) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithTimeout(ctx, m.opTimeout())
	}
	return context.WithTimeout(context.WithoutCancel(ctx), min(m.opTimeout(), time.Second))
}

// stopRequest is Stop's request that the election loop end the mastership
// before anything of the election stops (resignFirst).
type stopRequest struct {
	ctx  context.Context // Stop's: bounds the wait for the handlers and the release
	err  error           // the resignation's error; written before done closes
	done chan struct{}   // closed when the loop has handled the request
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
	case m.stops <- req:
	case <-m.done:
		return nil
	case <-ctx.Done():
		return nil // Stop reports its ctx's end while waiting for the loop
	}
	<-req.done // the resignation is bounded by ctx
	return req.err
}

// stopAsMaster handles Stop's request on the master loop: it stops the
// membership loop, resigns mastership l, releasing the lock, and tells run
// to return.
func (m *MasterElection) stopAsMaster(ls *loopState, l *mastership, req *stopRequest) {
	// No registry write may follow the release: one as master would be
	// refused and written as a slave, one as slave (the role change) would
	// tell the new master that a slave joined just before Stop unregisters
	// it. The loop is idle between heartbeats, so this rarely waits.
	ls.haltMembership()
	released, err := m.resign(req.ctx, l, 0, "stopped", "", 0)
	if released {
		ls.lockGone()
	}
	ls.stopRequested = true
	req.err = err
	close(req.done)
}
