package pubsub_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// waitLimit bounds every wait in these tests: it turns a hang into a
// failure and is never asserted as a timing.
const waitLimit = 20 * time.Second

// clientOptions are the options of every client the tests make.
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

// newMini starts a miniredis and returns it with a client of it; both are
// closed by t.Cleanup.
func newMini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(clientOptions(m.Addr()))
	t.Cleanup(func() { _ = c.Close() })
	return m, c
}

// testCtx returns a context bounded by waitLimit.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// fakeMastership is a Mastership whose answers the test sets. It holds no lock of
// its own: since the route script publishes only for the holder of the lock
// under its term, a fakeMastership whose Router sends is made by newMaster, which
// takes the lock in Redis for real. newMastership alone serves where nothing is
// sent (Reports, constructor errors).
type fakeMastership struct {
	id     string
	master atomic.Bool
	term   atomic.Int64
}

func newMastership(id string, term int64) *fakeMastership {
	l := &fakeMastership{id: id}
	l.set(term)
	return l
}

// set makes the mastership master with term, or not master when term is 0.
func (l *fakeMastership) set(term int64) {
	l.term.Store(term)
	l.master.Store(term > 0)
}

func (l *fakeMastership) NodeID() string { return l.id }
func (l *fakeMastership) IsMaster() bool { return l.master.Load() }
func (l *fakeMastership) Term() int64 {
	if !l.master.Load() {
		return 0
	}
	return l.term.Load()
}

// testLockTTL is the TTL of the locks the tests take. Nothing renews them;
// it only has to outlast a test.
const testLockTTL = time.Minute

// lockKeys returns the election's key names for cfg, as the Router builds them.
func lockKeys(cfg pubsub.Config) keyspace.Keys {
	name := cfg.LockName
	if name == "" {
		name = pubsub.DefaultLockName
	}
	return keyspace.NewKeys(name, cfg.Cluster)
}

// acquire makes id the master of cfg's election with acquire.lua, as the
// election does, and returns the term it minted. It fails the test when the
// lock is held.
func acquire(t testing.TB, c redis.UniversalClient, cfg pubsub.Config, id string) int64 {
	t.Helper()
	a, err := rdb.Acquire(testCtx(t), c, lockKeys(cfg), id, testLockTTL, nil, 0)
	if err != nil || a.Term <= 0 {
		t.Fatalf("%s acquires the lock: %+v, %v", id, a, err)
	}
	return a.Term
}

// newMaster returns a fakeMastership that holds the lock of cfg's election in
// Redis for real, under the term acquire.lua minted for it.
func newMaster(t testing.TB, c redis.UniversalClient, id string, cfg pubsub.Config) *fakeMastership {
	t.Helper()
	return newMastership(id, acquire(t, c, cfg, id))
}

// takeOver moves the lock of cfg's election to id as an expiry followed by
// an election would: the lock key goes away, and id acquires a new term.
// The previous holder is not told; its Router is fenced from then on.
func takeOver(t testing.TB, c redis.UniversalClient, cfg pubsub.Config, id string) int64 {
	t.Helper()
	if err := c.Del(testCtx(t), lockKeys(cfg).Master).Err(); err != nil {
		t.Fatalf("expire the lock: %v", err)
	}
	return acquire(t, c, cfg, id)
}

// bypass PUBLISHes m straight to channel, as a sender that skips the route
// script does: a stale master's message already on its way, or a process
// not written with herd. The send-side fence never sees it; only the
// receivers' term fence stands in its way. An empty m.ID gets a fresh one.
func bypass(t testing.TB, c redis.UniversalClient, channel string, m pubsub.Message) {
	t.Helper()
	if m.ID == "" {
		m.ID = uuid.NewString()
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("encode %+v: %v", m, err)
	}
	if err := c.Publish(testCtx(t), channel, data).Err(); err != nil {
		t.Fatalf("publish to %q: %v", channel, err)
	}
}

// assertFenced checks that err is what a Router returns when the route
// script refused: both ErrNotMaster and keyspace.ErrFenced, and nothing else.
func assertFenced(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, pubsub.ErrNotMaster) || !errors.Is(err, keyspace.ErrFenced) {
		t.Errorf("%s: %v; want an error matching both ErrNotMaster and keyspace.ErrFenced", what, err)
	}
	if errors.Is(err, pubsub.ErrNoSubscriber) {
		t.Errorf("%s: %v also claims no subscriber; nothing was published", what, err)
	}
}

// slaveList is a SlaveLister over a fixed list; before runs inside Slaves.
type slaveList struct {
	ids    []string
	err    error
	before func()
}

func (s slaveList) Slaves(context.Context) ([]registry.SlaveNode, error) {
	if s.before != nil {
		s.before()
	}
	out := make([]registry.SlaveNode, len(s.ids))
	for i, id := range s.ids {
		out[i] = registry.SlaveNode{NodeID: id}
	}
	return out, s.err
}

// errLog collects what OnError receives.
type errLog struct {
	mu   sync.Mutex
	errs []error
	ch   chan error
}

func newErrLog() *errLog { return &errLog{ch: make(chan error, 100000)} }

func (l *errLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
	select {
	case l.ch <- err:
	default:
	}
}

// all returns a copy of the errors so far.
func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// count returns how many errors so far match target.
func (l *errLog) count(target error) int {
	n := 0
	for _, err := range l.all() {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// next waits for the next error matching target.
func (l *errLog) next(t testing.TB, target error) error {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case err := <-l.ch:
			if errors.Is(err, target) {
				return err
			}
		case <-deadline:
			t.Fatalf("no error matching %v reported; got %v", target, l.all())
			return nil
		}
	}
}

// startSubscriber starts a Subscriber for id whose messages go to the
// returned channel and whose errors go to the returned log. Close runs at
// cleanup.
func startSubscriber(t testing.TB, c redis.UniversalClient, id string, cfg pubsub.Config) (*pubsub.Subscriber, chan pubsub.Message, *errLog) {
	t.Helper()
	log := newErrLog()
	cfg.OnError = log.add
	s, err := pubsub.NewSubscriber(c, id, cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	got := make(chan pubsub.Message, 20000)
	s.HandleDefault(pubsub.Chan(got))
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, got, log
}

// receive waits for the next message on ch.
func receive(t testing.TB, ch <-chan pubsub.Message) pubsub.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(waitLimit):
		t.Fatal("no message received")
		return pubsub.Message{}
	}
}

// mustSend sends and fails the test on error.
func mustSend(t testing.TB, r *pubsub.Router, slave, typ string, payload any) {
	t.Helper()
	if err := r.Send(testCtx(t), slave, typ, payload); err != nil {
		t.Fatalf("Send(%q, %q): %v", slave, typ, err)
	}
}

func newRouter(t testing.TB, c redis.UniversalClient, l pubsub.Mastership, slaves pubsub.SlaveLister, cfg pubsub.Config) *pubsub.Router {
	t.Helper()
	r, err := pubsub.NewRouter(c, l, slaves, cfg)
	if err != nil {
		t.Fatalf("NewRouter: %v", err)
	}
	return r
}
