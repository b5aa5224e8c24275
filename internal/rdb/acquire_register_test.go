package rdb_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestAcquireRegister: on every server, the acquire with a registration
// takes a free lock and registers the new master under the term it minted
// (the entry carries that term and a version, and is announced) in one
// call; on a held lock it answers as Acquire does and writes no entry; and
// a registration Redis refuses (garbage in the registry hash) costs the
// registration only: the lock is taken, the error names the cause.
func TestAcquireRegister(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.Start(t, s).Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		sub := c.Subscribe(ctx, k.RegistryEvents)
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		put := func(id string) rdb.Put {
			return rdb.Put{Mode: rdb.TTLEmulated, ID: id, Value: []byte(`{"processId":"` + id + `","role":"master"}`),
				Fallback: []byte(`{"processId":"` + id + `","role":"slave"}`), TTL: time.Minute}
		}
		a, stored, regErr, err := rdb.AcquireRegister(ctx, c, k, "m", time.Minute, []byte(`{"processId":"m"}`), 0, put("m"))
		if err != nil || regErr != nil || a.Term <= 0 || !stored.Created || stored.Fenced || stored.Version <= 0 {
			t.Fatalf("free lock: %+v, %+v, %v, %v; want the lock taken and the entry created", a, stored, regErr, err)
		}
		raw, err := c.HGet(ctx, k.Processes, "m").Result()
		if err != nil {
			t.Fatal(err)
		}
		var entry struct {
			Role    string `json:"role"`
			Term    int64  `json:"term"`
			Version int64  `json:"version"`
		}
		if err := json.Unmarshal([]byte(raw), &entry); err != nil || entry.Role != "master" || entry.Term != a.Term || entry.Version != stored.Version {
			t.Errorf("entry %s (%v): want role master, term %d, version %d", raw, err, a.Term, stored.Version)
		}
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || !strings.Contains(msg.Payload, `"event":"registered"`) || !strings.Contains(msg.Payload, `"role":"master"`) {
			t.Errorf("notice %v, %v; want the registration announced", msg, err)
		}

		// Held: Acquire's answer, no entry.
		b, stored, regErr, err := rdb.AcquireRegister(ctx, c, k, "n", time.Minute, nil, 0, put("n"))
		if err != nil || regErr != nil || b.Term != 0 || b.Holder != "m" || b.HolderTerm != a.Term || stored != (rdb.Stored{}) {
			t.Errorf("held lock: %+v, %+v, %v, %v; want m's lock of term %d and nothing registered", b, stored, regErr, err, a.Term)
		}
		if ok, err := c.HExists(ctx, k.Processes, "n").Result(); err != nil || ok {
			t.Errorf("n's entry exists: %v, %v", ok, err)
		}

		// A registration Redis refuses: the lock is taken all the same.
		if err := c.Del(ctx, k.Master, k.Processes).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, k.Processes, "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
		g, _, regErr, err := rdb.AcquireRegister(ctx, c, k, "n", time.Minute, nil, 0, put("n"))
		if err != nil || g.Term <= a.Term || regErr == nil || !strings.Contains(regErr.Error(), "WRONGTYPE") {
			t.Errorf("garbage in the registry: %+v, %v, %v; want the lock taken under a higher term and a registration error naming WRONGTYPE", g, regErr, err)
		}
		if holder, err := c.Get(ctx, k.Master).Result(); err != nil || holder != "n" {
			t.Errorf("lock holder %q, %v; want n", holder, err)
		}
	})
}
