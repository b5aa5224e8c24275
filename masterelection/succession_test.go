package masterelection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// TestSuccessionRanksTheHighestHashes: after any sequence of joins and
// leaves, the ranking is the maxSuccession live slaves that rank first
// (the highest priority, then the highest hash), and join and leave report
// exactly the changes of it. With one priority for all it is the hashes'
// order; with a few, every slave of a higher priority comes first.
func TestSuccessionRanksTheHighestHashes(t *testing.T) {
	for _, priorities := range []int{1, 3} {
		t.Run(fmt.Sprintf("priorities=%d", priorities), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			s := newSuccession(1795)
			priority := func(id string) int { return len(id) % priorities } // n0..n9 below n10..n39, when 2 or more
			live := map[string]bool{}
			for step := range 2000 {
				id := fmt.Sprintf("n%d", rng.IntN(40))
				before := slices.Clone(s.order)
				var changed bool
				if live[id] && rng.IntN(2) == 0 {
					delete(live, id)
					changed = s.leave(id)
				} else {
					live[id] = true
					changed = s.join(id, priority(id))
				}
				var want []string
				for other := range live {
					want = append(want, other)
				}
				slices.SortFunc(want, func(a, b string) int {
					pa, pb := priority(a), priority(b)
					switch {
					case pa != pb && pa > pb:
						return -1
					case pa != pb:
						return 1
					case rendezvousBefore(s.key, a, b):
						return -1
					}
					return 1
				})
				want = want[:min(len(want), maxSuccession)]
				if !slices.Equal(s.order, want) {
					t.Fatalf("step %d (%s): ranking %v, want %v", step, id, s.order, want)
				}
				if changed != !slices.Equal(before, s.order) {
					t.Fatalf("step %d (%s): reported changed=%v, ranking went from %v to %v", step, id, changed, before, s.order)
				}
			}
		})
	}
}

// rendezvousBefore is the succession's order among equal priorities.
func rendezvousBefore(key, a, b string) bool { return ranksBefore(key, a, 0, b, 0) }

// TestSuccessionPutsHigherPriorityFirst: among equal priorities each slave
// is first for some term (the hash spreads them), and a slave of higher
// priority is first for every term.
func TestSuccessionPutsHigherPriorityFirst(t *testing.T) {
	firsts := map[string]int{}
	for term := int64(1); term <= 200; term++ {
		s := newSuccession(term)
		for _, id := range []string{"a", "b", "c", "d"} {
			s.join(id, 0)
		}
		firsts[s.order[0]]++
		s.join("p", 1)
		if s.order[0] != "p" {
			t.Fatalf("term %d: ranking %v, want p (priority 1) first", term, s.order)
		}
		s.join("q", -1)
		if slices.Contains(s.order, "q") {
			t.Fatalf("term %d: ranking %v, want q (priority -1) below the others", term, s.order)
		}
	}
	if len(firsts) != 4 {
		t.Fatalf("first places among equal priorities over 200 terms: %v, want each of a..d", firsts)
	}
}

// TestContendDelay: the i-th ranked slave waits i steps, one not ranked
// waits past every ranked one and within ElectionJitter, and without a
// succession for the term a released lock is contended at once and an
// expired one within ElectionJitter.
func TestContendDelay(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("c")
	n := w.node(cfg)
	step := cfg.ElectionJitter / (maxSuccession + 1)
	ls := &loopState{next: rdb.Succession{Term: 7, Order: []string{"a", "c", "b"}}}
	for _, released := range []bool{true, false} {
		if d := n.core.contendDelay(ls, 7, released); d != step {
			t.Errorf("ranked second, released=%v: delay %v, want %v", released, d, step)
		}
	}
	ls.next.Order = []string{"a", "b"}
	for range 50 {
		if d := n.core.contendDelay(ls, 7, true); d < 2*step || d > cfg.ElectionJitter {
			t.Fatalf("not ranked: delay %v, want within [%v, %v]", d, 2*step, cfg.ElectionJitter)
		}
	}
	ls.next.Order = []string{"a", "b", "d", "e", "f", "g", "c"} // more than a master writes
	for range 50 {
		if d := n.core.contendDelay(ls, 7, true); d < maxSuccession*step || d > cfg.ElectionJitter {
			t.Fatalf("ranked past maxSuccession: delay %v, want within [%v, %v]", d, maxSuccession*step, cfg.ElectionJitter)
		}
	}
	if d := n.core.contendDelay(ls, 8, true); d != 0 {
		t.Errorf("succession of another term, released: delay %v, want 0", d)
	}
	for range 50 {
		if d := n.core.contendDelay(&loopState{}, 8, false); d < 0 || d > cfg.ElectionJitter {
			t.Fatalf("no succession, expired: delay %v, want within ElectionJitter", d)
		}
	}
}

// herdOf starts a master and n slaves on one world, each client recording
// its round trips, and waits until the master has published its
// succession and every slave has read it in a check.
func herdOf(t *testing.T, w *world, n int) (master *peer, slaves []*peer, wires map[string]*wire, next rdb.Succession) {
	t.Helper()
	names := scriptNames(t)
	loadScripts(t, w.client())
	wires = map[string]*wire{}
	master, wires["m"] = w.wiredNode(testConfig("m"), names)
	w.start(master)
	w.registered(master, "master")
	for i := range n {
		s, wire := w.wiredNode(testConfig(fmt.Sprintf("s%d", i)), names)
		wires[s.NodeID()] = wire
		w.start(s)
		w.registered(s, "slave")
		slaves = append(slaves, s)
	}
	term := master.Term()
	deadline := time.Now().Add(5 * time.Second)
	for {
		raw, _ := w.mr.Get(master.keys.Next)
		next = rdb.Succession{}
		_ = json.Unmarshal([]byte(raw), &next)
		if next.Term == term && len(next.Order) == min(n, maxSuccession) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no succession of term %d with %d slaves: %q", term, min(n, maxSuccession), raw)
		}
		time.Sleep(time.Millisecond)
	}
	all := append([]*peer{master}, slaves...)
	w.advance(testConfig("x").CheckInterval, 50*time.Millisecond, all...) // every slave checks: it reads the succession
	for _, wire := range wires {
		wire.settled()
	}
	return master, slaves, wires, next
}

// acquires counts the acquire scripts the wires saw since their last take.
func acquires(wires map[string]*wire) map[string]int {
	out := map[string]int{}
	for id, w := range wires {
		if n := count(w.settled(), "acquire"); n > 0 {
			out[id] = n
		}
	}
	return out
}

// sawTerm waits until every node of nodes has observed term.
func sawTerm(t *testing.T, nodes []*peer, term int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("every slave observed term %d", term), func() bool {
		for _, n := range nodes {
			if n.ObservedTerm() < term {
				return false
			}
		}
		return true
	})
}

// nodeIDOf returns n's node id, or "none".
func nodeIDOf(n *peer) string {
	if n == nil {
		return "none"
	}
	return n.NodeID()
}

// masterOf returns the node of nodes that is master, or nil.
func masterOf(nodes []*peer) *peer {
	for _, n := range nodes {
		if n.IsMaster() {
			return n
		}
	}
	return nil
}

// TestOneAcquirePerHandover: on a graceful Stop of the master of a herd of
// six, only the slave its succession ranks first sends an acquire; the
// others give way when its acquired notice comes, also once their turn
// would have come (issue: N−1 acquires per handover).
func TestOneAcquirePerHandover(t *testing.T) {
	w := newWorld(t)
	master, slaves, wires, next := herdOf(t, w, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := master.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new master", func() bool { return masterOf(slaves) != nil })
	settle(slaves...) // the acquired notice is read: every slave gives way
	cfg := testConfig("x")
	// Every turn comes and goes, and every slave's check that the notice
	// set off (noticeCheckDelay) is due.
	w.advance(max(2*cfg.ElectionJitter, cfg.CheckInterval/noticeCheckSpread)+10*time.Millisecond, 10*time.Millisecond, slaves...)
	sawTerm(t, slaves, masterOf(slaves).Term())
	if got := masterOf(slaves); got == nil || got.NodeID() != next.Order[0] {
		t.Errorf("new master %s, want %s, ranked first by %v", nodeIDOf(got), next.Order[0], next.Order)
	}
	if got := acquires(wires); len(got) != 1 || got[next.Order[0]] != 1 {
		t.Errorf("acquires per node after the handover: %v, want one, by %s", got, next.Order[0])
	}
}

// TestOneAcquirePerFailover: when the master is cut off (its clock stands
// still, as in a pause, so it neither renews nor releases), the lock
// expires and only the first-ranked slave acquires. Cut off too, the
// first-ranked costs one step: the second-ranked takes over and no other
// slave acquires.
func TestOneAcquirePerFailover(t *testing.T) {
	for _, firstPaused := range []bool{false, true} {
		t.Run(fmt.Sprintf("first-ranked paused=%v", firstPaused), func(t *testing.T) {
			w := newWorld(t)
			_, slaves, wires, next := herdOf(t, w, 5)
			running := slices.DeleteFunc(slices.Clone(slaves), func(n *peer) bool { return firstPaused && n.NodeID() == next.Order[0] })
			cfg := testConfig("x")
			// Up to the first acquisition in fake time; then every slave
			// reads its acquired notice, before the next turn could come,
			// and gives way.
			for moved := time.Duration(0); masterOf(running) == nil && moved < cfg.LockTTL+cfg.ElectionJitter; moved += 5 * time.Millisecond {
				w.advance(5*time.Millisecond, 5*time.Millisecond, running...)
			}
			settle(running...)
			// Every turn comes and goes, and every check that the notice
			// set off is due.
			w.advance(max(cfg.ElectionJitter, cfg.CheckInterval/noticeCheckSpread)+10*time.Millisecond, 10*time.Millisecond, running...)
			if m := masterOf(running); m != nil {
				sawTerm(t, running, m.Term())
			}
			want := next.Order[0]
			if firstPaused {
				want = next.Order[1]
			}
			if got := masterOf(running); got == nil || got.NodeID() != want {
				t.Fatalf("new master %v, want %s (succession %v)", nodeIDOf(got), want, next.Order)
			}
			if got := acquires(wires); len(got) != 1 || got[want] != 1 {
				t.Errorf("acquires per node after the failover: %v, want one, by %s", got, want)
			}
		})
	}
}

// TestSuccessionLeavesOutNonCandidates: a master ranks only slaves that
// contend; a herd whose first-ranked never contends would wait a step on
// every handover.
func TestSuccessionLeavesOutNonCandidates(t *testing.T) {
	w := newWorld(t)
	master := w.node(testConfig("m"))
	w.start(master)
	for i := range 4 {
		cfg := testConfig(fmt.Sprintf("s%d", i))
		cfg.NonCandidate = i != 2
		s := w.node(cfg)
		w.start(s)
		w.registered(s, "slave")
	}
	waitFor(t, "a succession of s2 alone", func() bool {
		raw, _ := w.mr.Get(master.keys.Next)
		var next rdb.Succession
		_ = json.Unmarshal([]byte(raw), &next)
		return next.Term == master.Term() && slices.Equal(next.Order, []string{"s2"})
	})
}

// TestForgedReleasesDoNotHoldBackTheTurns: released notices forged faster
// than a step (anyone who may PUBLISH can send them) while the master and
// the first-ranked slave are cut off must not push the next turns back: the
// other slaves still take over once the lock expires.
func TestForgedReleasesDoNotHoldBackTheTurns(t *testing.T) {
	w := newWorld(t)
	master, slaves, _, next := herdOf(t, w, 5)
	running := slices.DeleteFunc(slices.Clone(slaves), func(n *peer) bool { return n.NodeID() == next.Order[0] })
	forged := fmt.Sprintf(`{"event":"released","nodeId":%q,"term":%d}`, master.NodeID(), master.Term())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				w.mr.Publish(master.keys.Events, forged)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	// The forgeries go on until a slave is master, or for a whole LockTTL
	// of fake time after the lock expired and every turn came. The bound is
	// fake time: on a busy machine a step takes longer in real time, so
	// more forgeries arrive per step, which makes the test harder, never
	// flaky; a build whose released notices push the turns back fails it
	// on any machine. Which slave wins depends on where the last forged
	// notice left each one's turn; that one does is the point.
	cfg := testConfig("x")
	w.advance(cfg.LockTTL, 10*time.Millisecond, running...)
	w.until(func() bool { return masterOf(running) != nil }, cfg.ElectionJitter+cfg.LockTTL, 10*time.Millisecond,
		"a master while released notices are forged: forged notices held every turn back", running...)
}

// TestNoTurnAfterCandidacyEnds: a slave whose turn is pending when it stops
// being a candidate does not take the lock.
func TestNoTurnAfterCandidacyEnds(t *testing.T) {
	w := newWorld(t)
	master, slaves, _, next := herdOf(t, w, 5)
	var running []*peer
	for _, s := range slaves {
		if s.NodeID() == next.Order[0] {
			s.SetCandidate(false) // its turn, the first, passes unused
		} else {
			running = append(running, s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := master.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the released notice reaches every slave
	settle(running...)                // and sets its turn, due in fake time
	for _, s := range running {
		s.SetCandidate(false)
	}
	settle(running...)
	w.advance(2*testConfig("x").ElectionJitter, 10*time.Millisecond, slaves...)
	if got := masterOf(slaves); got != nil {
		t.Fatalf("%s became master after SetCandidate(false)", got.NodeID())
	}
}

// TestHandoverWhenNoRankedSlaveAnswers: a release is announced only to the
// slaves the succession ranks; when none of them takes the lock (here it
// names processes that do not exist), the others find the free lock at
// their next check and one of them takes over after the turns, within
// CheckInterval + ElectionJitter of the release.
func TestHandoverWhenNoRankedSlaveAnswers(t *testing.T) {
	w := newWorld(t)
	master, slaves, _, _ := herdOf(t, w, 4)
	ghosts := rdb.Succession{Term: master.Term(), Order: []string{"ghost-1", "ghost-2", "ghost-3"}}
	if ok, err := rdb.WriteSuccession(context.Background(), w.client(), master.keys, master.NodeID(), ghosts); !ok || err != nil {
		t.Fatalf("write the succession: %v, %v", ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := master.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // real time: no slave has a turn at once
	if m := masterOf(slaves); m != nil {
		t.Fatalf("%s took over at once, although the succession ranks no slave", m.NodeID())
	}
	cfg := testConfig("x")
	step := 5 * time.Millisecond
	for moved := time.Duration(0); masterOf(slaves) == nil && moved <= cfg.CheckInterval+cfg.ElectionJitter+step; moved += step {
		w.advance(step, step, slaves...)
	}
	if masterOf(slaves) == nil {
		t.Fatalf("no new master within CheckInterval + ElectionJitter (%v) of the release", cfg.CheckInterval+cfg.ElectionJitter)
	}
}

// TestSuccessionWrittenAgain: a succession write that Redis never answered
// is sent again at the next CheckInterval, not left until the ranking
// changes (here it never does): without it the next handover would have
// every slave contend.
func TestSuccessionWrittenAgain(t *testing.T) {
	w := newWorld(t)
	fault := newScriptFault(rdb.NextSHA, errors.New("injected: no answer"))
	fault.set(faultFail, 2) // the first write, and the first time again
	master := w.nodeWith(testConfig("m"), fault)
	w.start(master)
	w.registered(master, "master")
	slave := w.node(testConfig("s"))
	w.start(slave)
	w.registered(slave, "slave")
	written := func() bool {
		raw, _ := w.mr.Get(master.keys.Next)
		var next rdb.Succession
		_ = json.Unmarshal([]byte(raw), &next)
		return next.Term == master.Term() && slices.Equal(next.Order, []string{"s"})
	}
	waitFor(t, "the first write faulted", func() bool { return fault.faulted() == 1 })
	settle(master)
	if written() {
		t.Fatal("a succession was written through the fault")
	}
	cfg := testConfig("m")
	w.advance(cfg.CheckInterval, 10*time.Millisecond, master, slave)
	waitFor(t, "the write sent again, and faulted", func() bool { return fault.faulted() == 2 })
	w.advance(cfg.CheckInterval, 10*time.Millisecond, master, slave)
	waitFor(t, "the succession written by a third attempt", written)
}
