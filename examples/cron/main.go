// Command cron runs a job every -every on the master only: start it in
// several terminals and exactly one of them runs the job; stop that one
// and another takes over.
//
//	go run ./examples/cron -redis redis://127.0.0.1:6379 -id a -every 2s
//	go run ./examples/cron -redis redis://127.0.0.1:6379 -id b -every 2s
//	go run ./examples/cron -standalone -every 2s   # one instance, no Redis
//
// Two mechanisms keep the job on the master alone:
//
//   - The schedule runs inside OnMasterAcquired, whose ctx is cancelled the
//     moment the mastership ends (lock lost, self-fencing, Stop): the loop
//     stops then, and so does a run in progress that honours its ctx.
//   - Each run goes through MasterElection.RunIfMaster, which checks the
//     mastership right before calling the job and gives it a ctx that ends
//     with the mastership.
//
// A master that was paused past its lock can still act late, so the job
// also fences its one write by term: it appends its run to a Redis stream
// with a script that refuses a term lower than the highest already
// recorded. The stream (<lock>:cron:runs) is the job's history.
//
// -standalone runs the same code without Redis: always master, no
// coordination, for single-instance deployments.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
)

type options struct {
	setup.Node // -redis, -id, -lock, -lock-ttl
	Every      time.Duration
	Standalone bool
}

func main() {
	o := options{}
	fs := o.Node.Flags("cron", "herd-cron-example")
	fs.DurationVar(&o.Every, "every", 2*time.Second, "how often the job runs")
	fs.BoolVar(&o.Standalone, "standalone", false, "single instance without Redis: always master, no coordination")
	setup.Main(fs, func(ctx context.Context) error {
		c, err := newCron(o, os.Stdout)
		if err != nil {
			return err
		}
		return c.run(ctx)
	})
}

// recordRun appends one run to the history stream, fenced by term.
//
// KEYS[1] -> <lock>:cron:runs      (stream of runs: term, node)
// KEYS[2] -> <lock>:cron:max-term  (string: the highest term that recorded a run)
// ARGV[1] -> the recording master's term
// ARGV[2] -> its node id
// Returns: the stream entry id, or -1 (nothing written) when a run of a
// higher term is already recorded: the caller is a stale master.
var recordRun = redis.NewScript(`
local max = tonumber(redis.call('GET', KEYS[2]) or '0')
local term = tonumber(ARGV[1])
if term < max then
  return -1
end
redis.call('SET', KEYS[2], ARGV[1])
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', '1000', '*', 'term', ARGV[1], 'node', ARGV[2])
`)

// errStale is returned by the job when its write was fenced off.
var errStale = errors.New("cron: a newer master has recorded runs: this run was fenced off")

// cron is one process of the example.
type cron struct {
	o      options
	log    *setup.Log
	client *redis.Client // nil in standalone mode
	m      *masterelection.MasterElection
	runs   atomic.Int64 // runs of the job in this process
}

func newCron(o options, out io.Writer) (*cron, error) {
	if o.Every <= 0 {
		return nil, fmt.Errorf("-every %v: must be positive", o.Every)
	}
	c := &cron{o: o, log: setup.NewLog(out, o.ID)}
	// The timings left unset follow LockTTL in the default ratios (docs/tuning.md).
	cfg := masterelection.Config{LockName: o.Lock, NodeID: o.ID, Identifier: o.ID, LockTTL: o.LockTTL, Standalone: o.Standalone}
	if !o.Standalone {
		var err error
		if c.client, err = o.Client(); err != nil {
			return nil, err
		}
	}
	var client redis.UniversalClient
	if c.client != nil {
		client = c.client
	}
	m, err := masterelection.New(client, cfg)
	if err != nil {
		c.close()
		return nil, err
	}
	c.m = m
	m.OnMasterAcquired(c.schedule)
	m.OnEvent(c.log.Roles)
	return c, nil
}

// run takes part in the election until ctx ends, then leaves it.
func (c *cron) run(ctx context.Context) error {
	defer c.close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := c.m.Start(sctx)
	cancel()
	if err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.m.Stop(stopCtx) // waits for a run in progress, then releases the lock
}

func (c *cron) close() {
	if c.client != nil {
		_ = c.client.Close()
	}
}

// schedule is the OnMasterAcquired handler: it runs the job every -every
// until ctx, the mastership's, ends.
func (c *cron) schedule(ctx context.Context, term int64) {
	c.log.Printf("the job runs here every %v while term %d lasts", c.o.Every, term)
	setup.Every(ctx, c.o.Every, func() {
		ran, err := c.m.RunIfMaster(ctx, c.job)
		switch {
		case !ran:
			c.log.Printf("skipped: %v", err) // the mastership ended a moment ago
		case errors.Is(err, context.Canceled) && ctx.Err() == nil:
			// The run's ctx ended with the mastership, in the middle of the
			// run: what it did not finish, the next master's run will do.
			c.log.Printf("run cut short: the mastership ended")
		case err != nil:
			c.log.Printf("run failed: %v", err)
		}
	})
	c.log.Printf("schedule of term %d stopped: mastership over", term)
}

// job is the work: here, record the run, fenced by term, and print it.
// ctx ends when the mastership does.
func (c *cron) job(ctx context.Context, term int64) error {
	n := c.runs.Add(1)
	if c.client == nil {
		c.log.Printf("run #%d (standalone)", n)
		return nil
	}
	k := keys(c.o.Lock)
	id, err := recordRun.Run(ctx, c.client, []string{k.runs, k.maxTerm}, term, c.o.ID).Result()
	if err != nil {
		return fmt.Errorf("record run: %w", err)
	}
	if v, ok := id.(int64); ok && v == -1 {
		return errStale
	}
	c.log.Printf("run #%d, recorded as %v (term %d)", n, id, term)
	return nil
}

type cronKeys struct{ runs, maxTerm string }

// keys names the example's own keys under the election's prefix (which
// keyspace.NewKeys makes a hash tag under Redis Cluster, so that the script
// could also read the election's keys).
func keys(lock string) cronKeys {
	p := keyspace.NewKeys(lock, false).Prefix
	return cronKeys{runs: p + ":cron:runs", maxTerm: p + ":cron:max-term"}
}
