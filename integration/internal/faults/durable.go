package faults

import (
	"fmt"
	"sort"
)

// BurstSeqBase divides the Seq of the messages of a burst (KindBurst) from
// those of the master's ticks: the messages of a node's k-th burst have Seq
// k × BurstSeqBase + 1, + 2, ...
const BurstSeqBase = 1_000_000

// DurableCounts are what the durable checker counted over the records of
// nodes run with -durable (package durable beside pub/sub); all zero
// otherwise. A message is what users count: one stored send (its message
// id), whatever became of its entries.
type DurableCounts struct {
	// Stored: sends the master saw succeed (BurstStored of them in
	// bursts); Handled: handlings (Distinct: of different messages).
	Stored, BurstStored, Handled, Distinct int
	// Rejected: rejections of an entry as stale or as unverified (a stale
	// entry is left in the inbox for the next master to adopt, so a
	// rejection is not the end of a message's story); Left: messages still
	// in an inbox after the final drain and the shutdown; Dead: messages in
	// the dead-letter stream then. None of them excuses a message.
	Rejected, Left, Dead int
	// Lost: stored messages that no handler ever finished, with no loss of
	// Redis's data after the store (each a violation), whatever the reason.
	// Of them: LostInInbox were still in an inbox at the end, LostDead in
	// the dead-letter stream, LostRejected nowhere but rejected at least
	// once; the others left no trace after their store.
	Lost, LostInInbox, LostDead, LostRejected int
	// LostToDataLoss: stored messages never handled, after Redis lost its
	// data (excused: the inboxes are as durable as Redis).
	LostToDataLoss int
	// Stale: handlings under a stale term, breaking the receiver's fence: a
	// term below one the same process had handled before, or below the
	// Consumer's highest term then (each a violation).
	Stale int
	// LateStores: stores whose call began after a mastership of a higher
	// term had begun, with no data loss in between: a deposed master's
	// entry that Redis took (each a violation).
	LateStores int
	// Duplicates: handlings beyond the first of each message (counted, not
	// a violation: delivery is at least once), by cause, each compared with
	// the handling of the same message before it: DupRedelivered by the
	// same process under the same term (the entry delivered again from the
	// pending list: an acknowledgement or a reply lost, a handling cut by a
	// crash or a restart); DupAdopted by the same process under another
	// term (a new master's sweep re-added the entry while, or after, it was
	// handled and before its acknowledgement removed it); DupMoved by
	// another process (the entry moved to another inbox: a sweep or
	// Reassign of a process that had left the registry).
	Duplicates, DupRedelivered, DupAdopted, DupMoved int
	// LateFirst: messages whose first handling came on a delivery beyond
	// the first (Deliveries > 1): an earlier delivery reached no handler
	// (its reply was lost, or the process stopped before its handler ran)
	// and the entry was delivered again from the pending list.
	LateFirst int
}

// durable checks durable routing: messages lost: 0, handled under a stale
// term: 0, stores by a deposed master: 0; duplicates counted by cause.
func (c *checker) durable() {
	var d DurableCounts
	stored := map[string]Record{}
	handled := map[string][]Record{}
	rejected := map[string]bool{}
	left := map[string]bool{}
	dead := map[string]bool{}
	highest := map[string]int64{} // per receiver process: highest term handled
	var end int64
	for _, r := range c.recs {
		end = max(end, r.T)
		switch r.Kind {
		case KindDurableStored:
			d.Stored++
			if r.Seq > BurstSeqBase {
				d.BurstStored++
			}
			stored[r.Detail] = r
		case KindDurableHandled:
			d.Handled++
			if hs := handled[r.Detail]; len(hs) > 0 {
				prev := hs[len(hs)-1]
				d.Duplicates++
				switch {
				case prev.Proc != r.Proc:
					d.DupMoved++
				case prev.Term != r.Term:
					d.DupAdopted++
				default:
					d.DupRedelivered++
				}
			} else if r.Deliveries > 1 {
				d.LateFirst++
			}
			handled[r.Detail] = append(handled[r.Detail], r)
			c.rep.Judged["durable"]++
			if r.Term < highest[r.Proc] || r.Term < r.Highest {
				d.Stale++
				c.fail("durable", r.T, "%s handled message %d from %s written under term %d after handling term %d (its fence was %d)",
					r.Proc, r.Seq, r.Peer, r.Term, highest[r.Proc], r.Highest)
			}
			highest[r.Proc] = max(highest[r.Proc], r.Term)
		case KindDurableRejected:
			d.Rejected++
			rejected[r.Detail] = true
		case KindDurableLeft:
			if !left[r.Detail] {
				d.Left++
			}
			left[r.Detail] = true
		case KindDurableDead:
			if !dead[r.Detail] {
				d.Dead++
			}
			dead[r.Detail] = true
		}
	}
	d.Distinct = len(handled)
	ids := make([]string, 0, len(stored))
	for id := range stored {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return stored[ids[i]].T < stored[ids[j]].T })
	for _, id := range ids {
		r := stored[id]
		for _, m := range c.rep.Masterships {
			if m.Proc != r.Proc && m.Term > r.Term && m.Start < r.Begin && !c.dataLossBetween(m.Start, r.T) {
				d.LateStores++
				c.fail("durable", r.T, "%s stored message %d in %s's inbox under term %d, in a call begun %v after %s began term %d",
					r.Proc, r.Seq, r.Peer, r.Term, Duration(r.Begin-m.Start), m.Proc, m.Term)
				break
			}
		}
		if len(handled[id]) > 0 {
			continue
		}
		if c.dataLossBetween(r.Begin, end) {
			d.LostToDataLoss++
			continue
		}
		d.Lost++
		fate := "and left no trace (not in an inbox nor in the dead-letter stream at the end)"
		switch {
		case left[id]:
			d.LostInInbox++
			fate = "and was still in an inbox at the end"
		case dead[id]:
			d.LostDead++
			fate = "and was in the dead-letter stream at the end"
		case rejected[id]:
			d.LostRejected++
			fate = "after a rejection (as stale or unverified), and was nowhere at the end"
		}
		if rejected[id] && (left[id] || dead[id]) {
			fate += ", rejected before"
		}
		c.fail("durable", r.T, "message %d (%s) that %s stored in %s's inbox under term %d was never handled, %s",
			r.Seq, id, r.Proc, r.Peer, r.Term, fate)
	}
	c.rep.Durable = d
}

// String is the durable counts in one line, for the logs.
func (d DurableCounts) String() string {
	return fmt.Sprintf("stored %d (%d in bursts), handled %d (%d messages, %d first handled on a later delivery), rejected %d, left in inboxes %d, dead letters %d; "+
		"lost %d (in an inbox %d, dead-lettered %d, after a rejection %d), lost with Redis's data %d, handled under a stale term %d, stores after a newer mastership %d, "+
		"duplicates %d (redelivered %d, adopted %d, moved %d)",
		d.Stored, d.BurstStored, d.Handled, d.Distinct, d.LateFirst, d.Rejected, d.Left, d.Dead,
		d.Lost, d.LostInInbox, d.LostDead, d.LostRejected, d.LostToDataLoss, d.Stale, d.LateStores,
		d.Duplicates, d.DupRedelivered, d.DupAdopted, d.DupMoved)
}
