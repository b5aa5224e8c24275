package masterelection

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
)

// epoch is the start of fake time in the unit tests.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// world is one miniredis and the clocks of the nodes that use it. Redis time
// follows redisClock; each node may have its own clock, so a test can freeze
// one node (a paused process) while time moves for the others.
type world struct {
	t          *testing.T
	mr         *miniredis.Miniredis
	redisClock *clock.Fake
}

func newWorld(t *testing.T) *world {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(epoch)
	mr.ClockTTL(true)
	return &world{t: t, mr: mr, redisClock: clock.NewFake(epoch)}
}

func (w *world) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: w.mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

// testConfig has short, round timings; the fake clock makes them free.
func testConfig(id string) Config {
	cfg := DefaultConfig()
	cfg.LockName = "test"
	cfg.NodeID = id
	cfg.Identifier = "test-" + id
	cfg.LockTTL = 3 * time.Second
	cfg.HeartbeatInterval = time.Second
	cfg.CheckInterval = 500 * time.Millisecond
	cfg.ElectionJitter = 100 * time.Millisecond
	return cfg
}

// peer is an election with its own fake clock and an event recorder.
type peer struct {
	*MasterElection
	clk *clock.Fake
	rec *recorder
}

func (w *world) node(cfg Config) *peer {
	w.t.Helper()
	return w.nodeWith(cfg)
}

// nodeWith is node with faults injected into its client's script calls.
func (w *world) nodeWith(cfg Config, faults ...redis.Hook) *peer {
	w.t.Helper()
	clk := clock.NewFake(w.redisClock.Now())
	c := w.client()
	for _, f := range faults {
		c.AddHook(f)
	}
	m, err := newElection(c, cfg, clk)
	if err != nil {
		w.t.Fatalf("new election: %v", err)
	}
	n := &peer{MasterElection: m, clk: clk, rec: record(m)}
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	for _, f := range faults {
		if f, ok := f.(*scriptFault); ok {
			w.t.Cleanup(f.release) // before Stop: calls held by the fault return
		}
	}
	return n
}

func (w *world) start(n *peer) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		w.t.Fatalf("start %s: %v", n.NodeID(), err)
	}
}

// advance moves Redis time and the clocks of nodes by d, in steps of at most
// step, giving the loops real time to react after each step.
func (w *world) advance(d, step time.Duration, nodes ...*peer) {
	for d > 0 {
		s := min(step, d)
		d -= s
		w.redisClock.Advance(s)
		w.mr.SetTime(w.redisClock.Now())
		for _, n := range nodes {
			n.clk.Advance(s)
		}
		settle(nodes...)
	}
}

// settle waits until every node's loop has gone idle: its clock saw no timer
// change for a few milliseconds of real time.
func settle(nodes ...*peer) {
	for _, n := range nodes {
		for {
			select {
			case <-n.clk.Changed():
				continue
			case <-time.After(3 * time.Millisecond):
			}
			break
		}
	}
}

// until advances time in steps until cond holds, failing after max.
func (w *world) until(cond func() bool, max, step time.Duration, what string, nodes ...*peer) time.Duration {
	w.t.Helper()
	var elapsed time.Duration
	for !cond() {
		if elapsed >= max {
			w.t.Fatalf("%s: not within %v of fake time", what, max)
		}
		w.advance(step, step, nodes...)
		elapsed += step
	}
	return elapsed
}

// recorder keeps every event of one election, in the order its handlers saw them.
type recorder struct {
	mu     sync.Mutex
	events []string
	errs   []error
	terms  []int64
	signal chan struct{}
}

func record(m *MasterElection) *recorder {
	r := &recorder{signal: make(chan struct{}, 1)}
	add := func(s string) {
		r.mu.Lock()
		r.events = append(r.events, s)
		r.mu.Unlock()
		select {
		case r.signal <- struct{}{}:
		default:
		}
	}
	m.OnEvent(func(e Event) {
		switch e.Kind {
		case EventElectionStarted:
			add("started")
		case EventElectionCompleted:
			if e.IsMaster {
				add("completed:master")
			} else {
				add("completed:slave")
			}
		case EventMasterAcquired:
			r.mu.Lock()
			r.terms = append(r.terms, e.Term)
			r.mu.Unlock()
			add("acquired")
		case EventMasterLost:
			add("lost")
		case EventError:
			r.mu.Lock()
			r.errs = append(r.errs, e.Err)
			r.mu.Unlock()
			add("error")
		case EventSlaveRegistered:
			add(string(e.Kind) + ":" + e.Slave.NodeID)
		case EventSlaveRemoved:
			add(string(e.Kind) + ":" + e.NodeID)
		}
	})
	return r
}

// roleEvents returns the election's own events: no errors, no slave events.
func (r *recorder) roleEvents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e != "error" && !strings.HasPrefix(e, "slave-") {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func (r *recorder) lastTerm() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.terms) == 0 {
		return 0
	}
	return r.terms[len(r.terms)-1]
}

// waitEvents waits (real time) until the role events equal want.
func (r *recorder) waitEvents(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		got := r.roleEvents()
		if equal(got, want) {
			return
		}
		if len(got) > len(want) {
			t.Fatalf("events = %v, want %v", got, want)
		}
		select {
		case <-r.signal:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("events = %v, want %v", got, want)
		}
	}
}

// waitPrefix waits (real time) until the role events begin with want; more
// may follow (a node elected again, say).
func (r *recorder) waitPrefix(t *testing.T, want ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("events beginning %v", want), func() bool {
		got := r.roleEvents()
		return len(got) >= len(want) && equal(got[:len(want)], want)
	})
}

// waitFor waits (real time) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// slaveEvents returns the slave-registered and slave-removed events.
func (r *recorder) slaveEvents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if strings.HasPrefix(e, "slave-") {
			out = append(out, e)
		}
	}
	return out
}
