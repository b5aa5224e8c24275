package durable_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// waitLimit bounds every wait in these tests: it turns a hang into a
// failure and is never asserted as a timing.
const waitLimit = 30 * time.Second

func clientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		DialTimeout:              2 * time.Second,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

func newMini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(clientOptions(m.Addr()))
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// fast is the Config of the tests: short waits, so Close and retries do
// not hold a test up.
func fast() durable.Config {
	return durable.Config{Block: 50 * time.Millisecond, RetryDelay: 20 * time.Millisecond}
}

// fakeMastership is a Mastership whose answers the test sets; newMaster makes one
// that holds the lock in Redis for real.
type fakeMastership struct {
	id     string
	master atomic.Bool
	term   atomic.Int64
}

func (l *fakeMastership) NodeID() string { return l.id }
func (l *fakeMastership) IsMaster() bool { return l.master.Load() }
func (l *fakeMastership) Term() int64 {
	if !l.master.Load() {
		return 0
	}
	return l.term.Load()
}

func keys() keyspace.Keys { return keyspace.NewKeys(pubsub.DefaultLockName, false) }

// acquire makes id the master with acquire.lua and returns its term.
func acquire(t testing.TB, c redis.UniversalClient, id string) int64 {
	t.Helper()
	a, err := rdb.Acquire(testCtx(t), c, keys(), id, time.Minute, nil, 0)
	if err != nil || a.Term <= 0 {
		t.Fatalf("%s acquires the lock: %+v, %v", id, a, err)
	}
	return a.Term
}

func newMaster(t testing.TB, c redis.UniversalClient, id string) *fakeMastership {
	t.Helper()
	l := &fakeMastership{id: id}
	l.term.Store(acquire(t, c, id))
	l.master.Store(true)
	return l
}

// takeOver moves the lock to id as an expiry and an election would; the
// previous holder is not told.
func takeOver(t testing.TB, c redis.UniversalClient, id string) *fakeMastership {
	t.Helper()
	if err := c.Del(testCtx(t), keys().Master).Err(); err != nil {
		t.Fatal(err)
	}
	return newMaster(t, c, id)
}

// register writes a live registry entry for each id that has none (no
// deadline: the registry's native backend), as a process's registration
// would.
func register(t testing.TB, c redis.UniversalClient, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if c.HExists(testCtx(t), keys().Processes, id).Val() {
			continue
		}
		if err := c.HSet(testCtx(t), keys().Processes, id, `{"processId":"`+id+`"}`).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// unregister deletes the registry entries of ids, as their expiry would.
func unregister(t testing.TB, c redis.UniversalClient, ids ...string) {
	t.Helper()
	if err := c.HDel(testCtx(t), keys().Processes, ids...).Err(); err != nil {
		t.Fatal(err)
	}
}

// slaveList is a SlaveLister the test sets.
type slaveList struct {
	mu  sync.Mutex
	ids []string
}

func (s *slaveList) set(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = ids
}

func (s *slaveList) Slaves(context.Context) ([]registry.SlaveNode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []registry.SlaveNode
	for _, id := range s.ids {
		out = append(out, registry.SlaveNode{NodeID: id})
	}
	return out, nil
}

func newRouter(t testing.TB, c redis.UniversalClient, l pubsub.Mastership, slaves pubsub.SlaveLister, cfg durable.Config) *durable.Router {
	t.Helper()
	r, err := durable.NewRouter(c, l, slaves, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// errLog collects what OnError receives.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func (l *errLog) count(target error) int {
	n := 0
	for _, err := range l.all() {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// startConsumer starts a Consumer of id whose default handler sends every
// delivery to the returned channel (buffered) and returns nil.
func startConsumer(t testing.TB, c redis.UniversalClient, id string, cfg durable.Config) (*durable.Consumer, chan durable.Delivery, *errLog) {
	t.Helper()
	register(t, c, id)
	log := &errLog{}
	if cfg.OnError == nil {
		cfg.OnError = log.add
	}
	con, err := durable.NewConsumer(c, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan durable.Delivery, 100000)
	con.HandleDefault(func(_ context.Context, d durable.Delivery) error {
		got <- d
		return nil
	})
	if err := con.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	return con, got, log
}

func receive(t testing.TB, got <-chan durable.Delivery) durable.Delivery {
	t.Helper()
	select {
	case d := <-got:
		return d
	case <-time.After(waitLimit):
		t.Fatal("no delivery")
		return durable.Delivery{}
	}
}

// eventually polls cond until it holds, failing the test after waitLimit.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitLimit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func assertFenced(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, durable.ErrNotMaster) || !errors.Is(err, keyspace.ErrFenced) {
		t.Errorf("%s: %v; want ErrNotMaster and keyspace.ErrFenced", what, err)
	}
}

// batchTo returns n messages for slaveID.
func batchTo(n int, slaveID string) []pubsub.Outgoing {
	out := make([]pubsub.Outgoing, n)
	for i := range out {
		out[i] = pubsub.Outgoing{SlaveID: slaveID, Type: "work", Payload: i}
	}
	return out
}
