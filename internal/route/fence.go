package route

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/atomicmax"
	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/keyspace"
)

// Term verification. A term on a message or notice is a claim that anyone
// who may PUBLISH (or XADD) can make; the term key (<lockName>:term) is
// where Redis records every term it mints (acquire.lua), and it only grows.
// A receiver therefore accepts a term above those it has verified only once
// the term key is at or above it (docs/routing.md, "Verified terms").

// TermSource tells the highest master term this process has observed by
// other means than the messages (pubsub.TermSource). Its terms count as
// verified.
type TermSource interface {
	ObservedTerm() int64
}

// Fence is a receiver's term fence, shared by pubsub.Subscriber and
// durable.Consumer: it admits a message only when its term is not below the
// highest master term seen, and raises that term only to terms Redis has
// confirmed. It is safe for concurrent use.
type Fence struct {
	// highest is the fence: the highest master term seen, raised only to
	// terms Redis has confirmed. known is the highest term known to exist
	// (term key reads, the TermSource, Observe); highest <= known, and a
	// term up to known needs no read to be verified.
	highest, known atomic.Int64

	terms   TermSource    // nil: none
	timeout time.Duration // bounds each wait for the term key
	reads   termReads
}

// NewFence returns the fence of a receiver that reads the term key termKey
// through client, each read (and each wait for one) bounded by timeout, and
// trusts the terms of terms (nil: none).
func NewFence(client redis.Cmdable, termKey string, terms TermSource, timeout time.Duration) *Fence {
	f := &Fence{terms: terms, timeout: timeout}
	f.reads.read = func(ctx context.Context) (int64, error) { return ReadTerm(ctx, client, termKey) }
	return f
}

// Observe records that the master term t exists and raises the fence to
// it; lower terms change nothing. t counts as verified: pass only terms
// Redis has shown (a script's reply, the term key), never one read from a
// message or notice alone.
func (f *Fence) Observe(t int64) {
	atomicmax.Raise(&f.known, t) // first, so that highest <= known holds
	atomicmax.Raise(&f.highest, t)
}

// Poll observes the TermSource's term, if there is a TermSource: a
// receiver calls it before it judges each message.
func (f *Fence) Poll() {
	if f.terms != nil {
		f.Observe(f.terms.ObservedTerm())
	}
}

// Highest returns the fence: the highest master term seen (0: none yet).
func (f *Fence) Highest() int64 { return f.highest.Load() }

// Raise raises the fence to t, which the caller has verified (Verify).
func (f *Fence) Raise(t int64) { atomicmax.Raise(&f.highest, t) }

// Admit accepts t when it is not below the fence, raising the fence to it
// (the caller has verified t). It returns the fence it compared with.
func (f *Fence) Admit(t int64) (highest int64, ok bool) {
	for {
		h := f.highest.Load()
		if t < h {
			return h, false
		}
		if t == h || f.highest.CompareAndSwap(h, t) {
			return h, true
		}
	}
}

// Verify reports whether Redis confirms t: it is at or below a term already
// known to exist (read from the term key before, or given by the
// TermSource or Observe), or at or below the term key read now, once,
// within the timeout. When it does not, stored is the term key's value and
// err is nil; or the read failed, and err says why (matching ErrTermMissing
// when the key does not exist, ErrConnection when Redis could not be asked,
// ErrNotATerm, or ctx's error). It never raises the fence; a read of the
// term key does raise the known terms.
func (f *Fence) Verify(ctx context.Context, t int64) (ok bool, stored int64, err error) {
	if t <= f.known.Load() {
		return true, 0, nil
	}
	if f.terms != nil {
		atomicmax.Raise(&f.known, f.terms.ObservedTerm())
		if t <= f.known.Load() {
			return true, 0, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	stored, err = f.reads.atLeast(ctx, t)
	if err != nil {
		return false, 0, err
	}
	atomicmax.Raise(&f.known, stored)
	return t <= stored, stored, nil
}

// Latest reads the term key, within the timeout, from a read that starts
// after the call, and observes its term: what a receiver does at start and
// after a reconnect, since notices and messages published while it was
// away are lost but the term key remembers them. The error is ReadTerm's.
func (f *Fence) Latest(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	t, err := f.reads.latest(ctx)
	if err != nil {
		return 0, err
	}
	f.Observe(t)
	return t, nil
}

// ReadTerm reads the term key once: the last term minted on its lock name.
// The error matches ErrTermMissing when the key does not exist (no master
// was ever elected, or Redis lost its data), ErrConnection when Redis could
// not be asked, and ErrNotATerm when the key holds something else (a term
// above keyspace.MaxTerm included).
func ReadTerm(ctx context.Context, client redis.Cmdable, key string) (int64, error) {
	raw, err := client.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("%w: %q does not exist (Redis lost its data, or no master was ever elected)", ErrTermMissing, key)
	case err != nil:
		return 0, fmt.Errorf("read %q: %w: %w", key, ErrConnection, err)
	}
	return parseTerm(key, raw)
}

// parseTerm reads raw, the content of the term key key: a term, or an
// error matching ErrNotATerm.
func parseTerm(key, raw string) (int64, error) {
	term, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || term < 0 {
		return 0, fmt.Errorf("key %q holds %q, %w", key, wire.Truncate(raw), ErrNotATerm)
	}
	if term > keyspace.MaxTerm {
		// Garbage: herd never mints a term above it. Raising the fence to
		// it would refuse every real master's messages.
		return 0, fmt.Errorf("key %q holds %d, above the largest term herd mints (%d): %w", key, term, int64(keyspace.MaxTerm), ErrNotATerm)
	}
	return term, nil
}

// termReads reads the term key for any number of callers, one read at a
// time: a caller that needs a read while one is in flight waits for it
// instead of sending its own. It is safe for concurrent use.
//
// A read already in flight when a caller arrives may have run on the server
// before the message the caller judges was written, so its answer can
// confirm the caller's term (the key only grows) but not refuse it: on a
// lower answer the caller takes the next read, which starts after the one
// it joined ended, so after the caller arrived.
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

// wait waits for r's answer; the error is ctx's when ctx ends first.
func (r *termRead) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// atLeast returns the term key's value, read or shared as described on
// termReads; a nil error with a value below term is a refusal. ctx bounds
// the caller's wait, and the read when the caller is the one sending it.
func (t *termReads) atLeast(ctx context.Context, term int64) (int64, error) {
	r, own := t.join()
	if own {
		return t.send(ctx, r)
	}
	if err := r.wait(ctx); err != nil {
		return 0, err
	}
	if r.err == nil && r.term >= term {
		return r.term, nil
	}
	return t.after(ctx)
}

// after returns the answer of a read that started after the read the
// caller joined had ended, so after the caller arrived: its own, or one
// in flight that it joins.
func (t *termReads) after(ctx context.Context) (int64, error) {
	r, own := t.join()
	if own {
		return t.send(ctx, r)
	}
	if err := r.wait(ctx); err != nil {
		return 0, err
	}
	return r.term, r.err
}

// send makes the read r that the caller owns (join), bounded by ctx, and
// gives its answer to every caller waiting for it.
func (t *termReads) send(ctx context.Context, r *termRead) (int64, error) {
	r.term, r.err = t.read(ctx)
	t.mu.Lock()
	t.inFlight = nil
	t.mu.Unlock()
	close(r.done)
	return r.term, r.err
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
