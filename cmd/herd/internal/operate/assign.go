package operate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

// Item states, as herd assignments shows them.
const (
	// ItemOwned: the planned slave owns the item.
	ItemOwned = "owned"
	// ItemMoving: the plan names a slave, and another still owns the item
	// (it gives it up at its next round trip, or its ownership expires).
	ItemMoving = "moving"
	// ItemWaiting: the plan names a slave that has not claimed the item yet.
	ItemWaiting = "waiting"
	// ItemUnassigned: no slave had room for the item, or the master has
	// not planned it yet.
	ItemUnassigned = "unassigned"
	// ItemRemoved: the item is no longer in the set, and a slave still owns
	// it until it gives it up.
	ItemRemoved = "removed"
)

// ItemState is one item of an assign item set.
type ItemState struct {
	Item string `json:"item"`
	// Planned is the slave the master's plan gives the item; "" when none.
	Planned string `json:"planned"`
	// Owner is the slave that owns it now; "" when none (or expired).
	Owner string `json:"owner"`
	// Left is how long the owner's ownership lasts without a renewal.
	Left time.Duration `json:"-"`
	// LeftMs is Left in milliseconds, for JSON.
	LeftMs int64 `json:"leftMs"`
	// State is ItemOwned, ItemMoving, ItemWaiting, ItemUnassigned or
	// ItemRemoved.
	State string `json:"state"`
}

// SlaveLoad is one slave's share of an item set.
type SlaveLoad struct {
	ID      string `json:"id"`
	Planned int    `json:"planned"`
	Owned   int    `json:"owned"`
}

// Assignments is what herd assignments shows: every item of one item set
// of package assign, who should own it and who does.
type Assignments struct {
	Set    string      `json:"set"`
	Items  []ItemState `json:"items"`
	Slaves []SlaveLoad `json:"slaves"`
	// Counts of items by State.
	Counts map[string]int `json:"counts"`
	// Time is the server's clock at the read.
	Time time.Time `json:"time"`
	// Known is false when no key of the set exists: no item, no plan, no
	// owner, no version (a set emptied with Planner.SetItems keeps its
	// version, so it is known).
	Known bool `json:"-"`
}

// ReadAssignments reads the item set set of r's lock in one round trip.
func ReadAssignments(ctx context.Context, r *Reader, set string) (Assignments, error) {
	if err := keyspace.ValidateName("item set", set); err != nil {
		return Assignments{}, fmt.Errorf("%w: -set: %w", ErrUsage, err)
	}
	k := r.conn.Keys.Assign(set)
	c := r.conn.Client
	pipe := c.Pipeline()
	now := pipe.Time(ctx)
	itemsCmd := pipe.SMembers(ctx, k.Items)
	planCmd := pipe.HGetAll(ctx, k.Plan)
	ownCmd := pipe.HGetAll(ctx, k.Own)
	versionCmd := pipe.Exists(ctx, k.Version)
	_, _ = pipe.Exec(ctx) // errors are read per command
	for _, cmd := range []redis.Cmder{now, itemsCmd, planCmd, ownCmd, versionCmd} {
		if err := cmd.Err(); err != nil {
			return Assignments{}, Classify("read item set "+set, err)
		}
	}
	plan, own := planCmd.Val(), ownCmd.Val()
	// Redis deletes an empty set or hash: an empty reply is a missing key.
	known := len(itemsCmd.Val()) > 0 || len(plan) > 0 || len(own) > 0 || versionCmd.Val() > 0
	a := Assignments{Set: set, Time: now.Val(), Counts: map[string]int{}, Known: known}
	all := map[string]bool{}
	for _, item := range itemsCmd.Val() {
		all[item] = true
	}
	for item := range own {
		all[item] = true
	}
	loads := map[string]*SlaveLoad{}
	load := func(id string) *SlaveLoad {
		if loads[id] == nil {
			loads[id] = &SlaveLoad{ID: id}
		}
		return loads[id]
	}
	inSet := map[string]bool{}
	for _, item := range itemsCmd.Val() {
		inSet[item] = true
	}
	for item := range all {
		st := ItemState{Item: item, Planned: plan[item]}
		if id, deadline, ok := rdb.ParseOwner(own[item]); ok && deadline.After(a.Time) {
			st.Owner, st.Left = id, deadline.Sub(a.Time)
			st.LeftMs = ms(st.Left)
			load(id).Owned++
		}
		if st.Planned != "" {
			load(st.Planned).Planned++
		}
		switch {
		case !inSet[item]:
			if st.Owner == "" {
				continue // given up and gone
			}
			st.State = ItemRemoved
		case st.Planned == "":
			st.State = ItemUnassigned
		case st.Owner == st.Planned:
			st.State = ItemOwned
		case st.Owner != "":
			st.State = ItemMoving
		default:
			st.State = ItemWaiting
		}
		a.Counts[st.State]++
		a.Items = append(a.Items, st)
	}
	slices.SortFunc(a.Items, func(x, y ItemState) int { return strings.Compare(x.Item, y.Item) })
	for _, l := range loads {
		a.Slaves = append(a.Slaves, *l)
	}
	slices.SortFunc(a.Slaves, func(x, y SlaveLoad) int { return strings.Compare(x.ID, y.ID) })
	return a, nil
}

// AssignSets returns the names of the item sets of r's lock that have
// items, found by SCAN for their item keys (keyspace.AssignKeys.Items),
// sorted; at most MaxLockNames.
func AssignSets(ctx context.Context, r *Reader) ([]string, error) {
	prefix, suffix, _ := strings.Cut(r.conn.Keys.Assign("*").Items, "*")
	names, err := scanNames(ctx, r.conn.Client, prefix+"*"+suffix, "set", func(key string) (string, bool) {
		set, ok := strings.CutPrefix(key, prefix)
		if set, ok = strings.CutSuffix(set, suffix); !ok || keyspace.ValidateName("item set", set) != nil {
			return "", false
		}
		return set, true
	})
	if err != nil {
		return nil, Classify("list item sets (SCAN)", err)
	}
	return names, nil
}

// UnknownSet returns the error for an item set of which no key exists,
// naming the item sets of r's lock that have items instead.
func UnknownSet(ctx context.Context, r *Reader, set string) error {
	names, err := AssignSets(ctx, r)
	var hint string
	switch {
	case err != nil:
		hint = fmt.Sprintf("the item sets could not be listed: %v", err)
	case len(names) == 0:
		hint = fmt.Sprintf("no item set of lock %q has items", r.conn.Lock)
	default:
		hint = fmt.Sprintf("item sets of lock %q with items: %s", r.conn.Lock, strings.Join(names, ", "))
		if len(names) == MaxLockNames {
			hint += ", …"
		}
	}
	keys := strings.TrimSuffix(r.conn.Keys.Assign(set).Items, "items") + "*"
	return fmt.Errorf("%w %q: no item, no plan and no owner under %s on %s (-set names the set, assign.Config.Set); %s",
		ErrUnknownSet, set, keys, r.conn.URL, hint)
}

// AssignSummary is one item set as the dashboard shows it: the counts by
// state and each slave's share, without the items.
type AssignSummary struct {
	Set    string         `json:"set"`
	Counts map[string]int `json:"counts"`
	Slaves []SlaveLoad    `json:"slaves"`
	// Error is why the set could not be read; "" when it was.
	Error string `json:"error,omitempty"`
}

// WatchAssignments makes every Read (and so the dashboard) summarize the
// item sets sets of package assign too (Snapshot.Assignments); a name that
// cannot be a set's is summarized with its error.
func (r *Reader) WatchAssignments(sets ...string) {
	r.mu.Lock()
	r.assignSets = slices.Clone(sets)
	r.mu.Unlock()
}

// summarizeAssignments reads the watched item sets; a set that cannot be
// read says why and never fails the read.
func (r *Reader) summarizeAssignments(ctx context.Context) []AssignSummary {
	r.mu.Lock()
	sets := r.assignSets
	r.mu.Unlock()
	var out []AssignSummary
	for _, set := range sets {
		a, err := ReadAssignments(ctx, r, set)
		if err != nil {
			out = append(out, AssignSummary{Set: set, Counts: map[string]int{}, Slaves: []SlaveLoad{}, Error: err.Error()})
			continue
		}
		if a.Slaves == nil {
			a.Slaves = []SlaveLoad{}
		}
		out = append(out, AssignSummary{Set: set, Counts: a.Counts, Slaves: a.Slaves})
	}
	return out
}
