package assign

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
)

// itemsCopy is a Planner's copy of its set's items: what it puts back when
// Redis loses them (Restores).
type itemsCopy struct {
	version string   // the version key's value the items were read with
	items   []string // sorted
}

// known reports whether the copy was ever taken: a set never read or
// written has neither a version nor items.
func (c itemsCopy) known() bool { return c.version != "" || len(c.items) > 0 }

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
	if p.copyCurrent(version) {
		return nil
	}
	items, version, err := p.read(ctx)
	if err != nil {
		return err
	}
	p.keep(version, items)
	return nil
}

// copyCurrent reports whether this Planner's copy of the items is the set
// at version. A missing version is a set never written, or lost: a copy
// stays what it was, to be put back.
func (p *Planner) copyCurrent(version string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kept.known() && (p.kept.version == version || version == "")
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

// items returns the set's items for the master's plan under term, putting
// back this Planner's copy first when Redis lost the set, and versioning a
// set written before sets had versions.
func (p *Planner) items(ctx context.Context, term int64) ([]string, error) {
	items, version, err := p.readRestored(ctx, term)
	if err != nil {
		return nil, err
	}
	if version, err = p.versioned(ctx, items, version); err != nil {
		return nil, err
	}
	p.keep(version, items)
	return items, nil
}

// readRestored reads the set's items and version. When Redis lost the set
// (neither the items nor their version exist) and this Planner has a copy,
// it puts the copy back under term first, and reads again.
func (p *Planner) readRestored(ctx context.Context, term int64) ([]string, string, error) {
	items, version, err := p.read(ctx)
	if err != nil {
		return nil, "", err
	}
	p.mu.Lock()
	kept := p.kept
	p.mu.Unlock()
	if len(items) > 0 || version != "" || len(kept.items) == 0 {
		return items, version, nil // the set is there, or there is no copy to put back
	}
	if err := p.restore(ctx, term, kept.items); err != nil {
		return nil, "", err
	}
	return p.read(ctx)
}

// restore puts kept, this Planner's copy of the items, back under term,
// fenced by the mastership, and counts it in Restores when the script did.
func (p *Planner) restore(ctx context.Context, term int64, kept []string) error {
	restored, err := rdb.AssignRestore(ctx, p.client, p.e.Keys(), p.keys, p.e.NodeID(), term, kept)
	if err != nil {
		return fmt.Errorf("assign: put back %d lost items: %w", len(kept), err)
	}
	if restored {
		p.restores.Add(1)
	}
	return nil
}

// versioned returns the version of the set read with version: a set
// written before sets had versions gets one now (1), so that the other
// Planners' copies follow its changes.
func (p *Planner) versioned(ctx context.Context, items []string, version string) (string, error) {
	if version != "" || len(items) == 0 {
		return version, nil
	}
	if err := p.client.SetNX(ctx, p.keys.Version, 1, 0).Err(); err != nil {
		return "", fmt.Errorf("assign: version the items: %w", err)
	}
	return "1", nil
}

// validItems checks that every item is a valid name (ErrInvalidInput).
func validItems(items []string) error {
	for _, item := range items {
		if err := keyspace.ValidateName("item", item); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
	}
	return nil
}

// anys returns items as the arguments of a Redis command.
func anys(items []string) []any {
	out := make([]any, len(items))
	for i, s := range items {
		out[i] = s
	}
	return out
}
