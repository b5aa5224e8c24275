package pubsub_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/scripts"
)

// The scenarios below run on miniredis and on every real server.

// testStaleMasterTakeover: A acquires and sends; its lock expires (expire
// makes it so) and B acquires; A, unaware, goes on sending. Every slave must
// deliver A's messages from before the takeover and B's, and reject every
// message A sent after it.
func testStaleMasterTakeover(t *testing.T, c redis.UniversalClient, expire func()) {
	keys := scripts.NewKeys(pubsub.DefaultLockName, false)
	ctx := testCtx(t)
	a, err := scripts.Acquire(ctx, c, keys, "node-a", 30*time.Second, nil)
	if err != nil || a.Term == 0 {
		t.Fatalf("A acquires: %+v, %v", a, err)
	}
	leaderA := newLeader("node-a", a.Term) // never learns it lost the lock
	routerA := newRouter(t, c, leaderA, nil, pubsub.Config{})

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
	send := func(r *pubsub.Router, prefix string, n int) {
		for i := range n {
			for j := range slaves {
				mustSend(t, r, fmt.Sprintf("slave-%d", j), "work", fmt.Sprintf("%s-%d", prefix, i))
			}
		}
	}
	send(routerA, "a-before", before)

	expire()
	b, err := scripts.Acquire(ctx, c, keys, "node-b", 30*time.Second, nil)
	if err != nil || b.Term <= a.Term {
		t.Fatalf("B acquires after A's term %d: %+v, %v", a.Term, b, err)
	}
	if !leaderA.IsMaster() || leaderA.Term() != a.Term {
		t.Fatal("stale leader changed")
	}
	send(routerA, "a-after", after) // PUBLISH succeeds: Redis does not know terms
	routerB := newRouter(t, c, newLeader("node-b", b.Term), nil, pubsub.Config{})
	send(routerB, "b", 5)

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
			if se.Term != a.Term || se.Highest != b.Term || se.From != "node-a" {
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
func testResumeAfterRestart(t *testing.T, c redis.UniversalClient, restart func()) {
	r := newRouter(t, c, newLeader("m", 7), nil, pubsub.Config{})
	s, got, log := startSubscriber(t, c, "s1", pubsub.Config{MaxRetryDelay: 50 * time.Millisecond})
	mustSend(t, r, "s1", "t", "before")
	if m := receive(t, got); string(m.Payload) != `"before"` {
		t.Fatalf("received %s", m.Payload)
	}

	restart()

	// Until go-redis has redialled and resubscribed, the channel has no
	// subscriber (or the router's own pooled connection is broken): retry.
	ctx := testCtx(t)
	for {
		err := r.Send(ctx, "s1", "t", "probe")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("delivery did not resume: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	const n = 100
	for i := range n {
		mustSend(t, r, "s1", "t", i)
	}
	if m := receive(t, got); string(m.Payload) != `"probe"` {
		t.Fatalf("first message after the restart: %s", m.Payload)
	}
	for i := range n {
		var v int
		if err := receive(t, got).Decode(&v); err != nil || v != i {
			t.Fatalf("message %d after the restart: %d, %v", i, v, err)
		}
	}
	if log.count(pubsub.ErrConnection) == 0 {
		t.Error("the lost connection was not reported")
	}
	if s.Rejected() != 0 {
		t.Errorf("rejected %d", s.Rejected())
	}
}
