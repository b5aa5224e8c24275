package pubsub_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// TestSendFenced: send-side fencing on miniredis (the same scenario runs on
// every real server in TestIntegrationSendFenced).
func TestSendFenced(t *testing.T) {
	_, c := newMini(t)
	testSendFenced(t, c)
}

// testSendFenced: master A holds the lock and sends; then it loses the lock
// in each way it can without being told. Its Router, still believing, must
// get an error matching both ErrNotMaster and keyspace.ErrFenced from Send,
// Broadcast and SendBatch, and Redis must publish nothing: the next message on
// each slave channel is a marker published afterwards. Whoever holds the
// lock now sends as usual.
func testSendFenced(t *testing.T, c redis.UniversalClient) {
	cases := []struct {
		name string
		// lose takes the lock away from node-a and returns the node that
		// holds it now with its term ("", 0: nobody).
		lose func(t *testing.T, cfg pubsub.Config) (string, int64)
	}{
		{"lock expired", func(t *testing.T, cfg pubsub.Config) (string, int64) {
			if err := c.Del(testCtx(t), lockKeys(cfg).Master).Err(); err != nil {
				t.Fatal(err)
			}
			return "", 0
		}},
		{"lock taken by another node", func(t *testing.T, cfg pubsub.Config) (string, int64) {
			return "node-b", takeOver(t, c, cfg, "node-b")
		}},
		{"same node elected again under a new term", func(t *testing.T, cfg pubsub.Config) (string, int64) {
			return "node-a", takeOver(t, c, cfg, "node-a")
		}},
		{"Redis lost the data", func(t *testing.T, cfg pubsub.Config) (string, int64) {
			k := lockKeys(cfg)
			if err := c.Del(testCtx(t), k.Master, k.Heartbeat, k.MasterProcess, k.Term).Err(); err != nil {
				t.Fatal(err)
			}
			return "", 0
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has an election and slaves of its own.
			cfg := pubsub.Config{LockName: fmt.Sprintf("fence-%d", i)}
			s1, s2 := fmt.Sprintf("c%d-s1", i), fmt.Sprintf("c%d-s2", i)
			ps1 := rawSubscribe(t, c, cfg.SlaveChannel(s1))
			ps2 := rawSubscribe(t, c, cfg.SlaveChannel(s2))
			a := newMaster(t, c, "node-a", cfg)
			termA := a.Term()
			r := newRouter(t, c, a, slaveList{ids: []string{s1, s2}}, cfg)
			mustSend(t, r, s1, "t", "before")
			if m := rawReceive(t, ps1); !strings.Contains(m.Payload, `"before"`) {
				t.Fatalf("before losing the lock: received %s", m.Payload)
			}

			holder, term := tc.lose(t, cfg)
			if !a.IsMaster() || a.Term() != termA {
				t.Fatal("the fake mastership learned of the loss; the test needs it unaware")
			}
			err := r.Send(testCtx(t), s1, "t", "after")
			assertFenced(t, "Send", err)
			if err != nil && (!strings.Contains(err.Error(), `"node-a"`) || !strings.Contains(err.Error(), fmt.Sprint(termA))) {
				t.Errorf("Send error %q does not name the node and its term %d", err, termA)
			}
			n, err := r.Broadcast(testCtx(t), "t", "after")
			assertFenced(t, "Broadcast", err)
			if n != 0 || len(pubsub.NoSubscribers(err)) != 0 {
				t.Errorf("Broadcast delivered %d, no subscriber for %v; want 0 and none", n, pubsub.NoSubscribers(err))
			}
			batch := []pubsub.Outgoing{{SlaveID: s1, Type: "t", Payload: "after"}, {SlaveID: s2, Type: "t", Payload: "after"}}
			res, err := r.SendBatch(testCtx(t), batch)
			assertFenced(t, "SendBatch", err)
			if res.Calls != 1 || res.Delivered() != 0 {
				t.Errorf("SendBatch made %d calls and delivered %d; want 1 and 0", res.Calls, res.Delivered())
			}
			for i, o := range res.Outcomes {
				if !errors.Is(o.Err, pubsub.ErrNotSent) || !errors.Is(o.Err, keyspace.ErrFenced) {
					t.Errorf("SendBatch message %d: %v; want ErrNotSent and keyspace.ErrFenced", i, o.Err)
				}
			}

			// Nothing reached either channel: the next message is the marker.
			for id, ps := range map[string]*redis.PubSub{s1: ps1, s2: ps2} {
				if err := c.Publish(testCtx(t), cfg.SlaveChannel(id), "marker").Err(); err != nil {
					t.Fatal(err)
				}
				if m := rawReceive(t, ps); m.Payload != "marker" {
					t.Errorf("%s received %s from a fenced master", id, m.Payload)
				}
			}

			if holder == "" {
				return
			}
			// The holder, with the term it was given, is not fenced.
			next := newRouter(t, c, newMastership(holder, term), nil, cfg)
			mustSend(t, next, s1, "t", "new master")
			m, err := pubsub.ParseMessage([]byte(rawReceive(t, ps1).Payload))
			if err != nil || m.From != holder || m.Term != term || m.Term <= termA {
				t.Errorf("from the new holder: %+v, %v; want from %s with term %d > %d", m, err, holder, term, termA)
			}
		})
	}
}

// TestRouterRoundTrips: with the route script cached on the server, Send
// is one command and so is Broadcast, whatever the number of slaves, and so
// is a SendBatch of up to MaxBatchChunk messages.
func TestRouterRoundTrips(t *testing.T) {
	_, c := newMini(t)
	ids := []string{"s1", "s2", "s3"}
	for _, id := range ids {
		rawSubscribe(t, c, pubsub.SlaveChannel(id))
	}
	r := newRouter(t, c, newMaster(t, c, "m", pubsub.Config{}), slaveList{ids: ids}, pubsub.Config{})
	n := &wiretap.Tap{}
	c.AddHook(n)
	for _, warm := range []bool{true, false} {
		n.Reset()
		mustSend(t, r, "s1", "t", nil)
		if got := n.Commands(); !warm && got != 1 {
			t.Errorf("Send took %d commands, want 1", got)
		}
		n.Reset()
		if d, err := r.Broadcast(testCtx(t), "t", nil); d != len(ids) || err != nil {
			t.Fatalf("Broadcast: %d, %v", d, err)
		}
		if got := n.Commands(); !warm && got != 1 {
			t.Errorf("Broadcast to %d slaves took %d commands, want 1", len(ids), got)
		}
		n.Reset()
		if res, err := r.SendBatch(testCtx(t), batchTo(pubsub.MaxBatchChunk, "t", ids...)); res.Delivered() != pubsub.MaxBatchChunk || err != nil {
			t.Fatalf("SendBatch: %d delivered, %v", res.Delivered(), err)
		}
		if got := n.Commands(); !warm && got != 1 {
			t.Errorf("SendBatch of %d took %d commands, want 1", pubsub.MaxBatchChunk, got)
		}
	}
}
