package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/testsync"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
)

// TestEvictionPolicyIsReported starts an election against each eviction
// setting a server can have, and checks what Start says about it: an
// error event wrapping ErrEvictionPolicy only for a policy that can evict
// under a limit, and one log line otherwise. Start succeeds in every case.
func TestEvictionPolicyIsReported(t *testing.T) {
	limited := func(policy string) []string {
		return []string{"--maxmemory", "4mb", "--maxmemory-policy", policy}
	}
	tests := []struct {
		name     string
		args     []string
		noInfo   bool     // run as an ACL user denied INFO and CONFIG
		event    []string // the error event says all of these; nil: no such event
		logMsg   string
		logLevel string
	}{
		{
			name:     "volatile-lru with a limit",
			args:     limited("volatile-lru"),
			event:    []string{"maxmemory-policy volatile-lru with maxmemory 4194304 bytes", "evict-report:master", "Terms still grow"},
			logMsg:   "redis may evict the election's keys",
			logLevel: "warn",
		},
		{
			name:     "allkeys-lru with a limit",
			args:     limited("allkeys-lru"),
			event:    []string{"maxmemory-policy allkeys-lru with maxmemory 4194304 bytes", "term key evict-report:term"},
			logMsg:   "redis may evict the election's keys",
			logLevel: "warn",
		},
		{
			name:     "noeviction with a limit",
			args:     limited("noeviction"),
			logMsg:   "maxmemory-policy noeviction",
			logLevel: "debug",
		},
		{
			name:     "allkeys-lru without a limit",
			args:     []string{"--maxmemory-policy", "allkeys-lru"},
			logMsg:   "safe while maxmemory stays 0",
			logLevel: "info",
		},
		{
			name:     "ACL user without INFO and CONFIG",
			args:     limited("volatile-lru"),
			noInfo:   true,
			logMsg:   "maxmemory-policy not checked",
			logLevel: "info",
		},
	}
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				inst := redistest.Start(t, s, tt.args...)
				c := inst.Client(t)
				if tt.noInfo {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					err := c.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info", "-config").Err()
					if err != nil {
						t.Fatal(err)
					}
					opts := inst.Options()
					opts.Username, opts.Password = "noinfo", "pw"
					c = redis.NewClient(opts)
					t.Cleanup(func() { _ = c.Close() })
				}
				logs := &testsync.Buffer{}
				cfg := fastConfig("evict-report", "a")
				cfg.Logger = zerolog.New(logs)
				m := newElection(t, c, cfg)
				events := recordEvents(m)
				start(t, m)
				// The check's event comes before the election's, and each
				// handler sees events in emission order.
				events.wait(t, "election completed", 5*time.Second, func(e masterelection.Event) bool {
					return e.Kind == masterelection.EventElectionCompleted
				})
				found := events.errors(masterelection.ErrEvictionPolicy)
				switch {
				case tt.event == nil && len(found) > 0:
					t.Fatalf("error events %v, want none wrapping ErrEvictionPolicy", found)
				case tt.event != nil && len(found) != 1:
					t.Fatalf("error events wrapping ErrEvictionPolicy: %v, want one", found)
				case tt.event != nil:
					for _, want := range tt.event {
						if !strings.Contains(found[0].Error(), want) {
							t.Errorf("error event %q does not say %q", found[0], want)
						}
					}
				}
				lines := logs.LogLines(t, tt.logMsg)
				if len(lines) != 1 {
					t.Fatalf("%d log lines saying %q, want 1; log:\n%s", len(lines), tt.logMsg, logs.String())
				}
				if lines[0]["level"] != tt.logLevel {
					t.Errorf("log level %v, want %s: %v", lines[0]["level"], tt.logLevel, lines[0])
				}
				if tt.noInfo {
					if e, _ := lines[0]["error"].(string); !strings.Contains(e, "NOPERM") {
						t.Errorf("the log line does not name the refusal: %v", lines[0])
					}
				}
				t.Logf("%s: %v", lines[0]["level"], lines[0]["message"])
			})
		}
	})
}

// TestEvictionOfTheLockLetsTwoMastersAct shows what docs/safety.md claims
// for volatile-* policies: Redis evicts the lock of a healthy master, a
// slave takes it, and the old master, which learns of it neither by notice
// nor by renewal (its link is cut the moment Redis reports the eviction),
// acts on until its self-fencing deadline: two masters at once. Without the
// eviction the same cut only ends in a failover without overlap
// (TestCrashedMasterIsReplacedAndFencesItself). The term key and the
// registry, which have no key TTL, are not evicted, and terms still grow.
func TestEvictionOfTheLockLetsTwoMastersAct(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		t.Parallel() // each server on its own: the wait for a's deadline overlaps
		inst := redistest.Start(t, s, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru",
			"--notify-keyspace-events", "Ke")
		admin := inst.Client(t)
		px := newProxy(t, inst.Addr)
		opts := inst.Options()
		opts.Addr, opts.MaxRetries = px.Addr(), -1
		viaProxy := redis.NewClient(opts)
		t.Cleanup(func() { _ = viaProxy.Close() })

		cfgA, cfgB := fastConfig("evict-lock", "a"), fastConfig("evict-lock", "b")
		cfgA.LockTTL, cfgB.LockTTL = 2*time.Second, 2*time.Second
		a, b := newElection(t, viaProxy, cfgA), newElection(t, inst.Client(t), cfgB)
		eventsA, eventsB := recordEvents(a), recordEvents(b)
		start(t, a)
		start(t, b)
		if !a.IsMaster() || b.IsMaster() {
			t.Fatalf("a master %v, b master %v: want a alone", a.IsMaster(), b.IsMaster())
		}
		for _, el := range []*eventLog{eventsA, eventsB} {
			el.wait(t, "ErrEvictionPolicy", 5*time.Second, isError(masterelection.ErrEvictionPolicy))
		}
		first := a.Term()
		k := a.Keys()

		cut := make(chan struct{})
		var cutOnce sync.Once
		ev := watchEvictions(t, admin, func(key string) {
			if key == k.Master {
				cutOnce.Do(func() {
					px.Blackhole(requests | replies)
					close(cut)
				})
			}
		}, k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Processes, k.ProcessesExpiry)
		n := fill(t, admin, time.Hour, cut, 15*time.Second)
		t.Logf("lock evicted after %d filler keys of 8 KiB", n)
		defer px.Heal()

		// A renewal that ran after the eviction and whose reply passed before
		// the cut has told a; give its loop time to act on such a reply.
		time.Sleep(50 * time.Millisecond)
		aUnaware := a.IsMaster()

		// b takes the free lock at its next check; a's deadline is up to
		// LockTTL - StepDownMargin after its last renewal, sent before the
		// eviction.
		var both, overlapStart, overlapEnd time.Time
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			a1, bm, a2 := a.IsMaster(), b.IsMaster(), a.IsMaster()
			if a1 && bm && a2 {
				if both.IsZero() {
					both, overlapStart = time.Now(), time.Now()
				}
				overlapEnd = time.Now()
			}
			if bm && !a2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if !b.IsMaster() || a.IsMaster() {
			t.Fatalf("after the eviction: a master %v, b master %v; want b alone once a's deadline passed", a.IsMaster(), b.IsMaster())
		}
		switch {
		case aUnaware && both.IsZero():
			t.Errorf("a still believed it was master after the cut, yet b and a were never seen master together")
		case aUnaware:
			t.Logf("two masters at once for %v: b took the evicted lock while a (cut off) was inside its self-fencing window",
				overlapEnd.Sub(overlapStart).Round(time.Millisecond))
		default:
			t.Logf("a learnt of the loss before the cut (a renewal raced it): no overlap to show in this run")
		}
		if b.Term() <= first {
			t.Errorf("b's term %d is not above a's %d", b.Term(), first)
		}
		got, err := admin.Get(context.Background(), k.Term).Int64()
		if err != nil || got != b.Term() {
			t.Errorf("term key = %d (%v), want b's term %d", got, err, b.Term())
		}
		keys := ev.keys()
		for _, key := range []string{k.Term, k.Processes, k.ProcessesExpiry} {
			if slices.Contains(keys, key) {
				t.Errorf("%s was evicted under volatile-lru: it has no key TTL", key)
			}
		}
		for _, evl := range []*eventLog{eventsA, eventsB} {
			if errs := evl.errors(masterelection.ErrDataLoss); len(errs) > 0 {
				t.Errorf("ErrDataLoss reported, but the term key stayed: %v", errs)
			}
		}
		t.Logf("evicted election keys: %v", keys)
	})
}

// TestEvictionOfTheTermKeyLooksLikeADataLoss shows what docs/safety.md
// claims for allkeys-* policies: Redis also evicts the term key, which herd
// never deletes. The healthy master's next renewal fails (the renew script
// checks the term), the processes that saw a term report ErrDataLoss and
// wait LockTTL, and the next term comes from the server clock, above the
// lost one.
func TestEvictionOfTheTermKeyLooksLikeADataLoss(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		t.Parallel() // each server on its own: the data-loss waits overlap
		inst := redistest.Start(t, s, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru",
			"--notify-keyspace-events", "Ke")
		admin := inst.Client(t)
		a := newElection(t, inst.Client(t), fastConfig("evict-term", "a"))
		b := newElection(t, inst.Client(t), fastConfig("evict-term", "b"))
		eventsA, eventsB := recordEvents(a), recordEvents(b)
		start(t, a)
		start(t, b)
		eventsA.wait(t, "ErrEvictionPolicy", 5*time.Second, isError(masterelection.ErrEvictionPolicy))
		first := a.Term()
		if first == 0 {
			t.Fatal("a is not master")
		}
		k := a.Keys()

		gone := make(chan struct{})
		var goneOnce sync.Once
		var evictedAt time.Time
		ev := watchEvictions(t, admin, func(key string) {
			if key == k.Term {
				goneOnce.Do(func() { evictedAt = time.Now(); close(gone) })
			}
		}, k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Processes, k.ProcessesExpiry)
		n := fill(t, admin, 0, gone, 15*time.Second)
		t.Logf("term key evicted after %d filler keys of 8 KiB", n)

		eventsA.wait(t, "a's master-lost", 3*time.Second, func(e masterelection.Event) bool {
			return e.Kind == masterelection.EventMasterLost
		})
		t.Logf("a, healthy, lost its mastership %v after the eviction", time.Since(evictedAt).Round(time.Millisecond))
		deadline := time.Now().Add(10 * time.Second)
		for len(eventsA.errors(masterelection.ErrDataLoss))+len(eventsB.errors(masterelection.ErrDataLoss)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no ErrDataLoss within 10s of the term key's eviction")
			}
			time.Sleep(5 * time.Millisecond)
		}
		m := waitMaster(t, []*masterelection.MasterElection{a, b}, 10*time.Second)
		if m.Term() <= first {
			t.Errorf("new term %d is not above the evicted %d", m.Term(), first)
		}
		t.Logf("master again %v after the eviction, term %d (was %d); evicted election keys: %v",
			time.Since(evictedAt).Round(time.Millisecond), m.Term(), first, ev.keys())
		for _, evl := range []*eventLog{eventsA, eventsB} {
			for _, err := range evl.errors(nil) {
				t.Logf("error event: %v", err)
			}
		}
	})
}

// TestEvictionPolicyOfTheLocksClusterNode checks that on a Redis Cluster
// the policy is read from the master of the lock's slot (maxmemory is per
// node), and that the report names that node.
func TestEvictionPolicyOfTheLocksClusterNode(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.Default(t), 3)
	c := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot, err := c.ClusterKeySlot(ctx, keyspace.NewKeys("evict-cluster", true).Master).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := cl.NodeForSlot(t, int(slot))
	setPolicy := func(n *redistest.Instance, policy string) {
		t.Helper()
		if err := n.Client(t).ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		if err := n.Client(t).ConfigSet(ctx, "maxmemory", "64mb").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range cl.Masters {
		if n != owner {
			setPolicy(n, "allkeys-lru")
		}
	}
	setPolicy(owner, "noeviction")
	for i, tt := range []struct {
		policy string
		event  bool
	}{{"noeviction", false}, {"volatile-lru", true}} {
		setPolicy(owner, tt.policy)
		m := newElection(t, c, fastConfig("evict-cluster", fmt.Sprintf("n%d", i)))
		events := recordEvents(m)
		start(t, m)
		events.wait(t, "election completed", 5*time.Second, func(e masterelection.Event) bool {
			return e.Kind == masterelection.EventElectionCompleted
		})
		found := events.errors(masterelection.ErrEvictionPolicy)
		switch {
		case !tt.event && len(found) > 0:
			t.Errorf("lock's node with %s, the others allkeys-lru: %v, want no report", tt.policy, found)
		case tt.event && len(found) != 1:
			t.Errorf("lock's node with %s: reports %v, want one", tt.policy, found)
		case tt.event && !strings.Contains(found[0].Error(), "on "+owner.Addr+":"):
			t.Errorf("report %q does not name the lock's node %s", found[0], owner.Addr)
		}
	}
}

// fill writes values of 8 KiB to c under filler keys, with ttl when
// positive, in pipelines, until done is closed, and fails the test if that
// takes longer than within. It returns the number of keys written.
func fill(t *testing.T, c *redis.Client, ttl time.Duration, done <-chan struct{}, within time.Duration) int {
	t.Helper()
	value := strings.Repeat("x", 8<<10)
	deadline := time.Now().Add(within)
	n := 0
	for {
		select {
		case <-done:
			return n
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing awaited was evicted after %d filler keys in %v", n, within)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range 32 {
				n++
				p.Set(ctx, fmt.Sprintf("filler:%d", n), value, ttl)
			}
			return nil
		})
		cancel()
		if err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
}

// evictions are the keys Redis reported evicted, in order.
type evictions struct {
	mu   sync.Mutex
	list []string
}

func (e *evictions) keys() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

// watchEvictions subscribes to the keyspace events of keys (the server must
// run with notify-keyspace-events "Ke") and calls onEvict, on one
// goroutine, with each key Redis evicts. The subscription ends at cleanup.
func watchEvictions(t *testing.T, c *redis.Client, onEvict func(key string), keys ...string) *evictions {
	t.Helper()
	const prefix = "__keyspace@0__:"
	chans := make([]string, len(keys))
	for i, k := range keys {
		chans[i] = prefix + k
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sub := c.Subscribe(ctx, chans...)
	for range chans {
		if _, err := sub.Receive(ctx); err != nil { // the confirmations
			t.Fatalf("subscribe to keyspace events: %v", err)
		}
	}
	ev := &evictions{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range sub.Channel() {
			if msg.Payload != "evicted" {
				continue
			}
			key := strings.TrimPrefix(msg.Channel, prefix)
			ev.mu.Lock()
			ev.list = append(ev.list, key)
			ev.mu.Unlock()
			onEvict(key)
		}
	}()
	t.Cleanup(func() { _ = sub.Close(); <-done })
	return ev
}

// eventLog keeps every event of one election in the order its handler saw
// them.
type eventLog struct {
	mu     sync.Mutex
	events []masterelection.Event
}

func recordEvents(m *masterelection.MasterElection) *eventLog {
	l := &eventLog{}
	m.OnEvent(func(e masterelection.Event) {
		l.mu.Lock()
		l.events = append(l.events, e)
		l.mu.Unlock()
	})
	return l
}

// wait waits until an event matches, failing the test after within.
func (l *eventLog) wait(t *testing.T, what string, within time.Duration, match func(masterelection.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		found := slices.ContainsFunc(l.events, match)
		l.mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// errors returns the errors of the error events that wrap target (all of
// them when target is nil).
func (l *eventLog) errors(target error) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	for _, e := range l.events {
		if e.Kind == masterelection.EventError && (target == nil || errors.Is(e.Err, target)) {
			out = append(out, e.Err)
		}
	}
	return out
}

func isError(target error) func(masterelection.Event) bool {
	return func(e masterelection.Event) bool {
		return e.Kind == masterelection.EventError && errors.Is(e.Err, target)
	}
}
