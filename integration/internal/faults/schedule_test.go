//go:build linux

package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/internal/testkit/redistest"
)

// fault is one step of a schedule: what to break, for how long, and how
// long to let the cluster run once it has settled again.
type fault struct {
	kind    string
	target  string   // network faults: "master" or "slave"; FaultRankedPause: "first-ranked"
	streams []string // network faults: "upstream" (requests), "downstream" (replies) or both
	latency time.Duration
	hold    time.Duration
	settle  time.Duration
	// inner are played while this fault is in force (overlapping faults),
	// each once the cluster has settled without this fault's target; this
	// fault is undone tail after the last one ends, and no sooner than hold
	// after it began. Inner faults have no inner faults of their own.
	inner []fault
	tail  time.Duration
	// as names the composite this fault and its inner ones stand for
	// (FaultHandoverLoss), or is "".
	as string
	// variant and via are a transfer's (see the Transfer* constants; via is
	// "stdin" or "control"); variant is also a burst's ("after" or
	// "during").
	variant, via string
	// n is a burst's size, and for variant "during" count is the number of
	// the master's stores after which it is killed; for a consumer blip, n
	// is the bytes of replies each connection passes before it is closed.
	n, count int
}

func (f fault) String() string {
	s := fmt.Sprintf("%s hold=%v", f.kind, f.hold.Round(time.Millisecond))
	if f.as != "" {
		s = f.as + ": " + s
	}
	switch {
	case len(f.streams) > 0:
		s += fmt.Sprintf(" target=%s streams=%s", f.target, strings.Join(f.streams, "+"))
	case f.target != "":
		s += " target=" + f.target
	}
	if f.latency > 0 {
		s += fmt.Sprintf(" latency=%v", f.latency.Round(time.Millisecond))
	}
	switch {
	case f.kind == FaultBurstKillMaster:
		s += fmt.Sprintf(" burst=%d kill=%s", f.n, f.variant)
		if f.variant == BurstDuring {
			s += fmt.Sprintf(" after %d stores", f.count)
		}
	case f.kind == FaultConsumerBlip:
		s += fmt.Sprintf(" bytes=%d", f.n)
	case f.variant != "":
		s += fmt.Sprintf(" variant=%s via=%s", f.variant, f.via)
	}
	if len(f.inner) > 0 {
		s += fmt.Sprintf(" tail=%v, while it is in force:", f.tail.Round(time.Millisecond))
		for i, in := range f.inner {
			s += fmt.Sprintf("\n        %c. %s", 'a'+i, in)
		}
	}
	return s
}

// kinds returns the kinds f plays, in order: f's own (its composite's name
// first, when it is one), then its inner faults'.
func (f fault) kinds() []string {
	var ks []string
	if f.as != "" {
		ks = append(ks, f.as)
	}
	ks = append(ks, f.kind)
	for _, in := range f.inner {
		ks = append(ks, in.kinds()...)
	}
	return ks
}

// spanning are the kinds of fault that may stay in force while others are
// played: those that hold one process (or its link to Redis). A Redis
// fault holds every process, so nothing could settle under it.
var spanning = map[string]bool{
	FaultKillMaster: true, FaultKillSlave: true, FaultPauseMaster: true, FaultPauseSlave: true,
	FaultStopMaster: true, FaultRestartSlave: true,
	FaultLatency: true, FaultBlackhole: true, FaultResetPeer: true,
	FaultForger: true, FaultConsumerBlip: true, FaultBurstKillMaster: true, FaultTwin: true,
}

// between returns a random duration in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// newFault draws the parameters of one fault of kind.
func newFault(rng *rand.Rand, kind string, tm timing) fault {
	f := fault{kind: kind, settle: between(rng, 100*time.Millisecond, 600*time.Millisecond)}
	switch kind {
	case FaultKillMaster, FaultKillSlave:
		// Sometimes back before the lock expires, sometimes after.
		f.hold = between(rng, tm.ttl/2, tm.ttl+tm.slaveTimeout+500*time.Millisecond)
	case FaultPauseMaster:
		// Longer than LockTTL: the classic stop-the-world pause.
		f.hold = between(rng, tm.ttl+200*time.Millisecond, 2*tm.ttl+500*time.Millisecond)
	case FaultPauseSlave:
		// Past SlaveTimeout: the slave must be reported removed, then back.
		f.hold = between(rng, tm.slaveTimeout+3*tm.check, tm.slaveTimeout+tm.ttl+500*time.Millisecond)
	case FaultStopMaster, FaultRestartSlave:
		f.hold = between(rng, 100*time.Millisecond, tm.ttl)
	case FaultRedisRestart:
	case FaultRedisPause:
		f.hold = between(rng, tm.ttl/2, 2*tm.ttl)
	case FaultLatency, FaultBlackhole, FaultResetPeer:
		f.target = []string{"master", "slave"}[rng.IntN(2)]
		f.streams = [][]string{{"upstream"}, {"downstream"}, {"upstream", "downstream"}}[rng.IntN(3)]
		f.hold = between(rng, tm.ttl/2, 2*tm.ttl+500*time.Millisecond)
		if kind == FaultLatency {
			f.latency = between(rng, 50*time.Millisecond, tm.ttl+500*time.Millisecond)
		}
	case FaultForger:
		f.hold = between(rng, 1500*time.Millisecond, 3*time.Second)
	case FaultConsumerBlip:
		// Each connection of the slave passes n bytes of replies, then is
		// closed in the middle of a reply: more than the handshake (HELLO's
		// reply is about 150 bytes), a few replies of entries (about 350
		// bytes per entry) at most. Short of SlaveTimeout: the slave stays
		// registered, its Consumer must find its stranded entries by itself.
		f.n = int(between(rng, 200, 2500))
		f.hold = between(rng, 200*time.Millisecond, 900*time.Millisecond)
	case FaultBurstKillMaster:
		f.n = burstSize
		f.variant = []string{BurstAfter, BurstDuring}[rng.IntN(2)]
		f.count = int(between(rng, 1, burstSize/2))
		f.hold = between(rng, tm.ttl/2, tm.ttl+tm.slaveTimeout+500*time.Millisecond)
	case FaultTwin:
		// Most twins live past their refusal (SlaveTimeout and a few round
		// trips after they start); the others are stopped while they wait
		// to see whether the entry under their id is still written.
		f.target = []string{"master", "slave"}[rng.IntN(2)]
		f.hold = between(rng, tm.slaveTimeout/2, 2*tm.slaveTimeout+tm.ttl)
	case FaultTransfer:
		f.variant = []string{TransferLive, TransferLive, TransferDead, TransferNonCandidate, TransferRaceTarget, TransferRaceMaster}[rng.IntN(6)]
		f.via = []string{"stdin", "control"}[rng.IntN(2)]
		// Until a process the transfer killed is respawned.
		f.hold = between(rng, tm.ttl/2, tm.ttl+tm.slaveTimeout)
	case FaultHandoverLoss:
		// A slave paused across a graceful hand-over and a Redis restart
		// without data, resumed a moment after Redis answers again: the
		// release notice it missed is waiting for it, the term key is gone,
		// and the master elected at the hand-over still acts until its next
		// renewal finds the lock gone.
		stop := newFault(rng, FaultStopMaster, tm)
		restart := newFault(rng, FaultRedisRestart, tm)
		return fault{kind: FaultPauseSlave, as: FaultHandoverLoss, tail: between(rng, 0, 50*time.Millisecond),
			settle: f.settle, inner: []fault{stop, restart}}
	case FaultRankedPause:
		// The first-ranked slave paused while the master leaves, gracefully
		// or not: the second-ranked takes its turn; resumed a moment after
		// the new master is in office, with the release notice waiting.
		leave := newFault(rng, []string{FaultStopMaster, FaultKillMaster}[rng.IntN(2)], tm)
		if leave.kind == FaultKillMaster {
			// Past the lock's expiry: the turns, not the respawn, decide.
			leave.hold = between(rng, tm.ttl+200*time.Millisecond, tm.ttl+tm.slaveTimeout+500*time.Millisecond)
		}
		return fault{kind: FaultPauseSlave, as: FaultRankedPause, target: "first-ranked", tail: between(rng, 0, 300*time.Millisecond),
			settle: f.settle, inner: []fault{leave}}
	}
	return f
}

// The variants of FaultBurstKillMaster, and the size of a burst.
const (
	BurstAfter  = "after"  // killed as soon as the burst's last send returned
	BurstDuring = "during" // killed once fault.count stores were recorded after the request
	burstSize   = 1000
)

// overlapChance is the chance that a drawn fault of a spanning kind stays
// in force while the next one or two are played.
const overlapChance = 0.25

// schedule is a seeded list of faults on one server.
type schedule struct {
	seed   uint64
	server redistest.Server
	faults []fault
	// nonCandidate runs the processes of the last slot with
	// -candidate=false (drawn from the seed: one schedule in three).
	nonCandidate bool
	// forgeRegistry lets the forger publish registry notices as well as
	// lock notices and envelopes: always, in the tour and in the soak,
	// since the slave tracker confirms notices against the registry
	// (HERD_FAULTS_FORGE_REGISTRY=0 turns it off, to tell its findings
	// apart from the rest).
	forgeRegistry bool
	replay        string   // the command that plays it again
	args          []string // given to every node (see newCluster)
}

// kinds returns the kinds of fault s plays, in order, composites included
// (see fault.kinds).
func (s schedule) kinds() []string {
	var ks []string
	for _, f := range s.faults {
		ks = append(ks, f.kinds()...)
	}
	return ks
}

// overlapping reports whether a fault of s, drawn alone (not a part of a
// composite), stays in force while others are played.
func (s schedule) overlapping() bool {
	for _, f := range s.faults {
		if len(f.inner) > 0 && f.as == "" {
			return true
		}
	}
	return false
}

func (s schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d on %s", s.seed, s.server.Name)
	if s.nonCandidate {
		b.WriteString(", the last slot's processes not candidates")
	}
	if !s.forgeRegistry && slices.Contains(s.kinds(), FaultForger) {
		b.WriteString(", no forged registry notices")
	}
	b.WriteString(":\n")
	for i, f := range s.faults {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, f)
	}
	return b.String()
}

// drawNonCandidate draws, from a stream of the seed of its own (so that
// the faults drawn stay those of the seed), whether a schedule runs one
// slot's processes as non-candidates: one schedule in three.
func drawNonCandidate(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 3)).IntN(3) == 0
}

// drawPriorities draws the priorities of n slots from seed: 0 to n-1 in a
// random order, so that a master of lower priority than a ready slave's
// hands back to it (masterelection.Config.Priority) while the faults play.
func drawPriorities(seed uint64, n int) []int {
	return rand.New(rand.NewPCG(seed, 4)).Perm(n)
}

// tourSchedule has every fault kind once, in a random order.
func tourSchedule(seed uint64, server redistest.Server, tm timing) schedule {
	rng := rand.New(rand.NewPCG(seed, 1))
	kinds := append([]string(nil), FaultKinds...)
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	s := schedule{seed: seed, server: server, nonCandidate: drawNonCandidate(seed), forgeRegistry: os.Getenv("HERD_FAULTS_FORGE_REGISTRY") != "0"}
	for _, k := range kinds {
		s.faults = append(s.faults, newFault(rng, k, tm))
	}
	return s
}

// randomSchedule has n faults of random kinds, drawn from kinds. A fault of
// a spanning kind stays in force, with overlapChance, while the next one or
// two faults drawn (of kinds other than composites) are played; those count
// among the n.
func randomSchedule(seed uint64, server redistest.Server, tm timing, n int, kinds []string) schedule {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := schedule{seed: seed, server: server, nonCandidate: drawNonCandidate(seed), forgeRegistry: true}
	var simple []string
	for _, k := range kinds {
		if !composites[k] {
			simple = append(simple, k)
		}
	}
	for left := n; left > 0; left-- {
		f := newFault(rng, kinds[rng.IntN(len(kinds))], tm)
		if f.as == "" && spanning[f.kind] && left > 1 && len(simple) > 0 && rng.Float64() < overlapChance {
			for range min(1+rng.IntN(2), left-1) {
				f.inner = append(f.inner, newFault(rng, simple[rng.IntN(len(simple))], tm))
				left--
			}
			f.tail = between(rng, 0, 500*time.Millisecond)
		}
		s.faults = append(s.faults, f)
	}
	return s
}

// run plays schedule s on a fresh cluster of n nodes and judges the
// history. On any violation it fails t with the seed, the violations and
// the timeline, and writes the whole history to integration/failures/.
func (s schedule) run(t *testing.T, n int, tm timing) Report {
	t.Helper()
	c, recs, rep := s.play(t, n, tm)
	if !rep.OK() {
		s.fail(t, c, recs, rep)
	}
	s.keepTimeline(t, recs)
	return rep
}

// play plays schedule s on a fresh cluster of n nodes and judges the
// history, without failing t on a violation.
func (s schedule) play(t *testing.T, n int, tm timing) (*cluster, []Record, Report) {
	t.Helper()
	t.Logf("schedule %s", s)
	args := append(append(append([]string(nil), s.args...), durableArgs()...), assignArgs()...)
	c := newCluster(t, s.server, n, tm, rand.New(rand.NewPCG(s.seed, 2)), s.nonCandidate, drawPriorities(s.seed, n), args...)
	c.forgeRegistry = s.forgeRegistry
	c.waitStable("start")
	c.waitOwned("start")
	for _, f := range s.faults {
		c.play(f)
		what := fmt.Sprintf("fault %d (%s)", c.seq, f.kind)
		c.waitStable(what)
		c.waitOwned(what)
		time.Sleep(f.settle)
	}
	c.drainDurable()
	c.shutdown()
	c.watcher.close()
	c.recordInboxes()
	recs := c.records()
	rep := Check(recs, tm.params())
	c.mu.Lock()
	rep.Violations = append(rep.Violations, c.violations...)
	unlisted := c.unlisted
	c.mu.Unlock()
	rep.Lost += unlisted
	return c, recs, rep
}

// keepTimeline writes the timeline of s to HERD_FAULTS_TIMELINES, if set.
func (s schedule) keepTimeline(t *testing.T, recs []Record) {
	t.Helper()
	if dir := os.Getenv("HERD_FAULTS_TIMELINES"); dir != "" {
		path := filepath.Join(dir, fmt.Sprintf("seed-%d.txt", s.seed))
		var b strings.Builder
		b.WriteString(s.String())
		WriteTimeline(&b, recs, true)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("HERD_FAULTS_TIMELINES: %v", err)
		}
	}
}

// fail reports a failed schedule so that it can be replayed.
func (s schedule) fail(t *testing.T, c *cluster, recs []Record, rep Report) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d; replay with: %s\n%s\nviolations:\n", s.seed, s.replay, s)
	for _, v := range rep.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	var full strings.Builder
	full.WriteString(b.String())
	full.WriteString("\ntimeline (every record):\n")
	WriteTimeline(&full, recs, true)
	full.WriteString("\n" + c.stderrTails())
	path := failureFile(t, s.seed)
	var jsonl bytes.Buffer
	for _, r := range recs {
		line, _ := json.Marshal(r)
		jsonl.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, []byte(full.String()), 0o644); err != nil {
		t.Logf("write %s: %v", path, err)
	} else if err := os.WriteFile(path+".jsonl", jsonl.Bytes(), 0o644); err != nil {
		t.Logf("write %s.jsonl: %v", path, err)
	} else {
		fmt.Fprintf(&b, "whole history written to %s; its records to %s.jsonl (check again with HERD_FAULTS_RECHECK=<file> go test -run TestRecheck)\n", path, path)
	}
	b.WriteString("\ntimeline (without per-message records):\n")
	WriteTimeline(&b, recs, false)
	t.Errorf("%s", b.String())
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// failureFile is where a failed schedule's history goes: the gitignored
// integration/failures/ when it can be created, else the test's temp dir.
func failureFile(t *testing.T, seed uint64) string {
	name := fmt.Sprintf("%s-seed-%d.txt", unsafeName.ReplaceAllString(t.Name(), "_"), seed)
	dir := filepath.Join("..", "..", "failures")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		dir = t.TempDir()
	}
	return filepath.Join(dir, name)
}
