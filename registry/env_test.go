package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/keyspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start is the fake clock's start; whole seconds, so times survive the
// millisecond precision of the wire form unchanged.
var start = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// hang bounds every wait of the tests, so a bug fails a test instead of
// hanging it. It is never asserted.
const hang = 10 * time.Second

// target is a server the suite runs on, with one backend.
type target struct {
	name    string
	backend Backend
	ttl     time.Duration // ProcessTTL of the registries under test
	// open returns a client of a fresh or shared server and the function
	// that moves the server's time to now (after d has passed on the fake
	// clock). Both are cleaned up with t.
	open func(t *testing.T) (c *redis.Client, pass func(now time.Time, d time.Duration))
}

// miniTarget runs on a miniredis of its own per test, whose time and TTLs
// follow the fake clock.
func miniTarget(b Backend) target {
	return target{name: "miniredis/" + string(b), backend: b, ttl: 45 * time.Second,
		open: func(t *testing.T) (*redis.Client, func(time.Time, time.Duration)) {
			mr := miniredis.RunT(t)
			mr.SetTime(start)
			mr.ClockTTL(true)
			c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c, func(now time.Time, _ time.Duration) { mr.SetTime(now) }
		}}
}

// miniTargets are the backends miniredis runs: it has HSETEX but not
// HPEXPIRE, so the hpexpire backend runs only on real servers (Redis 7.4+,
// Valkey 9), in the integration tests.
var miniTargets = []target{miniTarget(BackendNative), miniTarget(BackendEmulated)}

// env is one Registry under test with its server, clock and error sink.
type env struct {
	t      *testing.T
	ctx    context.Context
	c      *redis.Client
	keys   keyspace.Keys
	clk    *clock.Fake
	reg    *Registry
	ttl    time.Duration
	errs   *sink
	server func(now time.Time, d time.Duration)
}

var lockSeq atomic.Int64

// newEnv opens tg and builds a Registry on keys of a lock name of its own.
// opts.Backend, ProcessTTL and OnError are set from tg when zero; the
// registry runs on e.clk.
func newEnv(t *testing.T, tg target, opts Config) *env {
	t.Helper()
	c, server := tg.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, c: c, server: server, clk: clock.NewFake(start), errs: &sink{},
		keys: keyspace.NewKeys(fmt.Sprintf("herd-test-%d", lockSeq.Add(1)), false)}
	if opts.Backend == "" {
		opts.Backend = tg.backend
	}
	if opts.ProcessTTL == 0 {
		opts.ProcessTTL = tg.ttl
	}
	if opts.OnError == nil {
		opts.OnError = e.errs.add
	}
	e.ttl = opts.ProcessTTL
	reg, err := New(clock.With(ctx, e.clk), c, e.keys, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if reg.Backend() != tg.backend {
		t.Fatalf("Backend() = %s, want %s", reg.Backend(), tg.backend)
	}
	e.reg = reg
	return e
}

// pass moves the server's time and then the fake clock forward by d, so
// that what the clock's timers trigger sees the server's new time.
func (e *env) pass(d time.Duration) {
	e.server(e.clk.Now().Add(d), d)
	e.clk.Advance(d)
}

// slave returns the info of a slave process id.
func slave(id string) ProcessInfo {
	return ProcessInfo{ProcessID: id, Role: RoleSlave, Identifier: "worker-" + id,
		Capabilities: Capabilities{CanProcessDetections: true, MaxSubscriptions: 8, PreferredWorkload: 50}}
}

func (e *env) register(infos ...ProcessInfo) {
	e.t.Helper()
	for _, p := range infos {
		if err := e.reg.Register(e.ctx, p); err != nil {
			e.t.Fatalf("Register(%s): %v", p.ProcessID, err)
		}
	}
}

func (e *env) heartbeat(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		if err := e.reg.Heartbeat(e.ctx, id); err != nil {
			e.t.Fatalf("Heartbeat(%s): %v", id, err)
		}
	}
}

// ids returns the process ids Processes lists.
func (e *env) ids() []string {
	e.t.Helper()
	ps, err := e.reg.Processes(e.ctx)
	if err != nil {
		e.t.Fatalf("Processes: %v", err)
	}
	out := []string{}
	for _, p := range ps {
		out = append(out, p.ProcessID)
	}
	return out
}

// events subscribes to the events channel and returns the notices, decoded.
func (e *env) events() <-chan map[string]any {
	e.t.Helper()
	ps := e.c.Subscribe(e.ctx, e.keys.RegistryEvents)
	if _, err := ps.Receive(e.ctx); err != nil {
		e.t.Fatalf("subscribe: %v", err)
	}
	out := make(chan map[string]any, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ps.Channel() {
			var v map[string]any
			if err := json.Unmarshal([]byte(m.Payload), &v); err != nil {
				v = map[string]any{"invalid": m.Payload}
			}
			out <- v
		}
	}()
	e.t.Cleanup(func() { _ = ps.Close(); <-done })
	return out
}

// next returns the next notice of ch.
func next(t *testing.T, ch <-chan map[string]any) map[string]any {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hang):
		t.Fatal("no notice arrived")
		return nil
	}
}

// expectNotice checks the event and nodeId members of the next notice.
func expectNotice(t *testing.T, ch <-chan map[string]any, event, id string) map[string]any {
	t.Helper()
	v := next(t, ch)
	if v["event"] != event || v["nodeId"] != id {
		t.Fatalf("notice %v, want event %q for %q", v, event, id)
	}
	return v
}

// sink collects the errors handed to an OnError.
type sink struct {
	mu   sync.Mutex
	errs []error
}

func (s *sink) add(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

func (s *sink) take() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.errs
	s.errs = nil
	return out
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// holdLock makes id the lock's holder under term, as the acquire script
// leaves the keys; the registry's master writes are fenced by them.
func (e *env) holdLock(id string, term int64) {
	e.t.Helper()
	if err := e.c.Set(e.ctx, e.keys.Master, id, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.Set(e.ctx, e.keys.Term, term, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
}
