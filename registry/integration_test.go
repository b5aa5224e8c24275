package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/testsync"
	"github.com/herdkit/herd/keyspace"
)

// realTTL is the ProcessTTL of the suite on real servers, where time is real:
// long enough that a busy machine does not expire an entry the suite expects
// to be live, short enough to wait through.
const realTTL = 1500 * time.Millisecond

// serverTargets returns, for a running server, a target per backend it
// runs, and checks that BackendAuto picks the first of native, hpexpire,
// emulated that it runs.
func serverTargets(t *testing.T, inst *redistest.Instance) []target {
	t.Helper()
	c := inst.Client(t)
	keys := keyspace.NewKeys("probe", false)
	var out []target
	for _, b := range []Backend{BackendNative, BackendHPExpire, BackendEmulated} {
		_, err := New(t.Context(), c, keys, Config{Backend: b})
		if errors.Is(err, ErrBackendUnsupported) {
			continue
		}
		if err != nil {
			t.Fatalf("New(%s) on %s: %v", b, inst.Server.Name, err)
		}
		out = append(out, target{name: string(b), backend: b, ttl: realTTL,
			open: func(t *testing.T) (*redis.Client, func(time.Time, time.Duration)) {
				return inst.Client(t), func(_ time.Time, d time.Duration) { time.Sleep(d) }
			}})
	}
	reg, err := New(t.Context(), c, keys, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 || reg.Backend() != out[0].backend {
		t.Fatalf("auto picked %s on %s, which runs %v", reg.Backend(), inst.Server.Name, out)
	}
	t.Logf("%s: backends %v, auto picks %s", inst.Server.Name, out, reg.Backend())
	return out
}

func (tg target) String() string { return tg.name }

// TestIntegrationSuite runs the registry suite on every server of the
// matrix, with every backend the server runs. Time is real there: the
// registries' clock is still the fake one, moved together with the sleeps.
func TestIntegrationSuite(t *testing.T) { forEachServerTarget(t, registrySuite) }

// forEachServerTarget runs fn on every server of the matrix, once for every
// backend the server runs, the backends of one server in parallel (they
// share the server; their waits overlap). Real servers and real TTLs: it is
// skipped in -short mode.
func forEachServerTarget(t *testing.T, fn func(t *testing.T, tg target)) {
	if testing.Short() {
		t.Skip("real servers and real TTLs: skipped in -short mode")
	}
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		for _, tg := range serverTargets(t, inst) {
			t.Run(tg.name, func(t *testing.T) {
				t.Parallel()
				fn(t, tg)
			})
		}
	})
}

// TestIntegrationBackendByVersion pins what auto picks on the servers of the
// matrix, as docs/redis-versions.md states it.
func TestIntegrationBackendByVersion(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		var want Backend
		switch {
		case strings.HasPrefix(s.Name, "redis-7.0."), strings.HasPrefix(s.Name, "redis-7.2."), strings.HasPrefix(s.Name, "redis-6."):
			want = BackendEmulated
		case strings.HasPrefix(s.Name, "redis-7.4."):
			want = BackendHPExpire
		case strings.HasPrefix(s.Name, "redis-8."), strings.HasPrefix(s.Name, "valkey-9."):
			want = BackendNative
		default:
			t.Skipf("no expectation recorded for %s", s.Name)
		}
		inst := redistest.Start(t, s)
		reg, err := New(t.Context(), inst.Client(t), keyspace.NewKeys("herd", false), Config{})
		if err != nil || reg.Backend() != want {
			t.Fatalf("New on %s picked %v (%v), want %s", s.Name, reg, err, want)
		}
	})
}

// TestIntegrationReadRefused: a user whose ACL refuses HGETALL gets an
// error naming the refusal, on every backend (the emulated one reads in a
// transaction, where Redis reports the refusal as an aborted EXEC).
func TestIntegrationReadRefused(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		admin := inst.Client(t)
		if err := admin.Do(t.Context(), "ACL", "SETUSER", "nohgetall", "on", ">pw", "~*", "&*", "+@all", "-hgetall").Err(); err != nil {
			t.Fatal(err)
		}
		o := inst.Options()
		o.Username, o.Password = "nohgetall", "pw"
		c := redis.NewClient(o)
		defer c.Close()
		for _, b := range []Backend{BackendAuto, BackendEmulated} {
			reg, err := New(t.Context(), c, keyspace.NewKeys("herd-"+string(b), false), Config{Backend: b})
			if err != nil {
				t.Fatalf("New(%s): %v", b, err)
			}
			_, err = reg.Processes(t.Context())
			if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(strings.ToLower(err.Error()), "hgetall") {
				t.Errorf("Processes on %s with HGETALL refused = %v; want the NOPERM naming hgetall", reg.Backend(), err)
			}
		}
	})
}

// TestIntegrationThousand: 1,000 processes register and heartbeat from
// goroutines while a master tracks them; a few stop without unregistering;
// then Redis restarts with no data.
func TestIntegrationThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 processes on every server: skipped in -short mode")
	}
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		thousand(t, inst)
	})
}

// Timings of TestIntegrationThousand, on the real clock: twelve heartbeats
// before a live slave could look stale, so that a busy machine (-race, two
// shared cores) does not make one.
const (
	kProcesses   = 1000
	kStopped     = 5
	kHeartbeat   = 500 * time.Millisecond
	kSlaveLimit  = 6 * time.Second
	kSweep       = 500 * time.Millisecond
	kProcessTTL  = 20 * time.Second
	kWaitForever = 2 * time.Minute // bounds a broken run; never asserted
)

// proc is one simulated process: a Registry of its own and a heartbeat loop.
type proc struct {
	id     string
	reg    *Registry
	cancel context.CancelFunc
	beats  atomic.Int64 // successful heartbeats
	gap    atomic.Int64 // longest time between two successful heartbeats (ns)
}

func thousand(t *testing.T, inst *redistest.Instance) {
	// The relations masterelection.Config checks between the timings.
	if kProcessTTL <= 2*kHeartbeat || kSlaveLimit <= kHeartbeat {
		t.Fatalf("ProcessTTL %v, heartbeat %v, SlaveTimeout %v: ProcessTTL must exceed twice the heartbeat, SlaveTimeout the heartbeat", kProcessTTL, kHeartbeat, kSlaveLimit)
	}
	opts := inst.Options()
	opts.PoolSize = 64
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*kWaitForever)
	defer cancel()
	keys := keyspace.NewKeys("thousand", false)
	ropts := Config{ProcessTTL: kProcessTTL, OnError: func(err error) { t.Errorf("registry: %v", err) }}

	// The processes: half registered before the master starts tracking.
	procs := make([]*proc, kProcesses)
	var wg sync.WaitGroup
	defer wg.Wait()
	startProc := func(i int) {
		reg, err := New(ctx, c, keys, ropts)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		p := &proc{id: fmt.Sprintf("w%04d", i), reg: reg}
		if err := reg.Register(ctx, ProcessInfo{ProcessID: p.id, Role: RoleSlave, Identifier: "worker"}); err != nil {
			t.Fatalf("Register: %v", err)
		}
		pctx, pcancel := context.WithCancel(ctx)
		p.cancel = pcancel
		procs[i] = p
		wg.Go(func() { p.loop(pctx) })
	}
	for i := range kProcesses / 2 {
		startProc(i)
	}
	t.Logf("%s: backend %s", inst.Server.Name, procs[0].reg.Backend())

	// The master: its registry, its tracker, its one subscription.
	master, err := New(ctx, c, keys, ropts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, keys.Master, "master", 0).Err(); err != nil { // the lock, as acquire leaves it
		t.Fatal(err)
	}
	if err := c.Set(ctx, keys.Term, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := master.Register(ctx, ProcessInfo{ProcessID: "master", Role: RoleMaster, Term: 1}); err != nil {
		t.Fatal(err)
	}
	log := &eventLog{}
	tr, err := NewSlaveTracker(master, TrackerConfig{
		SlaveTimeout: kSlaveLimit, SweepInterval: kSweep, Self: "master",
		OnJoin: log.join, OnLeave: log.leave, OnError: log.fail,
	})
	if err != nil {
		t.Fatal(err)
	}
	var sweeps atomic.Int64
	tr.afterSweep = func() { sweeps.Add(1) }
	ps := c.Subscribe(ctx, keys.RegistryEvents)
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		for m := range ps.Channel() {
			tr.Notice([]byte(m.Payload))
		}
	})
	defer func() { _ = ps.Close() }()
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	wg.Go(func() { _ = tr.Run(tctx) })

	for i := kProcesses / 2; i < kProcesses; i++ {
		startProc(i)
	}
	defer func() {
		for _, p := range procs {
			p.cancel()
		}
	}()

	all := ids(procs)
	waitFor(t, "every process reported joined", func() bool { return slices.Equal(log.present(), all) })
	if dup := log.duplicates(); len(dup) > 0 {
		t.Fatalf("reported more than once: %v", dup)
	}

	// A few stop without unregistering: each is removed and reported once.
	stopped := map[string]time.Time{}
	for i := 0; i < kProcesses; i += kProcesses / kStopped {
		procs[i].cancel()
		stopped[procs[i].id] = time.Now()
	}
	live := []string{}
	for _, p := range procs {
		if _, ok := stopped[p.id]; !ok {
			live = append(live, p.id)
		}
	}
	waitFor(t, "the stopped processes reported gone", func() bool { return slices.Equal(log.present(), live) })
	// Two more sweeps must report nothing more about them.
	for n := sweeps.Load() + 2; sweeps.Load() < n; {
		time.Sleep(kSweep / 5)
	}
	var slowest time.Duration
	for id, at := range stopped {
		evs := log.since(id, at)
		if len(evs) != 1 || evs[0].join {
			t.Errorf("stopped process %s: callbacks %v after it stopped, want one leave", id, evs)
			continue
		}
		slowest = max(slowest, evs[0].at.Sub(at))
		if _, err := master.Process(ctx, id); !isNotFound(err) {
			t.Errorf("stopped process %s is still registered: %v", id, err)
		}
	}
	if dup := log.duplicates(); len(dup) > 0 {
		t.Fatalf("reported more than once: %v", dup)
	}
	// A live process is reported gone only if it could not heartbeat for
	// SlaveTimeout; count it (a starved machine), do not fail on it.
	flaps := log.count() - kProcesses - kStopped
	maxGap := time.Duration(0)
	for _, p := range procs {
		maxGap = max(maxGap, time.Duration(p.gap.Load()))
	}
	began := time.Now()
	listedNow, err := master.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d stopped processes reported gone at most %s after they stopped (SlaveTimeout %s, sweep every %s); longest heartbeat gap of a live process %s; %d callbacks about live processes; one Processes() of %d entries took %s",
		inst.Server.Name, kStopped, slowest.Round(time.Millisecond), kSlaveLimit, kSweep, maxGap.Round(time.Millisecond),
		flaps, len(listedNow), time.Since(began).Round(time.Millisecond))
	before := log.count()

	// Redis restarts with no data: every live process is listed again once
	// it has heartbeaten once more.
	restartBegan := time.Now()
	inst.Restart(t)
	t.Logf("%s: restart took %s", inst.Server.Name, time.Since(restartBegan).Round(time.Millisecond))
	restarted := make(map[string]int64, len(live))
	for _, p := range procs {
		restarted[p.id] = p.beats.Load()
	}
	waitFor(t, "every live process heartbeating after the restart", func() bool {
		for _, p := range procs {
			if _, gone := stopped[p.id]; !gone && p.beats.Load() < restarted[p.id]+2 {
				return false
			}
		}
		return true
	})
	t.Logf("%s: every live process heartbeat twice %s after the restart began", inst.Server.Name, time.Since(restartBegan).Round(time.Millisecond))
	got, err := master.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := []string{}
	for _, p := range got {
		listed = append(listed, p.ProcessID)
	}
	if !slices.Equal(listed, live) {
		t.Fatalf("after the restart Processes lists %d processes, want the %d live ones", len(listed), len(live))
	}
	// The tracker ends up with exactly the live slaves.
	waitFor(t, "the tracker to see the live set again", func() bool { return slices.Equal(log.present(), live) })
	if dup := log.duplicates(); len(dup) > 0 {
		t.Fatalf("reported more than once: %v", dup)
	}
	t.Logf("%s: the restart caused %d callbacks (slaves not back before SlaveTimeout) and %d sweep errors; %d notices dropped in all",
		inst.Server.Name, log.count()-before, log.errors.Load(), tr.Dropped())
}

func (p *proc) loop(ctx context.Context) {
	tick := time.NewTicker(kHeartbeat)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		hctx, cancel := context.WithTimeout(ctx, kHeartbeat)
		err := p.reg.Heartbeat(hctx, p.id)
		cancel()
		if err == nil {
			now := time.Now()
			if g := int64(now.Sub(last)); g > p.gap.Load() {
				p.gap.Store(g)
			}
			last = now
			p.beats.Add(1)
		}
	}
}

func ids(ps []*proc) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.id
	}
	sort.Strings(out)
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsync.WaitWithin(t, kWaitForever, what, cond)
}

// eventLog records a tracker's callbacks.
type eventLog struct {
	mu     sync.Mutex
	in     map[string]bool // joined and not left since
	evs    []event
	dupes  []string // joins of present and leaves of absent slaves
	errors atomic.Int64
}

type event struct {
	id   string
	join bool
	at   time.Time
}

func (e event) String() string {
	if e.join {
		return "join:" + e.id
	}
	return "leave:" + e.id
}

func (l *eventLog) add(id string, join bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.in == nil {
		l.in = map[string]bool{}
	}
	if l.in[id] == join {
		l.dupes = append(l.dupes, event{id: id, join: join}.String())
	}
	if join {
		l.in[id] = true
	} else {
		delete(l.in, id)
	}
	l.evs = append(l.evs, event{id, join, time.Now()})
}

func (l *eventLog) join(n SlaveNode)               { l.add(n.NodeID, true) }
func (l *eventLog) leave(id string, _ LeaveReason) { l.add(id, false) }
func (l *eventLog) fail(error)                     { l.errors.Add(1) }

// present returns the slaves joined and not left, sorted.
func (l *eventLog) present() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sortedKeys(l.in)
}

func (l *eventLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.evs)
}

func (l *eventLog) duplicates() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.dupes)
}

// since returns the callbacks about id at or after t.
func (l *eventLog) since(id string, t time.Time) []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []event
	for _, e := range l.evs {
		if e.id == id && !e.at.Before(t) {
			out = append(out, e)
		}
	}
	return out
}
