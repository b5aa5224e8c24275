//go:build topologies

package topologies

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
)

// TestCluster runs herd on a three-master Redis Cluster of each server.
func TestCluster(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.StartCluster(t, s, 3)
		dep := onCluster(c)
		runCommon(t, dep)
		t.Run("keys-in-one-slot", func(t *testing.T) { testKeysInOneSlot(t, dep, c) })
	})
}

// TestSentinel runs herd through Sentinel failover clients on a primary,
// a replica and three sentinels of each server.
func TestSentinel(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		runCommon(t, onSentinel(redistest.StartSentinel(t, s)))
	})
}

// runCommon runs what herd must do on every topology, each on a lock name
// of its own, so they can share one deployment.
func runCommon(t *testing.T, dep deployment) {
	t.Run("election", func(t *testing.T) { testElection(t, dep) })
	t.Run("handover", func(t *testing.T) { testHandover(t, dep) })
	t.Run("crash", func(t *testing.T) { testCrash(t, dep) })
	t.Run("registry-routing", func(t *testing.T) { testRegistryRouting(t, dep) })
	t.Run("acl", func(t *testing.T) { testACL(t, dep) })
}

func testElection(t *testing.T, dep deployment) {
	for round := range 5 {
		lock := "election-" + string(rune('a'+round))
		procs := startProcs(t, dep, lock, 3, nil)
		if m := mastersNow(procs); len(m) != 1 {
			t.Fatalf("round %d: %d masters right after Start, want 1", round, len(m))
		}
		waitOneMaster(t, procs, 0, 2*time.Second)
		for _, p := range procs {
			stopProc(t, p)
		}
	}
}

// testHandover stops the master twice; with LockTTL 30s, only the release
// notice can bring the take-over within 2s.
func testHandover(t *testing.T, dep deployment) {
	procs := startProcs(t, dep, "handover", 3, func(c *masterelection.Config) {
		c.LockTTL, c.HeartbeatInterval, c.CheckInterval = 30*time.Second, 10*time.Second, 5*time.Second
		c.ProcessTTL, c.SlaveTimeout = masterelection.DefaultConfig().ProcessTTL, masterelection.DefaultConfig().SlaveTimeout
	})
	watch := watchOverlaps(procs)
	live := procs
	var term int64
	for range 2 {
		old := waitOneMaster(t, live, term, 2*time.Second)
		term = old.el.Term()
		began := time.Now()
		stopProc(t, old)
		live = others(live, old)
		next := waitOneMaster(t, live, term, 2*time.Second)
		t.Logf("%s: handover %s -> %s in %v", dep.name, old.id, next.id, time.Since(began))
	}
	watch.Check(t)
}

// testCrash cuts the master off Redis (it can neither renew nor release, as
// if it had crashed, but it keeps running): another process takes over with
// a larger term, the cut-off one steps down on its own, the registry drops
// it, and there is never a moment with two masters.
func testCrash(t *testing.T, dep deployment) {
	procs := startProcs(t, dep, "crash", 3, nil)
	old := waitOneMaster(t, procs, 0, 2*time.Second)
	lost := make(chan struct{}, 1)
	old.el.OnMasterLost(func() { lost <- struct{}{} })
	watch := watchOverlaps(procs)
	began := time.Now()
	old.cut.Cut()
	rest := others(procs, old)
	next := waitOneMaster(t, rest, old.el.Term(), 5*time.Second)
	t.Logf("%s: crashed master replaced in %v (LockTTL 1s)", dep.name, time.Since(began))
	select {
	case <-lost:
	case <-time.After(3 * time.Second):
		t.Fatal("the cut-off master never reported master-lost")
	}
	watch.Check(t)
	waitRegistry(t, next, rest, 10*time.Second)
}

func testRegistryRouting(t *testing.T, dep deployment) {
	const lock = "routing"
	procs := startProcs(t, dep, lock, 3, nil)
	master := waitOneMaster(t, procs, 0, 2*time.Second)
	waitRegistry(t, master, procs, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slaves, err := master.el.Slaves(ctx)
	if err != nil || len(slaves) != 2 {
		t.Fatalf("Slaves = %v, %v; want the 2 other processes", slaves, err)
	}
	checkRouting(t, dep, lock, master, others(procs, master), false)
}

// testKeysInOneSlot checks, in Redis, that every key herd wrote for a lock
// name hashes to the slot of the {lockName} hash tag, on the one master that
// serves it, so that every script touches one slot.
func testKeysInOneSlot(t *testing.T, dep deployment, c *redistest.Cluster) {
	const lock = "slotted"
	procs := startProcs(t, dep, lock, 3, nil)
	master := waitOneMaster(t, procs, 0, 2*time.Second)
	waitRegistry(t, master, procs, 5*time.Second)
	cc := master.client.(*redis.ClusterClient)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := master.el.Keys()
	if k.Prefix != "{"+lock+"}" {
		t.Fatalf("key prefix %q, want the hash tag {%s}", k.Prefix, lock)
	}
	want, err := cc.ClusterKeySlot(ctx, "{"+lock+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Processes, k.ProcessesExpiry, k.Events, k.MasterInbox} {
		if got, err := cc.ClusterKeySlot(ctx, name).Result(); err != nil || got != want {
			t.Errorf("CLUSTER KEYSLOT %s = %d (%v), want %d", name, got, err, want)
		}
	}

	// Every key holding the lock name, on every master, lives in that slot.
	var found []string
	err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, "*"+lock+"*").Result()
		if err != nil {
			return err
		}
		for _, key := range keys {
			found = append(found, n.Options().Addr+" "+key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	owner := c.NodeForSlot(t, int(want))
	for _, f := range found {
		addr, key, _ := strings.Cut(f, " ")
		if addr != owner.Addr {
			t.Errorf("key %s is on %s, not on %s, the master of slot %d", key, addr, owner.Addr, want)
		}
	}
	inSlot, err := cc.ClusterGetKeysInSlot(ctx, int(want), 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(inSlot)
	for _, key := range []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Processes} {
		if !contains(inSlot, key) {
			t.Errorf("slot %d holds %v, without %s", want, inSlot, key)
		}
	}
	if len(inSlot) != len(found) {
		t.Errorf("slot %d holds %v, but the masters hold %v", want, inSlot, found)
	}
	t.Logf("slot %d on %s holds %v", want, owner.Addr, inSlot)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
