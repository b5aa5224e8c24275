package rdb_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// TestNoticeBytes checks, on every server of the matrix, the exact bytes
// of every notice the scripts publish: the members in the documented order,
// terms and versions (16 digits) as integers, never in cjson's exponent
// form, and names through cjson.encode (which writes "/" as "\/"). Each
// notice also reads back through ParseNotice.
func TestNoticeBytes(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.Start(t, s).Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		// A Transfer's release goes to its successor's own channel.
		ps := c.Subscribe(ctx, k.Events, k.RegistryEvents, k.Turn("n/2"))
		defer ps.Close()
		for range 3 {
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		next := func(what, want string, n keyspace.Notice) {
			t.Helper()
			msg, err := ps.ReceiveMessage(ctx)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if msg.Payload != want {
				t.Errorf("%s notice\n got %s\nwant %s", what, msg.Payload, want)
			}
			got, err := keyspace.ParseNotice([]byte(msg.Payload))
			if err != nil || got.Event != n.Event || got.NodeID != n.NodeID || got.Term != n.Term || got.To != n.To ||
				got.Role != n.Role || got.Version != n.Version || got.Reason != n.Reason {
				t.Errorf("%s notice parsed as %+v, %v; want %+v", what, got, err, n)
			}
		}
		const id, esc = "n/1-é", `"n\/1-é"` // a valid name that cjson escapes
		a, err := rdb.Acquire(ctx, c, k, id, 5*time.Second, nil, 0)
		if err != nil || a.Term == 0 {
			t.Fatalf("acquire = %+v, %v", a, err)
		}
		term := strconv.FormatInt(a.Term, 10)
		next("acquired", `{"event":"acquired","nodeId":`+esc+`,"term":`+term+`}`,
			keyspace.Notice{Event: keyspace.NoticeAcquired, NodeID: id, Term: a.Term})
		if ok, err := rdb.ReleaseTo(ctx, c, k, id, a.Term, "n/2", time.Second); !ok || err != nil {
			t.Fatalf("release = %v, %v", ok, err)
		}
		next("released", `{"event":"released","nodeId":`+esc+`,"term":`+term+`,"to":"n\/2"}`,
			keyspace.Notice{Event: keyspace.NoticeReleased, NodeID: id, Term: a.Term, To: "n/2"})

		value := `{"processId":"n/1-é","role":"slave"}`
		st, err := rdb.RegistryPut(ctx, c, k, rdb.Put{Mode: rdb.TTLEmulated, ID: id, Value: []byte(value), Role: "slave", TTL: time.Minute})
		if err != nil || st.Version < 1e15 {
			t.Fatalf("put = %+v, %v; want a version of 16 digits", st, err)
		}
		v := strconv.FormatInt(st.Version, 10)
		next("registered", `{"event":"registered","nodeId":`+esc+`,"role":"slave","version":`+v+
			`,"process":{"processId":"n/1-é","role":"slave","version":`+v+`}}`,
			keyspace.Notice{Event: keyspace.NoticeRegistered, NodeID: id, Role: "slave", Version: st.Version})

		removed, err := rdb.RegistryRemove(ctx, c, k, id, nil, keyspace.ReasonStale)
		if err != nil || removed <= st.Version {
			t.Fatalf("remove = %d, %v", removed, err)
		}
		next("unregistered", `{"event":"unregistered","nodeId":`+esc+`,"version":`+strconv.FormatInt(removed, 10)+`,"reason":"stale"}`,
			keyspace.Notice{Event: keyspace.NoticeUnregistered, NodeID: id, Version: removed, Reason: keyspace.ReasonStale})

		// An entry whose deadline has passed, removed by the next read.
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, k.Processes, id, value)
			p.ZAdd(ctx, k.ProcessesExpiry, redis.Z{Score: 1, Member: id})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		view, err := rdb.RegistryRead(ctx, c, k, true)
		if err != nil || len(view.Removed) != 1 || view.Version <= removed {
			t.Fatalf("read = %+v, %v; want the entry removed with a new version", view, err)
		}
		next("expired", `{"event":"unregistered","nodeId":`+esc+`,"version":`+strconv.FormatInt(view.Version, 10)+`,"reason":"expired"}`,
			keyspace.Notice{Event: keyspace.NoticeUnregistered, NodeID: id, Version: view.Version, Reason: keyspace.ReasonExpired})
	})
}
