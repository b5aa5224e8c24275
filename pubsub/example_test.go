package pubsub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// staticMastership stands in for *masterelection.MasterElection in the examples.
// One that sends must hold the lock in Redis under its term (exampleMaster),
// or the route script refuses its messages.
type staticMastership struct {
	id   string
	term int64
}

func (l staticMastership) NodeID() string { return l.id }
func (l staticMastership) IsMaster() bool { return l.term > 0 }
func (l staticMastership) Term() int64    { return l.term }

// exampleRedis starts an in-process Redis for the examples. Its clock is
// fixed, so the terms acquire.lua mints from it are too.
func exampleRedis() (*miniredis.Miniredis, *redis.Client) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(time.Date(2025, 11, 22, 0, 6, 40, 123e6, time.UTC))
	opts := clientOptions(mr.Addr())
	return mr, redis.NewClient(opts)
}

// exampleMaster makes id master as the election does, with acquire.lua,
// and returns a stand-in for the election with the term it minted.
func exampleMaster(ctx context.Context, client *redis.Client, id string) staticMastership {
	a, err := rdb.Acquire(ctx, client, keyspace.NewKeys(pubsub.DefaultLockName, false), id, time.Minute, nil, 0)
	if err != nil || a.Term == 0 {
		panic(fmt.Sprintf("%s acquires: %+v, %v", id, a, err))
	}
	return staticMastership{id, a.Term}
}

func ExampleSlaveChannel() {
	fmt.Println(pubsub.SlaveChannel("backend-7f3a"))
	fmt.Println(pubsub.Config{}.MasterInbox())
	// Output:
	// worker:slave:backend-7f3a
	// master-election:master-inbox
}

// The master routes a command to one slave; the slave handles it by type.
func ExampleRouter_Send() {
	mr, client := exampleRedis()
	defer mr.Close()
	defer client.Close()
	ctx := context.Background()

	// Slave side.
	slave, err := pubsub.NewSubscriber(client, "slave-1", pubsub.Config{})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	_ = slave.Handle("assign-camera", func(ctx context.Context, m pubsub.Message) error {
		var cam struct{ Camera string }
		if err := m.Decode(&cam); err != nil {
			return err
		}
		fmt.Printf("%s from %s (term %d): camera %s\n", m.Type, m.From, m.Term, cam.Camera)
		close(done)
		return nil
	})
	if err := slave.Start(ctx); err != nil {
		panic(err)
	}
	defer slave.Close()

	// Master side (the lock is taken at 2025-11-22T00:06:40.123Z: that is the term).
	router, err := pubsub.NewRouter(client, exampleMaster(ctx, client, "master-1"), nil, pubsub.Config{})
	if err != nil {
		panic(err)
	}
	if err := router.Send(ctx, "slave-1", "assign-camera", map[string]string{"camera": "lobby"}); err != nil {
		panic(err)
	}
	<-done
	// Output:
	// assign-camera from master-1 (term 1763770000123): camera lobby
}

// The master hands out many assignments at once: one round trip and one
// fencing check per MaxBatchChunk messages, an outcome per message.
func ExampleRouter_SendBatch() {
	mr, client := exampleRedis()
	defer mr.Close()
	defer client.Close()
	ctx := context.Background()

	slave, err := pubsub.NewSubscriber(client, "slave-1", pubsub.Config{})
	if err != nil {
		panic(err)
	}
	got := make(chan pubsub.Message, 10)
	slave.HandleDefault(pubsub.Chan(got))
	if err := slave.Start(ctx); err != nil {
		panic(err)
	}
	defer slave.Close()

	router, err := pubsub.NewRouter(client, exampleMaster(ctx, client, "master-1"), nil, pubsub.Config{})
	if err != nil {
		panic(err)
	}
	res, err := router.SendBatch(ctx, []pubsub.Outgoing{
		{SlaveID: "slave-1", Type: "assign-camera", Payload: "lobby"},
		{SlaveID: "slave-gone", Type: "assign-camera", Payload: "garage"},
		{SlaveID: "slave-1", Type: "assign-camera", Payload: "roof"},
	})
	if err != nil {
		panic(err) // not master, fenced, or Redis failed: see the outcomes
	}
	fmt.Printf("%d delivered in %d call, term %d\n", res.Delivered(), res.Calls, res.Term)
	fmt.Println("reassign the work of", pubsub.NoSubscribers(res.Err()))
	for range res.Delivered() {
		var cam string
		m := <-got
		_ = m.Decode(&cam)
		fmt.Println(m.Type, cam)
	}
	// Output:
	// 2 delivered in 1 call, term 1763770000123
	// reassign the work of [slave-gone]
	// assign-camera lobby
	// assign-camera roof
}

// When no process listens on the slave's channel, Send says so and the
// master can hand the work to another slave.
func ExampleNoSubscriberError() {
	mr, client := exampleRedis()
	defer mr.Close()
	defer client.Close()

	ctx := context.Background()

	router, _ := pubsub.NewRouter(client, exampleMaster(ctx, client, "master-1"), nil, pubsub.Config{})
	err := router.Send(ctx, "slave-gone", "assign-camera", nil)
	var nse *pubsub.NoSubscriberError
	if errors.As(err, &nse) {
		fmt.Println("reassign the work of", nse.SlaveID)
	}
	// Output:
	// reassign the work of slave-gone
}

// A master that lost its lock without knowing it cannot send: the route
// script checks the lock and the term atomically with the PUBLISH.
func ExampleRouter_Send_fenced() {
	mr, client := exampleRedis()
	defer mr.Close()
	defer client.Close()
	ctx := context.Background()

	old := exampleMaster(ctx, client, "master-1")
	router, _ := pubsub.NewRouter(client, old, nil, pubsub.Config{})

	// master-1's lock expires during a long pause; master-2 is elected.
	mr.FastForward(2 * time.Minute)
	exampleMaster(ctx, client, "master-2")

	err := router.Send(ctx, "slave-1", "stop-camera", nil) // old still says it is master
	fmt.Println("not master:", errors.Is(err, pubsub.ErrNotMaster))
	fmt.Println("fenced by the route script:", errors.Is(err, keyspace.ErrFenced))
	// Output:
	// not master: true
	// fenced by the route script: true
}

// A slave rejects messages from a master whose term has been superseded:
// the fence for what gets past the route script (a message already on its
// way, a sender that does not use it).
func ExampleSubscriber_ObserveTerm() {
	mr, client := exampleRedis()
	defer mr.Close()
	defer client.Close()
	ctx := context.Background()

	rejected := make(chan struct{})
	slave, _ := pubsub.NewSubscriber(client, "slave-1", pubsub.Config{
		OnError: func(err error) {
			var se *pubsub.StaleTermError
			if errors.As(err, &se) {
				fmt.Printf("refused %s from %s: term %d < %d\n", se.Type, se.From, se.Term, se.Highest)
				close(rejected)
			}
		},
	})
	_ = slave.Start(ctx)
	defer slave.Close()

	// The election's check says term 8 exists; the old master still has 7,
	// and publishes without the route script.
	slave.ObserveTerm(8)
	stale, _ := json.Marshal(pubsub.Message{ID: "m-1", From: "old-master", Term: 7, Type: "stop-camera"})
	_ = client.Publish(ctx, pubsub.SlaveChannel("slave-1"), stale) // Redis delivers it...
	<-rejected                                                     // ...and the slave refuses it.
	fmt.Println("rejected:", slave.Rejected())
	// Output:
	// refused stop-camera from old-master: term 7 < 8
	// rejected: 1
}

// A slave reports to the master's Reports; the handler learns the sender.
func ExampleSubscriber_ReportToMaster() {
	mr, client := exampleRedis()
	defer mr.Close()
	defer client.Close()
	ctx := context.Background()

	reports, _ := pubsub.NewReports(client, staticMastership{"master-1", 3}, pubsub.Config{})
	got := make(chan pubsub.Message, 1)
	_ = reports.Handle("load", pubsub.Chan(got))
	_ = reports.Start(ctx)
	defer reports.Close()

	slave, _ := pubsub.NewSubscriber(client, "slave-1", pubsub.Config{})
	if err := slave.ReportToMaster(ctx, "load", map[string]int{"percent": 40}); err != nil {
		panic(err)
	}
	m := <-got
	fmt.Println(m.From, m.Type, string(m.Payload))
	// Output:
	// slave-1 load {"percent":40}
}
