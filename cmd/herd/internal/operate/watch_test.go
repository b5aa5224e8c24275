package operate

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdkit/herd/cmd/herd/internal/herdtest"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
)

// watched runs a Watcher and collects its events.
type watched struct {
	mu     sync.Mutex
	events []Event
	cancel context.CancelFunc
	done   chan error
}

func watch(t *testing.T, r *Reader, interval time.Duration) *watched {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watched{cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- NewWatcher(r, interval).Run(ctx, func(u Update) {
			w.mu.Lock()
			w.events = append(w.events, u.Events...)
			w.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-w.done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	return w
}

// since returns the events from index i on.
func (w *watched) since(i int) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Event(nil), w.events[min(i, len(w.events)):]...)
}

func (w *watched) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

// await waits for an event of kind about node, among the events from index
// from on.
func (w *watched) await(t *testing.T, from int, kind EventKind, node string) Event {
	t.Helper()
	var found Event
	herdtest.Eventually(t, 5*time.Second, fmt.Sprintf("%s %s (events: %s)", kind, node, lazy{w, from}), func() bool {
		for _, e := range w.since(from) {
			if e.Kind == kind && e.NodeID == node {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

type lazy struct {
	w    *watched
	from int
}

func (l lazy) String() string {
	var s []string
	for _, e := range l.w.since(l.from) {
		s = append(s, string(e.Kind)+" "+e.Text())
	}
	return strings.Join(s, "; ")
}

func TestWatch(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes := herdtest.Herd(t, inst, "w", "a", "b", "c")
		c := dial(t, herdtest.URL(inst), "w")
		r := reader(t, c)
		const interval = 200 * time.Millisecond
		w := watch(t, r, interval)
		st := w.await(t, 0, EventState, "a")
		if st.Term != nodes[0].Term() || !strings.Contains(st.Message, "3 processes (1 master, 2 slaves)") {
			t.Fatalf("first event %+v", st)
		}

		// A directed hand-over: released, acquired, failover with its gap.
		mark := w.count()
		if err := nodes[0].Transfer(testCtx(t), "c"); err != nil {
			t.Fatal(err)
		}
		rel := w.await(t, mark, EventReleased, "a")
		acq := w.await(t, mark, EventAcquired, "c")
		fo := w.await(t, mark, EventFailover, "c")
		herdtest.Eventually(t, 5*time.Second, "c master", nodes[2].IsMaster) // Transfer returns once Redis shows it
		if rel.To != "c" || rel.Reason != "" || acq.Term != nodes[2].Term() || fo.From != "a" || fo.FromTerm != st.Term ||
			fo.GapAtMost || fo.Gap > 200*time.Millisecond || acq.At.IsZero() {
			t.Fatalf("hand-over events: %+v, %+v, %+v", rel, acq, fo)
		}
		// Both registry entries follow the hand-over (a slave, c master)
		// before the next part starts counting events.
		w.await(t, mark, EventRole, "a")
		w.await(t, mark, EventRole, "c")
		cTerm := nodes[2].Term()

		// Forged notices change nothing that is reported.
		mark = w.count()
		admin := inst.Client(t)
		herdtest.Admin(t, admin, "PUBLISH", c.Keys.Events, fmt.Sprintf(`{"event":"released","nodeId":"c","term":%d}`, cTerm))
		herdtest.Admin(t, admin, "PUBLISH", c.Keys.Events, `{"event":"acquired","nodeId":"evil","term":9000000000000000}`)
		herdtest.Admin(t, admin, "PUBLISH", c.Keys.RegistryEvents, `{"event":"unregistered","nodeId":"b"}`)
		herdtest.Admin(t, admin, "PUBLISH", c.Keys.RegistryEvents, `garbage`)
		time.Sleep(3 * interval)
		if evs := w.since(mark); len(evs) != 0 {
			t.Fatalf("forged notices were reported: %s", lazy{w, mark})
		}

		// A change without a notice is found by the periodic read.
		mark = w.count()
		entry := fmt.Sprintf(`{"processId":"ghost","nodeId":"ghost","role":"slave","lastSeen":%q,"capabilities":{}}`, time.Now().UTC().Format(time.RFC3339Nano))
		herdtest.Admin(t, admin, "HSET", c.Keys.Processes, "ghost", entry)
		w.await(t, mark, EventRegistered, "ghost")
		herdtest.Admin(t, admin, "HDEL", c.Keys.Processes, "ghost")
		if e := w.await(t, mark, EventUnregistered, "ghost"); e.Reason != "unannounced" {
			t.Fatalf("unregistered without a notice: %+v", e)
		}

		// A process that leaves; the master's own release on Stop.
		mark = w.count()
		herdtest.Stop(t, nodes[1])
		if e := w.await(t, mark, EventUnregistered, "b"); e.Reason != "left" {
			t.Fatalf("b left: %+v", e)
		}
		for _, n := range nodes {
			herdtest.Stop(t, n)
		}
		w.await(t, mark, EventReleased, "c")

		// A master that never renews: its lock expires with no master, and
		// the next master's failover counts from the expiry.
		mark = w.count()
		got, err := rdb.Acquire(testCtx(t), admin, c.Keys, "crashed", 300*time.Millisecond, nil, 0)
		if err != nil || got.Term == 0 {
			t.Fatalf("acquire: %+v, %v", got, err)
		}
		w.await(t, mark, EventAcquired, "crashed")
		exp := w.await(t, mark, EventExpired, "crashed")
		if exp.Term != got.Term || exp.At.IsZero() {
			t.Fatalf("expired: %+v", exp)
		}
		d := herdtest.Node(t, inst, herdtest.Config("w", "d"))
		fo = w.await(t, mark, EventFailover, "d")
		if fo.From != "crashed" || fo.GapAtMost || fo.Term != d.Term() || fo.Gap <= 0 || fo.Gap > 10*time.Second {
			t.Fatalf("failover after an expiry: %+v", fo)
		}
	})
}

// A watch of an unknown lock name fails at once with the names found.
func TestWatchUnknownLock(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	herdtest.Herd(t, inst, "orders", "a")
	r := reader(t, dial(t, herdtest.URL(inst), "order"))
	err := NewWatcher(r, time.Second).Run(testCtx(t), func(Update) { t.Error("update of an unknown lock") })
	if ExitCode(err) != ExitUnknownLock || !strings.Contains(err.Error(), "orders") {
		t.Fatalf("watch of an unknown lock: %v", err)
	}
}

// The watch survives Redis going away, reports it once, and reports the
// state again when Redis answers.
func TestWatchRedisDown(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	herdtest.Herd(t, inst, "down", "a")
	r := reader(t, dial(t, herdtest.URL(inst), "down"))
	w := watch(t, r, 100*time.Millisecond)
	w.await(t, 0, EventState, "a")
	mark := w.count()
	inst.Pause(t)
	herdtest.Eventually(t, 10*time.Second, "an error event", func() bool {
		for _, e := range w.since(mark) {
			if e.Kind == EventError {
				return true
			}
		}
		return false
	})
	inst.Resume(t)
	herdtest.Eventually(t, 10*time.Second, "the state again", func() bool {
		for _, e := range w.since(mark) {
			if e.Kind == EventState && strings.HasPrefix(e.Message, "Redis answers again") {
				return true
			}
		}
		return false
	})
	errs := 0
	for _, e := range w.since(mark) {
		if e.Kind == EventError {
			errs++
		}
	}
	if errs > 2 {
		t.Errorf("%d error events for one outage: %s", errs, lazy{w, mark})
	}
}
