package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herdbench/internal/bench"
	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// The per-operation rows of `make bench` as Go benchmarks, for benchstat:
//
//	go test -run '^$' -bench . -benchmem -count 10 ./cmd/herdbench/internal/bench > new.txt
//
// Each reports p50-ns and p99-ns besides ns/op; those without an untimed
// reset also report cpu-ns/op, this process's CPU time per operation.

func BenchmarkPing(b *testing.B) {
	c := benchEnv(b).NewClient()
	defer c.Close()
	bench.PingOp(c).Bench(b)
}

func BenchmarkAcquire(b *testing.B) {
	env := benchEnv(b)
	c := env.NewClient()
	defer c.Close()
	op := bench.AcquireOp(c, env.LockName("acquire"), "bench-node", 30*time.Second, processInfo(b))
	defer func() { _ = op.Close(context.Background()) }()
	op.Bench(b)
}

func BenchmarkRenew(b *testing.B) {
	env := benchEnv(b)
	c := env.NewClient()
	defer c.Close()
	op, err := bench.RenewOp(context.Background(), c, env.LockName("renew"), "bench-node", 30*time.Second, processInfo(b))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = op.Close(context.Background()) }()
	op.Bench(b)
}

func BenchmarkCheck(b *testing.B) {
	env := benchEnv(b)
	c := env.NewClient()
	defer c.Close()
	op, err := bench.CheckOp(context.Background(), c, env.LockName("check"), "bench-node", 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = op.Close(context.Background()) }()
	op.Bench(b)
}

// BenchmarkLoopRenew is a heartbeat as the election loop does it; see
// bench.LoopRenew (ns/op is the 1 ms interval; read allocs/op, cpu-ns/op).
func BenchmarkLoopRenew(b *testing.B) {
	bench.LoopRenew(benchEnv(b))(b)
}

// BenchmarkHandover times b.N graceful handovers (Stop -> master-acquired);
// ns/op includes starting each round's new slave, p50-ns and p99-ns do not.
func BenchmarkHandover(b *testing.B) {
	env := benchEnv(b)
	res, err := bench.Handover(context.Background(), env, b.N)
	if err != nil {
		b.Fatal(err)
	}
	s := benchkit.Summarize(res.Total)
	b.ReportMetric(float64(s.P50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(s.P99.Nanoseconds()), "p99-ns")
}

// BenchmarkContended100 times b.N elections of 100 candidates started at
// once, until each knows its role; ns/op includes connecting the 100
// clients, p50-ns and p99-ns do not.
func BenchmarkContended100(b *testing.B) {
	env := benchEnv(b)
	samples, err := bench.Contended(context.Background(), env, 100, b.N)
	if err != nil {
		b.Fatal(err)
	}
	s := benchkit.Summarize(samples)
	b.ReportMetric(float64(s.P50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(s.P99.Nanoseconds()), "p99-ns")
}

func processInfo(tb testing.TB) []byte {
	tb.Helper()
	now := time.Now()
	b, err := json.Marshal(registry.ProcessInfo{ProcessID: "bench-node", NodeID: "bench-node", Role: registry.RoleMaster, LastSeen: now, RegisteredAt: now, Identifier: "herdbench"})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func BenchmarkEmptyScript(b *testing.B) {
	c := benchEnv(b).NewClient()
	defer c.Close()
	bench.FloorOp(c).Bench(b)
}

func BenchmarkRegister(b *testing.B) {
	env := benchEnv(b)
	c := env.NewClient()
	defer c.Close()
	reg, err := bench.OpenRegistry(context.Background(), c, env.LockName("register"), registry.BackendAuto)
	if err != nil {
		b.Fatal(err)
	}
	op := bench.RegisterOp(reg, "bench-slave")
	defer func() { _ = op.Close(context.Background()) }()
	op.Bench(b)
}

func BenchmarkHeartbeat(b *testing.B) {
	env := benchEnv(b)
	c := env.NewClient()
	defer c.Close()
	reg, err := bench.OpenRegistry(context.Background(), c, env.LockName("heartbeat"), registry.BackendAuto)
	if err != nil {
		b.Fatal(err)
	}
	op, err := bench.HeartbeatOp(context.Background(), reg, "bench-slave")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = op.Close(context.Background()) }()
	op.Bench(b)
}

// BenchmarkProcesses reads the whole registry at 10, 1,000 and 10,000
// entries on the backend the server picks (BENCH_BACKEND selects another).
func BenchmarkProcesses(b *testing.B) {
	backend := registry.Backend(os.Getenv("BENCH_BACKEND"))
	if backend == "" {
		backend = registry.BackendAuto
	}
	for _, size := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			env := benchEnv(b)
			ctx := context.Background()
			c := env.NewClient()
			defer c.Close()
			lock := env.LockName("processes")
			reg, err := bench.OpenRegistry(ctx, c, lock, backend)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				k := keyspace.NewKeys(lock, false)
				_ = c.Del(ctx, k.Processes, k.ProcessesExpiry).Err()
			}()
			if err := bench.Populate(ctx, reg, "p", size, 16); err != nil {
				b.Fatal(err)
			}
			bench.ProcessesOp(reg, size).Bench(b)
		})
	}
}

// BenchmarkRouted sends b.N messages from one master to 10 slaves with 16
// goroutines at once and reports msg/s; ns/op includes starting the 11
// processes' clients and subscriptions.
func BenchmarkRouted(b *testing.B) {
	res, err := bench.Routing(context.Background(), benchEnv(b), 10, 0, b.N, 16)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.Rate(), "msg/s")
}

// BenchmarkRoutedBatch is BenchmarkRouted with Router.SendBatch, 64
// messages per call.
func BenchmarkRoutedBatch(b *testing.B) {
	res, err := bench.RoutingBatch(context.Background(), benchEnv(b), 10, b.N, 16, 64)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.Rate(), "msg/s")
}

// BenchmarkRawPublish is the floor under BenchmarkRouted: plain PUBLISH to
// 10 plain subscriptions from 16 goroutines, one message per round trip.
func BenchmarkRawPublish(b *testing.B) {
	rate, _, err := bench.RawPublish(context.Background(), benchEnv(b), 10, b.N, 16, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rate, "msg/s")
}
