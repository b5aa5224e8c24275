package masterelection

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
)

// TestFeedSharesAndReconnects: on a real server, a master's notice feed and
// slave tracker, and a second election of the same client, hold one pub/sub
// connection. When the server kills it, each election reports one error
// event, and the feeds are subscribed again on one new connection.
func TestFeedSharesAndReconnects(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	c := inst.Client(t)
	admin := inst.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 100)
	start := func(id string) *MasterElection {
		m, err := New(c, testConfig(id))
		if err != nil {
			t.Fatal(err)
		}
		m.OnError(func(err error) { errs <- err })
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		return m
	}
	a, b := start("a"), start("b")
	if !a.IsMaster() {
		t.Fatal("a is not master")
	}
	conns := func() int {
		list, err := admin.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, "\n")
	}
	// Each feed's channels, and the tracker's, on one connection.
	subscribed := func() bool {
		k := a.Keys()
		channels := append(a.core.feedChannels(), b.core.feedChannels()...)
		channels = append(channels, k.RegistryEvents)
		n, err := admin.PubSubNumSub(t.Context(), channels...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range channels {
			if n[ch] != 1 {
				return false
			}
		}
		return conns() == 1
	}
	for !subscribed() {
		if ctx.Err() != nil {
			t.Fatalf("%d pub/sub connections, or a channel not subscribed once", conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // one per election
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "notice feed") {
				t.Fatalf("error event %v, want one about the notice feed", err)
			}
		case <-ctx.Done():
			t.Fatal("the killed connection was not reported")
		}
	}
	for !subscribed() {
		if ctx.Err() != nil {
			t.Fatalf("after the kill: %d pub/sub connections, or a channel not subscribed once", conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-errs:
		t.Errorf("another error event: %v", err)
	default:
	}
}
