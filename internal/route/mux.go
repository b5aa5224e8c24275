package route

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
)

// Mux holds a receiver's handlers by message type: pubsub's of Message,
// durable's of Delivery. The zero value has no handler. It is safe for
// concurrent use.
type Mux[M any] struct {
	// Stacks adds the handler goroutine's stack to the error of a panic:
	// pubsub's receivers report it to a log; durable leaves it out, since
	// its errors are also kept in the dead letters. Set before first use.
	Stacks bool

	mu       sync.RWMutex
	byType   map[string]func(context.Context, M) error
	fallback func(context.Context, M) error
}

// Handle registers h for messages of type msgType, replacing any previous
// one; a nil h removes it. The error wraps ErrInvalidName.
func (x *Mux[M]) Handle(msgType string, h func(context.Context, M) error) error {
	if err := CheckName("message type", msgType); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if h == nil {
		delete(x.byType, msgType)
		return nil
	}
	if x.byType == nil {
		x.byType = make(map[string]func(context.Context, M) error)
	}
	x.byType[msgType] = h
	return nil
}

// HandleDefault registers h for messages whose type has no handler of its
// own; nil removes it.
func (x *Mux[M]) HandleDefault(h func(context.Context, M) error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.fallback = h
}

// Dispatch runs the handler of msgType, or the default one, on the
// caller's goroutine, and returns its error: ErrUnknownType when there is
// none, an error wrapping ErrHandlerPanic when it panicked.
func (x *Mux[M]) Dispatch(ctx context.Context, msgType string, m M) (err error) {
	x.mu.RLock()
	h := x.byType[msgType]
	if h == nil {
		h = x.fallback
	}
	x.mu.RUnlock()
	if h == nil {
		return fmt.Errorf("%w: %q", ErrUnknownType, msgType)
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, v)
			if x.Stacks {
				err = fmt.Errorf("%w\n%s", err, debug.Stack())
			}
		}
	}()
	return h(ctx, m)
}
