package registry

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/wiretap"
	"github.com/herdkit/herd/keyspace"
)

// TestRegistry runs the registry suite on miniredis, with each backend
// miniredis runs. The integration tests run the same suite on real servers.
func TestRegistry(t *testing.T) {
	for _, tg := range miniTargets {
		t.Run(tg.name, func(t *testing.T) { registrySuite(t, tg) })
	}
}

// registrySuite is the behaviour every backend must have, on every server.
func registrySuite(t *testing.T, tg target) {
	t.Run("register and read", func(t *testing.T) { testRegisterAndRead(t, tg) })
	t.Run("notices", func(t *testing.T) { testNotices(t, tg) })
	t.Run("heartbeat renews", func(t *testing.T) { testHeartbeatRenews(t, tg) })
	t.Run("heartbeat re-registers", func(t *testing.T) { testHeartbeatReregisters(t, tg) })
	t.Run("heartbeat refused", func(t *testing.T) { testHeartbeatRefused(t, tg) })
	t.Run("another incarnation", func(t *testing.T) { testAnotherIncarnation(t, tg) })
	t.Run("role change", func(t *testing.T) { testRoleChange(t, tg) })
	t.Run("invalid input", func(t *testing.T) { testInvalidInput(t, tg) })
	t.Run("corrupt entries", func(t *testing.T) { testCorruptEntries(t, tg) })
	t.Run("wrong key type", func(t *testing.T) { testWrongKeyType(t, tg) })
	t.Run("master process", func(t *testing.T) { testMasterProcess(t, tg) })
	t.Run("concurrent use", func(t *testing.T) { testConcurrent(t, tg) })
	t.Run("round trips", func(t *testing.T) { testRoundTrips(t, tg) })
}

func testRegisterAndRead(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	s1 := slave("s1")
	s1.Metadata = map[string]any{"zone": "eu-1", "weight": 1.5, "tags": []any{"a", "b"}}
	m := ProcessInfo{ProcessID: "m1", Role: RoleMaster, Identifier: "svc", Term: 7}
	e.holdLock("m1", 7)
	e.register(s1, m)

	wantS1 := s1
	wantS1.NodeID, wantS1.LastSeen, wantS1.RegisteredAt = "s1", start, start
	wantM := m
	wantM.NodeID, wantM.LastSeen, wantM.RegisteredAt = "m1", start, start

	all, err := e.reg.Processes(e.ctx)
	if err != nil || len(all) != 2 || all[1].Version <= 0 || all[0].Version <= all[1].Version {
		t.Fatalf("Processes = %+v, %v; want m1 and s1, m1 of a version above s1's (written later)", all, err)
	}
	wantM.Version, wantS1.Version = all[0].Version, all[1].Version // minted by Redis
	if !reflect.DeepEqual(all, []ProcessInfo{wantM, wantS1}) {
		t.Fatalf("Processes = %+v, %v; want %+v", all, err, []ProcessInfo{wantM, wantS1})
	}
	got, err := e.reg.Process(e.ctx, "s1")
	if err != nil || !reflect.DeepEqual(got, wantS1) {
		t.Errorf("Process(s1) = %+v, %v; want %+v", got, err, wantS1)
	}
	masters, err := e.reg.ProcessesByRole(e.ctx, RoleMaster)
	if err != nil || !reflect.DeepEqual(masters, []ProcessInfo{wantM}) {
		t.Errorf("ProcessesByRole(master) = %+v, %v", masters, err)
	}
	slaves, err := e.reg.Slaves(e.ctx)
	if err != nil || !reflect.DeepEqual(slaves, []SlaveNode{wantS1.Slave()}) {
		t.Errorf("Slaves = %+v, %v", slaves, err)
	}
	sn, err := e.reg.Slave(e.ctx, "s1")
	if err != nil || !reflect.DeepEqual(sn, wantS1.Slave()) {
		t.Errorf("Slave(s1) = %+v, %v", sn, err)
	}
	if n, err := e.reg.SlaveCount(e.ctx); n != 1 || err != nil {
		t.Errorf("SlaveCount = %d, %v; want 1", n, err)
	}
	if ch, err := e.reg.ProcessChannel(e.ctx, "s1"); ch != "worker:slave:s1" || err != nil {
		t.Errorf("ProcessChannel(s1) = %q, %v", ch, err)
	}

	for name, err := range map[string]error{
		"Process(absent)":        second(e.reg.Process(e.ctx, "absent")),
		"Slave(absent)":          second(e.reg.Slave(e.ctx, "absent")),
		"Slave(m1), the master":  second(e.reg.Slave(e.ctx, "m1")),
		"ProcessChannel(absent)": second(e.reg.ProcessChannel(e.ctx, "absent")),
	} {
		if !isNotFound(err) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func testNotices(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	ch := e.events()

	e.register(slave("a"))
	v := expectNotice(t, ch, "registered", "a")
	p, _ := v["process"].(map[string]any)
	if v["role"] != "slave" || p["processId"] != "a" || p["lastSeen"] != "2026-03-04T05:06:07.000Z" {
		t.Errorf("registered notice %v lacks the role or the process", v)
	}
	e.heartbeat("a") // the entry is live: no notice
	if err := e.reg.Unregister(e.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	expectNotice(t, ch, "unregistered", "a")
	if err := e.reg.Unregister(e.ctx, "a"); err != nil { // absent: no notice
		t.Fatal(err)
	}
	e.holdLock("b", 3)
	e.register(ProcessInfo{ProcessID: "b", Role: RoleMaster, Term: 3})
	if v := expectNotice(t, ch, "registered", "b"); v["role"] != "master" {
		t.Errorf("notice %v, want role master", v)
	}
}

func testHeartbeatRenews(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	a := slave("a")
	a.Metadata = map[string]any{"lastSeen": "x", "n": 1.0}
	e.register(a, slave("b"))
	half := e.ttl * 6 / 10
	e.pass(half)
	e.heartbeat("a")
	p, err := e.reg.Process(e.ctx, "a")
	if err != nil || !p.LastSeen.Equal(start.Add(half)) || !p.RegisteredAt.Equal(start) {
		t.Fatalf("after a heartbeat: %+v, %v; want lastSeen %s, registeredAt %s", p, err, start.Add(half), start)
	}
	// A heartbeat patches lastSeen into the entry Register encoded: the
	// stored bytes must be exactly what encoding the new info gives.
	if p.Version <= 0 {
		t.Fatalf("after a heartbeat: version %d", p.Version)
	}
	want := a
	want.NodeID, want.RegisteredAt, want.LastSeen, want.Version = "a", start, start.Add(half), p.Version
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := e.c.HGet(e.ctx, e.keys.Processes, "a").Result(); err != nil || raw != string(wantJSON) {
		t.Fatalf("entry after a heartbeat = %s, %v\nwant %s", raw, err, wantJSON)
	}
	e.pass(half) // 1.2 TTL after registering: b expired, a renewed
	if got := e.ids(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Processes after 1.2 TTL lists %v, want [a]", got)
	}
	if _, err := e.reg.Process(e.ctx, "b"); !isNotFound(err) {
		t.Errorf("Process(b) after its TTL: %v, want ErrNotFound", err)
	}
	e.pass(e.ttl)
	if got := e.ids(); len(got) != 0 {
		t.Errorf("Processes after every TTL lists %v", got)
	}
	if n, err := e.reg.SlaveCount(e.ctx); n != 0 || err != nil {
		t.Errorf("SlaveCount = %d, %v; want 0", n, err)
	}
}

func testHeartbeatReregisters(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	ch := e.events()
	e.register(slave("a"), slave("b"))
	expectNotice(t, ch, "registered", "a")
	expectNotice(t, ch, "registered", "b")

	// The data is lost, as in a restart without persistence.
	if err := e.c.Del(e.ctx, e.keys.Processes, e.keys.ProcessesExpiry).Err(); err != nil {
		t.Fatal(err)
	}
	e.pass(time.Second)
	e.heartbeat("a")
	expectNotice(t, ch, "registered", "a")
	p, err := e.reg.Process(e.ctx, "a")
	if err != nil || !p.RegisteredAt.Equal(start) || !p.LastSeen.Equal(start.Add(time.Second)) || p.Identifier != "worker-a" {
		t.Fatalf("re-registered entry %+v, %v; want the last info with a new lastSeen", p, err)
	}

	// The entry expired: the heartbeat writes it again.
	e.pass(e.ttl + time.Second)
	e.heartbeat("b")
	expectNotice(t, ch, "registered", "b")
	if got := e.ids(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("Processes lists %v, want [b]", got)
	}
}

func testHeartbeatRefused(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	if err := e.reg.Heartbeat(e.ctx, "never"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Heartbeat(never registered) = %v, want ErrNotRegistered", err)
	}
	e.register(slave("a"))
	if err := e.reg.Unregister(e.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Heartbeat(e.ctx, "a"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Heartbeat(unregistered) = %v, want ErrNotRegistered", err)
	}
	if got := e.ids(); len(got) != 0 {
		t.Errorf("Processes lists %v after Unregister and a refused heartbeat", got)
	}
	e.register(slave("a"))
	e.heartbeat("a")
}

// testAnotherIncarnation: with Quiet, a live entry refuses a write of
// another incarnation under its id, also one sent through the Registry
// that wrote it (a process restarted in the same program), while its own
// heartbeats and registrations go through. Before, the Registry named its
// last write to the script (rdb.Put.Last) for any incarnation, and the
// script took the entry for the writer's own: the second incarnation
// overwrote the live one.
func testAnotherIncarnation(t *testing.T, tg target) {
	// Real servers wait out pass in real time: Quiet is short, but a
	// second of real time between two writes, and below the entry's TTL,
	// so that the entry goes quiet, not gone.
	e := newEnv(t, tg, Config{Quiet: time.Second, ProcessTTL: 5 * time.Second})
	first := slave("a")
	first.Incarnation = "one"
	e.register(first)
	e.pass(50 * time.Millisecond)
	e.heartbeat("a")
	second := first
	second.Incarnation = "two"
	var inUse *InUseError
	if err := e.reg.Register(e.ctx, second); !errors.As(err, &inUse) || inUse.Incarnation != "one" {
		t.Fatalf("Register of another incarnation over a live entry = %v, want an InUseError naming %q", err, "one")
	}
	if p, err := e.reg.Process(e.ctx, "a"); err != nil || p.Incarnation != "one" {
		t.Fatalf("entry after the refusal: %+v, %v; want incarnation one's", p, err)
	}
	// Its entry gone quiet, the second incarnation takes the id; the
	// first, through the same Registry, is refused in turn.
	e.pass(1100 * time.Millisecond)
	if err := e.reg.Register(e.ctx, second); err != nil {
		t.Fatalf("Register of another incarnation over a quiet entry: %v", err)
	}
	if err := e.reg.Register(e.ctx, first); !errors.As(err, &inUse) || inUse.Incarnation != "two" {
		t.Fatalf("Register of the replaced incarnation = %v, want an InUseError naming %q", err, "two")
	}
}

func testRoleChange(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	e.register(slave("a"))
	e.pass(time.Second)
	e.holdLock("a", 2)
	e.register(ProcessInfo{ProcessID: "a", Role: RoleMaster, Identifier: "worker-a", Term: 2})
	p, err := e.reg.Process(e.ctx, "a")
	if err != nil || p.Role != RoleMaster || !p.RegisteredAt.Equal(start) || !p.LastSeen.Equal(start.Add(time.Second)) {
		t.Fatalf("after the role change: %+v, %v", p, err)
	}
	if n, err := e.reg.SlaveCount(e.ctx); n != 0 || err != nil {
		t.Errorf("SlaveCount = %d, %v; want 0", n, err)
	}
	// A heartbeat writes the latest info, not the first.
	e.pass(time.Second)
	e.heartbeat("a")
	if p, err := e.reg.Process(e.ctx, "a"); err != nil || p.Role != RoleMaster {
		t.Errorf("after a heartbeat: %+v, %v; want role master", p, err)
	}
}

func testInvalidInput(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	big := strings.Repeat("x", MaxMetadataBytes)
	for _, tc := range []struct {
		name string
		info ProcessInfo
		want error
	}{
		{"empty id", ProcessInfo{Role: RoleSlave}, ErrInvalidProcess},
		{"id with a space", ProcessInfo{ProcessID: "a b", Role: RoleSlave}, ErrInvalidProcess},
		{"id with a glob", ProcessInfo{ProcessID: "a*", Role: RoleSlave}, ErrInvalidProcess},
		{"id with a quote", ProcessInfo{ProcessID: `a"`, Role: RoleSlave}, ErrInvalidProcess},
		{"node id with a newline", ProcessInfo{ProcessID: "a", NodeID: "a\nb", Role: RoleSlave}, ErrInvalidProcess},
		{"no role", ProcessInfo{ProcessID: "a"}, ErrInvalidProcess},
		{"unknown role", ProcessInfo{ProcessID: "a", Role: "leader"}, ErrInvalidProcess},
		{"metadata that is not JSON", ProcessInfo{ProcessID: "a", Role: RoleSlave, Metadata: map[string]any{"f": func() {}}}, ErrInvalidProcess},
		{"metadata too large", ProcessInfo{ProcessID: "a", Role: RoleSlave, Metadata: map[string]any{"x": big}}, ErrMetadataTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.reg.Register(e.ctx, tc.info); !errors.Is(err, tc.want) {
				t.Errorf("Register = %v, want %v", err, tc.want)
			}
		})
	}
	if got := e.ids(); len(got) != 0 {
		t.Errorf("refused registrations wrote %v", got)
	}
	fits := map[string]any{"x": strings.Repeat("x", MaxMetadataBytes-8)} // {"x":"…"} is 8 bytes more
	e.register(ProcessInfo{ProcessID: "a", Role: RoleSlave, Metadata: fits})

	for name, err := range map[string]error{
		"Process(bad id)":         second(e.reg.Process(e.ctx, "a b")),
		"Process(empty id)":       second(e.reg.Process(e.ctx, "")),
		"Unregister(bad id)":      e.reg.Unregister(e.ctx, "a*"),
		"ProcessesByRole(leader)": second(e.reg.ProcessesByRole(e.ctx, "leader")),
	} {
		if !errors.Is(err, ErrInvalidProcess) {
			t.Errorf("%s = %v, want ErrInvalidProcess", name, err)
		}
	}
}

// testWrongKeyType: a registry key of another type, written by someone
// else, gives errors that wrap ErrCorruptEntry and name the key.
func testWrongKeyType(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	e.register(slave("a"))
	if err := e.c.Set(e.ctx, e.keys.Processes, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name string
		op   func() error
	}{
		{"Register", func() error { return e.reg.Register(e.ctx, slave("b")) }},
		{"Heartbeat", func() error { return e.reg.Heartbeat(e.ctx, "a") }},
		{"Processes", func() error { return second(e.reg.Processes(e.ctx)) }},
		{"Process", func() error { return second(e.reg.Process(e.ctx, "a")) }},
		{"Unregister", func() error { return e.reg.Unregister(e.ctx, "a") }},
	} {
		name, op := o.name, o.op
		err := op()
		if !errors.Is(err, ErrCorruptEntry) || !strings.Contains(err.Error(), strconv.Quote(e.keys.Processes)) {
			t.Errorf("%s on a string key = %v; want ErrCorruptEntry naming %q", name, err, e.keys.Processes)
		}
	}
}

func testCorruptEntries(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	e.register(slave("good"))
	garbage := map[string]string{
		"not-json":    "{oops",
		"array":       `[1,2]`,
		"string":      `"hello"`,
		"no-id":       `{"role":"slave"}`,
		"other-id":    `{"processId":"someone","role":"slave"}`,
		"bad-role":    `{"processId":"bad-role","role":"boss"}`,
		"bad-time":    `{"processId":"bad-time","role":"slave","lastSeen":"yesterday"}`,
		"bad-caps":    `{"processId":"bad-caps","role":"slave","capabilities":"all"}`,
		"bad-meta":    `{"processId":"bad-meta","role":"slave","metadata":[1]}`,
		"future-year": `{"processId":"future-year","role":"slave","lastSeen":1e20}`,
	}
	for f, v := range garbage {
		if err := e.c.HSet(e.ctx, e.keys.Processes, f, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A spec-following writer's entry, without herd's extensions: read.
	spec := `{"processId":"js","nodeId":"js","role":"slave","lastSeen":"2026-03-04T05:06:07.123Z",` +
		`"capabilities":{"canProcessDetections":false,"maxSubscriptions":3,"preferredWorkload":10}}`
	if err := e.c.HSet(e.ctx, e.keys.Processes, "js", spec).Err(); err != nil {
		t.Fatal(err)
	}

	for round := 0; round < 2; round++ {
		if got := e.ids(); !slices.Equal(got, []string{"good", "js"}) {
			t.Fatalf("Processes lists %v, want [good js]", got)
		}
		errs := e.errs.take()
		if round == 1 {
			if len(errs) != 0 {
				t.Fatalf("the second read reported again: %v", errs)
			}
			break
		}
		reported := map[string]bool{}
		for _, err := range errs {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Errorf("reported %v, want ErrCorruptEntry", err)
			}
			for f := range garbage {
				if strings.Contains(err.Error(), `field "`+f+`"`) {
					reported[f] = true
				}
			}
		}
		if len(errs) != len(garbage) || len(reported) != len(garbage) {
			t.Fatalf("reported %d errors naming %d fields, want one per field (%d): %v", len(errs), len(reported), len(garbage), errs)
		}
	}
	// A new value in the same field is reported again.
	if err := e.c.HSet(e.ctx, e.keys.Processes, "array", `[3]`).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := e.reg.SlaveCount(e.ctx); n != 2 || err != nil {
		t.Fatalf("SlaveCount = %d, %v; want 2", n, err)
	}
	if errs := e.errs.take(); len(errs) != 1 || !strings.Contains(errs[0].Error(), `"array"`) {
		t.Errorf("after a new value: %v, want one error naming the field", errs)
	}
	if _, err := e.reg.Process(e.ctx, "not-json"); !errors.Is(err, ErrCorruptEntry) || !strings.Contains(err.Error(), "not-json") {
		t.Errorf("Process(corrupt) = %v, want ErrCorruptEntry naming it", err)
	}
	js, err := e.reg.Process(e.ctx, "js")
	if err != nil || js.Capabilities.MaxSubscriptions != 3 || js.LastSeen.Nanosecond() != 123e6 {
		t.Errorf("Process(js) = %+v, %v", js, err)
	}
}

func testMasterProcess(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	if _, err := e.reg.MasterProcess(e.ctx); !isNotFound(err) {
		t.Errorf("MasterProcess with no master = %v, want ErrNotFound", err)
	}
	info := ProcessInfo{ProcessID: "m", NodeID: "m", Role: RoleMaster, Identifier: "svc", LastSeen: start, RegisteredAt: start}
	b, err := info.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Acquire(e.ctx, e.c, e.keys, "m", time.Minute, b, 0)
	if err != nil || got.Term == 0 {
		t.Fatalf("Acquire = %+v, %v", got, err)
	}
	mp, err := e.reg.MasterProcess(e.ctx)
	info.Term = got.Term
	if err != nil || !reflect.DeepEqual(mp, info) {
		t.Errorf("MasterProcess = %+v, %v; want %+v", mp, err, info)
	}
	if err := e.c.Set(e.ctx, e.keys.MasterProcess, "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.MasterProcess(e.ctx); !errors.Is(err, ErrCorruptEntry) || !strings.Contains(err.Error(), e.keys.MasterProcess) {
		t.Errorf("MasterProcess on garbage = %v, want ErrCorruptEntry naming the key", err)
	}
}

// testConcurrent runs every operation from several goroutines at once (for
// the race detector) and checks the outcome.
func testConcurrent(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	var wg sync.WaitGroup
	ids := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}
	for i, id := range ids {
		wg.Go(func() {
			for round := range 10 {
				if err := e.reg.Register(e.ctx, slave(id)); err != nil {
					t.Error(err)
					return
				}
				if err := e.reg.Heartbeat(e.ctx, id); err != nil {
					t.Error(err)
					return
				}
				if _, err := e.reg.Processes(e.ctx); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 1 && round == 9 {
					if err := e.reg.Unregister(e.ctx, id); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if got := e.ids(); !slices.Equal(got, []string{"p0", "p2", "p4", "p6"}) {
		t.Errorf("Processes lists %v, want the four processes that did not unregister", got)
	}
}

func TestEmulatedReadRemovesExpired(t *testing.T) {
	e := newEnv(t, miniTarget(BackendEmulated), Config{})
	ch := e.events()
	e.register(slave("a"), slave("b"))
	expectNotice(t, ch, "registered", "a")
	expectNotice(t, ch, "registered", "b")
	e.pass(e.ttl / 2)
	e.heartbeat("b")
	e.pass(e.ttl / 2) // a's deadline is now
	view, err := e.reg.be.read(e.ctx, nil, false)
	if err != nil || !slices.Equal(view.Removed, []string{"a"}) || len(view.Entries) != 1 {
		t.Fatalf("read = %v, removed %v, %v; want b, removed [a]", view.Entries, view.Removed, err)
	}
	if v := expectNotice(t, ch, "unregistered", "a"); v["reason"] != "expired" {
		t.Errorf("notice %v, want reason expired", v)
	}
	if n := e.c.ZCard(e.ctx, e.keys.ProcessesExpiry).Val(); n != 1 {
		t.Errorf("the expiry set holds %d ids, want 1", n)
	}
	if n := e.c.HLen(e.ctx, e.keys.Processes).Val(); n != 1 {
		t.Errorf("the hash holds %d entries, want 1", n)
	}
}

func TestStaleRemovalIsGuarded(t *testing.T) {
	for _, tg := range miniTargets {
		t.Run(tg.name, func(t *testing.T) {
			e := newEnv(t, tg, Config{})
			e.register(slave("a"))
			snap, err := e.reg.load(e.ctx, true)
			if err != nil || len(snap.infos) != 1 || len(snap.raws) != 1 || snap.version != snap.infos[0].Version {
				t.Fatalf("load = %+v, %v; want one entry, of the snapshot's version", snap, err)
			}
			e.pass(time.Second)
			e.heartbeat("a") // written after the read: the removal must not delete it
			if v, err := e.reg.removeStale(e.ctx, "a", snap.raws[0]); v != 0 || err != nil {
				t.Fatalf("removeStale of a rewritten entry = %v, %v; want 0", v, err)
			}
			snap, _ = e.reg.load(e.ctx, true)
			if v, err := e.reg.removeStale(e.ctx, "a", snap.raws[0]); v <= snap.version || err != nil {
				t.Fatalf("removeStale of an unchanged entry = %v, %v; want a version above %d", v, err, snap.version)
			}
			if got := e.ids(); len(got) != 0 {
				t.Errorf("Processes lists %v after the removal", got)
			}
		})
	}
}

func TestNew(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	keys := keyspace.NewKeys("new-test", false)

	for _, tc := range []struct {
		name string
		keys keyspace.Keys
		cfg  Config
		want Backend
		err  error
	}{
		{"auto picks native on miniredis", keys, Config{}, BackendNative, nil},
		{"auto by name", keys, Config{Backend: "AUTO"}, BackendNative, nil},
		{"native", keys, Config{Backend: BackendNative}, BackendNative, nil},
		{"emulated", keys, Config{Backend: BackendEmulated}, BackendEmulated, nil},
		{"hpexpire is not run by miniredis", keys, Config{Backend: BackendHPExpire}, "", ErrBackendUnsupported},
		{"unknown backend", keys, Config{Backend: "fast"}, "", ErrInvalidConfig},
		{"negative TTL", keys, Config{ProcessTTL: -time.Second}, "", ErrInvalidConfig},
		{"zero keys", keyspace.Keys{}, Config{}, "", ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := New(ctx, c, tc.keys, tc.cfg)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("New = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || reg.Backend() != tc.want || reg.ProcessTTL() != DefaultProcessTTL {
				t.Fatalf("New = %v (%v, TTL %v); want %s, TTL %s", err, reg, reg.ProcessTTL(), tc.want, DefaultProcessTTL)
			}
		})
	}
	if n := c.Exists(ctx, keys.Processes).Val(); n != 0 {
		t.Errorf("the probe left the registry hash behind")
	}

	// A registry key of the wrong type is an error, not a fallback.
	if err := c.Set(ctx, keys.Processes, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, c, keys, Config{}); err == nil || !strings.Contains(err.Error(), "not a hash") {
		t.Errorf("New on a string key = %v, want an error saying it is not a hash", err)
	}
	if _, err := New(ctx, nil, keys, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(nil client) = %v, want ErrInvalidConfig", err)
	}
	var typed *redis.Client
	if _, err := New(ctx, typed, keys, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(typed nil client) = %v, want ErrInvalidConfig", err)
	}
}

// TestNewProbed: NewProbed chooses the backend from the probe's answer it
// is given, as New does from its own, and sends nothing to Redis; the
// answer of a pipelined probe (rdb.QueueRegistryProbe) is New's.
func TestNewProbed(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	n := &wiretap.Tap{}
	c.AddHook(n)
	ctx := t.Context()
	keys := keyspace.NewKeys("probed-test", false)

	for _, tc := range []struct {
		name string
		p    Probed
		cfg  Config
		want Backend
		err  error
	}{
		{"auto, both", Probed{Native: true, HPExpire: true}, Config{}, BackendNative, nil},
		{"auto, hpexpire only", Probed{HPExpire: true}, Config{}, BackendHPExpire, nil},
		{"auto, neither", Probed{}, Config{}, BackendEmulated, nil},
		{"hpexpire", Probed{HPExpire: true}, Config{Backend: BackendHPExpire}, BackendHPExpire, nil},
		{"native without HSETEX", Probed{HPExpire: true}, Config{Backend: BackendNative}, "", ErrBackendUnsupported},
		{"unknown backend", Probed{}, Config{Backend: "fast"}, "", ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.Reset()
			reg, err := NewProbed(ctx, c, keys, tc.cfg, tc.p)
			if got := n.Trips(); got != 0 {
				t.Errorf("NewProbed sent %d round trips, want none", got)
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("NewProbed = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || reg.Backend() != tc.want || reg.ProcessTTL() != DefaultProcessTTL {
				t.Fatalf("NewProbed = %v (%v); want %s, TTL %s", err, reg, tc.want, DefaultProcessTTL)
			}
		})
	}

	pipe := c.Pipeline()
	probe := rdb.QueueRegistryProbe(ctx, pipe, keys)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	native, hpexpire, err := probe.Result()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewProbed(ctx, c, keys, Config{}, Probed{Native: native, HPExpire: hpexpire})
	if err != nil || reg.Backend() != BackendNative {
		t.Errorf("NewProbed with the pipelined probe's answer = %v, %v; want the native backend, as New picks on miniredis", reg, err)
	}
	if n := c.Exists(ctx, keys.Processes).Val(); n != 0 {
		t.Errorf("the pipelined probe left the registry hash behind")
	}
}

// testRoundTrips counts the commands each operation sends once the scripts
// are cached on the server: every operation is one round trip.
func testRoundTrips(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	n := &wiretap.Tap{}
	e.c.AddHook(n)
	ops := []struct {
		name string
		op   func() error
	}{
		{"Register", func() error { return e.reg.Register(e.ctx, slave("a")) }},
		{"Heartbeat", func() error { return e.reg.Heartbeat(e.ctx, "a") }},
		{"Processes", func() error { return second(e.reg.Processes(e.ctx)) }},
		{"Process", func() error { return second(e.reg.Process(e.ctx, "a")) }},
		{"SlaveCount", func() error { return second(e.reg.SlaveCount(e.ctx)) }},
		{"MasterProcess", func() error {
			if _, err := e.reg.MasterProcess(e.ctx); !isNotFound(err) {
				return err
			}
			return nil
		}},
		{"Unregister", func() error { return e.reg.Unregister(e.ctx, "a") }},
	}
	for _, warm := range []bool{true, false} {
		for _, o := range ops {
			n.Reset()
			if err := o.op(); err != nil {
				t.Fatalf("%s: %v", o.name, err)
			}
			if got := n.Trips(); !warm && got != 1 {
				t.Errorf("%s took %d round trips, want 1", o.name, got)
			}
		}
	}
}
