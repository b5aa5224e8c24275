//go:build linux

package faults

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/scripts"
)

// durableArgs are the node flags of durable routing, given to every node
// unless HERD_FAULTS_DURABLE=0 (to tell its findings apart from the rest).
func durableArgs() []string {
	if os.Getenv("HERD_FAULTS_DURABLE") == "0" {
		return nil
	}
	return []string{"-durable"}
}

// recordInboxes writes, once every node has stopped, a KindDurableLeft
// record for each message still in an inbox: the durable checker counts
// those as kept, not lost.
func (c *cluster) recordInboxes() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
				raw, _ := e.Values[scripts.InboxFieldMessage].(string)
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

// TestDurableChecker: the durable checker counts duplicates, keeps what an
// inbox still held, excuses what Redis's data loss took, and fails a lost
// message, a handling under a stale term and a deposed master's store.
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
	base := []Record{acq("a", 10, 1)}
	for _, tc := range []struct {
		name    string
		recs    []Record
		want    DurableCounts
		violate bool
	}{
		{"handled once and twice", []Record{stored("m1", 10, 2), stored("m2", 10, 3), handled("c", "m1", 10, 10, 4), handled("c", "m2", 10, 10, 5), handled("d", "m2", 10, 10, 6)},
			DurableCounts{Stored: 2, Handled: 3, Distinct: 2, Duplicates: 1}, false},
		{"left in an inbox", []Record{stored("m1", 10, 2), {T: 9 * ms, Proc: "harness", Node: HarnessNode, Kind: KindDurableLeft, Detail: "m1"}},
			DurableCounts{Stored: 1, Left: 1}, false},
		{"rejected", []Record{stored("m1", 10, 2), {T: 9 * ms, Proc: "c", Node: "c", Kind: KindDurableRejected, Detail: "m1", Term: 10, Highest: 11}},
			DurableCounts{Stored: 1, Rejected: 1}, false},
		{"lost", []Record{stored("m1", 10, 2), stored("m2", 10, 3), handled("c", "m2", 10, 10, 4)},
			DurableCounts{Stored: 2, Handled: 1, Distinct: 1, Lost: 1}, true},
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
