package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/wire"
)

const (
	testSlaveTimeout  = 15 * time.Second
	testSweepInterval = 5 * time.Second
)

// trackerEnv runs a SlaveTracker on an env, feeding it the events channel
// the way the election loop does, and records its callbacks in order.
type trackerEnv struct {
	*env
	tr     *SlaveTracker
	got    chan string // "join:<id>", "leave:<id>", "error"
	sweeps chan struct{}
	joined chan SlaveNode
	left   chan string // "<id>:<why>" for each leave
	errs   chan error
	cancel context.CancelFunc
	done   chan error
	seq    atomic.Int64
}

// startTracker starts a tracker on e; with feed it forwards every message of
// the events channel to Notice.
func startTracker(t *testing.T, e *env, opts TrackerConfig, feed bool) *trackerEnv {
	t.Helper()
	te := newTracker(t, e, opts)
	if feed {
		ps := e.c.Subscribe(e.ctx, e.keys.RegistryEvents)
		if _, err := ps.Receive(e.ctx); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		fwd := make(chan struct{})
		go func() {
			defer close(fwd)
			for m := range ps.Channel() {
				te.tr.Notice([]byte(m.Payload))
			}
		}()
		t.Cleanup(func() { _ = ps.Close(); <-fwd })
	}
	te.run(t)
	te.waitSweep(t) // the initial sweep
	return te
}

func newTracker(t *testing.T, e *env, opts TrackerConfig) *trackerEnv {
	t.Helper()
	te := &trackerEnv{env: e, got: make(chan string, 4096), sweeps: make(chan struct{}, 64), joined: make(chan SlaveNode, 4096), left: make(chan string, 4096), errs: make(chan error, 4096)}
	if opts.SlaveTimeout == 0 {
		opts.SlaveTimeout = testSlaveTimeout
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = testSweepInterval
	}
	opts.OnJoin = func(n SlaveNode) { te.joined <- n; te.got <- "join:" + n.NodeID }
	opts.OnLeave = func(id string, why LeaveReason) { te.left <- id + ":" + string(why); te.got <- "leave:" + id }
	opts.OnError = func(err error) { te.errs <- err; te.got <- "error" }
	tr, err := NewSlaveTracker(e.reg, opts)
	if err != nil {
		t.Fatalf("NewSlaveTracker: %v", err)
	}
	tr.afterSweep = func() { te.sweeps <- struct{}{} }
	te.tr = tr
	return te
}

// run starts Run in a goroutine stopped and waited for by a t.Cleanup.
func (te *trackerEnv) run(t *testing.T) {
	ctx, cancel := context.WithCancel(te.ctx)
	te.cancel, te.done = cancel, make(chan error, 1)
	go func() { te.done <- te.tr.Run(ctx) }()
	t.Cleanup(func() { _ = te.stop() })
}

// stop ends the running Run and returns its error.
func (te *trackerEnv) stop() error {
	if te.cancel == nil {
		return nil
	}
	te.cancel()
	te.cancel = nil
	return <-te.done
}

func (te *trackerEnv) waitSweep(t *testing.T) {
	t.Helper()
	select {
	case <-te.sweeps:
	case <-time.After(hang):
		t.Fatal("no sweep")
	}
}

// sweep moves time on by one sweep interval and waits for the sweep.
func (te *trackerEnv) sweep(t *testing.T) {
	t.Helper()
	te.pass(testSweepInterval)
	te.waitSweep(t)
}

// expect reads the next callbacks and compares them with want.
func (te *trackerEnv) expect(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for range want {
		select {
		case g := <-te.got:
			got = append(got, g)
		case <-time.After(hang):
			t.Fatalf("callbacks %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("callbacks %v, want %v", got, want)
	}
}

// settle publishes a message the tracker reports as an error and waits for
// it: every notice published before has then been handled. It fails if any
// other callback came first.
func (te *trackerEnv) settle(t *testing.T) {
	t.Helper()
	if err := te.c.Publish(te.ctx, te.keys.RegistryEvents, fmt.Sprintf("barrier %d", te.seq.Add(1))).Err(); err != nil {
		t.Fatal(err)
	}
	te.expect(t, "error")
}

func TestTracker(t *testing.T) {
	for _, tg := range miniTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newEnv(t, tg, Config{})
			e.register(slave("old"))
			e.pass(testSlaveTimeout + time.Second)
			e.holdLock("x", 1)
			e.register(slave("s2"), slave("s1"), ProcessInfo{ProcessID: "m", Role: RoleSlave}, ProcessInfo{ProcessID: "x", Role: RoleMaster, Term: 1})

			te := startTracker(t, e, TrackerConfig{Self: "m"}, true)
			// Every live slave already registered, in order; not the master's
			// own entry; not the stale one, which is removed.
			te.expect(t, "join:s1", "join:s2")
			if n := <-te.joined; n.Identifier != "worker-s1" || !n.RegisteredAt.Equal(e.clk.Now()) {
				t.Errorf("joined %+v, want worker-s1 registered now", n)
			}
			if _, err := e.reg.Process(e.ctx, "old"); !isNotFound(err) {
				t.Errorf("the stale slave is still registered: %v", err)
			}
			te.settle(t) // the stale removal's notice is not reported

			// A join by notice, not reported again by the sweep.
			e.register(slave("s3"))
			te.expect(t, "join:s3")
			te.sweep(t)
			te.settle(t)

			// A leave by notice, not reported again by the sweep.
			if err := e.reg.Unregister(e.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			te.expect(t, "leave:s1")
			if why := <-te.left; why != "s1:unregistered" {
				t.Errorf("s1 left as %q, want unregistered", why)
			}
			te.sweep(t)
			te.settle(t)

			// s2 stops heartbeating: removed and reported once when its
			// lastSeen is older than SlaveTimeout.
			e.heartbeat("s2")
			for i := 0; i < 3; i++ { // up to 15s after s2's last heartbeat
				e.heartbeat("s3")
				te.sweep(t)
			}
			te.settle(t)
			e.heartbeat("s3")
			te.sweep(t) // 20s after s2's last heartbeat
			te.expect(t, "leave:s2")
			if why := <-te.left; why != "s2:stale" {
				t.Errorf("s2 left as %q, want stale", why)
			}
			if _, err := e.reg.Process(e.ctx, "s2"); !isNotFound(err) {
				t.Errorf("the stale slave is still registered: %v", err)
			}
			te.sweep(t)
			te.settle(t)

			// s2 was alive after all: its next heartbeat registers it again.
			e.heartbeat("s2")
			te.expect(t, "join:s2")

			// A slave that becomes master leaves the slaves.
			e.holdLock("s3", 2)
			e.register(ProcessInfo{ProcessID: "s3", Role: RoleMaster, Term: 2})
			te.expect(t, "leave:s3")
			if why := <-te.left; why != "s3:master" {
				t.Errorf("s3 left as %q, want master", why)
			}
			te.sweep(t)
			te.settle(t)
			if te.tr.Dropped() != 0 {
				t.Errorf("Dropped = %d", te.tr.Dropped())
			}
		})
	}
}

// TestTrackerVanished: an entry that vanishes without a notice (it expired,
// or the data was lost) is reported gone once its lastSeen is older than
// SlaveTimeout, on every backend alike, and not at all if it comes back
// before.
func TestTrackerVanished(t *testing.T) {
	for _, tg := range miniTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newEnv(t, tg, Config{ProcessTTL: 10 * time.Second})
			e.register(slave("a"), slave("b"), slave("c"))
			te := startTracker(t, e, TrackerConfig{}, true)
			te.expect(t, "join:a", "join:b", "join:c")

			// The data is lost; b and c heartbeat again, a stays away.
			if err := e.c.Del(e.ctx, e.keys.Processes, e.keys.ProcessesExpiry).Err(); err != nil {
				t.Fatal(err)
			}
			te.sweep(t) // 5s
			e.heartbeat("b", "c")
			te.sweep(t) // 10s
			te.settle(t)
			e.heartbeat("b")
			te.sweep(t) // 15s: a's lastSeen is 15s old, not older
			te.settle(t)
			e.heartbeat("b")
			te.sweep(t) // 20s: c expired at 15s (TTL 10s), last seen 15s ago
			te.expect(t, "leave:a")
			te.settle(t)
			e.heartbeat("b")
			te.sweep(t) // 25s: c's lastSeen is older than SlaveTimeout
			te.expect(t, "leave:c")
			e.heartbeat("b")
			te.sweep(t)
			te.settle(t)
		})
	}
}

// TestTrackerWithoutNotices: the sweep alone reports every change; a slave
// whose "unregistered" notice is lost leaves once it has not been seen for
// SlaveTimeout.
func TestTrackerWithoutNotices(t *testing.T) {
	for _, tg := range miniTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newEnv(t, tg, Config{})
			te := startTracker(t, e, TrackerConfig{}, false)
			e.register(slave("a"))
			te.sweep(t)
			te.expect(t, "join:a")
			if err := e.reg.Unregister(e.ctx, "a"); err != nil {
				t.Fatal(err)
			}
			for range testSlaveTimeout/testSweepInterval - 1 {
				te.sweep(t) // 10s, 15s after a's registration
			}
			te.tr.Notice([]byte("end"))
			te.expect(t, "error")
			te.sweep(t)
			te.expect(t, "leave:a")
		})
	}
}

func TestTrackerNotices(t *testing.T) {
	e := newEnv(t, miniTarget(BackendNative), Config{})
	te := newTracker(t, e, TrackerConfig{})
	// Queued while no Run is running, and more than the queue holds: the
	// overflow is counted, and Run discards the queue and sweeps instead.
	ghost := []byte(`{"event":"registered","nodeId":"ghost","role":"slave","process":{"processId":"ghost","role":"slave"}}`)
	for range noticeQueue + 1 {
		te.tr.Notice(ghost)
	}
	if d := te.tr.Dropped(); d != 1 {
		t.Errorf("Dropped = %d, want 1", d)
	}
	te.run(t)
	te.waitSweep(t)

	unregister := func(id string) func() {
		return func() {
			if err := e.reg.Unregister(e.ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every notice is a hint, confirmed by a read of the registry: only what
	// the registry shows is reported, and a notice it contradicts is
	// reported as an error wrapping ErrUnconfirmedNotice.
	for _, tc := range []struct {
		name        string
		before      func() // a write whose own notice is not fed
		payload     string
		want        []string
		unconfirmed bool // the first error wraps ErrUnconfirmedNotice
	}{
		{"not JSON", nil, `{"event":`, []string{"error"}, false},
		{"corrupt process", nil, `{"event":"registered","nodeId":"a","role":"slave","process":{"processId":"b","role":"slave"}}`, []string{"error"}, false},
		{"no process", nil, `{"event":"registered","nodeId":"a","role":"slave"}`, []string{"error"}, false},
		{"no node id", nil, `{"event":"unregistered","nodeId":"a b"}`, []string{"error"}, true},
		{"lock notice", nil, `{"event":"acquired","nodeId":"m","term":3}`, nil, false},
		{"unknown event", nil, `{"event":"rebalanced"}`, nil, false},
		{"unregistered unknown slave", nil, `{"event":"unregistered","nodeId":"zz"}`, nil, false},
		{"registered master, absent", nil, `{"event":"registered","nodeId":"m","role":"master","process":{"processId":"m","role":"master"}}`, []string{"error"}, true},
		{"registered slave, absent", nil, `{"event":"registered","nodeId":"a","role":"slave","process":{"processId":"a","role":"slave"}}`, []string{"error"}, true},
		{"registered slave, absent, versioned", nil, `{"event":"registered","nodeId":"a","role":"slave","version":1,"process":{"processId":"a","role":"slave"}}`, nil, false},
		{"registered slave", func() { e.register(slave("a")) }, `{"event":"registered","nodeId":"a","role":"slave","process":{"processId":"a","role":"slave"}}`, []string{"join:a"}, false},
		{"registered again", nil, `{"event":"registered","nodeId":"a","role":"slave","process":{"processId":"a","role":"slave"}}`, nil, false},
		{"forged unregistered", nil, `{"event":"unregistered","nodeId":"a"}`, []string{"error"}, true},
		{"forged unregistered, huge version", nil, `{"event":"unregistered","nodeId":"a","version":9000000000000000}`, []string{"error"}, true},
		{"forged unregistered, stale reason", nil, `{"event":"unregistered","nodeId":"a","reason":"stale"}`, []string{"error"}, true},
		{"unregistered", unregister("a"), `{"event":"unregistered","nodeId":"a","reason":"stale"}`, []string{"leave:a"}, false},
		{"registered again after leaving", func() { e.register(slave("a")) }, `{"event":"registered","nodeId":"a","role":"slave","version":9000000000000000,"process":{"processId":"a","role":"slave"}}`, []string{"error", "join:a"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			te.tr.Notice([]byte(tc.payload))
			te.tr.Notice([]byte("end")) // reported as an error after tc's callbacks
			te.expect(t, append(tc.want, "error")...)
			var errs []error
			for _, w := range tc.want {
				if w == "error" {
					errs = append(errs, <-te.errs) // sent before its "error"
				}
			}
			<-te.errs // the end marker's
			if tc.unconfirmed && (len(errs) == 0 || !errors.Is(errs[0], ErrUnconfirmedNotice)) {
				t.Errorf("errors %v, want one wrapping ErrUnconfirmedNotice", errs)
			}
			if !tc.unconfirmed && len(errs) > 0 && errors.Is(errs[0], ErrUnconfirmedNotice) {
				t.Errorf("error %v for a notice the registry does not contradict", errs[0])
			}
		})
	}
	if d := te.tr.Dropped(); d != 1 {
		t.Errorf("Dropped = %d, want still 1", d)
	}
}

func TestTrackerRuns(t *testing.T) {
	e := newEnv(t, miniTarget(BackendNative), Config{})
	e.register(slave("a"))
	te := startTracker(t, e, TrackerConfig{}, false)
	te.expect(t, "join:a")
	if err := te.tr.Run(e.ctx); !errors.Is(err, ErrTrackerRunning) {
		t.Errorf("a second Run = %v, want ErrTrackerRunning", err)
	}
	if err := te.stop(); err != nil {
		t.Errorf("Run returned %v after its ctx ended, want nil", err)
	}
	// A new run starts from nothing: a is reported again.
	te.run(t)
	te.waitSweep(t)
	te.expect(t, "join:a")
	if err := te.stop(); err != nil {
		t.Errorf("Run returned %v after its ctx ended, want nil", err)
	}
}

func TestNewSlaveTracker(t *testing.T) {
	e := newEnv(t, miniTarget(BackendNative), Config{})
	for _, tc := range []struct {
		name string
		reg  *Registry
		opts TrackerConfig
		want string
	}{
		{"nil registry", nil, TrackerConfig{}, "nil registry"},
		{"negative timeout", e.reg, TrackerConfig{SlaveTimeout: -1}, "SlaveTimeout"},
		{"negative interval", e.reg, TrackerConfig{SweepInterval: -1}, "SweepInterval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSlaveTracker(tc.reg, tc.opts)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSlaveTracker = %v, want ErrInvalidConfig naming %s", err, tc.want)
			}
		})
	}
	tr, err := NewSlaveTracker(e.reg, TrackerConfig{})
	if err != nil || tr.opts.SlaveTimeout != DefaultSlaveTimeout || tr.opts.SweepInterval != DefaultSweepInterval || tr.reg.clock != e.clk {
		t.Errorf("defaults: %+v, %v", tr.opts, err)
	}
}

// TestTrackerAppliesNothingOlder: a sweep that has seen a slave's latest
// entry comes before its older notices, still queued (a slow subscriber, a
// burst of writes): applying them would report a live slave left and joined
// again, or a slave that is master now joined.
func TestTrackerAppliesNothingOlder(t *testing.T) {
	for _, tg := range miniTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newEnv(t, tg, Config{})
			ps := e.c.Subscribe(e.ctx, e.keys.RegistryEvents)
			defer ps.Close()
			if _, err := ps.Receive(e.ctx); err != nil {
				t.Fatal(err)
			}
			queued := func(n int) [][]byte {
				t.Helper()
				var out [][]byte
				for range n {
					m, err := ps.ReceiveMessage(e.ctx)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, []byte(m.Payload))
				}
				return out
			}
			e.register(slave("a"), slave("b"))
			queued(2)
			te := startTracker(t, e, TrackerConfig{}, false)
			te.expect(t, "join:a", "join:b")

			// a restarts (unregisters, registers again); b becomes master and
			// then a slave again; c registers and unregisters.
			if err := e.reg.Unregister(e.ctx, "a"); err != nil {
				t.Fatal(err)
			}
			e.register(slave("a"))
			e.holdLock("b", 4)
			e.register(ProcessInfo{ProcessID: "b", Role: RoleMaster, Term: 4})
			e.register(slave("b"), slave("c"))
			if err := e.reg.Unregister(e.ctx, "c"); err != nil {
				t.Fatal(err)
			}
			old := queued(6)
			end := func() { // no callback until this marker, reported as an error
				t.Helper()
				te.tr.Notice([]byte("end"))
				te.expect(t, "error")
			}
			te.sweep(t) // sees a and b live, c gone
			end()
			for _, p := range old {
				te.tr.Notice(p)
			}
			end()
			te.sweep(t)
			end()
		})
	}
}

// TestIntegrationForgedNotices: a client that may PUBLISH but writes no key
// sends registry notices that no write made, on every server: an
// unregistration of a live slave and a registration of a process that is
// not registered, each without a version and with the next version Redis
// would mint. None becomes a callback, each is reported once, and a huge
// version does not make the tracker miss the real notices after it.
func TestIntegrationForgedNotices(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		e := newEnv(t, serverTargets(t, inst)[0], Config{ProcessTTL: time.Minute})
		e.register(slave("a"), slave("b"))
		te := startTracker(t, e, TrackerConfig{}, true)
		te.expect(t, "join:a", "join:b")
		forger := inst.Client(t)
		next := func() string {
			v, err := e.c.Get(e.ctx, e.keys.ProcessesVersion).Int64()
			if err != nil {
				t.Fatal(err)
			}
			return strconv.FormatInt(v+1, 10)
		}
		ghost := `"process":{"processId":"ghost","nodeId":"ghost","role":"slave","lastSeen":"` + time.Now().UTC().Format(wire.TimeLayout) + `"}`
		for _, f := range []struct{ name, payload string }{
			{"unregistered, no version", `{"event":"unregistered","nodeId":"a"}`},
			{"unregistered, next version", `{"event":"unregistered","nodeId":"a","version":` + next() + `}`},
			{"unregistered, huge version", `{"event":"unregistered","nodeId":"b","version":9000000000000000}`},
			{"registered ghost, no version", `{"event":"registered","nodeId":"ghost","role":"slave",` + ghost + `}`},
			{"registered ghost, next version", `{"event":"registered","nodeId":"ghost","role":"slave","version":` + next() + `,` + ghost + `}`},
		} {
			if err := forger.Publish(e.ctx, e.keys.RegistryEvents, f.payload).Err(); err != nil {
				t.Fatal(err)
			}
			te.expect(t, "error")
			if err := <-te.errs; !errors.Is(err, ErrUnconfirmedNotice) {
				t.Errorf("%s: reported %v, want ErrUnconfirmedNotice", f.name, err)
			}
			te.settle(t) // and nothing else
			for len(te.errs) > 0 {
				<-te.errs // the barrier's
			}
		}
		// The real notices still count, at once.
		if err := e.reg.Unregister(e.ctx, "b"); err != nil {
			t.Fatal(err)
		}
		te.expect(t, "leave:b")
		e.register(slave("c"))
		te.expect(t, "join:c")
	})
}
