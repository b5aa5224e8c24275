package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// timings are the election timings of one measurement, shared by every
// peer: the lock (or lease, or session) lives TTL, the leader renews it
// every Renew, a process that is not leader looks at it every Check.
type timings struct {
	TTL, Renew, Check time.Duration
}

// timingsOf returns herd's ratios for ttl (the specification's 30 s : 10 s :
// 5 s): renew every ttl/3, check every ttl/6.
func timingsOf(ttl time.Duration) timings {
	return timings{TTL: ttl, Renew: ttl / 3, Check: ttl / 6}
}

// node is one process of a leader election as a peer builds it, with a
// connection of its own.
type node interface {
	// start joins the election and returns when the peer's API says the
	// process is in it: herd's Start returned, etcd's session is open and
	// its Campaign running, a polling loop made its first attempt.
	start(ctx context.Context) error
	// acquired receives the instant the process became leader, as its user
	// code would learn it (herd's OnMasterAcquired, etcd's Campaign
	// returning, a polling loop's successful obtain).
	acquired() <-chan time.Time
	// leader tells whether the process believes it leads.
	leader() bool
	// stop leaves gracefully, as a process's shutdown would: leadership is
	// released, connections are closed. It may be called after crash.
	stop(ctx context.Context) error
	// crash closes the process's connections without releasing anything,
	// as if it had been killed; stop afterwards frees what is left.
	crash()
}

// peer is one implementation of leader election measured by the run.
type peer struct {
	// name is how the table names it.
	name string
	// store names what it keeps its lock in: "redis" or "etcd".
	store string
	// newNode makes a process of the election on lock with timings t and
	// a connection that is already established.
	newNode func(ctx context.Context, lock, id string, t timings) (node, error)
	// uncontested, when set, measures one election on a fresh lock, from a
	// connected client to the process knowing it leads, and cleans up.
	// part is a second duration some peers report (etcd: the Campaign
	// alone, without opening its session); zero when none.
	uncontested func(ctx context.Context, lock string) (total, part time.Duration, err error)
	// hook, for a Redis peer, counts what the command path of every
	// node's client sends; the traffic of subscriptions, which does not pass
	// it, is read from the server (INFO commandstats).
	hook *rtHook
	// counter, for etcd, returns the requests every node's client sent so
	// far.
	counter func() int64
}

// redisPeer is a peer on the Redis at addr. Each process gets a client of
// its own (connectRedis, counted by hook), which newNode builds the process
// on; each uncontested election gets one too, uncounted.
func redisPeer(name, addr string, hook *rtHook,
	newNode func(c *redis.Client, lock, id string, t timings) node,
	uncontested func(ctx context.Context, c *redis.Client, lock string) (total, part time.Duration, err error),
) peer {
	return peer{
		name:  name,
		store: "redis",
		hook:  hook,
		newNode: func(ctx context.Context, lock, id string, t timings) (node, error) {
			c, err := connectRedis(ctx, addr, hook)
			if err != nil {
				return nil, err
			}
			return newNode(c, lock, id, t), nil
		},
		uncontested: func(ctx context.Context, lock string) (time.Duration, time.Duration, error) {
			c, err := connectRedis(ctx, addr, nil)
			if err != nil {
				return 0, 0, err
			}
			defer c.Close()
			return uncontested(ctx, c, lock)
		},
	}
}

// stamp sends now on ch without blocking (ch is buffered; a full channel
// means an earlier instant is still unread, which is the one that counts).
func stamp(ch chan time.Time) {
	select {
	case ch <- time.Now():
	default:
	}
}
