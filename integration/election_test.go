package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/overlap"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/masterelection"
)

// fastConfig has timings short enough for failovers within a test.
func fastConfig(lock, id string) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = lock
	cfg.NodeID = id
	cfg.LockTTL = time.Second
	cfg.HeartbeatInterval = 250 * time.Millisecond
	cfg.CheckInterval = 200 * time.Millisecond
	cfg.ElectionJitter = 50 * time.Millisecond
	return cfg
}

func newElection(t *testing.T, c redis.UniversalClient, cfg masterelection.Config) *masterelection.MasterElection {
	t.Helper()
	m, err := masterelection.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return m
}

func start(t *testing.T, m *masterelection.MasterElection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", m.NodeID(), err)
	}
}

func stop(t *testing.T, m *masterelection.MasterElection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", m.NodeID(), err)
	}
}

// masters returns the nodes that call themselves master now.
func masters(nodes []*masterelection.MasterElection) []string {
	var ids []string
	for _, n := range nodes {
		if n.IsMaster() {
			ids = append(ids, n.NodeID())
		}
	}
	return ids
}

func waitMaster(t *testing.T, nodes []*masterelection.MasterElection, within time.Duration) *masterelection.MasterElection {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.IsMaster() {
				return n
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no master within %v", within)
	return nil
}

func TestElectionRaceExactlyOneWins(t *testing.T) {
	const rounds, candidates = 200, 8
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		c := inst.Client(t)
		for round := range rounds {
			lock := fmt.Sprintf("race-%d", round)
			nodes := make([]*masterelection.MasterElection, candidates)
			for i := range nodes {
				nodes[i] = newElection(t, c, fastConfig(lock, fmt.Sprintf("r%d-n%d", round, i)))
			}
			var wg sync.WaitGroup
			gate := make(chan struct{})
			errs := make(chan error, candidates)
			for _, n := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-gate
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := n.Start(ctx); err != nil {
						errs <- err
					}
				}()
			}
			close(gate)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("round %d: %v", round, err)
			}
			if got := masters(nodes); len(got) != 1 {
				t.Fatalf("round %d: masters %v, want exactly one", round, got)
			}
			winner := masters(nodes)[0]
			for _, n := range nodes {
				id, _, err := n.Master(context.Background())
				if err != nil || id != winner {
					t.Fatalf("round %d: %s sees master %q (%v), want %q", round, n.NodeID(), id, err, winner)
				}
			}
			for _, n := range nodes {
				stop(t, n)
			}
		}
	})
}

func TestGracefulHandover(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		c := inst.Client(t)
		cfg := fastConfig("handover", "")
		cfg.LockTTL, cfg.HeartbeatInterval, cfg.CheckInterval = 30*time.Second, 10*time.Second, 5*time.Second
		var nodes []*masterelection.MasterElection
		for i := range 3 {
			cfg.NodeID = fmt.Sprintf("h%d", i)
			n := newElection(t, c, cfg)
			start(t, n)
			nodes = append(nodes, n)
		}
		watch := overlap.Start(nodes)
		var lastTerm int64
		for range 2 {
			old := waitMaster(t, nodes, time.Second)
			if old.Term() <= lastTerm {
				t.Fatalf("term %d not above %d", old.Term(), lastTerm)
			}
			lastTerm = old.Term()
			began := time.Now()
			stop(t, old)
			var rest []*masterelection.MasterElection
			for _, n := range nodes {
				if n != old {
					rest = append(rest, n)
				}
			}
			nodes = rest
			// With LockTTL 30s and CheckInterval 5s, only the release notice
			// can bring a take-over within this bound.
			next := waitMaster(t, nodes, 2*time.Second)
			t.Logf("handover %s -> %s in %v", old.NodeID(), next.NodeID(), time.Since(began))
		}
		watch.Check(t)
	})
}

func TestCrashedMasterIsReplacedAndFencesItself(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		// The master reaches Redis through a proxy that the test cuts: it can
		// neither renew nor release, as if it had crashed, but it keeps
		// running, so its self-fencing is observable.
		px := newProxy(t, inst.Addr)
		opts := inst.Options()
		opts.Addr = px.Addr()
		opts.MaxRetries = -1
		cut := redis.NewClient(opts)
		t.Cleanup(func() { _ = cut.Close() })

		first := newElection(t, cut, fastConfig("crash", "first"))
		start(t, first)
		if !first.IsMaster() {
			t.Fatal("first node is not master")
		}
		others := []*masterelection.MasterElection{
			newElection(t, inst.Client(t), fastConfig("crash", "second")),
			newElection(t, inst.Client(t), fastConfig("crash", "third")),
		}
		for _, n := range others {
			start(t, n)
		}
		all := append([]*masterelection.MasterElection{first}, others...)
		watch := overlap.Start(all)
		oldTerm := first.Term()
		lost := make(chan time.Time, 1)
		first.OnMasterLost(func() { lost <- time.Now() })

		cutAt := time.Now()
		px.Cut()
		next := waitMaster(t, others, 3*time.Second)
		took := time.Since(cutAt)
		select {
		case <-lost:
		case <-time.After(3 * time.Second):
			t.Fatal("cut-off master never reported master-lost")
		}
		watch.Check(t)
		if next.Term() <= oldTerm {
			t.Fatalf("new term %d not above %d", next.Term(), oldTerm)
		}
		t.Logf("failover after the cut: %v (LockTTL 1s)", took)

		// Healed, the old master follows the new one.
		px.Heal()
		time.Sleep(600 * time.Millisecond)
		if first.IsMaster() {
			t.Fatal("old master took back the lock from a live master")
		}
	})
}

func TestPausedRedisMasterStepsDownBeforeExpiry(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes := []*masterelection.MasterElection{
			newElection(t, inst.Client(t), fastConfig("pause", "p1")),
			newElection(t, inst.Client(t), fastConfig("pause", "p2")),
		}
		for _, n := range nodes {
			start(t, n)
		}
		master := waitMaster(t, nodes, time.Second)
		watch := overlap.Start(nodes)
		inst.Pause(t)
		deadline := time.Now().Add(3 * time.Second)
		for master.IsMaster() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if master.IsMaster() {
			t.Fatal("master still master 3s after Redis froze (LockTTL 1s)")
		}
		inst.Resume(t)
		waitMaster(t, nodes, 3*time.Second)
		watch.Check(t)
	})
}

func TestRedisRestartWithoutDataElectsLargerTerm(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		nodes := []*masterelection.MasterElection{
			newElection(t, inst.Client(t), fastConfig("restart", "a")),
			newElection(t, inst.Client(t), fastConfig("restart", "b")),
		}
		for _, n := range nodes {
			start(t, n)
		}
		old := waitMaster(t, nodes, time.Second)
		oldTerm := old.Term()
		watch := overlap.Start(nodes)
		inst.Restart(t)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if m := masters(nodes); len(m) == 1 {
				id, term, err := nodes[0].Master(context.Background())
				if err == nil && id != "" && term > oldTerm {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no master with a term above %d after the restart", oldTerm)
			}
			time.Sleep(5 * time.Millisecond)
		}
		watch.Check(t)
	})
}

func TestWaitReplicas(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		primary := redistest.Start(t, s)
		cfg := fastConfig("wait", "w1")
		cfg.WaitReplicas = 1
		cfg.WaitTimeout = 20 * time.Millisecond

		// No replica: the lock never counts, and is not left behind.
		lonely := newElection(t, primary.Client(t), cfg)
		replErr := make(chan error, 16)
		lonely.OnError(func(err error) {
			if errors.Is(err, masterelection.ErrReplicas) {
				select {
				case replErr <- err:
				default:
				}
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := lonely.Start(ctx)
		cancel()
		if err == nil || lonely.IsMaster() {
			t.Fatalf("elected without a replica: start %v, master %v", err, lonely.IsMaster())
		}
		select {
		case err := <-replErr:
			t.Logf("without a replica: %v", err)
		default:
			t.Fatal("no ErrReplicas reported")
		}
		if id, _, err := lonely.Master(context.Background()); err != nil || id != "" {
			t.Fatalf("lock left held by %q (%v) after too few acknowledgements", id, err)
		}

		// With a replica attached, the same configuration elects.
		host, port, _ := strings.Cut(primary.Addr, ":")
		replica := redistest.Start(t, s, "--replicaof", host, port)
		rc := replica.Client(t)
		deadline := time.Now().Add(10 * time.Second)
		for {
			info, _ := rc.Info(context.Background(), "replication").Result()
			if strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica never linked:\n%s", info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cfg.NodeID = "w2"
		replicated := newElection(t, primary.Client(t), cfg)
		start(t, replicated)
		if !replicated.IsMaster() {
			t.Fatal("not master with a replica acknowledging")
		}
		// The lock is on the replica too.
		if v, err := rc.Get(context.Background(), replicated.Keys().Master).Result(); err != nil || v != "w2" {
			t.Fatalf("replica holds %q (%v)", v, err)
		}
	})
}

// A master whose requests or replies are lost for less time than its
// self-fencing deadline leaves keeps its mastership: it does not wait on the
// lost renewal, it sends others, and one of them gets through once the
// partition heals. The partition is silent: connections stay open, bytes
// are dropped.
func TestRenewalRidesOutABlackhole(t *testing.T) {
	tests := []struct {
		name string
		dirs direction
	}{
		{"requests", requests},
		{"replies", replies},
		{"both", requests | replies},
	}
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				px := newProxy(t, inst.Addr)
				opts := inst.Options()
				opts.Addr = px.Addr()
				opts.MaxRetries = -1
				c := redis.NewClient(opts)
				t.Cleanup(func() { _ = c.Close() })

				// LockTTL 2s, HeartbeatInterval 500ms, StepDownMargin 200ms:
				// every renewal sent before the blackhole gives a deadline at
				// least 1.3s after it began; it lasts 0.6s, longer than a
				// heartbeat, so a renewal is due (and lost) inside it.
				lock := "blackhole-" + tt.name
				cfg := fastConfig(lock, "m")
				cfg.LockTTL, cfg.HeartbeatInterval, cfg.CheckInterval = 2*time.Second, 500*time.Millisecond, 400*time.Millisecond
				m := newElection(t, c, cfg)
				start(t, m)
				if !m.IsMaster() {
					t.Fatal("not master")
				}
				cfg.NodeID = "o"
				o := newElection(t, inst.Client(t), cfg)
				start(t, o)
				watch := overlap.Start([]*masterelection.MasterElection{m, o})
				var lost atomic.Bool
				m.OnMasterLost(func() { lost.Store(true) })
				term := m.Term()

				px.Blackhole(tt.dirs)
				time.Sleep(600 * time.Millisecond)
				px.Heal()
				time.Sleep(1500 * time.Millisecond) // past the deadline of every renewal sent before
				if lost.Load() || m.Term() != term {
					t.Fatalf("mastership lost over a 0.6s blackhole (term %d, was %d)", m.Term(), term)
				}
				watch.Check(t)
			})
		}
	})
}

// When Redis refuses the user (an ACL without a command the election runs,
// a wrong password), Start returns at once an error wrapping ErrPermission
// that gives the cause Redis gave, and Redis is left holding nothing.
// Before, Start returned nil for a user without PUBLISH or SUBSCRIBE (the
// acquire script's SET ran before its PUBLISH was refused, leaving the lock
// and a term behind), and waited for its ctx for the others.
func TestStartNamesWhyTheElectionCannotFinish(t *testing.T) {
	tests := []struct {
		name           string
		user, password string
		want           []string
	}{
		{"ACL user without SET", "noset", "pw", []string{"SET refused:master", "NOPERM"}},
		{"ACL user without PUBLISH", "nopublish", "pw", []string{"PUBLISH refused:events", "NOPERM"}},
		{"ACL user without SUBSCRIBE", "nosubscribe", "pw", []string{"SUBSCRIBE refused:events", "NOPERM"}},
		{"wrong password", "herd", "wrong", []string{"WRONGPASS"}},
	}
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		admin := inst.Client(t)
		ctx := context.Background()
		for _, args := range [][]any{
			{"ACL", "SETUSER", "noset", "on", ">pw", "~*", "&*", "+@all", "-set"},
			{"ACL", "SETUSER", "nopublish", "on", ">pw", "~*", "&*", "+@all", "-publish"},
			{"ACL", "SETUSER", "nosubscribe", "on", ">pw", "~*", "&*", "+@all", "-subscribe"},
			{"ACL", "SETUSER", "herd", "on", ">right", "~*", "&*", "+@all"},
		} {
			if err := admin.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				opts := inst.Options()
				opts.Username, opts.Password = tt.user, tt.password
				c := redis.NewClient(opts)
				t.Cleanup(func() { _ = c.Close() })
				m := newElection(t, c, fastConfig("refused", "n1"))
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				began := time.Now()
				err := m.Start(sctx)
				if !errors.Is(err, masterelection.ErrPermission) {
					t.Fatalf("Start = %v, want ErrPermission", err)
				}
				if d := time.Since(began); d > 2*time.Second {
					t.Errorf("Start took %s, want at once", d)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Start's error %q does not say %q", err, w)
					}
				}
				if keys, err := admin.Keys(ctx, "*").Result(); err != nil || len(keys) != 0 {
					t.Errorf("Redis holds %v (%v) after the refused Start, want nothing", keys, err)
				}
				t.Logf("Start: %v", err)
			})
		}
	})
}

// TestReleaseNoticeDoesNotSkipTheDataLossWait plays the sequence the fault
// schedules found: a slave that has seen a term gets a released notice
// (queued while it was paused, in the schedule) after Redis restarted
// without its data, before any check of its own. The notice must not take
// it to the lock before LockTTL has passed since the loss, while a master of
// before the loss may still act.
func TestReleaseNoticeDoesNotSkipTheDataLossWait(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		cfgA, cfgD := fastConfig("loss-notice", "a"), fastConfig("loss-notice", "d")
		cfgA.LockTTL, cfgD.LockTTL = 3*time.Second, 3*time.Second
		cfgD.CheckInterval = 2500 * time.Millisecond                              // no check of d's own comes before the notice
		cfgD.ProcessTTL, cfgD.SlaveTimeout = 7*time.Second, 3500*time.Millisecond // above 2 × and 1 × 1.25 × the heartbeat (check) interval
		a := newElection(t, inst.Client(t), cfgA)
		d := newElection(t, inst.Client(t), cfgD)
		start(t, a)
		start(t, d)
		oldTerm := a.Term()
		if oldTerm == 0 || d.ObservedTerm() != oldTerm {
			t.Fatalf("a master with term %d, d observed %d", oldTerm, d.ObservedTerm())
		}
		var losses atomic.Int32
		d.OnError(func(err error) {
			if errors.Is(err, masterelection.ErrDataLoss) {
				losses.Add(1)
			}
		})
		nodes := []*masterelection.MasterElection{a, d}
		watch := overlap.Start(nodes)
		lost := time.Now()
		inst.Restart(t)

		// Once both are subscribed again, the notice a graceful stop of
		// the old master would have sent.
		admin := inst.Client(t)
		ctx := context.Background()
		waitUntil(t, "both subscribed again", 5*time.Second, func() bool {
			n, err := admin.PubSubNumSub(ctx, d.Keys().Events).Result()
			return err == nil && n[d.Keys().Events] >= 2
		})
		notice := fmt.Sprintf(`{"event":"released","nodeId":"a","term":%d}`, d.ObservedTerm())
		if err := admin.Publish(ctx, d.Keys().Events, notice).Err(); err != nil {
			t.Fatal(err)
		}
		var next *masterelection.MasterElection
		waitUntil(t, "a master elected after the loss", 3*cfgD.LockTTL, func() bool {
			for _, n := range nodes {
				if n.Term() > oldTerm {
					next = n
					return true
				}
			}
			return false
		})
		if took := time.Since(lost); took < cfgD.LockTTL {
			t.Fatalf("%s became master %v after the data loss, before LockTTL (%v): the notice skipped the wait",
				next.NodeID(), took.Round(time.Millisecond), cfgD.LockTTL)
		}
		watch.Check(t)
		if losses.Load() == 0 {
			t.Errorf("d reported no ErrDataLoss")
		}
	})
}

// waitUntil polls cond every few milliseconds until it holds, or fails the
// test after within.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestForgedLockNoticesChangeNothing: a PUBLISH on the events channel from a
// client that is not herd (a forged acquired notice with a huge term, or
// with the real term + 1; a forged released notice) must not depose the
// master, raise any process's ObservedTerm, or elect a second master. Each
// forged acquired notice is reported, as ErrUnconfirmedNotice, once Redis
// has been asked.
func TestForgedLockNoticesChangeNothing(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		var nodes []*masterelection.MasterElection
		unconfirmed := map[string]*atomic.Int32{}
		completed := map[string]*atomic.Int32{}
		for _, id := range []string{"a", "b", "c"} {
			cfg := fastConfig("forged", id)
			cfg.LockTTL = 2 * time.Second
			n := newElection(t, inst.Client(t), cfg)
			u, c := new(atomic.Int32), new(atomic.Int32)
			unconfirmed[id], completed[id] = u, c
			n.OnError(func(err error) {
				if errors.Is(err, masterelection.ErrUnconfirmedNotice) {
					u.Add(1)
				}
			})
			n.OnElectionCompleted(func(bool) { c.Add(1) })
			start(t, n)
			nodes = append(nodes, n)
		}
		master := waitMaster(t, nodes, 2*time.Second)
		term := master.Term()
		watch := overlap.Start(nodes)
		admin := inst.Client(t)
		ctx := context.Background()
		events := master.Keys().Events

		for _, forged := range []int64{9_000_000_000_000_000, term + 1} {
			before := map[string]int32{}
			for id, u := range unconfirmed {
				before[id] = u.Load()
			}
			notice := fmt.Sprintf(`{"event":"acquired","nodeId":"evil","term":%d}`, forged)
			if err := admin.Publish(ctx, events, notice).Err(); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "every process reports the forged notice", 5*time.Second, func() bool {
				for id, u := range unconfirmed {
					if u.Load() <= before[id] {
						return false
					}
				}
				return true
			})
			for _, n := range nodes {
				if got := n.ObservedTerm(); got != term {
					t.Errorf("forged term %d: %s observes term %d, want %d", forged, n.NodeID(), got, term)
				}
			}
			if master.Term() != term {
				t.Fatalf("forged term %d: the master's term is %d, want %d (still master: %v)", forged, master.Term(), term, master.IsMaster())
			}
		}

		// A forged release wakes the slaves; their acquire finds the lock held.
		slave := nodes[0]
		if slave == master {
			slave = nodes[1]
		}
		before := completed[slave.NodeID()].Load()
		notice := fmt.Sprintf(`{"event":"released","nodeId":%q,"term":%d}`, master.NodeID(), term)
		if err := admin.Publish(ctx, events, notice).Err(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the slave's attempt completes", 5*time.Second, func() bool { return completed[slave.NodeID()].Load() > before })
		if master.Term() != term {
			t.Fatalf("after a forged release the master's term is %d, want %d", master.Term(), term)
		}
		watch.Check(t)
	})
}

// TestApplicationACLCannotForge: the least-privileged ACL docs/safety.md
// gives application clients that share herd's Redis ("Who can break what")
// keeps them off herd's keys and channels, while herd, under its own user,
// goes on electing.
func TestApplicationACLCannotForge(t *testing.T) {
	redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
		inst := redistest.Start(t, s)
		ctx := context.Background()
		admin := inst.Client(t)
		// What docs/safety.md recommends: the application's own key and
		// channel patterns, none of herd's.
		if err := admin.Do(ctx, "ACL", "SETUSER", "app", "reset", "on", ">pw", "+@all", "-@admin", "-@dangerous",
			"~app:*", "&app:*").Err(); err != nil {
			t.Fatal(err)
		}
		a := newElection(t, admin, fastConfig("acl-forge", "a"))
		start(t, a)
		opts := inst.Options()
		opts.Username, opts.Password, opts.MaxRetries = "app", "pw", -1
		app := redis.NewClient(opts)
		defer app.Close()
		keys := a.Keys()
		for _, try := range []struct {
			what string
			err  error
		}{
			{"PUBLISH on the events channel", app.Publish(ctx, keys.Events, `{"event":"acquired","nodeId":"evil","term":1}`).Err()},
			{"PUBLISH on the registry-events channel", app.Publish(ctx, keys.RegistryEvents, `{"event":"unregistered","nodeId":"a"}`).Err()},
			{"PUBLISH on a slave channel", app.Publish(ctx, "worker:slave:a", `{}`).Err()},
			{"DEL of the lock", app.Del(ctx, keys.Master).Err()},
			{"SET of the term", app.Set(ctx, keys.Term, "1", 0).Err()},
			{"GET of the lock", app.Get(ctx, keys.Master).Err()},
		} {
			if try.err == nil || !strings.Contains(try.err.Error(), "NOPERM") {
				t.Errorf("%s as the application user: %v, want NOPERM", try.what, try.err)
			}
		}
		if err := app.Set(ctx, "app:own", "1", 0).Err(); err != nil {
			t.Errorf("the application user cannot write its own keys: %v", err)
		}
		if !a.IsMaster() {
			t.Errorf("herd lost its mastership")
		}
	})
}
