package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herdbench/internal/bench"
)

// TestDurableRouting: the durable rows measure what they say: every
// latency sample, every message, the batch calls, and the streams floor.
func TestDurableRouting(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	single, batched, err := bench.DurableRouting(ctx, env, 2, 5, 40, 3, 4)
	if err != nil || len(single.Latency) != 5 || single.Messages != 40 || single.Elapsed <= 0 {
		t.Fatalf("DurableRouting single = %+v, %v; want 5 latencies and 40 messages", single, err)
	}
	// 3 senders share 40 messages as 14, 13, 13: 4 calls of up to 4 each.
	if batched.Messages != 40 || batched.Batch != 4 || batched.Calls != 12 || batched.Elapsed <= 0 {
		t.Fatalf("DurableRouting batched = %+v; want 40 messages in 12 calls", batched)
	}
	// The script calls were counted inside Redis.
	if single.Script <= 0 || batched.Script <= 0 {
		t.Errorf("DurableRouting measured no time inside Redis per script call: %v, %v", single.Script, batched.Script)
	}
	if _, _, err := bench.DurableRouting(ctx, env, 2, 5, 40, 3, 0); err == nil {
		t.Error("DurableRouting with batches of 0: no error")
	}
	for _, batch := range []int{1, 4} {
		if rate, err := bench.RawStreams(ctx, env, 2, 40, 3, batch); err != nil || rate <= 0 {
			t.Errorf("RawStreams batch %d = %v, %v", batch, rate, err)
		}
	}
}

// TestAdoption: each round's sweep adopted the whole backlog (Adoption
// checks the count), in script calls of up to 128 entries, and the sweeps
// with nothing to adopt made one call.
func TestAdoption(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := bench.Adoption(ctx, env, 2, 300, 2)
	if err != nil || len(res.Sweep) != 2 || len(res.Idle) != 10 || len(res.IdleFull) != 10 {
		t.Fatalf("Adoption = %+v, %v; want 2 sweeps and 10 idle sweeps of each kind", res, err)
	}
	// 300 entries, 128 per call: 3 calls; 2 inboxes in one call when idle.
	if res.Calls != 3 || res.IdleCalls != 1 {
		t.Errorf("Adoption made %d calls per sweep and %d per idle sweep, want 3 and 1", res.Calls, res.IdleCalls)
	}
	if _, err := bench.Adoption(ctx, env, 0, 10, 1); err == nil {
		t.Error("Adoption with no slave: no error")
	}
}

// TestBacklogFailover: after each failover every message of the backlog
// was handled (BacklogFailover waits for it), and each message handled only
// under the old term or adopted by the new master.
func TestBacklogFailover(t *testing.T) {
	env := benchEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := bench.BacklogFailover(ctx, env, 2, 200, 2)
	if err != nil || len(res.All) != 2 || len(res.Acquired) != 2 {
		t.Fatalf("BacklogFailover = %+v, %v; want 2 rounds", res, err)
	}
	// A message not handled under the old term after the take-over was
	// handled under the new one, which only adoption gives it.
	if res.Adopted+res.OldTerm < 2*200 || len(res.First) > 2 || len(res.Swept) > 2 {
		t.Errorf("BacklogFailover = %+v; want every message adopted or handled under the old term", res)
	}
	if _, err := bench.BacklogFailover(ctx, env, 2, 0, 1); err == nil {
		t.Error("BacklogFailover with no backlog: no error")
	}
}
