// Package herdtest starts herds for the tests of the herd command: elections
// in this process, each on a client of its own, against the real servers of
// internal/testkit/redistest. It is imported only from _test.go files.
package herdtest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/registry"
)

// URL is the redis:// URL of inst.
func URL(inst *redistest.Instance) string { return "redis://" + inst.Options().Addr }

// Config returns a fast election configuration (lock TTL 2s) for node id
// on lock, with capabilities and an identifier of its own.
func Config(lock, id string) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName, cfg.NodeID, cfg.Identifier = lock, id, "svc-"+id
	cfg.LockTTL = 2 * time.Second
	cfg.HeartbeatInterval = 400 * time.Millisecond
	cfg.CheckInterval = 250 * time.Millisecond
	cfg.ElectionJitter = 50 * time.Millisecond
	cfg.SlaveTimeout = time.Second
	cfg.ProcessTTL = 3 * time.Second
	cfg.TransferWindow = 200 * time.Millisecond
	cfg.Capabilities = registry.Capabilities{CanProcessDetections: true, MaxSubscriptions: 10, PreferredWorkload: 50}
	return cfg
}

// Node starts an election of cfg on a client of its own to inst, waits for
// its first election, and stops it when the test ends. tweak, when not
// nil, changes cfg first.
func Node(t testing.TB, inst *redistest.Instance, cfg masterelection.Config) *masterelection.MasterElection {
	t.Helper()
	c := inst.Client(t)
	m, err := masterelection.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	t.Cleanup(func() { Stop(t, m) })
	return m
}

// Herd starts one node per id on lock (the first is master) and returns
// them in order.
func Herd(t testing.TB, inst *redistest.Instance, lock string, ids ...string) []*masterelection.MasterElection {
	t.Helper()
	var nodes []*masterelection.MasterElection
	for _, id := range ids {
		nodes = append(nodes, Node(t, inst, Config(lock, id)))
	}
	if !nodes[0].IsMaster() {
		t.Fatalf("%s is not master after starting first", ids[0])
	}
	WaitRegistered(t, nodes[0], len(ids))
	return nodes
}

// Stop stops m (a second Stop is harmless).
func Stop(t testing.TB, m *masterelection.MasterElection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.Stop(ctx)
}

// WaitRegistered waits until the registry of m lists n processes.
func WaitRegistered(t testing.TB, m *masterelection.MasterElection, n int) {
	t.Helper()
	Eventually(t, 5*time.Second, "processes registered", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ps, err := m.Processes(ctx)
		return err == nil && len(ps) == n
	})
}

// Eventually polls cond every 5ms until it holds, failing the test after
// timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ClosedPort returns a local address that refuses connections.
func ClosedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// Admin runs a command on inst as the default user.
func Admin(t testing.TB, c *redis.Client, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}
