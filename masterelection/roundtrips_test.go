package masterelection

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/wiretap"
)

// The round-trip budgets of the election (docs/performance.md, "Round-trip
// budgets"): these tests count what each operation sends and fail when one
// grows. Timings never are asserted; round trips are what a timing is made
// of on a quiet network.

// scriptNames maps the SHA1 of every script in ../internal/rdb to its file name
// without ".lua", so that a hook can name the EVALSHA calls it sees. The
// scripts that write run with the prelude writes.lua before their own text,
// so their digests are not those of their files: package rdb exports
// them.
func scriptNames(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "internal", "rdb", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts in ../internal/rdb: %v", err)
	}
	names := map[string]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(src)
		names[hex.EncodeToString(sum[:])] = strings.TrimSuffix(filepath.Base(f), ".lua")
	}
	for sha, name := range map[string]string{
		rdb.AcquireSHA: "acquire", rdb.AcquireRegisterSHA: "acquire", rdb.RenewSHA: "renew", rdb.ReleaseSHA: "release",
		rdb.CheckSHA: "check", rdb.RouteSHA: "route", rdb.RouteBatchSHA: "route_batch",
		rdb.RegistryProbeSHA: "registry_probe", rdb.RegistryPutSHA: "registry_put",
		rdb.RegistryRemoveSHA: "registry_remove", rdb.RegistryExpireSHA: "registry_expire",
		rdb.CheckBeatSHA: "check_beat", rdb.AskSHA: "ask", rdb.TakeSHA: "ask and acquire",
	} {
		names[sha] = name
	}
	return names
}

// loadScripts puts every script of herd into the server's script cache
// (rdb.Load), so that the counts below are those of a server that has
// seen herd before (a first call costs one more round trip: EVALSHA,
// NOSCRIPT, EVAL).
func loadScripts(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := rdb.Load(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// wire records the round trips of one client (wiretap: a pipeline is one
// round trip, new connections' handshakes are left out), EVALSHA named by
// its script and INFO by its section.
type wire struct {
	*wiretap.Tap
	scripts map[string]string
}

func newWire(scripts map[string]string) *wire {
	w := &wire{scripts: scripts}
	w.Tap = &wiretap.Tap{Name: w.name}
	return w
}

func (w *wire) name(cmd redis.Cmder) string {
	args := cmd.Args()
	if cmd.Name() == "evalsha" && len(args) > 1 {
		if s, ok := w.scripts[fmt.Sprint(args[1])]; ok {
			return s
		}
	}
	if cmd.Name() == "eval" && len(args) > 1 {
		sum := sha1.Sum([]byte(fmt.Sprint(args[1])))
		if s, ok := w.scripts[hex.EncodeToString(sum[:])]; ok {
			return s + " (eval)"
		}
	}
	if cmd.Name() == "info" && len(args) > 1 {
		return fmt.Sprintf("info %v", args[1])
	}
	return cmd.Name()
}

// settled waits until no round trip has started for 50 ms of real time
// (the loops have finished what the last clock move set off), then takes
// the round trips recorded since the last Take.
func (w *wire) settled() []string {
	for {
		n := w.Trips()
		time.Sleep(50 * time.Millisecond)
		if w.Trips() == n {
			return w.Take()
		}
	}
}

// wiredNode is a node whose client records its round trips.
func (w *world) wiredNode(cfg Config, names map[string]string) (*peer, *wire) {
	w.t.Helper()
	rec := newWire(names)
	c := w.client()
	c.AddHook(rec)
	clk := clock.NewFake(w.redisClock.Now())
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
	return n, rec
}

// count returns how many of trips are trip.
func count(trips []string, trip string) int {
	n := 0
	for _, t := range trips {
		if t == trip {
			n++
		}
	}
	return n
}

// sameTrips reports whether got and want hold the same round trips, in any
// order.
func sameTrips(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

// registered waits (in real time; the loops' timers do not move) until
// Redis holds n's registry entry with role.
func (w *world) registered(n *peer, role string) {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := w.mr.HGet(n.keys.Processes, n.NodeID())
		if strings.Contains(v, fmt.Sprintf("%q:%q", "role", role)) {
			settle(n)
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s not registered as %s: %q", n.NodeID(), role, v)
		}
		time.Sleep(time.Millisecond)
	}
}

// trackerRead is the round trip of a slave tracker's read of the registry
// on the emulated backend (miniredis has no hash-field TTLs): the entries
// and the registry's version in one MULTI.
const trackerRead = "multi+hgetall+get+get+exec"

// noticeRead is the tracker's read of the entries a notice names, to
// confirm it, in the same round trip as the version and the lock's holder.
const noticeRead = "multi+hmget+get+get+exec"

// TestRoundTripsStart: Start on a fresh lock, uncontested, sends one script
// call (rdb.AskTaking: the ACL access check, the registry's backend probe,
// INFO memory for the eviction check, the lock check, and the acquire with
// the new master's registration), not a pipeline, whose pool would keep a
// connection open, plus the subscription on a connection of its own, which
// the client's hooks do not see. Then its slave tracker reads the
// registry, one round trip (docs/performance.md, row 3s).
func TestRoundTripsStart(t *testing.T) {
	w := newWorld(t)
	names := scriptNames(t)
	loadScripts(t, w.client())
	a, wa := w.wiredNode(testConfig("a"), names)
	w.start(a)
	if !a.IsMaster() {
		t.Fatal("the only candidate of a fresh lock is not master")
	}
	startTrips := wa.Take()
	w.registered(a, "master")
	later := wa.settled()

	want := []string{"ask and acquire"}
	// The tracker's read may go out before Start returns: it follows the
	// acquire at once, on the membership goroutine.
	own := slices.DeleteFunc(slices.Clone(startTrips), func(s string) bool { return s == trackerRead })
	if !slices.Equal(own, want) {
		t.Errorf("Start sent %q before it returned; want %q in this order (the tracker read aside)", startTrips, want)
	}
	all := append(startTrips, later...)
	if got := count(all, "registry_put"); got != 0 {
		t.Errorf("the new master registered itself in %d round trips of their own, want none: the acquire does (all: %q)", got, all)
	}
	if got := count(all, trackerRead); got != 1 {
		t.Errorf("the new master's tracker read the registry in %d round trips, want 1 (all: %q)", got, all)
	}
	if got, want := len(all), len(want)+1; got != want {
		t.Errorf("Start and what follows it took %d round trips, want %d: %q", got, want, all)
	}
	if subs := w.mr.PubSubNumSub(a.keys.Events)[a.keys.Events]; subs != 1 {
		t.Errorf("%d subscriptions to %s, want 1", subs, a.keys.Events)
	}
}

// TestRoundTripsStartWithMetadataSetBefore: metadata set between New and
// Start (the way to give it, Config having none) is in the info Start's
// acquire registers: no registration of its own follows.
func TestRoundTripsStartWithMetadataSetBefore(t *testing.T) {
	w := newWorld(t)
	names := scriptNames(t)
	loadScripts(t, w.client())
	a, wa := w.wiredNode(testConfig("a"), names)
	if err := a.SetMetadata(map[string]any{"zone": "eu"}); err != nil {
		t.Fatal(err)
	}
	w.start(a)
	w.registered(a, "master")
	all := append(wa.Take(), wa.settled()...)
	if got := count(all, "registry_put"); got != 0 {
		t.Errorf("Start sent %d registrations of their own, want none: the acquire carried the metadata (all: %q)", got, all)
	}
	if v := w.mr.HGet(a.keys.Processes, "a"); !strings.Contains(v, `"zone":"eu"`) {
		t.Errorf("entry %s lacks the metadata", v)
	}
}

// TestRoundTripsStartUncached: on a server that has not cached herd's
// scripts, Start's questions with the acquire are answered NOSCRIPT and
// sent again whole (EVAL): one round trip more than on a server that has.
func TestRoundTripsStartUncached(t *testing.T) {
	w := newWorld(t)
	a, wa := w.wiredNode(testConfig("a"), scriptNames(t))
	w.start(a)
	if !a.IsMaster() {
		t.Fatal("the only candidate of a fresh lock is not master")
	}
	// The registration may come before the take, uncached too (EVALSHA,
	// NOSCRIPT, then EVAL).
	got := slices.DeleteFunc(wa.Take(), func(s string) bool {
		return s == "registry_put" || s == "registry_put (eval)" || s == trackerRead
	})
	want := []string{"ask and acquire", "ask and acquire (eval)"}
	if !slices.Equal(got, want) {
		t.Errorf("Start sent %q; want %q (registration and tracker read aside)", got, want)
	}
}

// TestRoundTripsRenew: a master renews with one round trip per
// HeartbeatInterval (the renew script) and heartbeats its registry entry
// with one more; its slave tracker reads the registry once per
// CheckInterval. Nothing else is sent at rest.
func TestRoundTripsRenew(t *testing.T) {
	w := newWorld(t)
	names := scriptNames(t)
	loadScripts(t, w.client())
	cfg := testConfig("a")
	a, wa := w.wiredNode(cfg, names)
	w.start(a)
	w.registered(a, "master")
	wa.settled()

	const beats = 3
	w.advance(beats*cfg.HeartbeatInterval, 50*time.Millisecond, a)
	trips := wa.settled()
	if !a.IsMaster() {
		t.Fatal("the master lost its lock")
	}
	sweeps := int(beats * cfg.HeartbeatInterval / cfg.CheckInterval)
	periodic(t, trips, map[string]int{"renew": beats, "registry_put": beats, trackerRead: sweeps})
}

// periodic checks the round trips of a window of fake time against the
// number of each that its timers allow: a timer's phase is its own (set when
// its loop last acted), so the window may end just before the last one,
// and one fewer passes; one more, or anything else, fails.
func periodic(t *testing.T, trips []string, want map[string]int) {
	t.Helper()
	total := 0
	for trip, n := range want {
		total += n
		if got := count(trips, trip); got > n || got < n-1 {
			t.Errorf("%d round trips %s, want %d (or %d): %q", got, trip, n, n-1, trips)
		}
	}
	if len(trips) > total {
		t.Errorf("%d round trips, want at most %d: %q", len(trips), total, trips)
	}
}

// TestRoundTripsSlaveStart: a process that starts while another holds the
// lock takes Start's look at it (the check in its first round trip, whose
// acquire found the lock held) as its first check: it sends no acquire of
// its own, and nothing but that round trip before its registration, which
// Start waits for.
func TestRoundTripsSlaveStart(t *testing.T) {
	w := newWorld(t)
	names := scriptNames(t)
	loadScripts(t, w.client())
	a, _ := w.wiredNode(testConfig("a"), names)
	w.start(a)
	w.registered(a, "master")
	b, wb := w.wiredNode(testConfig("b"), names)
	w.start(b)
	if b.IsMaster() {
		t.Fatal("b took the held lock")
	}
	startTrips := wb.Take()
	w.registered(b, "slave")
	all := append(startTrips, wb.settled()...)
	if got := count(all, "acquire"); got != 0 {
		t.Errorf("the slave sent %d acquires, want none (the lock is held): %q", got, all)
	}
	if len(all) < 2 || all[0] != "ask and acquire" || all[1] != "registry_put" {
		t.Errorf("the slave's round trips %q, want Start's questions, then its registration", all)
	}
	// A feed confirmed after Start's look makes the slave look once more
	// (the follow loop's check, carrying the heartbeat or not): a release
	// announced between the two is not missed.
	if rest := all[min(2, len(all)):]; len(rest) > 1 || (len(rest) == 1 && rest[0] != "check" && rest[0] != "check_beat") {
		t.Errorf("after its registration the slave sent %q, want at most one look at the lock", rest)
	}
}

// TestRoundTripsSlave: a slave at rest makes one round trip, one script
// call, per CheckInterval: its check of the lock with its registry
// heartbeat (issue 28: they were two).
func TestRoundTripsSlave(t *testing.T) {
	w := newWorld(t)
	names := scriptNames(t)
	loadScripts(t, w.client())
	cfg := testConfig("b")
	a, _ := w.wiredNode(testConfig("a"), names)
	w.start(a)
	b, wb := w.wiredNode(cfg, names)
	w.start(b)
	w.registered(b, "slave")
	wb.settled()

	const checks = 4
	w.advance(checks*cfg.CheckInterval, 50*time.Millisecond, a, b)
	trips := wb.settled()
	if !a.IsMaster() || b.IsMaster() {
		t.Fatalf("roles changed: a master %v, b master %v", a.IsMaster(), b.IsMaster())
	}
	periodic(t, trips, map[string]int{"check_beat": checks})
}

// TestRoundTripsHandover: a graceful handover is the master's release (whose
// script publishes the notice: no round trip of its own) and the slave's
// acquire, which the notice sets off with no check before it; then the old
// master unregisters, and the new one registers and its tracker reads the
// registry, one round trip each.
func TestRoundTripsHandover(t *testing.T) {
	w := newWorld(t)
	names := scriptNames(t)
	loadScripts(t, w.client())
	a, wa := w.wiredNode(testConfig("a"), names)
	w.start(a)
	b, wb := w.wiredNode(testConfig("b"), names)
	w.start(b)
	w.registered(a, "master")
	w.registered(b, "slave")
	wa.settled()
	wb.settled()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	w.registered(b, "master") // real time only: the notice, not a timer, wakes b
	if !b.IsMaster() {
		t.Fatal("b did not take over")
	}
	old, next := wa.settled(), wb.settled()
	if want := []string{"release", "registry_remove"}; !slices.Equal(old, want) {
		t.Errorf("the old master sent %q, want %q", old, want)
	}
	if len(next) == 0 || next[0] != "acquire" {
		t.Errorf("the slave's first round trip after the release: %q, want acquire (no check: the notice says the lock is free)", next)
	}
	// The old master's unregistered notice may reach the new master's
	// tracker after it subscribed: the tracker confirms it with one read
	// of that entry (notices are hints, confirmed by a read), and no more.
	// A hand-over's acquire is the plain one: the registration follows it
	// (only Start's first acquire registers the new master in its call).
	want := []string{"acquire", "registry_put", trackerRead}
	if confirmed := append(slices.Clone(want), noticeRead); !sameTrips(next, want) && !sameTrips(next, confirmed) {
		t.Errorf("the new master sent %q, want %q in any order after the acquire (and at most %q confirming the old master's unregistered notice)", next, want, noticeRead)
	}
}

// TestFirstLookExpiredIsNotTaken: Start's look at a lock that has expired
// since (a slow start) is not taken for the first check: the first attempt
// goes to the lock. A fresh one is.
func TestFirstLookExpiredIsNotTaken(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	c := a.core
	held := rdb.MasterState{Exists: true, NodeID: "b", Term: 7, TTL: time.Second}
	stale := &loopState{unresolved: true, firstLook: &lockLook{st: held, at: c.clock.Now().Add(-time.Second)}}
	if _, ok := c.takeFirstLook(stale); ok || stale.firstLook != nil || !stale.unresolved {
		t.Errorf("a look older than the lock's TTL was taken (or kept): unresolved %v", stale.unresolved)
	}
	fresh := &loopState{unresolved: true, firstLook: &lockLook{st: held, at: c.clock.Now()}}
	if next, ok := c.takeFirstLook(fresh); !ok || fresh.unresolved || next <= 0 || next > time.Second+time.Millisecond {
		t.Errorf("a fresh look: next %v, taken %v, unresolved %v; want taken, resolved, next look within the TTL", next, ok, fresh.unresolved)
	}
}
