// Command cluster is herd's demo: several processes' worth of nodes elect a
// master on one Redis, the master crashes and is replaced when its lock
// expires, and the new master hands over gracefully, all printed as a
// timeline with the measured times.
//
// It runs on an embedded miniredis, or on the Redis at REDIS_ADDR
// (host:port or a redis:// URL) when that is set:
//
//	go run ./examples/cluster
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/cluster -nodes 5
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func main() {
	o := defaultOptions()
	flag.IntVar(&o.Nodes, "nodes", o.Nodes, "number of nodes (at least 3)")
	flag.DurationVar(&o.LockTTL, "lock-ttl", o.LockTTL, "master lock TTL; the other timings follow the default ratios")
	flag.BoolVar(&o.Quiet, "quiet", o.Quiet, "print only the summary")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	o.Color = isTerminal(os.Stdout)
	if err := demo(ctx, o, os.Getenv("REDIS_ADDR"), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demo connects to addr (or starts an embedded miniredis when addr is "")
// and runs the scenario.
func demo(ctx context.Context, o options, addr string, out io.Writer) error {
	newClient, where, cleanup, err := connect(addr)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(out, "herd demo: %d nodes on %s, LockTTL %v\n", o.Nodes, where, o.LockTTL)
	s, err := runScenario(ctx, o, newClient, out)
	if err != nil {
		return err
	}
	s.print(out)
	return nil
}

// connect returns a factory of clients, one per node as separate processes
// would have, all with ContextTimeoutEnabled so herd's deadlines hold.
func connect(addr string) (newClient func() *redis.Client, where string, cleanup func(), err error) {
	var opts *redis.Options
	cleanup = func() {}
	switch {
	case addr == "":
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("start embedded miniredis: %w", err)
		}
		mr.ClockTTL(true) // TTLs follow the wall clock, as on a real server
		opts, where, cleanup = &redis.Options{Addr: mr.Addr()}, "embedded miniredis "+mr.Addr(), mr.Close
	case strings.Contains(addr, "://"):
		if opts, err = redis.ParseURL(addr); err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_ADDR: %w", err)
		}
		where = addr
	default:
		opts, where = &redis.Options{Addr: addr}, addr
	}
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true
	return func() *redis.Client { return redis.NewClient(opts) }, where, cleanup, nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
