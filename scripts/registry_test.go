package scripts_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/herdkit/herd/scripts"
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
		_, err := scripts.RegistryPut(ctx, c, k, scripts.Put{Mode: scripts.TTLEmulated, ID: id, Value: []byte(`{"processId":"` + id + `"}`), Role: "slave", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sub.ReceiveMessage(ctx); err != nil { // the registration notice
			t.Fatal(err)
		}
	}

	entries, removed, err := scripts.RegistryRead(ctx, c, k, "")
	if err != nil || len(entries) != 3 || len(removed) != 0 {
		t.Fatalf("read before expiry = %v, %v, %v; want 3 entries, none removed", entries, removed, err)
	}

	mr.SetTime(now.Add(2 * time.Second))
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	entries, removed, err = scripts.RegistryRead(ctx, c, k, "")
	if err != nil {
		t.Fatalf("read after SCRIPT FLUSH: %v", err)
	}
	slices.Sort(removed)
	if len(entries) != 1 || entries["c"] != `{"processId":"c"}` || !slices.Equal(removed, []string{"a", "b"}) {
		t.Fatalf("read after expiry = %v, removed %v; want only c, a and b removed", entries, removed)
	}
	for range 2 {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Payload != `{"event":"unregistered","nodeId":"a","reason":"expired"}` &&
			msg.Payload != `{"event":"unregistered","nodeId":"b","reason":"expired"}` {
			t.Fatalf("notice %s is not an expiry of a or b", msg.Payload)
		}
	}
	if n, err := c.HLen(ctx, k.Processes).Result(); err != nil || n != 1 {
		t.Fatalf("HLEN after expiry = %d, %v; want 1", n, err)
	}
	if n, err := c.ZCard(ctx, k.ProcessesExpiry).Result(); err != nil || n != 1 {
		t.Fatalf("ZCARD after expiry = %d, %v; want 1", n, err)
	}

	one, removed, err := scripts.RegistryRead(ctx, c, k, "c")
	if err != nil || len(one) != 1 || one["c"] == "" || len(removed) != 0 {
		t.Fatalf("read of c = %v, %v, %v", one, removed, err)
	}
	none, _, err := scripts.RegistryRead(ctx, c, k, "a")
	if err != nil || len(none) != 0 {
		t.Fatalf("read of expired a = %v, %v; want nothing", none, err)
	}
}
