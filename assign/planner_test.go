package assign_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/testsync"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// node is one herd process: an election, its Planner and its Worker.
type node struct {
	e      *masterelection.MasterElection
	p      *assign.Planner
	w      *assign.Worker
	cancel context.CancelFunc
	ran    chan struct{}
}

func startNode(t *testing.T, inst *redistest.Instance, id string, caps registry.Capabilities, s *spans, cfg assign.Config) *node {
	t.Helper()
	c := inst.Client(t)
	ec := masterelection.Config{LockName: "svc", NodeID: id, LockTTL: time.Second, Capabilities: caps}
	e, err := masterelection.New(c, ec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := assign.NewPlanner(c, e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := assign.NewWorker(c, e, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.OnAssigned(s.handler(id)); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	n := &node{e: e, p: p, w: w, cancel: cancel, ran: make(chan struct{})}
	go func() { defer close(n.ran); _ = p.Run(runCtx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

func (n *node) stop(t *testing.T) {
	select {
	case <-n.ran:
		return
	default:
	}
	n.cancel()
	<-n.ran
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.w.Stop(ctx)
	_ = n.e.Stop(ctx)
}

// herdOf starts a node for each id on inst, with no capabilities (equal
// slaves), and sets items through the first.
func herdOf(t *testing.T, inst *redistest.Instance, s *spans, cfg assign.Config, items []string, ids ...string) map[string]*node {
	t.Helper()
	nodes := map[string]*node{}
	for _, id := range ids {
		nodes[id] = startNode(t, inst, id, registry.Capabilities{}, s, cfg)
	}
	if err := nodes[ids[0]].p.SetItems(context.Background(), items...); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// stopMaster stops the master among nodes and removes it from them.
func stopMaster(t *testing.T, nodes map[string]*node) {
	t.Helper()
	for id, n := range nodes {
		if n.e.IsMaster() {
			n.stop(t)
			delete(nodes, id)
			return
		}
	}
	t.Fatal("no master to stop")
}

// noOverlaps stops every node, waits for the handlers, and fails the test
// if an item was ever live in two Workers at once.
func noOverlaps(t *testing.T, nodes map[string]*node, s *spans) {
	t.Helper()
	for _, n := range nodes {
		n.stop(t)
	}
	s.wg.Wait()
	if o := s.overlaps(); len(o) > 0 {
		t.Fatalf("overlaps:\n%v", o)
	}
}

// settled waits until the master's Planner has planned exactly items over
// the live non-master nodes (every item placed, none on the master or on a
// departed node, each
// slave within one of the others' counts when their capabilities are
// equal) and every live node's Worker owns exactly what that plan gives
// it, and returns the plan.
func settled(t *testing.T, items []string, nodes map[string]*node, caps map[string]registry.Capabilities, within time.Duration) assign.Plan {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var want assign.Plan
		master := ""
		for id, n := range nodes {
			if n.e.IsMaster() {
				master, want = id, n.p.Last()
			}
		}
		ok := master != "" && len(want.Unassigned) == 0 &&
			slices.Equal(slices.Sorted(maps.Keys(want.Owner)), slices.Sorted(slices.Values(items)))
		for _, to := range want.Owner {
			if nodes[to] == nil {
				ok = false // planned to a departed slave, within its grace
			}
		}
		equal := true
		lo, hi := len(items), 0
		for _, id := range slices.Sorted(maps.Keys(nodes)) {
			if !slices.Equal(nodes[id].w.Owned(), want.Items(id)) || (id == master && len(want.Items(id)) > 0) {
				ok = false
			}
			if id != master {
				equal = equal && caps[id] == caps[slices.Sorted(maps.Keys(nodes))[0]]
				lo, hi = min(lo, len(want.Items(id))), max(hi, len(want.Items(id)))
			}
		}
		if ok && equal && hi-lo > 1 {
			t.Fatalf("equal slaves hold %d to %d items: %v", lo, hi, want.Owner)
		}
		if ok {
			return want
		}
		if time.Now().After(deadline) {
			got := map[string][]string{}
			for id, n := range nodes {
				got[id] = n.w.Owned()
			}
			t.Fatalf("not settled within %v: master %q, owned %v, want %v", within, master, got, want.Owner)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPlannerAssignsAndANewMasterFinishesThePlan: the master plans the
// items over the slaves and never over itself (its registry entry may
// still say slave), every slave's Worker comes to own exactly its items; a
// slave that stops loses its items to the others; the master stops, and the
// new master, taking over a plan that named it, moves its items away and
// finishes the plan. No item is ever worked by two Workers at once.
func TestPlannerAssignsAndANewMasterFinishesThePlan(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	s := newSpans()
	cfg := assign.Config{LeaseTTL: time.Second, Settle: 50 * time.Millisecond}
	caps := map[string]registry.Capabilities{
		"n1": {MaxSubscriptions: 40, PreferredWorkload: 100},
		"n2": {MaxSubscriptions: 40, PreferredWorkload: 100},
		"n3": {MaxSubscriptions: 40, PreferredWorkload: 50},
		"n4": {MaxSubscriptions: 40, PreferredWorkload: 100},
	}
	nodes := map[string]*node{}
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		nodes[id] = startNode(t, inst, id, caps[id], s, cfg)
	}
	items := names(40)
	if err := nodes["n2"].p.SetItems(context.Background(), items...); err != nil {
		t.Fatal(err)
	}
	settled(t, items, nodes, caps, 10*time.Second)

	// A slave leaves.
	var slave string
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		if !nodes[id].e.IsMaster() {
			slave = id
			break
		}
	}
	nodes[slave].stop(t)
	delete(nodes, slave)
	settled(t, items, nodes, caps, 10*time.Second)

	// The master leaves; the next one finishes the plan without itself.
	stopMaster(t, nodes)
	settled(t, items, nodes, caps, 10*time.Second)
	noOverlaps(t, nodes, s)
}

// TestItemsComeBackAfterRedisLosesThem: Redis restarts without its data
// after the master that wrote the plan has gone; the next master, whose
// Planner kept its copy of the items as a slave, puts them back and plans
// them, and every item has an owner again with no SetItems call.
func TestItemsComeBackAfterRedisLosesThem(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	s := newSpans()
	cfg := assign.Config{LeaseTTL: time.Second, Settle: 50 * time.Millisecond, Resync: 100 * time.Millisecond}
	caps := map[string]registry.Capabilities{}
	items := names(12)
	nodes := herdOf(t, inst, s, cfg, items, "n1", "n2", "n3")
	settled(t, items, nodes, caps, 10*time.Second)
	stopMaster(t, nodes)      // its copy goes with it
	for _, n := range nodes { // the slaves' copies, from their Resync reads
		testsync.WaitFor(t, "every Planner's copy of the items", func() bool { return slices.Equal(assign.KeptItems(n.p), items) })
	}
	settled(t, items, nodes, caps, 10*time.Second)

	inst.Restart(t)
	if n, err := inst.Client(t).Exists(context.Background(), "svc:assign:items:items").Result(); err != nil || n != 0 {
		t.Fatalf("the items survived the restart (%d, %v): the test shows nothing", n, err)
	}
	restores := func() (n uint64) {
		for _, n2 := range nodes {
			n += n2.p.Restores()
		}
		return n
	}
	testsync.WaitFor(t, "the items put back", func() bool { return restores() > 0 })
	settled(t, items, nodes, caps, 30*time.Second)
	if n := restores(); n != 1 {
		t.Errorf("%d restores, want 1", n)
	}
	got, err := nodes[slices.Sorted(maps.Keys(nodes))[0]].p.Items(context.Background())
	if err != nil || !slices.Equal(got, items) {
		t.Errorf("items after the restore: %v, %v; want %v", got, err, items)
	}
}

// TestEmptiedSetStaysEmpty: a set emptied with SetItems is not taken for a
// lost one: the master's Planner, whose copy still lists the items, plans
// the empty set and puts nothing back.
func TestEmptiedSetStaysEmpty(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	s := newSpans()
	cfg := assign.Config{LeaseTTL: time.Second, Settle: 50 * time.Millisecond}
	caps := map[string]registry.Capabilities{}
	items := names(4)
	nodes := herdOf(t, inst, s, cfg, items, "n1", "n2")
	settled(t, items, nodes, caps, 10*time.Second)
	var master, slave *node
	for _, n := range nodes {
		if n.e.IsMaster() {
			master = n
		} else {
			slave = n
		}
	}
	if !slices.Equal(assign.KeptItems(master.p), items) {
		t.Fatalf("the master's copy is %v, want %v", assign.KeptItems(master.p), items)
	}
	if err := slave.p.SetItems(context.Background()); err != nil {
		t.Fatal(err)
	}
	plan, err := master.p.PlanNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, err := master.p.Items(context.Background())
	if err != nil || len(got) != 0 || len(plan.Owner) != 0 || master.p.Restores() != 0 {
		t.Fatalf("after emptying: items %v (%v), plan %v, %d restores; want none", got, err, plan.Owner, master.p.Restores())
	}
	settled(t, nil, nodes, caps, 10*time.Second)
}

// TestNewMasterLetsGoAtOnce: the slave that becomes master plans at once,
// and its own Worker gives its items up to the other slaves over the
// notice channels, long before any Worker's timer (RenewInterval: a minute)
// would have synced; no item is ever live in two Workers.
func TestNewMasterLetsGoAtOnce(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	s := newSpans()
	cfg := assign.Config{LeaseTTL: 5 * time.Minute, RenewInterval: time.Minute, Margin: time.Second, Settle: 50 * time.Millisecond}
	caps := map[string]registry.Capabilities{}
	items := names(12)
	nodes := herdOf(t, inst, s, cfg, items, "n1", "n2", "n3")
	settled(t, items, nodes, caps, 30*time.Second)
	stopMaster(t, nodes)
	settled(t, items, nodes, caps, 30*time.Second)
	noOverlaps(t, nodes, s)
}

// TestChangesWaitForTheRestore: between a loss of the item set and the
// master putting it back, AddItems and RemoveItems on a Planner that knew
// the set are refused with ErrSetLost (a change then would pass for the
// whole set and keep the rest from coming back); after it, they apply.
func TestChangesWaitForTheRestore(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	s := newSpans()
	cfg := assign.Config{LeaseTTL: time.Second, Settle: 50 * time.Millisecond, Resync: 100 * time.Millisecond}
	caps := map[string]registry.Capabilities{}
	items := names(6)
	ctx := context.Background()
	nodes := herdOf(t, inst, s, cfg, items, "n1", "n2")
	settled(t, items, nodes, caps, 10*time.Second)
	var master, slave *node
	for _, n := range nodes {
		if n.e.IsMaster() {
			master = n
		} else {
			slave = n
		}
	}
	testsync.WaitFor(t, "the slave's copy", func() bool { return slices.Equal(assign.KeptItems(slave.p), items) })

	// The set is lost (the lock is not: only the master may put it back).
	k := master.e.Keys().Assign(assign.DefaultSet)
	admin := inst.Client(t)
	if err := admin.Del(ctx, k.Items, k.Version).Err(); err != nil {
		t.Fatal(err)
	}
	if err := slave.p.AddItems(ctx, "new"); !errors.Is(err, assign.ErrSetLost) {
		// The master may have put it back already; then the change applies.
		if err != nil || master.p.Restores() == 0 {
			t.Fatalf("AddItems on a lost set = %v (%d restores), want ErrSetLost", err, master.p.Restores())
		}
	}
	testsync.WaitFor(t, "the items put back", func() bool { return master.p.Restores() == 1 })
	if err := slave.p.AddItems(ctx, "new"); err != nil {
		t.Fatalf("AddItems after the restore: %v", err)
	}
	if err := slave.p.RemoveItems(ctx, items[0]); err != nil {
		t.Fatalf("RemoveItems after the restore: %v", err)
	}
	want := append(slices.Clone(items[1:]), "new")
	slices.Sort(want)
	got, err := master.p.Items(ctx)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("items %v (%v), want %v", got, err, want)
	}
	settled(t, want, nodes, caps, 10*time.Second)
}

// slaveOf returns the id of a node of nodes that is not master.
func slaveOf(t *testing.T, nodes map[string]*node) string {
	t.Helper()
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		if !nodes[id].e.IsMaster() {
			return id
		}
	}
	t.Fatal("no slave")
	return ""
}

// masterOf returns the node of nodes that is master.
func masterOf(t *testing.T, nodes map[string]*node) *node {
	t.Helper()
	for _, n := range nodes {
		if n.e.IsMaster() {
			return n
		}
	}
	t.Fatal("no master")
	return nil
}

// TestRestartWithinGraceMovesNothing: a slave stops and a process with its
// node id starts again within Grace: the master keeps its items planned to
// it meanwhile (Planner.Waiting names it), the new process's Worker claims
// them, and the Planner moved no item.
func TestRestartWithinGraceMovesNothing(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	s := newSpans()
	cfg := assign.Config{LeaseTTL: time.Second, Settle: 50 * time.Millisecond, Grace: time.Minute}
	caps := map[string]registry.Capabilities{}
	items := names(12)
	nodes := herdOf(t, inst, s, cfg, items, "n1", "n2", "n3", "n4")
	before := settled(t, items, nodes, caps, 10*time.Second)
	master := masterOf(t, nodes)
	moves := master.p.Moves()

	id := slaveOf(t, nodes)
	nodes[id].stop(t)
	delete(nodes, id)
	testsync.WaitFor(t, "the master waiting for "+id, func() bool { _, ok := master.p.Waiting()[id]; return ok })
	if got := master.p.Last().Items(id); !slices.Equal(got, before.Items(id)) {
		t.Fatalf("within the grace %s is planned %v, want its items %v", id, got, before.Items(id))
	}

	nodes[id] = startNode(t, inst, id, registry.Capabilities{}, s, cfg)
	after := settled(t, items, nodes, caps, 10*time.Second)
	if m := assign.Moves(before, after); len(m) != 0 || master.p.Moves() != moves {
		t.Fatalf("the restart moved %d items in the plan (%d written), want none: %+v", len(m), master.p.Moves()-moves, m)
	}
	testsync.WaitFor(t, "the master no longer waiting", func() bool { return len(master.p.Waiting()) == 0 })
	noOverlaps(t, nodes, s)
}

// TestNoReturnMovesAfterGrace: a slave stops and does not come back: its
// items stay planned to it while the master waits (nothing moves), then
// move to the other slaves once the grace has ended, and only they move.
func TestNoReturnMovesAfterGrace(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	s := newSpans()
	const grace = 2 * time.Second
	cfg := assign.Config{LeaseTTL: time.Second, Settle: 50 * time.Millisecond, Grace: grace}
	caps := map[string]registry.Capabilities{}
	items := names(12)
	nodes := herdOf(t, inst, s, cfg, items, "n1", "n2", "n3", "n4")
	before := settled(t, items, nodes, caps, 10*time.Second)
	master := masterOf(t, nodes)
	moves := master.p.Moves()

	id := slaveOf(t, nodes)
	nodes[id].stop(t)
	delete(nodes, id)
	left := time.Now()
	var end time.Time
	testsync.WaitFor(t, "the master waiting for "+id, func() bool { end = master.p.Waiting()[id]; return !end.IsZero() })
	if end.Before(left) || end.After(time.Now().Add(grace)) {
		t.Fatalf("the grace ends at %v, want within %v of the stop (%v)", end, grace, left)
	}
	if master.p.Moves() != moves && time.Now().Before(end) {
		t.Fatalf("%d items moved within the grace", master.p.Moves()-moves)
	}

	after := settled(t, items, nodes, caps, 10*grace)
	if time.Now().Before(end) {
		t.Fatalf("settled at %v, before the grace ended at %v", time.Now(), end)
	}
	moved := assign.Moves(before, after)
	if len(moved) != len(before.Items(id)) {
		t.Fatalf("%d items moved, want the %d of %s: %+v", len(moved), len(before.Items(id)), id, moved)
	}
	for _, m := range moved {
		if m.From != id {
			t.Fatalf("an item of another slave moved: %+v", m)
		}
	}
	noOverlaps(t, nodes, s)
}
