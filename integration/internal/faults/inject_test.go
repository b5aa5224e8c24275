//go:build linux

package faults

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// play plays fault f: it breaks something, holds, undoes it, and records
// both moments. The faults of f.inner are played while f is in force, one
// after the other, each once the cluster has settled without f's target;
// f is then undone f.tail after the last one ends (and no sooner than
// f.hold after it began). A composite (f.as set) is also recorded as a
// fault of its own kind around all of it.
func (c *cluster) play(f fault) {
	c.t.Helper()
	var whole Record
	if f.as != "" {
		whole = Record{Kind: KindFault, Seq: c.nextSeq(), Detail: f.as}
		c.add(whole)
	}
	seq := c.nextSeq()
	began := time.Now()
	heal := c.begin(seq, f)
	for _, in := range f.inner {
		c.waitStable(fmt.Sprintf("fault %d (%s) in force", seq, f.kind))
		c.play(in)
	}
	wait := f.hold
	if len(f.inner) > 0 {
		wait = max(f.tail, f.hold-time.Since(began))
	}
	time.Sleep(wait)
	heal()
	if f.as != "" {
		c.add(Record{Kind: KindHeal, Seq: whole.Seq, Detail: f.as})
	}
}

// nextSeq numbers the faults of a run in the order they begin.
func (c *cluster) nextSeq() int64 {
	c.seq++
	return c.seq
}

// begin breaks what fault number seq of kind f.kind breaks and returns the
// function that undoes it. Targets are picked now, among the processes no
// other fault holds: the current master, or a random slave. A fault without
// a target is skipped (noted; its undo does nothing).
func (c *cluster) begin(seq int64, f fault) (heal func()) {
	c.t.Helper()
	master := c.currentMaster()
	if master != nil && master.slot.faulted {
		master = nil
	}
	pickSlave := func() *process {
		ss := c.slaves(master)
		if len(ss) == 0 {
			return nil
		}
		return ss[c.rng.IntN(len(ss))]
	}
	var target *process
	switch f.kind {
	case FaultKillMaster, FaultPauseMaster, FaultStopMaster, FaultBurstKillMaster:
		target = master
	case FaultKillSlave, FaultPauseSlave, FaultRestartSlave, FaultConsumerBlip:
		target = pickSlave()
		if f.target == "first-ranked" {
			if first := c.firstRanked(master); first != nil {
				target = first
			}
		}
	case FaultLatency, FaultBlackhole, FaultResetPeer, FaultTwin:
		if f.target == "master" {
			target = master
		} else {
			target = pickSlave()
		}
	}
	switch f.kind {
	case FaultForger:
		rec := Record{Kind: KindFault, Seq: seq, Detail: f.kind}
		c.add(rec)
		stop := c.startForger(seq, master)
		return func() { stop(); c.add(Record{Kind: KindHeal, Seq: seq, Detail: f.kind}) }
	case FaultTransfer:
		return c.transfer(seq, f, master)
	}
	needsTarget := f.kind != FaultRedisRestart && f.kind != FaultRedisPause
	if needsTarget && target == nil {
		c.add(Record{Kind: KindNote, Seq: seq, Detail: fmt.Sprintf("fault %s skipped: no %s to target", f.kind, f.target)})
		return func() {}
	}
	if held := c.currentMaster(); takesOut[f.kind] && target != nil && target.candidate && held != nil && held != target && held.slot.faulted {
		if others := c.otherCandidates(held); len(others) == 1 && others[0] == target {
			// The master is held by a fault and this is the last candidate
			// that could take over: no one could within the failover bound,
			// so the fault would test nothing but the wait.
			c.add(Record{Kind: KindNote, Seq: seq, Detail: fmt.Sprintf("fault %s skipped: it would take out the last candidate while the master is held", f.kind)})
			return func() {}
		}
	}
	crash := masterLeaves[f.kind] || target == master && (f.kind == FaultBlackhole || f.kind == FaultResetPeer)
	if crash && target == master && len(c.otherCandidates(master)) == 0 {
		// With no other candidate no one could take over within the
		// failover bound: the crash would test nothing but the wait.
		c.add(Record{Kind: KindNote, Seq: seq, Detail: fmt.Sprintf("fault %s skipped: no other candidate to take over", f.kind)})
		return func() {}
	}
	rec := Record{Kind: KindFault, Seq: seq, Detail: f.kind}
	var sl *slot
	if target != nil {
		rec.Peer, rec.Node = target.label, target.label
		if target == master {
			rec.Term = master.master.Load()
		}
		sl = target.slot
		sl.faulted = true
	}
	healRec := Record{Kind: KindHeal, Seq: seq, Detail: f.kind, Peer: rec.Peer, Node: rec.Node}
	healed := func() {
		if sl != nil {
			sl.faulted = false
		}
		c.add(healRec)
	}

	switch f.kind {
	case FaultKillMaster, FaultKillSlave:
		c.add(rec)
		c.kill(target)
		return func() { c.spawn(sl); healed() }
	case FaultBurstKillMaster:
		c.burst(seq, f, target)
		rec.Variant = f.variant
		c.add(rec)
		c.kill(target)
		return func() { c.spawn(sl); healed() }
	case FaultConsumerBlip:
		// Not a timeout toxic: a fresh connection's handshake (HELLO)
		// would never be answered and no command would be sent at all.
		c.add(Record{Kind: KindNote, Seq: seq, Peer: target.label, Detail: fmt.Sprintf("%s on %s: each of its connections closed after %d bytes of replies, the last reply cut", f.kind, target.label, f.n)})
		rec.Variant = fmt.Sprintf("limit_data %d bytes", f.n)
		c.add(rec)
		remove := c.toxic(target, fmt.Sprintf("f%d", seq), "limit_data", []string{"downstream"}, fmt.Sprintf(`{"bytes":%d}`, f.n))
		return func() { remove(); healed() }
	case FaultStopMaster, FaultRestartSlave:
		c.add(rec)
		c.terminate(target)
		return func() { c.spawn(sl); healed() }
	case FaultPauseMaster, FaultPauseSlave:
		c.add(rec)
		c.pause(target)
		return func() { c.resume(target); healed() }
	case FaultTwin:
		rec.Variant = f.target
		c.add(rec)
		twin := c.spawnTwin(target, seq)
		c.add(Record{Kind: KindNote, Seq: seq, Peer: twin.label, Detail: fmt.Sprintf("%s: %s started under the node id of %s (the %s)", f.kind, twin.label, target.label, f.target)})
		return func() {
			if twin.alive() {
				c.add(Record{Kind: KindNote, Seq: seq, Peer: twin.label, Detail: "twin still running at the heal: stopped"})
				c.terminate(twin)
			}
			if !target.alive() {
				// It stepped aside for the twin (a fault held it past
				// SlaveTimeout meanwhile) and stopped: the slot gets its
				// next process, as after a restart.
				c.add(Record{Kind: KindNote, Seq: seq, Peer: target.label, Detail: "twin's peer ended while the twin ran: its slot respawned"})
				c.spawn(sl)
			}
			healed()
		}
	case FaultRedisRestart:
		c.add(rec)
		c.add(Record{Kind: KindRedisDown, Seq: seq})
		c.redis.Restart(c.t)
		return healed
	case FaultRedisPause:
		c.add(rec)
		c.redis.Pause(c.t)
		return func() { c.redis.Resume(c.t); healed() }
	case FaultLatency, FaultBlackhole, FaultResetPeer:
		kind, attrs := "", ""
		switch f.kind {
		case FaultLatency:
			kind, attrs = "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, f.latency.Milliseconds(), f.latency.Milliseconds()/10)
		case FaultBlackhole:
			kind, attrs = "timeout", `{"timeout":0}`
		case FaultResetPeer:
			kind, attrs = "reset_peer", `{"timeout":0}`
		}
		if target == master && f.kind != FaultLatency && slices.Contains(f.streams, "upstream") {
			rec.Highest = 1 // the master's requests are cut off: a crash for the failover check
		}
		c.add(Record{Kind: KindNote, Seq: seq, Peer: target.label, Detail: fmt.Sprintf("%s on %s (%s), streams %v, latency %v", f.kind, target.label, f.target, f.streams, f.latency)})
		if f.kind == FaultLatency {
			rec.Variant = f.latency.String()
		}
		c.add(rec)
		remove := c.toxic(target, fmt.Sprintf("f%d", seq), kind, f.streams, attrs)
		return func() { remove(); healed() }
	}
	c.t.Fatalf("unknown fault kind %q", f.kind)
	return nil
}

// burst asks master for a burst of f.n durable messages on its standard
// input and returns once it has sent them all (f.variant BurstAfter), or
// once f.count more of its stores are recorded (BurstDuring), or once it
// reported that it sent none; at most 10 s. What happened is noted.
func (c *cluster) burst(seq int64, f fault, master *process) {
	stored, ended := master.stored.Load(), master.bursts.Load()
	c.add(Record{Kind: KindNote, Seq: seq, Peer: master.label, Detail: fmt.Sprintf("burst of %d durable messages asked of %s, killed %s", f.n, master.label, f.variant)})
	if _, err := fmt.Fprintf(master.stdin, "burst %d\n", f.n); err != nil {
		c.add(Record{Kind: KindNote, Seq: seq, Detail: "burst command not written: " + err.Error()})
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && master.alive() {
		if master.bursts.Load() > ended || f.variant == BurstDuring && master.stored.Load()-stored >= int64(f.count) {
			c.add(Record{Kind: KindNote, Seq: seq, Peer: master.label, Detail: fmt.Sprintf("burst: %d stores recorded since the request", master.stored.Load()-stored)})
			return
		}
		time.Sleep(500 * time.Microsecond)
	}
	c.add(Record{Kind: KindNote, Seq: seq, Peer: master.label, Detail: fmt.Sprintf("burst: not over after 10s (%d stores recorded)", master.stored.Load()-stored)})
}

// currentMaster returns the running (not paused) process whose records say
// it is master, or nil.
func (c *cluster) currentMaster() *process {
	for _, p := range c.live() {
		if p.master.Load() != 0 && !p.paused.Load() {
			return p
		}
	}
	return nil
}

// transfer plays a FaultTransfer of variant f.variant (see the Transfer*
// constants), asking the master by f.via ("stdin" or "control"), and
// returns what undoes it: the respawn of a process it killed.
func (c *cluster) transfer(seq int64, f fault, master *process) (heal func()) {
	c.t.Helper()
	variant := f.variant
	if variant == TransferNonCandidate && (c.nonCandidate == nil || c.nonCandidate.cur == nil || !c.nonCandidate.cur.alive() || c.nonCandidate.faulted) {
		variant = TransferLive // no non-candidate to name in this cluster
	}
	var target *process
	switch variant {
	case TransferLive, TransferRaceTarget, TransferRaceMaster:
		if cs := c.otherCandidates(master); len(cs) > 0 {
			target = cs[c.rng.IntN(len(cs))]
		}
	case TransferDead:
		if ss := c.slaves(master); len(ss) > 0 {
			target = ss[c.rng.IntN(len(ss))]
		}
	case TransferNonCandidate:
		target = c.nonCandidate.cur
	}
	if master == nil || target == nil || target == master {
		c.add(Record{Kind: KindNote, Seq: seq, Detail: fmt.Sprintf("fault %s (%s) skipped: no master or no target", f.kind, variant)})
		return func() {}
	}
	var killed []*process // respawned by the heal
	var healRecs []Record
	kill := func(p *process) {
		r := Record{Kind: KindFault, Seq: c.nextSeq(), Detail: FaultKillSlave, Peer: p.label, Node: p.label}
		if t := p.master.Load(); t != 0 {
			r.Detail, r.Term = FaultKillMaster, t
		}
		p.slot.faulted = true
		c.add(r)
		c.kill(p)
		killed = append(killed, p)
		healRecs = append(healRecs, Record{Kind: KindHeal, Seq: r.Seq, Detail: r.Detail, Peer: r.Peer, Node: r.Node})
	}
	if variant == TransferDead {
		kill(target)
	}
	rec := Record{Kind: KindFault, Seq: seq, Detail: f.kind, Peer: target.label, Node: target.label,
		Term: master.master.Load(), Variant: variant + ":" + f.via}
	c.add(rec)
	if f.via == "control" {
		c.requestTransfer(seq, target.label, rec.Term)
	} else if _, err := fmt.Fprintf(master.stdin, "transfer %s\n", target.label); err != nil {
		c.add(Record{Kind: KindNote, Seq: seq, Detail: "transfer command not written: " + err.Error()})
	}
	switch variant {
	case TransferRaceTarget:
		time.Sleep(between(c.rng, 0, 20*time.Millisecond))
		kill(target)
	case TransferRaceMaster:
		time.Sleep(between(c.rng, 0, 20*time.Millisecond))
		kill(master)
	}
	return func() {
		for _, p := range killed {
			c.spawn(p.slot)
			p.slot.faulted = false
		}
		for _, r := range healRecs {
			c.add(r)
		}
		c.add(Record{Kind: KindHeal, Seq: seq, Detail: f.kind, Peer: rec.Peer, Node: rec.Node})
	}
}

// requestTransfer publishes a transfer request to node for the master of
// term on the control channel, as herd step-down does: again after 100 ms,
// then at doubling intervals up to 1 s, until Redis shows a larger term or
// 3 s have passed. Pub/sub keeps nothing for a master whose subscription
// is reconnecting (after a network fault on it heals); the term keeps the
// next master from honouring a copy.
func (c *cluster) requestTransfer(seq int64, node string, term int64) {
	payload := fmt.Sprintf(`{"request":"transfer","to":%q,"term":%d}`, node, term)
	publish := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.admin.Publish(ctx, c.keys.Control, payload).Err()
	}
	if err := publish(); err != nil {
		c.add(Record{Kind: KindNote, Seq: seq, Detail: "transfer request not published: " + err.Error()})
	}
	c.requests.Add(1)
	go func() {
		defer c.requests.Done()
		end := time.Now().Add(3 * time.Second)
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			time.Sleep(min(wait, time.Until(end)))
			if time.Now().After(end) {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := rdb.Check(ctx, c.admin, c.keys)
			cancel()
			if err == nil && st.Term > term {
				return
			}
			if err := publish(); err != nil {
				c.add(Record{Kind: KindNote, Seq: seq, Detail: "transfer request not published again: " + err.Error()})
			}
		}
	}()
}

// firstRanked returns the running slave that the succession of master's
// term ranks first (the one that contends at once when the lock is free),
// or nil when there is none.
func (c *cluster) firstRanked(master *process) *process {
	if master == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := rdb.Check(ctx, c.admin, c.keys)
	if err != nil || st.Next.Term != master.master.Load() || len(st.Next.Order) == 0 {
		return nil
	}
	for _, p := range c.slaves(master) {
		if p.label == st.Next.Order[0] {
			return p
		}
	}
	return nil
}

// takesOut lists the faults that leave their target unable to take the lock
// for a while.
var takesOut = map[string]bool{
	FaultKillSlave: true, FaultPauseSlave: true, FaultRestartSlave: true,
	FaultBlackhole: true, FaultResetPeer: true,
}
