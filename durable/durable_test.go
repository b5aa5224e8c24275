package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// TestSendAndConsume: messages sent one by one are handled in order, once,
// with their ids and a delivery count of 1, and leave the inbox empty.
func TestSendAndConsume(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	con, got, log := startConsumer(t, c, "s1", fast())
	var ids []string
	for i := range 50 {
		id, err := r.Send(testCtx(t), "s1", "seq", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i := range 50 {
		d := receive(t, got)
		var v int
		if err := d.Decode(&v); err != nil || v != i || d.ID != ids[i] || d.Deliveries != 1 || d.From != "m" || d.Term <= 0 {
			t.Fatalf("delivery %d: %+v (%v)", i, d, err)
		}
	}
	eventually(t, "all acknowledged", func() bool { return con.Handled() == 50 })
	if n := c.XLen(testCtx(t), r.Inbox("s1")).Val(); n != 0 {
		t.Errorf("inbox holds %d entries after all were handled", n)
	}
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
}

// TestMessagesWaitForTheSlave: messages sent before the slave started are
// handled when it starts (the group reads from the inbox's start).
func TestMessagesWaitForTheSlave(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	register(t, c, "late")
	for i := range 5 {
		if _, err := r.Send(testCtx(t), "late", "seq", i); err != nil {
			t.Fatal(err)
		}
	}
	_, got, _ := startConsumer(t, c, "late", fast())
	for i := range 5 {
		var v int
		if err := receive(t, got).Decode(&v); err != nil || v != i {
			t.Fatalf("message %d: %d, %v", i, v, err)
		}
	}
}

// TestFailedHandlerIsRetried: an entry whose handler fails stays pending and
// is delivered again with a higher count; a panic counts as a failure; an
// unknown type too.
func TestFailedHandlerIsRetried(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	register(t, c, "s1")
	log := &errLog{}
	cfg := fast()
	cfg.OnError = log.add
	con, err := durable.NewConsumer(c, "s1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan durable.Delivery, 100)
	attempts := 0
	if err := con.Handle("flaky", func(_ context.Context, d durable.Delivery) error {
		attempts++
		switch attempts {
		case 1:
			return errors.New("not now")
		case 2:
			panic("boom")
		}
		got <- d
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := con.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	id, err := r.Send(testCtx(t), "s1", "flaky", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, got)
	if d.ID != id || d.Deliveries != 3 {
		t.Errorf("delivery %+v; want id %s, third delivery", d, id)
	}
	eventually(t, "acknowledged", func() bool { return con.Handled() == 1 })
	if con.Failed() != 2 || log.count(pubsub.ErrHandlerPanic) != 1 {
		t.Errorf("failed %d, errors %v", con.Failed(), log.all())
	}
	// No handler for the type: it waits, and is handled once one exists.
	if _, err := r.Send(testCtx(t), "s1", "later", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unknown type reported", func() bool { return log.count(pubsub.ErrUnknownType) > 0 })
	_ = con.Handle("later", func(_ context.Context, d durable.Delivery) error { got <- d; return nil })
	if d := receive(t, got); d.Type != "later" || d.Deliveries < 2 {
		t.Errorf("delivery %+v", d)
	}
}

// TestRestartHandlesPendingFirst: entries the process read and did not
// acknowledge before it stopped are handled first when it starts again,
// with their delivery counts, then the new ones.
func TestRestartHandlesPendingFirst(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	register(t, c, "s1")
	var ids []string
	for i := range 3 {
		id, err := r.Send(testCtx(t), "s1", "seq", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// The previous run of s1 read the first two and died.
	inbox := r.Inbox("s1")
	if err := c.XGroupCreateMkStream(testCtx(t), inbox, keyspace.InboxGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.XReadGroup(testCtx(t), &redis.XReadGroupArgs{Group: keyspace.InboxGroup, Consumer: "s1", Streams: []string{inbox, ">"}, Count: 2, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	_, got, _ := startConsumer(t, c, "s1", fast())
	for i, want := range []int64{2, 2, 1} {
		d := receive(t, got)
		if d.ID != ids[i] || d.Deliveries != want {
			t.Errorf("delivery %d: id %s, deliveries %d; want %s, %d", i, d.ID, d.Deliveries, ids[i], want)
		}
	}
}

// TestStaleEntriesWaitForAdoption: an entry of a deposed master still in
// the inbox is never handled under its old term by a slave that knows the
// newer term: it is left in the inbox (acknowledged, not deleted) and
// reported; the new master's sweep adopts it under its own term, and then
// it is handled, before the new master's own messages. It goes to OnStale,
// not OnError: a master change is no fault. The deposed master
// can add nothing.
func TestStaleEntriesWaitForAdoption(t *testing.T) {
	_, c := newMini(t)
	register(t, c, "s1")
	old := newMaster(t, c, "a")
	ra := newRouter(t, c, old, nil, fast())
	oldID, err := ra.Send(testCtx(t), "s1", "work", "old")
	if err != nil {
		t.Fatal(err)
	}
	b := takeOver(t, c, "b")
	_, err = ra.Send(testCtx(t), "s1", "work", "fenced")
	assertFenced(t, "send of the deposed master", err)
	cfg := fast()
	stales := make(chan *pubsub.StaleTermError, 10)
	cfg.OnStale = func(e *pubsub.StaleTermError) { stales <- e }
	con, got, log := startConsumer(t, c, "s1", cfg)
	eventually(t, "the stale entry is met", func() bool { return con.Rejected() == 1 })
	if stale := <-stales; stale.Term != old.Term() || stale.ID != oldID || stale.Highest != b.Term() {
		t.Errorf("OnStale(%+v); want the old entry, term %d, below %d", stale, old.Term(), b.Term())
	}
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("an entry left for adoption is no error: OnError got %v", errs)
	}
	if n := c.XLen(testCtx(t), con.Inbox()).Val(); n != 1 || len(got) != 0 {
		t.Fatalf("inbox holds %d entries, %d handled; want the stale entry left, unhandled", n, len(got))
	}
	rb := newRouter(t, c, b, nil, fast())
	if _, err := rb.Send(testCtx(t), "s1", "work", "new"); err != nil { // adopts first
		t.Fatal(err)
	}
	for _, want := range []string{"old", "new"} {
		d := receive(t, got)
		var p string
		if err := d.Decode(&p); err != nil || p != want || d.Term != b.Term() || d.Deliveries != 1 {
			t.Fatalf("handled %q (%+v), %v; want %q under term %d, first delivery", p, d, err, want, b.Term())
		}
		if want == "old" && d.ID != oldID {
			t.Errorf("adopted message id %s; want %s", d.ID, oldID)
		}
	}
	select {
	case d := <-got:
		t.Errorf("also handled %+v", d)
	case <-time.After(100 * time.Millisecond):
	}
	res, err := rb.Sweep(testCtx(t), nil)
	if err != nil || res.Adopted != 0 || res.Inboxes != 1 {
		t.Errorf("a second sweep: %+v, %v", res, err)
	}
}

// TestDropBacklog: a master with DropBacklog deletes its predecessors'
// entries instead of adopting them, and counts them.
func TestDropBacklog(t *testing.T) {
	_, c := newMini(t)
	register(t, c, "s1", "s2")
	ra := newRouter(t, c, newMaster(t, c, "a"), nil, fast())
	for i := range 5 {
		if _, err := ra.Send(testCtx(t), fmt.Sprintf("s%d", 1+i%2), "work", i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fast()
	cfg.DropBacklog = true
	rb := newRouter(t, c, takeOver(t, c, "b"), nil, cfg)
	res, err := rb.Sweep(testCtx(t), nil)
	if err != nil || res.Dropped != 5 || res.Adopted != 0 || res.Inboxes != 2 {
		t.Fatalf("sweep: %+v, %v", res, err)
	}
	for _, id := range []string{"s1", "s2"} {
		if n := c.XLen(testCtx(t), rb.Inbox(id)).Val(); n != 0 {
			t.Errorf("%s's inbox holds %d entries", id, n)
		}
	}
}

// TestForgedTermIsRefused: an entry added by hand with a term Redis never
// minted is refused and acknowledged.
func TestForgedTermIsRefused(t *testing.T) {
	_, c := newMini(t)
	term := acquire(t, c, "m")
	con, got, log := startConsumer(t, c, "s1", fast())
	env, _ := json.Marshal(pubsub.Message{ID: "forged", From: "x", Term: term + 1000, Type: "work", Payload: json.RawMessage("1")})
	c.XAdd(testCtx(t), &redis.XAddArgs{Stream: con.Inbox(), Values: []string{"t", strconv.FormatInt(term+1000, 10), "m", string(env)}})
	eventually(t, "refused", func() bool { return con.Unverified() == 1 })
	if log.count(pubsub.ErrUnverifiedTerm) != 1 || len(got) != 0 || con.HighestTerm() > term {
		t.Errorf("errors %v, handled %d, highest %d", log.all(), len(got), con.HighestTerm())
	}
}

// TestInboxFull: a send to an inbox at MaxLen is refused, nothing trimmed.
func TestInboxFull(t *testing.T) {
	_, c := newMini(t)
	cfg := fast()
	cfg.MaxLen = 2
	r := newRouter(t, c, newMaster(t, c, "m"), nil, cfg)
	register(t, c, "s1", "s2")
	for i := range 2 {
		if _, err := r.Send(testCtx(t), "s1", "w", i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Send(testCtx(t), "s1", "w", 2); !errors.Is(err, durable.ErrInboxFull) {
		t.Errorf("third send: %v; want ErrInboxFull", err)
	}
	res, err := r.SendBatch(testCtx(t), []pubsub.Outgoing{{SlaveID: "s1", Type: "w"}, {SlaveID: "s2", Type: "w"}})
	if err != nil || !errors.Is(res.Outcomes[0].Err, durable.ErrInboxFull) || res.Outcomes[1].Err != nil || res.Stored() != 1 {
		t.Errorf("batch: %+v, %v", res, err)
	}
	if n := c.XLen(testCtx(t), r.Inbox("s1")).Val(); n != 2 {
		t.Errorf("inbox holds %d", n)
	}
}

// TestSendBatch: a batch longer than a chunk takes several calls and
// reaches every slave in order; bad messages are refused one by one.
func TestSendBatch(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	_, g1, _ := startConsumer(t, c, "s1", fast())
	_, g2, _ := startConsumer(t, c, "s2", fast())
	var msgs []pubsub.Outgoing
	for i := range durable.MaxBatchChunk + 10 {
		msgs = append(msgs, pubsub.Outgoing{SlaveID: fmt.Sprintf("s%d", 1+i%2), Type: "seq", Payload: i})
	}
	msgs = append(msgs, pubsub.Outgoing{SlaveID: "bad id", Type: "seq"})
	res, err := r.SendBatch(testCtx(t), msgs)
	if err != nil || res.Calls != 2 || res.Stored() != len(msgs)-1 || !errors.Is(res.Outcomes[len(msgs)-1].Err, pubsub.ErrInvalidName) {
		t.Fatalf("%d calls, %d stored, %v, %v", res.Calls, res.Stored(), res.Err(), err)
	}
	for i := range durable.MaxBatchChunk + 10 {
		got := g1
		if i%2 == 1 {
			got = g2
		}
		var v int
		if d := receive(t, got); d.Decode(&v) != nil || v != i || d.ID != res.Outcomes[i].ID {
			t.Fatalf("message %d: got %d", i, v)
		}
	}
	l := &fakeMastership{id: "x"}
	res, err = newRouter(t, c, l, nil, fast()).SendBatch(testCtx(t), msgs[:2])
	if !errors.Is(err, durable.ErrNotMaster) || !errors.Is(res.Outcomes[1].Err, durable.ErrNotSent) {
		t.Errorf("not master: %v, %+v", err, res.Outcomes)
	}
}

// TestReassign: a removed slave's entries, read or not, move to the live
// slaves with their ids and delivery counts; the emptied inbox goes away; a
// deposed master moves nothing; no slave left moves nothing.
func TestReassign(t *testing.T) {
	_, c := newMini(t)
	master := newMaster(t, c, "m")
	live := &slaveList{}
	r := newRouter(t, c, master, live, fast())
	register(t, c, "dead")
	var ids []string
	for i := range 20 {
		id, err := r.Send(testCtx(t), "dead", "seq", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	inbox := r.Inbox("dead")
	c.XGroupCreateMkStream(testCtx(t), inbox, keyspace.InboxGroup, "0")
	c.XReadGroup(testCtx(t), &redis.XReadGroupArgs{Group: keyspace.InboxGroup, Consumer: "dead", Streams: []string{inbox, ">"}, Count: 5, Block: -1})

	live.set("dead", "m")
	if _, err := r.Reassign(testCtx(t), "dead", nil); !errors.Is(err, durable.ErrNoSlaves) {
		t.Fatalf("no slaves: %v", err)
	}
	live.set("dead", "s1", "s2")
	if _, err := r.Reassign(testCtx(t), "dead", func(pubsub.Message, []string) string { return "elsewhere" }); !errors.Is(err, durable.ErrBadPick) {
		t.Fatalf("bad pick: %v", err)
	}
	other := takeOver(t, c, "m2")
	_, err := r.Reassign(testCtx(t), "dead", nil)
	assertFenced(t, "reassign by the deposed master", err)
	if n := c.XLen(testCtx(t), inbox).Val(); n != 20 {
		t.Fatalf("the deposed master's reassign left %d of 20 entries", n)
	}
	r = newRouter(t, c, other, live, durable.Config{ReassignBatch: 7})
	res, err := r.Reassign(testCtx(t), "dead", nil)
	if err != nil || res.Total() != 20 || res.Calls != 3 || res.Moved["s1"] == 0 || res.Moved["s2"] == 0 {
		t.Fatalf("reassign: %+v, %v", res, err)
	}
	if c.Exists(testCtx(t), inbox).Val() != 0 {
		t.Error("the emptied inbox remains")
	}
	_, g1, _ := startConsumer(t, c, "s1", fast())
	_, g2, _ := startConsumer(t, c, "s2", fast())
	seen := map[string]int64{}
	for range 20 {
		var d durable.Delivery
		select {
		case d = <-g1:
		case d = <-g2:
		case <-time.After(waitLimit):
			t.Fatal("not all moved entries were handled")
		}
		seen[d.ID] = d.Deliveries
		if d.Term != other.Term() {
			t.Errorf("moved entry under term %d; want the mover's %d", d.Term, other.Term())
		}
	}
	for i, id := range ids {
		want := int64(1)
		if i < 5 {
			want = 2 // delivered once to the dead slave
		}
		if seen[id] != want {
			t.Errorf("message %d: %d deliveries, want %d", i, seen[id], want)
		}
	}
}

// fakeEvents is an Events the test drives.
type fakeEvents struct {
	mu         sync.Mutex
	acquired   func(context.Context, int64)
	removed    func(string)
	registered func(registry.SlaveNode)
}

func (f *fakeEvents) OnMasterAcquired(fn func(context.Context, int64)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquired = fn
	return func() { f.mu.Lock(); f.acquired = nil; f.mu.Unlock() }
}

func (f *fakeEvents) OnSlaveRemoved(fn func(string)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = fn
	return func() { f.mu.Lock(); f.removed = nil; f.mu.Unlock() }
}

func (f *fakeEvents) OnSlaveRegistered(fn func(registry.SlaveNode)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered = fn
	return func() { f.mu.Lock(); f.registered = nil; f.mu.Unlock() }
}

func (f *fakeEvents) subscribed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acquired != nil || f.removed != nil || f.registered != nil
}

// TestMaintain: a slave that left the registry after the master sent to it
// has its inbox moved at the next sweep; with nobody to take the work it
// waits (an orphan), and the next slave to register takes it.
func TestMaintain(t *testing.T) {
	_, c := newMini(t)
	live := &slaveList{}
	log := &errLog{}
	cfg := fast()
	cfg.OnError = log.add
	cfg.SweepInterval = time.Hour // only the events sweep here
	swept := make(chan durable.Swept, 16)
	cfg.OnSweep = func(s durable.Swept) { swept <- s }
	r := newRouter(t, c, newMaster(t, c, "m"), live, cfg)
	register(t, c, "gone")
	for i := range 3 {
		if _, err := r.Send(testCtx(t), "gone", "seq", i); err != nil {
			t.Fatal(err)
		}
	}
	unregister(t, c, "gone")
	ev := &fakeEvents{}
	stop := r.Maintain(ev, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev.acquired(ctx, 1)
	s := <-swept
	if len(s.Orphans) != 1 || s.Orphans[0] != "gone" {
		t.Fatalf("sweep %+v", s)
	}
	eventually(t, "ErrNoSlaves reported", func() bool { return log.count(durable.ErrNoSlaves) == 1 })
	if got := r.Orphans(); len(got) != 1 || got[0] != "gone" {
		t.Fatalf("orphans %v", got)
	}
	register(t, c, "s1")
	live.set("s1")
	ev.registered(registry.SlaveNode{NodeID: "s1"})
	s = <-swept
	if s.Moved["gone"] != 3 || len(s.Orphans) != 0 {
		t.Errorf("sweep after a slave registered: %+v", s)
	}
	if got := r.Orphans(); len(got) != 0 {
		t.Errorf("orphans %v after a slave registered", got)
	}
	if n := c.XLen(testCtx(t), r.Inbox("s1")).Val(); n != 3 {
		t.Errorf("s1's inbox holds %d of 3 entries", n)
	}
	if n := c.Exists(testCtx(t), r.Inbox("gone")).Val(); n != 0 {
		t.Error("the emptied inbox of a process gone is still there")
	}
	stop()
	if ev.subscribed() {
		t.Error("still subscribed")
	}
}

// TestPickRendezvous: the choice does not depend on the order of the list,
// and removing a slave moves only its own entries.
func TestPickRendezvous(t *testing.T) {
	all := []string{"a", "b", "c", "d"}
	counts := map[string]int{}
	for i := range 1000 {
		m := pubsub.Message{ID: strconv.Itoa(i)}
		p := durable.PickRendezvous(m, all)
		counts[p]++
		if q := durable.PickRendezvous(m, []string{"d", "c", "b", "a"}); q != p {
			t.Fatalf("order changes the pick: %s vs %s", p, q)
		}
		if p != "b" {
			if q := durable.PickRendezvous(m, []string{"a", "c", "d"}); q != p {
				t.Fatalf("removing b moved message %d from %s to %s", i, p, q)
			}
		}
	}
	for _, s := range all {
		if counts[s] < 150 {
			t.Errorf("counts %v: uneven", counts)
		}
	}
}

func TestConfigAndConstructors(t *testing.T) {
	_, c := newMini(t)
	for _, tc := range []struct {
		name string
		cfg  durable.Config
	}{
		{"negative block", durable.Config{Block: -1}},
		{"tiny retry", durable.Config{RetryDelay: time.Microsecond}},
		{"bad lock", durable.Config{LockName: "a b"}},
		{"negative batch", durable.Config{ReassignBatch: -1}},
		{"negative count", durable.Config{ReadCount: -1}},
		{"tiny grace", durable.Config{Grace: time.Microsecond}},
	} {
		if err := tc.cfg.Validate(); !errors.Is(err, durable.ErrInvalidConfig) {
			t.Errorf("%s: %v; want ErrInvalidConfig", tc.name, err)
		}
		if _, err := durable.NewConsumer(c, "s", tc.cfg); err == nil {
			t.Errorf("%s: NewConsumer accepted it", tc.name)
		}
	}
	if err := (durable.Config{Block: -1, ReadCount: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "Block") || !strings.Contains(err.Error(), "ReadCount") {
		t.Errorf("two problems: %v; want both named", err)
	}
	if _, err := durable.NewConsumer(nil, "s", durable.Config{}); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := durable.NewConsumer(c, "a*", durable.Config{}); !errors.Is(err, pubsub.ErrInvalidName) {
		t.Errorf("glob id: %v", err)
	}
	if _, err := durable.NewRouter(c, nil, nil, durable.Config{}); err == nil {
		t.Error("nil mastership accepted")
	}
	r := newRouter(t, c, &fakeMastership{id: "x"}, nil, durable.Config{})
	if _, err := r.Send(testCtx(t), "s", "t", nil); !errors.Is(err, durable.ErrNotMaster) {
		t.Errorf("send while not master: %v", err)
	}
	if _, err := r.Send(testCtx(t), "s", "t", func() {}); err == nil {
		t.Error("unencodable payload accepted")
	}
	if _, err := r.Reassign(testCtx(t), "s", nil); err == nil {
		t.Error("Reassign without a SlaveLister")
	}
	if got := (durable.Config{}).Inbox("p"); got != "master-election:inbox:p" {
		t.Errorf("Inbox = %q", got)
	}
	con, err := durable.NewConsumer(c, "s", fast())
	if err != nil {
		t.Fatal(err)
	}
	if err := con.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := con.Start(testCtx(t)); !errors.Is(err, durable.ErrStarted) {
		t.Errorf("second Start: %v", err)
	}
	_ = con.Close()
	_ = con.Close()
	if err := con.Start(testCtx(t)); !errors.Is(err, durable.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

// runningEvents is a fakeEvents whose mastership began before Maintain was
// called: RunIfMaster runs fn with a ctx that ends when fn returns, as the
// election's does.
type runningEvents struct {
	fakeEvents
	mastership context.Context
}

func (r *runningEvents) RunIfMaster(ctx context.Context, fn func(context.Context, int64) error) (bool, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.mastership.Done():
			cancel()
		case <-fctx.Done():
		}
	}()
	return true, fn(fctx, 1)
}

// TestMaintainDuringAMastership: Maintain called by a process that is
// already master sweeps without a master-acquired event, periodically,
// until the mastership ends; stop waits for it.
func TestMaintainDuringAMastership(t *testing.T) {
	_, c := newMini(t)
	cfg := fast()
	cfg.SweepInterval = 10 * time.Millisecond
	var sweeps atomic.Int64
	cfg.OnSweep = func(durable.Swept) { sweeps.Add(1) }
	live := &slaveList{}
	live.set("s1")
	register(t, c, "s1", "gone")
	r := newRouter(t, c, newMaster(t, c, "m"), live, cfg)
	if _, err := r.Send(testCtx(t), "gone", "w", 1); err != nil {
		t.Fatal(err)
	}
	ctx, end := context.WithCancel(context.Background())
	ev := &runningEvents{mastership: ctx}
	stop := r.Maintain(ev, nil)
	defer stop()
	unregister(t, c, "gone") // found by a periodic sweep, with no event
	eventually(t, "the inbox of the process gone moved, and reported", func() bool {
		return c.XLen(testCtx(t), r.Inbox("s1")).Val() == 1 && sweeps.Load() > 0
	})
	end()
	stop()
}

// TestConsumerReadsOnlyWhileItHoldsItsID: with Config.Holds, a Consumer
// reads nothing while Holds says no (a process refused as a twin, or one
// that stepped aside), and reads its inbox once it says yes.
func TestConsumerReadsOnlyWhileItHoldsItsID(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	var holds atomic.Bool
	cfg := fast()
	cfg.Holds = holds.Load
	con, got, _ := startConsumer(t, c, "s1", cfg)
	for i := range 3 {
		if _, err := r.Send(testCtx(t), "s1", "seq", i); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * cfg.Block)
	if con.Handled() != 0 || len(got) != 0 {
		t.Fatalf("handled %d entries while Holds said no", con.Handled())
	}
	holds.Store(true)
	for i := range 3 {
		var v int
		if err := receive(t, got).Decode(&v); err != nil || v != i {
			t.Fatalf("message %d: %d, %v", i, v, err)
		}
	}
}

// TestAcknowledgementsRideOnTheNextRead: a Consumer acknowledges a handled
// entry (XDEL and XACK, no MULTI) in the round trip of its next read, so a
// steady stream costs it one round trip per read, not two.
func TestAcknowledgementsRideOnTheNextRead(t *testing.T) {
	m, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	cc := redis.NewClient(clientOptions(m.Addr()))
	t.Cleanup(func() { _ = cc.Close() })
	trips := &wiretap.Tap{}
	cc.AddHook(trips)
	cfg := fast()
	cfg.RetryDelay = time.Hour // no pending pass after the first
	con, got, log := startConsumer(t, cc, "s1", cfg)
	for i := range 10 {
		if _, err := r.Send(testCtx(t), "s1", "seq", i); err != nil {
			t.Fatal(err)
		}
		receive(t, got)
	}
	eventually(t, "all acknowledged", func() bool { return con.Handled() == 10 })
	acked := 0
	for _, trip := range trips.Since(0) {
		if strings.Contains(trip, "xack") {
			acked++
			if trip != "xdel+xack+xreadgroup" {
				t.Errorf("round trip %q acknowledges, want XDEL, XACK and the next XREADGROUP", trip)
			}
		}
	}
	if acked == 0 {
		t.Error("no round trip acknowledged")
	}
	if n := c.XLen(testCtx(t), r.Inbox("s1")).Val(); n != 0 {
		t.Errorf("inbox holds %d entries after all were handled", n)
	}
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
}

// TestPipelineBlockFitsTheReadTimeout: a read that carries acknowledgements
// blocks at most half the client's read timeout (go-redis does not stretch
// a pipeline's), as long as asked when reads have no timeout, and is not
// pipelined on a client whose timeout go-redis does not tell.
func TestPipelineBlockFitsTheReadTimeout(t *testing.T) {
	short := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 400 * time.Millisecond})
	none := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: 300 * time.Millisecond})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	for _, c := range []io.Closer{short, none, cluster, ring} {
		t.Cleanup(func() { _ = c.Close() })
	}
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		block  time.Duration
		want   time.Duration
		ok     bool
	}{
		{"half a short timeout", short, time.Second, 200 * time.Millisecond, true},
		{"a block within it", short, 50 * time.Millisecond, 50 * time.Millisecond, true},
		{"no timeout", none, time.Second, time.Second, true},
		{"cluster", cluster, time.Second, 150 * time.Millisecond, true},
		{"a kind that does not tell", ring, time.Second, 0, false},
	} {
		if got, ok := durable.PipelineBlock(tc.client, tc.block); got != tc.want || ok != tc.ok {
			t.Errorf("%s: PipelineBlock(%v) = %v, %v; want %v, %v", tc.name, tc.block, got, ok, tc.want, tc.ok)
		}
	}
}

// TestHandledAtCloseIsAcknowledged: an entry whose handler returns nil
// after Close cancelled its ctx (here during the pending pass at Start) is
// acknowledged all the same: the loop's last flush does not take the
// cancelled ctx. Before it kept the queue, the read after the pass sent
// nothing (its ctx was done) and dropped the acknowledgement.
func TestHandledAtCloseIsAcknowledged(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	inbox, _ := pendingEntry(t, c, r, "s1")
	log := &errLog{}
	cfg := fast()
	cfg.OnError = log.add
	con, err := durable.NewConsumer(c, "s1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan struct{})
	con.HandleDefault(func(ctx context.Context, d durable.Delivery) error {
		close(in)
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond)
		return nil // done all the same
	})
	if err := con.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	<-in
	_ = con.Close()
	p, err := c.XPending(testCtx(t), inbox, keyspace.InboxGroup).Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.XLen(testCtx(t), inbox).Result()
	if err != nil {
		t.Fatal(err)
	}
	if p.Count != 0 || n != 0 || con.Handled() != 1 || con.Failed() != 0 {
		t.Errorf("after Close: pending %d, inbox length %d, handled %d, failed %d (errors %v); want 0, 0, 1, 0", p.Count, n, con.Handled(), con.Failed(), log.all())
	}
}

// TestEarlierEntriesAreAcknowledgedBeforeTheNext: while the handler of the
// third entry of one read runs, the first two are acknowledged already, so
// a process that dies in a handler runs again only that handler, and a
// crash loop does not use up the delivery counts of entries handled well.
func TestEarlierEntriesAreAcknowledgedBeforeTheNext(t *testing.T) {
	_, c := newMini(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	register(t, c, "s1")
	for i := range 3 {
		if _, err := r.Send(testCtx(t), "s1", "seq", i); err != nil {
			t.Fatal(err)
		}
	}
	con, err := durable.NewConsumer(c, "s1", fast())
	if err != nil {
		t.Fatal(err)
	}
	in, release := make(chan struct{}), make(chan struct{})
	con.HandleDefault(func(ctx context.Context, d durable.Delivery) error {
		var v int
		if err := d.Decode(&v); err == nil && v == 2 {
			close(in)
			<-release
		}
		return nil
	})
	if err := con.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	<-in
	p, err := c.XPending(testCtx(t), r.Inbox("s1"), keyspace.InboxGroup).Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.XLen(testCtx(t), r.Inbox("s1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if p.Count != 1 || n != 1 {
		t.Errorf("while the third handler runs: %d pending, %d in the inbox; want 1 and 1 (the first two acknowledged)", p.Count, n)
	}
	eventually(t, "all acknowledged", func() bool { return con.Handled() == 3 })
}

// TestDeletedPendingEntryIsDroppedNotRedelivered: an entry whose XDEL
// went through but whose XACK was lost (the acknowledgement's two commands
// cut apart) is pending and gone: the pending pass drops its slot and no
// handler sees it again. On a real server: miniredis drops the slot at
// the XDEL itself.
func TestDeletedPendingEntryIsDroppedNotRedelivered(t *testing.T) {
	c := redistest.Start(t, redistest.Default(t)).Client(t)
	r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
	inbox, entry := pendingEntry(t, c, r, "s1")
	if err := c.XDel(testCtx(t), inbox, entry).Err(); err != nil {
		t.Fatal(err)
	}
	con, got, log := startConsumer(t, c, "s1", fast())
	eventually(t, "the pending slot dropped", func() bool {
		p, err := c.XPending(testCtx(t), inbox, keyspace.InboxGroup).Result()
		return err == nil && p.Count == 0
	})
	select {
	case d := <-got:
		t.Errorf("message %s was delivered again after its XDEL", d.ID)
	case <-time.After(100 * time.Millisecond):
	}
	if con.Handled() != 0 {
		t.Errorf("handled %d, want 0", con.Handled())
	}
	if errs := log.all(); len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
}

// pendingEntry registers id, sends it one message through r and reads it
// as consumer id of the inbox's group, outside any Consumer, so that the
// entry is pending for id as after a process that stopped in its handler.
// It returns the inbox and the entry's id.
func pendingEntry(t *testing.T, c redis.UniversalClient, r *durable.Router, id string) (inbox, entry string) {
	t.Helper()
	register(t, c, id)
	if _, err := r.Send(testCtx(t), id, "seq", 1); err != nil {
		t.Fatal(err)
	}
	inbox = r.Inbox(id)
	if err := c.XGroupCreateMkStream(testCtx(t), inbox, keyspace.InboxGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	read, err := c.XReadGroup(testCtx(t), &redis.XReadGroupArgs{Group: keyspace.InboxGroup, Consumer: id, Streams: []string{inbox, ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(read) != 1 || len(read[0].Messages) != 1 {
		t.Fatalf("read = %v, %v; want the one entry", read, err)
	}
	return inbox, read[0].Messages[0].ID
}
