package faults

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// TwinCounts are the twins of a history (FaultTwin) and what became of
// them.
type TwinCounts struct {
	// Started counts the twins spawned, Refused those whose Start was
	// refused with ErrDuplicateNodeID (KindTwinRefused), Stopped those the
	// harness stopped before their refusal could be due (the fault healed
	// first).
	Started, Refused, Stopped int
	// Lenient counts the twins whose peer, or Redis, a fault held while
	// they ran (or just before): the peer's entry may then have gone
	// SlaveTimeout without a write, and either process may keep the node
	// id. PeerAside counts the peers that stepped aside for their twin
	// (KindSteppedAside), which only such a fault allows.
	Lenient, PeerAside int
	// MaxRefusal is the longest from a twin's spawn to its refusal.
	MaxRefusal time.Duration
}

// twinOf is one twin of a history, from its KindSpawn.
type twinOf struct {
	label, node, peer string
	spawn             int64
}

// twinWork are the kinds of record that show a process working under its
// node id: mastership, its ctxs, an item, a durable message.
var twinWork = []Kind{KindAcquired, KindCtxLive, KindItemLive, KindDurableHandled, KindDurableRejected}

// twins judges the twins (FaultTwin): processes the harness started under
// the node id of a live process, its peer (docs/safety.md, "Twins and
// restarts"). Always:
//
//   - a twin whose Start was refused did no work before (no mastership, no
//     ctx or item live, no durable message handled or rejected: the
//     election does not contend, the Worker is not started and the
//     Consumer reads only while the process holds its node id);
//   - at no instant do two processes under one node id both have an item's
//     OnAssigned ctx live (any items; the ownership check judges one item
//     across every process), unless Redis lost its data in between.
//
// Unless a fault held the peer or Redis from SlaveTimeout + Slack before
// the twin's spawn to its end (the peer's entry may then have gone
// SlaveTimeout without a write, so the twin may be the one that keeps the
// id: judged leniently, and counted), or the peer was not scheduled for
// SlaveTimeout/2 meanwhile:
//
//   - the twin's Start is refused within TwinBound of its spawn, unless the
//     harness stopped it before (the fault healed first); its Start never
//     returns, and it does no work at all;
//   - its peer does not step aside, does not end while the twin runs, and a
//     peer that was master at the twin's spawn stays master while the twin
//     runs (but for a hand-back to a higher priority). The registry
//     checks (slave-events, listing, role) see a twin's fault as no fault
//     on the peer, so they judge the peer's registration as usual.
func (c *checker) twins() {
	var ts []twinOf
	refused := map[string]int64{}
	ready := map[string]bool{}
	work := map[string]Record{} // per process, its first record of work
	aside := map[string]Record{}
	for _, r := range c.recs {
		switch r.Kind {
		case KindSpawn:
			if peer, ok := strings.CutPrefix(r.Detail, TwinOf); ok {
				ts = append(ts, twinOf{label: r.Peer, node: r.Node, peer: peer, spawn: r.T})
			}
		case KindTwinRefused:
			if _, ok := refused[r.Proc]; !ok {
				refused[r.Proc] = r.T
			}
		case KindReady:
			ready[r.Proc] = true
		case KindSteppedAside:
			if _, ok := aside[r.Proc]; !ok {
				aside[r.Proc] = r
			}
		}
		if slices.Contains(twinWork, r.Kind) {
			if _, ok := work[r.Proc]; !ok {
				work[r.Proc] = r
			}
		}
	}
	c.itemsPerNode()
	if len(ts) == 0 {
		return
	}
	lives, spans := c.lives(), c.spans()
	bound := c.p.TwinBound()
	for _, t := range ts {
		tc := &c.rep.Twins
		tc.Started++
		c.rep.Judged["twin"]++
		l := lives[t.label]
		end := c.end()
		if l != nil && l.dead != 0 {
			end = l.dead
		}
		from := t.spawn - int64(c.p.SlaveTimeout+c.p.Slack)
		lenient := disturbed(spans, from, end, t.peer) || c.stalled(from, end, c.p.SlaveTimeout/2, t.peer)
		refusedAt, wasRefused := refused[t.label]
		if wasRefused {
			tc.Refused++
			tc.MaxRefusal = max(tc.MaxRefusal, time.Duration(refusedAt-t.spawn))
		}
		w, worked := work[t.label]
		if wasRefused && worked && w.T <= refusedAt {
			c.fail("twin", w.T, "twin %s of %s (node id %s) was refused, but recorded %s (%s) %v after its spawn, before the refusal",
				t.label, t.peer, t.node, w.Kind, w.Detail, time.Duration(w.T-t.spawn))
		}
		if _, ok := aside[t.peer]; ok && lenient {
			tc.PeerAside++
		}
		if lenient {
			tc.Lenient++
			continue
		}
		deadline := t.spawn + int64(bound)
		switch {
		case wasRefused && refusedAt > deadline:
			c.fail("twin", refusedAt, "twin %s of %s (node id %s) was refused %v after its spawn, bound %v",
				t.label, t.peer, t.node, time.Duration(refusedAt-t.spawn), bound)
		case !wasRefused:
			gone := end
			if l != nil && l.stopping != 0 {
				gone = min(gone, l.stopping)
			}
			if gone > deadline {
				c.fail("twin", deadline, "twin %s of %s (node id %s) ran %v without its Start being refused, bound %v",
					t.label, t.peer, t.node, time.Duration(gone-t.spawn), bound)
			} else {
				tc.Stopped++
			}
		}
		if ready[t.label] {
			c.fail("twin", t.spawn, "twin %s of %s (node id %s): its Start returned, with %s alive and undisturbed", t.label, t.peer, t.node, t.peer)
		}
		if worked {
			c.fail("twin", w.T, "twin %s of %s (node id %s) recorded %s (%s) %v after its spawn, with %s alive and undisturbed",
				t.label, t.peer, t.node, w.Kind, w.Detail, time.Duration(w.T-t.spawn), t.peer)
		}
		c.twinPeer(t, end, aside, lives)
	}
}

// twinPeer judges twin t's peer while t ran (to end), no fault holding it:
// it does not step aside (nor within SlaveTimeout + Slack after t ended:
// the refusal of its write may come a heartbeat late), it does not end, and
// a mastership it held at t's spawn lasts (but for a hand-back).
func (c *checker) twinPeer(t twinOf, end int64, aside map[string]Record, lives map[string]*life) {
	if r, ok := aside[t.peer]; ok && r.T >= t.spawn && r.T <= end+int64(c.p.SlaveTimeout+c.p.Slack) {
		c.fail("twin", r.T, "%s stepped aside for its twin %s (node id %s) %v after the twin's spawn, with no fault on it or Redis: %s",
			t.peer, t.label, t.node, time.Duration(r.T-t.spawn), r.Detail)
	}
	if p := lives[t.peer]; p != nil {
		for _, at := range []int64{p.stopping, p.dead} {
			if at != 0 && at >= t.spawn && at < end && !c.shutdownBy(at) {
				c.fail("twin", at, "%s ended %v after its twin %s (node id %s) started, while the twin ran, with no fault on it or Redis",
					t.peer, time.Duration(at-t.spawn), t.label, t.node)
				break
			}
		}
	}
	for _, m := range c.rep.Masterships {
		if m.Proc != t.peer || m.Start > t.spawn || m.End < t.spawn || m.How != "lost" || m.End >= end {
			continue
		}
		if _, ok := c.handedBack(m.Term); ok {
			continue
		}
		c.fail("twin", m.End, "%s's mastership (term %d) ended %v after its twin %s (node id %s) started, while the twin ran, with no fault on it or Redis",
			t.peer, m.Term, time.Duration(m.End-t.spawn), t.label, t.node)
	}
}

// shutdownBy reports whether the harness began the final shutdown by t.
func (c *checker) shutdownBy(t int64) bool {
	return slices.ContainsFunc(c.recs, func(r Record) bool { return r.Kind == KindShutdown && r.T <= t })
}

// itemsPerNode judges that at no instant two processes under one node id
// both have an item's ctx live (any items): a twin works no item while its
// peer does. Excused when Redis lost its data between the two starts, as
// the ownership check excuses it.
func (c *checker) itemsPerNode() {
	byNode := map[string][]Mastership{}
	for _, s := range c.rep.Items {
		if s.Node != "" {
			byNode[s.Node] = append(byNode[s.Node], s)
		}
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		ss := byNode[node] // sorted by start (ended sorts them)
		reported := map[string]bool{}
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				a, b := ss[i], ss[j]
				if b.Start > a.End {
					break
				}
				if a.Proc == b.Proc || reported[a.Proc+" "+b.Proc] || c.dataLossBetween(a.Start, b.Start) {
					continue
				}
				reported[a.Proc+" "+b.Proc] = true
				c.fail("twin", b.Start, "node id %s: %s had item %s live (%s) while %s had item %s live, for %v",
					node, a.Proc, a.Ctx, a.How, b.Proc, b.Ctx, time.Duration(min(a.End, b.End)-b.Start))
			}
		}
	}
}

// String describes the counts for a log line.
func (t TwinCounts) String() string {
	return fmt.Sprintf("%d started, %d refused (longest %v), %d stopped before, %d with the peer or Redis held (%d peers stepped aside)",
		t.Started, t.Refused, t.MaxRefusal, t.Stopped, t.Lenient, t.PeerAside)
}
