package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// oracleParams are fastTiming's, as the suite judges them.
var oracleParams = Params{
	LockTTL: time.Second, ElectionJitter: 50 * time.Millisecond, CheckInterval: 200 * time.Millisecond,
	SlaveTimeout: time.Second, Slack: time.Second, HeartbeatInterval: 250 * time.Millisecond,
	StepDownMargin: 100 * time.Millisecond, ProcessTTL: 2 * time.Second, TransferWindow: 100 * time.Millisecond,
	RoundTrip: 50 * time.Millisecond,
}

// spawned is the harness's record of a process started at at ms, and ready
// 5 ms later.
func spawned(proc string, at int64) []Record {
	return []Record{
		{T: at * ms, Proc: HarnessNode, Kind: KindSpawn, Peer: proc, Node: proc},
		start(proc, at), {T: (at + 5) * ms, Proc: proc, Node: proc, Kind: KindReady},
	}
}

// poll is a read of the registry at at ms listing entries "id/role/term",
// or "id/role/term/lastSeen" with lastSeen in ms (default: at - 50 ms).
func poll(at int64, entries ...string) Record {
	var ls []Listed
	for _, e := range entries {
		var l Listed
		parts := strings.Split(e, "/")
		l.ID, l.Role = parts[0], parts[1]
		fmt.Sscan(parts[2], &l.Term)
		l.LastSeen = (at - 50) * ms
		if len(parts) == 4 {
			var seen int64
			fmt.Sscan(parts[3], &seen)
			l.LastSeen = seen * ms
		}
		ls = append(ls, l)
	}
	return Record{T: at * ms, Begin: at*ms - ms, Proc: HarnessNode, Kind: KindRegPoll, Detail: FormatListing(ls)}
}

// cluster3 is a clean history of three processes: a is master (term 10)
// from 10 to 3000 ms, b takes over (term 11) at 3200 ms until 8000 ms; c is
// a slave throughout. The cluster settles at 100 ms and 3300 ms, the
// shutdown begins at 7900 ms; the registry is read every 100 ms and a
// message is sent to each slave every 20 ms and handled 1 ms later.
var cluster3 = func() history {
	var h history
	for _, p := range []string{"a", "b", "c"} {
		h = append(h, spawned(p, 0)...)
	}
	h = append(h, call("a", 9), acquired("a", 10, 10), lost("a", 10, 3000), call("b", 3190), acquired("b", 11, 3200), lost("b", 11, 8000))
	for at := int64(250); at < 3000; at += 250 {
		h = append(h, call("a", at))
	}
	for at := int64(3450); at < 8000; at += 250 {
		h = append(h, call("b", at))
	}
	h = append(h,
		Record{T: 100 * ms, Proc: HarnessNode, Kind: KindSettled, Peer: "a", Term: 10},
		Record{T: 3300 * ms, Proc: HarnessNode, Kind: KindSettled, Peer: "b", Term: 11},
		rec("a", KindSlaveJoined, 10, 0, "b", 120), rec("a", KindSlaveJoined, 10, 0, "c", 120),
		rec("b", KindSlaveJoined, 11, 0, "c", 3220), rec("b", KindSlaveJoined, 11, 0, "a", 3220),
		harness(KindFault, 1, FaultStopMaster, "a", 2990), harness(KindHeal, 1, FaultStopMaster, "a", 3100),
		harness(KindShutdown, 0, "", "", 7900))
	for at := int64(100); at <= 7900; at += 100 {
		master, term, slave := "a", int64(10), "b"
		if at > 3100 {
			master, term, slave = "b", 11, "a"
		}
		h = append(h, poll(at, fmt.Sprintf("%s/master/%d", master, term), slave+"/slave/0", "c/slave/0"))
	}
	seq := int64(0)
	for at := int64(20); at < 7900; at += 20 {
		from, term, slaves := "a", int64(10), []string{"b", "c"}
		if at > 2990 && at < 3210 {
			continue
		}
		if at >= 3210 {
			from, term, slaves = "b", 11, []string{"a", "c"}
		}
		seq++
		for _, s := range slaves {
			h = append(h, Record{T: at * ms, Proc: from, Node: from, Kind: KindPublish, Term: term, Seq: seq, Peer: s},
				Record{T: (at + 1) * ms, Proc: s, Node: s, Kind: KindAccepted, Term: term, Seq: seq, Peer: from, Highest: term})
		}
	}
	return h
}()

// without returns h without the records for which drop is true.
func (h history) without(drop func(Record) bool) history {
	var out history
	for _, r := range h {
		if !drop(r) {
			out = append(out, r)
		}
	}
	return out
}

// forgerWindow is a forger in force from 4000 to 6000 ms.
var forgerWindow = []Record{
	harness(KindFault, 2, FaultForger, "", 4000), harness(KindHeal, 2, FaultForger, "", 6000),
	{T: 4100 * ms, Proc: HarnessNode, Kind: KindForgery, Seq: 2, Peer: "b", Term: 9e15, Highest: 11, Detail: "acquired notice, huge term"},
}

// TestOracle shows each rule of the forger, transfer and membership
// checkers failing on a hand-made history that breaks it, and passing on
// the clean one.
func TestOracle(t *testing.T) {
	tests := []struct {
		name  string
		h     history
		wants []string
	}{
		{name: "clean", h: cluster3},
		{name: "clean with the forger", h: cluster3.with(forgerWindow...)},
		{
			name:  "a forged term raised ObservedTerm",
			h:     cluster3.with(forgerWindow...).with(observed("c", 9e15, 4101)),
			wants: []string{"forgery: c: its ObservedTerm rose to 9000000000000000, above every term Redis minted by then (11)"},
		},
		{
			name: "a forged term raised a subscriber's fence: the real master's messages are rejected",
			h: cluster3.with(forgerWindow...).without(func(r Record) bool {
				return r.Kind == KindAccepted && r.Proc == "c" && r.T > 4100*ms
			}).with(Record{T: 4150 * ms, Proc: "c", Node: "c", Kind: KindRejected, Peer: "b", Term: 11, Highest: 9e15}),
			wants: []string{
				"forgery: c: its subscriber's highest term was 9000000000000000",
				"with the forger alone in force, was never handled",
				"without any fault in force, was never handled",
			},
		},
		{
			name: "a forged notice deposed the master",
			h: cluster3.with(forgerWindow...).without(func(r Record) bool {
				return r.Proc == "b" && r.Kind == KindLost || r.Kind == KindRegPoll && r.T > 4500*ms
			}).with(lost("b", 11, 4500)),
			wants: []string{"forgery: b's mastership (term 11) ended while the forger alone was in force"},
		},
		{
			// Seen slave only after the forger healed, with no other fault
			// in between: the forger alone may have ended it.
			name: "a forged notice deposed the master just before the forger healed",
			h: cluster3.with(forgerWindow...).without(func(r Record) bool {
				return r.Proc == "b" && r.Kind == KindLost || r.Kind == KindRegPoll && r.T > 5999*ms
			}).with(Record{T: 5999 * ms, Begin: 5999*ms - 1000, Seen: 6001 * ms, Proc: "b", Node: "b", Kind: KindLost, Term: 11}),
			wants: []string{"forgery: b's mastership (term 11) ended while the forger alone was in force"},
		},
		{
			// With the forger in force since 2000, the poller saw a master
			// last at 2980 and no more at 3000: stop-master began at 2990,
			// within that gap, so the mastership may have ended by it.
			name: "a stop-master in the poller's gap before it saw the master no more",
			h: cluster3.with(
				harness(KindFault, 2, FaultForger, "", 2000), harness(KindHeal, 2, FaultForger, "", 6000),
				Record{T: 2100 * ms, Proc: HarnessNode, Kind: KindForgery, Seq: 2, Peer: "b", Term: 9e15, Highest: 10, Detail: "acquired notice, huge term"},
			).without(func(r Record) bool { return r.Proc == "a" && r.Kind == KindLost }).
				with(Record{T: 2980 * ms, Begin: 2980*ms - 1000, Seen: 3000 * ms, Proc: "a", Node: "a", Kind: KindLost, Term: 10}),
		},
		{
			name:  "transfer to a live candidate that another process won",
			h:     cluster3.with(Record{T: 2990 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 5, Detail: FaultTransfer, Peer: "c", Term: 10, Variant: "live:stdin"}),
			wants: []string{"transfer: transfer 5 to the live candidate c: the next master was b (term 11)"},
		},
		{
			// Its link was reset until just before the request: it may still be
			// re-dialling when the lock is free, so the promise is not judged.
			name: "transfer to a live candidate whose link had just been reset",
			h: cluster3.with(
				Record{T: 2000 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 4, Detail: FaultResetPeer, Peer: "c"},
				Record{T: 2989 * ms, Proc: HarnessNode, Kind: KindHeal, Seq: 4, Detail: FaultResetPeer, Peer: "c"},
				Record{T: 2990 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 5, Detail: FaultTransfer, Peer: "c", Term: 10, Variant: "live:stdin"}),
		},
		{
			name: "transfer to a live candidate that won",
			h:    cluster3.with(Record{T: 2990 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 5, Detail: FaultTransfer, Peer: "b", Term: 10, Variant: "live:control"}),
		},
		{
			name:  "transfer to a non-candidate that became master",
			h:     cluster3.with(Record{T: 2990 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 5, Detail: FaultTransfer, Peer: "b", Term: 10, Variant: "non-candidate:stdin"}),
			wants: []string{"transfer: transfer 5 to the non-candidate node b: it became master (term 11)"},
		},
		{
			name:  "transfer to a dead node that became master",
			h:     cluster3.with(Record{T: 2990 * ms, Proc: HarnessNode, Kind: KindFault, Seq: 5, Detail: FaultTransfer, Peer: "b", Term: 10, Variant: "dead:control"}),
			wants: []string{"transfer: transfer 5 to the dead node b: it became master (term 11)"},
		},
		{
			// A defect fixed before: a master resumed after a pause past its
			// lock registered itself as master under its old term.
			name: "a replaced master registered as master under its old term",
			h:    cluster3.with(Record{T: 4000 * ms, Proc: HarnessNode, Kind: KindRegNotice, Detail: NoticeRegistered, Peer: "a", Role: "master", Term: 10}),
			wants: []string{
				"role: registered notice received at 4000.000ms says a is master under term 10, but b had been master under term 11 for 800ms when it was written",
				"role: registered notice received at 4000.000ms says a is master under term 10, written 1s after that mastership ended",
			},
		},
		{
			// Seen in the soak (seed 1795658670155923430 on Valkey): a
			// master's registration ran a few ms before Redis was paused
			// (SIGSTOP), and its notice left Redis only at the resume,
			// after the mastership had ended on its deadline.
			name: "a master's notice held up by a Redis pause",
			h: cluster3.with(harness(KindFault, 9, FaultRedisPause, "", 2950), harness(KindHeal, 9, FaultRedisPause, "", 3990),
				Record{T: 4000 * ms, Proc: HarnessNode, Kind: KindRegNotice, Detail: NoticeRegistered, Peer: "a", Role: "master", Term: 10, Seen: 2940 * ms}),
		},
		{
			name: "a master's notice that came later than a round trip after a Redis pause",
			h: cluster3.with(harness(KindFault, 9, FaultRedisPause, "", 2950), harness(KindHeal, 9, FaultRedisPause, "", 3900),
				Record{T: 4000 * ms, Proc: HarnessNode, Kind: KindRegNotice, Detail: NoticeRegistered, Peer: "a", Role: "master", Term: 10, Seen: 2940 * ms}),
			wants: []string{
				"role: registered notice received at 4000.000ms says a is master under term 10, but b had been master under term 11 for 800ms when it was written",
				"role: registered notice received at 4000.000ms says a is master under term 10, written 1s after that mastership ended",
			},
		},
		{
			// The election's acquire registers the new master in its own
			// script call: when its reply is lost, the process never learns
			// of the term, and its entry says master until its next write.
			name: "an acquire whose reply was lost registered its process as master",
			h: cluster3.with(Record{T: 5000 * ms, Proc: "c", Node: "c", Kind: KindLockCall, Detail: AcquireRegister},
				Record{T: 5002 * ms, Proc: HarnessNode, Kind: KindRegNotice, Detail: NoticeRegistered, Peer: "c", Role: "master", Term: 12, Seen: 5000 * ms},
				poll(5450, "b/master/11", "a/slave/0", "c/master/12/5000")),
		},
		{
			name:  "a master entry under a term its process never held, and no acquire of its own",
			h:     cluster3.with(Record{T: 5002 * ms, Proc: HarnessNode, Kind: KindRegNotice, Detail: NoticeRegistered, Peer: "c", Role: "master", Term: 12, Seen: 5000 * ms}),
			wants: []string{"role: registered notice received at 5002.000ms says c is master under term 12, which it never held"},
		},
		{
			// Only Start's acquire registers: a plain one's lost reply
			// excuses no master entry.
			name: "a master entry under a term its process never held, and only a plain acquire of its own",
			h: cluster3.with(Record{T: 5000 * ms, Proc: "c", Node: "c", Kind: KindLockCall, Detail: "acquire"},
				Record{T: 5002 * ms, Proc: HarnessNode, Kind: KindRegNotice, Detail: NoticeRegistered, Peer: "c", Role: "master", Term: 12, Seen: 5000 * ms}),
			wants: []string{"role: registered notice received at 5002.000ms says c is master under term 12, which it never held"},
		},
		{
			name: "a lost acquire's master entry not written again as a slave's",
			h: cluster3.with(Record{T: 5000 * ms, Proc: "c", Node: "c", Kind: KindLockCall, Detail: AcquireRegister},
				poll(5700, "b/master/11", "a/slave/0", "c/master/12/5000")),
			wants: []string{"role: c's registry entry still said master (term 12) 699ms after that mastership ended"},
		},
		{
			name: "a forged registered notice is not judged as a write",
			h:    cluster3.with(Record{T: 4000 * ms, Proc: HarnessNode, Kind: KindRegNotice, Detail: NoticeRegistered + " forged", Peer: "a", Role: "master", Term: 10}),
		},
		{
			name:  "an entry still says master long after the mastership ended",
			h:     cluster3.with(poll(3800, "a/master/10/2950", "b/master/11", "c/slave/0")),
			wants: []string{"role: a's registry entry still said master (term 10) 699ms after that mastership ended"},
		},
		{
			name:  "a master entry written after a data loss",
			h:     cluster3.with(harness(KindRedisDown, 9, "", "", 5000), poll(5500, "b/master/11", "a/slave/0", "c/slave/0")),
			wants: []string{"says b is master under term 11, written after Redis lost its data at 5000.000ms"},
		},
		{
			// A defect fixed before (a notice older than a sweep), and a forged unregistered notice: a
			// live slave reported removed.
			name:  "a slave whose heartbeats kept arriving reported removed",
			h:     cluster3.with(rec("b", KindSlaveLeft, 11, 0, "c", 5000), rec("b", KindSlaveJoined, 11, 0, "c", 5200)),
			wants: []string{"slave-events: b (term 11) reported slave-removed of c, whose heartbeats kept arriving"},
		},
		{
			name: "a paused slave reported removed",
			h: cluster3.with(harness(KindFault, 3, FaultPauseSlave, "c", 4000), harness(KindHeal, 3, FaultPauseSlave, "c", 5500),
				rec("b", KindSlaveLeft, 11, 0, "c", 5000), rec("b", KindSlaveJoined, 11, 0, "c", 5600)),
		},
		{
			name:  "a ghost reported registered",
			h:     cluster3.with(rec("b", KindSlaveJoined, 11, 0, "ghost-1", 5000)),
			wants: []string{`slave-events: b (term 11) reported slave-joined of "ghost-1", which no process ever was`},
		},
		{
			name:  "a live slave never reported registered",
			h:     cluster3.without(func(r Record) bool { return r.Kind == KindSlaveJoined && r.Peer == "c" && r.Proc == "b" }),
			wants: []string{"slave-events: b (term 11) never reported it as registered 1.2s after the cluster settled with c live and listed"},
		},
		{
			name: "a live process not listed",
			h: cluster3.without(func(r Record) bool { return r.Kind == KindRegPoll && r.T == 5000*ms }).
				with(poll(5000, "b/master/11", "a/slave/0")),
			wants: []string{"listing: c, alive for 4.999s with no fault on it or Redis in the last ProcessTTL, was not listed by the read that ended at 5000.000ms"},
		},
		{
			name: "a dead process listed past its TTL",
			h: cluster3.with(harness(KindDead, 0, "killed", "c", 4000), rec("b", KindSlaveLeft, 11, 0, "c", 5100)).
				without(func(r Record) bool { return r.Kind == KindAccepted && r.Proc == "c" && r.T > 4000*ms }),
			wants: []string{"listing: c, reaped at 4000.000ms, was still listed"},
		},
		{
			// A twin of c took c's node id (Redis lost c's entry while the
			// twin waited) and c stepped aside: the id listed after c's
			// death is the twin's. (The pause of c makes the twin checker
			// judge leniently, as Redis's loss does in a real history.)
			name: "a dead process's id listed while its twin lives",
			h: cluster3.with(harness(KindSpawn, 0, TwinOf+"c", "c-twin9", 3500),
				harness(KindFault, 7, FaultPauseSlave, "c", 3600), harness(KindHeal, 7, FaultPauseSlave, "c", 3650),
				harness(KindDead, 0, "exited 0", "c", 4000),
				rec("b", KindSlaveLeft, 11, 0, "c", 5100)).
				without(func(r Record) bool { return r.Kind == KindAccepted && r.Proc == "c" && r.T > 4000*ms }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.h, oracleParams)
			got := map[string]bool{}
			for _, v := range r.Violations {
				got[v.String()] = true
			}
			for _, w := range tt.wants {
				found := false
				for g := range got {
					if strings.Contains(g, w) {
						found = true
						delete(got, g)
					}
				}
				if !found {
					t.Errorf("no violation %q", w)
				}
			}
			for g := range got {
				t.Errorf("unexpected violation %q", g)
			}
		})
	}
}
