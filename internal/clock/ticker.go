package clock

import "time"

// Ticker fires every period on a Clock's schedule, as a time.Ticker does:
// a fire taken late does not push the next one back, and fires missed
// meanwhile are dropped. After taking a fire from C, call Next to arm the
// next one. Not safe for concurrent use: one loop owns it.
type Ticker struct {
	clock  Clock
	period time.Duration
	next   time.Time // when the armed fire falls due
	timer  Timer
}

// NewTicker returns a Ticker of c whose first fire falls period from now;
// period must be positive.
func NewTicker(c Clock, period time.Duration) *Ticker {
	return &Ticker{clock: c, period: period, next: c.Now().Add(period), timer: c.NewTimer(period)}
}

// C is the channel of the fires.
func (t *Ticker) C() <-chan time.Time { return t.timer.C() }

// Next arms the fire after the one just taken: the first instant on the
// schedule that is still ahead.
func (t *Ticker) Next() {
	now := t.clock.Now()
	t.next = t.next.Add(t.period)
	if missed := now.Sub(t.next); missed >= 0 { // dropped: the next falls on the schedule
		t.next = now.Add(t.period - missed%t.period)
	}
	t.timer.Reset(t.next.Sub(now))
}

// Stop stops the Ticker; see time.Ticker.Stop.
func (t *Ticker) Stop() { t.timer.Stop() }
