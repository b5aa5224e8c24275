package rdb_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestRegistryPutKnowsItsOwnLastWrite: a write that names its last write
// (Put.Last) and finds the entry still that write does not decode the
// entry's incarnation; one that finds another write there still does, and
// is refused while that write is another incarnation's and recent. A
// script that trusted Last without comparing it would let a process that
// was replaced (it went silent, another took its id) overwrite the new
// one; one that never trusted it would refuse the forged entry below.
func TestRegistryPutKnowsItsOwnLastWrite(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		ctx := context.Background()
		c := redistest.Start(t, s).Client(t)
		k := keyspace.NewKeys("own", false)
		mode := rdb.TTLEmulated // every server has it; the code under test is the same for every mode
		put := func(inc string, last int64) (rdb.Stored, error) {
			return rdb.RegistryPut(ctx, c, k, rdb.Put{Mode: mode, ID: "p", Role: "slave", TTL: time.Minute, Heartbeat: true,
				Value: []byte(`{"processId":"p","incarnation":"` + inc + `"}`), Incarnation: inc, Quiet: time.Minute, Last: last})
		}
		a, err := put("A", 0)
		if err != nil || a.InUse != nil {
			t.Fatalf("first write: %+v, %v", a, err)
		}
		// Another incarnation's write is refused, naming no last write or
		// one of its own (which no longer is the entry).
		for _, last := range []int64{0, a.Version - 1} {
			if b, err := put("B", last); err != nil || b.InUse == nil || b.InUse.Incarnation != "A" {
				t.Fatalf("B's write naming last %d over A's entry: %+v, %v; want refused, in use by A", last, b, err)
			}
		}
		// A's heartbeat naming its last write goes through.
		a2, err := put("A", a.Version)
		if err != nil || a2.InUse != nil || a2.Version <= a.Version {
			t.Fatalf("A's heartbeat: %+v, %v", a2, err)
		}
		// B's entry replaces A's (as after A went silent): A's heartbeat,
		// naming its own last write, finds B's and is refused.
		v := a2.Version + 1000
		forged := `{"processId":"p","incarnation":"B","version":` + strconv.FormatInt(v, 10) + `}`
		if err := c.HSet(ctx, k.Processes, "p", forged).Err(); err != nil {
			t.Fatal(err)
		}
		if st, err := put("A", a2.Version); err != nil || st.InUse == nil || st.InUse.Incarnation != "B" {
			t.Fatalf("A's heartbeat over B's entry: %+v, %v; want refused, in use by B", st, err)
		}
		// An entry that ends with the version the writer names is taken for
		// its own write: its incarnation is not decoded (no refusal).
		if st, err := put("A", v); err != nil || st.InUse != nil {
			t.Fatalf("A's heartbeat naming the entry's version: %+v, %v; want it written", st, err)
		}
	})
}
