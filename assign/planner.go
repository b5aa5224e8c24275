package assign

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
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
	e      *masterelection.MasterElection
	keys   scripts.AssignKeys
	cfg    Config
	kick   chan struct{}

	mu    sync.Mutex
	last  Plan // guarded by mu: the plan of the last planning
	moves atomic.Uint64
}

// NewPlanner returns the Planner of e's item set cfg.Set, its timings'
// defaults following e's LockTTL. It does no I/O; Run plans.
func NewPlanner(client redis.UniversalClient, e *masterelection.MasterElection, cfg Config) (*Planner, error) {
	if nilclient.Is(client) {
		return nil, fmt.Errorf("%w: the Redis client is nil", ErrInvalidConfig)
	}
	if e == nil {
		return nil, fmt.Errorf("%w: the election is nil", ErrInvalidConfig)
	}
	if err := cfg.validate(e.LockTTL()); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(e.LockTTL())
	return &Planner{client: client, e: e, keys: e.Keys().Assign(cfg.Set), cfg: cfg, kick: make(chan struct{}, 1)}, nil
}

// SetItems replaces the set's items with items. Any process may call it;
// the master plans the change within Settle when it is this process, within
// Resync otherwise.
func (p *Planner) SetItems(ctx context.Context, items ...string) error {
	if err := validItems(items); err != nil {
		return err
	}
	_, err := p.client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Del(ctx, p.keys.Items)
		if len(items) > 0 {
			pipe.SAdd(ctx, p.keys.Items, anys(items)...)
		}
		return nil
	})
	return p.changed("set items", err)
}

// AddItems adds items to the set.
func (p *Planner) AddItems(ctx context.Context, items ...string) error {
	if err := validItems(items); err != nil || len(items) == 0 {
		return err
	}
	return p.changed("add items", p.client.SAdd(ctx, p.keys.Items, anys(items)...).Err())
}

// RemoveItems removes items from the set; their owners' ctxs end once the
// plan drops them.
func (p *Planner) RemoveItems(ctx context.Context, items ...string) error {
	if err := validItems(items); err != nil || len(items) == 0 {
		return err
	}
	return p.changed("remove items", p.client.SRem(ctx, p.keys.Items, anys(items)...).Err())
}

// Items returns the set's items, sorted.
func (p *Planner) Items(ctx context.Context) ([]string, error) {
	items, err := p.client.SMembers(ctx, p.keys.Items).Result()
	if err != nil {
		return nil, fmt.Errorf("assign: read items: %w", err)
	}
	slices.Sort(items)
	return items, nil
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
// it becomes master, Settle after a slave joins or leaves or the items
// change (more changes meanwhile are planned together), and every Resync.
// A planning that fails is reported to OnError and tried again at the next
// occasion. It returns ctx's error.
func (p *Planner) Run(ctx context.Context) error {
	for _, unsubscribe := range []func(){
		p.e.OnMasterAcquired(func(context.Context, int64) { p.Kick() }),
		p.e.OnSlaveRegistered(func(registry.SlaveNode) { p.Kick() }),
		p.e.OnSlaveRemoved(func(string) { p.Kick() }),
	} {
		defer unsubscribe()
	}
	resync := time.NewTicker(p.cfg.Resync)
	defer resync.Stop()
	p.Kick()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-resync.C:
		case <-p.kick:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(p.cfg.Settle):
			}
			select { // the changes of the window are planned together
			case <-p.kick:
			default:
			}
		}
		_, err := p.e.RunIfMaster(ctx, p.plan)
		if err != nil && !errors.Is(err, masterelection.ErrNotMaster) && ctx.Err() == nil {
			p.cfg.report(err)
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
// plan, and writes what differs from it under term.
func (p *Planner) plan(ctx context.Context, term int64) error {
	items, err := p.Items(ctx)
	if err != nil {
		return err
	}
	procs, err := p.e.ProcessesByRole(ctx, registry.RoleSlave)
	if err != nil {
		return fmt.Errorf("assign: list slaves: %w", err)
	}
	self := p.e.NodeID()
	slaves := make([]Slave, 0, len(procs))
	for _, pr := range procs {
		// The master's own entry may still say slave for a moment after
		// it acquired: it is never a slave of its own plan.
		if pr.ProcessID == self || pr.NodeID == self {
			continue
		}
		slaves = append(slaves, Slave{ID: pr.ProcessID, Capabilities: pr.Capabilities})
	}
	stored, err := p.Stored(ctx)
	if err != nil {
		return err
	}
	next, err := Reassign(stored, items, slaves)
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
	n, err := scripts.AssignPlan(ctx, p.client, p.e.Keys(), p.keys, self, term, stored.Owner, owners)
	if err != nil {
		return fmt.Errorf("assign: write plan: %w", err)
	}
	p.moves.Add(uint64(n))
	p.mu.Lock()
	p.last = next
	p.mu.Unlock()
	return nil
}

func validItems(items []string) error {
	for _, item := range items {
		if err := scripts.ValidateName("item", item); err != nil {
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
