package rdb_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestRefusedScriptsWriteNothing: on every server of the matrix, a script
// run by a user whose ACL refuses one of its writes (PUBLISH here) fails
// with NOPERM before its first write: Redis holds nothing afterwards.
// Before, acquire's SET ran before its PUBLISH was refused, leaving the lock
// and a new term behind, and registry_put its entry and version.
func TestRefusedScriptsWriteNothing(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		admin := inst.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := userWithout(ctx, t, inst, "nopublish", "publish")
		k := keyspace.NewKeys("svc", false)
		empty := func(what string, err error) {
			t.Helper()
			if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "PUBLISH") {
				t.Errorf("%s: %v, want NOPERM naming PUBLISH", what, err)
			}
			if keys, err := admin.Keys(ctx, "*").Result(); err != nil || len(keys) != 0 {
				t.Errorf("%s left %v (%v) in Redis, want nothing", what, keys, err)
			}
		}
		_, err := rdb.Acquire(ctx, c, k, "n1", time.Second, []byte(`{"processId":"n1"}`), 0)
		empty("acquire", err)
		for _, mode := range []string{rdb.TTLEmulated, rdb.TTLHPExpire, rdb.TTLNative} {
			_, err = rdb.RegistryPut(ctx, c, k, rdb.Put{Mode: mode, ID: "a", Value: []byte(`{"processId":"a"}`), Role: "slave", TTL: time.Minute})
			if err != nil && (strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "Invalid command")) {
				continue // this server has no such backend
			}
			empty("registry put "+mode, err)
		}
		// release and registry_remove: the lock and the entry written by
		// the admin; a refused release or removal leaves both.
		if a, err := rdb.Acquire(ctx, admin, k, "n1", time.Minute, nil, 0); err != nil || a.Term == 0 {
			t.Fatalf("admin acquire = %+v, %v", a, err)
		}
		if _, err := rdb.RegistryPut(ctx, admin, k, rdb.Put{Mode: rdb.TTLEmulated, ID: "a", Value: []byte(`{"processId":"a"}`), Role: "slave", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		before, _ := admin.Keys(ctx, "*").Result()
		if _, err := rdb.Release(ctx, c, k, "n1", 0); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("release: %v, want NOPERM", err)
		}
		if _, err := rdb.RegistryRemove(ctx, c, k, "a", nil, ""); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("registry remove: %v, want NOPERM", err)
		}
		if after, _ := admin.Keys(ctx, "*").Result(); len(after) != len(before) {
			t.Errorf("keys %v after refused release and removal, want %v", after, before)
		}
		if n, _ := admin.HLen(ctx, k.Processes).Result(); n != 1 {
			t.Errorf("registry holds %d entries after a refused removal, want 1", n)
		}
	})
}

// TestRefusedInboxScriptsWriteNothing: the durable inbox scripts, run by a
// user whose ACL refuses XADD, fail with NOPERM naming it before their first
// write: no inbox, index entry or dead letter appears and none goes.
// Before, inbox_send added the process to the inbox index before its XADD
// was refused, and inbox_dead could not tell a refused XADD from a done one.
func TestRefusedInboxScriptsWriteNothing(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		admin := inst.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := userWithout(ctx, t, inst, "noxadd", "xadd")
		k := keyspace.NewKeys("svc", false)
		a := masterOf(ctx, t, admin, k, "n1", "a", "b")
		// One entry of an older term in a's inbox, one dead letter.
		old, err := admin.XAdd(ctx, &redis.XAddArgs{Stream: k.Inbox("a"), Values: []any{"t", "1", "m", `{"id":"m1"}`}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		dead, err := admin.XAdd(ctx, &redis.XAddArgs{Stream: k.Dead, Values: []any{"t", "1", "m", `{"id":"m2"}`, "i", k.Inbox("a")}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		snapshot := func() map[string]int64 {
			keys, err := admin.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int64{}
			for _, key := range keys {
				typ, _ := admin.Type(ctx, key).Result()
				switch typ {
				case "stream":
					out[key], _ = admin.XLen(ctx, key).Result()
				case "set":
					out[key], _ = admin.SCard(ctx, key).Result()
				default:
					out[key] = -1
				}
			}
			return out
		}
		before := snapshot()
		refused := func(what string, err error) {
			t.Helper()
			if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "XADD") {
				t.Errorf("%s: %v, want NOPERM naming XADD", what, err)
			}
			if after := snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("%s changed Redis: %v, want %v", what, after, before)
			}
		}
		_, err = rdb.InboxSend(ctx, c, k, "n1", a.Term, 0, true, []rdb.Queued{{Inbox: k.Inbox("b"), Message: []byte(`{"id":"m3"}`)}})
		refused("inbox send to a new inbox", err)
		_, err = rdb.InboxSend(ctx, c, k, "n1", a.Term, 0, true, []rdb.Queued{{Inbox: k.Inbox("a"), Message: []byte(`{"id":"m3"}`)}})
		refused("inbox send to an inbox that exists", err)
		_, err = rdb.InboxSend(ctx, c, k, "n1", a.Term, 0, true, []rdb.Queued{{Inbox: k.Inbox("a"), Message: []byte(`{"id":"m3"}`)}, {Inbox: k.Inbox("b"), Message: []byte(`{"id":"m4"}`)}})
		refused("inbox send to two inboxes", err)
		_, err = rdb.InboxMove(ctx, c, k, "n1", a.Term, "g", k.Inbox("a"), []rdb.Move{{EntryID: old, To: k.Inbox("b")}})
		refused("inbox move", err)
		_, err = rdb.InboxAdopt(ctx, c, k, "n1", a.Term, "g", rdb.AdoptKeep, 10, true, []string{"a"})
		refused("inbox adopt", err)
		_, err = rdb.InboxDead(ctx, c, k, "g", k.Inbox("a"), old, "a", 3, "boom")
		refused("inbox dead", err)
		_, err = rdb.DeadRetry(ctx, c, k, dead, "b")
		refused("dead retry", err)
	})
}

// TestInboxSendToAnInboxTheUserMayNotWrite: a send to two inboxes by a
// user whose ACL lets it XADD to the first inbox but not to the second (a
// selector: EVALSHA itself, which checks the keys it is given, is
// allowed) adds nothing to either: inbox_send checks every write before
// its first when a call writes to more than one inbox.
func TestInboxSendToAnInboxTheUserMayNotWrite(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		admin := inst.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		a := masterOf(ctx, t, admin, k, "n1", "a", "b")
		for _, id := range []string{"a", "b"} {
			// Both inboxes exist: the sends take the path without SADD.
			if err := admin.XGroupCreateMkStream(ctx, k.Inbox(id), keyspace.InboxGroup, "0").Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.SAdd(ctx, k.Inboxes, id).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// Every command but XADD on every key; XADD on a's inbox alone.
		if err := admin.Do(ctx, "ACL", "SETUSER", "onlya", "on", ">pw", "+@all", "-xadd", "~*", "&*",
			"(+xadd ~"+k.Inbox("a")+")").Err(); err != nil {
			t.Fatal(err)
		}
		opts := inst.Options()
		opts.Username, opts.Password = "onlya", "pw"
		c := redis.NewClient(opts)
		defer c.Close()
		_, err := rdb.InboxSend(ctx, c, k, "n1", a.Term, 0, true, []rdb.Queued{{Inbox: k.Inbox("a"), Message: []byte(`{"id":"m1"}`)}, {Inbox: k.Inbox("b"), Message: []byte(`{"id":"m2"}`)}})
		if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "XADD "+k.Inbox("b")) {
			t.Errorf("send to a and b = %v, want NOPERM naming XADD to %s", err, k.Inbox("b"))
		}
		for _, id := range []string{"a", "b"} {
			if n, err := admin.XLen(ctx, k.Inbox(id)).Result(); err != nil || n != 0 {
				t.Errorf("XLEN of %s's inbox = %d, %v; want 0: nothing written", id, n, err)
			}
		}
		// Alone, a's message goes.
		ids, err := rdb.InboxSend(ctx, c, k, "n1", a.Term, 0, true, []rdb.Queued{{Inbox: k.Inbox("a"), Message: []byte(`{"id":"m1"}`)}})
		if err != nil || len(ids) != 1 || ids[0] == rdb.SentFull || ids[0] == rdb.SentNotLive {
			t.Errorf("send to a alone = %q, %v; want a new entry", ids, err)
		}
	})
}

// masterOf makes master hold k's lock for a minute and registers slaves
// as live processes (emulated registry), as an election would, through
// admin; it returns the acquisition.
func masterOf(ctx context.Context, t *testing.T, admin *redis.Client, k keyspace.Keys, master string, slaves ...string) rdb.Acquired {
	t.Helper()
	a, err := rdb.Acquire(ctx, admin, k, master, time.Minute, nil, 0)
	if err != nil || a.Term == 0 {
		t.Fatalf("acquire as %s = %+v, %v", master, a, err)
	}
	for _, id := range slaves {
		if _, err := rdb.RegistryPut(ctx, admin, k, rdb.Put{Mode: rdb.TTLEmulated, ID: id, Value: []byte(`{"processId":"` + id + `"}`), Role: "slave", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// userWithout makes user on inst with every command but denied, and a
// client logged in as it, closed when the test ends.
func userWithout(ctx context.Context, t *testing.T, inst *redistest.Instance, user string, denied ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"}
	for _, cmd := range denied {
		args = append(args, "-"+cmd)
	}
	if err := inst.Client(t).Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	opts := inst.Options()
	opts.Username, opts.Password = user, "pw"
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
