package subhub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// run is the reader: it connects, reads, pings and reconnects until ctx
// ends, and hands what it reads to the subscriptions.
func (h *hub) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	r := reader{h: h}
	for ctx.Err() == nil {
		if !r.step(ctx) {
			return
		}
	}
}

// reader is the state of run's loop, owned by its goroutine.
type reader struct {
	h      *hub
	ps     *redis.PubSub // the connection; nil while there is none
	delay  time.Duration // the last wait before a reconnect; 0 after a read
	pinged bool          // a PING on ps is unanswered
}

// step is one turn of the reader, with the timing the subscriptions ask
// for now: it connects when there is no connection (a failure waits, and
// the next step tries again), else it reads once. It reports false when
// the reader is to stop: ctx ended or the hub was shut down.
func (r *reader) step(ctx context.Context) bool {
	ping, retry := r.h.timing()
	if r.ps == nil {
		return r.connect(ctx, retry)
	}
	return r.read(ctx, ping, retry)
}

// connect opens a connection, and on an error tells the subscriptions and
// waits (backoff), leaving r.ps nil. It reports false when the reader is to
// stop: ctx ended or the hub was shut down.
func (r *reader) connect(ctx context.Context, retry time.Duration) bool {
	ps, err := r.h.connect(ctx)
	if ctx.Err() != nil || (ps == nil && err == nil) {
		return false
	}
	if err != nil {
		return r.backoff(ctx, fmt.Errorf("connect: %w", err), retry)
	}
	r.ps, r.pinged = ps, false
	return true
}

// read waits up to ping for what comes on the connection and hands it to
// the subscriptions, or handles the failure (readFailed). It reports false
// when the reader is to stop: ctx ended.
func (r *reader) read(ctx context.Context, ping, retry time.Duration) bool {
	v, err := r.ps.ReceiveTimeout(ctx, ping)
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		return r.readFailed(ctx, err, ping, retry)
	}
	r.delay, r.pinged = 0, false
	r.h.dispatch(v)
	return true
}

// readFailed handles an error of a read. A timeout sends a PING, or drops
// the connection when the last PING is still unanswered; an error reply is
// a command the server refused, on a connection that is fine; any other
// error, or a PING that cannot be sent, drops the connection and waits
// (backoff). It reports false when ctx ended during the wait.
func (r *reader) readFailed(ctx context.Context, err error, ping, retry time.Duration) bool {
	var rerr redis.Error
	switch {
	case isTimeout(err):
		if r.pinged {
			r.h.fail(r.ps, fmt.Errorf("no reply to PING within %s; reconnecting", ping))
			r.ps = nil
			return true
		}
		if err = r.ps.Ping(ctx); err == nil {
			r.pinged = true
			return true
		}
		err = fmt.Errorf("ping: %w", err)
	case errors.As(err, &rerr):
		r.delay, r.pinged = 0, false
		r.h.refused(fmt.Errorf("the server refused a command: %w", err))
		return true
	default:
		err = fmt.Errorf("receive: %w", err)
	}
	return r.backoff(ctx, err, retry)
}

// backoff drops the connection after err, tells the subscriptions, and
// waits twice as long as last time (at least minRetryDelay, at most retry).
// It reports false when ctx ended during the wait.
func (r *reader) backoff(ctx context.Context, err error, retry time.Duration) bool {
	r.h.fail(r.ps, err)
	r.ps = nil
	r.delay = min(max(2*r.delay, minRetryDelay), retry)
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// isTimeout reports whether err is a network timeout: a read that got
// nothing within its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
