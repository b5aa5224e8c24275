package assign

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// Planner is the master's side of an item set: while its election's process
// is master, it assigns the set's items to the live slaves, starting from
// the plan in Redis (Reassign: weighted shares within one item, capacity
// caps, as few moves as balance allows) and writes the changes to the plan,
// fenced by the mastership's term. The plan lives in Redis, so a new master
// continues from its predecessor's plan and moves nothing that need not
// move. Its methods are safe for concurrent use.
type Planner struct {
	client redis.UniversalClient
	e      PlannerElection
	keys   keyspace.AssignKeys
	cfg    Config
	kick   chan struct{}

	planning sync.Mutex  // one plan at a time (Run and PlanNow)
	gone     *departures // the departed slaves waited for (Config.Grace)
	mu       sync.Mutex
	last     Plan                 // guarded by mu: the plan of the last planning
	kept     itemsCopy            // guarded by mu: the items as this Planner last read or wrote them
	waiting  map[string]time.Time // guarded by mu: the last planning's departed slaves, by grace end
	moves    atomic.Uint64
	restores atomic.Uint64
}

// NewPlanner returns the Planner of e's item set cfg.Set, its timings'
// defaults following e's LockTTL; e is the process's election
// (*masterelection.MasterElection). It does no I/O; Run plans.
func NewPlanner(client redis.UniversalClient, e PlannerElection, cfg Config) (*Planner, error) {
	if nilclient.Is(client) {
		return nil, fmt.Errorf("%w: the Redis client is nil", ErrInvalidConfig)
	}
	if nilclient.Is(e) {
		return nil, fmt.Errorf("%w: the election is nil", ErrInvalidConfig)
	}
	if err := cfg.validate(e.LockTTL()); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(e.LockTTL())
	return &Planner{client: client, e: e, keys: e.Keys().Assign(cfg.Set), cfg: cfg, kick: make(chan struct{}, 1),
		gone: newDepartures(cfg.Grace, e.SlaveTimeout())}, nil
}

// Stored returns the plan as Redis holds it: each assigned item's slave.
// Plan.Unassigned is empty: see Last.
func (p *Planner) Stored(ctx context.Context) (Plan, error) {
	owner, err := p.client.HGetAll(ctx, p.keys.Plan).Result()
	if err != nil {
		return Plan{}, fmt.Errorf("assign: read plan: %w", err)
	}
	return Plan{Owner: owner}, nil
}

// Last returns the plan this Planner computed last, with the items no
// slave had room for; the zero Plan before its first planning.
func (p *Planner) Last() Plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Waiting returns the departed slaves whose items the last planning kept
// planned to them (Config.Grace), each with the end of its grace; none
// before the first planning.
func (p *Planner) Waiting() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.waiting)
}

// graceEnd returns the earliest end of the last planning's graces; zero
// when it waited for no slave.
func (p *Planner) graceEnd() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first time.Time
	for _, end := range p.waiting {
		if first.IsZero() || end.Before(first) {
			first = end
		}
	}
	return first
}

// Set returns the name of the Planner's item set (Config.Set).
func (p *Planner) Set() string { return p.cfg.Set }

// Moves returns how many item owners this Planner's plans changed in Redis
// (an item given to a slave, moved, or left unassigned).
func (p *Planner) Moves() uint64 { return p.moves.Load() }

// Kick asks Run to plan after Settle.
func (p *Planner) Kick() { signal(p.kick) }

// changed wraps the error of a change to the items, what, or, when there
// is none, asks Run to plan it.
func (p *Planner) changed(what string, err error) error {
	if err != nil {
		return fmt.Errorf("assign: %s: %w", what, err)
	}
	p.Kick()
	return nil
}

// Run plans until ctx ends, whenever this process is master: at once when
// it becomes master (its items move to the slaves), Settle after a slave
// joins or leaves or the items change (more changes meanwhile are planned
// together), when a departed slave's Grace ends, and every Resync. Not
// master, it keeps its copy of the items
// (one GET every Resync: Restores).
// A planning that fails is reported to OnError and tried again at the next
// occasion. It returns ctx's error.
func (p *Planner) Run(ctx context.Context) error {
	acquired := make(chan struct{}, 1)
	defer p.subscribe(acquired)()
	resync := clock.NewTicker(p.cfg.clock, p.cfg.Resync)
	defer resync.Stop()
	grace := graceTimer{clock: p.cfg.clock} // fires when the first grace of the last planning ends
	defer grace.stop()
	p.Kick()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-resync.C():
			resync.Next()
		case <-grace.C():
		case <-acquired:
			// At once: this process's own Worker gives its items up only
			// when the plan moves them to the slaves.
		case <-p.kick:
			if err := p.settle(ctx); err != nil {
				return err
			}
		}
		p.planOnce(ctx)
		grace.set(p.graceEnd())
	}
}

// subscribe registers Run's handlers with the election: a master-acquired
// event signals acquired, a slave registered or removed asks for a plan.
// It returns the function that unsubscribes them, the last first.
func (p *Planner) subscribe(acquired chan<- struct{}) (unsubscribe func()) {
	unsubscribes := []func(){
		p.e.OnMasterAcquired(func(context.Context, int64) { signal(acquired) }),
		p.e.OnSlaveRegistered(func(registry.SlaveNode) { p.Kick() }),
		p.e.OnEvent(p.onEvent),
	}
	return func() {
		for _, u := range slices.Backward(unsubscribes) {
			u()
		}
	}
}

// onEvent handles an election event: a slave removed starts the grace of
// its items and asks for a plan.
func (p *Planner) onEvent(e masterelection.Event) {
	if e.Kind == masterelection.EventSlaveRemoved {
		p.gone.removedAt(e.NodeID, p.cfg.clock.Now(), e.Reason)
		p.Kick()
	}
}

// settle waits Settle after a kick, so that the changes of that window are
// planned together, and takes the kick that came meanwhile; ctx's error
// when ctx ends first.
func (p *Planner) settle(ctx context.Context) error {
	settle := p.cfg.clock.NewTimer(p.cfg.Settle)
	select {
	case <-ctx.Done():
		settle.Stop()
		return ctx.Err()
	case <-settle.C():
	}
	select {
	case <-p.kick:
	default:
	}
	return nil
}

// planOnce plans if this process is master, and otherwise brings its copy
// of the items up to date; a failure is reported unless ctx ended.
func (p *Planner) planOnce(ctx context.Context) {
	_, err := p.e.RunIfMaster(ctx, p.plan)
	if errors.Is(err, keyspace.ErrNotMaster) {
		err = p.refresh(ctx)
	}
	if ctx.Err() == nil {
		p.cfg.report(err)
	}
}

// graceTimer is Run's timer for the graces of departed slaves: it fires
// when the first grace of the last planning ends, so that the items
// waiting for that slave move. Run's own.
type graceTimer struct {
	clock clock.Clock
	timer clock.Timer // nil while no grace is timed
}

// set times the grace that ends at end, replacing the one timed before;
// none when end is zero.
func (g *graceTimer) set(end time.Time) {
	g.stop()
	if end.IsZero() {
		return
	}
	g.timer = g.clock.NewTimer(max(end.Sub(g.clock.Now()), 0) + time.Millisecond)
}

// stop stops the timer.
func (g *graceTimer) stop() {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
}

// C is the timer's channel; nil, which never fires, while no grace is
// timed.
func (g *graceTimer) C() <-chan time.Time {
	if g.timer == nil {
		return nil
	}
	return g.timer.C()
}

// signal sends on ch, buffered 1, without blocking: a signal already
// waiting covers this one.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// PlanNow plans once, now, if this process is master (ErrNotMaster
// otherwise), and returns the plan it wrote.
func (p *Planner) PlanNow(ctx context.Context) (Plan, error) {
	if _, err := p.e.RunIfMaster(ctx, p.plan); err != nil {
		return Plan{}, err
	}
	return p.Last(), nil
}

// plan computes the plan for the items and the live slaves from the stored
// plan, and writes what differs from it under term. The items of departed
// slaves within their grace stay theirs (pinned); the others are planned
// over the live slaves.
func (p *Planner) plan(ctx context.Context, term int64) error {
	p.planning.Lock()
	defer p.planning.Unlock()
	items, err := p.items(ctx, term)
	if err != nil {
		return err
	}
	slaves, live, err := p.slaves(ctx)
	if err != nil {
		return err
	}
	now := p.cfg.clock.Now()
	stored, err := p.Stored(ctx)
	if err != nil {
		return err
	}
	self := p.e.NodeID()
	waiting := p.gone.update(now, live, owners(stored), self)
	next, err := pinned(stored, items, slaves, waiting)
	if err != nil {
		return err
	}
	n, err := rdb.AssignPlan(ctx, p.client, p.e.Keys(), p.keys, self, term, stored.Owner, changes(stored, next))
	if err != nil {
		return fmt.Errorf("assign: write plan: %w", err)
	}
	p.moves.Add(uint64(n))
	p.mu.Lock()
	p.last = next
	p.waiting = waiting
	p.mu.Unlock()
	return nil
}

// slaves lists the live slaves a plan is for, and the last heartbeat of
// each. The master's own entry may still say slave for a moment after it
// acquired: it is never a slave of its own plan.
func (p *Planner) slaves(ctx context.Context) ([]Slave, map[string]time.Time, error) {
	procs, err := p.e.ProcessesByRole(ctx, registry.RoleSlave)
	if err != nil {
		return nil, nil, fmt.Errorf("assign: list slaves: %w", err)
	}
	self := p.e.NodeID()
	slaves := make([]Slave, 0, len(procs))
	live := make(map[string]time.Time, len(procs))
	for _, pr := range procs {
		if pr.ProcessID == self || pr.NodeID == self {
			continue
		}
		slaves = append(slaves, Slave{ID: pr.ProcessID, Capabilities: pr.Capabilities})
		live[pr.ProcessID] = pr.LastSeen
	}
	return slaves, live, nil
}

// changes returns the owners next sets apart from stored: each item whose
// owner differs, "" for an item next no longer assigns.
func changes(stored, next Plan) map[string]string {
	owners := map[string]string{}
	for item, to := range next.Owner {
		if stored.Owner[item] != to {
			owners[item] = to
		}
	}
	for item := range stored.Owner {
		if _, ok := next.Owner[item]; !ok {
			owners[item] = ""
		}
	}
	return owners
}

// owners returns the slaves plan names.
func owners(plan Plan) map[string]bool {
	out := map[string]bool{}
	for _, id := range plan.Owner {
		out[id] = true
	}
	return out
}

// pinned is Reassign(stored, items, slaves) with the items stored names
// for a slave in waiting (departed, within its grace) left out and kept
// for that slave: new items and balance involve only the live slaves, and
// the departed slave finds its items when it comes back.
func pinned(stored Plan, items []string, slaves []Slave, waiting map[string]time.Time) (Plan, error) {
	if len(waiting) == 0 {
		return Reassign(stored, items, slaves)
	}
	keep := map[string]string{}
	rest := make([]string, 0, len(items))
	for _, item := range items {
		if to := stored.Owner[item]; to != "" {
			if _, ok := waiting[to]; ok {
				keep[item] = to
				continue
			}
		}
		rest = append(rest, item)
	}
	next, err := Reassign(stored, rest, slaves)
	if err != nil {
		return Plan{}, err
	}
	maps.Copy(next.Owner, keep)
	return next, nil
}
