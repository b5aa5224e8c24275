package rdb_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

// TestAssignItemsAndRestore: a change counts in the version; a change from a
// caller that knew the set is refused while the set is lost (neither key),
// and applies to a set that is new to the caller; the master's restore puts
// a lost set back (never an emptied one, never when fenced) with a version
// above any count.
func TestAssignItemsAndRestore(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a := k.Assign("cams")
	if v, err := rdb.AssignItems(ctx, c, a, false, false, []string{"x", "y"}); err != nil || v != 1 {
		t.Fatalf("add to a new set: %d, %v", v, err)
	}
	if v, err := rdb.AssignItems(ctx, c, a, true, true, []string{"x"}); err != nil || v != 2 {
		t.Fatalf("remove: %d, %v", v, err)
	}
	c.Del(ctx, a.Items, a.Version) // lost
	for _, remove := range []bool{false, true} {
		if _, err := rdb.AssignItems(ctx, c, a, remove, true, []string{"z"}); !errors.Is(err, rdb.ErrSetLost) {
			t.Fatalf("change (remove %v) of a lost set: %v, want ErrSetLost", remove, err)
		}
	}
	if n := c.Exists(ctx, a.Items, a.Version).Val(); n != 0 {
		t.Fatalf("a refused change wrote %d keys", n)
	}
	acq, err := rdb.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.AssignRestore(ctx, c, k, a, "m", acq.Term+1, []string{"y"}); !errors.Is(err, keyspace.ErrFenced) {
		t.Fatalf("restore under another term: %v, want ErrFenced", err)
	}
	if ok, err := rdb.AssignRestore(ctx, c, k, a, "m", acq.Term, []string{"y", "w"}); err != nil || !ok {
		t.Fatalf("restore: %v, %v", ok, err)
	}
	items := c.SMembers(ctx, a.Items).Val()
	slices.Sort(items)
	if v, _ := c.Get(ctx, a.Version).Int64(); !slices.Equal(items, []string{"w", "y"}) || v < 1_000_000_000_000 {
		t.Fatalf("restored %v, version %d; want [w y] and the server's time in ms", items, v)
	}
	if ok, err := rdb.AssignRestore(ctx, c, k, a, "m", acq.Term, []string{"q"}); err != nil || ok {
		t.Fatalf("restore of an existing set: %v, %v; want nothing done", ok, err)
	}
	c.Set(ctx, a.Version, "garbage", 0) // written by someone else
	if _, err := rdb.AssignItems(ctx, c, a, false, true, []string{"z"}); err == nil || !strings.Contains(err.Error(), "holds no count") {
		t.Fatalf("a change with garbage in the version: %v, want an error naming it", err)
	}
	if c.SIsMember(ctx, a.Items, "z").Val() {
		t.Fatal("a refused change wrote an item")
	}
	c.Set(ctx, a.Version, "7", 0)
	c.Del(ctx, a.Items) // emptied: the version stays
	if ok, err := rdb.AssignRestore(ctx, c, k, a, "m", acq.Term, []string{"q"}); err != nil || ok {
		t.Fatalf("restore of an emptied set: %v, %v; want nothing done", ok, err)
	}
}
