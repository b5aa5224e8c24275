//go:build topologies

package topologies

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
)

// This file prototypes the opt-in replication check proposed for
// masterelection (WaitReplicas): after a lock write, WAIT until n replicas
// acknowledged it, and count too few acknowledgements as a failed write.
// It tests the mechanics on real deployments and measures the cost.

// writeAndWait runs script s and then WAIT replicas timeout in one pipeline
// on one connection of the node that serves keys[0], and returns the
// script's reply and the number of replicas that acknowledged.
//
// Both halves matter: WAIT counts the replicas that acknowledged every write
// of the connection it runs on, so on another connection it proves nothing
// (on Redis 8 and Valkey 9 a fresh connection gets 1 at once from a frozen
// replica); and a go-redis cluster client runs a keyless WAIT on any
// master, so on Cluster the pipeline is made on the slot's master
// (MasterForKey).
func writeAndWait(ctx context.Context, c redis.UniversalClient, s *redis.Script, keys []string, replicas int, timeout time.Duration, args ...any) (reply any, acked int64, err error) {
	var node redis.Cmdable = c
	if cc, ok := c.(*redis.ClusterClient); ok {
		if node, err = cc.MasterForKey(ctx, keys[0]); err != nil {
			return nil, 0, err
		}
	}
	for _, eval := range []func(redis.Pipeliner) *redis.Cmd{
		func(p redis.Pipeliner) *redis.Cmd { return s.EvalSha(ctx, p, keys, args...) },
		func(p redis.Pipeliner) *redis.Cmd { return s.Eval(ctx, p, keys, args...) },
	} {
		pipe := node.Pipeline()
		run := eval(pipe)
		// Pipeliner has no typed Wait. A pipeline is read with the client's
		// ReadTimeout, which must exceed timeout.
		wait := pipe.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // each command's error is read below
		reply, err = run.Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			continue // the server lost its script cache: send the body
		}
		if err != nil {
			return nil, 0, err
		}
		acked, err = wait.Int64()
		return reply, acked, err
	}
	return nil, 0, errors.New("topologies: script still unknown after EVAL")
}

// renewAndWait is rdb.RenewReplicated (renew.lua and WAIT in one
// pipeline); it returns whether the lock was renewed and how many replicas
// acknowledged the renewal.
func renewAndWait(ctx context.Context, c redis.UniversalClient, k keyspace.Keys, nodeID string, term int64, ttl time.Duration, replicas int, timeout time.Duration) (bool, int64, error) {
	return rdb.RenewReplicated(ctx, c, k, nodeID, term, ttl, rdb.Replication{Replicas: replicas, Timeout: timeout})
}

// acquire takes the lock for nodeID and returns its term.
func acquire(t testing.TB, c redis.UniversalClient, k keyspace.Keys, nodeID string, ttl time.Duration) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := rdb.Acquire(ctx, c, k, nodeID, ttl, nil, 0)
	if err != nil || res.Term == 0 {
		t.Fatalf("acquire %s: %+v, %v", k.Master, res, err)
	}
	return res.Term
}

// TestWaitReplicas checks the WAIT mechanics on Sentinel: a renewal is
// acknowledged by the replica; with the replica frozen it is not (the write
// happened on the primary all the same: that is the failed renewal the
// design must count); WAIT on another connection would have said 1; and
// after a failover the promoted primary has no replica until the old
// primary rejoins, so WaitReplicas(1) cannot renew meanwhile.
func TestWaitReplicas(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		d := redistest.StartSentinel(t, s)
		c := d.Client(t)
		k := keyspace.NewKeys("wait", false)
		const node, ttl = "waiter", 10 * time.Second
		term := acquire(t, c, k, node, ttl)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		ok, acked, err := renewAndWait(ctx, c, k, node, term, ttl, 1, time.Second)
		if err != nil || !ok || acked != 1 {
			t.Fatalf("renew + WAIT 1 = %v, %d acks, %v; want renewed and 1", ok, acked, err)
		}

		replica := d.Data[1]
		replica.Pause(t)
		ok, acked, err = renewAndWait(ctx, c, k, node, term, ttl, 1, 200*time.Millisecond)
		if err != nil || !ok || acked != 0 {
			t.Errorf("renew + WAIT 1 with the replica frozen = %v, %d acks, %v; want renewed on the primary and 0 acks", ok, acked, err)
		}
		// The same WAIT on a connection that wrote nothing says nothing about
		// the renewal; what it returns differs between servers.
		fresh := redis.NewClient(d.Data[0].Options())
		n, err := fresh.Wait(ctx, 1, 200*time.Millisecond).Result()
		_ = fresh.Close()
		t.Logf("%s: WAIT 1 on a fresh connection with the replica frozen = %d, %v", s.Name, n, err)
		replica.Resume(t)
		ok, acked, err = renewAndWait(ctx, c, k, node, term, ttl, 1, 2*time.Second)
		if err != nil || !ok || acked != 1 {
			t.Fatalf("renew + WAIT 1 after the replica resumed = %v, %d acks, %v; want renewed and 1", ok, acked, err)
		}

		// A failover leaves the new primary without a replica.
		dead := d.KillPrimary(t)
		d.WaitPromoted(t, dead, 0)
		probe := redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)
		write := func(wait time.Duration) int64 {
			t.Helper()
			var acked int64
			deadline := time.Now().Add(15 * time.Second)
			for {
				_, acked, err = writeAndWait(ctx, c, probe, []string{k.Prefix + ":probe"}, 1, wait, "v")
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond) // the client is still finding the new primary
			}
			if err != nil {
				t.Fatalf("write + WAIT through the failover client: %v", err)
			}
			return acked
		}
		if acked := write(200 * time.Millisecond); acked != 0 {
			t.Errorf("WAIT 1 on the promoted primary, before any replica rejoined = %d, want 0", acked)
		}
		dead.Restart(t) // back empty; the sentinels make it a replica
		d.WaitReplicas(t, 1, 0)
		if acked := write(2 * time.Second); acked != 1 {
			t.Errorf("WAIT 1 once the old primary rejoined as a replica = %d, want 1", acked)
		}
	})
}

// TestWaitReplicasCluster checks that writeAndWait's WAIT runs on the
// master of the lock's slot: freezing that master's replica makes it time
// out, while the other masters' replicas are fine.
func TestWaitReplicasCluster(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.StartClusterReplicas(t, s, 3, 1)
		cc := c.Client(t)
		k := keyspace.NewKeys("wait", true)
		const node, ttl = "waiter", 10 * time.Second
		term := acquire(t, cc, k, node, ttl)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ok, acked, err := renewAndWait(ctx, cc, k, node, term, ttl, 1, time.Second)
		if err != nil || !ok || acked != 1 {
			t.Fatalf("renew + WAIT 1 = %v, %d acks, %v; want renewed and 1", ok, acked, err)
		}
		slot, err := cc.ClusterKeySlot(ctx, k.Master).Result()
		if err != nil {
			t.Fatal(err)
		}
		owner := c.NodeForSlot(t, int(slot))
		for i, m := range c.Masters {
			if m == owner {
				c.Replicas[i][0].Pause(t)
				defer c.Replicas[i][0].Resume(t)
			}
		}
		ok, acked, err = renewAndWait(ctx, cc, k, node, term, ttl, 1, 200*time.Millisecond)
		if err != nil || !ok || acked != 0 {
			t.Errorf("renew + WAIT 1 with the slot's replica frozen = %v, %d acks, %v; want renewed and 0", ok, acked, err)
		}

		// A plain cluster pipeline does not keep WAIT with the write.
		pipe := cc.Pipeline()
		pipe.Set(ctx, k.Prefix+":probe", "v", 0)
		wait := pipe.Do(ctx, "WAIT", 1, 200)
		_, err = pipe.Exec(ctx)
		t.Logf("%s: SET + WAIT in a cluster-client pipeline, the slot's replica frozen: WAIT = %d, %v", s.Name, wait.Val(), err)
	})
}

// BenchmarkWait measures what WAIT 1 adds to a lock renewal on a Sentinel
// deployment of each server (primary and replica on this machine): "renew"
// is the renew script alone, "renew+wait1" the same in one pipeline with
// WAIT 1.
//
//	go test -tags topologies -run '^$' -bench Wait ./integration/topologies/
func BenchmarkWait(b *testing.B) {
	for _, s := range redistest.Servers(b) {
		b.Run(s.Name, func(b *testing.B) {
			d := redistest.StartSentinel(b, s)
			c := d.Client(b)
			k := keyspace.NewKeys("bench-wait", false)
			const node, ttl = "bencher", 30 * time.Second
			term := acquire(b, c, k, node, ttl)
			ctx := context.Background()
			b.Run("renew", func(b *testing.B) {
				for b.Loop() {
					if ok, err := rdb.Renew(ctx, c, k, node, term, ttl); err != nil || !ok {
						b.Fatalf("renew = %v, %v", ok, err)
					}
				}
			})
			b.Run("renew+wait1", func(b *testing.B) {
				for b.Loop() {
					ok, acked, err := renewAndWait(ctx, c, k, node, term, ttl, 1, time.Second)
					if err != nil || !ok || acked != 1 {
						b.Fatalf("renew + WAIT 1 = %v, %d, %v", ok, acked, err)
					}
				}
			})
		})
	}
}
