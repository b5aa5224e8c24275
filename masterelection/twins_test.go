package masterelection

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/registry"
)

// entryOf reads the registry entry of id as stored.
func entryOf(t *testing.T, w *world, n *peer, id string) registry.ProcessInfo {
	t.Helper()
	raw := w.mr.HGet(n.Keys().Processes, id)
	var p registry.ProcessInfo
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatalf("entry of %q: %v (%q)", id, err, raw)
	}
	return p
}

// startAsync starts n on a goroutine of its own: its Start waits on fake
// time, which the test moves.
func startAsync(n *peer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- n.Start(context.Background()) }()
	return done
}

// TestTwinIsRefused: a process started under the NodeID of a live process,
// a master or a slave, is refused: Start returns ErrDuplicateNodeID naming
// the id, it never contends nor becomes master, and the live process keeps
// its role and its registry entry, also after the twin's Stop.
func TestTwinIsRefused(t *testing.T) {
	for _, victim := range []string{"m", "s"} {
		t.Run("twin of "+victim, func(t *testing.T) {
			w := newWorld(t)
			m, s := w.node(testConfig("m")), w.node(testConfig("s"))
			w.start(m)
			w.start(s)
			w.until(m.IsMaster, 5*time.Second, 50*time.Millisecond, "m master", m, s)
			live := map[string]*peer{"m": m, "s": s}[victim]
			twin := w.node(testConfig(victim))
			started := startAsync(twin)
			w.until(func() bool { return len(started) > 0 }, 5*time.Second, 50*time.Millisecond, "twin's Start returns", m, s, twin)
			err := <-started
			if !errors.Is(err, ErrDuplicateNodeID) || !strings.Contains(err.Error(), `"`+victim+`"`) ||
				!errors.Is(err, registry.ErrInUse) || !strings.Contains(err.Error(), live.Incarnation()) {
				t.Fatalf("twin's Start = %v, want ErrDuplicateNodeID naming %q and the live incarnation", err, victim)
			}
			if !errors.Is(twin.SteppedAside(), ErrDuplicateNodeID) || twin.HoldsNodeID() {
				t.Fatalf("twin: SteppedAside %v, HoldsNodeID %v", twin.SteppedAside(), twin.HoldsNodeID())
			}
			if slices.Contains(twin.rec.roleEvents(), "acquired") {
				t.Fatalf("the twin became master: %v", twin.rec.roleEvents())
			}
			w.advance(3*time.Second, 100*time.Millisecond, m, s)
			if !m.IsMaster() || s.IsMaster() || !live.HoldsNodeID() || live.SteppedAside() != nil {
				t.Fatalf("after the twin: m master %v, s master %v, %s holds its id %v", m.IsMaster(), s.IsMaster(), victim, live.HoldsNodeID())
			}
			if got := entryOf(t, w, live, victim).Incarnation; got != live.Incarnation() {
				t.Fatalf("entry of %q has incarnation %q, want the live process's %q", victim, got, live.Incarnation())
			}
		})
	}
}

// TestRestartAfterACrashIsNotATwin: a process that stopped writing (frozen
// here, as a crashed or paused process is) is replaced by a new process
// under its NodeID once its entry has gone Quiet (SlaveTimeout) without a
// write; Start waits that long. When the old process comes back, its
// heartbeat is refused and it steps aside, leaving the entry to the new one.
func TestRestartAfterACrashIsNotATwin(t *testing.T) {
	w := newWorld(t)
	m, old := w.node(testConfig("m")), w.node(testConfig("s"))
	w.start(m)
	w.start(old)
	w.until(m.IsMaster, 5*time.Second, 50*time.Millisecond, "m master", m, old)

	// old freezes (its clock stops: no heartbeat); its successor starts.
	fresh := w.node(testConfig("s"))
	started := startAsync(fresh)
	waited := w.until(func() bool { return len(started) > 0 }, 10*time.Second, 50*time.Millisecond, "successor's Start returns", m, fresh)
	if err := <-started; err != nil {
		t.Fatalf("successor's Start: %v", err)
	}
	if quiet := fresh.quiet(); waited < quiet/2 || waited > 2*quiet+time.Second {
		t.Errorf("Start returned after %v of fake time, want about Quiet (%v) after old's last write", waited, quiet)
	}
	if !fresh.HoldsNodeID() || entryOf(t, w, fresh, "s").Incarnation != fresh.Incarnation() {
		t.Fatalf("successor does not hold the id: HoldsNodeID %v", fresh.HoldsNodeID())
	}

	// old comes back: its next heartbeat is refused, and it steps aside.
	w.until(func() bool { return old.SteppedAside() != nil }, 5*time.Second, 50*time.Millisecond, "old steps aside", m, fresh, old)
	if err := old.SteppedAside(); !errors.Is(err, ErrDuplicateNodeID) || !strings.Contains(err.Error(), fresh.Incarnation()) {
		t.Fatalf("old stepped aside with %v, want ErrDuplicateNodeID naming the successor's incarnation", err)
	}
	waitFor(t, "old's error event", func() bool {
		return slices.ContainsFunc(old.rec.errors(), func(err error) bool { return errors.Is(err, ErrDuplicateNodeID) })
	})
	w.advance(2*time.Second, 100*time.Millisecond, m, fresh)
	if !fresh.HoldsNodeID() || entryOf(t, w, fresh, "s").Incarnation != fresh.Incarnation() || !m.IsMaster() {
		t.Fatal("the successor lost its id or m its mastership after old stepped aside")
	}
}

// TestTwinNeverContendsOnTheWay: a twin that finds the lock free while it
// waits for its first registration does not take it: it waits for the
// registry to make the id its own, which never happens.
func TestTwinNeverContendsOnTheWay(t *testing.T) {
	w := newWorld(t)
	s := w.node(testConfig("s"))
	nc := testConfig("s")
	s.SetCandidate(false) // s follows but never takes the lock: it stays free
	w.start(s)
	twin := w.node(nc)
	started := startAsync(twin)
	w.until(func() bool { return len(started) > 0 }, 5*time.Second, 50*time.Millisecond, "twin's Start returns", s, twin)
	if err := <-started; !errors.Is(err, ErrDuplicateNodeID) {
		t.Fatalf("twin's Start = %v, want ErrDuplicateNodeID", err)
	}
	if holder := w.mr.Exists(s.Keys().Master); holder || slices.Contains(twin.rec.roleEvents(), "acquired") {
		t.Fatalf("the twin took the free lock on its way: lock exists %v, events %v", holder, twin.rec.roleEvents())
	}
}

// TestHoldsNodeIDInStandaloneMode: without a registry there is nothing to
// hold the id against: work gated on HoldsNodeID runs.
func TestHoldsNodeIDInStandaloneMode(t *testing.T) {
	m, err := New(nil, Config{Standalone: true, NodeID: "solo"})
	if err != nil {
		t.Fatal(err)
	}
	if !m.HoldsNodeID() {
		t.Fatal("HoldsNodeID false in standalone mode")
	}
}
