package masterelection_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/masterelection"
)

// Two processes elect a master; when the master stops, the other takes over
// at once because the release is announced.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()

	newNode := func(id string) *masterelection.MasterElection {
		client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		cfg := masterelection.DefaultConfig()
		cfg.LockName = "example"
		cfg.NodeID = id
		m, err := masterelection.New(client, cfg)
		if err != nil {
			panic(err)
		}
		return m
	}
	a, b := newNode("a"), newNode("b")
	promoted := make(chan struct{})
	b.OnMasterAcquired(func(ctx context.Context, term int64) {
		close(promoted)
		<-ctx.Done() // the master's work runs until the mastership ends
	})

	_ = a.Start(ctx)
	_ = b.Start(ctx)
	fmt.Println("a is master:", a.IsMaster(), "- b is master:", b.IsMaster())

	_ = a.Stop(ctx) // releases the lock and announces it
	select {
	case <-promoted:
		fmt.Println("b took over:", b.IsMaster(), "- a is master:", a.IsMaster())
	case <-time.After(5 * time.Second):
		fmt.Println("no take-over")
	}
	_ = b.Stop(ctx)
	// Output:
	// a is master: true - b is master: false
	// b took over: true - a is master: false
}

// Validate names every value that breaks a rule.
func ExampleConfig_Validate() {
	cfg := masterelection.Config{NodeID: "worker 1", HeartbeatInterval: 11 * time.Second}
	err := cfg.Validate()
	fmt.Println(errors.Is(err, masterelection.ErrInvalidConfig))
	fmt.Println(err)
	// Output:
	// true
	// masterelection: invalid config: NodeID "worker 1" contains whitespace or a control character
	// HeartbeatInterval (11s) times 3 must not exceed LockTTL (30s)
}

// RunIfMaster runs a job only on the master, with a ctx that ends with the
// mastership, and the term to fence the job's writes with.
func ExampleMasterElection_RunIfMaster() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	cfg := masterelection.DefaultConfig()
	cfg.NodeID = "cron-1"
	m, err := masterelection.New(client, cfg)
	if err != nil {
		panic(err)
	}
	_ = m.Start(ctx)
	defer m.Stop(ctx)

	ran, err := m.RunIfMaster(ctx, func(ctx context.Context, term int64) error {
		fmt.Println("sending the daily report, fenced by term", term > 0)
		return nil
	})
	fmt.Println("ran:", ran, "error:", err)
	// Output:
	// sending the daily report, fenced by term true
	// ran: true error: <nil>
}

// SetCandidate(false) pauses a process's candidacy; a paused master hands
// over gracefully.
func ExampleMasterElection_SetCandidate() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()
	newNode := func(id string) *masterelection.MasterElection {
		cfg := masterelection.DefaultConfig()
		cfg.NodeID = id
		m, err := masterelection.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}), cfg)
		if err != nil {
			panic(err)
		}
		return m
	}
	a, b := newNode("a"), newNode("b")
	took := make(chan struct{})
	b.OnMasterAcquired(func(context.Context, int64) { close(took) })
	_ = a.Start(ctx)
	_ = b.Start(ctx)
	defer a.Stop(ctx)
	defer b.Stop(ctx)

	a.SetCandidate(false) // maintenance on a: hand over, do not contend
	select {
	case <-took:
		fmt.Println("b is master:", b.IsMaster(), "- a is master:", a.IsMaster())
	case <-time.After(5 * time.Second):
		fmt.Println("no hand-over")
	}
	// Output:
	// b is master: true - a is master: false
}

// A single-instance deployment runs the same code in standalone mode:
// always master, no Redis, no coordination.
func ExampleConfig_standalone() {
	cfg := masterelection.DefaultConfig()
	cfg.NodeID = "only"
	cfg.Standalone = true
	m, err := masterelection.New(nil, cfg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_ = m.Start(ctx)
	fmt.Println("master:", m.IsMaster())
	_ = m.Stop(ctx)
	fmt.Println("master after Stop:", m.IsMaster())
	// Output:
	// master: true
	// master after Stop: false
}
