package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// The tests in this file run against real servers (the redistest matrix);
// they are skipped when none is installed.

func TestIntegrationOrderedDelivery(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		r := newRouter(t, c, newMaster(t, c, "master", pubsub.Config{}), nil, pubsub.Config{})
		s, got, log := startSubscriber(t, c, "slave-1", pubsub.Config{})
		const n = 10000
		for i := range n {
			mustSend(t, r, "slave-1", "seq", i)
		}
		for i := range n {
			var v int
			if err := receive(t, got).Decode(&v); err != nil || v != i {
				t.Fatalf("message %d: got %d (%v)", i, v, err)
			}
		}
		if errs := log.all(); len(errs) != 0 || s.Rejected() != 0 {
			t.Errorf("errors %v, rejected %d", errs, s.Rejected())
		}
	})
}

// TestIntegrationSendBatch: a batch of several calls reaches three slaves,
// each in batch order, on every server; a slave nobody listens for is
// reported per message.
func TestIntegrationSendBatch(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		testSendBatchOrdered(t, c, 5000)

		r := newRouter(t, c, newMaster(t, c, "master-2", pubsub.Config{LockName: "other"}), nil, pubsub.Config{LockName: "other", SlavePrefix: "other:"})
		_, got, _ := startSubscriber(t, c, "s1", pubsub.Config{LockName: "other", SlavePrefix: "other:"})
		res := mustSendBatch(t, r, []pubsub.Outgoing{{SlaveID: "s1", Type: "a"}, {SlaveID: "never-there", Type: "b"}, {SlaveID: "s1", Type: "c"}})
		var nse *pubsub.NoSubscriberError
		if res.Outcomes[0].Err != nil || !errors.As(res.Outcomes[1].Err, &nse) || nse.SlaveID != "never-there" || res.Outcomes[2].Err != nil {
			t.Fatalf("outcomes %+v", res.Outcomes)
		}
		if a, b := receive(t, got), receive(t, got); a.Type != "a" || b.Type != "c" || a.ID != res.Outcomes[0].ID {
			t.Errorf("received %+v then %+v", a, b)
		}
	})
}

// TestIntegrationSendBatchCluster: on a Redis Cluster of three masters the
// batch script runs on the election's slot and its PUBLISH commands reach
// slaves whatever node they are subscribed through; fencing holds there too.
func TestIntegrationSendBatchCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.Default(t), 3).Client(t)
	cfg := pubsub.Config{Cluster: true}
	mastership := newMaster(t, c, "master", cfg)
	r := newRouter(t, c, mastership, nil, cfg)
	slaves := []string{"s1", "s2", "s3", "s4"}
	got := make(map[string]chan pubsub.Message)
	for _, id := range slaves {
		_, got[id], _ = startSubscriber(t, c, id, cfg)
	}
	msgs := batchTo(pubsub.MaxBatchChunk+10, "seq", slaves...)
	res := mustSendBatch(t, r, msgs)
	if res.Calls != 2 || res.Err() != nil {
		t.Fatalf("%d calls, %v", res.Calls, res.Err())
	}
	for i, m := range msgs {
		if rcv := receive(t, got[m.SlaveID]); rcv.ID != res.Outcomes[i].ID {
			t.Fatalf("%s: received %s, want message %d (%s)", m.SlaveID, rcv.ID, i, res.Outcomes[i].ID)
		}
	}
	termB := takeOver(t, c, cfg, "node-b")
	_, err := r.SendBatch(testCtx(t), msgs)
	assertFenced(t, "SendBatch on a cluster", err)
	// The fenced batch published nothing: the next message is the new master's.
	mustSend(t, newRouter(t, c, newMastership("node-b", termB), nil, cfg), "s1", "marker", nil)
	if m := receive(t, got["s1"]); m.Type != "marker" || m.Term != termB {
		t.Errorf("s1 received %+v, want the new master's marker", m)
	}
}

func TestIntegrationNoSubscriber(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		r := newRouter(t, c, newMaster(t, c, "master", pubsub.Config{}), nil, pubsub.Config{})
		var nse *pubsub.NoSubscriberError
		if err := r.Send(testCtx(t), "never-there", "t", nil); !errors.As(err, &nse) || nse.SlaveID != "never-there" {
			t.Fatalf("unknown slave: %v", err)
		}

		s, got, _ := startSubscriber(t, c, "slave-1", pubsub.Config{})
		mustSend(t, r, "slave-1", "t", nil)
		receive(t, got)
		s.Close()
		// The server drops the subscription when it reads the closed
		// connection, which may be a moment after Close returns.
		ctx := testCtx(t)
		for {
			err := r.Send(ctx, "slave-1", "t", nil)
			if errors.As(err, &nse) && nse.SlaveID == "slave-1" {
				break
			}
			if err != nil {
				t.Fatalf("Send to a closed slave: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// TestIntegrationSendFenced: send-side fencing on every server: a master
// that lost its lock in any way publishes nothing.
func TestIntegrationSendFenced(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		testSendFenced(t, redistest.Start(t, srv).Client(t))
	})
}

// TestIntegrationStaleMasterTakeover: both layers of fencing on every
// server, with the lock expired by the server itself.
func TestIntegrationStaleMasterTakeover(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		keys := keyspace.NewKeys(pubsub.DefaultLockName, false)
		testStaleMasterTakeover(t, c, func() {
			// Let the server expire A's lock for real.
			ctx := testCtx(t)
			if err := c.PExpire(ctx, keys.Master, time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			for c.Exists(ctx, keys.Master).Val() != 0 {
				if ctx.Err() != nil {
					t.Fatal("the lock did not expire")
				}
				time.Sleep(time.Millisecond)
			}
		})
	})
}

func TestIntegrationResumeAfterRestart(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		testResumeAfterRestart(t, inst.Client(t), func() { inst.Restart(t) }, true) // Restart empties the server
	})
}

func TestIntegrationBroadcastAndReports(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		mastership := newMaster(t, c, "master", pubsub.Config{})
		ids := []string{"s0", "s1", "s2", "master", "gone"}
		r := newRouter(t, c, mastership, slaveList{ids: ids}, pubsub.Config{})
		rep, err := pubsub.NewReports(c, mastership, pubsub.Config{})
		if err != nil {
			t.Fatal(err)
		}
		reports := make(chan pubsub.Message, 10)
		rep.HandleDefault(pubsub.Chan(reports))
		if err := rep.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		defer rep.Close()

		var subs []*pubsub.Subscriber
		var gots []chan pubsub.Message
		for _, id := range ids[:3] {
			s, got, _ := startSubscriber(t, c, id, pubsub.Config{})
			subs, gots = append(subs, s), append(gots, got)
		}
		n, err := r.Broadcast(testCtx(t), "reload", "config-v2")
		if n != 3 || fmt.Sprint(pubsub.NoSubscribers(err)) != "[gone]" {
			t.Fatalf("Broadcast: %d, %v", n, err)
		}
		for i, s := range subs {
			m := receive(t, gots[i])
			if m.Type != "reload" || m.Term != mastership.Term() {
				t.Errorf("%s got %+v", ids[i], m)
			}
			if err := s.ReportToMaster(testCtx(t), "reloaded", m.ID); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for range subs {
			m := receive(t, reports)
			seen[m.From] = true
		}
		if len(seen) != 3 {
			t.Errorf("reports from %v", seen)
		}
	})
}

// BenchmarkSend measures Send with delivery to one subscribed slave on the
// default server: each iteration is one round trip, an EVALSHA of the route
// script (the lock check and the PUBLISH).
func BenchmarkSend(b *testing.B) {
	c := redistest.Start(b, redistest.Default(b)).Client(b)
	r := newRouter(b, c, newMaster(b, c, "master", pubsub.Config{}), nil, pubsub.Config{})
	s, err := pubsub.NewSubscriber(c, "slave-1", pubsub.Config{})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	var seen int
	s.HandleDefault(func(context.Context, pubsub.Message) error {
		if seen++; seen == b.N {
			close(done)
		}
		return nil
	})
	if err := s.Start(testCtx(b)); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := map[string]any{"camera": "lobby-3", "fps": 15}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := r.Send(ctx, "slave-1", "assign-camera", payload); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

// The real election and registry satisfy the interfaces the package asks for.
var (
	_ pubsub.Mastership  = (*masterelection.MasterElection)(nil)
	_ pubsub.TermSource  = (*masterelection.MasterElection)(nil)
	_ pubsub.SlaveLister = (*registry.Registry)(nil)
)

// TestIntegrationWithElection routes with real elections as Mastership: the
// master's messages carry its term; after it stops, its Router refuses to
// send, and the new master's messages carry a higher term.
func TestIntegrationWithElection(t *testing.T) {
	c := redistest.Start(t, redistest.Default(t)).Client(t)
	newElection := func(id string) *masterelection.MasterElection {
		cfg := masterelection.DefaultConfig()
		cfg.NodeID, cfg.ElectionJitter = id, 0
		cfg.LockTTL, cfg.HeartbeatInterval, cfg.CheckInterval = 3*time.Second, time.Second, 500*time.Millisecond
		e, err := masterelection.New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Stop(context.Background()) })
		if err := e.Start(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a := newElection("node-a")
	if !a.IsMaster() {
		t.Fatal("the first node is not master")
	}
	b := newElection("node-b")
	if b.IsMaster() {
		t.Fatal("two masters")
	}
	_, got, log := startSubscriber(t, c, "node-b", pubsub.Config{Terms: b})

	routerA := newRouter(t, c, a, nil, pubsub.Config{})
	mustSend(t, routerA, "node-b", "t", "from a")
	if m := receive(t, got); m.From != "node-a" || m.Term != a.Term() {
		t.Errorf("received %+v, A's term is %d", m, a.Term())
	}
	termA := a.Term()

	if err := a.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := routerA.Send(testCtx(t), "node-b", "t", "late"); !errors.Is(err, pubsub.ErrNotMaster) {
		t.Errorf("Send after Stop: %v", err)
	}
	ctx := testCtx(t)
	for !b.IsMaster() { // the release notice makes B take over
		if ctx.Err() != nil {
			t.Fatal("B did not take over")
		}
		time.Sleep(5 * time.Millisecond)
	}
	routerB := newRouter(t, c, b, nil, pubsub.Config{})
	// A message to B's own channel: the master may still subscribe there.
	mustSend(t, routerB, "node-b", "t", "from b")
	if m := receive(t, got); m.From != "node-b" || m.Term <= termA {
		t.Errorf("received %+v after A's term %d", m, termA)
	}
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
}
