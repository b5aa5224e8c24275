package masterelection

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
)

func TestNewRejectsNilClient(t *testing.T) {
	var typed *redis.Client // a typed nil: panicked in New before
	var cluster *redis.ClusterClient
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
	}{
		{name: "nil", client: nil},
		{name: "typed nil *redis.Client", client: typed},
		{name: "typed nil *redis.ClusterClient", client: cluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.client, DefaultConfig()); !errors.Is(err, ErrNilClient) {
				t.Fatalf("New(%T) error = %v, want ErrNilClient", tc.client, err)
			}
			cfg := DefaultConfig()
			cfg.Standalone = true // standalone needs no client: a typed nil is dropped
			m, err := New(tc.client, cfg)
			if err != nil {
				t.Fatalf("New(%T) standalone: %v", tc.client, err)
			}
			if m.client != nil {
				t.Fatalf("standalone election kept the typed nil client %T", m.client)
			}
		})
	}
}

func TestNewFillsNodeIDAndRejectsBadConfig(t *testing.T) {
	w := newWorld(t)
	m, err := New(w.client(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if m.NodeID() == "" || m.Identifier() == "" {
		t.Fatalf("NodeID %q, Identifier %q: want defaults filled in", m.NodeID(), m.Identifier())
	}
	cfg := DefaultConfig()
	cfg.LockTTL = -time.Second
	if _, err := New(w.client(), cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "LockTTL") {
		t.Fatalf("New with a negative LockTTL: error = %v, want ErrInvalidConfig naming LockTTL", err)
	}
}

func TestFirstNodeBecomesMaster(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	a.SetMetadata(map[string]any{"zone": "eu"})
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")

	if !a.IsMaster() || a.Term() <= 0 || a.Term() != a.rec.lastTerm() {
		t.Fatalf("IsMaster %v, Term %d, event term %d", a.IsMaster(), a.Term(), a.rec.lastTerm())
	}
	// The term is at least Redis's clock in ms: terms survive a data loss.
	if a.Term() < epoch.UnixMilli() {
		t.Fatalf("term %d below server time %d", a.Term(), epoch.UnixMilli())
	}
	isMaster, err := a.WaitForElectionComplete(context.Background())
	if err != nil || !isMaster {
		t.Fatalf("WaitForElectionComplete = %v, %v", isMaster, err)
	}
	id, term, err := a.Master(context.Background())
	if err != nil || id != "a" || term != a.Term() {
		t.Fatalf("Master() = %q, %d, %v", id, term, err)
	}
	k := a.Keys()
	if v, _ := w.mr.Get(k.Master); v != "a" {
		t.Fatalf("lock value %q, want the bare node id", v)
	}
	if ttl := w.mr.TTL(k.Master); ttl != 3*time.Second {
		t.Fatalf("lock TTL %v, want LockTTL", ttl)
	}
	if !w.mr.Exists(k.Heartbeat) {
		t.Fatalf("no heartbeat key")
	}
	raw, _ := w.mr.Get(k.MasterProcess)
	var info struct {
		ProcessID string         `json:"processId"`
		Role      string         `json:"role"`
		Term      int64          `json:"term"`
		Metadata  map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatalf("master_process %q: %v", raw, err)
	}
	if info.ProcessID != "a" || info.Role != "master" || info.Term != a.Term() || info.Metadata["zone"] != "eu" {
		t.Fatalf("master_process = %+v", info)
	}
}

func TestSecondNodeBecomesSlave(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")
	if b.IsMaster() || b.Term() != 0 {
		t.Fatalf("b: IsMaster %v Term %d", b.IsMaster(), b.Term())
	}
	if b.ObservedTerm() != a.Term() {
		t.Fatalf("b observed term %d, want a's %d", b.ObservedTerm(), a.Term())
	}
	// Time passes: a renews, b keeps following, nothing changes.
	w.advance(20*time.Second, 250*time.Millisecond, a, b)
	if !a.IsMaster() || b.IsMaster() {
		t.Fatalf("after 20s: a master %v, b master %v", a.IsMaster(), b.IsMaster())
	}
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	b.rec.waitEvents(t, "started", "completed:slave")
	if errs := append(a.rec.errors(), b.rec.errors()...); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
}

func TestGracefulHandoverIsPushed(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")
	first := a.Term()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
	// No fake time passes: only the release notice can make b contend.
	b.rec.waitEvents(t, "started", "completed:slave", "started", "acquired", "completed:master")
	if !b.IsMaster() || b.Term() <= first {
		t.Fatalf("b: master %v term %d, want master with term > %d", b.IsMaster(), b.Term(), first)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestCrashedMasterIsReplacedAtLockExpiry(t *testing.T) {
	w := newWorld(t)
	cfgB := testConfig("b")
	cfgB.CheckInterval = 2 * time.Second                              // failover must not wait for it
	cfgB.ProcessTTL, cfgB.SlaveTimeout = 6*time.Second, 3*time.Second // above 2 × and 1 × a slave's longest silence (1.25 × the 2s check), as the registry needs
	a, b := w.node(testConfig("a")), w.node(cfgB)
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")

	// a's clock stops: it never renews again (a crash without release).
	took := w.until(b.IsMaster, 10*time.Second, 10*time.Millisecond, "b becomes master", b)
	bound := a.cfg.LockTTL + cfgB.ElectionJitter + 20*time.Millisecond
	if took > bound {
		t.Fatalf("failover after %v of fake time, want at most LockTTL+jitter (%v)", took, bound)
	}
	if b.Term() <= a.rec.lastTerm() {
		t.Fatalf("new term %d not above old %d", b.Term(), a.rec.lastTerm())
	}
}

func TestSelfFencingWithoutTheLoop(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	w.mr.SetError("LOADING simulated outage") // every renewal now fails

	margin := a.cfg.StepDownMargin
	// Just before the deadline a still is master; just after, IsMaster is
	// false the instant the clock moves, before the loop has had a chance.
	a.clk.Advance(a.cfg.HeartbeatInterval) // a renewal is attempted and fails
	waitFor(t, "a failed renewal reported", func() bool { return len(a.rec.errors()) > 0 })
	a.clk.Advance(a.cfg.LockTTL - margin - a.cfg.HeartbeatInterval - time.Millisecond)
	if !a.IsMaster() {
		t.Fatalf("not master 1ms before the self-fencing deadline")
	}
	a.clk.Advance(time.Millisecond)
	if a.IsMaster() || a.Term() != 0 {
		t.Fatalf("IsMaster %v Term %d at the deadline", a.IsMaster(), a.Term())
	}
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
	// The lock is still in Redis for `margin`: nobody else could have had it.
	if ttl := w.mr.TTL(a.Keys().Master); ttl <= 0 {
		t.Fatalf("lock TTL %v at the deadline, want > 0: the deadline must come first", ttl)
	}
}

func TestRenewRefusedStepsDown(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.start(a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master")
	// Someone else's lock now (as after an expiry and a take-over whose notice was lost).
	w.mr.Set(a.Keys().Master, "intruder")
	w.mr.SetTTL(a.Keys().Master, time.Minute)
	w.until(func() bool { return !a.IsMaster() }, 2*time.Second, 100*time.Millisecond, "a steps down", a)
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
}

func TestTakeoverNoticeStepsDownAtOnce(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")
	// a is paused (its clock frozen); its lock vanishes and b takes over.
	w.mr.Del(a.Keys().Master)
	w.until(b.IsMaster, 2*time.Second, 10*time.Millisecond, "b takes over", b)
	// a's deadline has not passed on its own clock, but the acquired notice
	// tells it the lock is gone.
	a.rec.waitEvents(t, "started", "acquired", "completed:master", "lost")
	if a.IsMaster() {
		t.Fatalf("a still master after the take-over notice")
	}
}

func TestRedisDownAtStart(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.mr.SetError("LOADING simulated outage")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() {
		// Real time passes in Start; move fake time so the retries run.
		for ctx.Err() == nil {
			a.clk.Advance(50 * time.Millisecond)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	err := a.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start with Redis down = %v, want deadline exceeded", err)
	}
	if n := len(a.rec.errors()); n < 2 {
		t.Fatalf("%d error events, want retries reported", n)
	}
	if err := a.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after a failed Start = %v, want ErrStopped", err)
	}
}

func TestRedisRecoversDuringStart(t *testing.T) {
	w := newWorld(t)
	a := w.node(testConfig("a"))
	w.mr.SetError("LOADING simulated outage")
	done := make(chan error, 1)
	go func() { done <- a.Start(context.Background()) }()
	waitFor(t, "an error event", func() bool { return len(a.rec.errors()) > 0 })
	w.mr.SetError("")
	for {
		select {
		case err := <-done:
			if err != nil || !a.IsMaster() {
				t.Fatalf("Start = %v, master %v", err, a.IsMaster())
			}
			return
		case <-time.After(5 * time.Millisecond):
			a.clk.Advance(50 * time.Millisecond)
		}
	}
}

func TestNonCandidateNeverContends(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig("follower")
	cfg.NonCandidate = true
	f := w.node(cfg)
	w.start(f)
	f.rec.waitEvents(t, "started", "completed:slave")
	w.advance(10*time.Second, 250*time.Millisecond, f)
	if f.IsMaster() || w.mr.Exists(f.Keys().Master) {
		t.Fatalf("a non-candidate took the lock")
	}
}

func TestDuplicateNodeIDIsReportedNotElected(t *testing.T) {
	w := newWorld(t)
	a, twin := w.node(testConfig("a")), w.node(testConfig("a"))
	// One incarnation: a twin the registry cannot tell apart, which the
	// lock still does (TestTwinIsRefused has twins of their own).
	twin.incarnation = a.incarnation
	w.start(a)
	w.start(twin)
	twin.rec.waitEvents(t, "started", "completed:slave")
	w.advance(5*time.Second, 250*time.Millisecond, a, twin)
	if twin.IsMaster() || !a.IsMaster() {
		t.Fatalf("a master %v, twin master %v", a.IsMaster(), twin.IsMaster())
	}
	waitFor(t, "duplicate reported", func() bool {
		for _, err := range twin.rec.errors() {
			if errors.Is(err, ErrDuplicateNodeID) {
				return true
			}
		}
		return false
	})
}

func TestGarbageInKeysIsReported(t *testing.T) {
	w := newWorld(t)
	k := keyspace.NewKeys("test", false)
	w.mr.HSet(k.Master, "not", "a string")
	w.mr.Set(k.Term, "forty-two")
	// No process could ever take a lock key that holds a hash: Start fails
	// and names it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.node(testConfig("a")).Start(ctx); !errors.Is(err, ErrGarbage) || !strings.Contains(err.Error(), "holds a hash") {
		t.Fatalf("Start over a lock key holding a hash = %v, want ErrGarbage naming it", err)
	}
	// With the lock gone, the garbage term still stops the election: herd
	// writes nothing over someone else's data, and names the key.
	w.mr.Del(k.Master)
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShort()
	if err := w.node(testConfig("a")).Start(short); !errors.Is(err, ErrGarbage) || !strings.Contains(err.Error(), "DEL "+k.Term) {
		t.Fatalf("Start over a garbage term = %v, want ErrGarbage naming the term key", err)
	}
	if w.mr.Exists(k.Master) {
		t.Fatal("a took the lock over a term key that holds garbage")
	}
	// Once an operator deletes it, the election recovers.
	w.mr.Del(k.Term)
	a := w.node(testConfig("a"))
	w.start(a)
	w.until(a.IsMaster, 5*time.Second, 50*time.Millisecond, "a becomes master", a)
	if a.Term() < epoch.UnixMilli() {
		t.Fatalf("term %d after the garbage term was deleted", a.Term())
	}
}

func TestLockWithoutTTLIsReported(t *testing.T) {
	w := newWorld(t)
	k := keyspace.NewKeys("test", false)
	w.mr.Set(k.Master, "someone")
	a := w.node(testConfig("a"))
	w.start(a)
	waitFor(t, "missing TTL reported", func() bool {
		for _, err := range a.rec.errors() {
			if errors.Is(err, ErrGarbage) && strings.Contains(err.Error(), "no expiry") {
				return true
			}
		}
		return false
	})
}

func TestDataLossWaitsOutEarlierMasters(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(testConfig("a")), w.node(testConfig("b"))
	w.start(a)
	w.start(b)
	b.rec.waitEvents(t, "started", "completed:slave")
	oldTerm := a.Term()
	w.mr.FlushAll() // Redis restarted without its data
	// a is frozen (it believes it is master until its deadline); b must not
	// take the free lock before a's belief has certainly ended.
	took := w.until(b.IsMaster, 10*time.Second, 50*time.Millisecond, "b becomes master", b)
	if took < a.cfg.LockTTL {
		t.Fatalf("b took the lock %v after the data loss, before LockTTL (%v)", took, a.cfg.LockTTL)
	}
	if b.Term() <= oldTerm {
		t.Fatalf("term after the loss %d, before %d", b.Term(), oldTerm)
	}
	waitFor(t, "data loss reported", func() bool {
		for _, err := range b.rec.errors() {
			if errors.Is(err, ErrDataLoss) {
				return true
			}
		}
		return false
	})
}
