package rdb_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestAsk: on every server of the matrix, Start's questions in one script
// call get the answers each question gets alone; a user whose ACL refuses
// INFO and PUBLISH gets INFO's refusal as that answer only (a server's
// answer, redis.Error), the refused PUBLISH named by the access check, and
// the probe and check answered all the same.
func TestAsk(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		c := inst.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		if a, err := rdb.Acquire(ctx, c, k, "m", time.Minute, nil, 0); err != nil || a.Term == 0 {
			t.Fatalf("acquire: %+v, %v", a, err)
		}
		native, hpexpire, err := rdb.RegistryProbe(ctx, c, k)
		if err != nil {
			t.Fatal(err)
		}
		alone, err := rdb.Check(ctx, c, k)
		if err != nil {
			t.Fatal(err)
		}
		answered := func(who string, asked rdb.Asked) {
			t.Helper()
			if n, h, err := asked.Probe.Result(); err != nil || n != native || h != hpexpire {
				t.Errorf("%s: probe %v %v %v, want %v %v", who, n, h, err, native, hpexpire)
			}
			if st, err := asked.Check.Result(); err != nil || st.NodeID != alone.NodeID || st.Term != alone.Term || !st.Exists {
				t.Errorf("%s: check %+v, %v, want %+v", who, st, err, alone)
			}
		}

		asked := rdb.Ask(ctx, c, k, k.Turn("m"), "m")
		answered("admin", asked)
		if refused, err := asked.Access.Result(); err != nil || len(refused) != 0 {
			t.Errorf("admin: refused %q, %v; want none", refused, err)
		}
		if info, err := asked.Info.Result(); err != nil || !strings.Contains(info, "maxmemory_policy:") {
			t.Errorf("admin: INFO memory %.80q, %v", info, err)
		}

		if e, now, err := asked.Own.Result(); err != nil || e != "" || time.Since(now).Abs() > time.Minute {
			t.Errorf("admin: own entry %q at %v, %v; want none, at the server's time", e, now, err)
		}
		const entry = `{"processId":"m","role":"slave"}`
		if err := c.HSet(ctx, k.Processes, "m", entry).Err(); err != nil {
			t.Fatal(err)
		}
		if e, _, err := rdb.Ask(ctx, c, k, k.Turn("m"), "m").Own.Result(); err != nil || e != entry {
			t.Errorf("admin: own entry %q, %v; want %q", e, err, entry)
		}

		limited := userWithout(ctx, t, inst, "limited", "publish", "info")
		asked = rdb.Ask(ctx, limited, k, k.Turn("m"), "m")
		answered("limited", asked)
		refused, err := asked.Access.Result()
		if err != nil || !strings.Contains(strings.Join(refused, ","), "PUBLISH "+k.Turn("m")) {
			t.Errorf("limited: refused %q, %v; want PUBLISH on its own channel among them", refused, err)
		}
		var answer redis.Error
		if _, err := asked.Info.Result(); !errors.As(err, &answer) || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("limited: INFO memory answered %v, want the server's refusal (a redis.Error naming NOPERM)", err)
		}
	})
}
