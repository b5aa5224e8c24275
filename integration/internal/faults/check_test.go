package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

var testParams = Params{
	LockTTL:        time.Second,
	ElectionJitter: 50 * time.Millisecond,
	CheckInterval:  200 * time.Millisecond,
	SlaveTimeout:   time.Second,
	Slack:          500 * time.Millisecond,
}

// history builds synthetic histories for the checker tests.
type history []Record

func (h history) with(rs ...Record) history { return append(append(history(nil), h...), rs...) }

func start(proc string, at int64) Record {
	return Record{T: at * ms, Proc: proc, Node: proc, Kind: KindStart, LockTTL: int64(time.Second), Margin: 100 * ms}
}

func call(proc string, at int64) Record {
	return Record{T: at * ms, Proc: proc, Node: proc, Kind: KindLockCall, Detail: "renew"}
}

func acquired(proc string, term, at int64) Record {
	return Record{T: at * ms, Proc: proc, Node: proc, Kind: KindAcquired, Term: term}
}

func lost(proc string, term, at int64) Record {
	return Record{T: at * ms, Begin: at*ms - 1000, Seen: at*ms + ms, Proc: proc, Node: proc, Kind: KindLost, Term: term}
}

// ctxLive is proc's first sighting of its ctx number serial (of which, for
// term) live, in an observation that began at at ms.
func ctxLive(proc, which string, term, serial int64, at int64) Record {
	return Record{T: at * ms, Proc: proc, Node: proc, Kind: KindCtxLive, Term: term, Seq: serial, Detail: which}
}

// ctxDone is proc's first sighting of its ctx number serial done, in an
// observation that began at seen µs; the last live one began at lastBegin
// µs and ended 1 µs later.
func ctxDone(proc, which string, term, serial int64, lastBegin, seen int64) Record {
	us := int64(time.Microsecond)
	return Record{T: lastBegin*us + us, Begin: lastBegin * us, Seen: seen * us, Proc: proc, Node: proc, Kind: KindCtxDone, Term: term, Seq: serial, Detail: which}
}

// itemLive and itemDone are ctxLive and ctxDone for an assign item's ctx.
func itemLive(proc, item string, serial, at int64) Record {
	r := ctxLive(proc, item, 0, serial, at)
	r.Kind = KindItemLive
	return r
}

func itemDone(proc, item string, serial, lastBegin, seen int64) Record {
	r := ctxDone(proc, item, 0, serial, lastBegin, seen)
	r.Kind = KindItemDone
	return r
}

func observed(proc string, term, at int64) Record {
	return Record{T: at * ms, Proc: proc, Node: proc, Kind: KindObserved, Term: term}
}

// masterCut marks network fault f as one on the master's link (as the
// harness does: Highest 1), which makes it a crash to the checker.
func masterCut(f Record) Record {
	f.Highest = 1
	return f
}

func harness(kind Kind, seq int64, detail, peer string, at int64) Record {
	return Record{T: at * ms, Proc: HarnessNode, Kind: kind, Seq: seq, Detail: detail, Peer: peer, Node: peer}
}

func rec(proc string, kind Kind, term, seq int64, peer string, at int64) Record {
	return Record{T: at * ms, Proc: proc, Node: proc, Kind: kind, Term: term, Seq: seq, Peer: peer, Highest: term}
}

// base is a clean history: a is master with term 10 from 2 to 900 ms
// (renewing every 250 ms), b takes over with term 11 at 1200 ms and stays
// until 5000 ms.
var base = func() history {
	h := history{start("a", 0), start("b", 0),
		call("a", 1), acquired("a", 10, 2), call("a", 250), call("a", 500), call("a", 750), lost("a", 10, 900),
		call("b", 1190), acquired("b", 11, 1200)}
	for at := int64(1450); at < 5000; at += 250 {
		h = append(h, call("b", at))
	}
	return append(h, lost("b", 11, 5000))
}()

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		h     history
		wants []string // substrings of the violations, in any order; none: must pass
		check func(t *testing.T, r Report)
	}{
		{name: "clean handover", h: base, check: func(t *testing.T, r Report) {
			if len(r.Masterships) != 2 || r.Masterships[0].End != 900*ms || r.Masterships[1].Start != 1200*ms {
				t.Errorf("masterships %+v", r.Masterships)
			}
		}},
		{
			name:  "overlap",
			h:     base.with(start("c", 0), call("c", 700), acquired("c", 12, 800), call("c", 1000), lost("c", 12, 1300)),
			wants: []string{"overlap: a (term 10, lost) and c (term 12)", "overlap: c (term 12, lost) and b (term 11)", "terms: b started term 11 after c started term 12"},
		},
		{
			name: "overlap after Redis lost its data is counted, not forbidden",
			h:    base.with(start("c", 0), harness(KindRedisDown, 1, "", "", 500), call("c", 599), acquired("c", 12, 600), lost("c", 12, 700)),
			check: func(t *testing.T, r Report) {
				if len(r.Overlaps) != 1 || !r.Overlaps[0].DataLoss || r.Overlaps[0].Duration != 100*time.Millisecond || r.ForbiddenOverlaps() != 0 {
					t.Errorf("overlaps %+v", r.Overlaps)
				}
			},
			wants: []string{"terms: b started term 11 after c started term 12"},
		},
		{
			name: "overlap after a data loss by a process that had seen a term",
			h: base.with(start("c", 0), observed("c", 10, 100), harness(KindRedisDown, 1, "", "", 500),
				call("c", 599), acquired("c", 12, 600), lost("c", 12, 700)),
			wants: []string{
				"overlap: a (term 10, lost) and c (term 12) both acted as master for 100ms (Redis lost its data in between, but c had seen term 10 before the loss)",
				"terms: b started term 11 after c started term 12",
			},
			check: func(t *testing.T, r Report) {
				if len(r.Overlaps) != 1 || !r.Overlaps[0].DataLoss || r.Overlaps[0].SawTerm != 10 || r.ForbiddenOverlaps() != 1 {
					t.Errorf("overlaps %+v", r.Overlaps)
				}
			},
		},
		{
			// a's IsMaster: last true observation 899.999-900 ms, first
			// false one at 901 ms (see lost).
			name: "ctxs done before IsMaster turned false",
			h: base.with(ctxLive("a", CtxMasterAcquired, 10, 1, 3), ctxDone("a", CtxMasterAcquired, 10, 1, 899_000, 899_500),
				ctxLive("a", CtxRunIfMaster, 10, 2, 5), ctxDone("a", CtxRunIfMaster, 10, 2, 900_500, 900_900),
				ctxLive("b", CtxMasterAcquired, 11, 1, 1201), ctxDone("b", CtxMasterAcquired, 11, 1, 4_999_000, 5_000_000)),
			check: func(t *testing.T, r Report) {
				if len(r.Ctxs) != 3 || r.Judged["ctx"] != 3 || len(r.CtxOverlaps) != 0 {
					t.Errorf("ctxs %+v overlaps %+v judged %v", r.Ctxs, r.CtxOverlaps, r.Judged)
				}
				if c := r.Ctxs[0]; c.Start != 3*ms || c.End != 899_001*int64(time.Microsecond) || c.How != "lost" || c.Ctx != CtxMasterAcquired {
					t.Errorf("first ctx span %+v", c)
				}
			},
		},
		{
			name:  "ctx seen live after IsMaster was seen false",
			h:     base.with(ctxLive("a", CtxMasterAcquired, 10, 1, 3), ctxDone("a", CtxMasterAcquired, 10, 1, 904_000, 906_000)),
			wants: []string{"ctx: a's master-acquired ctx (term 10, lost) was seen live after IsMaster was seen false: its last live observation began 3ms after the first false one; first seen done 5ms after it"},
		},
		{
			// The node reads the ctx right after Term: live in the
			// observation whose Term call first returned 0 is live after.
			name:  "ctx live in the observation in which IsMaster was first false",
			h:     base.with(ctxLive("a", CtxRunIfMaster, 10, 1, 3), ctxDone("a", CtxRunIfMaster, 10, 1, 901_000, 901_300)),
			wants: []string{"ctx: a's run-if-master ctx (term 10, lost) was seen live after IsMaster was seen false: its last live observation began 0s after the first false one"},
		},
		{
			name: "ctx live while another process is master",
			h:    base.with(ctxLive("a", CtxMasterAcquired, 10, 1, 3), ctxDone("a", CtxMasterAcquired, 10, 1, 1_209_999, 1_211_000)),
			wants: []string{
				"ctx: a's master-acquired ctx (term 10, lost) was seen live after IsMaster was seen false",
				"ctx: a's master-acquired ctx (term 10, lost) and b (term 11, lost) both acted as master for 10ms",
			},
			check: func(t *testing.T, r Report) {
				if len(r.CtxOverlaps) != 1 || r.CtxOverlaps[0].Duration != 10*time.Millisecond || len(r.Overlaps) != 0 {
					t.Errorf("ctx overlaps %+v overlaps %+v", r.CtxOverlaps, r.Overlaps)
				}
			},
		},
		{
			name: "ctx inside its own mastership's overlap is the overlap check's",
			h: base.with(start("c", 0), call("c", 700), acquired("c", 12, 800), call("c", 1000), lost("c", 12, 850),
				ctxLive("c", CtxMasterAcquired, 12, 1, 801), ctxDone("c", CtxMasterAcquired, 12, 1, 840_000, 849_000)),
			wants: []string{"overlap: a (term 10, lost) and c (term 12) both acted as master for 50ms", "terms: b started term 11 after c started term 12"},
			check: func(t *testing.T, r Report) {
				if len(r.CtxOverlaps) != 1 {
					t.Errorf("ctx overlaps %+v", r.CtxOverlaps)
				}
			},
		},
		{
			name: "ctx live past the self-fencing deadline",
			h: history{start("a", 0), call("a", 0), acquired("a", 10, 1), lost("a", 10, 800),
				ctxLive("a", CtxMasterAcquired, 10, 1, 2), ctxDone("a", CtxMasterAcquired, 10, 1, 950_000, 952_000)},
			wants: []string{
				"ctx: a saw its master-acquired ctx of term 10 live (ctx-done) 50ms after its deadline bound",
				"ctx: a's master-acquired ctx (term 10, lost) was seen live after IsMaster was seen false",
			},
		},
		{
			name: "ctx of a killed master ends when reaped",
			h: history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1), ctxLive("a", CtxMasterAcquired, 10, 1, 2),
				harness(KindDead, 0, "signal: killed", "a", 300), call("b", 1300), acquired("b", 11, 1301), lost("b", 11, 1400)},
			check: func(t *testing.T, r Report) {
				if len(r.Ctxs) != 1 || r.Ctxs[0].How != "dead" || r.Ctxs[0].End != 300*ms {
					t.Errorf("ctxs %+v", r.Ctxs)
				}
			},
		},
		{
			// Seed 1795676246398546749: the master was killed while its
			// transfer went through, reaped 2.4 ms later, 1 ms after the
			// next master began.
			name: "a killed master's mastership ends at the kill, not at a late reaping",
			h: history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1),
				harness(KindKilled, 0, "", "a", 300), harness(KindDead, 0, "signal: killed", "a", 1305),
				call("b", 1300), acquired("b", 11, 1301), lost("b", 11, 1400)},
			check: func(t *testing.T, r Report) {
				if len(r.Masterships) != 2 || r.Masterships[0].How != "dead" || r.Masterships[0].End != 300*ms+int64(KillLatency) {
					t.Errorf("masterships %+v", r.Masterships)
				}
			},
		},
		{
			name: "a master acting before it is killed still overlaps",
			h: history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1),
				call("b", 1300), acquired("b", 11, 1301), harness(KindKilled, 0, "", "a", 1310),
				harness(KindDead, 0, "signal: killed", "a", 1320), lost("b", 11, 1400)},
			wants: []string{"overlap: a (term 10, dead) and b (term 11)"},
		},
		{
			name: "ctx overlap after a data loss, later master had seen no term",
			h: base.with(start("c", 0), harness(KindRedisDown, 1, "", "", 500), call("c", 599), acquired("c", 12, 600), lost("c", 12, 650),
				ctxLive("c", CtxMasterAcquired, 12, 1, 601), ctxDone("c", CtxMasterAcquired, 12, 1, 640_000, 640_100)),
			wants: []string{"terms: b started term 11 after c started term 12"},
			check: func(t *testing.T, r Report) {
				if len(r.CtxOverlaps) != 1 || !r.CtxOverlaps[0].Excused() || r.ForbiddenOverlaps() != 0 {
					t.Errorf("ctx overlaps %+v", r.CtxOverlaps)
				}
			},
		},
		{
			name:  "observation past the self-fencing deadline",
			h:     history{start("a", 0), call("a", 0), acquired("a", 10, 1), lost("a", 10, 950)},
			wants: []string{"self-fencing: a observed term 10 (lost) 49.999ms after its deadline bound"},
		},
		{
			// The poller read its clock, was descheduled while the acquire
			// went out and was answered, then called Term: the acquire's
			// call is recorded after the observation began, before it ended.
			name: "first sighting whose bracket holds the acquire",
			h: history{start("a", 0), call("a", 0), acquired("a", 10, 1), lost("a", 10, 500),
				{T: 2000 * ms, Seen: 2002 * ms, Proc: "a", Node: "a", Kind: KindAcquired, Term: 11}, call("a", 2001), lost("a", 11, 2500)},
		},
		{
			name: "first sighting before the acquire was sent",
			h: history{start("a", 0), call("a", 0), acquired("a", 10, 1), lost("a", 10, 500),
				{T: 2000 * ms, Seen: 2001 * ms, Proc: "a", Node: "a", Kind: KindAcquired, Term: 11}, call("a", 2002), lost("a", 11, 2500)},
			wants: []string{"self-fencing: a observed term 11 (acquired) 1.1s after its deadline bound"},
		},
		{
			name:  "sent record past the deadline",
			h:     history{start("a", 0), call("a", 0), acquired("a", 10, 1), {T: 905 * ms, Begin: 904 * ms, Proc: "a", Kind: KindSent, Term: 10, Seq: 1}, lost("a", 10, 800)},
			wants: []string{"self-fencing: a observed term 10 (sent) 4ms after"},
		},
		{
			name:  "term reused by another process",
			h:     history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1), lost("a", 10, 500), call("b", 600), acquired("b", 10, 601), lost("b", 10, 700)},
			wants: []string{"terms: term 10 held by both a and b", "terms: b started term 10 after a started term 10"},
		},
		{
			name: "failover within the bound",
			h:    base.with(harness(KindFault, 1, FaultKillMaster, "a", 850)),
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 1 || r.Failovers[0].Duration != 350*time.Millisecond || r.Faults[FaultKillMaster] != 1 {
					t.Errorf("failovers %+v faults %v", r.Failovers, r.Faults)
				}
			},
		},
		{
			name: "crashed master back with a new term counts as the failover",
			h: history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1), call("a", 250),
				{T: 300 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 1, Detail: FaultBlackhole, Peer: "a", Term: 10, Highest: 1},
				lost("a", 10, 1100), call("a", 1150), acquired("a", 12, 1160), lost("a", 12, 1200)},
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 1 || r.Failovers[0].Duration != 860*time.Millisecond {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			name: "master that rode a network fault out needs no failover",
			h: func() history {
				h := history{start("a", 0), call("a", 0), acquired("a", 10, 1),
					{T: 300 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 1, Detail: FaultResetPeer, Peer: "a", Term: 10, Highest: 1}}
				for at := int64(250); at < 4000; at += 250 {
					h = append(h, call("a", at))
				}
				return append(h, lost("a", 10, 4000))
			}(),
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 0 {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			name: "master that rode a network fault out, then lost to the next fault",
			h: func() history {
				h := history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1),
					{T: 300 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 1, Detail: FaultResetPeer, Peer: "a", Term: 10, Highest: 1},
					harness(KindHeal, 1, FaultResetPeer, "a", 700),
					{T: 1000 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 2, Detail: FaultKillMaster, Peer: "a", Term: 10}}
				for at := int64(250); at < 1000; at += 250 {
					h = append(h, call("a", at))
				}
				return append(h, lost("a", 10, 990), call("b", 1899), acquired("b", 11, 1900), lost("b", 11, 2000))
			}(),
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 1 || r.Failovers[0].Fault != FaultKillMaster || r.Failovers[0].Duration != 900*time.Millisecond {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			name:  "failover too slow",
			h:     history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1), harness(KindFault, 1, FaultPauseMaster, "a", 100), lost("a", 10, 101), call("b", 2000), acquired("b", 11, 2001), lost("b", 11, 2100)},
			wants: []string{"failover: fault 1 (pause-master): next master after 1.901s, bound 1.75s"},
		},
		{
			name: "an item worked by one process, then another",
			h: base.with(itemLive("a", "i1", 1, 100), itemDone("a", "i1", 1, 400_000, 401_000),
				itemLive("b", "i1", 1, 402)),
			check: func(t *testing.T, r Report) {
				if len(r.Items) != 2 || len(r.ItemOverlaps) != 0 || r.Judged["ownership"] != 2 {
					t.Errorf("items %+v overlaps %+v", r.Items, r.ItemOverlaps)
				}
			},
		},
		{
			name:  "an item worked by two processes at once",
			h:     base.with(itemLive("a", "i1", 1, 100), itemDone("a", "i1", 1, 400_000, 401_000), itemLive("b", "i1", 1, 300)),
			wants: []string{"ownership: item i1: a's ctx (lost) and b's were both live for 100.001ms"},
		},
		{
			name: "an item of a killed process ends at its death",
			h: base.with(harness(KindSpawn, 0, "", "a", 0), itemLive("a", "i1", 1, 100), harness(KindDead, 0, "signal: killed", "a", 300),
				itemLive("b", "i1", 1, 250)),
			wants: []string{"ownership: item i1: a's ctx (dead) and b's were both live for 50ms"},
		},
		{
			name: "an item worked twice after Redis lost its data is excused",
			h: base.with(itemLive("a", "i1", 1, 100), harness(KindRedisDown, 1, "", "", 200), itemLive("b", "i1", 1, 300),
				itemDone("a", "i1", 1, 400_000, 401_000)),
			check: func(t *testing.T, r Report) {
				if len(r.ItemOverlaps) != 1 || !r.ItemOverlaps[0].DataLoss {
					t.Errorf("overlaps %+v", r.ItemOverlaps)
				}
			},
		},
		{
			name: "failover leaves out the time the only other candidate was paused",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
				call("a", 0), acquired("a", 10, 1), harness(KindFault, 1, FaultPauseMaster, "a", 100), lost("a", 10, 101),
				harness(KindFault, 2, FaultPauseSlave, "b", 102), harness(KindHeal, 2, FaultPauseSlave, "b", 2000),
				call("b", 2019), acquired("b", 11, 2020), lost("b", 11, 2100)},
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 1 || r.Failovers[0].Duration != 22*time.Millisecond {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			// Seed 1795679857908587330: the master's link blackholed, the
			// only other candidate's reset for 2.3 s.
			name: "failover leaves out the time the only other candidate was cut off from Redis",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
				call("a", 0), acquired("a", 10, 1), masterCut(harness(KindFault, 1, FaultBlackhole, "a", 100)), lost("a", 10, 101),
				harness(KindFault, 2, FaultResetPeer, "b", 102), harness(KindHeal, 2, FaultResetPeer, "b", 2400),
				call("b", 2430), acquired("b", 11, 2431), lost("b", 11, 2500)},
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 1 || r.Failovers[0].Duration != 33*time.Millisecond {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			// Seed 1795974105028048371: Redis paused for 1.76 s inside a
			// blackhole's failover; the next master took the lock 29 ms
			// after Redis answered again.
			name: "a failover soon after a Redis pause that outlasted the lock passes",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
				call("a", 0), acquired("a", 10, 1), masterCut(harness(KindFault, 1, FaultBlackhole, "a", 100)), lost("a", 10, 101),
				harness(KindFault, 2, FaultRedisPause, "", 700), harness(KindHeal, 2, FaultRedisPause, "", 2400),
				call("b", 2430), acquired("b", 11, 2431), lost("b", 11, 2500)},
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 2 || r.Failovers[0].Duration != 2331*time.Millisecond {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			name: "a Redis pause that healed before the lock expired does not excuse a slow failover",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
				call("a", 0), acquired("a", 10, 1), masterCut(harness(KindFault, 1, FaultBlackhole, "a", 100)), lost("a", 10, 101),
				harness(KindFault, 2, FaultRedisPause, "", 700), harness(KindHeal, 2, FaultRedisPause, "", 1200),
				call("b", 2300), acquired("b", 11, 2301), lost("b", 11, 2400)},
			wants: []string{"failover: fault 1 (blackhole): next master after 2.201s"},
		},
		{
			name: "after a Redis pause a candidate held by another fault is left out",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
				call("a", 0), acquired("a", 10, 1), masterCut(harness(KindFault, 1, FaultBlackhole, "a", 100)), lost("a", 10, 101),
				harness(KindFault, 2, FaultRedisPause, "", 700), harness(KindHeal, 2, FaultRedisPause, "", 1900),
				harness(KindFault, 3, FaultPauseSlave, "b", 1901), harness(KindHeal, 3, FaultPauseSlave, "b", 2800),
				call("b", 2820), acquired("b", 11, 2821), lost("b", 11, 2900)},
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) == 0 || r.Failovers[0].Duration != 1822*time.Millisecond {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			name: "a Redis pause outside the failover does not excuse it",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
				call("a", 0), acquired("a", 10, 1), masterCut(harness(KindFault, 1, FaultBlackhole, "a", 100)), lost("a", 10, 101),
				call("b", 2430), acquired("b", 11, 2431),
				harness(KindFault, 2, FaultRedisPause, "", 2440), harness(KindHeal, 2, FaultRedisPause, "", 4200),
				call("b", 4300), call("b", 5000), lost("b", 11, 5500)},
			wants: []string{"failover: fault 1 (blackhole): next master after 2.331s"},
		},
		{
			name: "a candidate under latency does not excuse a slow failover",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), start("a", 0), start("b", 0),
				call("a", 0), acquired("a", 10, 1), masterCut(harness(KindFault, 1, FaultBlackhole, "a", 100)), lost("a", 10, 101),
				harness(KindFault, 2, FaultLatency, "b", 102), harness(KindHeal, 2, FaultLatency, "b", 2400),
				call("b", 2430), acquired("b", 11, 2431), lost("b", 11, 2500)},
			wants: []string{"failover: fault 1 (blackhole): next master after 2.331s"},
		},
		{
			name: "a paused candidate does not excuse a slow failover while another could run",
			h: history{harness(KindSpawn, 0, "", "a", 0), harness(KindSpawn, 0, "", "b", 0), harness(KindSpawn, 0, "", "c", 0),
				start("a", 0), start("b", 0), start("c", 0),
				call("a", 0), acquired("a", 10, 1), harness(KindFault, 1, FaultPauseMaster, "a", 100), lost("a", 10, 101),
				harness(KindFault, 2, FaultPauseSlave, "b", 102), harness(KindHeal, 2, FaultPauseSlave, "b", 2000),
				call("b", 2019), acquired("b", 11, 2020), lost("b", 11, 2100)},
			wants: []string{"failover: fault 1 (pause-master): next master after 1.92s, bound 1.75s"},
		},
		{
			name:  "no failover at all",
			h:     history{start("a", 0), call("a", 0), acquired("a", 10, 1), harness(KindFault, 1, FaultKillMaster, "a", 100), harness(KindNote, 0, "", "", 5000)},
			wants: []string{"failover: no new master after fault 1 (kill-master)"},
		},
		{
			name: "blackhole of the master's replies only is not a crash",
			h:    history{start("a", 0), call("a", 0), acquired("a", 10, 1), harness(KindFault, 1, FaultBlackhole, "a", 100), harness(KindNote, 0, "", "", 5000)},
		},
		{
			name:  "blackhole of the master's requests is a crash",
			h:     history{start("a", 0), call("a", 0), acquired("a", 10, 1), {T: 100 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 1, Detail: FaultBlackhole, Peer: "a", Highest: 1}, harness(KindNote, 0, "", "", 5000)},
			wants: []string{"failover: no new master after fault 1 (blackhole)"},
		},
		{
			name: "after a Redis fault, a master still acting counts at once",
			h:    base.with(harness(KindFault, 1, FaultRedisPause, "", 1300), harness(KindHeal, 1, FaultRedisPause, "", 1400)),
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 1 || r.Failovers[0].Duration != 0 {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			name: "after a Redis restart only a mastership acquired afterwards counts",
			h: history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1), call("a", 250),
				harness(KindFault, 1, FaultRedisRestart, "", 300), harness(KindRedisDown, 1, "", "", 300), harness(KindHeal, 1, FaultRedisRestart, "", 350),
				lost("a", 10, 400), call("b", 1499), acquired("b", 11, 1500), lost("b", 11, 1600)},
			check: func(t *testing.T, r Report) {
				if len(r.Failovers) != 1 || r.Failovers[0].Duration != 1150*time.Millisecond {
					t.Errorf("failovers %+v", r.Failovers)
				}
			},
		},
		{
			name: "killed master ends when reaped",
			h:    history{start("a", 0), start("b", 0), call("a", 0), acquired("a", 10, 1), harness(KindDead, 0, "signal: killed", "a", 300), call("b", 1300), acquired("b", 11, 1301), lost("b", 11, 1400)},
			check: func(t *testing.T, r Report) {
				if m := r.Masterships[0]; m.How != "dead" || m.End != 300*ms {
					t.Errorf("mastership %+v", m)
				}
			},
		},
		{
			name: "messages accepted in order",
			h: base.with(rec("a", KindSent, 10, 1, "", 100), rec("a", KindPublish, 10, 1, "c", 101), rec("c", KindAccepted, 10, 1, "a", 102),
				rec("b", KindPublish, 11, 1, "c", 1300), rec("c", KindAccepted, 11, 1, "b", 1301)),
			check: func(t *testing.T, r Report) {
				if r.Accepted != 2 || r.StaleAccepted != 0 || r.LatePublishes != 0 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			name:  "lower term accepted after a higher one",
			h:     base.with(rec("c", KindAccepted, 11, 1, "b", 1300), rec("c", KindAccepted, 10, 7, "a", 1301)),
			wants: []string{"fencing: c accepted message 7 from a with term 10 after accepting term 11"},
		},
		{
			name:  "accepted below the receiver's highest term",
			h:     base.with(Record{T: 500 * ms, Proc: "c", Node: "c", Kind: KindAccepted, Term: 10, Seq: 3, Peer: "a", Highest: 11}),
			wants: []string{"fencing: c accepted message 3 from a with term 10 while its highest term was 11"},
		},
		{
			name:  "late publish accepted",
			h:     base.with(rec("a", KindPublish, 10, 9, "c", 1250), rec("c", KindAccepted, 10, 9, "a", 1251)),
			wants: []string{"fencing: c accepted message 9 of a with term 10, published 50ms after b began term 11"},
		},
		{
			name: "late publish rejected",
			h:    base.with(rec("a", KindPublish, 10, 9, "c", 1250), Record{T: 1251 * ms, Proc: "c", Kind: KindRejected, Term: 10, Highest: 11, Peer: "a"}),
			check: func(t *testing.T, r Report) {
				if r.LatePublishes != 1 || r.Rejected != 1 || r.StaleAccepted != 0 {
					t.Errorf("report %+v", r)
				}
			},
		},
		{
			name:  "join reported twice",
			h:     base.with(rec("b", KindSlaveJoined, 11, 0, "c", 1300), rec("b", KindSlaveJoined, 11, 0, "c", 1400)),
			wants: []string{"membership: b (term 11) reported slave-joined of c twice in a row"},
		},
		{
			name:  "leave without join",
			h:     base.with(rec("b", KindSlaveLeft, 11, 0, "c", 1300)),
			wants: []string{"membership: b (term 11) reported slave-left of c, never reported joined"},
		},
		{
			name:  "leave of an ended process never reported",
			h:     base.with(rec("b", KindSlaveJoined, 11, 0, "c", 1300), harness(KindDead, 0, "exited 0", "c", 1350)),
			wants: []string{"membership: b (term 11) never reported the leave of c"},
		},
		{
			name: "paused slave reported gone once and back once",
			h: base.with(rec("b", KindSlaveJoined, 11, 0, "c", 1210), harness(KindFault, 1, FaultPauseSlave, "c", 1220),
				rec("b", KindSlaveLeft, 11, 0, "c", 2300), harness(KindHeal, 1, FaultPauseSlave, "c", 2700)).
				with(rec("b", KindSlaveJoined, 11, 0, "c", 2800)),
		},
		{
			name: "slave paused before the master reported it joined is reported joined once after",
			h: base.with(harness(KindFault, 1, FaultPauseSlave, "c", 1220), harness(KindHeal, 1, FaultPauseSlave, "c", 2700),
				rec("b", KindSlaveJoined, 11, 0, "c", 2800)),
		},
		{
			name:  "slave paused before the master reported it joined, never reported",
			h:     base.with(harness(KindFault, 1, FaultPauseSlave, "c", 1220), harness(KindHeal, 1, FaultPauseSlave, "c", 2700)),
			wants: []string{"membership: slave c paused for 1.48s: b (term 11) reported 0 leaves and 0 joins after it, want 0 and 1"},
		},
		{
			name:  "paused slave never reported gone",
			h:     base.with(rec("b", KindSlaveJoined, 11, 0, "c", 1210), harness(KindFault, 1, FaultPauseSlave, "c", 1220), harness(KindHeal, 1, FaultPauseSlave, "c", 2700)),
			wants: []string{"membership: slave c paused for 1.48s: b (term 11) reported 0 leaves and 0 joins after it, want 1 and 1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.h, testParams)
			var got []string
			for _, v := range r.Violations {
				got = append(got, v.String())
			}
			for _, w := range tt.wants {
				found := false
				for i, g := range got {
					if strings.Contains(g, w) {
						got = append(got[:i], got[i+1:]...)
						found = true
						break
					}
				}
				if !found {
					t.Errorf("no violation %q", w)
				}
			}
			for _, g := range got {
				t.Errorf("unexpected violation %q", g)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func TestParseRecord(t *testing.T) {
	tests := []struct {
		name, line, err string
	}{
		{"valid", `{"t":5,"proc":"n1","kind":"acquired","term":3}`, ""},
		{"torn line", `{"t":5,"proc":"n1","ki`, "unexpected end of JSON input"},
		{"no kind", `{"t":5,"proc":"n1"}`, "has no kind or proc"},
		{"no proc", `{"t":5,"kind":"lost"}`, "has no kind or proc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecord([]byte(tt.line))
			if tt.err == "" {
				if err != nil || r.Kind != KindAcquired || r.Term != 3 || r.T != 5 {
					t.Fatalf("got %+v, %v", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
		})
	}
}

func TestReadRecords(t *testing.T) {
	recs, err := ReadRecords(strings.NewReader("{\"t\":1,\"proc\":\"a\",\"kind\":\"start\"}\n\n{\"t\":2,\"proc\":\"a\",\"kind\":\"exit\"}\n"))
	if err != nil || len(recs) != 2 || recs[1].Kind != KindExit {
		t.Fatalf("got %+v, %v", recs, err)
	}
	if _, err := ReadRecords(strings.NewReader("{\"t\":1,\"proc\":\"a\",\"kind\":\"start\"}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("error %v, want one naming line 2", err)
	}
}

func TestNowIsMonotonic(t *testing.T) {
	a := Now()
	time.Sleep(time.Millisecond)
	if b := Now(); b-a < int64(time.Millisecond) {
		t.Fatalf("Now advanced %v over a 1ms sleep", time.Duration(b-a))
	}
}

func TestWriteTimeline(t *testing.T) {
	var full, short strings.Builder
	h := history{acquired("a", 10, 2), rec("c", KindAccepted, 10, 1, "a", 3), harness(KindFault, 1, FaultKillMaster, "a", 1)}
	WriteTimeline(&full, h, true)
	WriteTimeline(&short, h, false)
	want := "       0.000  harness  fault        seq=1 peer=a kill-master\n" +
		"       1.000  a        acquired     term=10\n"
	if short.String() != want {
		t.Errorf("condensed timeline:\n%s\nwant:\n%s", short.String(), want)
	}
	if !strings.Contains(full.String(), "accepted     term=10 seq=1 peer=a highest=10") {
		t.Errorf("full timeline lacks the accepted record:\n%s", full.String())
	}
}

// TestHandBackCheck: a hand-back to a process of no higher priority, and
// two hand-backs closer than HandBackWindow (less HeartbeatInterval and a
// round trip), are violations; one to a higher priority is judged and
// passes.
func TestHandBackCheck(t *testing.T) {
	p := testParams
	p.HandBackWindow, p.HeartbeatInterval, p.RoundTrip = 1200*time.Millisecond, 250*time.Millisecond, 50*time.Millisecond
	prio := func(proc string, n int) Record {
		r := start(proc, 0)
		r.Detail = fmt.Sprintf("ttl=1s candidate=true priority=%d", n)
		return r
	}
	h := history{prio("a", 0), prio("b", 1), prio("c", 1)}
	for _, tc := range []struct {
		name string
		recs history
		want int
	}{
		{"to a higher priority", h.with(rec("a", KindHandBack, 10, 0, "b", 900)), 0},
		{"to an equal priority", h.with(rec("b", KindHandBack, 10, 0, "c", 900)), 1},
		{"two within the window", h.with(rec("a", KindHandBack, 10, 0, "b", 900), rec("a", KindHandBack, 11, 0, "c", 1700)), 1},
		{"two a window apart", h.with(rec("a", KindHandBack, 10, 0, "b", 900), rec("a", KindHandBack, 11, 0, "c", 1800)), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.recs, p)
			var got []Violation
			for _, v := range rep.Violations {
				if v.Check == "hand-back" {
					got = append(got, v)
				}
			}
			if len(got) != tc.want || rep.Judged["hand-back"] == 0 {
				t.Fatalf("%d hand-back violations (%v), judged %d; want %d", len(got), got, rep.Judged["hand-back"], tc.want)
			}
		})
	}
}
