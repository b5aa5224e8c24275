// Command cluster is herd's demo (make demo). Several nodes elect a master on
// one Redis; the master spreads 40 camera subscriptions over the slaves by
// their capabilities and routes each slave its list; a slave is killed and
// its cameras move to the others; the master crashes and a slave takes over
// when its lock expires; the old master comes back and its stale messages
// are refused and rejected by term; a graceful handover follows. Everything
// is printed as a timeline, and a summary table ends the run.
//
// It runs on an embedded miniredis, or on the Redis given by -redis or
// REDIS_ADDR (host:port or a redis:// URL), and takes a few seconds:
//
//	go run ./examples/cluster
//	go run ./examples/cluster -redis redis://127.0.0.1:6379 -nodes 6 -lock-ttl 2s
//	go run ./examples/cluster -quiet
//
// The nodes run in one process, each with its own Redis client as separate
// processes would have. On a real Redis the demo deletes its keys at the end.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/keyspace"
)

func main() {
	o := defaultOptions()
	fs := setup.Flags("cluster")
	addr := setup.RedisFlag(fs)
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "number of nodes (at least 4)")
	fs.IntVar(&o.Cameras, "cameras", o.Cameras, "number of camera subscriptions to assign")
	fs.DurationVar(&o.LockTTL, "lock-ttl", o.LockTTL, "master lock TTL; the other timings follow the default ratios (see docs/tuning.md)")
	fs.DurationVar(&o.SlaveTimeout, "slave-timeout", 0, "how long a slave may miss heartbeats before the master removes it (default: half the lock TTL); ProcessTTL is three times it, at least 1.5 × the lock TTL")
	fs.BoolVar(&o.Quiet, "quiet", false, "print only the summary")
	auto := isTerminal(os.Stdout) && os.Getenv("NO_COLOR") == ""
	o.Color = auto
	fs.Func("color", "colour the timeline: auto (the default: when stdout is a terminal and NO_COLOR is unset), always, never", func(v string) error {
		switch v {
		case "auto":
			o.Color = auto
		case "always":
			o.Color = true
		case "never":
			o.Color = false
		default:
			return errors.New("want auto, always or never")
		}
		return nil
	})
	setup.Main(fs, func(ctx context.Context) error {
		_, err := demo(ctx, o, *addr, os.Stdout)
		return err
	})
}

// demo connects to addr (or starts an embedded miniredis when addr is "")
// and runs the scenario, bounded by a minute whatever happens.
func demo(ctx context.Context, o options, addr string, out io.Writer) (summary, error) {
	if err := o.validate(); err != nil {
		return summary{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	newClient, where, cleanup, err := setup.Connect(addr)
	if err != nil {
		return summary{}, err
	}
	defer cleanup()
	lock := fmt.Sprintf("herd-demo-%d", time.Now().UnixNano())
	if addr != "" {
		defer deleteKeys(newClient, lock)
	}
	tl := newTimeline(out, o.Quiet, o.Color)
	cfg := o.config(lock, 1)
	tl.printf("herd demo: %d nodes, %d cameras, on %s\n", o.Nodes, o.Cameras, where)
	tl.printf("timings: LockTTL %v, HeartbeatInterval %v, CheckInterval %v, ElectionJitter %v, StepDownMargin %v, SlaveTimeout %v, ProcessTTL %v\n",
		cfg.LockTTL, cfg.HeartbeatInterval, cfg.CheckInterval, cfg.ElectionJitter, cfg.StepDownMargin, cfg.SlaveTimeout, cfg.ProcessTTL)
	if !o.Quiet {
		tl.printf("\n")
	}
	s, err := runScenario(ctx, o, lock, newClient, tl)
	if err != nil {
		return s, err
	}
	s.print(out)
	return s, nil
}

// deleteKeys removes the demo's keys from a real Redis (best effort).
func deleteKeys(newClient func() *redis.Client, lock string) {
	c := newClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	k := keyspace.NewKeys(lock, false)
	if err := c.Del(ctx, append(k.Stored(), planKey(lock))...).Err(); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "cluster: delete the demo's keys: %v\n", err)
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
