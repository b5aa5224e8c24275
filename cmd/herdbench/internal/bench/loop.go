package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
)

// LoopRenew returns a Go benchmark of one renewal as the master's election
// loop does it (timer, context, script, deadline bookkeeping), not just the
// script: a master with HeartbeatInterval 1 ms (LockTTL 1 s) renews b.N
// times, counted by a hook on its client. ns/op is then about the interval
// and means nothing; allocs/op, B/op and cpu-ns/op (this process's CPU time
// per renewal, every goroutine included) are the cost of a heartbeat.
func LoopRenew(env *Env) func(b *testing.B) {
	return func(b *testing.B) {
		if err := loopRenew(env, b); err != nil {
			b.Fatal(err)
		}
	}
}

// LoopRenewFunc is LoopRenew's body for RunBenchmark.
func LoopRenewFunc(env *Env) func(b *testing.B) error {
	return func(b *testing.B) error { return loopRenew(env, b) }
}

func loopRenew(env *Env, b *testing.B) error {
	ctx := context.Background()
	c := env.NewClient()
	defer c.Close()
	h := &renewHook{}
	c.AddHook(h)
	cfg := Timings(env.LockName("loop"), "loop-master", time.Second)
	cfg.HeartbeatInterval = time.Millisecond
	cfg.ElectionJitter = 0
	n, err := newNode(c, true, cfg)
	if err != nil {
		return err
	}
	defer n.close(ctx)
	if err := n.Start(ctx); err != nil {
		return err
	}
	if !n.IsMaster() {
		return errors.New("the only node of a fresh lock is not master")
	}
	done := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	h.arm(int64(b.N), done)
	select {
	case <-done:
	case <-time.After(time.Duration(b.N)*100*time.Millisecond + 10*time.Second):
		return fmt.Errorf("%d renewals did not happen in time (%d did)", b.N, h.count.Load())
	}
	b.StopTimer()
	cpu1, _ := processCPU()
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	if !n.IsMaster() {
		return errors.New("the master lost its lock during the benchmark")
	}
	return nil
}

// isRenew reports whether cmd runs the renew script.
func isRenew(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	sha, _ := args[1].(string)
	return name == "evalsha" && sha == rdb.RenewSHA
}

// renewHook closes done once it has seen target more renew script calls
// complete after arm.
type renewHook struct {
	count  atomic.Int64
	target atomic.Int64 // 0: not armed
	done   atomic.Pointer[chan struct{}]
}

func (h *renewHook) arm(n int64, done chan struct{}) {
	h.done.Store(&done)
	h.target.Store(h.count.Load() + n)
}

func (h *renewHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *renewHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && isRenew(cmd) {
			c := h.count.Add(1)
			if t := h.target.Load(); t > 0 && c == t {
				close(*h.done.Load())
			}
		}
		return err
	}
}

func (h *renewHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
