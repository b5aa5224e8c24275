package pubsub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Handler handles one message. It is called on the loop goroutine, one
// message at a time, in the order the messages were published: while it
// runs, the next message waits (in the connection's buffers and then in
// Redis's output buffer for the client, which Redis caps: see
// docs/routing.md). ctx is cancelled when Close is called. A returned error
// is reported through Config.OnError as a *MessageError; a panic is
// recovered and reported as ErrHandlerPanic. Neither stops the loop.
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

// receiver is the receive loop shared by Subscriber and Inbox: one go-redis
// PubSub connection subscribed to a fixed set of channels, read by one
// goroutine that Close stops and waits for.
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

	mu     sync.Mutex
	state  int                // guarded by mu
	ps     *redis.PubSub      // guarded by mu; replaced by the loop when a PING goes unanswered
	cancel context.CancelFunc // guarded by mu; cancels the loop's context
	done   chan struct{}      // guarded by mu; closed when the loop goroutine returns

	obs observers // Subscriber.Observe (observe.go)
}

func (r *receiver) report(err error) {
	r.obs.reported(err)
	if r.cfg.OnError != nil {
		r.cfg.OnError(err)
	}
}

// start subscribes, waits for the server to confirm every channel, calls
// onSubscribed for each, and starts the loop.
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

	ps, pending, err := r.subscribe(ctx)

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == stateClosed { // Close ran meanwhile
		if ps != nil {
			_ = ps.Close()
		}
		return ErrClosed
	}
	if err != nil {
		r.state = stateNew
		return err
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.ps, r.cancel, r.done, r.state = ps, cancel, make(chan struct{}), stateRunning
	go r.loop(loopCtx, ps, pending, r.done)
	return nil
}

// subscribe opens the connection and waits for the confirmations. Messages
// that arrive before the last confirmation are returned, to be handled first.
func (r *receiver) subscribe(ctx context.Context) (*redis.PubSub, []*redis.Message, error) {
	ps := r.client.Subscribe(ctx) // no channels yet: no I/O
	fail := func(err error) (*redis.PubSub, []*redis.Message, error) {
		_ = ps.Close()
		return nil, nil, fmt.Errorf("subscribe to %q: %w", r.channels, err)
	}
	if err := ps.Subscribe(ctx, r.channels...); err != nil {
		return fail(err)
	}
	var pending []*redis.Message
	confirmed := make(map[string]bool, len(r.channels))
	for len(confirmed) < len(r.channels) {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		// Short reads, so that a cancelled ctx without deadline is noticed.
		v, err := ps.ReceiveTimeout(ctx, 100*time.Millisecond)
		if err != nil {
			if isTimeout(err) {
				continue
			}
			return fail(err)
		}
		switch v := v.(type) {
		case *redis.Subscription:
			if v.Kind == "subscribe" {
				confirmed[v.Channel] = true
			}
		case *redis.Message:
			pending = append(pending, v)
		}
	}
	if r.onSubscribed != nil {
		for _, ch := range r.channels {
			r.onSubscribed(ctx, ch)
		}
	}
	return ps, pending, nil
}

// close stops the loop and waits for it. It is idempotent and safe to call
// concurrently; it must not be called from a handler.
func (r *receiver) close() error {
	r.mu.Lock()
	prev := r.state
	r.state = stateClosed
	ps, cancel, done := r.ps, r.cancel, r.done
	r.mu.Unlock()
	if prev == stateRunning {
		cancel() // first, so that the loop reads the closed connection as "stop"
		_ = ps.Close()
	}
	if done != nil {
		<-done
	}
	return nil
}

// replace swaps the connection for a new one after an unanswered PING. It
// returns nil when the receiver was closed meanwhile.
func (r *receiver) replace(ctx context.Context, old *redis.PubSub) *redis.PubSub {
	_ = old.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == stateClosed {
		return nil
	}
	// Subscribe dials and sends SUBSCRIBE; if that fails, the next receive dials again.
	r.ps = r.client.Subscribe(ctx, r.channels...)
	return r.ps
}

// loop reads the connection until ctx is cancelled. It owns ps (Close may
// close it from outside to interrupt a read).
func (r *receiver) loop(ctx context.Context, ps *redis.PubSub, pending []*redis.Message, done chan struct{}) {
	defer close(done)
	for _, m := range pending {
		r.onMessage(ctx, m)
	}
	delay := time.Duration(0)
	pinged := false
	for ctx.Err() == nil {
		v, err := ps.ReceiveTimeout(ctx, r.cfg.PingInterval)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) {
				if pinged {
					r.report(fmt.Errorf("%w: no reply to PING on %q within %s; reconnecting", ErrConnection, r.channels, r.cfg.PingInterval))
					pinged = false
					if ps = r.replace(ctx, ps); ps == nil {
						return
					}
					continue
				}
				perr := ps.Ping(ctx)
				if perr == nil {
					pinged = true
					continue
				}
				r.report(fmt.Errorf("%w: ping on %q: %w", ErrConnection, r.channels, perr))
			} else {
				r.report(fmt.Errorf("%w: receive on %q: %w", ErrConnection, r.channels, err))
			}
			// go-redis has dropped the connection and redials (and
			// resubscribes) on the next receive; wait before that.
			delay = min(max(2*delay, minRetryDelay), r.cfg.MaxRetryDelay)
			if !r.sleep(ctx, delay) {
				return
			}
			continue
		}
		delay, pinged = 0, false
		switch v := v.(type) {
		case *redis.Message:
			r.onMessage(ctx, v)
		case *redis.Subscription:
			if v.Kind == "subscribe" && r.onSubscribed != nil {
				r.onSubscribed(ctx, v.Channel) // a resubscription after a reconnect
			}
		}
	}
}

// sleep waits d on the configured clock; false when ctx ended first.
func (r *receiver) sleep(ctx context.Context, d time.Duration) bool {
	t := r.cfg.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
