package rdb_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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

// TestAskTaking: on every server of the matrix, Start's questions with its
// first attempt at the lock take a free lock and register the master under
// the term minted, with the backend chosen for the server's probe answer,
// in the one call; the attempt finds a held lock held; and it is not made
// (nothing written) when the process's id has an entry, when the registry
// has no backend for the probe's answer, or when the user's ACL refuses a
// command the election runs.
func TestAskTaking(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		c := inst.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		native, _, err := rdb.RegistryProbe(ctx, c, k)
		if err != nil {
			t.Fatal(err)
		}
		// The registry's choice per probe answer: native where the server
		// runs it, emulated otherwise.
		modes := [4]string{rdb.TTLEmulated, rdb.TTLEmulated, rdb.TTLNative, rdb.TTLNative}
		take := func(node string) rdb.Take {
			return rdb.Take{
				NodeID: node, TTL: time.Minute, Info: []byte(`{"processId":"` + node + `"}`), Modes: modes,
				Put: rdb.Put{
					ID: node, Value: []byte(`{"processId":"` + node + `","role":"master"}`),
					Fallback: []byte(`{"processId":"` + node + `","role":"slave"}`), TTL: time.Minute,
				},
			}
		}
		lockIs := func(who, want string) {
			t.Helper()
			if got, err := c.Get(ctx, k.Master).Result(); err != nil && !errors.Is(err, redis.Nil) || got != want {
				t.Fatalf("%s: the lock holds %q (%v), want %q", who, got, err, want)
			}
		}

		// An entry under the id: no attempt.
		if err := c.HSet(ctx, k.Processes, "a", `{"processId":"a","role":"slave"}`).Err(); err != nil {
			t.Fatal(err)
		}
		asked, took, err := rdb.AskTaking(ctx, c, k, k.Turn("a"), "a", take("a"))
		if err != nil || took.Made || took.Err != nil {
			t.Fatalf("own entry: took %+v, %v; want no attempt", took, err)
		}
		if e, _, err := asked.Own.Result(); err != nil || e == "" {
			t.Fatalf("own entry: answered %q, %v", e, err)
		}
		lockIs("own entry", "")
		if err := c.HDel(ctx, k.Processes, "a").Err(); err != nil {
			t.Fatal(err)
		}

		// No backend for the server's answer: no attempt.
		none := take("a")
		none.Modes = [4]string{}
		if _, took, err := rdb.AskTaking(ctx, c, k, k.Turn("a"), "a", none); err != nil || took.Made || took.Err != nil {
			t.Fatalf("no backend: took %+v, %v; want no attempt", took, err)
		}
		lockIs("no backend", "")

		// A user who may not PUBLISH: no attempt, and the refusal answered.
		limited := userWithout(ctx, t, inst, "limited", "publish")
		asked, took, err = rdb.AskTaking(ctx, limited, k, k.Turn("a"), "a", take("a"))
		if err != nil || took.Made || took.Err != nil {
			t.Fatalf("limited: took %+v, %v; want no attempt", took, err)
		}
		if refused, err := asked.Access.Result(); err != nil || len(refused) == 0 {
			t.Fatalf("limited: refused %q, %v; want PUBLISH", refused, err)
		}
		lockIs("limited", "")

		// A free lock: taken and registered in the one call.
		asked, took, err = rdb.AskTaking(ctx, c, k, k.Turn("a"), "a", take("a"))
		if err != nil || !took.Made || took.Err != nil || took.RegErr != nil || took.Acquired.Term <= 0 || !took.Stored.Created {
			t.Fatalf("free lock: took %+v, %v; want the lock and a new entry", took, err)
		}
		if st, err := asked.Check.Result(); err != nil || st.Exists {
			t.Errorf("free lock: the questions saw %+v, %v; want it free (asked before the attempt)", st, err)
		}
		lockIs("free lock", "a")
		entry, err := c.HGet(ctx, k.Processes, "a").Result()
		if err != nil || !strings.Contains(entry, `"role":"master"`) || !strings.Contains(entry, fmt.Sprintf(`"term":%d`, took.Acquired.Term)) {
			t.Errorf("free lock: entry %s, %v; want role master under term %d", entry, err, took.Acquired.Term)
		}
		_, zerr := c.ZScore(ctx, k.ProcessesExpiry, "a").Result()
		if native != errors.Is(zerr, redis.Nil) {
			t.Errorf("free lock: deadline in the expiry set: %v (native backend: %v); want it only with the emulated backend", zerr, native)
		}

		// A held lock: the attempt is made and finds it held.
		_, took, err = rdb.AskTaking(ctx, c, k, k.Turn("b"), "b", take("b"))
		if err != nil || !took.Made || took.Err != nil || took.Acquired.Term != 0 || took.Acquired.Holder != "a" {
			t.Fatalf("held lock: took %+v, %v; want the lock found held by a", took, err)
		}
		if _, err := c.HGet(ctx, k.Processes, "b").Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("held lock: b was registered (%v)", err)
		}

		// A bad entry is refused before anything is sent.
		bad := take("c")
		bad.Put.Value = []byte("[]")
		if _, _, err := rdb.AskTaking(ctx, c, k, k.Turn("c"), "c", bad); err == nil {
			t.Error("bad entry: sent")
		}
	})
}

// TestAskTakingModeIndex: the attempt writes with the backend given for
// the answer the probe got, in the order of rdb.ProbeAnswers. miniredis
// answers HSETEX and not HPEXPIRE, an answer no server of the matrix gives
// (they answer both or neither), so that a swapped index in the script
// writes with another backend, or makes no attempt.
func TestAskTakingModeIndex(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	k := keyspace.NewKeys("svc", false)
	native, hpexpire, err := rdb.RegistryProbe(ctx, c, k)
	if err != nil || !native || hpexpire {
		t.Fatalf("miniredis answered the probe %v %v, %v; want HSETEX only", native, hpexpire, err)
	}
	// Backends miniredis runs, told apart by the expiry set: emulated for
	// its answer only, so that an index that is off writes with another.
	var modes [4]string
	for i, a := range rdb.ProbeAnswers {
		modes[i] = rdb.TTLNative
		if a.Native && !a.HPExpire {
			modes[i] = rdb.TTLEmulated
		}
	}
	take := rdb.Take{
		NodeID: "a", TTL: time.Minute, Modes: modes,
		Put: rdb.Put{ID: "a", Value: []byte(`{"processId":"a","role":"master"}`), Fallback: []byte(`{"processId":"a","role":"slave"}`), TTL: time.Minute},
	}
	_, took, err := rdb.AskTaking(ctx, c, k, k.Turn("a"), "a", take)
	if err != nil || !took.Made || took.Err != nil || took.Acquired.Term <= 0 || took.RegErr != nil {
		t.Fatalf("took %+v, %v; want the lock taken and registered", took, err)
	}
	if _, err := c.ZScore(ctx, k.ProcessesExpiry, "a").Result(); err != nil {
		t.Errorf("no deadline of a in the expiry set (%v): the entry was not written with the backend given for HSETEX only", err)
	}
}
