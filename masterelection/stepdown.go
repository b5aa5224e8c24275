package masterelection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

// resign ends mastership l gracefully: it cancels the ctx of l's
// OnMasterAcquired handlers, waits for them to return (bounded by ctx and,
// when positive, by handlerWait), releases the lock (the release is
// announced, so a slave takes over at once; not in standalone mode) and
// emits master-lost. released tells whether the lock was released.
//
// A successor, when not "", gets the released lock reserved for window
// (see Transfer).
func (c *core) resign(ctx context.Context, l *mastership, handlerWait time.Duration, reason, successor string, window time.Duration) (released bool, err error) {
	l.endCtx()
	var errs []error
	running := awaitHandlers(ctx, l, handlerWait) // the handlers had not returned when the wait ended
	// IsMaster turns false before the release: the release notice wakes
	// the slaves, and one of them may be master a round trip later.
	l.resigned.Store(true)
	l.deadline.Store(0)
	if !c.cfg.Standalone {
		rctx, cancel := c.cleanupContext(ctx)
		released, err = rdb.ReleaseTo(rctx, c.client, c.keys, c.cfg.NodeID, l.term, successor, window)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("release master lock: %w", err))
		}
	}
	if running != nil {
		errs = append(errs, handlersRunning(running, released))
	}
	c.endMastership(l, reason)
	return released, errors.Join(errs...)
}

// awaitHandlers waits for the OnMasterAcquired handlers of mastership l to
// return, bounded by ctx and, when positive, by wait. It returns why the
// wait ended before they did, or nil.
func awaitHandlers(ctx context.Context, l *mastership, wait time.Duration) error {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	handlersDone := make(chan struct{})
	go func() { l.handlers.Wait(); close(handlersDone) }()
	select {
	case <-handlersDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handlersRunning is resign's error when a handler still ran (running is
// why the wait ended), as the lock was released or not.
func handlersRunning(running error, released bool) error {
	what := "the lock was released while an OnMasterAcquired handler still ran: another process may be master before it returns"
	if !released {
		what = "an OnMasterAcquired handler still ran when the wait for it ended"
	}
	return fmt.Errorf("%w: %s: %w", ErrHandlersRunning, what, running)
}

// endMastership ends mastership l: IsMaster turns false, l's ctx is
// cancelled, master-lost is emitted. It does nothing if l already ended.
func (c *core) endMastership(l *mastership, reason string) {
	if !c.mastership.CompareAndSwap(l, nil) {
		return
	}
	// The ctx ends before anything that can wait (trackMu is held by slave
	// events, which may be queued behind a slow handler's): nothing may keep
	// it live once the mastership is over.
	l.endCtx()
	c.members.holdingSlaveEvents(func() {
		c.log.Info().Int64("term", l.term).Str("reason", reason).Msg("no longer master")
		c.bus.obs.steppedDown(l.term, reason)
		c.bus.emit(topicMasterLost, payload{term: l.term})
	})
	c.members.setRole(registry.RoleSlave, 0, nil, false)
}

// handOver ends mastership l gracefully while the election goes on (the
// process stopped being a candidate): the handlers get until the next
// renewal would be due to return, then the lock is released.
func (c *core) handOver(ctx context.Context, ls *loopState, l *mastership) {
	wait := min(c.cfg.HeartbeatInterval, max(l.remaining(c.clock.Now()), time.Millisecond))
	released, err := c.resign(ctx, l, wait, "no longer a candidate: handed over", "", 0)
	if err != nil {
		c.emitError(fmt.Errorf("hand over: %w", err))
	}
	if released {
		ls.lockGone()
	}
}

// transferOut ends mastership l for a transfer request: as handOver, with
// the released lock reserved for req.to. The answer goes to req.
func (c *core) transferOut(ctx context.Context, ls *loopState, l *mastership, req transferRequest) {
	window := c.cfg.TransferWindow
	wait := min(c.cfg.HeartbeatInterval, max(l.remaining(c.clock.Now()), time.Millisecond))
	reason := "transferred: stepped down"
	if req.to != "" {
		reason = "transferred to " + req.to
	}
	if req.reason != "" {
		reason = req.reason
	}
	released, err := c.resign(ctx, l, wait, reason, req.to, window)
	if released {
		ls.lockGone()
		if req.to == "" {
			// No reservation keeps this process from taking the lock
			// straight back: it holds off itself.
			ls.holdOff = c.clock.Now().Add(window)
		}
	} else if err == nil {
		err = ErrNotMaster // the lock was gone already: nothing to hand over
	}
	if err != nil {
		c.emitError(fmt.Errorf("transfer: %w", err))
	}
	req.reply(err)
}

// stopAsMaster handles Stop's request on the master loop: it stops the
// membership loop, resigns mastership l, releasing the lock, and tells run
// to return.
func (c *core) stopAsMaster(ls *loopState, l *mastership, req *stopRequest) {
	// No registry write may follow the release: one as master would be
	// refused and written as a slave, one as slave (the role change) would
	// tell the new master that a slave joined just before Stop unregisters
	// it. The loop is idle between heartbeats, so this rarely waits.
	ls.haltMembership()
	released, err := c.resign(req.ctx, l, 0, "stopped", "", 0)
	if released {
		ls.lockGone()
	}
	ls.stopRequested = true
	req.err = err
	close(req.done)
}
