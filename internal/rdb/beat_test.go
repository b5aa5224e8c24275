package rdb_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestCheckBeat: on every server of the matrix and with every registry
// backend it has, CheckBeat answers the check and writes the heartbeat in
// one call; when the heartbeat's write fails (garbage in the registry hash,
// an ACL that refuses it), the check is answered all the same and the
// heartbeat's error names the cause, with nothing written.
func TestCheckBeat(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		c := inst.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		a, err := rdb.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
		if err != nil || a.Term == 0 {
			t.Fatalf("acquire: %+v, %v", a, err)
		}
		beat := func(c redis.Scripter, mode string) (rdb.MasterState, rdb.Stored, error, error) {
			return rdb.CheckBeat(ctx, c, k, rdb.Put{Mode: mode, ID: "s", Value: []byte(`{"processId":"s"}`),
				Role: "slave", TTL: time.Minute, Heartbeat: true})
		}
		answered := func(what string, st rdb.MasterState) {
			t.Helper()
			if !st.Exists || st.NodeID != "m" || st.Term != a.Term || st.TTL <= 0 {
				t.Errorf("%s: check answered %+v, want m's lock of term %d", what, st, a.Term)
			}
		}
		modes := 0
		for _, mode := range []string{rdb.TTLEmulated, rdb.TTLHPExpire, rdb.TTLNative} {
			st, stored, beatErr, err := beat(c, mode)
			if beatErr != nil && (strings.Contains(beatErr.Error(), "unknown command") || strings.Contains(beatErr.Error(), "Invalid command")) {
				continue // this server has no such backend
			}
			modes++
			if err != nil || beatErr != nil || !stored.Created || stored.Version <= 0 {
				t.Fatalf("%s: %+v, %v, %v; want the entry created", mode, stored, beatErr, err)
			}
			answered(mode, st)
			if v, err := c.HGet(ctx, k.Processes, "s").Result(); err != nil || !strings.Contains(v, `"processId":"s"`) {
				t.Errorf("%s: entry %q, %v", mode, v, err)
			}
			if err := c.Del(ctx, k.Processes, k.ProcessesExpiry).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if modes == 0 {
			t.Fatal("no registry backend ran")
		}

		if err := c.Set(ctx, k.Processes, "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
		st, _, beatErr, err := beat(c, rdb.TTLEmulated)
		if err != nil || beatErr == nil || !strings.Contains(beatErr.Error(), "WRONGTYPE") {
			t.Errorf("garbage: %v, %v; want a heartbeat error naming WRONGTYPE and no call error", beatErr, err)
		}
		answered("garbage", st)
		if err := c.Del(ctx, k.Processes).Err(); err != nil {
			t.Fatal(err)
		}

		limited := userWithout(ctx, t, inst, "nopublish", "publish")
		st, _, beatErr, err = beat(limited, rdb.TTLEmulated)
		if err != nil || beatErr == nil || !strings.Contains(beatErr.Error(), "NOPERM") || !strings.Contains(beatErr.Error(), "permission denied by the ACL") {
			t.Errorf("ACL: %v, %v; want a heartbeat error naming NOPERM and the ACL", beatErr, err)
		}
		answered("ACL", st)
		if n, _ := c.Exists(ctx, k.Processes, k.ProcessesExpiry).Result(); n != 0 {
			t.Errorf("a refused heartbeat wrote %d registry keys", n)
		}
	})
}
