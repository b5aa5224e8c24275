package clock

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(tm Timer) (time.Time, bool) {
	select {
	case at := <-tm.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestFakeFiresInOrderAtTheirTimes(t *testing.T) {
	f := NewFake(t0)
	late, early := f.NewTimer(3*time.Second), f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	if _, ok := fired(early); ok {
		t.Fatal("timer fired early")
	}
	f.Advance(5 * time.Second)
	at, ok := fired(early)
	if !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("early fired %v at %v", ok, at)
	}
	at, ok = fired(late)
	if !ok || !at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("late fired %v at %v", ok, at)
	}
	if got := f.Now(); !got.Equal(t0.Add(5999 * time.Millisecond)) {
		t.Fatalf("Now %v", got)
	}
	if f.Timers() != 0 {
		t.Fatalf("%d timers pending after firing", f.Timers())
	}
}

func TestFakeZeroTimerFiresAtOnce(t *testing.T) {
	f := NewFake(t0)
	if _, ok := fired(f.NewTimer(0)); !ok {
		t.Fatal("a zero timer did not fire at once")
	}
	tm := f.NewTimer(time.Hour)
	tm.Reset(-time.Second)
	if _, ok := fired(tm); !ok {
		t.Fatal("a timer reset to a negative duration did not fire at once")
	}
}

func TestFakeStopAndReset(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	f.Advance(2 * time.Second)
	if _, ok := fired(tm); ok {
		t.Fatal("a stopped timer fired")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported it active")
	}
	if d, ok := f.NextDeadline(); !ok || !d.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("NextDeadline %v %v", d, ok)
	}
	// A fire not yet received is discarded by Reset, as time.Timer does.
	f.Advance(time.Second)
	tm.Reset(time.Second)
	if _, ok := fired(tm); ok {
		t.Fatal("a stale fire survived Reset")
	}
}

func TestFakeChangedSignalsTimerChanges(t *testing.T) {
	f := NewFake(t0)
	ch := f.Changed()
	f.NewTimer(time.Second)
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by NewTimer")
	}
}

func TestRealTimer(t *testing.T) {
	var c Clock = Real{}
	tm := c.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("real timer did not fire")
	}
	if c.Now().IsZero() {
		t.Fatal("zero Now")
	}
}

func TestFakeAfterFuncCallsAtItsTime(t *testing.T) {
	f := NewFake(t0)
	called := make(chan time.Time, 2)
	tm := f.AfterFunc(time.Second, func() { called <- f.Now() })
	if tm.C() != nil {
		t.Fatal("an AfterFunc timer has a channel")
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-called:
		t.Fatal("called early")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case <-called:
	case <-time.After(5 * time.Second):
		t.Fatal("not called when due")
	}
	// Reset arms it again; Stop disarms it.
	tm.Reset(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a pending AfterFunc timer returned false")
	}
	f.Advance(time.Hour)
	select {
	case <-called:
		t.Fatal("a stopped AfterFunc timer was called")
	case <-time.After(10 * time.Millisecond):
	}
}

func TestRealAfterFunc(t *testing.T) {
	called := make(chan struct{})
	Real{}.AfterFunc(time.Millisecond, func() { close(called) })
	select {
	case <-called:
	case <-time.After(5 * time.Second):
		t.Fatal("real AfterFunc not called")
	}
}

// TestTickerKeepsItsSchedule: a fire taken late does not push the next one
// back, and fires missed meanwhile are dropped, as with a time.Ticker; a
// timer reset at each fire would have drifted by the delay.
func TestTickerKeepsItsSchedule(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	tk := NewTicker(f, 10*time.Second)
	defer tk.Stop()
	f.Advance(10 * time.Second)
	if at, ok := fired(fakeOf(tk)); !ok || !at.Equal(start.Add(10*time.Second)) {
		t.Fatalf("first fire %v %v, want at 10s", at, ok)
	}
	f.Advance(4 * time.Second) // the loop takes the fire late: at 14s
	tk.Next()
	f.Advance(5 * time.Second) // 19s
	if _, ok := fired(fakeOf(tk)); ok {
		t.Fatal("fired before 20s")
	}
	f.Advance(time.Second) // 20s: on the schedule, not at 24s
	if at, ok := fired(fakeOf(tk)); !ok || !at.Equal(start.Add(20*time.Second)) {
		t.Fatalf("second fire %v %v, want at 20s", at, ok)
	}
	f.Advance(25 * time.Second) // 45s: the fires of 30s and 40s are missed
	tk.Next()
	f.Advance(4 * time.Second) // 49s
	if _, ok := fired(fakeOf(tk)); ok {
		t.Fatal("a missed fire was delivered")
	}
	f.Advance(time.Second) // 50s
	if at, ok := fired(fakeOf(tk)); !ok || !at.Equal(start.Add(50*time.Second)) {
		t.Fatalf("fire after the missed ones %v %v, want at 50s", at, ok)
	}
}

// fakeOf is the Ticker's timer, for fired.
func fakeOf(tk *Ticker) Timer { return tk.timer }
