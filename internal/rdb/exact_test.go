package rdb_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestTermsStayExact: on every server of the matrix, a term key above
// 2^53 - 1 (which a Lua number cannot hold exactly, and beyond which
// string.format('%d') overflowed into a negative term) is refused as
// garbage with the DEL to run, and left as it was; 2^53 - 1 itself is
// refused too, since no term can follow it exactly; the largest term herd
// mints is 2^53 - 1. Before, 9223372036854775806 made acquire write
// -9223372036854775808 and 9007199254740993 made three masterships share
// the term 9007199254740992.
func TestTermsStayExact(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.Start(t, s).Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		for _, tc := range []struct {
			name, stored string
			checkGarbage bool // check also calls it garbage (2^53 - 1 is a term, but the last)
		}{
			{name: "near int64 max", stored: "9223372036854775806", checkGarbage: true},
			{name: "2^53 + 1", stored: "9007199254740993", checkGarbage: true},
			{name: "2^53", stored: "9007199254740992", checkGarbage: true},
			{name: "beyond int64", stored: "99999999999999999999", checkGarbage: true},
			{name: "2^53 - 1", stored: "9007199254740991"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := c.Set(ctx, k.Term, tc.stored, 0).Err(); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					a, err := rdb.Acquire(ctx, c, k, "n1", time.Second, []byte(`{"processId":"n1"}`), 0)
					if err != nil || !a.TermGarbage || a.Term != 0 || !strings.Contains(a.Garbage, "DEL "+k.Term) || !strings.Contains(a.Garbage, tc.stored) {
						t.Fatalf("acquire %d over term %s = %+v, %v; want garbage naming the value and the DEL", i, tc.stored, a, err)
					}
				}
				if got, _ := c.Get(ctx, k.Term).Result(); got != tc.stored {
					t.Fatalf("term key = %q after the refused acquires, want %q left alone", got, tc.stored)
				}
				if n, _ := c.Exists(ctx, k.Master, k.MasterProcess, k.Heartbeat).Result(); n != 0 {
					t.Fatalf("%d lock keys written over a refused term", n)
				}
				st, err := rdb.Check(ctx, c, k)
				if err != nil || st.TermGarbage != tc.checkGarbage {
					t.Fatalf("check over term %s = %+v, %v; want TermGarbage %v", tc.stored, st, err, tc.checkGarbage)
				}
			})
		}
		t.Run("the largest term minted", func(t *testing.T) {
			if err := c.Set(ctx, k.Term, strconv.FormatInt(keyspace.MaxTerm-1, 10), 0).Err(); err != nil {
				t.Fatal(err)
			}
			a, err := rdb.Acquire(ctx, c, k, "n1", time.Second, nil, 0)
			if err != nil || a.Term != keyspace.MaxTerm {
				t.Fatalf("acquire after %d = %+v, %v; want term %d", keyspace.MaxTerm-1, a, err, int64(keyspace.MaxTerm))
			}
			if got, _ := c.Get(ctx, k.Term).Result(); got != strconv.FormatInt(keyspace.MaxTerm, 10) {
				t.Fatalf("term key = %q", got)
			}
			if err := c.Del(ctx, k.Master).Err(); err != nil {
				t.Fatal(err)
			}
			if a, err := rdb.Acquire(ctx, c, k, "n2", time.Second, nil, 0); err != nil || !a.TermGarbage {
				t.Fatalf("acquire after the last term = %+v, %v; want it refused", a, err)
			}
		})
		t.Run("registry versions", func(t *testing.T) {
			for _, stored := range []string{"9007199254740993", "9223372036854775806", "99999999999999999999", "9007199254740991"} {
				if err := c.Set(ctx, k.ProcessesVersion, stored, 0).Err(); err != nil {
					t.Fatal(err)
				}
				var versions []int64
				for range 3 {
					st, err := rdb.RegistryPut(ctx, c, k, rdb.Put{Mode: rdb.TTLEmulated, ID: "a",
						Value: []byte(`{"processId":"a"}`), Role: "slave", TTL: time.Minute})
					if err != nil {
						t.Fatal(err)
					}
					versions = append(versions, st.Version)
				}
				v, err := rdb.RegistryRemove(ctx, c, k, "a", nil, "")
				if err != nil {
					t.Fatal(err)
				}
				versions = append(versions, v)
				for i, v := range versions {
					if v <= 0 || v >= keyspace.MaxTerm || (i > 0 && v <= versions[i-1]) {
						t.Fatalf("counter %s: versions %v, want exact and increasing", stored, versions)
					}
				}
				if got, _ := c.Get(ctx, k.ProcessesVersion).Int64(); got != versions[len(versions)-1] {
					t.Fatalf("counter %s: stored %d, want the last version %d", stored, got, versions[len(versions)-1])
				}
			}
		})
	})
}
