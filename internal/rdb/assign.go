package rdb

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

var (
	//go:embed assign_plan.lua
	assignPlanSrc string
	//go:embed assign_sync.lua
	assignSyncSrc string
	//go:embed assign_restore.lua
	assignRestoreSrc string
	//go:embed assign_items.lua
	assignItemsSrc string

	// assignPlanScript is assign_plan.lua: change the owners in an item
	// set's plan only while the caller holds the lock under its term.
	assignPlanScript = redis.NewScript(withWrites(assignPlanSrc))
	// assignSyncScript is assign_sync.lua: one slave's release, claim and
	// renewal of all its items.
	assignSyncScript = redis.NewScript(withWrites(assignSyncSrc))
	// assignRestoreScript is assign_restore.lua: put back an item set that
	// Redis lost, only while the caller holds the lock under its term.
	assignRestoreScript = redis.NewScript(withWrites(assignRestoreSrc))
	// assignItemsScript is assign_items.lua: add or remove items and count
	// the change, unless the set was lost.
	assignItemsScript = redis.NewScript(withWrites(assignItemsSrc))
)

// The SHA1 digests of the assign scripts, for hooks that recognise their
// calls on the wire.
var (
	AssignPlanSHA    = assignPlanScript.Hash()
	AssignSyncSHA    = assignSyncScript.Hash()
	AssignRestoreSHA = assignRestoreScript.Hash()
	AssignItemsSHA   = assignItemsScript.Hash()
)

// ErrSetLost is returned by AssignItems when the caller knew the set had
// items but Redis holds neither its items nor its version: Redis lost them,
// and the master has not put them back yet (AssignRestore).
var ErrSetLost = errors.New("rdb: the item set was lost with Redis's data and is not back yet")

// AssignItems runs assign_items.lua: it adds items to the set of a (or
// removes them, with remove) and increments its version, in one atomic
// step, and returns the new version. With known (the caller knows the set
// had items) it returns ErrSetLost, and writes nothing, when neither the
// items nor the version exist. An empty items makes no call.
func AssignItems(ctx context.Context, c redis.Scripter, a keyspace.AssignKeys, remove, known bool, items []string) (int64, error) {
	if len(items) == 0 {
		return 0, nil
	}
	op, state := itemsMode(remove, known)
	reply, err := run(ctx, c, assignItemsScript, "assign items", []string{a.Items, a.Version}, argv(items, op, state)...)
	if err != nil {
		return 0, err
	}
	switch v, ok := reply.(int64); {
	case !ok:
		return 0, unexpected("assign items", reply)
	case v == -1:
		return 0, fmt.Errorf("%s %d items of %s: %w", op, len(items), a.Items, ErrSetLost)
	default:
		return v, nil
	}
}

// itemsMode is assign_items.lua's ARGV[1] and ARGV[2]: the operation, and
// whether the caller knew the set had items.
func itemsMode(remove, known bool) (op, state string) {
	op, state = "add", "new"
	if remove {
		op = "remove"
	}
	if known {
		state = "known"
	}
	return op, state
}

// AssignRestore runs assign_restore.lua: if nodeID still holds the lock
// under term and Redis holds neither the items nor the version of a (the
// set was lost, not emptied), it adds items to the set, sets its version
// and returns true. It returns false, and writes nothing, when the set
// exists; keyspace.ErrFenced, and writes nothing, when the lock is not nodeID's under
// term. The version it sets is the server's time in ms, above any count the
// lost set reached. An empty items makes no call.
func AssignRestore(ctx context.Context, c redis.Scripter, k keyspace.Keys, a keyspace.AssignKeys, nodeID string, term int64, items []string) (bool, error) {
	if len(items) == 0 {
		return false, nil
	}
	reply, err := run(ctx, c, assignRestoreScript, "assign restore", []string{k.Master, k.Term, a.Items, a.Version},
		argv(items, nodeID, termArg(term))...)
	if err != nil {
		return false, err
	}
	if reply == int64(-1) {
		return false, fmt.Errorf("assign restore of %d items as %q with term %d: %w", len(items), nodeID, term, keyspace.ErrFenced)
	}
	return oneOrZero("assign restore", reply)
}

// AssignPlan runs assign_plan.lua: if nodeID still holds the lock under
// term, it sets the owner of each item in owners ("" leaves the item
// unassigned) in the plan of a, in one atomic step, and returns how many
// owners changed. It returns keyspace.ErrFenced, and writes nothing, otherwise. An
// empty owners makes no call. before is the plan as the caller read it: the
// old owners it names must include every item's current owner, so that the
// script is given the per-slave set it leaves.
func AssignPlan(ctx context.Context, c redis.Scripter, k keyspace.Keys, a keyspace.AssignKeys, nodeID string, term int64, before, owners map[string]string) (int, error) {
	if len(owners) == 0 {
		return 0, nil
	}
	keys, args := planCall(k, a, nodeID, term, before, owners)
	reply, err := run(ctx, c, assignPlanScript, "assign plan", keys, args...)
	if err != nil {
		return 0, err
	}
	n, ok := reply.(int64)
	switch {
	case !ok:
		return 0, unexpected("assign plan", reply)
	case n == -1:
		return 0, fmt.Errorf("assign plan of %d items as %q with term %d: %w", len(owners), nodeID, term, keyspace.ErrFenced)
	}
	return int(n), nil
}

// planCall returns the KEYS and ARGV of assign_plan.lua: after the lock,
// the term and the plan, the plan set of every slave an item leaves or
// joins, each once; the items in sorted order, each with its new owner.
func planCall(k keyspace.Keys, a keyspace.AssignKeys, nodeID string, term int64, before, owners map[string]string) ([]string, []any) {
	keys := []string{k.Master, k.Term, a.Plan}
	args := []any{nodeID, termArg(term), a.PlanOf("")} // PlanOf(""): the prefix of every slave's plan set
	listed := map[string]bool{"": true}                // "": no slave, no set
	for _, item := range slices.Sorted(maps.Keys(owners)) {
		for _, id := range [...]string{before[item], owners[item]} {
			if !listed[id] {
				listed[id] = true
				keys = append(keys, a.PlanOf(id))
			}
		}
		args = append(args, item, owners[item])
	}
	return keys, args
}

// Synced is the reply of AssignSync.
type Synced struct {
	// Owned lists the items the slave owns until Now + the TTL it gave.
	Owned []string
	// Revoked lists the items it still owns that the plan no longer gives
	// it: not renewed, they expire at their deadline unless released.
	Revoked []string
	// Waiting lists the items the plan gives it that another slave still
	// owns.
	Waiting []string
	// Now is the server's time when the script ran.
	Now time.Time
}

// AssignSync runs assign_sync.lua for slave id in its run incarnation
// (masterelection's Incarnation: items owned by another run of id are
// another owner's): it gives up the items in
// released, then, unless leave is set, claims or renews (TTL ttl) every
// item the plan gives it that no one else owns, and reports the items it
// owns, those revoked and those it waits for. With leave it gives up every
// item it holds and claims none. Each item given up is announced on the
// notice channel (PlanOf) of the slave the plan gives it.
func AssignSync(ctx context.Context, c redis.Scripter, a keyspace.AssignKeys, id, incarnation string, ttl time.Duration, leave bool, released []string) (Synced, error) {
	if incarnation == "" || strings.ContainsFunc(incarnation, unicode.IsSpace) {
		return Synced{}, fmt.Errorf("assign sync: incarnation %q is empty or has white space", incarnation)
	}
	mode := "claim"
	if leave {
		mode = "leave"
	}
	reply, err := run(ctx, c, assignSyncScript, "assign sync", []string{a.Own, a.PlanOf(id), a.Held(id), a.Plan},
		argv(released, id, ttl.Milliseconds(), mode, incarnation)...)
	if err != nil {
		return Synced{}, err
	}
	return parseSynced(reply)
}

// parseSynced reads the reply of assign_sync.lua: {owned, revoked,
// waiting, now}, three lists of items and the server's time in ms.
func parseSynced(reply any) (Synced, error) {
	f := fieldsOf(reply, 4)
	s := Synced{Owned: f.stringsAt(0), Revoked: f.stringsAt(1), Waiting: f.stringsAt(2), Now: time.UnixMilli(f.intAt(3))}
	if !f.ok {
		return Synced{}, unexpected("assign sync", reply)
	}
	return s, nil
}

// ParseOwner reads a value of keyspace.AssignKeys.Own, "<deadline ms> <slave id>
// <incarnation>" as assign_sync.lua writes it (or "<deadline ms> <slave
// id>", as it did before incarnations): the owner and the deadline of its
// ownership on the server's clock. ok is false for any other value (not
// written by herd: no one's).
func ParseOwner(v string) (slave string, deadline time.Time, ok bool) {
	ms, rest, found := strings.Cut(v, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	id, named := ownerID(rest)
	if !found || err != nil || n < 0 || !named {
		return "", time.Time{}, false
	}
	return id, time.UnixMilli(n), true
}

// ownerID reads the rest of an owner's value after the deadline, "<slave
// id> <incarnation>" or "<slave id>": the slave id, and whether both are
// there as they must be (not empty, no space in the incarnation).
func ownerID(rest string) (id string, ok bool) {
	id, inc, two := strings.Cut(rest, " ")
	return id, id != "" && (!two || inc != "" && !strings.Contains(inc, " "))
}
