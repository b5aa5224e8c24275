package pubsub_test

import (
	"fmt"
	"testing"

	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/pubsub"
)

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
	n := &wiretap.Tap{}
	c.AddHook(n)
	for _, size := range []int{1, pubsub.MaxBatchChunk - 1, pubsub.MaxBatchChunk, pubsub.MaxBatchChunk + 1, 2 * pubsub.MaxBatchChunk, 5*pubsub.MaxBatchChunk + 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			n.Reset()
			res := mustSendBatch(t, r, batchTo(size, "t", ids...))
			if res.Delivered() != size {
				t.Fatalf("%d of %d delivered", res.Delivered(), size)
			}
			want := ((size + pubsub.MaxBatchChunk - 1) / pubsub.MaxBatchChunk)
			if got := n.Commands(); got != want {
				t.Errorf("SendBatch of %d sent %d commands, want %d", size, got, want)
			}
			if got := n.Trips(); got > want {
				t.Errorf("SendBatch of %d took %d round trips, want at most %d", size, got, want)
			}
		})
	}
}
