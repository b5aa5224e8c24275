package faults

import "sort"

// DurableCounts are what the durable checker counted over the records of
// nodes run with -durable (package durable beside pub/sub); all zero
// otherwise.
type DurableCounts struct {
	// Stored: sends the master saw succeed; Handled: handlings (Distinct:
	// of different messages); Rejected: entries rejected as stale or
	// refused as unverified; Left: messages still in an inbox after the
	// shutdown.
	Stored, Handled, Distinct, Rejected, Left int
	// Lost: stored messages never handled, rejected or left in an inbox,
	// with no loss of Redis's data after the store (each a violation);
	// LostToDataLoss: the same after Redis lost its data (excused: the
	// inboxes are as durable as Redis).
	Lost, LostToDataLoss int
	// Stale: handlings under a stale term, breaking the receiver's fence: a
	// term below one the same process had handled before, or below the
	// Consumer's highest term then (each a violation).
	Stale int
	// LateStores: stores whose call began after a mastership of a higher
	// term had begun, with no data loss in between: a deposed master's
	// entry that Redis took (each a violation).
	LateStores int
	// Duplicates: handlings beyond the first of each message (counted, not
	// a violation: delivery is at least once).
	Duplicates int
}

// durable checks durable routing: messages lost: 0, handled under a stale
// term: 0, stores by a deposed master: 0; duplicates counted.
func (c *checker) durable() {
	var d DurableCounts
	stored := map[string]Record{}
	handled := map[string]int{}
	rejected := map[string]bool{}
	left := map[string]bool{}
	highest := map[string]int64{} // per receiver process: highest term handled
	var end int64
	for _, r := range c.recs {
		end = max(end, r.T)
		switch r.Kind {
		case KindDurableStored:
			d.Stored++
			stored[r.Detail] = r
		case KindDurableHandled:
			d.Handled++
			handled[r.Detail]++
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
			d.Left++
			left[r.Detail] = true
		}
	}
	d.Distinct = len(handled)
	for _, n := range handled {
		d.Duplicates += n - 1
	}
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
		if handled[id] > 0 || rejected[id] || left[id] {
			continue
		}
		if c.dataLossBetween(r.Begin, end) {
			d.LostToDataLoss++
			continue
		}
		d.Lost++
		c.fail("durable", r.T, "message %d (%s) that %s stored in %s's inbox under term %d was never handled, rejected or left in an inbox",
			r.Seq, id, r.Proc, r.Peer, r.Term)
	}
	c.rep.Durable = d
}
