package rdb_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/keyspace"
)

func TestInboxKeys(t *testing.T) {
	if got := keyspace.NewKeys("svc", false).Inbox("p1"); got != "svc:inbox:p1" {
		t.Errorf("Inbox = %q", got)
	}
	k := keyspace.NewKeys("svc", true)
	if got := k.Inbox("p1"); got != "{svc}:inbox:p1" {
		t.Errorf("cluster Inbox = %q", got)
	}
	if got := k.InboxPattern(); got != "{svc}:inbox:*" {
		t.Errorf("InboxPattern = %q", got)
	}
}

// TestInboxSendContract: entries are added only under the holder's term,
// with the term and envelope fields, up to the cap per inbox.
func TestInboxSendContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := rdb.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	in1, in2 := k.Inbox("s1"), k.Inbox("s2")
	live(t, c, k, "s1", "s2")
	// Not live: never registered, or (emulated registry) past its deadline.
	c.HSet(ctx, k.Processes, "late", "{}")
	c.ZAdd(ctx, k.ProcessesExpiry, redis.Z{Member: "late", Score: float64(now.Add(-time.Second).UnixMilli())})
	c.ZAdd(ctx, k.ProcessesExpiry, redis.Z{Member: "s2", Score: float64(now.Add(time.Minute).UnixMilli())})
	msgs := []rdb.Queued{{Inbox: in1, Message: []byte("a")}, {Inbox: in2, Message: []byte("b")}, {Inbox: in1, Message: []byte("c")}, {Inbox: in1, Message: []byte("d")},
		{Inbox: k.Inbox("ghost"), Message: []byte("e")}, {Inbox: k.Inbox("late"), Message: []byte("f")}}
	ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 2, true, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 6 || ids[0] == "" || ids[1] == "" || ids[2] == "" || ids[3] != rdb.SentFull || ids[4] != rdb.SentNotLive || ids[5] != rdb.SentNotLive {
		t.Fatalf("ids %q; want three entries, the fourth refused (cap 2), the last two not live", ids)
	}
	if n := c.Exists(ctx, k.Inbox("ghost"), k.Inbox("late")).Val(); n != 0 {
		t.Errorf("%d inboxes of processes not live were created", n)
	}
	// One message takes the script's own path: the same answers.
	for _, id := range []string{"ghost", "late"} {
		if got, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 2, true, []rdb.Queued{{Inbox: k.Inbox(id), Message: []byte("g")}}); err != nil || len(got) != 1 || got[0] != rdb.SentNotLive {
			t.Errorf("one message to %s = %q, %v; want it refused as not live", id, got, err)
		}
	}
	if got, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 2, true, []rdb.Queued{{Inbox: in1, Message: []byte("g")}}); err != nil || len(got) != 1 || got[0] != rdb.SentFull {
		t.Errorf("one message to the full inbox 1 = %q, %v; want it refused as full", got, err)
	}
	if got := c.SMembers(ctx, k.Inboxes).Val(); len(got) != 2 {
		t.Errorf("inbox set %q; want s1 and s2", got)
	}
	es, err := c.XRange(ctx, in1, "-", "+").Result()
	if err != nil || len(es) != 2 || es[0].ID != ids[0] || es[1].Values["m"] != "c" || es[0].Values["t"] != strTerm(a.Term) {
		t.Fatalf("inbox 1: %+v, %v", es, err)
	}
	for _, tc := range []struct {
		name, node string
		term       int64
	}{{"other node", "x", a.Term}, {"old term", "m", a.Term - 1}, {"no term", "m", 0}} {
		_, err := rdb.InboxSend(ctx, c, k, tc.node, tc.term, 0, true, msgs[:1])
		if !errors.Is(err, keyspace.ErrFenced) {
			t.Errorf("%s: %v; want ErrFenced", tc.name, err)
		}
	}
	if n := c.XLen(ctx, in1).Val(); n != 2 {
		t.Errorf("inbox 1 holds %d entries after the fenced sends; want 2", n)
	}
	// Without deadlines (a registry whose entries Redis expires itself) the
	// sorted set is not read: late's entry, still in the hash, counts as
	// live, as the registry's own reads count it then.
	for _, batch := range [][]rdb.Queued{{{Inbox: k.Inbox("late"), Message: []byte("h")}},
		{{Inbox: k.Inbox("late"), Message: []byte("i")}, {Inbox: k.Inbox("ghost"), Message: []byte("j")}}} {
		got, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 0, false, batch)
		if err != nil || len(got) != len(batch) || got[0] == rdb.SentNotLive || got[0] == rdb.SentFull || (len(got) > 1 && got[1] != rdb.SentNotLive) {
			t.Errorf("%d messages without deadlines = %q, %v; want late's added, ghost's refused", len(batch), got, err)
		}
	}
	if n := c.XLen(ctx, k.Inbox("late")).Val(); n != 2 {
		t.Errorf("late's inbox holds %d entries; want 2", n)
	}
	if ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 0, true, nil); ids != nil || err != nil {
		t.Errorf("empty batch: %v, %v", ids, err)
	}
	if _, err := rdb.InboxSend(ctx, c, k, "m", a.Term, -1, true, msgs); err == nil {
		t.Error("negative maxLen accepted")
	}
}

// TestInboxMoveContract: a move keeps the envelope, stamps the mover's term,
// adds the deliveries, skips entries gone, drops garbage, deletes the
// emptied inbox, and is refused to anyone but the holder under its term.
func TestInboxMoveContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := rdb.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	from, to := k.Inbox("dead"), k.Inbox("live")
	live(t, c, k, "dead")
	ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 0, true, []rdb.Queued{{Inbox: from, Message: []byte("x")}, {Inbox: from, Message: []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	garbage := c.XAdd(ctx, &redis.XAddArgs{Stream: from, Values: []string{"other", "1"}}).Val()
	if err := c.XGroupCreateMkStream(ctx, from, keyspace.InboxGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	// The dead consumer read the first entry twice (a restart).
	for range 2 {
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keyspace.InboxGroup, Consumer: "dead", Streams: []string{from, "0"}, Count: 1}).Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		_ = c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keyspace.InboxGroup, Consumer: "dead", Streams: []string{from, ">"}, Count: 1}).Err()
	}
	moves := []rdb.Move{{EntryID: ids[0], To: to}, {EntryID: ids[1], To: to}, {EntryID: garbage, To: to}, {EntryID: "1-1", To: to}}
	if _, err := rdb.InboxMove(ctx, c, k, "m", a.Term-1, keyspace.InboxGroup, from, moves); !errors.Is(err, keyspace.ErrFenced) {
		t.Fatalf("move under an old term: %v; want ErrFenced", err)
	}
	if n := c.XLen(ctx, from).Val(); n != 3 {
		t.Fatalf("after a fenced move the old inbox holds %d entries; want 3", n)
	}
	b, err := rdb.Acquire(ctx, c, k, "m2", time.Minute, nil, 0)
	if err == nil && b.Term != 0 {
		t.Fatalf("lock taken twice: %+v", b)
	}
	got, err := rdb.InboxMove(ctx, c, k, "m", a.Term, keyspace.InboxGroup, from, moves)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0] == "" || got[1] == "" || got[2] != rdb.MovedDropped || got[3] != rdb.MovedGone {
		t.Fatalf("move results %q", got)
	}
	es, err := c.XRange(ctx, to, "-", "+").Result()
	if err != nil || len(es) != 2 {
		t.Fatalf("new inbox %+v, %v", es, err)
	}
	if es[0].Values["m"] != "x" || es[0].Values["t"] != strTerm(a.Term) || es[0].Values["d"] != "2" || es[1].Values["m"] != "y" || es[1].Values["d"] != "1" {
		t.Errorf("moved entries %+v", es)
	}
	if n := c.Exists(ctx, from).Val(); n != 0 {
		t.Errorf("the emptied inbox still exists")
	}
	if got := c.SMembers(ctx, k.Inboxes).Val(); len(got) != 1 || got[0] != "live" {
		t.Errorf("inbox set %q; want only the inbox moved to", got)
	}
	if _, err := rdb.InboxMove(ctx, c, k, "m", a.Term, keyspace.InboxGroup, from, []rdb.Move{{EntryID: "nope", To: to}}); err == nil || !strings.Contains(err.Error(), "not a stream entry id") {
		t.Errorf("bad id: %v", err)
	}
	if _, err := rdb.InboxMove(ctx, c, k, "m", a.Term, keyspace.InboxGroup, from, []rdb.Move{{EntryID: "1-0", To: from}}); err == nil {
		t.Error("a move into the same inbox was accepted")
	}
}

func strTerm(t int64) string { return strconv.FormatInt(t, 10) }

// live registers ids in the registry hash (no deadline: the native
// backend's form).
func live(t *testing.T, c *redis.Client, k keyspace.Keys, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := c.HSet(context.Background(), k.Processes, id, "{}").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInboxAdoptContract: entries of older terms at an inbox's head are
// added again under the caller's term with their deliveries (or dropped),
// the walk stops at the caller's term, the budget bounds a call, an inbox
// gone leaves the set, the empty inbox of a process not live is deleted,
// and only the holder under its term changes anything.
func TestInboxAdoptContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := rdb.Acquire(ctx, c, k, "a", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	live(t, c, k, "s1", "s2")
	in1 := k.Inbox("s1")
	var old []string
	for _, m := range []string{"x", "y", "z"} {
		ids, err := rdb.InboxSend(ctx, c, k, "a", a.Term, 0, true, []rdb.Queued{{Inbox: in1, Message: []byte(m)}, {Inbox: k.Inbox("s2"), Message: []byte(m)}})
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, ids[0])
	}
	c.XGroupCreateMkStream(ctx, in1, keyspace.InboxGroup, "0")
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keyspace.InboxGroup, Consumer: "s1", Streams: []string{in1, ">"}, Count: 1})
	c.HDel(ctx, k.Processes, "s2") // s2 leaves the registry
	c.SAdd(ctx, k.Inboxes, "nothing")
	c.Del(ctx, k.Master)
	b, err := rdb.Acquire(ctx, c, k, "b", time.Minute, nil, 0)
	if err != nil || b.Term <= a.Term {
		t.Fatal(b, err)
	}
	if _, err := rdb.InboxAdopt(ctx, c, k, "a", a.Term, keyspace.InboxGroup, rdb.AdoptKeep, 10, true, []string{"s1"}); !errors.Is(err, keyspace.ErrFenced) {
		t.Fatalf("adopt by the deposed master: %v; want ErrFenced", err)
	}
	st, err := rdb.InboxAdopt(ctx, c, k, "b", b.Term, keyspace.InboxGroup, rdb.AdoptKeep, 2, true, []string{"s1", "s2", "nothing"})
	if err != nil {
		t.Fatal(err)
	}
	want := []rdb.InboxState{{More: true, Live: true, Taken: 2}, {More: true}, {Gone: true}}
	if len(st) != 3 || st[0] != want[0] || st[1] != want[1] || st[2] != want[2] {
		t.Fatalf("states %+v; want %+v", st, want)
	}
	st, err = rdb.InboxAdopt(ctx, c, k, "b", b.Term, keyspace.InboxGroup, rdb.AdoptKeep, 10, true, []string{"s1"})
	if err != nil || len(st) != 1 || st[0] != (rdb.InboxState{Live: true, Taken: 1}) {
		t.Fatalf("second call: %+v, %v", st, err)
	}
	es := c.XRange(ctx, in1, "-", "+").Val()
	if len(es) != 3 {
		t.Fatalf("inbox after adoption: %+v", es)
	}
	for i, e := range es {
		d := "0"
		if i == 0 {
			d = "1" // read once by s1 before
		}
		if e.Values["m"] != []string{"x", "y", "z"}[i] || e.Values["t"] != strTerm(b.Term) || e.Values["d"] != d || e.ID == old[i] {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
	if p := c.XPending(ctx, in1, keyspace.InboxGroup).Val(); p.Count != 0 {
		t.Errorf("%d entries still pending under their old ids", p.Count)
	}
	st, err = rdb.InboxAdopt(ctx, c, k, "b", b.Term, keyspace.InboxGroup, rdb.AdoptDrop, 10, true, []string{"s1", "s2"})
	if err != nil || st[0] != (rdb.InboxState{Live: true}) || st[1] != (rdb.InboxState{Gone: true, Taken: 3}) {
		t.Fatalf("drop: %+v, %v", st, err)
	}
	if c.Exists(ctx, k.Inbox("s2")).Val() != 0 || c.SIsMember(ctx, k.Inboxes, "s2").Val() || c.SIsMember(ctx, k.Inboxes, "nothing").Val() {
		t.Error("the emptied inbox of a process not live, or an id without an inbox, remains")
	}
	if _, err := rdb.InboxAdopt(ctx, c, k, "b", b.Term, keyspace.InboxGroup, "keep", 10, true, []string{"s1"}); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

// TestDeadLetterContract: an entry moves to the dead-letter stream with its
// why and leaves the inbox; a retry puts it back under the current term
// into a live process's inbox only.
func TestDeadLetterContract(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := rdb.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	live(t, c, k, "s1")
	in := k.Inbox("s1")
	ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 0, true, []rdb.Queued{{Inbox: in, Message: []byte("poison")}})
	if err != nil {
		t.Fatal(err)
	}
	c.XGroupCreateMkStream(ctx, in, keyspace.InboxGroup, "0")
	c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keyspace.InboxGroup, Consumer: "s1", Streams: []string{in, ">"}, Count: 1})
	dead, err := rdb.InboxDead(ctx, c, k, keyspace.InboxGroup, in, ids[0], "s1", 10, "boom")
	if err != nil || dead == "" {
		t.Fatalf("dead: %q, %v", dead, err)
	}
	if again, err := rdb.InboxDead(ctx, c, k, keyspace.InboxGroup, in, ids[0], "s1", 10, "boom"); err != nil || again != "" {
		t.Errorf("second dead of the same entry: %q, %v", again, err)
	}
	es := c.XRange(ctx, k.Dead, "-", "+").Val()
	if len(es) != 1 || es[0].Values["m"] != "poison" || es[0].Values["e"] != "boom" || es[0].Values["d"] != "10" || es[0].Values["p"] != "s1" || es[0].Values["i"] != in || es[0].Values["t"] != strTerm(a.Term) {
		t.Fatalf("dead letters %+v", es)
	}
	if c.XLen(ctx, in).Val() != 0 || c.XPending(ctx, in, keyspace.InboxGroup).Val().Count != 0 {
		t.Error("the entry is still in the inbox")
	}
	if _, err := rdb.DeadRetry(ctx, c, k, dead, "ghost"); !errors.Is(err, rdb.ErrNotLive) {
		t.Errorf("retry to a process not live: %v", err)
	}
	c.Del(ctx, k.Master)
	b, _ := rdb.Acquire(ctx, c, k, "m2", time.Minute, nil, 0)
	entry, err := rdb.DeadRetry(ctx, c, k, dead, "s1")
	if err != nil {
		t.Fatal(err)
	}
	es = c.XRange(ctx, in, "-", "+").Val()
	if len(es) != 1 || es[0].ID != entry || es[0].Values["m"] != "poison" || es[0].Values["t"] != strTerm(b.Term) || es[0].Values["d"] != nil {
		t.Errorf("retried entry %+v", es)
	}
	if _, err := rdb.DeadRetry(ctx, c, k, dead, "s1"); !errors.Is(err, rdb.ErrNoDeadLetter) {
		t.Errorf("second retry: %v", err)
	}
}

// TestLoadCachesTheInboxScripts: after Load, the inbox scripts run with
// EVALSHA alone (no NOSCRIPT round trip and EVAL).
func TestLoadCachesTheInboxScripts(t *testing.T) {
	_, c, k := setup(t)
	ctx := context.Background()
	a, err := rdb.Acquire(ctx, c, k, "m", time.Minute, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	live(t, c, k, "a")
	h := &wiretap.Tap{}
	c.AddHook(h)
	ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 0, true, []rdb.Queued{{Inbox: k.Inbox("a"), Message: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.InboxMove(ctx, c, k, "m", a.Term, keyspace.InboxGroup, k.Inbox("a"), []rdb.Move{{EntryID: ids[0], To: k.Inbox("b")}}); err != nil {
		t.Fatal(err)
	}
	if got := h.Take(); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
		t.Errorf("round trips %q; want two EVALSHA", got)
	}
}

// TestInboxSendCost guards what one send costs Redis: on an inbox that
// exists, one script call whose body runs two GETs (the fence), HEXISTS
// and ZSCORE (the registry check), XLEN (the limit) and one XADD, and no
// SADD; the first send to a new inbox also adds it to the inbox set (and
// runs the checks twice, once on the one-message path and once in the
// general loop).
// Counted from INFO commandstats of a server of the test's own.
func TestInboxSendCost(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.Start(t, s).Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		a := masterOf(ctx, t, c, k, "m", "p1")
		send := func() {
			t.Helper()
			ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 1000, true, []rdb.Queued{{Inbox: k.Inbox("p1"), Message: []byte(`{"id":"x"}`)}})
			if err != nil || len(ids) != 1 || ids[0] == rdb.SentFull || ids[0] == rdb.SentNotLive {
				t.Fatalf("send = %q, %v", ids, err)
			}
		}
		calls := func() benchkit.CommandStats {
			t.Helper()
			info, err := c.Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			return benchkit.ParseCommandStats(info)
		}
		before := calls()
		send()
		first := calls().Sub(before)
		delete(first, "info")
		// The one-message path's NOMKSTREAM XADD finds no inbox and writes
		// nothing; the general loop checks the registry and the limit again
		// (the server's clock is read once), and its XADD finds no inbox
		// either, so the inbox joins the set and is created. The script is
		// not cached yet (EVALSHA, then EVAL).
		if want := (benchkit.CommandStats{"evalsha": 1, "eval": 1, "get": 2, "hexists": 2, "zscore": 2, "time": 1, "xlen": 2, "xadd": 3, "sadd": 1}); !maps.Equal(first, want) {
			t.Errorf("first send ran %v, want %v", first, want)
		}
		if ok, err := c.SIsMember(ctx, k.Inboxes, "p1").Result(); err != nil || !ok {
			t.Errorf("p1 in the inbox set = %v, %v; want true", ok, err)
		}
		const n = 10
		before = calls()
		for range n {
			send()
		}
		warm := calls().Sub(before)
		delete(warm, "info")
		if want := (benchkit.CommandStats{"evalsha": n, "get": 2 * n, "hexists": n, "zscore": n, "time": n, "xlen": n, "xadd": n}); !maps.Equal(warm, want) {
			t.Errorf("%d sends to an inbox that exists ran %v, want %v", n, warm, want)
		}
		// Without deadlines (a backend whose entries Redis expires), no
		// ZSCORE and no TIME.
		before = calls()
		for range n {
			ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 1000, false, []rdb.Queued{{Inbox: k.Inbox("p1"), Message: []byte(`{"id":"x"}`)}})
			if err != nil || len(ids) != 1 || ids[0] == rdb.SentFull || ids[0] == rdb.SentNotLive {
				t.Fatalf("send without deadlines = %q, %v", ids, err)
			}
		}
		warm = calls().Sub(before)
		delete(warm, "info")
		if want := (benchkit.CommandStats{"evalsha": n, "get": 2 * n, "hexists": n, "xlen": n, "xadd": n}); !maps.Equal(warm, want) {
			t.Errorf("%d sends without deadlines ran %v, want %v", n, warm, want)
		}
	})
}

// TestInboxSendOnEveryServer: on each real server, one message (the
// script's own path) and a batch write the term and the envelope; the
// deadlines key decides whether a process past its deadline, still in the
// hash, is live, for inbox_send and inbox_adopt alike, so that the sends
// and the master's sweep agree; a call whose keys and messages do not pair
// up is refused and writes nothing.
func TestInboxSendOnEveryServer(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		c := redistest.Start(t, s).Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k := keyspace.NewKeys("svc", false)
		a := masterOf(ctx, t, c, k, "m", "s1")
		// late: in the hash, its deadline passed (the emulated registry
		// between a death and the next read, or a deadline left behind).
		if err := c.HSet(ctx, k.Processes, "late", "{}").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctx, k.ProcessesExpiry, redis.Z{Member: "late", Score: 1}).Err(); err != nil {
			t.Fatal(err)
		}
		entries := func(inbox string) []redis.XMessage {
			t.Helper()
			es, err := c.XRange(ctx, inbox, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			return es
		}
		send := func(deadlines bool, msgs ...rdb.Queued) []string {
			t.Helper()
			ids, err := rdb.InboxSend(ctx, c, k, "m", a.Term, 0, deadlines, msgs)
			if err != nil || len(ids) != len(msgs) {
				t.Fatalf("send = %q, %v", ids, err)
			}
			return ids
		}
		// One message: a new inbox (the loop creates it), then one that exists.
		for _, m := range []string{"one", "two"} {
			if id := send(true, rdb.Queued{Inbox: k.Inbox("s1"), Message: []byte(m)})[0]; id == rdb.SentFull || id == rdb.SentNotLive {
				t.Fatalf("one message to s1: %q", id)
			}
		}
		if es := entries(k.Inbox("s1")); len(es) != 2 || es[1].Values["m"] != "two" || es[1].Values["t"] != strTerm(a.Term) {
			t.Errorf("s1's inbox %+v; want one then two, under term %d", es, a.Term)
		}
		// Without deadlines late is live: one message and a batch reach it.
		send(false, rdb.Queued{Inbox: k.Inbox("late"), Message: []byte("three")})
		send(false, rdb.Queued{Inbox: k.Inbox("late"), Message: []byte("four")}, rdb.Queued{Inbox: k.Inbox("s1"), Message: []byte("five")})
		es := entries(k.Inbox("late"))
		if len(es) != 2 || es[0].Values["m"] != "three" || es[1].Values["m"] != "four" || es[0].Values["t"] != strTerm(a.Term) || es[1].Values["t"] != strTerm(a.Term) {
			t.Errorf("late's inbox %+v; want three then four, under term %d", es, a.Term)
		}
		// With deadlines it is not, though its inbox exists.
		if id := send(true, rdb.Queued{Inbox: k.Inbox("late"), Message: []byte("six")})[0]; id != rdb.SentNotLive {
			t.Errorf("one message to late with deadlines: %q; want it refused as not live", id)
		}
		if n := len(entries(k.Inbox("late"))); n != 2 {
			t.Errorf("late's inbox holds %d entries after the refusal; want 2", n)
		}
		// The sweep's adoption agrees with the sends on each side.
		for _, deadlines := range []bool{false, true} {
			st, err := rdb.InboxAdopt(ctx, c, k, "m", a.Term, keyspace.InboxGroup, rdb.AdoptKeep, 10, deadlines, []string{"late"})
			if err != nil || len(st) != 1 || st[0].Live == deadlines {
				t.Errorf("adopt with deadlines %v: %+v, %v; want late live %v", deadlines, st, err, !deadlines)
			}
		}
		// Keys and messages that do not pair up: one inbox key too many
		// behind the four fixed keys (it would take the deadlines key's
		// place), and too few keys.
		before := len(entries(k.Inbox("s1")))
		bad := [][]string{
			{k.Master, k.Term, k.Processes, k.Inboxes, k.Inbox("nobody"), k.Inbox("s1"), k.Inbox("s1")},
			{k.Master, k.Term, k.Processes, k.Inbox("s1")},
		}
		for _, keys := range bad {
			_, err := rdb.InboxSendScript.Run(ctx, c, keys, "m", strTerm(a.Term), 0, k.Inbox(""), "x", "y").Result()
			if err == nil || !strings.Contains(err.Error(), "inbox_send") {
				t.Errorf("%d keys for two messages: %v; want inbox_send's error", len(keys), err)
			}
		}
		if n := len(entries(k.Inbox("s1"))); n != before {
			t.Errorf("s1's inbox went from %d to %d entries by refused calls", before, n)
		}
	})
}
