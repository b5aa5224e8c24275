package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// lockAPI is what a polling leader loop needs of a lock library: one try
// to obtain, a refresh, a release. Each is one attempt, no retries.
type lockAPI interface {
	obtain(ctx context.Context) (bool, error)
	refresh(ctx context.Context) (bool, error)
	release(ctx context.Context) error
}

// pollingPeer is a leader loop on a lock library, built the way its users
// build one: try to obtain the lock every Check while not leader, refresh
// it every Renew while leader, release it on stop. newLock makes the lock
// of one process.
func pollingPeer(name, addr string, hook *rtHook, newLock func(c *redis.Client, key string, t timings) lockAPI) peer {
	newNode := func(c *redis.Client, lock, _ string, t timings) node {
		return &pollNode{client: c, lock: newLock(c, lock, t), t: t, acq: make(chan time.Time, 4)}
	}
	return redisPeer(name, addr, hook, newNode,
		func(ctx context.Context, c *redis.Client, lock string) (time.Duration, time.Duration, error) {
			t0 := time.Now()
			l := newLock(c, lock, timingsOf(time.Second))
			ok, err := l.obtain(ctx)
			d := time.Since(t0)
			if err != nil {
				return 0, 0, err
			}
			if !ok {
				return 0, 0, fmt.Errorf("%s: the fresh lock %q was not obtained", name, lock)
			}
			return d, 0, l.release(ctx)
		})
}

// pollNode runs a polling leader loop.
type pollNode struct {
	client *redis.Client
	lock   lockAPI
	t      timings
	acq    chan time.Time

	mu      sync.Mutex
	leading bool
	cancel  context.CancelFunc // set by start
	done    chan struct{}      // closed when the loop has returned
}

func (n *pollNode) start(ctx context.Context) error {
	ok, err := n.lock.obtain(ctx)
	if err != nil {
		return err
	}
	if ok {
		n.setLeading(true)
		stamp(n.acq)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel, n.done = cancel, make(chan struct{})
	go n.loop(lctx)
	return nil
}

func (n *pollNode) loop(ctx context.Context) {
	defer close(n.done)
	for {
		wait := n.t.Check
		if n.leader() {
			wait = n.t.Renew
		}
		select {
		case <-ctx.Done():
			if n.leader() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_ = n.lock.release(rctx)
				cancel()
				n.setLeading(false)
			}
			return
		case <-time.After(wait):
		}
		if n.leader() {
			if ok, err := n.lock.refresh(ctx); !ok || err != nil {
				n.setLeading(false) // lost: poll again
			}
			continue
		}
		if ok, err := n.lock.obtain(ctx); ok && err == nil {
			n.setLeading(true)
			stamp(n.acq)
		}
	}
}

func (n *pollNode) setLeading(b bool) {
	n.mu.Lock()
	n.leading = b
	n.mu.Unlock()
}

func (n *pollNode) leader() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leading
}

func (n *pollNode) acquired() <-chan time.Time { return n.acq }

func (n *pollNode) stop(ctx context.Context) error {
	if n.cancel != nil {
		n.cancel()
		select {
		case <-n.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := n.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}

func (n *pollNode) crash() { _ = n.client.Close() }

// redislockAPI is bsm/redislock: Obtain without retries, Refresh, Release.
type redislockAPI struct {
	locker *redislock.Client
	key    string
	ttl    time.Duration
	held   *redislock.Lock
}

func newRedislock(c *redis.Client, key string, t timings) lockAPI {
	return &redislockAPI{locker: redislock.New(c), key: key, ttl: t.TTL}
}

func (l *redislockAPI) obtain(ctx context.Context) (bool, error) {
	lk, err := l.locker.Obtain(ctx, l.key, l.ttl, &redislock.Options{RetryStrategy: redislock.NoRetry()})
	if errors.Is(err, redislock.ErrNotObtained) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l.held = lk
	return true, nil
}

func (l *redislockAPI) refresh(ctx context.Context) (bool, error) {
	err := l.held.Refresh(ctx, l.ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return false, nil
	}
	return err == nil, err
}

func (l *redislockAPI) release(ctx context.Context) error { return l.held.Release(ctx) }

// redsyncAPI is go-redsync/redsync on one go-redis pool: TryLock,
// Extend, Unlock of a Mutex with the TTL as its expiry.
type redsyncAPI struct {
	m *redsync.Mutex
}

func newRedsync(c *redis.Client, key string, t timings) lockAPI {
	rs := redsync.New(redsyncgoredis.NewPool(c))
	return &redsyncAPI{m: rs.NewMutex(key, redsync.WithExpiry(t.TTL), redsync.WithTries(1))}
}

func (l *redsyncAPI) obtain(ctx context.Context) (bool, error) {
	err := l.m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return false, nil
	}
	return err == nil, err
}

func (l *redsyncAPI) refresh(ctx context.Context) (bool, error) { return l.m.ExtendContext(ctx) }

func (l *redsyncAPI) release(ctx context.Context) error {
	_, err := l.m.UnlockContext(ctx)
	return err
}

// specAPI is the specification's behaviour without herd's notices: a
// process that is not master checks the lock (GET) every CheckInterval
// and, when it is free, waits a random delay of up to ElectionJitter
// (TTL/15, the specification's 2 s of 30 s) before it tries SET NX PX;
// renewal and release check the owner in a script, as the
// specification's do.
type specAPI struct {
	c      *redis.Client
	key    string
	id     string
	ttl    time.Duration
	jitter time.Duration
}

var (
	specRenew   = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`)
	specRelease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)
)

func newSpec(c *redis.Client, key string, t timings) lockAPI {
	return &specAPI{c: c, key: key + ":master", id: fmt.Sprintf("%016x", rand.Uint64()), ttl: t.TTL, jitter: t.TTL / 15}
}

func (l *specAPI) obtain(ctx context.Context) (bool, error) {
	err := l.c.Get(ctx, l.key).Err()
	if err == nil {
		return false, nil // held
	}
	if !errors.Is(err, redis.Nil) {
		return false, err
	}
	if l.jitter > 0 {
		select {
		case <-time.After(rand.N(l.jitter)):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return l.c.SetNX(ctx, l.key, l.id, l.ttl).Result()
}

func (l *specAPI) refresh(ctx context.Context) (bool, error) {
	n, err := specRenew.Run(ctx, l.c, []string{l.key}, l.id, l.ttl.Milliseconds()).Int()
	return n == 1, err
}

func (l *specAPI) release(ctx context.Context) error {
	return specRelease.Run(ctx, l.c, []string{l.key}, l.id).Err()
}
