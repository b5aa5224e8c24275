package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
)

type options struct {
	Nodes   int
	LockTTL time.Duration
	Quiet   bool
	Color   bool
}

func defaultOptions() options {
	return options{Nodes: 4, LockTTL: time.Second}
}

// config derives a node's configuration from the LockTTL with the
// specification's ratios (30s : 10s : 5s : 2s).
func (o options) config(lock string, i int) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = lock
	cfg.NodeID = fmt.Sprintf("node-%d", i)
	cfg.Identifier = cfg.NodeID
	cfg.LockTTL = o.LockTTL
	cfg.HeartbeatInterval = o.LockTTL / 3
	cfg.CheckInterval = o.LockTTL / 6
	cfg.ElectionJitter = o.LockTTL / 15
	return cfg
}

// node is one election with its own Redis client, as one process would have.
type node struct {
	*masterelection.MasterElection
	client *redis.Client
}

// summary is what the scenario measured.
type summary struct {
	FirstElection time.Duration
	Failover      time.Duration
	Handover      time.Duration
	Terms         []int64
	Errors        int
}

func (s summary) print(out io.Writer) {
	fmt.Fprintln(out, "\nsummary")
	fmt.Fprintf(out, "  %-28s %v\n", "first election", s.FirstElection.Round(10*time.Microsecond))
	fmt.Fprintf(out, "  %-28s %v\n", "crash failover", s.Failover.Round(10*time.Microsecond))
	fmt.Fprintf(out, "  %-28s %v\n", "graceful handover", s.Handover.Round(10*time.Microsecond))
	fmt.Fprintf(out, "  %-28s %v\n", "terms (strictly increasing)", s.Terms)
	fmt.Fprintf(out, "  %-28s %d\n", "error events", s.Errors)
}

// runScenario: elect, crash the master, fail over, hand over gracefully.
func runScenario(ctx context.Context, o options, newClient func() *redis.Client, out io.Writer) (summary, error) {
	if o.Nodes < 3 {
		return summary{}, fmt.Errorf("need at least 3 nodes, got %d", o.Nodes)
	}
	tl := newTimeline(out, o.Quiet, o.Color)
	lock := fmt.Sprintf("herd-demo-%d", time.Now().UnixNano())
	var (
		s     summary
		mu    sync.Mutex
		nodes []*node
	)
	stopAll := func() {
		for _, n := range nodes {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = n.Stop(sctx)
			cancel()
			_ = n.client.Close()
		}
	}
	defer stopAll()

	for i := 1; i <= o.Nodes; i++ {
		c := newClient()
		m, err := masterelection.New(c, o.config(lock, i))
		if err != nil {
			_ = c.Close()
			return s, err
		}
		id := m.NodeID()
		m.OnEvent(func(e masterelection.Event) {
			switch e.Kind {
			case masterelection.EventMasterAcquired:
				mu.Lock()
				s.Terms = append(s.Terms, e.Term)
				mu.Unlock()
				tl.event(id, fmt.Sprintf("MASTER (term %d)", e.Term), colorGreen)
			case masterelection.EventMasterLost:
				tl.event(id, fmt.Sprintf("no longer master (term %d)", e.Term), colorYellow)
			case masterelection.EventElectionCompleted:
				if !e.IsMaster {
					tl.event(id, "slave", colorNone)
				}
			case masterelection.EventError:
				mu.Lock()
				s.Errors++
				mu.Unlock()
				tl.event(id, "error: "+e.Err.Error(), colorRed)
			}
		})
		nodes = append(nodes, &node{MasterElection: m, client: c})
	}

	// 1. Everybody starts at once; exactly one becomes master.
	tl.note(fmt.Sprintf("starting %d nodes at once", o.Nodes))
	began := time.Now()
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() { errs <- n.Start(ctx) }()
	}
	for range nodes {
		if err := <-errs; err != nil {
			return s, err
		}
	}
	s.FirstElection = time.Since(began)
	master, err := waitMaster(ctx, nodes, o.LockTTL)
	if err != nil {
		return s, err
	}

	// 2. The master crashes: it stops without releasing its lock (its
	//    connection dies, as with kill -9), so the others must wait for the
	//    lock to expire.
	tl.note(fmt.Sprintf("crashing %s: no release, its lock must expire (LockTTL %v)", master.NodeID(), o.LockTTL))
	crashed := master
	_ = crashed.client.Close()
	crashAt := time.Now()
	rest := without(nodes, crashed)
	next, err := waitMaster(ctx, rest, 3*o.LockTTL)
	if err != nil {
		return s, err
	}
	s.Failover = time.Since(crashAt)
	tl.note(fmt.Sprintf("failover took %v (LockTTL %v)", s.Failover.Round(time.Millisecond), o.LockTTL))
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	_ = crashed.Stop(sctx) // its release fails: the connection is gone
	cancel()

	// 3. The new master stops gracefully: it releases the lock and announces
	//    it, and a slave takes over at once.
	tl.note(fmt.Sprintf("stopping %s gracefully", next.NodeID()))
	handAt := time.Now()
	sctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	err = next.Stop(sctx)
	cancel()
	if err != nil {
		return s, err
	}
	third, err := waitMaster(ctx, without(rest, next), o.LockTTL)
	if err != nil {
		return s, err
	}
	s.Handover = time.Since(handAt)
	tl.note(fmt.Sprintf("handover to %s took %v", third.NodeID(), s.Handover.Round(time.Microsecond)))
	time.Sleep(20 * time.Millisecond) // let the last events print
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(s.Terms); i++ {
		if s.Terms[i] <= s.Terms[i-1] {
			return s, fmt.Errorf("terms not increasing: %v", s.Terms)
		}
	}
	s.Terms = append([]int64(nil), s.Terms...)
	return s, nil
}

func waitMaster(ctx context.Context, nodes []*node, within time.Duration) (*node, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.IsMaster() {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Microsecond):
		}
	}
	return nil, errors.New("no master elected in time")
}

func without(nodes []*node, x *node) []*node {
	var out []*node
	for _, n := range nodes {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}
