package durable_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// The tests in this file run against real servers (the redistest matrix);
// they are skipped when none is installed.

// startNode runs the test binary as the slave process id (runNode) and
// waits until its Consumer started. The process is killed at cleanup.
func startNode(t *testing.T, addr, id, ledger string, wait time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+id, nodeAddrEnv+"="+addr, nodeLedgerEnv+"="+ledger, nodeSlowEnv+"="+wait.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("node %s did not start", id)
		}
	case <-time.After(waitLimit):
		t.Fatalf("node %s did not start within %s", id, waitLimit)
	}
	return cmd
}

// record is one line of the ledger.
type record struct {
	node, id   string
	deliveries int64
}

func readLedger(t *testing.T, c redis.UniversalClient, ledger string) []record {
	t.Helper()
	lines, err := c.LRange(testCtx(t), ledger, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]record, len(lines))
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("ledger line %q", l)
		}
		n, _ := strconv.ParseInt(f[2], 10, 64)
		recs[i] = record{f[0], f[1], n}
	}
	return recs
}

// TestIntegrationKilledSlaveLosesNothing: a slave process killed with
// SIGKILL in the middle of a stream of messages loses none of them: every
// message the master stored is handled at least once, by the dead slave
// before its death or by another slave after Reassign moved its inbox.
// Duplicates (handled by the dead slave, not acknowledged, handled again)
// are counted, and each carries a delivery count above 1.
func TestIntegrationKilledSlaveLosesNothing(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		c := inst.Client(t)
		const ledger = "test:ledger"
		live := &slaveList{}
		live.set("victim", "s1", "s2")
		register(t, c, "victim", "s1", "s2")
		r := newRouter(t, c, newMaster(t, c, "m"), live, fast())
		victim := startNode(t, inst.Addr, "victim", ledger, time.Millisecond)
		var survivors []*durable.Consumer
		for _, id := range []string{"s1", "s2"} {
			con, err := durable.NewConsumer(c, id, fast())
			if err != nil {
				t.Fatal(err)
			}
			con.HandleDefault(ledgerHandler(c, ledger, id, 0))
			if err := con.Start(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = con.Close() })
			survivors = append(survivors, con)
		}

		const n = 3000
		sent := make([]string, 0, n)
		done := make(chan error, 1)
		go func() {
			for i := range n {
				to := []string{"victim", "victim", "s1", "s2"}[i%4]
				id, err := r.Send(context.Background(), to, "work", i)
				if err != nil {
					done <- fmt.Errorf("send %d: %w", i, err)
					return
				}
				sent = append(sent, id)
			}
			done <- nil
		}()
		// Kill the victim once it has handled some of its share, while the
		// master keeps sending to it.
		eventually(t, "the victim handles 200 messages", func() bool {
			k := 0
			for _, rec := range readLedger(t, c, ledger) {
				if rec.node == "victim" {
					k++
				}
			}
			return k >= 200
		})
		if err := victim.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = victim.Wait()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		left := c.XLen(testCtx(t), r.Inbox("victim")).Val()
		live.set("s1", "s2")
		res, err := r.Reassign(testCtx(t), "victim", nil)
		if err != nil {
			t.Fatal(err)
		}
		if int64(res.Total()+res.Gone) != left || left == 0 {
			t.Fatalf("reassign %+v; %d entries were left in the victim's inbox", res, left)
		}
		eventually(t, "every message handled", func() bool {
			seen := map[string]bool{}
			for _, rec := range readLedger(t, c, ledger) {
				seen[rec.id] = true
			}
			return len(seen) >= len(sent)
		})
		recs := readLedger(t, c, ledger)
		count := map[string]int{}
		byVictim := 0
		for _, rec := range recs {
			count[rec.id]++
			if rec.node == "victim" {
				byVictim++
			}
		}
		lost, dups := 0, 0
		for _, id := range sent {
			if count[id] == 0 {
				lost++
			}
			dups += max(count[id]-1, 0)
		}
		if lost != 0 || len(count) != len(sent) {
			t.Fatalf("messages lost: %d (handled %d distinct ids of %d sent)", lost, len(count), len(sent))
		}
		// A message handled twice was handled by the victim first, then by a
		// survivor that saw it delivered once before.
		firstBy := map[string]string{}
		for _, rec := range recs {
			if f, ok := firstBy[rec.id]; ok {
				if f != "victim" || rec.deliveries < 2 {
					t.Errorf("message %s handled again by %s (deliveries %d) after %s", rec.id, rec.node, rec.deliveries, f)
				}
				continue
			}
			firstBy[rec.id] = rec.node
		}
		for _, con := range survivors {
			if con.Rejected() != 0 || con.Unverified() != 0 {
				t.Errorf("%s rejected %d, refused %d", con.Inbox(), con.Rejected(), con.Unverified())
			}
		}
		if c.Exists(testCtx(t), r.Inbox("victim")).Val() != 0 {
			t.Error("the victim's inbox remains")
		}
		t.Logf("%s: sent %d, handled by the victim before its death %d, moved %d (%+v), messages lost: %d, duplicates: %d",
			srv.Name, len(sent), byVictim, res.Total(), res.Moved, lost, dups)
	})
}

// TestIntegrationDeposedMasterMidSend: a master deposed while it sends adds
// exactly the entries whose Send returned nil, none after, and can move
// nothing; the new master moves the entries under its own term.
func TestIntegrationDeposedMasterMidSend(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		c := redistest.Start(t, srv).Client(t)
		old := newMaster(t, c, "a")
		live := &slaveList{}
		live.set("s1", "s2")
		register(t, c, "s1", "s2")
		ra := newRouter(t, c, old, live, fast())
		var mu sync.Mutex
		ok, fenced, other := 0, 0, []error(nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				var err error
				if i%2 == 0 {
					_, err = ra.Send(context.Background(), "s1", "work", i)
				} else {
					var res durable.BatchResult
					res, err = ra.SendBatch(context.Background(), batchTo(3, "s1"))
					if err == nil && res.Stored() != 3 {
						err = res.Err()
					}
				}
				mu.Lock()
				switch {
				case err == nil && i%2 == 0:
					ok++
				case err == nil:
					ok += 3
				case errors.Is(err, durable.ErrNotMaster) && errors.Is(err, keyspace.ErrFenced):
					fenced++
				default:
					other = append(other, err)
				}
				stop := fenced >= 50 || len(other) > 0
				mu.Unlock()
				if stop {
					return
				}
			}
		}()
		eventually(t, "200 sends", func() bool { mu.Lock(); defer mu.Unlock(); return ok >= 200 })
		b := takeOver(t, c, "b")
		<-done
		if len(other) != 0 {
			t.Fatalf("unexpected errors: %v", other)
		}
		entries, err := c.XRange(testCtx(t), ra.Inbox("s1"), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		oldTerm := strconv.FormatInt(old.Term(), 10)
		for _, e := range entries {
			if e.Values[rdb.InboxFieldTerm] != oldTerm {
				t.Fatalf("entry %s under term %v", e.ID, e.Values[rdb.InboxFieldTerm])
			}
		}
		if len(entries) != ok {
			t.Fatalf("%d entries of the deposed master in the inbox; %d sends returned nil", len(entries), ok)
		}
		_, err = ra.Reassign(testCtx(t), "s1", nil)
		assertFenced(t, "reassign by the deposed master", err)
		if n := c.XLen(testCtx(t), ra.Inbox("s1")).Val(); n != int64(ok) || c.Exists(testCtx(t), ra.Inbox("s2")).Val() != 0 {
			t.Fatalf("the deposed master's reassign moved entries: %d left of %d", n, ok)
		}
		live.set("s2")
		res, err := newRouter(t, c, b, live, fast()).Reassign(testCtx(t), "s1", nil)
		if err != nil || res.Moved["s2"] != ok {
			t.Fatalf("reassign by the new master: %+v, %v", res, err)
		}
		_, got, _ := startConsumer(t, c, "s2", fast())
		for range ok {
			if d := receive(t, got); d.Term != b.Term() || d.Message.Term != old.Term() {
				t.Fatalf("moved entry %+v", d)
			}
		}
		t.Logf("%s: %d messages stored before the takeover, %d sends fenced after it, all moved by the new master and handled", srv.Name, ok, fenced)
	})
}

// TestIntegrationCluster: on a Redis Cluster of three masters the inboxes
// share the lock's slot, so the fenced scripts run, and sending, consuming
// and reassigning work as on one server.
func TestIntegrationCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.Default(t), 3).Client(t)
	cfg := fast()
	cfg.Cluster = true
	k := keyspace.NewKeys(pubsub.DefaultLockName, true)
	a, err := rdb.Acquire(testCtx(t), c, k, "m", time.Minute, nil, 0)
	if err != nil || a.Term <= 0 {
		t.Fatalf("acquire: %+v, %v", a, err)
	}
	l := &fakeMastership{id: "m"}
	l.term.Store(a.Term)
	l.master.Store(true)
	live := &slaveList{}
	live.set("s1")
	for _, id := range []string{"gone", "s1"} {
		if err := c.HSet(testCtx(t), k.Processes, id, "{}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := newRouter(t, c, l, live, cfg)
	if got := r.Inbox("s9"); !strings.HasPrefix(got, "{") {
		t.Fatalf("inbox %q has no hash tag", got)
	}
	res, err := r.SendBatch(testCtx(t), append(batchTo(5, "gone"), batchTo(5, "s1")...))
	if err != nil || res.Stored() != 10 {
		t.Fatalf("batch: %v, %v", res.Err(), err)
	}
	if _, err := r.Reassign(testCtx(t), "gone", nil); err != nil {
		t.Fatal(err)
	}
	_, got, _ := startConsumer(t, c, "s1", cfg)
	for range 10 {
		receive(t, got)
	}
}

// durableACL is the least-privileged user's grant for durable routing that
// docs/topologies.md gives, for lock name master-election.
var durableACL = []any{"ACL", "SETUSER", "durable", "reset", "on", ">secret", "-@all",
	"+evalsha", "+eval", "+get", "+multi", "+exec",
	"+xadd", "+xlen", "+xrange", "+xpending", "+xclaim", "+xack", "+xdel", "+del", "+exists", "+xreadgroup", "+xgroup|create",
	"+hexists", "+zscore", "+time", "+sadd", "+srem", "+smembers",
	"~master-election:*"}

// TestIntegrationACL: a user granted only the commands docs/topologies.md
// lists for durable routing sends, consumes and reassigns, and ACL LOG
// stays empty (a missing grant inside a script shows up there even where
// the script goes on, as for XPENDING in inbox_move.lua).
func TestIntegrationACL(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		admin := inst.Client(t)
		if err := admin.Do(testCtx(t), durableACL...).Err(); err != nil {
			t.Fatal(err)
		}
		opts := clientOptions(inst.Addr)
		opts.Username, opts.Password = "durable", "secret"
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		live := &slaveList{}
		live.set("s1")
		register(t, admin, "gone", "s1")
		r := newRouter(t, c, newMaster(t, admin, "m"), live, fast())
		for i := range 3 {
			if _, err := r.Send(testCtx(t), "gone", "w", i); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.SendBatch(testCtx(t), batchTo(2, "s1")); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reassign(testCtx(t), "gone", nil); err != nil {
			t.Fatal(err)
		}
		con, got, log := startConsumer(t, c, "s1", fast())
		for range 5 {
			receive(t, got)
		}
		eventually(t, "acknowledged", func() bool { return con.Handled() == 5 })
		if errs := log.all(); len(errs) != 0 {
			t.Errorf("consumer errors: %v", errs)
		}
		if entries, err := admin.Do(testCtx(t), "ACL", "LOG").Slice(); err != nil || len(entries) != 0 {
			t.Errorf("ACL LOG: %v, %v", entries, err)
		}
	})
}

// TestIntegrationRestartedSlaveHandlesItsPendingFirst: a slave process
// killed with SIGKILL and started again under the same process id first
// handles the entries its previous run had read and not acknowledged (each
// delivered more than once), then the others; none is lost.
func TestIntegrationRestartedSlaveHandlesItsPendingFirst(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, srv redistest.Server) {
		inst := redistest.Start(t, srv)
		c := inst.Client(t)
		r := newRouter(t, c, newMaster(t, c, "m"), nil, fast())
		register(t, c, "s1")
		const n = 400
		var sent []string
		for i := range n {
			id, err := r.Send(testCtx(t), "s1", "work", i)
			if err != nil {
				t.Fatal(err)
			}
			sent = append(sent, id)
		}
		first := startNode(t, inst.Addr, "s1", "ledger:1", 2*time.Millisecond)
		eventually(t, "50 handled", func() bool { return len(readLedger(t, c, "ledger:1")) >= 50 })
		if err := first.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = first.Wait()
		pending, err := c.XPending(testCtx(t), r.Inbox("s1"), keyspace.InboxGroup).Result()
		if err != nil || pending.Count == 0 {
			t.Fatalf("no entry was pending when the slave died: %+v, %v", pending, err)
		}
		startNode(t, inst.Addr, "s1", "ledger:2", 0)
		handled := func() map[string]bool {
			seen := map[string]bool{}
			for _, l := range []string{"ledger:1", "ledger:2"} {
				for _, rec := range readLedger(t, c, l) {
					seen[rec.id] = true
				}
			}
			return seen
		}
		eventually(t, "all handled", func() bool { return len(handled()) == n })
		seen := handled()
		for _, id := range sent {
			if !seen[id] {
				t.Fatalf("message %s lost", id)
			}
		}
		second := readLedger(t, c, "ledger:2")
		redelivered := 0
		for i, rec := range second {
			if rec.deliveries > 1 {
				redelivered++
				if i >= redelivered {
					t.Fatalf("handling %d of the restarted slave is a redelivery, after %d first deliveries", i, i-redelivered+1)
				}
			}
		}
		if int64(redelivered) != pending.Count {
			t.Errorf("%d redeliveries after the restart; %d entries were pending", redelivered, pending.Count)
		}
		t.Logf("%s: %d pending at the kill, handled first after the restart", srv.Name, pending.Count)
	})
}
