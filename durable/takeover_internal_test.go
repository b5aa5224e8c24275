package durable

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTakeOverWaitEndsWithCtx: a sender waiting for another sender's
// adoption of the predecessors' backlog gives up when its own ctx ends,
// instead of waiting for the adoption however long it takes.
func TestTakeOverWaitEndsWithCtx(t *testing.T) {
	r := &Router{backlog: backlog{turn: make(chan struct{}, 1)}}
	r.backlog.turn <- struct{}{} // another sender's adoption is under way
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.takeOver(ctx, 7) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("takeOver: %v, want the ctx's deadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("takeOver still waits for the other adoption 5s after its ctx ended")
	}
}
