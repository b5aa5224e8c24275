// Package assign spreads work items (camera subscriptions, queue
// partitions, tenants, display connections) over the slaves of a herd and
// moves them when slaves come and go, so that each item is worked by at
// most one live slave at a time.
//
// The master runs a Planner; every slave runs a Worker with the same
// Config.Set:
//
//	p, _ := assign.NewPlanner(client, election, assign.Config{Set: "cameras"})
//	go p.Run(ctx)                          // plans while this process is master
//	_ = p.SetItems(ctx, "cam-1", "cam-2")  // any process may change the items
//
//	w, _ := assign.NewWorker(client, election, assign.Config{Set: "cameras"})
//	_ = w.OnAssigned(func(ctx context.Context, item string) {
//		subscribe(item)
//		<-ctx.Done() // the item is no longer ours
//		unsubscribe(item)
//	})
//	_ = w.Start(ctx)
//	defer w.Stop(ctx)
//
// election is the process's *masterelection.MasterElection; the Planner and
// the Worker see it through the small interfaces PlannerElection and
// WorkerElection, so a test may hand them a fake.
//
// # The plan
//
// The Planner assigns the items to the live slaves of the registry (never to
// the master itself): each slave holds its share by the weight of its
// capabilities within one item, with MaxSubscriptions as a hard cap; slaves
// that published no capabilities share the items equally (40 items over 4
// such slaves: 10 each). It starts from the stored plan (Reassign): an item
// keeps its owner while that slave is under its share, and the others go by
// weighted rendezvous hashing to slaves under theirs. So a leave moves only
// the leaver's items, a join about the joiner's share, a weight change
// about the difference in that slave's share (each plus, with few items per
// slave, a rounding's worth). It plans when it becomes
// master, Settle after a slave joins or leaves or the items change, when a
// departed slave's grace ends, and every Resync; it writes only what changed, in one script fenced by the
// mastership's term (a deposed master's write is refused). The plan is kept
// in Redis, so a new master continues from it.
//
// # Restarts: the grace
//
// A slave that leaves (Stop, a crash) keeps its items planned to it for
// Config.Grace, waiting for a process with the same node id (a StatefulSet
// pod name, a host name) to come back: new items and balance involve only
// the live slaves meanwhile, and the process that returns finds its items
// in the plan and claims them at once, so a rolling restart moves nothing.
// The grace counts from the slave-removed event of a slave that
// unregistered (a Stop: the event's Reason is registry.LeftUnregistered),
// or from its last heartbeat listed (a crash: the master removed it after
// SlaveTimeout, Reason LeftStale), so a crashed slave's items wait
// little beyond its removal; a slave the Planner never listed (a master
// elected after it left) gets none. Its items have no owner meanwhile:
// that is the grace's cost when the slave does not return. After it, the
// Planner plans again and the items move. Planner.Waiting lists the slaves
// waited for. Default: LockTTL × 2/3 (GracePerLockTTL); negative: off.
//
// # Ownership and hand-off
//
// A plan says who should own an item; ownership says who does. Each item's
// owner and deadline are kept in Redis. A Worker claims an item the plan
// gives it only when no one owns it or the owner's deadline has passed, and
// renews all its items in one round trip every RenewInterval, however many
// it holds. Moves are pushed: the plan's write publishes on the notice
// channel of each slave it changes (AssignKeys.PlanOf), the old Worker
// syncs at once, ends the item's ctx and gives the item up, which
// publishes to the new owner, and the new Worker claims it: a few round
// trips, not RenewIntervals (a lost notice waits for the timer). A process
// that becomes master plans at once, so its own Worker lets go the same
// way. A Worker that cannot renew (killed, paused, cut off from
// Redis) loses its items LeaseTTL after its last renewal; its own deadline
// for them, on its own clock, falls Margin earlier, and the item's ctx ends
// there.
//
// The guarantee: an item's ctx is live in at most one Worker at any
// instant, provided the Workers' clocks run at rates within Margin/LeaseTTL
// of the Redis server's (as for the master's self-fencing) and Redis keeps
// its data (a Redis that loses the ownership hash lets a new owner start
// at once). Check ctx.Err() right before acting on an item: a Done channel
// closes when a timer fires, which can be late after a pause, but Err reads
// the deadline itself.
//
// Not guaranteed: that a handler has returned when the next owner starts
// (the ctx has ended; the handler must stop acting on it), or that every
// item has an owner (an item no slave has room for is unassigned:
// Planner.Last lists them). A dead Worker's items move once its lease and registry entry have expired and the master
// planned again, after its Grace. Once the herd has settled, every item a
// slave has room for has an owner within ProcessTTL + CheckInterval +
// LeaseTTL + Settle + Grace + 2 × RenewInterval (docs/safety.md, guarantee
// 7).
//
// # When Redis loses its data
//
// Every Planner keeps a copy of the items: the master's from its plans, the
// others' from a version read every Resync (one GET; the items only when
// they changed). When Redis holds neither the items nor their version (a
// restart without persistence, a failover that dropped recent writes), the
// master puts its copy back, fenced by its term, and plans it: no SetItems
// call is needed (Planner.Restores counts them). A set emptied with
// SetItems keeps its version and stays empty; delete a set with SetItems,
// never with DEL, or the master takes it for lost. Between the loss and the
// restore, AddItems and RemoveItems return ErrSetLost. The ownerships are
// lost too, so a new owner may claim at once: an old owner cut off from
// Redis keeps its ctx until LeaseTTL − Margin after its last renewal,
// which the election's wait after a loss (LockTTL) covers when LeaseTTL −
// Margin is below LockTTL, as with the defaults.
//
// # Timings
//
// The timings' defaults follow the LockTTL of the election NewPlanner and
// NewWorker are given: LeaseTTL = LockTTL / 3, RenewInterval = LeaseTTL / 3,
// Margin = LeaseTTL / 10, Settle = LockTTL / 30, Resync = 10 × Settle,
// Grace = LockTTL × 2/3 (10s, 3.3s, 1s, 1s, 10s and 20s at the default
// LockTTL of 30s). The lease ends before the master removes a dead slave
// (SlaveTimeout and a sweep, SlaveTimeout/3: LockTTL × 2/3 with
// masterelection's defaults), and the grace, counted from the dead slave's
// last heartbeat, ends about then too, so its items are owned again within
// that + Settle + RenewInterval: about 0.81 × LockTTL
// (docs/tuning.md). A slave that stops (and does not return) has its items
// owned again about Grace + Settle + RenewInterval after it stopped.
package assign
