package assign

import (
	"context"
	"sync"
	"time"

	"github.com/herdkit/herd/internal/clock"
)

// lease is the ctx of one item's ownership: done when the Worker's own
// deadline for the item passes (it moves forward with each renewal), when
// the item is revoked, or when the Worker stops. Err reads the deadline on
// the clock it was set by, so a process that resumes after a pause sees the
// ctx done before any timer has run; Done closes when the timer fires.
type lease struct {
	mu       sync.Mutex
	deadline time.Time // guarded by mu
	err      error     // guarded by mu; set once
	done     chan struct{}
	clock    clock.Clock
	timer    clock.Timer
	running  bool // its handler runs (guarded by the Worker's mu)
}

// newLease returns a lease live until deadline on clk.
func newLease(clk clock.Clock, deadline time.Time) *lease {
	l := &lease{deadline: deadline, done: make(chan struct{}), clock: clk}
	l.mu.Lock() // the timer's first call waits for l.timer to be set
	defer l.mu.Unlock()
	l.timer = clk.AfterFunc(deadline.Sub(clk.Now()), l.expire)
	return l
}

// expire ends l when its deadline has passed, else arms the timer again (the
// deadline moved meanwhile).
func (l *lease) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.deadline.Sub(l.clock.Now()); d > 0 {
		l.timer.Reset(d)
		return
	}
	l.endLocked(context.DeadlineExceeded)
}

// extend moves l's deadline to deadline if that is later, and reports
// whether l is still live.
func (l *lease) extend(deadline time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.errLocked() != nil {
		return false
	}
	if deadline.After(l.deadline) {
		l.deadline = deadline
	}
	return true
}

// end ends l with err (context.Canceled: revoked or stopped).
func (l *lease) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(err)
}

func (l *lease) endLocked(err error) {
	if l.err == nil {
		l.err = err
		l.timer.Stop()
		close(l.done)
	}
}

// errLocked is Err with l.mu held.
func (l *lease) errLocked() error {
	if l.err == nil && !l.clock.Now().Before(l.deadline) {
		l.endLocked(context.DeadlineExceeded)
	}
	return l.err
}

// Deadline reports no deadline: the Worker's own deadline for the item
// moves forward with each renewal, and context.Context requires successive
// calls to return the same result (a library that copies a deadline, such
// as an RPC timeout, would cut the work at the first one). Err and Done
// enforce the moving deadline.
func (l *lease) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the ownership ends.
func (l *lease) Done() <-chan struct{} { return l.done }

// Err is nil while the item is this Worker's: context.DeadlineExceeded once
// its deadline passed, context.Canceled once revoked or stopped.
func (l *lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errLocked()
}

// Value returns nil: a lease carries no values.
func (l *lease) Value(any) any { return nil }
