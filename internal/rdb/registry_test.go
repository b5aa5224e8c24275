package rdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"

	"github.com/herdkit/herd/keyspace"
)

// TestRegistryReadContract checks the emulated read: expired entries are
// removed and announced in the same MULTI as the read, a single id reads
// one entry, and a server that lost its script cache gets the script again.
func TestRegistryReadContract(t *testing.T) {
	ctx := context.Background()
	mr, c, k := setup(t)
	sub := c.Subscribe(ctx, k.RegistryEvents)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	for id, ttl := range map[string]time.Duration{"a": time.Second, "b": time.Second, "c": 10 * time.Second} {
		_, err := rdb.RegistryPut(ctx, c, k, rdb.Put{Mode: rdb.TTLEmulated, ID: id, Value: []byte(`{"processId":"` + id + `"}`), Role: "slave", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sub.ReceiveMessage(ctx); err != nil { // the registration notice
			t.Fatal(err)
		}
	}

	view, err := rdb.RegistryRead(ctx, c, k, true)
	if err != nil || len(view.Entries) != 3 || len(view.Removed) != 0 || view.Version == 0 {
		t.Fatalf("read before expiry = %+v, %v; want 3 entries, none removed, a version", view, err)
	}

	mr.SetTime(now.Add(2 * time.Second))
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := view.Version
	view, err = rdb.RegistryRead(ctx, c, k, true)
	if err != nil {
		t.Fatalf("read after SCRIPT FLUSH: %v", err)
	}
	slices.Sort(view.Removed)
	if len(view.Entries) != 1 || !strings.HasPrefix(view.Entries["c"], `{"processId":"c","version":`) || !slices.Equal(view.Removed, []string{"a", "b"}) {
		t.Fatalf("read after expiry = %v, removed %v; want only c, a and b removed", view.Entries, view.Removed)
	}
	if want := now.Add(2*time.Second).UnixMicro() + 1; view.Version != want {
		t.Errorf("version after two expiries = %d, want %d (one each, in one microsecond)", view.Version, want)
	}
	for range 2 {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n struct {
			Event, NodeID, Reason string
			Version               int64
		}
		if err := json.Unmarshal([]byte(msg.Payload), &n); err != nil || n.Event != "unregistered" ||
			(n.NodeID != "a" && n.NodeID != "b") || n.Reason != "expired" || n.Version <= before || n.Version > view.Version {
			t.Fatalf("notice %s is not an expiry of a or b with a version in (%d, %d]", msg.Payload, before, view.Version)
		}
	}
	if n, err := c.HLen(ctx, k.Processes).Result(); err != nil || n != 1 {
		t.Fatalf("HLEN after expiry = %d, %v; want 1", n, err)
	}
	if n, err := c.ZCard(ctx, k.ProcessesExpiry).Result(); err != nil || n != 1 {
		t.Fatalf("ZCARD after expiry = %d, %v; want 1", n, err)
	}

	one, err := rdb.RegistryRead(ctx, c, k, true, "c", "a")
	if err != nil || len(one.Entries) != 1 || one.Entries["c"] == "" || len(one.Removed) != 0 || one.Version != view.Version {
		t.Fatalf("read of c and a = %+v, %v; want c alone, of the same version", one, err)
	}
	plain, err := rdb.RegistryRead(ctx, c, k, false)
	if err != nil || len(plain.Entries) != 1 || plain.Version != view.Version {
		t.Fatalf("read without expiry = %+v, %v", plain, err)
	}
}

// TestRegistryKeys: the registry scripts' keys share the election's hash
// tag, so they run on a Cluster.
func TestRegistryKeys(t *testing.T) {
	if k := keyspace.NewKeys("svc", false); k.ProcessesVersion != "svc:processes:version" {
		t.Errorf("ProcessesVersion = %q", k.ProcessesVersion)
	}
	if k := keyspace.NewKeys("svc", true); k.ProcessesVersion != "{svc}:processes:version" {
		t.Errorf("ProcessesVersion under Cluster = %q", k.ProcessesVersion)
	}
}

// TestRegistryVersions checks the versions the registry scripts mint: each
// write's is above every earlier one of the lock name, within one
// microsecond of the server's clock, across a deletion and a
// re-registration, after the counter was lost with the data, and when the
// counter holds garbage; the entry, its notice and the read agree on it.
func TestRegistryVersions(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{rdb.TTLNative, rdb.TTLEmulated} {
		t.Run(mode, func(t *testing.T) {
			mr, c, k := setup(t)
			sub := c.Subscribe(ctx, k.RegistryEvents)
			defer sub.Close()
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			var last int64
			check := func(what string, v int64, wantNotice bool) {
				t.Helper()
				if v <= last {
					t.Fatalf("%s: version %d, not above the last one %d", what, v, last)
				}
				last = v
				if wantNotice {
					msg, err := sub.ReceiveMessage(ctx)
					if err != nil {
						t.Fatal(err)
					}
					var n struct{ Version int64 }
					if err := json.Unmarshal([]byte(msg.Payload), &n); err != nil || n.Version != v {
						t.Fatalf("%s: notice %s, want version %d", what, msg.Payload, v)
					}
				}
				view, err := rdb.RegistryRead(ctx, c, k, mode == rdb.TTLEmulated)
				if err != nil || view.Version != v {
					t.Fatalf("%s: read %+v, %v; want the version %d", what, view, err, v)
				}
			}
			put := func(what, op string) {
				t.Helper()
				st, err := rdb.RegistryPut(ctx, c, k, rdb.Put{Mode: mode, ID: "a",
					Value: []byte(`{"processId":"a","role":"slave"}`), Role: "slave", TTL: time.Second, Heartbeat: op == "heartbeat"})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				check(what, st.Version, op == "register" || st.Created)
				raw, err := c.HGet(ctx, k.Processes, "a").Result()
				if err != nil || raw != fmt.Sprintf(`{"processId":"a","role":"slave","version":%d}`, st.Version) {
					t.Fatalf("%s: entry %s, %v; want the version appended", what, raw, err)
				}
			}
			put("first registration", "register")
			if last != now.UnixMicro() {
				t.Errorf("first version %d, want the server time in microseconds %d", last, now.UnixMicro())
			}
			put("heartbeat in the same microsecond", "heartbeat")
			put("registration in the same microsecond", "register")
			v, err := rdb.RegistryRemove(ctx, c, k, "a", nil, "")
			if err != nil {
				t.Fatal(err)
			}
			check("deletion", v, true)
			if v, err := rdb.RegistryRemove(ctx, c, k, "a", nil, ""); v != 0 || err != nil {
				t.Fatalf("deletion of an absent entry = %d, %v; want 0 and no version minted", v, err)
			}
			put("re-registration after the deletion", "register")
			mr.SetTime(now.Add(2 * time.Second)) // the entry expired
			put("re-registration after expiry", "heartbeat")

			// Redis lost its data, counter included: the server's clock,
			// which moved on, keeps versions growing.
			mr.FlushAll()
			mr.SetTime(now.Add(3 * time.Second))
			put("re-registration after the data loss", "heartbeat")
			if last != now.Add(3*time.Second).UnixMicro() {
				t.Errorf("version after the data loss %d, want the server time %d", last, now.Add(3*time.Second).UnixMicro())
			}
			// A counter holding garbage counts as none; one of the wrong
			// type too.
			if err := c.Set(ctx, k.ProcessesVersion, "garbage", 0).Err(); err != nil {
				t.Fatal(err)
			}
			mr.SetTime(now.Add(4 * time.Second))
			put("over a garbage counter", "register")
			if err := c.Del(ctx, k.ProcessesVersion).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.HSet(ctx, k.ProcessesVersion, "x", "1").Err(); err != nil {
				t.Fatal(err)
			}
			view, err := rdb.RegistryRead(ctx, c, k, mode == rdb.TTLEmulated)
			if err != nil || view.Version != 0 || len(view.Entries) != 1 {
				t.Fatalf("read over a counter of the wrong type = %+v, %v; want the entry and version 0", view, err)
			}
			mr.SetTime(now.Add(5 * time.Second))
			put("over a counter of the wrong type", "register")
		})
	}
}
