package masterelection

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/internal/clock"
)

// mastership is one mastership: from a successful acquire until the lock is
// lost, the self-fencing deadline passes, or Stop releases it.
type mastership struct {
	term     int64
	ctx      *masterCtx     // given to OnMasterAcquired handlers; done when the mastership ends (masterctx.go)
	deadline atomic.Int64   // self-fencing deadline, nanoseconds after base
	handlers sync.WaitGroup // OnMasterAcquired handlers not yet returned
	// resigned: the process gave the lock up itself (resign: a hand-over,
	// a transfer, Stop), so a master registry write fenced after it is
	// expected, not news.
	resigned atomic.Bool

	clock clock.Clock // the election's
	base  time.Time   // the election's origin of monotonic deadlines (node.base)
}

// endCtx marks mastership l over for its ctx (and every RunIfMaster ctx of
// it) at once; it never blocks.
func (l *mastership) endCtx() { l.ctx.cancel() }

// holds reports whether mastership l is still certain at now.
func (l *mastership) holds(now time.Time) bool {
	at := now.Sub(l.base)
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
func (l *mastership) extend(d time.Duration) bool {
	for {
		cur := l.deadline.Load()
		if l.clock.Now().Sub(l.base) >= time.Duration(cur) {
			l.deadline.CompareAndSwap(cur, 0)
			return false
		}
		if int64(d) <= cur || l.deadline.CompareAndSwap(cur, int64(d)) {
			return true
		}
	}
}

func (l *mastership) remaining(now time.Time) time.Duration {
	return time.Duration(l.deadline.Load()) - now.Sub(l.base)
}

// masterCtx is a context handed out for one mastership: the ctx of the
// OnMasterAcquired handlers, and the fn ctx of RunIfMaster. It is done no
// later than IsMaster turns false, without waiting for any loop, lock or
// Redis call:
//   - Err reads the self-fencing deadline on the clock, as IsMaster does, so
//     it answers non-nil from the instant IsMaster answers false, even when
//     no goroutine of herd has run since (after a pause of the process);
//   - Done is closed by whichever comes first of: the mastership's end
//     (endMastership, resign), the parent's end, a timer armed at the
//     deadline (re-armed while renewals move it), or a call of Done or Err
//     that finds the deadline passed.
//
// Contexts derived from it (context.WithCancel and the like) end when Done
// closes; only the masterCtx itself also answers from the clock.
type masterCtx struct {
	parent context.Context
	l      *mastership

	done  chan struct{}
	ended atomic.Bool // set before done closes; read without the lock

	mu      sync.Mutex
	closed  bool          // done is closed
	unlinks []func() bool // undo the AfterFuncs registered by cancelWith
}

// newMasterCtx returns a context of mastership l, done also when parent is.
// The mastership's own ctx (l.ctx) also runs the deadline timer; a RunIfMaster
// ctx ends with l.ctx instead.
func newMasterCtx(parent context.Context, l *mastership) *masterCtx {
	c := &masterCtx{parent: parent, l: l, done: make(chan struct{})}
	own := l.ctx == nil
	if own {
		l.ctx = c
	}
	c.cancelWith(parent)
	if own {
		go c.watchDeadline()
	} else {
		c.cancelWith(l.ctx)
	}
	c.poll()
	return c
}

// cancelWith ends c when ctx ends.
func (c *masterCtx) cancelWith(ctx context.Context) {
	unlink := context.AfterFunc(ctx, c.cancel)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		unlink()
		return
	}
	c.unlinks = append(c.unlinks, unlink)
	c.mu.Unlock()
}

// watchDeadline closes Done when the self-fencing deadline passes. The
// deadline only moves forward while the mastership lasts (and to zero when
// it ends), so a timer that fires early is simply armed again.
func (c *masterCtx) watchDeadline() {
	t := c.l.clock.NewTimer(max(c.l.remaining(c.l.clock.Now()), 0))
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C():
			if c.expired() {
				c.cancel()
				return
			}
			t.Reset(max(c.l.remaining(c.l.clock.Now()), time.Millisecond))
		}
	}
}

// expired reports whether the mastership this ctx belongs to is over, or
// the parent has ended.
func (c *masterCtx) expired() bool {
	return c.ended.Load() || c.l.ctx.ended.Load() || c.parent.Err() != nil || !c.l.holds(c.l.clock.Now())
}

// cancel ends the ctx: Err turns non-nil and Done closes. It never blocks.
func (c *masterCtx) cancel() {
	c.ended.Store(true)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.done)
	unlinks := c.unlinks
	c.unlinks = nil
	c.mu.Unlock()
	for _, unlink := range unlinks {
		unlink()
	}
}

// poll ends the ctx if its mastership is over, and reports whether it has ended.
func (c *masterCtx) poll() bool {
	if c.ended.Load() {
		return true
	}
	if c.expired() {
		c.cancel()
		return true
	}
	return false
}

// Deadline returns the parent's deadline: the self-fencing deadline moves
// with every renewal, which a context's Deadline must not do.
func (c *masterCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done returns a channel closed when the mastership has ended.
func (c *masterCtx) Done() <-chan struct{} {
	c.poll()
	return c.done
}

// Err returns context.Canceled once the mastership has ended (IsMaster
// turned false, or it was ended or resigned) or the parent has ended, and
// nil before.
func (c *masterCtx) Err() error {
	if c.poll() {
		if err := c.parent.Err(); err != nil {
			return err
		}
		return context.Canceled
	}
	return nil
}

// Value returns the parent's value for key.
func (c *masterCtx) Value(key any) any { return c.parent.Value(key) }

// String names the ctx in panics and logs, as the context package's do.
func (c *masterCtx) String() string { return "masterelection.mastershipContext" }
