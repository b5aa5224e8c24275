package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// assignRows measures package assign: 12a the plan of 10,000 items over
// 100 slaves; 12b-12c the round trips a Worker makes per renewal with 1
// and with 1,000 items; 12d the time from a slave's death (its client
// closed: no renewal, no release) until every item it owned is owned by
// another, as a multiple of SlaveTimeout.
func assignRows(ctx context.Context, env *Env, reps int) []Row {
	items := make([]string, 10000)
	for i := range items {
		items[i] = fmt.Sprintf("camera-%05d", i)
	}
	slaves := make([]assign.Slave, 100)
	for i := range slaves {
		slaves[i] = assign.Slave{ID: fmt.Sprintf("node-%03d", i), Capabilities: registry.Capabilities{MaxSubscriptions: 200, PreferredWorkload: 50 + i%50}}
	}
	var plans []time.Duration
	for range max(reps, 3) {
		began := time.Now()
		if _, err := assign.Assign(items, slaves); err != nil {
			r := Row{ID: "12a", What: "assign: plan of 10,000 items over 100 slaves", Goal: "—"}
			r.Err = err
			return []Row{r}
		}
		plans = append(plans, time.Since(began))
	}
	rows := []Row{LatencyRow("12a", "assign: plan of 10,000 items over 100 slaves of mixed weights (assign.Assign, CPU only)", plans, "—", "")}
	for _, n := range []int{1, 1000} {
		per, err := renewalTrips(ctx, env, n)
		r := Row{ID: map[int]string{1: "12b", 1000: "12c"}[n], What: fmt.Sprintf("assign: round trips per Worker renewal holding %s", map[int]string{1: "1 item", 1000: "1,000 items"}[n]),
			N: 10, Value: fmt.Sprintf("%.2f", per), Goal: "1"}
		r.Err = err
		rows = append(rows, r)
	}
	took, timeout, err := slaveDeath(ctx, env)
	d := Row{ID: "12d", What: "assign: a slave's death → all its items owned by others", N: 1, P50: took, P99: took, TTL: timeout, Goal: "—"}
	d.Err = err
	rows = append(rows, d)
	return group("12b-12c: a client hook's round trips of a Worker holding its items per renewal (assign sync call), over 10 (RenewInterval 20ms); 12d: 3 MasterElections (LockTTL 1s, SlaveTimeout 2s, ProcessTTL 2s), 30 items, LeaseTTL 1s, multiples of SlaveTimeout (the master moves a dead slave's items once the registry drops it).", rows)
}

// tripCounter counts round trips (a command or a pipeline each) and, of
// them, the assign sync calls: a Worker's renewals.
type tripCounter struct{ trips, syncs atomic.Int64 }

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == scripts.AssignSyncSHA {
			h.syncs.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.trips.Add(1); return next(ctx, cmds) }
}

// renewalTrips returns the round trips per renewal of a Worker holding n
// items planned for it by a master that holds the lock.
func renewalTrips(ctx context.Context, env *Env, n int) (float64, error) {
	lock := env.LockName("assign")
	admin := env.NewClient()
	defer admin.Close()
	defer func() { _ = env.Cleanup(context.Background(), admin) }()
	e, err := masterelection.New(admin, masterelection.Config{LockName: lock, NodeID: "planner", LockTTL: time.Minute})
	if err != nil {
		return 0, err
	}
	if err := e.Start(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = e.Stop(context.Background()) }()
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("item-%04d", i)
	}
	cfg := assign.Config{LeaseTTL: time.Second, RenewInterval: 20 * time.Millisecond}
	c := env.NewClient()
	defer c.Close()
	h := &tripCounter{}
	c.AddHook(h)
	we, err := masterelection.New(c, masterelection.Config{LockName: lock, NodeID: "worker", LockTTL: time.Minute}) // never started: the Worker's node id
	if err != nil {
		return 0, err
	}
	w, err := assign.NewWorker(c, we, cfg)
	if err != nil {
		return 0, err
	}
	// The worker must be registered for the plan: register it as a slave.
	if err := e.RegisterProcess(ctx, registry.ProcessInfo{ProcessID: "worker", NodeID: "worker", Role: registry.RoleSlave}); err != nil {
		return 0, err
	}
	p, err := assign.NewPlanner(admin, e, cfg)
	if err != nil {
		return 0, err
	}
	if err := p.SetItems(ctx, items...); err != nil {
		return 0, err
	}
	if _, err := p.PlanNow(ctx); err != nil {
		return 0, err
	}
	if err := w.Start(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = w.Stop(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(w.Owned()) < n {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the worker owns %d of %d items after 10s", len(w.Owned()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	trips0, syncs0 := h.trips.Load(), h.syncs.Load()
	for h.syncs.Load()-syncs0 < 10 && time.Now().Before(deadline) {
		time.Sleep(cfg.RenewInterval)
	}
	syncs := h.syncs.Load() - syncs0
	if syncs == 0 {
		return 0, fmt.Errorf("no renewal within 10s")
	}
	return float64(h.trips.Load()-trips0) / float64(syncs), nil
}

// slaveDeath returns how long after a slave's death every item it owned
// was owned by another slave, and the SlaveTimeout of the election.
func slaveDeath(ctx context.Context, env *Env) (time.Duration, time.Duration, error) {
	const slaveTimeout = 2 * time.Second
	lock := env.LockName("assign-death")
	cfg := assign.Config{LeaseTTL: time.Second, Settle: 50 * time.Millisecond}
	type node struct {
		c *redis.Client
		e *masterelection.MasterElection
		w *assign.Worker
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			_ = n.w.Stop(context.Background())
			_ = n.e.Stop(context.Background())
			_ = n.c.Close()
		}
	}()
	for _, id := range []string{"n1", "n2", "n3"} {
		c := env.NewClient()
		e, err := masterelection.New(c, masterelection.Config{LockName: lock, NodeID: id, LockTTL: time.Second,
			HeartbeatInterval: 250 * time.Millisecond, CheckInterval: 200 * time.Millisecond, ElectionJitter: 50 * time.Millisecond,
			ProcessTTL: 2 * time.Second, SlaveTimeout: slaveTimeout})
		if err != nil {
			return 0, 0, err
		}
		if err := e.Start(ctx); err != nil {
			return 0, 0, err
		}
		p, err := assign.NewPlanner(c, e, cfg)
		if err != nil {
			return 0, 0, err
		}
		go func() { _ = p.Run(runCtx) }()
		w, err := assign.NewWorker(c, e, cfg)
		if err != nil {
			return 0, 0, err
		}
		if err := w.Start(ctx); err != nil {
			return 0, 0, err
		}
		nodes = append(nodes, &node{c: c, e: e, w: w})
		if id == "n1" {
			items := make([]string, 30)
			for i := range items {
				items[i] = fmt.Sprintf("item-%02d", i)
			}
			if err := p.SetItems(ctx, items...); err != nil {
				return 0, 0, err
			}
		}
	}
	owned := func() int {
		n := 0
		for _, x := range nodes {
			n += len(x.w.Owned())
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for owned() < 30 || nodes[1].e.IsMaster() || len(nodes[1].w.Owned()) == 0 {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("the items were not spread within 20s (%d owned)", owned())
		}
		time.Sleep(10 * time.Millisecond)
	}
	victim := nodes[1]
	theirs := victim.w.Owned()
	_ = victim.c.Close() // killed: no renewal, no release, no unregister
	died := time.Now()
	for {
		others := append(slices.Clone(nodes[0].w.Owned()), nodes[2].w.Owned()...)
		all := true
		for _, item := range theirs {
			if !slices.Contains(others, item) {
				all = false
				break
			}
		}
		if all {
			return time.Since(died), slaveTimeout, nil
		}
		if time.Since(died) > 30*time.Second {
			return 0, slaveTimeout, fmt.Errorf("the dead slave's items were not all owned elsewhere within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
