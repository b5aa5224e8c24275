package assign

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/clock"
)

// A lease ends at its deadline on the Worker's clock, which an extension
// moves; Err reads the clock, Done closes when the timer fires.
func TestLeaseEndsAtItsDeadlineOnTheClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	l := newLease(fc, t0.Add(time.Second))
	if !l.extend(t0.Add(2 * time.Second)) {
		t.Fatal("a live lease refused an extension")
	}
	fc.Advance(time.Second) // the first deadline: the timer arms again
	if err := l.Err(); err != nil {
		t.Fatalf("Err %v before the extended deadline", err)
	}
	fc.Advance(time.Second)
	if err := l.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err %v at the extended deadline, want DeadlineExceeded", err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the deadline")
	}
	if l.extend(t0.Add(time.Hour)) {
		t.Fatal("an ended lease took an extension")
	}
}
