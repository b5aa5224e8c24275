package masterelection

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

func roles(t *testing.T, m *MasterElection) map[string]registry.Role {
	t.Helper()
	ps, err := m.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]registry.Role{}
	for _, p := range ps {
		out[p.ProcessID] = p.Role
	}
	return out
}

func TestProcessesFollowRoles(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("a")
	cfg.Capabilities = registry.Capabilities{CanProcessDetections: true, MaxSubscriptions: 40, PreferredWorkload: 80}
	a, b := w.node(cfg), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	waitFor(t, "both registered with their roles", func() bool {
		r := roles(t, a.MasterElection)
		return r["a"] == registry.RoleMaster && r["b"] == registry.RoleSlave
	})
	p, err := a.Process(context.Background(), "a")
	if err != nil || p.Term != a.Term() || p.Capabilities.MaxSubscriptions != 40 || p.Identifier != "test-a" {
		t.Fatalf("a's entry = %+v, %v", p, err)
	}
	mp, err := b.MasterProcess(context.Background())
	if err != nil || mp.ProcessID != "a" || mp.Term != a.Term() {
		t.Fatalf("MasterProcess = %+v, %v", mp, err)
	}
	if n, err := a.SlaveCount(context.Background()); err != nil || n != 1 {
		t.Fatalf("SlaveCount = %d, %v", n, err)
	}
	if ch, err := a.ProcessChannel(context.Background(), "b"); err != nil || ch != "worker:slave:b" {
		t.Fatalf("ProcessChannel = %q, %v", ch, err)
	}

	// Handover: roles swap in the registry; the stopped node leaves it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b registered as master, a gone", func() bool {
		r := roles(t, b.MasterElection)
		_, aListed := r["a"]
		return r["b"] == registry.RoleMaster && !aListed
	})
}

func TestSlaveEventsOnTheMaster(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	// b registers after a became master: a learns it from b's notice.
	waitFor(t, "b reported joined", func() bool {
		return slices.Equal(a.rec.slaveEvents(), []string{"slave-registered:b"})
	})
	c := w.node(testConfig("c"))
	w.start(c)
	waitFor(t, "c reported joined", func() bool {
		return slices.Equal(a.rec.slaveEvents(), []string{"slave-registered:b", "slave-registered:c"})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c reported removed", func() bool {
		return slices.Equal(a.rec.slaveEvents(), []string{"slave-registered:b", "slave-registered:c", "slave-removed:c"})
	})
	if got := b.rec.slaveEvents(); len(got) != 0 {
		t.Fatalf("slave events on a slave: %v", got)
	}

	// A new master starts from the full set of slaves.
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b master", b.IsMaster)
	d := w.node(testConfig("d"))
	w.start(d)
	waitFor(t, "b reports d", func() bool {
		return slices.Contains(b.rec.slaveEvents(), "slave-registered:d")
	})
	// Several sweeps later nothing is reported twice.
	w.advance(3*time.Second, 250*time.Millisecond, b, d)
	if got := b.rec.slaveEvents(); !slices.Equal(got, []string{"slave-registered:d"}) {
		t.Fatalf("b's slave events %v", got)
	}
}

func TestStaleSlaveIsRemovedOnce(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("a")
	cfg.SlaveTimeout = 2 * time.Second
	a, b := w.node(cfg), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	waitFor(t, "b joined", func() bool { return slices.Contains(a.rec.slaveEvents(), "slave-registered:b") })
	// b's clock is frozen: it stops heartbeating but its entry's TTL (45s)
	// has not run out; the master removes it once lastSeen is 2s old.
	w.advance(4*time.Second, 100*time.Millisecond, a)
	waitFor(t, "b removed as stale", func() bool {
		return slices.Equal(a.rec.slaveEvents(), []string{"slave-registered:b", "slave-removed:b"})
	})
	// b wakes up (its clock, like a real one, moved on while it was paused)
	// and heartbeats: it registers again and is reported again.
	b.clk.Advance(4 * time.Second)
	w.advance(time.Second, 100*time.Millisecond, a, b)
	waitFor(t, "b back", func() bool {
		return slices.Equal(a.rec.slaveEvents(), []string{"slave-registered:b", "slave-removed:b", "slave-registered:b"})
	})
}

func TestRegistryMethodsNeedStart(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	if _, err := a.Processes(context.Background()); !errors.Is(err, ErrNoRegistry) {
		t.Fatalf("Processes before Start = %v", err)
	}
	if a.Registry() != nil {
		t.Fatal("registry before Start")
	}
}

func TestValidateRegistryTimings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProcessTTL = 15 * time.Second // not more than twice the 10s heartbeat
	if err := cfg.Validate(); err == nil {
		t.Fatal("ProcessTTL of 15s accepted with a 10s heartbeat")
	}
}

func TestSetMetadataReachesTheRegistry(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.start(a)
	a.SetMetadata(map[string]any{"zone": "eu-1"})
	waitFor(t, "metadata in the registry", func() bool {
		p, err := a.Process(context.Background(), "a")
		return err == nil && p.Metadata["zone"] == "eu-1" && p.Role == registry.RoleMaster
	})
}

// A master whose self-fencing deadline passed while its slave tracker was
// about to report a leave (as when a paused process resumes and both run at
// once) must not report it: it is not master any more.
func TestNoSlaveEventAfterTheDeadline(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("a")
	cfg.SlaveTimeout = 2 * time.Second
	renewals := newScriptFault(rdb.RenewSHA, errors.New("injected: connection reset"))
	a, b := w.nodeWith(cfg, renewals), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	waitFor(t, "b joined", func() bool { return slices.Equal(a.rec.slaveEvents(), []string{"slave-registered:b"}) })

	// The test holds the lock slave events are emitted under: the tracker's
	// leave of b waits for it first, then the loop's end of the mastership.
	a.members.trackMu.Lock()
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			a.members.trackMu.Unlock()
		}
	}
	defer unlock()
	// b is frozen: it stops heartbeating and goes stale; a still renews.
	w.until(func() bool {
		_, err := a.Process(context.Background(), "b")
		return errors.Is(err, registry.ErrNotFound)
	}, 5*time.Second, 100*time.Millisecond, "b removed as stale", a)
	time.Sleep(20 * time.Millisecond) // the tracker goes on to report the leave, and waits
	// Now a's renewals fail until its deadline passes and the loop ends the
	// mastership (it too waits for the lock).
	renewals.set(faultFail, -1)
	w.until(func() bool { return a.core.mastership.Load() == nil }, 5*time.Second, 100*time.Millisecond, "a's mastership ended", a)
	if a.IsMaster() {
		t.Fatal("a master after its mastership ended")
	}
	unlock()
	a.rec.waitPrefix(t, "started", "acquired", "completed:master", "lost")
	settle(a)
	if got := a.rec.slaveEvents(); !slices.Equal(got, []string{"slave-registered:b"}) {
		t.Fatalf("slave events %v: a reported b's leave when it was no longer master", got)
	}
}

// slaveEvent emits only while the mastership is current and its deadline
// has not passed, whatever the state of its ctx.
func TestSlaveEventNeedsTheMastership(t *testing.T) {
	tests := []struct {
		name     string
		current  bool          // l is the election's mastership
		deadline time.Duration // l's deadline from now
		cancel   bool          // l's ctx is cancelled
		want     bool
	}{
		{name: "master", current: true, deadline: time.Second, want: true},
		{name: "deadline passed, loop not yet run", current: true, deadline: 0},
		{name: "ended, ctx not yet cancelled", deadline: time.Second},
		{name: "ended", deadline: time.Second, cancel: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			n := w.node(testConfig("a"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l := n.core.newMastership(ctx, 7, n.clk.Now().Sub(n.base)+tt.deadline)
			defer l.endCtx()
			if tt.current {
				n.core.mastership.Store(l)
				defer n.core.mastership.Store(nil)
			}
			if tt.cancel {
				l.endCtx()
			}
			n.members.slaveEvent(l, topicSlaveRemoved, payload{nodeID: "b"})
			n.members.slaveEvent(l, topicSlaveRegistered, payload{slave: registry.SlaveNode{NodeID: "c"}})
			// One handler sees events in order: once this one is seen, so
			// is every slave event emitted before it.
			n.emitError(errors.New("marker"))
			waitFor(t, "marker delivered", func() bool { return len(n.rec.errors()) == 1 })
			var want []string
			if tt.want {
				want = []string{"slave-removed:b", "slave-registered:c"}
			}
			if got := n.rec.slaveEvents(); !slices.Equal(got, want) {
				t.Fatalf("slave events %v, want %v", got, want)
			}
		})
	}
}

// TestSlaveHeartbeatRidesTheCheck: a slave's registry heartbeat goes with
// its periodic check (rdb.CheckBeat), so its entry's lastSeen keeps up;
// when Redis refuses the heartbeat's write (the registry hash replaced by
// garbage), the check in the same call is answered all the same: the
// failure is a heartbeat error event, never a failed check.
func TestSlaveHeartbeatRidesTheCheck(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("b")
	a, b := w.node(testConfig("a")), w.node(cfg)
	w.start(a)
	w.start(b)
	w.registered(a, "master")
	w.registered(b, "slave")
	w.advance(4*cfg.CheckInterval, 50*time.Millisecond, a, b)
	p, err := a.Process(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if age := b.clk.Now().Sub(p.LastSeen); age > cfg.CheckInterval {
		t.Fatalf("b's lastSeen is %v old, want at most CheckInterval (%v)", age, cfg.CheckInterval)
	}

	w.mr.Del(b.keys.Processes)
	if err := w.mr.Set(b.keys.Processes, "garbage"); err != nil {
		t.Fatal(err)
	}
	before := len(b.rec.errors())
	w.advance(3*cfg.CheckInterval, 50*time.Millisecond, b) // a stands still: only b's calls run
	var beat, check int
	for _, err := range b.rec.errors()[before:] {
		switch {
		case errors.Is(err, registry.ErrCorruptEntry):
			beat++
		case strings.Contains(err.Error(), "check master lock"):
			check++
		}
	}
	if beat == 0 || check != 0 {
		t.Fatalf("%d heartbeat errors (want some) and %d check errors (want none): %v", beat, check, b.rec.errors()[before:])
	}
	if b.IsMaster() || b.ObservedTerm() != a.Term() {
		t.Fatalf("b lost track of the master: master %v, observed term %d, want %d", b.IsMaster(), b.ObservedTerm(), a.Term())
	}
}

// TestDeadSlaveRemovedWithinATimeoutAndAThird: with slaves looking at the
// lock only once per HeartbeatInterval (CheckInterval's default), the
// master still sweeps every SlaveTimeout/3, so a slave that stops is
// reported removed within SlaveTimeout + SlaveTimeout/3 of its last
// heartbeat, as when slaves looked every LockTTL/6. At LockTTL 12s: within
// 8s, where sweeps every CheckInterval take up to 10s; b starts at four
// phases of a's sweeps. The 500ms of slack are fake time that passes while
// a sweep's reads are in flight on a busy machine (the tracker sets its
// next sweep when one ends).
func TestDeadSlaveRemovedWithinATimeoutAndAThird(t *testing.T) {
	for _, phase := range []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second} {
		t.Run(phase.String(), func(t *testing.T) {
			w := newWorld(t)
			cfgA, cfgB := testConfig("a"), testConfig("b")
			for _, c := range []*Config{&cfgA, &cfgB} {
				// The defaults at LockTTL 12s: HeartbeatInterval and
				// CheckInterval 4s, SlaveTimeout 6s, sweeps every 2s.
				c.LockTTL, c.HeartbeatInterval, c.CheckInterval = 12*time.Second, 0, 0
			}
			a, b := w.node(cfgA), w.node(cfgB)
			w.start(a)
			w.advance(phase, 100*time.Millisecond, a, b) // b not started: only its clock moves
			w.start(b)
			w.advance(5*time.Second, 100*time.Millisecond, a, b)
			if !slices.Equal(a.rec.slaveEvents(), []string{"slave-registered:b"}) {
				t.Fatalf("a's slave events before b stops: %v", a.rec.slaveEvents())
			}
			// b stops: its clock no longer moves, and its entry keeps the
			// lastSeen of its last heartbeat.
			p, err := a.Process(context.Background(), "b")
			if err != nil {
				t.Fatal(err)
			}
			limit := a.cfg.SlaveTimeout + a.cfg.SlaveTimeout/3
			for a.clk.Now().Sub(p.LastSeen) <= limit+500*time.Millisecond {
				w.advance(100*time.Millisecond, 100*time.Millisecond, a)
				time.Sleep(2 * time.Millisecond)
				if slices.Contains(a.rec.slaveEvents(), "slave-removed:b") {
					t.Logf("removed %v after its last heartbeat", a.clk.Now().Sub(p.LastSeen))
					return
				}
			}
			t.Fatalf("b not reported removed %v after its last heartbeat (SlaveTimeout %v + a third of it); events %v",
				a.clk.Now().Sub(p.LastSeen), a.cfg.SlaveTimeout, a.rec.slaveEvents())
		})
	}
}

// TestSlaveBeatRidesOnceAQuarterCheckIntervalOld pins when a slave's check
// carries its heartbeat: once the last write is a quarter of a
// CheckInterval old, not before. A check that carries none leaves the next
// write to the next periodic check, a CheckInterval later, which is within
// the membership loop's stand-in (1.25 CheckInterval after the last write)
// only from there: a later threshold makes the loop write on its own after
// a notice's check, a sooner one writes at every notice.
func TestSlaveBeatRidesOnceAQuarterCheckIntervalOld(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("b")
	b := w.node(cfg)
	mb := b.members
	now := b.clk.Now()
	if mb.beatDue(now) {
		t.Fatal("due before the membership loop let the heartbeat ride")
	}
	mb.beats.ride.Store(true)
	if !mb.beatDue(now) {
		t.Fatal("not due although the entry was never written")
	}
	mb.beats.wrote(now)
	quarter := cfg.CheckInterval / 4
	if mb.beatDue(now.Add(quarter - time.Millisecond)) {
		t.Fatalf("due %v after the last write, before a quarter of CheckInterval (%v)", quarter-time.Millisecond, quarter)
	}
	if !mb.beatDue(now.Add(quarter)) {
		t.Fatalf("not due a quarter of CheckInterval (%v) after the last write", quarter)
	}
	if got := mb.beats.since(now.Add(quarter)); got != quarter {
		t.Fatalf("since = %v, want %v", got, quarter)
	}
}
