package pubsub

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/subhub"
)

// Handler handles one message. It is called on the loop goroutine, one
// message at a time, in the order the messages were published: while it
// runs, the next messages wait in the receiver's backlog, up to
// Config.MaxBacklog bytes; beyond it they are dropped and reported as
// ErrBacklogFull (see docs/routing.md). ctx is cancelled when Close is
// called. A returned error is reported through Config.OnError as a
// *MessageError; a panic is recovered and reported as ErrHandlerPanic.
// Neither stops the loop.
type Handler func(ctx context.Context, m Message) error

// Chan returns a Handler that sends each message on ch, waiting while ch is
// full (the loop waits with it) until Close. Use it to consume messages from
// a channel instead of in a callback.
func Chan(ch chan<- Message) Handler {
	return func(ctx context.Context, m Message) error {
		select {
		case ch <- m:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("message dropped at close: %w", ctx.Err())
		}
	}
}

// Lifecycle states of a receiver.
const (
	stateNew = iota
	stateStarting
	stateRunning
	stateClosed
)

// receiver is the receive loop shared by Subscriber and Reports: a
// subscription to a fixed set of channels on the client's shared pub/sub
// connection (internal/subhub), whose messages one goroutine of its own
// hands to onMessage, in order. Close stops that goroutine and waits for it.
type receiver struct {
	client   redis.UniversalClient
	channels []string
	cfg      Config
	// onMessage handles one message; called on the loop goroutine only.
	onMessage func(ctx context.Context, m *redis.Message)
	// onSubscribed is called on the loop goroutine (and in Start) when the
	// server confirms the subscription of one channel, including after each
	// reconnect. May be nil.
	onSubscribed func(ctx context.Context, channel string)

	mu    sync.Mutex
	state int                  // guarded by mu
	sub   *subhub.Subscription // guarded by mu; set while running

	obs observers // Subscriber.Observe (observe.go)
}

func (r *receiver) report(err error) {
	r.obs.reported(err)
	if r.cfg.OnError != nil {
		r.cfg.OnError(err)
	}
}

// start subscribes, waits for the server to confirm every channel, calls
// onSubscribed for each, and starts the loop. Messages that arrive before
// the last confirmation are handled first, after those calls.
func (r *receiver) start(ctx context.Context) error {
	r.mu.Lock()
	switch r.state {
	case stateStarting, stateRunning:
		r.mu.Unlock()
		return ErrStarted
	case stateClosed:
		r.mu.Unlock()
		return ErrClosed
	}
	r.state = stateStarting
	r.mu.Unlock()

	sub, err := subhub.Subscribe(ctx, r.client, subhub.Options{
		Channels:     r.channels,
		OnMessage:    r.onMessage,
		OnSubscribed: r.onSubscribed,
		OnError: func(err error) {
			r.report(fmt.Errorf("%w: on %q: %w", ErrConnection, r.channels, err))
		},
		OnDropped: func(n int) {
			for range n {
				r.obs.received(ReceiveDropped)
			}
			r.report(fmt.Errorf("%w: %d messages on %q dropped: the handlers are more than %d bytes behind", ErrBacklogFull, n, r.channels, r.cfg.MaxBacklog))
		},
		MaxQueue:      r.cfg.MaxBacklog,
		PingInterval:  r.cfg.PingInterval,
		MaxRetryDelay: r.cfg.MaxRetryDelay,
	})

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == stateClosed { // Close ran meanwhile
		if sub != nil {
			sub.Close()
		}
		return ErrClosed
	}
	if err != nil {
		r.state = stateNew
		return err
	}
	r.sub, r.state = sub, stateRunning
	return nil
}

// close stops the loop and waits for it. It is idempotent and safe to call
// concurrently; it must not be called from a handler.
func (r *receiver) close() error {
	r.mu.Lock()
	r.state = stateClosed
	sub := r.sub
	r.mu.Unlock()
	if sub != nil {
		sub.Close()
	}
	return nil
}
