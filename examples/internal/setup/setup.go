// Package setup is the plumbing herd's examples share, so that each of them
// shows what it is about and not how it reads flags: the flags that place a
// process in an election, Redis clients with the settings herd needs, and a
// main that stops on Ctrl+C or SIGTERM. Nothing here is herd's API; a
// program of your own would write its own few lines instead.
package setup

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Node is where a process of an example runs and who it is: the flags
// -redis, -id, -lock and -lock-ttl.
type Node struct {
	// Redis is a redis:// URL or host:port.
	Redis string
	// ID is the node id, unique among the processes of the election.
	ID string
	// Lock is the lock name: processes with the same one elect one master.
	Lock string
	// LockTTL is the master lock's TTL; the election's other timings follow
	// it in the specification's ratios (see docs/tuning.md).
	LockTTL time.Duration
}

// Flags registers the node's flags on fs: -redis (default $REDIS_ADDR, else
// redis://127.0.0.1:6379), -id (default <hostname>-<pid>), -lock (default
// lock) and -lock-ttl (default 6s).
func (n *Node) Flags(fs *flag.FlagSet, lock string) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "redis://127.0.0.1:6379"
	}
	host, _ := os.Hostname()
	fs.StringVar(&n.Redis, "redis", addr, "Redis URL (redis://host:port/db) or host:port; default $REDIS_ADDR or redis://127.0.0.1:6379")
	fs.StringVar(&n.ID, "id", fmt.Sprintf("%s-%d", host, os.Getpid()), "node id, unique in the cluster")
	fs.StringVar(&n.Lock, "lock", lock, "lock name: the processes with the same one elect one master")
	fs.DurationVar(&n.LockTTL, "lock-ttl", 6*time.Second, "master lock TTL; the other timings follow the specification's ratios (see docs/tuning.md)")
}

// Client returns a client of the node's Redis (see Options). The caller
// closes it.
func (n Node) Client() (*redis.Client, error) {
	opts, err := Options(n.Redis)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opts), nil
}

// RedisFlag registers -redis for a demo that runs on an embedded miniredis
// unless told otherwise: its default is $REDIS_ADDR, else "", which Connect
// takes for the embedded server.
func RedisFlag(fs *flag.FlagSet) *string {
	return fs.String("redis", os.Getenv("REDIS_ADDR"), "Redis to run on, host:port or redis:// URL (default: $REDIS_ADDR, else an embedded miniredis)")
}

// Options returns client options for addr, a redis:// URL or host:port,
// with the settings herd needs: ContextTimeoutEnabled (herd's deadlines
// only hold with it), no CLIENT SETINFO and no maintenance notifications
// (not every server has them).
func Options(addr string) (*redis.Options, error) {
	var opts *redis.Options
	if strings.Contains(addr, "://") {
		var err error
		if opts, err = redis.ParseURL(addr); err != nil {
			return nil, fmt.Errorf("-redis %q: %w", addr, err)
		}
	} else {
		opts = &redis.Options{Addr: addr}
	}
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opts, nil
}

// Connect returns a factory of clients of addr (see Options), one per node
// as separate processes would have, or of an embedded miniredis when addr
// is "". where describes the server for the output; cleanup stops the
// embedded server. It fails when the server does not answer PING.
func Connect(addr string) (newClient func() *redis.Client, where string, cleanup func(), err error) {
	cleanup = func() {}
	where = addr
	if addr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("start embedded miniredis: %w", err)
		}
		mr.ClockTTL(true) // TTLs follow the wall clock, as on a real server
		addr, where, cleanup = mr.Addr(), "an embedded miniredis ("+mr.Addr()+")", mr.Close
	}
	opts, err := Options(addr)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	probe := redis.NewClient(opts)
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := probe.Ping(ctx).Err(); err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	return func() *redis.Client { return redis.NewClient(opts) }, where, cleanup, nil
}

// Main runs run with a ctx that ends on Ctrl+C or SIGTERM, and exits with
// status 1, printing "name: error", when it returns an error.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
