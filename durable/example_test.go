package durable_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// holder is a pubsub.Mastership and SlaveLister for the example: in an
// application, pass the *masterelection.MasterElection.
type holder struct {
	term   int64
	slaves []string
}

func (h holder) NodeID() string { return "master" }
func (h holder) IsMaster() bool { return true }
func (h holder) Term() int64    { return h.term }
func (h holder) Slaves(context.Context) ([]registry.SlaveNode, error) {
	var out []registry.SlaveNode
	for _, id := range h.slaves {
		out = append(out, registry.SlaveNode{NodeID: id})
	}
	return out, nil
}

// A master stores jobs in two slaves' inboxes; one slave leaves the
// registry for good, so the master's sweep moves its jobs to the other,
// which handles them all, and a send to the slave that left is refused.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	// The election's acquire script makes "master" the master under a term.
	keys := keyspace.NewKeys("master-election", false)
	a, _ := rdb.Acquire(ctx, client, keys, "master", time.Minute, nil, 0)
	// Each process's election registers it; here, by hand.
	mr.HSet(keys.Processes, "worker-1", "{}")
	mr.HSet(keys.Processes, "worker-2", "{}")
	router, _ := durable.NewRouter(client, holder{term: a.Term, slaves: []string{"worker-1"}}, nil, durable.Config{})
	for i, to := range []string{"worker-1", "worker-2", "worker-2"} {
		if _, err := router.Send(ctx, to, "job", i); err != nil {
			panic(err)
		}
	}
	mr.HDel(keys.Processes, "worker-2") // worker-2's entry expires: it is gone
	res, err := router.Sweep(ctx, nil)  // Maintain runs this by itself
	fmt.Println("moved:", res.Moved, err)
	_, err = router.Send(ctx, "worker-2", "job", 3)
	fmt.Println("send to worker-2:", errors.Is(err, durable.ErrNotRegistered))

	done := make(chan struct{})
	c, _ := durable.NewConsumer(client, "worker-1", durable.Config{Block: 50 * time.Millisecond})
	n := 0
	_ = c.Handle("job", func(_ context.Context, d durable.Delivery) error {
		var job int
		_ = d.Decode(&job)
		fmt.Printf("worker-1 handled job %d (delivery %d)\n", job, d.Deliveries)
		if n++; n == 3 {
			close(done)
		}
		return nil
	})
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	<-done
	_ = c.Close()
	// Output:
	// moved: map[worker-2:2] <nil>
	// send to worker-2: true
	// worker-1 handled job 0 (delivery 1)
	// worker-1 handled job 1 (delivery 1)
	// worker-1 handled job 2 (delivery 1)
}
