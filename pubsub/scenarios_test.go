package pubsub_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// The scenarios below run on miniredis and on every real server.

// testStaleMasterTakeover: A acquires and sends; its lock expires (expire
// makes it so) and B acquires; A, unaware, goes on sending. Both layers of
// fencing are exercised:
//   - send side: every Send of A after the takeover fails with an error
//     matching ErrNotMaster and keyspace.ErrFenced, and Redis publishes none
//     of them (a plain subscriber on slave-0's channel sees what Redis
//     published);
//   - receive side: messages of A that bypass the route script (published
//     straight to the channels, as one already on its way or a sender not
//     written with herd would be) reach the slaves, which reject every one.
//
// Every slave delivers A's messages from before the takeover, then B's, in
// order, and nothing else.
func testStaleMasterTakeover(t *testing.T, c redis.UniversalClient, expire func()) {
	keys := keyspace.NewKeys(pubsub.DefaultLockName, false)
	ctx := testCtx(t)
	a, err := rdb.Acquire(ctx, c, keys, "node-a", 30*time.Second, nil, 0)
	if err != nil || a.Term == 0 {
		t.Fatalf("A acquires: %+v, %v", a, err)
	}
	masterA := newMastership("node-a", a.Term) // never learns it lost the lock
	routerA := newRouter(t, c, masterA, nil, pubsub.Config{})

	const slaves, before, after = 3, 20, 30
	type slave struct {
		s    *pubsub.Subscriber
		got  chan pubsub.Message
		errs *errLog
	}
	var ss []slave
	for i := range slaves {
		s, got, log := startSubscriber(t, c, fmt.Sprintf("slave-%d", i), pubsub.Config{})
		ss = append(ss, slave{s, got, log})
	}
	observer := rawSubscribe(t, c, pubsub.SlaveChannel("slave-0"))
	send := func(r *pubsub.Router, prefix string, n int) {
		for i := range n {
			for j := range slaves {
				mustSend(t, r, fmt.Sprintf("slave-%d", j), "work", fmt.Sprintf("%s-%d", prefix, i))
			}
		}
	}
	send(routerA, "a-before", before)

	expire()
	b, err := rdb.Acquire(ctx, c, keys, "node-b", 30*time.Second, nil, 0)
	if err != nil || b.Term <= a.Term {
		t.Fatalf("B acquires after A's term %d: %+v, %v", a.Term, b, err)
	}
	if !masterA.IsMaster() || masterA.Term() != a.Term {
		t.Fatal("stale mastership changed")
	}
	// Send side: the route script refuses A, whatever A believes.
	for i := range after {
		for j := range slaves {
			err := routerA.Send(ctx, fmt.Sprintf("slave-%d", j), "work", fmt.Sprintf("a-fenced-%d", i))
			assertFenced(t, fmt.Sprintf("A's Send %d to slave-%d", i, j), err)
		}
	}
	// Receive side: what gets past the route script is rejected by term.
	for i := range after {
		for j := range slaves {
			payload, _ := json.Marshal(fmt.Sprintf("a-inflight-%d", i))
			bypass(t, c, pubsub.SlaveChannel(fmt.Sprintf("slave-%d", j)),
				pubsub.Message{From: "node-a", Term: a.Term, Type: "work", Payload: payload, SentAt: time.Now()})
		}
	}
	routerB := newRouter(t, c, newMastership("node-b", b.Term), nil, pubsub.Config{})
	send(routerB, "b", 5)

	// What Redis published on slave-0's channel: nothing of the fenced Sends.
	var published []string
	for i := range before {
		published = append(published, fmt.Sprintf("a-before-%d@%d", i, a.Term))
	}
	for i := range after {
		published = append(published, fmt.Sprintf("a-inflight-%d@%d", i, a.Term))
	}
	for i := range 5 {
		published = append(published, fmt.Sprintf("b-%d@%d", i, b.Term))
	}
	for i, w := range published {
		m, err := pubsub.ParseMessage([]byte(rawReceive(t, observer).Payload))
		var p string
		if err == nil {
			err = m.Decode(&p)
		}
		if got := fmt.Sprintf("%s@%d", p, m.Term); err != nil || got != w {
			t.Fatalf("message %d published on slave-0's channel: %s (%v), want %s", i, got, err, w)
		}
	}

	for j, sl := range ss {
		var want []string
		for i := range before {
			want = append(want, fmt.Sprintf("a-before-%d", i))
		}
		for i := range 5 {
			want = append(want, fmt.Sprintf("b-%d", i))
		}
		for i, w := range want {
			m := receive(t, sl.got)
			var p string
			if err := m.Decode(&p); err != nil || p != w {
				t.Fatalf("slave %d message %d: %q (%v), want %q", j, i, p, err, w)
			}
		}
		if sl.s.Rejected() != after {
			t.Errorf("slave %d rejected %d, want %d", j, sl.s.Rejected(), after)
		}
		if sl.s.HighestTerm() != b.Term {
			t.Errorf("slave %d HighestTerm %d, want %d", j, sl.s.HighestTerm(), b.Term)
		}
		n := 0
		for _, err := range sl.errs.all() {
			var se *pubsub.StaleTermError
			if !errors.As(err, &se) {
				t.Errorf("slave %d unexpected error: %v", j, err)
				continue
			}
			if se.Term != a.Term || se.Highest != b.Term || se.From != "node-a" || se.Type != "work" {
				t.Errorf("slave %d: %v", j, se)
			}
			n++
		}
		if n != after {
			t.Errorf("slave %d reported %d stale messages, want %d", j, n, after)
		}
	}
}

// testResumeAfterRestart: a subscriber receives, the server restarts
// (restart), and delivery resumes on the same Subscriber.
//
// dataLost says whether the restart empties the server. Then the lock is
// gone with the data, so the Router is fenced until its process takes the
// lock again, as the election does, under a new, higher term.
func testResumeAfterRestart(t *testing.T, c redis.UniversalClient, restart func(), dataLost bool) {
	mastership := newMaster(t, c, "m", pubsub.Config{})
	oldTerm := mastership.Term()
	r := newRouter(t, c, mastership, nil, pubsub.Config{})
	s, got, log := startSubscriber(t, c, "s1", pubsub.Config{MaxRetryDelay: 50 * time.Millisecond})
	mustSend(t, r, "s1", "t", "before")
	if m := receive(t, got); string(m.Payload) != `"before"` {
		t.Fatalf("received %s", m.Payload)
	}

	restart()

	// The Subscriber sees the connection go first: a PUBLISH can still
	// reach the old connection until the server has torn it down, so a
	// probe that arrives before then proves nothing. Until go-redis has
	// redialled and resubscribed, the channel has no subscriber (or the
	// router's own pooled connection is broken): retry.
	ctx := testCtx(t)
	for log.count(pubsub.ErrConnection) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the lost connection was not reported")
		}
		time.Sleep(time.Millisecond)
	}
	fenced := false
	for {
		err := r.Send(ctx, "s1", "t", "probe")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("delivery did not resume: %v", err)
		}
		if errors.Is(err, keyspace.ErrFenced) {
			fenced = true
			a, err := rdb.Acquire(ctx, c, lockKeys(pubsub.Config{}), "m", testLockTTL, nil, 0)
			if err == nil && a.Term > 0 {
				mastership.set(a.Term)
			}
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fenced != dataLost {
		t.Errorf("Send fenced after the restart: %v; the restart lost the data: %v", fenced, dataLost)
	}
	if dataLost && mastership.Term() <= oldTerm {
		t.Errorf("term after the restart %d, before %d", mastership.Term(), oldTerm)
	}
	const n = 100
	for i := range n {
		mustSend(t, r, "s1", "t", i)
	}
	m := receive(t, got)
	if string(m.Payload) != `"probe"` {
		t.Fatalf("first message after the restart: %s", m.Payload)
	}
	for string(m.Payload) == `"probe"` { // one probe, or more if some reached the old connection
		m = receive(t, got)
	}
	for i := range n {
		if i > 0 {
			m = receive(t, got)
		}
		var v int
		if err := m.Decode(&v); err != nil || v != i {
			t.Fatalf("message %d after the restart: %d, %v", i, v, err)
		}
	}
	if s.Rejected() != 0 {
		t.Errorf("rejected %d", s.Rejected())
	}
}
