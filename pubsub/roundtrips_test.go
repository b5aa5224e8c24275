package pubsub_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/pubsub"
)

// tripCounter is a go-redis hook counting round trips (a pipeline is one)
// and commands (a pipeline's one by one).
type tripCounter struct{ trips, cmds atomic.Int64 }

func (c *tripCounter) reset() { c.trips.Store(0); c.cmds.Store(0) }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestSendBatchRoundTrips: the round-trip budget of SendBatch
// (docs/performance.md): n messages cost ceil(n/MaxBatchChunk) script
// calls, one per chunk, however the messages spread over the slaves, and no
// more round trips than that. With the script cached on the server: a
// first call adds one (EVALSHA, NOSCRIPT, EVAL).
func TestSendBatchRoundTrips(t *testing.T) {
	_, c := newMini(t)
	ids := []string{"s1", "s2", "s3"}
	for _, id := range ids {
		rawSubscribe(t, c, pubsub.SlaveChannel(id))
	}
	r := newRouter(t, c, newMaster(t, c, "m", pubsub.Config{}), slaveList{ids: ids}, pubsub.Config{})
	mustSendBatch(t, r, batchTo(1, "warm", ids...)) // the script into the cache
	var n tripCounter
	c.AddHook(&n)
	for _, size := range []int{1, pubsub.MaxBatchChunk - 1, pubsub.MaxBatchChunk, pubsub.MaxBatchChunk + 1, 2 * pubsub.MaxBatchChunk, 5*pubsub.MaxBatchChunk + 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			n.reset()
			res := mustSendBatch(t, r, batchTo(size, "t", ids...))
			if res.Delivered() != size {
				t.Fatalf("%d of %d delivered", res.Delivered(), size)
			}
			want := int64((size + pubsub.MaxBatchChunk - 1) / pubsub.MaxBatchChunk)
			if got := n.cmds.Load(); got != want {
				t.Errorf("SendBatch of %d sent %d commands, want %d", size, got, want)
			}
			if got := n.trips.Load(); got > want {
				t.Errorf("SendBatch of %d took %d round trips, want at most %d", size, got, want)
			}
		})
	}
}
