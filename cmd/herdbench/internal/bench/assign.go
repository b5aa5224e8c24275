package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// assignRows measures package assign: 12a the plan of 10,000 items over
// 100 slaves; 12e-12g its balance and moves (balanceRows); 12b-12c the round trips a Worker makes per renewal with 1
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
	rows = append(rows, balanceRows(items)...)
	return group("12b-12c: round trips (client hook) per renewal of a Worker holding its items, 10 renewals, RenewInterval 20ms; 12d: 3 elections (LockTTL 1s, SlaveTimeout 2s, ProcessTTL 2s), 30 items, LeaseTTL 1s, multiples of SlaveTimeout; 12e-12g: 10,000 items, 100 equal slaves; Reassign, 10 joins and 10 leaves.", rows)
}

// balanceRows are 12e-12g: over 100 slaves of equal capabilities, the
// spread of a plan of items (most minus fewest items per slave), and the
// items moved, on average over 10 each, when a slave joins and when one
// leaves (assign.Reassign from the plan before). They count, time nothing.
func balanceRows(items []string) []Row {
	const n, runs = 100, 10
	slaves := make([]assign.Slave, n)
	for i := range slaves {
		slaves[i] = assign.Slave{ID: fmt.Sprintf("node-%03d", i)}
	}
	fail := func(id string, err error) []Row { return []Row{{ID: id, What: "assign: balance", Err: err}} }
	base, err := assign.Assign(items, slaves)
	if err != nil {
		return fail("12e", err)
	}
	fewest, most := len(items), 0
	for _, s := range slaves {
		c := len(base.Items(s.ID))
		fewest, most = min(fewest, c), max(most, c)
	}
	var joined, left, leavers int
	for i := range runs {
		after, err := assign.Reassign(base, items, append(slices.Clone(slaves), assign.Slave{ID: fmt.Sprintf("joiner-%d", i)}))
		if err != nil {
			return fail("12f", err)
		}
		joined += len(assign.Moves(base, after))
		gone := i * n / runs
		after, err = assign.Reassign(base, items, slices.Delete(slices.Clone(slaves), gone, gone+1))
		if err != nil {
			return fail("12g", err)
		}
		left += len(assign.Moves(base, after))
		leavers += len(base.Items(slaves[gone].ID))
	}
	return []Row{
		{ID: "12e", What: "assign: spread, most − fewest items per slave", N: 1,
			Value: fmt.Sprintf("%d (%d to %d)", most-fewest, fewest, most), Goal: "≤ 1"},
		{ID: "12f", What: "assign: items moved by a slave joining", N: runs,
			Value: fmt.Sprintf("%.1f", float64(joined)/runs), Goal: fmt.Sprintf("≤ %d", (len(items)+n)/(n+1))},
		{ID: "12g", What: "assign: items moved by a slave leaving", N: runs,
			Value: fmt.Sprintf("%.1f", float64(left)/runs), Goal: fmt.Sprintf("%.1f (its items)", float64(leavers)/runs)},
	}
}

// tripCounter counts round trips (a command or a pipeline each) and, of
// them, the assign sync calls: a Worker's renewals.
type tripCounter struct{ trips, syncs atomic.Int64 }

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == rdb.AssignSyncSHA {
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
