//go:build linux

package faults

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/pubsub"
)

// durableArgs are the node flags of durable routing, given to every node
// unless HERD_FAULTS_DURABLE=0 (to tell its findings apart from the rest).
func durableArgs() []string {
	if os.Getenv("HERD_FAULTS_DURABLE") == "0" {
		return nil
	}
	return []string{"-durable"}
}

// assignArgs are the node flags of package assign (20 items spread over
// the slaves, each OnAssigned ctx probed for the ownership checker), given
// to every node unless HERD_FAULTS_ASSIGN=0.
func assignArgs() []string {
	if os.Getenv("HERD_FAULTS_ASSIGN") == "0" {
		return nil
	}
	return []string{"-assign", strconv.Itoa(assignItems)}
}

// assignItems is how many items the nodes spread (item-000, item-001, ...,
// as integration/node names them).
const assignItems = 20

// ownedBound is the longest, after the cluster settles, until every item
// has an owner again, with the nodes' assign config (integration/node:
// LeaseTTL = LockTTL, RenewInterval = LockTTL/5, Settle 50 ms): a dead or
// cut-off owner's registry entry goes within ProcessTTL (plus a sweep),
// its lease within LeaseTTL, the master plans Settle after the change and
// again when the departed slave's Grace (the default, LockTTL × 2/3) ends,
// and an item moves in two renewals (the old owner gives it up, the new
// one claims it); Slack for the scheduling of a busy machine.
func (tm timing) ownedBound() time.Duration {
	return tm.processTTL + tm.check + tm.ttl + 50*time.Millisecond + tm.ttl*2/3 + 2*(tm.ttl/5) + tm.slack
}

// waitOwned waits, after the cluster settled, until every assign item's
// OnAssigned ctx is live (as the nodes' records say) in a live, running
// process other than the master, and records when (KindOwned). Not getting
// there within ownedBound is a violation of ownership's liveness. It
// judges nothing when the nodes spread no items or while no slave runs (no
// room). After Redis lost its data, each new master adds the items again
// (integration/node), so they are judged then too.
func (c *cluster) waitOwned(what string) {
	c.t.Helper()
	if assignArgs() == nil {
		return
	}
	begin := Now()
	deadline := time.Now().Add(c.tm.ownedBound())
	for {
		unowned, why := c.unowned()
		switch {
		case why != "":
			c.add(Record{Kind: KindNote, Detail: fmt.Sprintf("owners after %s not judged: %s", what, why)})
			return
		case len(unowned) == 0:
			c.add(Record{Kind: KindOwned, Begin: begin, Detail: what})
			return
		case time.Now().After(deadline):
			c.violate("owners", "%s: %d items had no owner %v after the cluster settled: %s",
				what, len(unowned), c.tm.ownedBound(), strings.Join(unowned, " "))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unowned returns the items no running slave holds live, or why the
// question cannot be asked.
func (c *cluster) unowned() (items []string, why string) {
	owned := map[string]bool{}
	slaves := 0
	for _, sl := range c.slots {
		p := sl.cur
		if p == nil || !p.alive() || p.paused.Load() || p.master.Load() != 0 {
			continue
		}
		slaves++
		p.mu.Lock()
		for item := range p.items {
			owned[item] = true
		}
		p.mu.Unlock()
	}
	if slaves == 0 {
		return nil, "no slave runs"
	}
	for i := range assignItems {
		if item := fmt.Sprintf("item-%03d", i); !owned[item] {
			items = append(items, item)
		}
	}
	return items, ""
}

// drainBound is the longest the final drain waits for the inboxes to
// empty: a process killed by the last fault is listed in the registry for
// up to ProcessTTL, after which the master's sweep moves its inbox to the
// live slaves; 4 × LockTTL more for the sweep, the slaves' pending passes
// (an entry delivered several times waits longer each time) and the
// handling itself.
func (tm timing) drainBound() time.Duration { return tm.processTTL + 4*tm.ttl }

// drainDurable ends a schedule's durable traffic before the final
// accounting: it tells every live node to send no more durable messages
// (the node's "durable-quiet" command), waits until each has recorded that
// its sends under way have returned, then waits until every inbox is empty
// (its entries handled, and the stale ones adopted and handled) on two
// counts in a row, or drainBound has passed. So a message still in an inbox at the end was not
// merely stored in the last moments: the checker counts it lost. Its
// outcome is noted in the timeline.
func (c *cluster) drainDurable() {
	if durableArgs() == nil {
		return
	}
	began := time.Now()
	live := c.live()
	c.add(Record{Kind: KindNote, Detail: fmt.Sprintf("durable drain: %d nodes told to send no more durable messages", len(live))})
	for _, p := range live {
		if _, err := fmt.Fprintln(p.stdin, "durable-quiet"); err != nil {
			c.add(Record{Kind: KindNote, Peer: p.label, Detail: "durable-quiet not written: " + err.Error()})
		}
	}
	deadline := began.Add(2 * time.Second)
	for _, p := range live {
		for !p.quiet.Load() && p.alive() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !p.quiet.Load() {
			c.add(Record{Kind: KindNote, Peer: p.label, Detail: "durable drain: no durable-quiet record within 2s"})
		}
	}
	deadline = began.Add(c.tm.drainBound())
	// A count is a SCAN over the inboxes, not one atomic read: entries the
	// master's sweep moves out of a departed slave's inbox into one the
	// SCAN has already passed are counted in neither. One empty count is
	// taken again before it is believed.
	emptyBefore := false
	for {
		n, err := c.inboxEntries()
		if err == nil && n == 0 && emptyBefore {
			c.add(Record{Kind: KindNote, Detail: fmt.Sprintf("durable drain: every inbox empty %v after the quiet began", time.Since(began).Round(time.Millisecond))})
			return
		}
		emptyBefore = err == nil && n == 0
		if time.Now().After(deadline) {
			c.add(Record{Kind: KindNote, Detail: fmt.Sprintf("durable drain: %d entries still in the inboxes %v after the quiet began (bound %v; last error: %v)",
				n, time.Since(began).Round(time.Millisecond), c.tm.drainBound(), err)})
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inboxEntries returns the number of entries in every inbox (XLEN: the
// pending ones and the stale ones left for adoption included).
func (c *cluster) inboxEntries() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var n int64
	var cursor uint64
	for {
		keys, next, err := c.admin.Scan(ctx, cursor, c.keys.InboxPattern(), 100).Result()
		if err != nil {
			return n, err
		}
		for _, key := range keys {
			l, err := c.admin.XLen(ctx, key).Result()
			if err != nil {
				return n, err
			}
			n += l
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}

// recordInboxes writes, once every node has stopped, a KindDurableLeft
// record for each message still in an inbox and a KindDurableDead record
// for each in the dead-letter stream: the durable checker names them in
// its losses.
func (c *cluster) recordInboxes() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dl, err := durable.NewDeadLetters(c.admin, durable.Config{LockName: c.lock})
	if err != nil {
		c.violate("durable", "read the dead letters after the shutdown: %v", err)
		return
	}
	dead, err := dl.List(ctx, "", 0)
	if err != nil {
		c.violate("durable", "read the dead letters after the shutdown: %v", err)
		return
	}
	for _, d := range dead {
		c.add(Record{Kind: KindDurableDead, Peer: d.Process, Term: d.Term, Detail: d.Message.ID, Deliveries: d.Deliveries})
	}
	var cursor uint64
	for {
		keys, next, err := c.admin.Scan(ctx, cursor, c.keys.InboxPattern(), 100).Result()
		if err != nil {
			c.violate("durable", "list the inboxes after the shutdown: %v", err)
			return
		}
		for _, key := range keys {
			owner := strings.TrimPrefix(key, c.keys.Inbox(""))
			entries, err := c.admin.XRange(ctx, key, "-", "+").Result()
			if err != nil {
				c.violate("durable", "read inbox %s after the shutdown: %v", key, err)
				return
			}
			for _, e := range entries {
				raw, _ := e.Values[rdb.InboxFieldMessage].(string)
				m, err := pubsub.ParseMessage([]byte(raw))
				if err != nil {
					continue
				}
				c.add(Record{Kind: KindDurableLeft, Peer: owner, Term: m.Term, Detail: m.ID})
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// TestDurableChecker: the durable checker counts duplicates by cause,
// excuses what Redis's data loss took, and fails a message never handled
// (rejected as stale, left in an inbox, dead-lettered or untraced), a
// handling under a stale term and a deposed master's store.
func TestDurableChecker(t *testing.T) {
	const ms = int64(time.Millisecond)
	acq := func(proc string, term, at int64) Record {
		return Record{T: at * ms, Proc: proc, Node: proc, Kind: KindAcquired, Term: term}
	}
	stored := func(id string, term, at int64) Record {
		return Record{T: at * ms, Begin: at*ms - ms/2, Proc: "a", Node: "a", Kind: KindDurableStored, Term: term, Peer: "c", Detail: id}
	}
	handled := func(proc, id string, term, highest, at int64) Record {
		return Record{T: at * ms, Proc: proc, Node: proc, Kind: KindDurableHandled, Term: term, Highest: highest, Detail: id, Peer: "a", Deliveries: 1}
	}
	handledAt := func(proc, id string, term, at, deliveries int64) Record {
		r := handled(proc, id, term, term, at)
		r.Deliveries = deliveries
		return r
	}
	base := []Record{acq("a", 10, 1)}
	for _, tc := range []struct {
		name    string
		recs    []Record
		want    DurableCounts
		violate bool
	}{
		{"handled once and twice", []Record{stored("m1", 10, 2), stored("m2", 10, 3), handled("c", "m1", 10, 10, 4), handled("c", "m2", 10, 10, 5), handled("d", "m2", 10, 10, 6)},
			DurableCounts{Stored: 2, Handled: 3, Distinct: 2, Duplicates: 1, DupMoved: 1}, false},
		{"duplicates by cause", []Record{stored("m1", 10, 2), handled("c", "m1", 10, 10, 3), handled("c", "m1", 10, 10, 4), acq("b", 11, 5),
			handled("c", "m1", 11, 11, 6), handled("d", "m1", 11, 11, 7), handledAt("c", "m2", 11, 8, 3)},
			DurableCounts{Stored: 1, Handled: 5, Distinct: 2, Duplicates: 3, DupRedelivered: 1, DupAdopted: 1, DupMoved: 1, LateFirst: 1}, false},
		{"rejected, then adopted and handled", []Record{stored("m1", 10, 2), {T: 3 * ms, Proc: "c", Node: "c", Kind: KindDurableRejected, Detail: "m1", Term: 10, Highest: 11},
			acq("b", 11, 3), handled("c", "m1", 11, 11, 4)},
			DurableCounts{Stored: 1, Rejected: 1, Handled: 1, Distinct: 1}, false},
		{"left in an inbox", []Record{stored("m1", 10, 2), {T: 9 * ms, Proc: "harness", Node: HarnessNode, Kind: KindDurableLeft, Detail: "m1"}},
			DurableCounts{Stored: 1, Left: 1, Lost: 1, LostInInbox: 1}, true},
		{"dead-lettered", []Record{stored("m1", 10, 2), {T: 9 * ms, Proc: "harness", Node: HarnessNode, Kind: KindDurableDead, Detail: "m1", Peer: "c"}},
			DurableCounts{Stored: 1, Dead: 1, Lost: 1, LostDead: 1}, true},
		{"rejected", []Record{stored("m1", 10, 2), {T: 9 * ms, Proc: "c", Node: "c", Kind: KindDurableRejected, Detail: "m1", Term: 10, Highest: 11}},
			DurableCounts{Stored: 1, Rejected: 1, Lost: 1, LostRejected: 1}, true},
		{"lost", []Record{stored("m1", 10, 2), stored("m2", 10, 3), handled("c", "m2", 10, 10, 4)},
			DurableCounts{Stored: 2, Handled: 1, Distinct: 1, Lost: 1}, true},
		{"burst", []Record{stored("m1", 10, 2), {T: 3 * ms, Begin: 3*ms - ms/2, Proc: "a", Node: "a", Kind: KindDurableStored, Term: 10, Peer: "c", Detail: "m2", Seq: BurstSeqBase + 1},
			handled("c", "m1", 10, 10, 4), handled("c", "m2", 10, 10, 5)},
			DurableCounts{Stored: 2, BurstStored: 1, Handled: 2, Distinct: 2}, false},
		{"lost with Redis's data", []Record{stored("m1", 10, 2), {T: 5 * ms, Proc: "harness", Node: HarnessNode, Kind: KindRedisDown}},
			DurableCounts{Stored: 1, LostToDataLoss: 1}, false},
		{"handled under a stale term", []Record{stored("m1", 10, 2), handled("c", "x", 11, 11, 3), handled("c", "m1", 10, 11, 4)},
			DurableCounts{Stored: 1, Handled: 2, Distinct: 2, Stale: 1}, true},
		{"stored after a newer mastership began", []Record{acq("b", 11, 3), stored("m1", 10, 5), handled("c", "m1", 10, 10, 6)},
			DurableCounts{Stored: 1, Handled: 1, Distinct: 1, LateStores: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(append(append([]Record(nil), base...), tc.recs...), fastTiming.params())
			if rep.Durable != tc.want {
				t.Errorf("counts %+v, want %+v", rep.Durable, tc.want)
			}
			n := 0
			for _, v := range rep.Violations {
				if v.Check == "durable" {
					n++
				}
			}
			if (n > 0) != tc.violate {
				t.Errorf("durable violations %v; want some: %v", rep.Violations, tc.violate)
			}
		})
	}
}
