package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/keyspace"
)

// Op is one operation of a per-operation row, ready to be called again and
// again: Measure times it for percentiles, Bench runs it as a Go benchmark.
// An Op is used by one goroutine at a time.
type Op struct {
	// Name is the operation's name, such as "renew".
	Name string
	// Do is the operation measured.
	Do func(ctx context.Context) error
	// Reset, when not nil, runs untimed after every Do to restore what the
	// next Do needs (acquire needs a free lock).
	Reset func(ctx context.Context) error
	// Close undoes the setup of the Op's constructor; nil when there is none.
	Close func(ctx context.Context) error
}

// errUnexpected reports an operation whose outcome was not the one the row
// measures (a renew that found the lock gone), which would make its timing
// meaningless.
var errUnexpected = errors.New("bench: unexpected outcome")

// PingOp is the baseline: one PING round trip.
func PingOp(c redis.UniversalClient) Op {
	return Op{Name: "ping", Do: func(ctx context.Context) error { return c.Ping(ctx).Err() }}
}

// floorScript does nothing: the cost of calling any script at all.
var floorScript = redis.NewScript("return 1")

// FloorOp runs a script that does nothing (EVALSHA of "return 1"): the
// least any script call costs, between PING and the lock scripts.
func FloorOp(c redis.UniversalClient) Op {
	return Op{Name: "empty script", Do: func(ctx context.Context) error {
		return floorScript.Run(ctx, c, nil).Err()
	}}
}

// AcquireOp runs the acquire script on a free lock (uncontested); Reset
// releases it again, untimed.
func AcquireOp(c redis.UniversalClient, lockName, nodeID string, ttl time.Duration, info []byte) Op {
	k := keyspace.NewKeys(lockName, false)
	var term int64
	return Op{
		Name: "acquire",
		Do: func(ctx context.Context) error {
			res, err := rdb.Acquire(ctx, c, k, nodeID, ttl, info, 0)
			if err != nil {
				return err
			}
			if res.Term == 0 {
				return fmt.Errorf("%w: acquire found the lock held by %q", errUnexpected, res.Holder)
			}
			term = res.Term
			return nil
		},
		Reset: func(ctx context.Context) error {
			ok, err := rdb.Release(ctx, c, k, nodeID, term)
			if err == nil && !ok {
				err = fmt.Errorf("%w: release found the lock gone", errUnexpected)
			}
			return err
		},
		Close: func(ctx context.Context) error { return c.Del(ctx, k.Term).Err() },
	}
}

// RenewOp acquires a lock and returns the Op that renews it, as the master
// does every HeartbeatInterval (with its term, as the election loop does).
func RenewOp(ctx context.Context, c redis.UniversalClient, lockName, nodeID string, ttl time.Duration, info []byte) (Op, error) {
	return heldOp(ctx, c, lockName, nodeID, ttl, info, "renew", func(ctx context.Context, k keyspace.Keys, term int64) error {
		ok, err := rdb.Renew(ctx, c, k, nodeID, term, ttl)
		if err == nil && !ok {
			err = fmt.Errorf("%w: renew found the lock gone", errUnexpected)
		}
		return err
	})
}

// CheckOp acquires a lock for holder and returns the Op that checks it, as
// every slave does every CheckInterval.
func CheckOp(ctx context.Context, c redis.UniversalClient, lockName, holder string, ttl time.Duration) (Op, error) {
	return heldOp(ctx, c, lockName, holder, ttl, nil, "check", func(ctx context.Context, k keyspace.Keys, term int64) error {
		st, err := rdb.Check(ctx, c, k)
		if err == nil && (st.NodeID != holder || st.Term != term) {
			err = fmt.Errorf("%w: check saw %q term %d", errUnexpected, st.NodeID, st.Term)
		}
		return err
	})
}

// heldOp acquires the lock lockName for nodeID and returns the Op name
// that calls do with the lock's keys and term, as the Op's own work needs
// the lock held; the Op's Close releases it.
func heldOp(ctx context.Context, c redis.UniversalClient, lockName, nodeID string, ttl time.Duration, info []byte, name string, do func(ctx context.Context, k keyspace.Keys, term int64) error) (Op, error) {
	k := keyspace.NewKeys(lockName, false)
	res, err := rdb.Acquire(ctx, c, k, nodeID, ttl, info, 0)
	if err != nil {
		return Op{}, fmt.Errorf("acquire before %s: %w", name, err)
	}
	if res.Term == 0 {
		return Op{}, fmt.Errorf("%w: lock %q is held by %q", errUnexpected, lockName, res.Holder)
	}
	return Op{
		Name:  name,
		Do:    func(ctx context.Context) error { return do(ctx, k, res.Term) },
		Close: func(ctx context.Context) error { return release(ctx, c, k, nodeID, res.Term) },
	}, nil
}

// release releases the lock nodeID holds under term and deletes its term
// key.
func release(ctx context.Context, c redis.UniversalClient, k keyspace.Keys, nodeID string, term int64) error {
	if _, err := rdb.Release(ctx, c, k, nodeID, term); err != nil {
		return err
	}
	return c.Del(ctx, k.Term).Err()
}

// Measure calls op.Do warmup times untimed, then n times timed one by one,
// with op.Reset untimed after each call, and returns the n durations.
func Measure(ctx context.Context, op Op, warmup, n int) ([]time.Duration, error) {
	for range warmup {
		if err := once(ctx, op); err != nil {
			return nil, err
		}
	}
	samples := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		err := op.Do(ctx)
		d := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op.Name, err)
		}
		samples = append(samples, d)
		if op.Reset != nil {
			if err := op.Reset(ctx); err != nil {
				return nil, fmt.Errorf("%s: reset: %w", op.Name, err)
			}
		}
	}
	return samples, nil
}

func once(ctx context.Context, op Op) error {
	if err := op.Do(ctx); err != nil {
		return fmt.Errorf("%s: %w", op.Name, err)
	}
	if op.Reset != nil {
		if err := op.Reset(ctx); err != nil {
			return fmt.Errorf("%s: reset: %w", op.Name, err)
		}
	}
	return nil
}

// Bench runs op as the body of a Go benchmark: b.N timed calls of Do, each
// Reset outside the timer. Besides ns/op and the allocations it reports
// p50-ns and p99-ns (per call) and, for Ops without Reset, cpu-ns/op: the
// CPU time this whole process spent per call (client, go-redis, runtime;
// not the server's). An error fails the benchmark.
func (op Op) Bench(b *testing.B) {
	if err := op.bench(b); err != nil {
		b.Fatal(err)
	}
}

func (op Op) bench(b *testing.B) error {
	ctx := context.Background()
	samples := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	for i := range b.N {
		t0 := time.Now()
		err := op.Do(ctx)
		samples[i] = time.Since(t0)
		if err != nil {
			return fmt.Errorf("%s: %w", op.Name, err)
		}
		if op.Reset != nil {
			b.StopTimer()
			if err := op.Reset(ctx); err != nil {
				return fmt.Errorf("%s: reset: %w", op.Name, err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	cpu1, _ := processCPU()
	s := benchkit.Summarize(samples)
	b.ReportMetric(float64(s.P50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(s.P99.Nanoseconds()), "p99-ns")
	if cpuOK && op.Reset == nil {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	return nil
}

// Cost is what one operation costs this process, from a Go benchmark.
type Cost struct {
	// N is the number of operations the benchmark ran.
	N int
	// Allocs and Bytes are the heap allocations per operation.
	Allocs, Bytes int64
	// CPU is this process's CPU time per operation; 0 when unknown.
	CPU time.Duration
}

// String formats c as "12 allocs, 1.1 KB, 21.3µs CPU".
func (c Cost) String() string {
	s := fmt.Sprintf("%d allocs, %s", c.Allocs, benchkit.FormatBytes(c.Bytes))
	if c.CPU > 0 {
		s += ", " + benchkit.FormatDuration(c.CPU) + " CPU"
	}
	return s
}

// RunBenchmark runs body with testing.Benchmark (one second of operations,
// as `go test -bench` does by default) and returns what one operation cost.
func RunBenchmark(body func(b *testing.B) error) (Cost, error) {
	var (
		mu     sync.Mutex
		failed error
	)
	r := testing.Benchmark(func(b *testing.B) {
		if err := body(b); err != nil {
			mu.Lock()
			failed = err
			mu.Unlock()
			b.FailNow()
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		return Cost{}, failed
	}
	if r.N == 0 {
		return Cost{}, errors.New("bench: benchmark did not run")
	}
	return Cost{N: r.N, Allocs: r.AllocsPerOp(), Bytes: r.AllocedBytesPerOp(), CPU: time.Duration(r.Extra["cpu-ns/op"])}, nil
}

// BenchFunc returns op's benchmark body for RunBenchmark.
func (op Op) BenchFunc() func(b *testing.B) error { return op.bench }

// MeasureFromRest calls op.Do n times, each after gap of rest (this
// goroutine sleeps), with op.Reset untimed after each call, and returns the
// n durations. A call that follows a rest pays for waking the threads and
// cores that went idle, which calls sent back to back (Measure) do not:
// every round trip of a scenario row (a handover's release, a slave's
// acquire, Start's first call) is such a call.
func MeasureFromRest(ctx context.Context, op Op, gap time.Duration, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		if err := sleep(ctx, gap); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := op.Do(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", op.Name, err)
		}
		out = append(out, time.Since(t0))
		if op.Reset != nil {
			if err := op.Reset(ctx); err != nil {
				return nil, fmt.Errorf("%s: reset: %w", op.Name, err)
			}
		}
	}
	return out, nil
}
