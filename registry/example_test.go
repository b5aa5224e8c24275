package registry_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

func Example() {
	srv := miniredis.NewMiniRedis() // any Redis; miniredis keeps the example self-contained
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx := context.Background()

	keys := keyspace.NewKeys("master-election", false)
	reg, err := registry.New(ctx, client, keys, registry.Config{})
	if err != nil {
		panic(err)
	}
	// An entry with role master is stored only while its process holds the
	// lock under the term it carries (the election takes the lock).
	lock, err := rdb.Acquire(ctx, client, keys, "a1", time.Minute, nil, 0)
	if err != nil {
		panic(err)
	}
	for _, p := range []registry.ProcessInfo{
		{ProcessID: "a1", Role: registry.RoleMaster, Term: lock.Term, Identifier: "cms-backend"},
		{ProcessID: "b2", Role: registry.RoleSlave, Identifier: "cms-backend",
			Capabilities: registry.Capabilities{CanProcessDetections: true, MaxSubscriptions: 10, PreferredWorkload: 50}},
	} {
		if err := reg.Register(ctx, p); err != nil {
			panic(err)
		}
	}
	if err := reg.Heartbeat(ctx, "b2"); err != nil { // renews b2's TTL, every few seconds
		panic(err)
	}

	slaves, err := reg.Slaves(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range slaves {
		channel, _ := reg.ProcessChannel(ctx, s.NodeID)
		fmt.Println("slave", s.NodeID, "on", channel)
	}
	fmt.Println("backend:", reg.Backend())
	// Output:
	// slave b2 on worker:slave:b2
	// backend: native
}

func ExampleSlaveTracker() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	keys := keyspace.NewKeys("master-election", false)
	reg, err := registry.New(ctx, client, keys, registry.Config{})
	if err != nil {
		panic(err)
	}
	if err := reg.Register(ctx, registry.ProcessInfo{ProcessID: "s1", Role: registry.RoleSlave}); err != nil {
		panic(err)
	}

	events := make(chan string)
	tracker, err := registry.NewSlaveTracker(reg, registry.TrackerConfig{
		Self:    "m0", // the master's own process id
		OnJoin:  func(s registry.SlaveNode) { events <- "joined " + s.NodeID },
		OnLeave: func(id string, why registry.LeaveReason) { events <- "left " + id + " (" + string(why) + ")" },
	})
	if err != nil {
		panic(err)
	}
	// The master's subscription to keys.RegistryEvents forwards every message.
	sub := client.Subscribe(ctx, keys.RegistryEvents)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.Channel() {
			tracker.Notice([]byte(m.Payload))
		}
	}()
	stopped := make(chan error)
	go func() { stopped <- tracker.Run(ctx) }() // while this process is master

	fmt.Println(<-events) // the slaves already registered, first
	if err := reg.Register(ctx, registry.ProcessInfo{ProcessID: "s2", Role: registry.RoleSlave}); err != nil {
		panic(err)
	}
	fmt.Println(<-events)
	if err := reg.Unregister(ctx, "s1"); err != nil {
		panic(err)
	}
	fmt.Println(<-events)

	cancel() // mastership lost
	<-stopped
	sub.Close()
	<-done
	// Output:
	// joined s1
	// joined s2
	// left s1 (unregistered)
}
