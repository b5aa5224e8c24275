//go:build linux

package faults

import (
	"fmt"
	"slices"
	"time"
)

// inject plays fault number seq: it breaks something, holds, undoes it, and
// records both moments. Targets are picked when the fault is injected: the
// current master, or a random slave.
func (c *cluster) inject(seq int, f fault) {
	c.t.Helper()
	master := c.currentMaster()
	pickSlave := func() *process {
		ss := c.slaves(master)
		if len(ss) == 0 {
			return nil
		}
		return ss[c.rng.IntN(len(ss))]
	}
	var target *process
	switch f.kind {
	case FaultKillMaster, FaultPauseMaster, FaultStopMaster:
		target = master
	case FaultKillSlave, FaultPauseSlave, FaultRestartSlave:
		target = pickSlave()
	case FaultLatency, FaultBlackhole, FaultResetPeer:
		if f.target == "master" {
			target = master
		} else {
			target = pickSlave()
		}
	}
	needsTarget := f.kind != FaultRedisRestart && f.kind != FaultRedisPause
	if needsTarget && target == nil {
		c.add(Record{Kind: KindNote, Seq: int64(seq), Detail: fmt.Sprintf("fault %s skipped: no %s to target", f.kind, f.target)})
		return
	}
	rec := Record{Kind: KindFault, Seq: int64(seq), Detail: f.kind}
	if target != nil {
		rec.Peer, rec.Node = target.label, target.label
		if target == master {
			rec.Term = master.master.Load()
		}
	}
	heal := Record{Kind: KindHeal, Seq: int64(seq), Detail: f.kind, Peer: rec.Peer, Node: rec.Node}

	switch f.kind {
	case FaultKillMaster, FaultKillSlave:
		c.add(rec)
		c.kill(target)
		time.Sleep(f.hold)
		c.spawn(target.slot)
		c.add(heal)
	case FaultStopMaster, FaultRestartSlave:
		c.add(rec)
		c.terminate(target)
		time.Sleep(f.hold)
		c.spawn(target.slot)
		c.add(heal)
	case FaultPauseMaster, FaultPauseSlave:
		c.add(rec)
		c.pause(target)
		time.Sleep(f.hold)
		c.resume(target)
		c.add(heal)
	case FaultRedisRestart:
		c.add(rec)
		c.add(Record{Kind: KindRedisDown, Seq: int64(seq)})
		c.redis.Restart(c.t)
		c.add(heal)
	case FaultRedisPause:
		c.add(rec)
		c.redis.Pause(c.t)
		time.Sleep(f.hold)
		c.redis.Resume(c.t)
		c.add(heal)
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
		c.add(Record{Kind: KindNote, Seq: int64(seq), Peer: target.label, Detail: fmt.Sprintf("%s on %s (%s), streams %v, latency %v", f.kind, target.label, f.target, f.streams, f.latency)})
		c.add(rec)
		remove := c.toxic(target, fmt.Sprintf("f%d", seq), kind, f.streams, attrs)
		time.Sleep(f.hold)
		remove()
		c.add(heal)
	default:
		c.t.Fatalf("unknown fault kind %q", f.kind)
	}
}

// currentMaster returns the live process whose records say it is master,
// or nil.
func (c *cluster) currentMaster() *process {
	for _, p := range c.live() {
		if p.master.Load() != 0 {
			return p
		}
	}
	return nil
}
