// Package clock is the time source of herd's loops: the real clock in
// production, a manually advanced one in tests, so tests need not sleep
// through real TTLs.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers. Times from Real carry Go's
// monotonic reading, so deadlines computed from them ignore wall-clock jumps.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f on a goroutine of its own once d has passed, as
	// time.AfterFunc does; the Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer herd uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; see time.Timer.Stop.
	Stop() bool
	// Reset changes the timer to fire after d; see time.Timer.Reset.
	Reset(d time.Duration) bool
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc returns a time.AfterFunc timer.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Fake is a clock that moves only when Advance is called. It is safe for
// concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever the timer set changes
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now + d,
// or at once when d is not positive.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc returns a timer that calls fn on a goroutine of its own when
// the fake time reaches now + d, or at once when d is not positive.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// Advance moves the time forward by d and fires, in order, every timer due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	for {
		sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
		if len(f.timers) == 0 || f.timers[0].when.After(end) {
			break
		}
		t := f.timers[0]
		f.timers = f.timers[1:]
		if t.when.After(f.now) {
			f.now = t.when
		}
		t.fire(f.now)
	}
	f.now = end
	f.notify()
	f.mu.Unlock()
}

// Timers returns how many timers are pending.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Changed returns a channel closed the next time a timer is set, reset or stopped.
func (f *Fake) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// NextDeadline returns the time the earliest pending timer fires, and false
// when none is pending.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var first time.Time
	for _, t := range f.timers {
		if first.IsZero() || t.when.Before(first) {
			first = t.when
		}
	}
	return first, !first.IsZero()
}

func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Fake) remove(t *fakeTimer) bool {
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

type fakeTimer struct {
	f    *Fake
	c    chan time.Time // nil for an AfterFunc timer
	fn   func()         // AfterFunc's; nil for a channel timer
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// fire sends now on C, unless a fire is waiting there already, or calls fn
// on a goroutine of its own. t.f.mu is held.
func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.c <- now:
	default:
	}
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	ok := t.f.remove(t)
	t.f.notify()
	return ok
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	active := t.f.remove(t)
	// Like time.Timer since Go 1.23: a reset discards a fire not yet received.
	select {
	case <-t.c:
	default:
	}
	t.when = t.f.now.Add(d)
	if d <= 0 {
		t.fire(t.f.now) // due now, as a real timer would be
	} else {
		t.f.timers = append(t.f.timers, t)
	}
	t.f.notify()
	return active
}

type ctxKey struct{}

// With returns a copy of ctx that carries c. Packages of herd hand a test
// clock to each other this way (registry.New reads it), so that no public
// option has to name this package's types.
func With(ctx context.Context, c Clock) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// From returns the clock ctx carries, or Real when it carries none.
func From(ctx context.Context) Clock {
	if c, ok := ctx.Value(ctxKey{}).(Clock); ok && c != nil {
		return c
	}
	return Real{}
}
