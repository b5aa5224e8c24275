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

// itemsCopy is a Planner's copy of its set's items: what it puts back when
// Redis loses them (Restores).
type itemsCopy struct {
	version string   // the version key's value the items were read with
	items   []string // sorted
}

// known reports whether the copy was ever taken: a set never read or
// written has neither a version nor items.
func (c itemsCopy) known() bool { return c.version != "" || len(c.items) > 0 }

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

// SetItems replaces the set's items with items (none empties the set, which
// then stays empty: see Restores). Any process may call it; the master plans
// the change within Settle when it is this process, within Resync
// otherwise.
func (p *Planner) SetItems(ctx context.Context, items ...string) error {
	if err := validItems(items); err != nil {
		return err
	}
	var version *redis.IntCmd
	_, err := p.client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Del(ctx, p.keys.Items)
		if len(items) > 0 {
			pipe.SAdd(ctx, p.keys.Items, anys(items)...)
		}
		version = pipe.Incr(ctx, p.keys.Version)
		return nil
	})
	if err == nil {
		p.keep(fmt.Sprint(version.Val()), slices.Compact(slices.Sorted(slices.Values(items))))
	}
	return p.changed("set items", err)
}

// AddItems adds items to the set. Between a loss of Redis's data and the
// master putting the set back, it returns ErrSetLost when this Planner knew
// the set had items (a change then would keep the rest from coming back):
// try again after the master's next plan.
func (p *Planner) AddItems(ctx context.Context, items ...string) error {
	if err := validItems(items); err != nil || len(items) == 0 {
		return err
	}
	return p.changed("add items", p.change(ctx, false, items))
}

// RemoveItems removes items from the set; their owners' ctxs end once the
// plan drops them. It returns ErrSetLost as AddItems does.
func (p *Planner) RemoveItems(ctx context.Context, items ...string) error {
	if err := validItems(items); err != nil || len(items) == 0 {
		return err
	}
	return p.changed("remove items", p.change(ctx, true, items))
}

// change adds or removes items and counts the change in the version, in one
// script call; one that would act on a set Redis lost while this Planner
// holds a copy of it is refused with ErrSetLost.
func (p *Planner) change(ctx context.Context, remove bool, items []string) error {
	p.mu.Lock()
	known := len(p.kept.items) > 0
	p.mu.Unlock()
	_, err := rdb.AssignItems(ctx, p.client, p.keys, remove, known, items)
	if errors.Is(err, rdb.ErrSetLost) {
		return fmt.Errorf("%w: %w", ErrSetLost, err)
	}
	return err
}

// read returns the set's items, sorted, and its version ("" when Redis has
// none), in one round trip.
func (p *Planner) read(ctx context.Context) ([]string, string, error) {
	var items *redis.StringSliceCmd
	var version *redis.StringCmd
	_, err := p.client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		items = pipe.SMembers(ctx, p.keys.Items)
		version = pipe.Get(ctx, p.keys.Version)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("assign: read items: %w", err)
	}
	sorted := items.Val()
	slices.Sort(sorted)
	return sorted, version.Val(), nil
}

// keep records items, read or written with version, as this Planner's copy;
// a read that found neither (a set never written, or lost) leaves the copy
// as it was, to be put back.
func (p *Planner) keep(version string, items []string) {
	c := itemsCopy{version: version, items: items}
	if !c.known() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kept = c
}

// refresh brings this Planner's copy of the items up to date when their
// version changed: one GET, and the items when they changed. A process that
// is not master keeps its copy this way (every Resync), so that whichever
// process is master next can put the items back after Redis lost them.
func (p *Planner) refresh(ctx context.Context) error {
	version, err := p.client.Get(ctx, p.keys.Version).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("assign: read items version: %w", err)
	}
	p.mu.Lock()
	// A missing version is a set never written, or lost: a copy stays
	// what it was, to be put back.
	current := p.kept.known() && (p.kept.version == version || version == "")
	p.mu.Unlock()
	if current {
		return nil
	}
	items, version, err := p.read(ctx)
	if err != nil {
		return err
	}
	p.keep(version, items)
	return nil
}

// Restores returns how many times this Planner put back its set's items
// after Redis lost them (a restart without persistence, a failover that
// dropped recent writes). The master puts back the copy it last read or
// wrote, fenced by its term, when Redis has neither the items nor their
// version; a set emptied with SetItems keeps its version and stays empty.
func (p *Planner) Restores() uint64 { return p.restores.Load() }

// Items returns the set's items, sorted.
func (p *Planner) Items(ctx context.Context) ([]string, error) {
	items, _, err := p.read(ctx)
	return items, err
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
func (p *Planner) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

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
	for _, unsubscribe := range []func(){
		p.e.OnMasterAcquired(func(context.Context, int64) {
			select {
			case acquired <- struct{}{}:
			default:
			}
		}),
		p.e.OnSlaveRegistered(func(registry.SlaveNode) { p.Kick() }),
		p.e.OnEvent(func(e masterelection.Event) {
			if e.Kind == masterelection.EventSlaveRemoved {
				p.gone.removedAt(e.NodeID, p.cfg.clock.Now(), e.Reason)
				p.Kick()
			}
		}),
	} {
		defer unsubscribe()
	}
	clk := p.cfg.clock
	resync := clk.NewTimer(p.cfg.Resync) // every Resync, as a ticker
	defer resync.Stop()
	var grace clock.Timer // fires when the first grace of the last planning ends
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	p.Kick()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-resync.C():
			resync.Reset(p.cfg.Resync)
		case <-graceC:
		case <-acquired:
			// At once: this process's own Worker gives its items up only
			// when the plan moves them to the slaves.
		case <-p.kick:
			settle := clk.NewTimer(p.cfg.Settle)
			select {
			case <-ctx.Done():
				settle.Stop()
				return ctx.Err()
			case <-settle.C():
			}
			select { // the changes of the window are planned together
			case <-p.kick:
			default:
			}
		}
		_, err := p.e.RunIfMaster(ctx, p.plan)
		if errors.Is(err, keyspace.ErrNotMaster) {
			err = p.refresh(ctx)
		}
		if err != nil && ctx.Err() == nil {
			p.cfg.report(err)
		}
		if grace != nil {
			grace.Stop()
		}
		graceC = nil
		if end := p.graceEnd(); !end.IsZero() {
			grace = clk.NewTimer(max(end.Sub(clk.Now()), 0) + time.Millisecond)
			graceC = grace.C()
		}
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
	procs, err := p.e.ProcessesByRole(ctx, registry.RoleSlave)
	if err != nil {
		return fmt.Errorf("assign: list slaves: %w", err)
	}
	now := p.cfg.clock.Now()
	self := p.e.NodeID()
	slaves := make([]Slave, 0, len(procs))
	live := make(map[string]time.Time, len(procs))
	for _, pr := range procs {
		// The master's own entry may still say slave for a moment after
		// it acquired: it is never a slave of its own plan.
		if pr.ProcessID == self || pr.NodeID == self {
			continue
		}
		slaves = append(slaves, Slave{ID: pr.ProcessID, Capabilities: pr.Capabilities})
		live[pr.ProcessID] = pr.LastSeen
	}
	stored, err := p.Stored(ctx)
	if err != nil {
		return err
	}
	waiting := p.gone.update(now, live, owners(stored), self)
	next, err := pinned(stored, items, slaves, waiting)
	if err != nil {
		return err
	}
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
	n, err := rdb.AssignPlan(ctx, p.client, p.e.Keys(), p.keys, self, term, stored.Owner, owners)
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

// items returns the set's items for the master's plan under term. When
// Redis lost the set (neither the items nor their version exist) and this
// Planner has a copy, it puts the copy back first.
func (p *Planner) items(ctx context.Context, term int64) ([]string, error) {
	items, version, err := p.read(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	kept := p.kept
	p.mu.Unlock()
	if len(items) == 0 && version == "" && len(kept.items) > 0 {
		restored, err := rdb.AssignRestore(ctx, p.client, p.e.Keys(), p.keys, p.e.NodeID(), term, kept.items)
		if err != nil {
			return nil, fmt.Errorf("assign: put back %d lost items: %w", len(kept.items), err)
		}
		if restored {
			p.restores.Add(1)
		}
		if items, version, err = p.read(ctx); err != nil {
			return nil, err
		}
	}
	if version == "" && len(items) > 0 {
		// A set written before sets had versions: give it one, so that the
		// other Planners' copies follow its changes.
		if err := p.client.SetNX(ctx, p.keys.Version, 1, 0).Err(); err != nil {
			return nil, fmt.Errorf("assign: version the items: %w", err)
		}
		version = "1"
	}
	p.keep(version, items)
	return items, nil
}

func validItems(items []string) error {
	for _, item := range items {
		if err := keyspace.ValidateName("item", item); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
	}
	return nil
}

func anys(items []string) []any {
	out := make([]any, len(items))
	for i, s := range items {
		out[i] = s
	}
	return out
}
