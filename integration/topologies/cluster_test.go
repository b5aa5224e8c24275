//go:build topologies

package topologies

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// publishFromLockSlot publishes as the route script does: from a script
// whose key is in the lock's slot, so it runs on the master of that slot.
var publishFromLockSlot = redis.NewScript(`return redis.call('PUBLISH', ARGV[1], ARGV[2])`)

// TestClusterPublishCounts shows why routing's subscriber counts are wrong
// on Redis Cluster and what makes them right. A PUBLISH reaches the
// subscribers of every node (the cluster bus forwards it) but returns the
// number of subscribers on the node that ran it. go-redis puts a
// subscription on the master of its first channel's slot, and runs a
// keyless PUBLISH on any node. So a Subscriber listening on
// [worker:slave:<id>, {lock}:events] is not counted by the route script,
// which runs on the master of {lock}; listening on [{lock}:events,
// worker:slave:<id>] it is. Likewise a report to the master inbox is counted
// only when published on the master of {lock} (MasterForKey).
func TestClusterPublishCounts(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.StartCluster(t, s, 3)
		cc := c.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		keys := keyspace.NewKeys("counts", true)
		lockSlot, err := cc.ClusterKeySlot(ctx, keys.Master).Result()
		if err != nil {
			t.Fatal(err)
		}
		lockNode := c.NodeForSlot(t, int(lockSlot))
		// A slave whose channel is served by another master than the lock.
		var channel string
		for i := 0; channel == ""; i++ {
			ch := pubsub.SlaveChannel(fmt.Sprintf("slave-%d", i))
			slot, err := cc.ClusterKeySlot(ctx, ch).Result()
			if err != nil {
				t.Fatal(err)
			}
			if c.NodeForSlot(t, int(slot)) != lockNode {
				channel = ch
			}
		}
		publish := func(msg string) int64 {
			t.Helper()
			n, err := publishFromLockSlot.Run(ctx, cc, []string{keys.Master}, channel, msg).Int64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}

		// The order package pubsub subscribes in today: own channel first.
		ps := subscribe(t, cc, channel, keys.Events)
		if n := publish("one"); n != 0 {
			t.Errorf("PUBLISH on the lock's master counted %d subscribers of a connection on another node, want 0", n)
		}
		expectMessage(t, ps, channel, "one") // delivered all the same
		_ = ps.Close()

		// The lock's channel first: the connection sits on the lock's master.
		ps = subscribe(t, cc, keys.Events, channel)
		defer ps.Close()
		if n := publish("two"); n != 1 {
			t.Errorf("PUBLISH on the lock's master counted %d subscribers on its own node, want 1", n)
		}
		expectMessage(t, ps, channel, "two")

		// The master inbox: subscribed on the lock's master; a plain PUBLISH
		// through the cluster client runs on any node.
		inbox := subscribe(t, cc, keys.MasterInbox)
		defer inbox.Close()
		node, err := cc.MasterForKey(ctx, keys.MasterInbox)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := node.Publish(ctx, keys.MasterInbox, "report").Result(); err != nil || n != 1 {
			t.Errorf("PUBLISH on the master of the inbox's slot = %d, %v; want 1", n, err)
		}
		expectMessage(t, inbox, keys.MasterInbox, "report")
		counted := map[int64]int{}
		for range 12 {
			n, err := cc.Publish(ctx, keys.MasterInbox, "report").Result()
			if err != nil {
				t.Fatal(err)
			}
			counted[n]++
			expectMessage(t, inbox, keys.MasterInbox, "report")
		}
		t.Logf("%s: 12 PUBLISH to the inbox through the cluster client counted %v (count: times)", s.Name, counted)
	})
}

// subscribe subscribes a new connection of cc to channels, in that order,
// and waits until Redis confirmed each.
func subscribe(t *testing.T, cc *redis.ClusterClient, channels ...string) *redis.PubSub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := cc.Subscribe(ctx, channels...)
	for range channels {
		msg, err := ps.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := msg.(*redis.Subscription); !ok {
			t.Fatalf("got %T before the subscriptions were confirmed", msg)
		}
	}
	return ps
}

func expectMessage(t *testing.T, ps *redis.PubSub, channel, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("waiting for %q on %s: %v", payload, channel, err)
	}
	if msg.Channel != channel || msg.Payload != payload {
		t.Fatalf("received %q on %s, want %q on %s", msg.Payload, msg.Channel, payload, channel)
	}
}

// TestClusterNodeFailover kills the Redis master that serves herd's slot in
// a cluster whose masters have one replica each: the replica takes over the
// slot, and herd recovers with one master under a larger term and a full
// registry. It logs how long each step took.
func TestClusterNodeFailover(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.StartClusterReplicas(t, s, 3, 1)
		dep := onCluster(c)
		const lock = "node-failover"
		procs := startProcs(t, dep, lock, 3, nil)
		old := waitOneMaster(t, procs, 0, 2*time.Second)
		waitRegistry(t, old, procs, 5*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		slot, err := old.client.(*redis.ClusterClient).ClusterKeySlot(ctx, old.el.Keys().Master).Result()
		if err != nil {
			t.Fatal(err)
		}
		owner := c.NodeForSlot(t, int(slot))
		watch := watchOverlaps(procs)
		oldTerm := old.el.Term()

		began := time.Now()
		owner.Kill(t)
		c.WaitHealthy(t, 0)
		promoted := time.Since(began)
		next := waitOneMaster(t, procs, oldTerm, 30*time.Second)
		elected := time.Since(began)
		waitRegistry(t, next, procs, 30*time.Second)
		listed := time.Since(began)
		t.Logf("%s: cluster failover of herd's slot: replica promoted after %v, one herd master (term %d > %d) after %v, registry complete after %v",
			s.Name, promoted.Round(time.Millisecond), next.el.Term(), oldTerm, elected.Round(time.Millisecond), listed.Round(time.Millisecond))
		// The overlap watch covers the failover: the old master stepped down
		// on its self-fencing deadline before its lock could expire.
		watch.Check(t)
		checkRouting(t, dep, lock, next, others(procs, next), true)
	})
}
