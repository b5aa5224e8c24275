package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/bench"
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
	if _, _, err := bench.DurableRouting(ctx, env, 2, 5, 40, 3, 0); err == nil {
		t.Error("DurableRouting with batches of 0: no error")
	}
	for _, batch := range []int{1, 4} {
		if rate, err := bench.RawStreams(ctx, env, 2, 40, 3, batch); err != nil || rate <= 0 {
			t.Errorf("RawStreams batch %d = %v, %v", batch, rate, err)
		}
	}
}
