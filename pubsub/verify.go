package pubsub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/wire"
)

// Term verification. A term on a message or notice is a claim that anyone
// who may PUBLISH can make; the term key (<lockName>:term) is where Redis
// records every term it mints (acquire.lua), and it only grows. A
// Subscriber therefore accepts a term above those it has verified only
// once the term key is at or above it (docs/routing.md, "Verified terms").

// verify reports whether Redis confirms term: it is at or below a term
// already known to exist (read from the term key before, or given by
// Config.Terms or ObserveTerm), or at or below the term key read now, once,
// within Config.OpTimeout. It returns nil when confirmed, and otherwise the
// refusal with Term, Stored and Err set; the caller adds what identifies
// the message. It never raises the fence; a term key read does raise the
// known terms.
func (s *Subscriber) verify(ctx context.Context, term int64) *UnverifiedTermError {
	if term <= s.known.Load() {
		return nil
	}
	if s.cfg.Terms != nil {
		raise(&s.known, s.cfg.Terms.ObservedTerm())
		if term <= s.known.Load() {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	stored, err := s.terms.atLeast(ctx, term)
	if err != nil {
		return &UnverifiedTermError{Term: term, Err: err}
	}
	raise(&s.known, stored)
	if term > stored {
		return &UnverifiedTermError{Term: term, Stored: stored}
	}
	return nil
}

// refuse counts and reports a message or notice whose term was not verified.
func (s *Subscriber) refuse(e *UnverifiedTermError) {
	s.unverified.Add(1)
	s.recv.report(e)
}

// readTerm reads the term key once: the last term minted on the lock name.
func (s *Subscriber) readTerm(ctx context.Context) (int64, error) {
	raw, err := s.client.Get(ctx, s.keys.Term).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("%w: %q does not exist (Redis lost its data, or no master was ever elected)", ErrTermMissing, s.keys.Term)
	case err != nil:
		// Redis could not be asked: a connection problem, reported as one.
		return 0, fmt.Errorf("read %q: %w: %w", s.keys.Term, ErrConnection, err)
	}
	term, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || term < 0 {
		return 0, fmt.Errorf("key %q holds %q, %w", s.keys.Term, wire.Truncate(raw), errNotATerm)
	}
	return term, nil
}

// errNotATerm is wrapped by readTerm when the term key holds something herd
// never writes there.
var errNotATerm = errors.New("not a term")

// raise sets v to term when term is higher.
func raise(v *atomic.Int64, term int64) {
	for {
		h := v.Load()
		if term <= h || v.CompareAndSwap(h, term) {
			return
		}
	}
}

// termReads reads the term key for any number of callers, one read at a
// time: a caller that needs a read while one is in flight waits for it
// instead of sending its own. It is safe for concurrent use.
//
// A read already in flight when a caller arrives may have run on the server
// before the PUBLISH of the caller's message, so its answer can confirm the
// caller's term (the key only grows) but not refuse it: on a lower answer
// the caller takes the next read, which starts after the one it joined
// ended, so after the caller arrived.
type termReads struct {
	read func(ctx context.Context) (int64, error) // one GET of the term key

	mu       sync.Mutex
	inFlight *termRead // guarded by mu; nil when no read runs
}

// termRead is one read of the term key; term and err are set before done
// is closed.
type termRead struct {
	done chan struct{}
	term int64
	err  error
}

// atLeast returns the term key's value, read or shared as described on
// termReads; a nil error with a value below term is a refusal. ctx bounds
// the caller's wait, and the read when the caller is the one sending it.
func (t *termReads) atLeast(ctx context.Context, term int64) (int64, error) {
	for first := true; ; first = false {
		r, own := t.join()
		if own {
			r.term, r.err = t.read(ctx)
			t.mu.Lock()
			t.inFlight = nil
			t.mu.Unlock()
			close(r.done)
		} else {
			select {
			case <-r.done:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		if own || !first || (r.err == nil && r.term >= term) {
			return r.term, r.err
		}
	}
}

// latest returns the term key's value from a read that started after the
// call: no answer of an earlier read confirms math.MaxInt64.
func (t *termReads) latest(ctx context.Context) (int64, error) {
	return t.atLeast(ctx, math.MaxInt64)
}

// join returns the read in flight, or starts one that the caller must send
// (own).
func (t *termReads) join() (r *termRead, own bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inFlight != nil {
		return t.inFlight, false
	}
	t.inFlight = &termRead{done: make(chan struct{})}
	return t.inFlight, true
}
