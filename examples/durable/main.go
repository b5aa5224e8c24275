// Command durable shows durable routing (package durable): a master sends
// jobs to three slaves' inboxes on Redis Streams, one slave is killed with
// jobs in hand (read, some handled but not acknowledged, more queued), the
// master is told it is gone and hands its unacknowledged jobs to the other
// two, and every job ends up handled. The summary counts the jobs lost (0)
// and the duplicates (jobs the dead slave handled but could not
// acknowledge, handled again elsewhere).
//
// It runs on an embedded miniredis, or on the Redis given by -redis or
// REDIS_ADDR (host:port or a redis:// URL), in a few seconds:
//
//	go run ./examples/durable
//	go run ./examples/durable -redis 127.0.0.1:6379 -jobs 1000
//
// The nodes run in one process, each with its own Redis client as separate
// processes would have; killing a node closes its client without any
// goodbye, as a crash would.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

func main() {
	o := defaultOptions()
	fs := setup.Flags("durable")
	fs.IntVar(&o.Jobs, "jobs", o.Jobs, "number of jobs to send")
	fs.DurationVar(&o.Work, "work", o.Work, "time each job takes")
	fs.DurationVar(&o.LockTTL, "lock-ttl", o.LockTTL, "master lock TTL; a dead slave is removed after half of it")
	setup.Demo(fs, "durable routing", func(ctx context.Context, newClient func() *redis.Client) error {
		s, err := run(ctx, newClient, o, os.Stdout)
		if err != nil {
			return err
		}
		s.print(os.Stdout)
		if s.Lost != 0 {
			return fmt.Errorf("%d messages lost", s.Lost)
		}
		return nil
	})
}

// options of a run.
type options struct {
	Jobs    int
	Work    time.Duration
	LockTTL time.Duration
	// KillAfter is how many jobs the victim handles before it is killed.
	KillAfter int
}

func defaultOptions() options {
	return options{Jobs: 300, Work: 5 * time.Millisecond, LockTTL: 2 * time.Second, KillAfter: 20}
}

// summary is what a run counted.
type summary struct {
	Sent, Handlings, ByVictim, Moved, Lost, Duplicates int
	VictimInFlight                                     int // read by the victim, not acknowledged, when it died
	Removed                                            time.Duration
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  jobs sent and stored                 %d\n", s.Sent)
	fmt.Fprintf(w, "  handled by node-3 before it died     %d\n", s.ByVictim)
	fmt.Fprintf(w, "  node-3's jobs finished elsewhere     %d\n", s.Moved)
	fmt.Fprintf(w, "  kill -> slave-removed on the master  %v\n", s.Removed.Round(time.Millisecond))
	fmt.Fprintf(w, "  handlings in all                     %d\n", s.Handlings)
	fmt.Fprintf(w, "  duplicates                           %d (handled by node-3, not acknowledged, handled again)\n", s.Duplicates)
	fmt.Fprintf(w, "  messages lost                        %d\n", s.Lost)
}

// ledger records every handling of every job.
type ledger struct {
	mu   sync.Mutex
	by   map[string][]string // job id -> nodes that handled it, in order
	done chan struct{}       // closed when every job of want was handled
	want int
}

func (l *ledger) record(job, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.by[job] = append(l.by[job], node)
	if len(l.by) == l.want {
		select {
		case <-l.done:
		default:
			close(l.done)
		}
	}
}

func (l *ledger) count(node string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, nodes := range l.by {
		for _, x := range nodes {
			if x == node {
				n++
			}
		}
	}
	return n
}

// node is one process: an election, and a Consumer of its inbox.
type node struct {
	id     string
	client *redis.Client
	m      *masterelection.MasterElection
	con    *durable.Consumer
}

// config is a node's election: the timings left unset follow ttl in the
// default ratios, so a dead slave is removed ttl/2 after its last
// heartbeat, within a sweep (ttl/6).
func config(lock, id string, ttl time.Duration) masterelection.Config {
	return masterelection.Config{LockName: lock, NodeID: id, Identifier: id, LockTTL: ttl}
}

// run starts the nodes, sends the jobs, kills node-3 and waits until every
// job was handled.
func run(ctx context.Context, newClient func() *redis.Client, o options, out io.Writer) (s summary, err error) {
	lock := fmt.Sprintf("durable-demo-%d", time.Now().UnixNano())
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	book := &ledger{by: map[string][]string{}, done: make(chan struct{}), want: o.Jobs}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = n.m.Stop(sctx)
			cancel()
			_ = n.con.Close()
			_ = n.client.Close()
		}
		c := newClient()
		defer c.Close()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		keys := nodes[0].m.Keys()
		inboxes, _ := c.Keys(dctx, keys.InboxPattern()).Result()
		_ = c.Del(dctx, append(keys.Stored(), inboxes...)...).Err()
	}()
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("node-%d", i)
		c := newClient()
		m, err := masterelection.New(c, config(lock, id, o.LockTTL))
		if err != nil {
			_ = c.Close()
			return s, err
		}
		con, err := durable.NewConsumer(c, id, durable.Config{Terms: m, Holds: m.HoldsNodeID, Block: 100 * time.Millisecond, RetryDelay: 100 * time.Millisecond})
		if err != nil {
			_ = c.Close()
			return s, err
		}
		con.HandleDefault(func(ctx context.Context, d durable.Delivery) error {
			select {
			case <-time.After(o.Work): // the job's work
			case <-ctx.Done():
				return ctx.Err()
			}
			book.record(d.ID, id)
			return nil
		})
		n := &node{id: id, client: c, m: m, con: con}
		nodes = append(nodes, n)
		if err := con.Start(ctx); err != nil {
			return s, fmt.Errorf("%s: %w", id, err)
		}
		if err := m.Start(ctx); err != nil {
			return s, fmt.Errorf("%s: %w", id, err)
		}
		if i == 1 && !m.IsMaster() {
			return s, errors.New("node-1, the first candidate, is not master")
		}
	}
	master, victim := nodes[0], nodes[2]
	say("node-1 is master (term %d); node-2, node-3, node-4 are slaves", master.m.Term())
	router, err := durable.NewRouter(master.client, master.m, nil, durable.Config{
		OnError:       func(err error) { say("sweep: %v", err) },
		SweepInterval: time.Second,
	})
	if err != nil {
		return s, err
	}
	removed := make(chan time.Time, 4)
	master.m.OnSlaveRemoved(func(id string) {
		if id == victim.id {
			removed <- time.Now()
		}
	})
	stop := router.Maintain(master.m, nil) // PickRendezvous
	defer stop()
	if err := waitFor(ctx, 10*time.Second, func() bool {
		sl, err := master.m.Slaves(ctx)
		return err == nil && len(sl) == 3
	}); err != nil {
		return s, fmt.Errorf("the master does not see its three slaves: %w", err)
	}

	var out2 []pubsub.Outgoing
	toVictim := map[string]bool{}
	slaves := []string{"node-2", "node-3", "node-4"}
	for i := range o.Jobs {
		out2 = append(out2, pubsub.Outgoing{SlaveID: slaves[i%3], Type: "job", Payload: i})
	}
	res, err := router.SendBatch(ctx, out2)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return s, fmt.Errorf("send: %w", err)
	}
	for i, oc := range res.Outcomes {
		if out2[i].SlaveID == victim.id {
			toVictim[oc.ID] = true
		}
	}
	s.Sent = res.Stored()
	say("node-1 stored %d jobs in the slaves' inboxes (%d script calls, each fenced by its term)", s.Sent, res.Calls)

	if err := waitFor(ctx, 30*time.Second, func() bool { return book.count(victim.id) >= o.KillAfter }); err != nil {
		return s, fmt.Errorf("node-3 does not handle its jobs: %w", err)
	}
	pending, _ := master.client.XPending(ctx, router.Inbox(victim.id), "herd").Result()
	left, _ := master.client.XLen(ctx, router.Inbox(victim.id)).Result()
	killed := time.Now()
	_ = victim.client.Close() // the crash: no acknowledgement, no unregistration, no release
	_ = victim.con.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	_ = victim.m.Stop(sctx)
	cancel()
	s.ByVictim = book.count(victim.id)
	if pending != nil {
		s.VictimInFlight = int(pending.Count)
	}
	say("node-3 killed after handling %d jobs; %d of its jobs were not acknowledged (%d read by it)", s.ByVictim, left, s.VictimInFlight)
	select {
	case at := <-removed:
		s.Removed = at.Sub(killed)
		say("node-1: slave-removed node-3 after %v; its unacknowledged jobs move to node-2 and node-4", s.Removed.Round(time.Millisecond))
	case <-time.After(10 * o.LockTTL):
		return s, errors.New("the master did not remove node-3")
	case <-ctx.Done():
		return s, ctx.Err()
	}
	select {
	case <-book.done:
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
		return s, ctx.Err()
	}
	say("every job handled")

	book.mu.Lock()
	defer book.mu.Unlock()
	for _, oc := range res.Outcomes {
		nodes := book.by[oc.ID]
		if len(nodes) == 0 {
			s.Lost++
			continue
		}
		s.Handlings += len(nodes)
		s.Duplicates += len(nodes) - 1
		if toVictim[oc.ID] && nodes[len(nodes)-1] != victim.id {
			s.Moved++
		}
	}
	return s, nil
}

// waitFor polls cond every 10ms until it holds or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
