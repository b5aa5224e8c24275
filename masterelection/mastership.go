package masterelection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// mastership is one mastership: from a successful acquire until the lock is
// lost, the self-fencing deadline passes, or Stop releases it.
type mastership struct {
	term     int64
	ctx      *masterCtx     // given to OnMasterAcquired handlers; done when the mastership ends (masterctx.go)
	deadline atomic.Int64   // self-fencing deadline, nanoseconds after MasterElection.base
	handlers sync.WaitGroup // OnMasterAcquired handlers not yet returned
}

// newMastership returns mastership term, whose self-fencing deadline is
// deadline (an offset from m.base) and whose ctx is also done when parent is.
func (m *MasterElection) newMastership(parent context.Context, term int64, deadline time.Duration) *mastership {
	l := &mastership{term: term}
	l.deadline.Store(int64(deadline))
	m.newMasterCtx(parent, l)
	return l
}

// endCtx marks mastership l over for its ctx (and every RunIfMaster ctx of
// it) at once; it never blocks.
func (l *mastership) endCtx() { l.ctx.cancel() }

// holds reports whether mastership l is still certain at now.
func (m *MasterElection) holds(l *mastership, now time.Time) bool {
	at := now.Sub(m.base)
	for {
		cur := l.deadline.Load()
		if at < time.Duration(cur) {
			return true
		}
		// Passed: latch it, so that a renewal whose reply comes now cannot
		// move the deadline past this answer (see extend).
		if cur == 0 || l.deadline.CompareAndSwap(cur, 0) {
			return false
		}
	}
}

// extend moves l's self-fencing deadline forward to d, unless the deadline
// in force has passed: it reports false then, and the mastership is over.
// The check and the move are one atomic step against holds, which latches
// a passed deadline at zero, so IsMaster never turns true again once it has
// said false.
func (m *MasterElection) extend(l *mastership, d time.Duration) bool {
	for {
		cur := l.deadline.Load()
		if m.clock.Now().Sub(m.base) >= time.Duration(cur) {
			l.deadline.CompareAndSwap(cur, 0)
			return false
		}
		if int64(d) <= cur || l.deadline.CompareAndSwap(cur, int64(d)) {
			return true
		}
	}
}

// deadlineAfter is the self-fencing deadline of a lock (re)written by a call
// sent at sent, as an offset from m.base.
func (m *MasterElection) deadlineAfter(sent time.Time) time.Duration {
	return sent.Sub(m.base) + m.cfg.LockTTL - m.cfg.StepDownMargin
}

func (m *MasterElection) remaining(l *mastership, now time.Time) time.Duration {
	return time.Duration(l.deadline.Load()) - now.Sub(m.base)
}

// resign ends mastership l gracefully: it cancels the ctx of l's
// OnMasterAcquired handlers, waits for them to return (bounded by ctx and,
// when positive, by handlerWait), releases the lock (the release is
// announced, so a slave takes over at once; not in standalone mode) and
// emits master-lost. released tells whether the lock was released.
//
// A successor, when not "", gets the released lock reserved for window
// (see Transfer).
func (m *MasterElection) resign(ctx context.Context, l *mastership, handlerWait time.Duration, reason, successor string, window time.Duration) (released bool, err error) {
	l.endCtx()
	var errs []error
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if handlerWait > 0 {
		wctx, cancel = context.WithTimeout(ctx, handlerWait)
	}
	handlersDone := make(chan struct{})
	go func() { l.handlers.Wait(); close(handlersDone) }()
	var running error // the handlers had not returned when the wait ended
	select {
	case <-handlersDone:
	case <-wctx.Done():
		running = wctx.Err()
	}
	cancel()
	// IsMaster turns false before the release: the release notice wakes
	// the slaves, and one of them may be master a round trip later.
	l.deadline.Store(0)
	if !m.cfg.Standalone {
		rctx, cancel := m.cleanupContext(ctx)
		released, err = scripts.ReleaseTo(rctx, m.client, m.keys, m.cfg.NodeID, l.term, successor, window)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("release master lock: %w", err))
		}
	}
	if running != nil {
		what := "the lock was released while an OnMasterAcquired handler still ran: another process may be master before it returns"
		if !released {
			what = "an OnMasterAcquired handler still ran when the wait for it ended"
		}
		errs = append(errs, fmt.Errorf("%w: %s: %w", ErrHandlersRunning, what, running))
	}
	m.endMastership(l, reason)
	return released, errors.Join(errs...)
}

// endMastership ends mastership l: IsMaster turns false, l's ctx is
// cancelled, master-lost is emitted. It does nothing if l already ended.
func (m *MasterElection) endMastership(l *mastership, reason string) {
	if !m.mastership.CompareAndSwap(l, nil) {
		return
	}
	// The ctx ends before anything that can wait (trackMu is held by slave
	// events, which may be queued behind a slow handler's): nothing may keep
	// it live once the mastership is over.
	l.endCtx()
	m.trackMu.Lock()
	m.log.Info().Int64("term", l.term).Str("reason", reason).Msg("no longer master")
	m.observeStepDown(l.term, reason)
	m.bus.emit(topicMasterLost, payload{term: l.term})
	m.trackMu.Unlock()
	m.setRole(registry.RoleSlave, 0)
}

// RunIfMaster runs fn if this process is master, and reports whether it
// did. fn's ctx is done when ctx ends or the mastership ends, whichever
// comes first, and never later than IsMaster turns false (its Err reads the
// self-fencing deadline itself); term is the mastership's fencing term, to stamp on what fn
// writes. When this process is not master, fn is not called and RunIfMaster
// returns false and ErrNotMaster.
func (m *MasterElection) RunIfMaster(ctx context.Context, fn func(ctx context.Context, term int64) error) (ran bool, err error) {
	l := m.mastership.Load()
	if l == nil || !m.holds(l, m.clock.Now()) {
		return false, ErrNotMaster
	}
	fctx := m.newMasterCtx(ctx, l)
	defer fctx.cancel()
	if err := fn(fctx, l.term); err != nil {
		return true, fmt.Errorf("masterelection: run as master (term %d): %w", l.term, err)
	}
	return true, nil
}
