//go:build topologies

package redistest

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redisproc"
)

// These tests start multi-process deployments and take seconds per server;
// they run with `make test-topologies` (build tag topologies).

func TestSlotRange(t *testing.T) {
	tests := []struct {
		n     int
		first []int
	}{
		{1, []int{0}},
		{3, []int{0, 5461, 10922}},
		{4, []int{0, 4096, 8192, 12288}},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.n), func(t *testing.T) {
			next := 0
			for i := range tt.n {
				lo, hi := SlotRange(tt.n, i)
				if lo != next || lo != tt.first[i] || hi < lo {
					t.Fatalf("SlotRange(%d, %d) = %d, %d; want it to start at %d", tt.n, i, lo, hi, tt.first[i])
				}
				next = hi + 1
			}
			if next != ClusterSlots {
				t.Fatalf("ranges of %d masters end at %d, want %d", tt.n, next-1, ClusterSlots-1)
			}
		})
	}
}

func TestStartCluster(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		c := StartCluster(t, s, 3)
		if len(c.Masters) != 3 || len(c.Addrs()) != 3 {
			t.Fatalf("masters %d, addrs %v", len(c.Masters), c.Addrs())
		}
		cc := c.Client(t)
		ctx := ctxT(t)
		if !cc.Options().ContextTimeoutEnabled {
			t.Fatal("cluster client without ContextTimeoutEnabled")
		}
		// Keys spread over every master, and the client finds each.
		seen := map[string]bool{}
		for i := range 30 {
			key := fmt.Sprintf("k%d", i)
			if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
				t.Fatalf("SET %s: %v", key, err)
			}
			slot, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			seen[c.NodeForSlot(t, int(slot)).Addr] = true
		}
		if len(seen) != 3 {
			t.Fatalf("30 keys landed on %d masters, want 3", len(seen))
		}
		for i := range 30 {
			if got, err := cc.Get(ctx, fmt.Sprintf("k%d", i)).Int(); err != nil || got != i {
				t.Fatalf("GET k%d = %d, %v", i, got, err)
			}
		}
		// Each master serves the range it was given.
		for i, m := range c.Masters {
			lo, hi := SlotRange(3, i)
			if got := c.NodeForSlot(t, lo); got != m {
				t.Fatalf("slot %d served by %s, want %s", lo, got.Addr, m.Addr)
			}
			if got := c.NodeForSlot(t, hi); got != m {
				t.Fatalf("slot %d served by %s, want %s", hi, got.Addr, m.Addr)
			}
		}
		// A multi-key command needs one slot: a hash tag gives it.
		if err := cc.MSet(ctx, "{t}:a", 1, "{t}:b", 2).Err(); err != nil {
			t.Fatalf("MSET with one hash tag: %v", err)
		}
		err := cc.Do(ctx, "MSET", "a", 1, "b", 2).Err()
		if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
			t.Fatalf("MSET across slots: %v, want CROSSSLOT", err)
		}
	})
}

func TestStartClusterReplicasFailover(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		c := StartClusterReplicas(t, s, 3, 1)
		cc := c.Client(t)
		ctx := ctxT(t)
		const key = "failover-key"
		if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		owner := c.NodeForSlot(t, int(slot))
		var replica *Instance
		for i, m := range c.Masters {
			if m == owner {
				replica = c.Replicas[i][0]
			}
		}
		if replica == nil {
			t.Fatalf("slot %d is served by %s, which is not one of the masters", slot, owner.Addr)
		}
		waitReplicated(t, replica, key)
		began := time.Now()
		owner.Kill(t)
		c.WaitHealthy(t, 0)
		ctx = ctxT(t)
		if got := c.NodeForSlot(t, int(slot)); got != replica {
			t.Fatalf("after the failover slot %d is served by %s, want the replica %s", slot, got.Addr, replica.Addr)
		}
		t.Logf("%s: cluster failover in %v (cluster-node-timeout %v)", s.Name, time.Since(began), ClusterNodeTimeout)
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			v, err := cc.Get(ctx, key).Result()
			cancel()
			if err == nil && v == "v" {
				t.Logf("%s: the cluster client reads the key again %v after the kill", s.Name, time.Since(began))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s through the cluster client after the failover: %q, %v", key, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// waitReplicated waits until the replica holds key (READONLY lets a replica
// answer reads of its slots).
func waitReplicated(t *testing.T, replica *Instance, key string) {
	t.Helper()
	c := replica.Client(t)
	ctx := ctxT(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pipe := c.Pipeline()
		pipe.ReadOnly(ctx)
		get := pipe.Exists(ctx, key)
		_, _ = pipe.Exec(ctx)
		if get.Val() == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s never got %s: %v", replica.Addr, key, get.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartClusterBadInput(t *testing.T) {
	s := Default(t)
	tests := []struct {
		name              string
		masters, replicas int
		want              string
	}{
		{"no masters", 0, 0, "masters must be between 1 and 16384, got 0"},
		{"too many masters", ClusterSlots + 1, 0, "got 16385"},
		{"negative replicas", 3, -1, "replicas must not be negative, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeTB{TB: t}
			f.run(func(tb testing.TB) { StartClusterReplicas(tb, s, tt.masters, tt.replicas) })
			checkOne(t, "fatal", f.fatal, tt.want)
		})
	}
}

// TestTopologyCleanup checks that every process of a cluster and of a
// sentinel deployment is gone once the test that started it has ended.
func TestTopologyCleanup(t *testing.T) {
	s := Default(t)
	var pids []int
	f := &fakeTB{TB: t}
	f.run(func(tb testing.TB) {
		c := StartClusterReplicas(tb, s, 3, 1)
		for _, n := range c.nodes() {
			pids = append(pids, n.Pid())
		}
		d := StartSentinel(tb, s)
		for _, n := range d.Data {
			pids = append(pids, n.Pid())
		}
		for _, n := range d.Sentinels {
			pids = append(pids, n.Pid())
		}
		tb.Fatal("end the test early") // cleanup must run after Fatal too
	})
	checkOne(t, "fatal", f.fatal, "end the test early")
	if len(pids) != 6+5 {
		t.Fatalf("got %d pids, want 11", len(pids))
	}
	for _, pid := range pids {
		if pid == 0 {
			t.Fatal("a process was not running before cleanup")
		}
		if alive(pid) {
			t.Errorf("pid %d still alive after cleanup", pid)
		}
	}
}

func TestStartSentinelFailover(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		d := StartSentinel(t, s)
		if len(d.Data) != 2 || len(d.Sentinels) != 3 {
			t.Fatalf("%d data nodes, %d sentinels", len(d.Data), len(d.Sentinels))
		}
		if got := d.Primary(t); got != d.Data[0] {
			t.Fatalf("primary %s, want %s", got.Addr, d.Data[0].Addr)
		}
		for _, n := range d.Sentinels {
			info, err := redisproc.InfoServer(n.Addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			mode, ok := InfoField(info, "redis_mode") // Redis
			if !ok {
				mode, _ = InfoField(info, "server_mode") // Valkey
			}
			if mode != "sentinel" {
				t.Fatalf("%s runs in mode %q, want sentinel", n.Addr, mode)
			}
		}
		c := d.Client(t)
		if !c.Options().ContextTimeoutEnabled {
			t.Fatal("failover client without ContextTimeoutEnabled")
		}
		ctx := ctxT(t)
		if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Wait(ctx, 1, 2*time.Second).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT 1 = %d, %v; want 1", n, err)
		}

		began := time.Now()
		old := d.KillPrimary(t)
		promoted := d.WaitPromoted(t, old, 0)
		t.Logf("%s: sentinel promoted %s in %v", s.Name, promoted.Addr, time.Since(began))
		if promoted != d.Data[1] {
			t.Fatalf("promoted %s, want the replica %s", promoted.Addr, d.Data[1].Addr)
		}
		// The failover client follows; the write acknowledged by the replica survived.
		ctx = ctxT(t)
		deadline := time.Now().Add(15 * time.Second)
		for {
			v, err := c.Get(ctx, "k").Result()
			if err == nil && v == "before" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET k after the failover = %q, %v", v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}

		// The old primary, restarted empty, is turned into a replica.
		old.Restart(t)
		d.WaitReplicas(t, 1, 0)
		ctx = ctxT(t)
		if err := c.Set(ctx, "k", "after", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT 1 after the rejoin = %d, %v; want 1", n, err)
		}
	})
}

func TestSentinelOptions(t *testing.T) {
	d := &Sentinel{Sentinels: []*SentinelNode{{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2"}}}
	o := d.FailoverOptions()
	if o.MasterName != SentinelMasterName || strings.Join(o.SentinelAddrs, ",") != "127.0.0.1:1,127.0.0.1:2" ||
		!o.ContextTimeoutEnabled || !o.DisableIdentity {
		t.Fatalf("FailoverOptions = %+v", o)
	}
	conf := sentinelConf(26000, 6000, "/tmp/x")
	for _, want := range []string{
		"port 26000", "sentinel monitor herd 127.0.0.1 6000 2",
		"sentinel down-after-milliseconds herd 1000", "sentinel failover-timeout herd 3000",
	} {
		if !strings.Contains(conf, want+"\n") {
			t.Errorf("sentinel.conf lacks %q:\n%s", want, conf)
		}
	}
}

func TestStartTLS(t *testing.T) {
	ForEachServer(t, func(t *testing.T, s Server) {
		if !SupportsTLS(t, s) {
			f := &fakeTB{TB: t}
			f.run(func(tb testing.TB) { StartTLS(tb, s) })
			checkOne(t, "skip", f.skipped, "built without TLS support")
			return
		}
		inst := StartTLS(t, s)
		ctx := ctxT(t)
		o := inst.Options()
		o.Addr, o.TLSConfig = inst.TLSAddr, inst.ClientTLS(t)
		c := redis.NewClient(o)
		defer c.Close()
		if err := c.Set(ctx, "k", "over tls", 0).Err(); err != nil {
			t.Fatalf("SET over TLS: %v", err)
		}
		if got, err := inst.Client(t).Get(ctx, "k").Result(); err != nil || got != "over tls" {
			t.Fatalf("GET on the plain port = %q, %v", got, err)
		}
		// The TLS port speaks only TLS, and only with the test's authority.
		o = inst.Options()
		o.Addr, o.MaxRetries = inst.TLSAddr, -1
		plain := redis.NewClient(o)
		defer plain.Close()
		if err := plain.Ping(shortCtx(t)).Err(); err == nil {
			t.Fatal("PING without TLS on the TLS port succeeded")
		}
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12} // system roots only
		untrusted := redis.NewClient(o)
		defer untrusted.Close()
		if err := untrusted.Ping(ctxT(t)).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("PING trusting only the system roots: %v, want a certificate error", err)
		}
	})
}
