//go:build topologies

package operate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
)

// elect starts an election of lock for each id on a client of its own made
// by newClient, and stops them when the test ends.
func elect(t *testing.T, newClient func() redis.UniversalClient, lock string, ids ...string) []*masterelection.MasterElection {
	t.Helper()
	var nodes []*masterelection.MasterElection
	for _, id := range ids {
		c := newClient()
		t.Cleanup(func() { _ = c.Close() })
		m, err := masterelection.New(c, herdtest.Config(lock, id))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = m.Start(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { herdtest.Stop(t, m) })
		nodes = append(nodes, m)
	}
	herdtest.WaitRegistered(t, nodes[0], len(ids))
	return nodes
}

// status, the dead letters, watch and step-down through a Cluster URL and a
// Sentinel URL.
func TestTopologyURLs(t *testing.T) {
	s := redistest.Default(t)
	check := func(t *testing.T, url string, topo Topology, nodes []*masterelection.MasterElection) {
		t.Helper()
		c := dial(t, url, "topo")
		if c.Topology != topo {
			t.Fatalf("%s: topology %s, want %s", url, c.Topology, topo)
		}
		r := reader(t, c)
		snap, err := r.Read(testCtx(t))
		if err != nil || snap.Master == nil || snap.Master.NodeID != "a" || len(snap.Processes) != 2 || len(snap.Warnings) != 0 {
			t.Fatalf("%s: %+v, %v", url, snap, err)
		}
		// On a Cluster, status names herd's slot and the node serving it.
		if cc, ok := c.Client.(*redis.ClusterClient); ok != (topo == TopologyCluster) || snap.Cluster != ok {
			t.Fatalf("%s: Cluster %v for a %T", url, snap.Cluster, c.Client)
		} else if ok {
			slot, err := cc.ClusterKeySlot(testCtx(t), c.Keys.Master).Result()
			node, nerr := cc.MasterForKey(testCtx(t), c.Keys.Master)
			if err != nil || nerr != nil || int64(snap.Slot) != slot || snap.SlotNode != node.Options().Addr || snap.SlotNode == "" {
				t.Fatalf("%s: slot %d on %q; CLUSTER KEYSLOT says %d (%v), the slot map %v (%v)", url, snap.Slot, snap.SlotNode, slot, err, node, nerr)
			}
		}
		// The dead letters: counted, listed and dropped under the lock's
		// keys (hash-tagged on a Cluster).
		if snap.DeadLetters != 0 {
			t.Fatalf("%s: %d dead letters (%s)", url, snap.DeadLetters, snap.DeadLettersError)
		}
		if err := c.Client.XAdd(testCtx(t), &redis.XAddArgs{Stream: c.Keys.Dead, Values: []any{"m", "{}", "t", "1"}}).Err(); err != nil {
			t.Fatal(err)
		}
		if l, err := ListDead(testCtx(t), r, 0); err != nil || l.Stream != c.Keys.Dead || l.Total != 1 || len(l.Letters) != 1 {
			t.Fatalf("%s: dead list: %+v, %v", url, l, err)
		}
		if n, err := DropAllDead(testCtx(t), r); err != nil || n != 1 {
			t.Fatalf("%s: drop -all: %d, %v", url, n, err)
		}
		w := watch(t, r, 200*time.Millisecond)
		w.await(t, 0, EventState, "a")
		res, err := StepDown(testCtx(t), r, "b", 10*time.Second)
		if err != nil || res.To != "b" {
			t.Fatalf("%s: step-down: %+v, %v", url, res, err)
		}
		w.await(t, 0, EventFailover, "b")
		herdtest.Eventually(t, 10*time.Second, "b master", nodes[1].IsMaster)
		names, err := Locks(testCtx(t), c.Client)
		if err != nil || strings.Join(names, ",") != "topo" {
			t.Fatalf("%s: lock names %q, %v", url, names, err)
		}
	}

	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, s, 3)
		nodes := elect(t, func() redis.UniversalClient { return redis.NewClusterClient(cl.Options()) }, "topo", "a", "b")
		addrs := cl.Addrs()
		url := "redis+cluster://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
		check(t, url, TopologyCluster, nodes)
	})
	t.Run("sentinel", func(t *testing.T) {
		d := redistest.StartSentinel(t, s)
		nodes := elect(t, func() redis.UniversalClient { return redis.NewFailoverClient(d.FailoverOptions()) }, "topo", "a", "b")
		addrs := d.Addrs()
		url := fmt.Sprintf("redis://%s?master_name=%s&addr=%s", addrs[0], redistest.SentinelMasterName, strings.Join(addrs[1:], "&addr="))
		check(t, url, TopologySentinel, nodes)
	})
}

// TestReaderFollowsAClusterFailover: the Redis master serving herd's slot
// is killed; once its replica is promoted, herd's reader (status, watch)
// reads through the new node within a few of its one-second slot-map
// reloads, not at go-redis's default reload a minute later. It logs how
// long that took; the bound it asserts is far above a second and far below
// a minute, so only a reader that does not reload fails it.
func TestReaderFollowsAClusterFailover(t *testing.T) {
	s := redistest.Default(t)
	cl := redistest.StartClusterReplicas(t, s, 3, 1)
	elect(t, func() redis.UniversalClient { return redis.NewClusterClient(cl.Options()) }, "topo", "a", "b")
	addrs := cl.Addrs()
	r := reader(t, dial(t, "redis+cluster://"+addrs[0]+"?addr="+strings.Join(addrs[1:], "&addr="), "topo"))
	before, err := r.Read(testCtx(t))
	if err != nil || !before.Cluster || before.SlotNode == "" {
		t.Fatalf("before: %+v, %v", before, err)
	}
	owner := cl.NodeForSlot(t, before.Slot)
	if owner.Addr != before.SlotNode {
		t.Fatalf("the reader says slot %d is on %s, the cluster says %s", before.Slot, before.SlotNode, owner.Addr)
	}
	owner.Kill(t)
	cl.WaitHealthy(t, 0)
	promoted := time.Now()
	var after Snapshot
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		after, err = r.Read(ctx)
		cancel()
		if err == nil && after.SlotNode != "" && after.SlotNode != before.SlotNode {
			break
		}
		if time.Since(promoted) > 20*time.Second {
			t.Fatalf("the reader still reads %s (%v) 20s after the promotion: it does not reload the slot map", after.SlotNode, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("reader on the promoted node %s %v after the promotion (master %v)", after.SlotNode, time.Since(promoted).Round(time.Millisecond), after.Master)
}
