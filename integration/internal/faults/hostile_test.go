//go:build linux

package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/overlap"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
)

// hostileConfig is fastTiming as a masterelection.Config.
func hostileConfig(id string) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = "hostile"
	cfg.NodeID = id
	cfg.LockTTL = fastTiming.ttl
	cfg.HeartbeatInterval = fastTiming.heartbeat
	cfg.CheckInterval = fastTiming.check
	cfg.ElectionJitter = fastTiming.jitter
	cfg.ProcessTTL = fastTiming.processTTL
	cfg.SlaveTimeout = fastTiming.slaveTimeout
	return cfg
}

// member is one election of a hostile test with the errors it reported.
type member struct {
	*masterelection.MasterElection
	mu   sync.Mutex
	errs []error
}

func (m *member) errors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]error(nil), m.errs...)
}

// anyError returns the first reported error for which match is true.
func (m *member) anyError(match func(error) bool) error {
	for _, err := range m.errors() {
		if match(err) {
			return err
		}
	}
	return nil
}

func newMember(t *testing.T, c redis.UniversalClient, cfg masterelection.Config) *member {
	t.Helper()
	e, err := masterelection.New(c, cfg)
	if err != nil {
		t.Fatalf("new election %s: %v", cfg.NodeID, err)
	}
	m := &member{MasterElection: e}
	e.OnError(func(err error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.errs = append(m.errs, err)
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return m
}

// startWithin starts m and returns Start's error after at most d.
func startWithin(m *member, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return m.Start(ctx)
}

// clientAs returns a client of inst authenticating as user with password.
func clientAs(t *testing.T, inst *redistest.Instance, user, password string) *redis.Client {
	t.Helper()
	o := inst.Options()
	o.Username, o.Password = user, password
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor polls cond every 5ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

func mustDo(t *testing.T, c redis.UniversalClient, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("%v: %v", args, err)
	}
}

func mentions(words ...string) func(error) bool {
	return func(err error) bool {
		s := strings.ToLower(err.Error())
		for _, w := range words {
			if !strings.Contains(s, strings.ToLower(w)) {
				return false
			}
		}
		return true
	}
}

// TestHostileConditions runs herd against what users and other software get
// wrong, and checks that each is reported clearly and never yields two
// masters.
func TestHostileConditions(t *testing.T) {
	tests := []struct {
		name string
		// matrix runs the case on every server of the matrix: the servers'
		// behaviour differs there. The others run on the default server.
		matrix bool
		run    func(t *testing.T, inst *redistest.Instance)
	}{
		{"invalid configs", false, hostileInvalidConfigs},
		{"ACL user without EVAL and EVALSHA", false, hostileNoScripts},
		{"ACL user without PUBLISH", true, hostileNoPublish},
		{"wrong password", false, hostileWrongPassword},
		{"maxmemory reached with noeviction", true, hostileMaxmemory},
		{"garbage in every herd key", false, hostileGarbage},
		{"second process with the same NodeID", false, hostileDuplicateNodeID},
		{"same NodeID after a lost acquire reply", false, hostileDuplicateAfterLostReply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.matrix {
				tt.run(t, redistest.Start(t, redistest.Default(t)))
				return
			}
			redistest.ForEachServer(t, func(t *testing.T, s redistest.Server) {
				tt.run(t, redistest.Start(t, s))
			})
		})
	}
}

func hostileInvalidConfigs(t *testing.T, inst *redistest.Instance) {
	c := inst.Client(t)
	tests := []struct {
		name   string
		client redis.UniversalClient
		edit   func(*masterelection.Config)
		want   []string // every one must appear in the error
	}{
		{"nil client", nil, func(*masterelection.Config) {}, []string{"nil redis client"}},
		{"negative LockTTL", c, func(c *masterelection.Config) { c.LockTTL = -time.Second }, []string{"LockTTL must be positive"}},
		{"heartbeat too slow for the TTL", c, func(c *masterelection.Config) { c.HeartbeatInterval = 400 * time.Millisecond },
			[]string{"HeartbeatInterval (400ms) times 3 must not exceed LockTTL (1s)"}},
		{"check interval not below the TTL", c, func(c *masterelection.Config) { c.CheckInterval = time.Second },
			[]string{"CheckInterval (1s) must be less than LockTTL (1s)"}},
		{"negative margin", c, func(c *masterelection.Config) { c.StepDownMargin = -time.Millisecond }, []string{"StepDownMargin", "negative"}},
		{"lock name with a space", c, func(c *masterelection.Config) { c.LockName = "my lock" }, []string{"LockName"}},
		{"node id with a glob character", c, func(c *masterelection.Config) { c.NodeID = "node*" }, []string{"NodeID"}},
		{"process TTL below two heartbeats", c, func(c *masterelection.Config) { c.ProcessTTL = 300 * time.Millisecond }, []string{"ProcessTTL (300ms) must exceed twice the longest a live process goes without a registry write"}},
		{"several problems at once", c, func(c *masterelection.Config) { c.LockTTL = -1; c.LockName = " " }, []string{"LockTTL must be positive", "LockName"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := hostileConfig("n1")
			tt.edit(&cfg)
			m, err := masterelection.New(tt.client, cfg)
			if err == nil {
				_ = m.Stop(context.Background())
				t.Fatal("New accepted the config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func hostileNoScripts(t *testing.T, inst *redistest.Instance) {
	admin := inst.Client(t)
	mustDo(t, admin, "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha", "-eval_ro", "-evalsha_ro")
	m := newMember(t, clientAs(t, inst, "noscript", "pw"), hostileConfig("n1"))
	err := startWithin(m, 2*time.Second)
	if err == nil {
		t.Fatal("Start succeeded without the right to run scripts")
	}
	if m.IsMaster() {
		t.Error("master without the right to run scripts")
	}
	reported := m.anyError(mentions("permission", "evalsha"))
	if reported == nil {
		reported = m.anyError(mentions("permission", "eval"))
	}
	if reported == nil && !mentions("permission", "eval")(err) {
		t.Fatalf("no error names the missing EVAL/EVALSHA right; Start: %v; events: %v", err, m.errors())
	}
	t.Logf("Start: %v\nerror event: %v", err, reported)
}

func hostileNoPublish(t *testing.T, inst *redistest.Instance) {
	admin := inst.Client(t)
	mustDo(t, admin, "ACL", "SETUSER", "nopublish", "on", ">pw", "~*", "&*", "+@all", "-publish", "-spublish")
	a := newMember(t, clientAs(t, inst, "nopublish", "pw"), hostileConfig("n1"))
	b := newMember(t, clientAs(t, inst, "nopublish", "pw"), hostileConfig("n2"))
	w := overlap.Start([]*member{a, b})
	errA, errB := startWithin(a, 2*time.Second), startWithin(b, 2*time.Second)
	time.Sleep(2 * fastTiming.ttl)
	w.Check(t)
	t.Logf("Start: %v, %v; master: %v, %v", errA, errB, a.IsMaster(), b.IsMaster())
	// Start refuses at once, naming the command the ACL refuses, and the
	// election wrote nothing: no lock or term left for a process that
	// cannot announce it.
	for i, err := range []error{errA, errB} {
		if err == nil || !errors.Is(err, masterelection.ErrPermission) || !mentions("publish")(err) {
			t.Errorf("member %d: Start: %v; want ErrPermission naming PUBLISH", i, err)
		}
	}
	if a.IsMaster() || b.IsMaster() {
		t.Error("a member without PUBLISH is master")
	}
	if n := admin.Exists(context.Background(), "hostile:master", "hostile:term").Val(); n != 0 {
		t.Errorf("%d lock keys left in Redis by members refused PUBLISH", n)
	}
}

// firstLine returns the first error of errs, or "none".
func firstLine(errs []error) string {
	if len(errs) == 0 {
		return "none"
	}
	return errs[0].Error()
}

func hostileWrongPassword(t *testing.T, inst *redistest.Instance) {
	admin := inst.Client(t)
	mustDo(t, admin, "ACL", "SETUSER", "herd", "on", ">right", "~*", "&*", "+@all")
	m := newMember(t, clientAs(t, inst, "herd", "wrong"), hostileConfig("n1"))
	err := startWithin(m, 2*time.Second)
	if err == nil {
		t.Fatal("Start succeeded with a wrong password")
	}
	reported := m.anyError(mentions("WRONGPASS"))
	if reported == nil && !mentions("WRONGPASS")(err) {
		t.Fatalf("no error says the password is wrong; Start: %v; events: %v", err, m.errors())
	}
	t.Logf("Start: %v\nerror event: %v", err, reported)
}

func hostileMaxmemory(t *testing.T, inst *redistest.Instance) {
	admin := inst.Client(t)
	a := newMember(t, inst.Client(t), hostileConfig("n1"))
	b := newMember(t, inst.Client(t), hostileConfig("n2"))
	for _, m := range []*member{a, b} {
		if err := startWithin(m, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	w := overlap.Start([]*member{a, b})
	// Fill Redis up to a maxmemory just above what it uses now.
	ctx := context.Background()
	used, err := redistest.InfoField(inst.Info(t, "memory"), "used_memory")
	if !err {
		t.Fatal("no used_memory in INFO memory")
	}
	mustDo(t, admin, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	mustDo(t, admin, "CONFIG", "SET", "maxmemory", used)
	filler := strings.Repeat("x", 4096)
	var oom error
	for i := 0; i < 100000 && oom == nil; i++ {
		oom = admin.Set(ctx, fmt.Sprintf("filler:%d", i), filler, 0).Err()
	}
	if oom == nil || !strings.Contains(oom.Error(), "OOM") {
		t.Fatalf("could not fill Redis: %v", oom)
	}
	full := time.Now()
	time.Sleep(3 * fastTiming.ttl)
	w.Check(t)
	var reported error
	for _, m := range []*member{a, b} {
		if err := m.anyError(mentions("OOM")); err != nil {
			reported = err
		}
	}
	masters := 0
	for _, m := range []*member{a, b} {
		if m.IsMaster() {
			masters++
		}
	}
	t.Logf("3 x LockTTL after Redis filled up: %d master(s); error event: %v", masters, reported)
	if masters == 0 && reported == nil {
		t.Errorf("no master, and no error event says Redis is out of memory; events: %v %v", a.errors(), b.errors())
	}
	// Room again: the election recovers.
	mustDo(t, admin, "CONFIG", "SET", "maxmemory", "0")
	if !waitFor(fastTiming.params().FailoverBound()*2, func() bool { return a.IsMaster() || b.IsMaster() }) {
		t.Errorf("no master %v after memory was freed (full since %v)", fastTiming.params().FailoverBound()*2, time.Since(full))
	}
}

func hostileGarbage(t *testing.T, inst *redistest.Instance) {
	admin := inst.Client(t)
	a := newMember(t, inst.Client(t), hostileConfig("n1"))
	b := newMember(t, inst.Client(t), hostileConfig("n2"))
	for _, m := range []*member{a, b} {
		if err := startWithin(m, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	w := overlap.Start([]*member{a, b})
	k := keyspace.NewKeys("hostile", false)
	ctx := context.Background()
	// Every key herd uses gets a value of a type or form herd never writes.
	garbage := func() {
		pipe := admin.TxPipeline()
		for _, key := range []string{k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Processes, k.ProcessesExpiry} {
			pipe.Del(ctx, key)
		}
		pipe.RPush(ctx, k.Master, "not", "a", "node", "id")
		pipe.HSet(ctx, k.Term, "not", "a term")
		pipe.SAdd(ctx, k.Heartbeat, "not a time")
		pipe.Set(ctx, k.MasterProcess, "{not json", 0)
		pipe.Set(ctx, k.Processes, "not a hash", 0)
		pipe.RPush(ctx, k.ProcessesExpiry, "not a sorted set")
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("write garbage: %v", err)
		}
		for _, msg := range []string{"not json", `{"event":"acquired","nodeId":"ghost","term":"x"}`, `{}`, `{"event":"registered","nodeId":"ghost","process":42}`} {
			if err := admin.Publish(ctx, k.Events, msg).Err(); err != nil {
				t.Fatalf("publish garbage: %v", err)
			}
		}
	}
	garbage()
	time.Sleep(2 * fastTiming.ttl)
	var reported error
	for _, m := range []*member{a, b} {
		if err := m.anyError(func(err error) bool { return errors.Is(err, masterelection.ErrGarbage) }); err != nil {
			reported = err
		}
	}
	if reported == nil {
		t.Errorf("no error event wraps ErrGarbage; events: %v %v", a.errors(), b.errors())
	}
	seen := map[string]bool{}
	for _, m := range []*member{a, b} {
		for _, err := range m.errors() {
			if !seen[err.Error()] {
				seen[err.Error()] = true
				t.Logf("reported: %v", err)
			}
		}
	}
	t.Logf("with garbage: masters %v %v", a.IsMaster(), b.IsMaster())
	// Cleaned up by an operator, the election recovers.
	if err := admin.Del(ctx, k.Master, k.Heartbeat, k.MasterProcess, k.Term, k.Processes, k.ProcessesExpiry).Err(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(3*fastTiming.params().FailoverBound(), func() bool { return a.IsMaster() || b.IsMaster() }) {
		t.Errorf("no master after the garbage was removed; events: %v %v", a.errors(), b.errors())
	}
	w.Check(t)
}

func hostileDuplicateNodeID(t *testing.T, inst *redistest.Instance) {
	a := newMember(t, inst.Client(t), hostileConfig("twin"))
	if err := startWithin(a, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !a.IsMaster() {
		t.Fatal("first process is not master")
	}
	b := newMember(t, inst.Client(t), hostileConfig("twin"))
	w := overlap.Start([]*member{a, b})
	// Refused: Start names the id, and the process steps aside.
	if err := startWithin(b, 5*time.Second); !errors.Is(err, masterelection.ErrDuplicateNodeID) || !strings.Contains(err.Error(), `"twin"`) {
		t.Fatalf("second process's Start = %v, want ErrDuplicateNodeID naming the id", err)
	}
	if !errors.Is(b.SteppedAside(), masterelection.ErrDuplicateNodeID) ||
		b.anyError(func(err error) bool { return errors.Is(err, masterelection.ErrDuplicateNodeID) }) == nil {
		t.Errorf("second process: SteppedAside %v; events: %v", b.SteppedAside(), b.errors())
	}
	time.Sleep(fastTiming.ttl)
	if !a.IsMaster() || !a.HoldsNodeID() {
		t.Errorf("first process: master %v, holds its id %v", a.IsMaster(), a.HoldsNodeID())
	}
	w.Check(t)
}

// hostileDuplicateAfterLostReply starts a process, b, whose first acquire
// runs on Redis but whose reply is lost (a client hook turns it into a
// timeout, as a dropped connection would): the lock is then held under
// its NodeID by a run it never learned of. b leaves that lock to expire
// and then takes it; it is not a twin of itself. A second process with the
// same NodeID (another incarnation), a, started meanwhile finds b's entry
// live and is refused; the two are never master at once. (A twin that
// contends after a lost reply, which only one incarnation shared by two
// processes allows: masterelection's TestLockAfterALostAcquireReply.)
func hostileDuplicateAfterLostReply(t *testing.T, inst *redistest.Instance) {
	cb := inst.Client(t)
	lose := &loseReply{shas: []string{rdb.AcquireSHA, rdb.AcquireRegisterSHA}}
	cb.AddHook(lose)
	b := newMember(t, cb, hostileConfig("twin"))
	if err := startWithin(b, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !lose.done.Load() {
		t.Fatal("no acquire reply was lost: the case tests nothing")
	}
	a := newMember(t, inst.Client(t), hostileConfig("twin"))
	w := overlap.Start([]*member{a, b})
	if err := startWithin(a, 5*time.Second); !errors.Is(err, masterelection.ErrDuplicateNodeID) {
		t.Errorf("second process's Start = %v, want ErrDuplicateNodeID", err)
	}
	if !waitFor(3*fastTiming.params().FailoverBound(), b.IsMaster) {
		t.Errorf("b not master after the lock its lost reply took expired; events: %v", b.errors())
	}
	if err := b.anyError(func(err error) bool { return errors.Is(err, masterelection.ErrDuplicateNodeID) }); err != nil || b.SteppedAside() != nil {
		t.Errorf("b took its own lost lock for a twin's: %v, stepped aside: %v", err, b.SteppedAside())
	}
	w.Check(t)
}

// loseReply lets the first acquire script that runs on Redis through, then
// reports a timeout instead of its reply.
type loseReply struct {
	shas []string // the acquire's digests: Start's first (with the registration) and the plain one
	done atomic.Bool
}

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err != nil || h.done.Load() || len(args) < 2 {
			return err
		}
		if s, _ := args[1].(string); (cmd.Name() == "evalsha" && slices.Contains(h.shas, s)) || (cmd.Name() == "eval" && strings.Contains(s, "-- acquire:")) {
			if h.done.CompareAndSwap(false, true) {
				cmd.SetErr(context.DeadlineExceeded)
				return context.DeadlineExceeded
			}
		}
		return err
	}
}
