package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herdbench/internal/bench"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// These tests check that the measurements measure what they claim, on a
// real server; they assert outcomes, never timings.

func TestOpsDoWhatTheyMeasure(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := env.NewClient()
	defer c.Close()
	info := processInfo(t)

	renew, err := bench.RenewOp(ctx, c, env.LockName("t-renew"), "n1", time.Minute, info)
	if err != nil {
		t.Fatal(err)
	}
	check, err := bench.CheckOp(ctx, c, env.LockName("t-check"), "n1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := bench.OpenRegistry(ctx, c, env.LockName("t-reg"), registry.BackendAuto)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := bench.HeartbeatOp(ctx, reg, "s2")
	if err != nil {
		t.Fatal(err)
	}
	ops := []bench.Op{
		bench.PingOp(c),
		bench.AcquireOp(c, env.LockName("t-acquire"), "n1", time.Minute, info),
		renew, check,
		bench.RegisterOp(reg, "s1"),
		hb,
	}
	samples, err := bench.MeasureInterleaved(ctx, ops, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		if len(s) != 5 {
			t.Errorf("%s: %d samples, want 5", ops[i].Name, len(s))
		}
	}
	if err := bench.ProcessesOp(reg, 2).Do(ctx); err != nil {
		t.Errorf("two processes registered: %v", err)
	}
	for _, op := range ops {
		if op.Close != nil {
			if err := op.Close(ctx); err != nil {
				t.Errorf("close %s: %v", op.Name, err)
			}
		}
	}
	// With its lock released, renew must fail rather than time a no-op.
	if err := renew.Do(ctx); err == nil || !strings.Contains(err.Error(), "lock gone") {
		t.Errorf("renew of a released lock = %v, want an error saying the lock is gone", err)
	}
	if err := bench.ProcessesOp(reg, 2).Do(ctx); err == nil {
		t.Errorf("Processes after both were unregistered: no error for the wrong count")
	}
}

func TestPopulate(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := env.NewClient()
	defer c.Close()
	lock := env.LockName("t-populate")
	reg, err := bench.OpenRegistry(ctx, c, lock, registry.BackendAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.Populate(ctx, reg, "p", 50, 4); err != nil {
		t.Fatal(err)
	}
	ps, err := reg.Processes(ctx)
	if err != nil || len(ps) != 50 {
		t.Fatalf("Processes = %d entries, %v; want 50", len(ps), err)
	}
	_ = c.Del(ctx, keyspace.NewKeys(lock, false).Processes, keyspace.NewKeys(lock, false).ProcessesExpiry)
}

func TestScenarios(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("contended", func(t *testing.T) {
		s, err := bench.Contended(ctx, env, 4, 2)
		if err != nil || len(s) != 2 {
			t.Fatalf("Contended = %d samples, %v; want 2", len(s), err)
		}
	})
	t.Run("handover", func(t *testing.T) {
		res, err := bench.Handover(ctx, env, 3)
		if err != nil || len(res.Total) != 3 {
			t.Fatalf("Handover = %d samples, %v; want 3", len(res.Total), err)
		}
		for i, p := range res.Phases {
			if len(p) != 3 {
				t.Errorf("phase %d has %d samples, want 3 (the hooks saw no release or acquire)", i, len(p))
			}
		}
	})
	t.Run("failover", func(t *testing.T) {
		res, err := bench.Failover(ctx, env, 300*time.Millisecond, 2, 1)
		if err != nil || len(res.FromCut) != 1 || len(res.FromExpiry) != 1 {
			t.Fatalf("Failover = %+v, %v; want one round", res, err)
		}
		if _, err := bench.Failover(ctx, env, time.Second, 1, 1); err == nil {
			t.Errorf("Failover with one node: no error")
		}
	})
	t.Run("slave registered", func(t *testing.T) {
		s, err := bench.SlaveRegistered(ctx, env, 3)
		if err != nil || len(s) != 3 {
			t.Fatalf("SlaveRegistered = %d samples, %v; want 3", len(s), err)
		}
	})
	t.Run("routing", func(t *testing.T) {
		res, err := bench.Routing(ctx, env, 2, 5, 40, 3)
		if err != nil || len(res.Latency) != 5 || res.Messages != 40 || res.Elapsed <= 0 {
			t.Fatalf("Routing = %+v, %v; want 5 latencies and 40 messages", res, err)
		}
		res, err = bench.RoutingBatch(ctx, env, 2, 40, 3, 4)
		// 3 senders share 40 messages as 14, 13, 13: 4 calls of up to 4 each.
		if err != nil || res.Messages != 40 || res.Batch != 4 || res.Calls != 12 || res.Elapsed <= 0 {
			t.Fatalf("RoutingBatch = %+v, %v; want 40 messages in 12 calls", res, err)
		}
		if _, err := bench.RoutingBatch(ctx, env, 2, 40, 3, 0); err == nil {
			t.Errorf("RoutingBatch with batches of 0: no error")
		}
	})
}
