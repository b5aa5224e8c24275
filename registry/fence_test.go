package registry

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMasterWriteFenced runs testMasterWriteFenced on miniredis; the
// integration test runs it on every server and backend.
func TestMasterWriteFenced(t *testing.T) {
	for _, tg := range miniTargets {
		t.Run(tg.name, func(t *testing.T) { testMasterWriteFenced(t, tg) })
	}
}

// TestIntegrationMasterWriteFenced: the same on every server of the matrix,
// with every backend it runs (hpexpire forced on Redis 8 and Valkey 9).
func TestIntegrationMasterWriteFenced(t *testing.T) { forEachServerTarget(t, testMasterWriteFenced) }

// testMasterWriteFenced: a master paused past its lock, replaced, whose entry
// expired meanwhile, heartbeats on resuming. Its heartbeat re-registers the
// entry; Redis must not let it say master under its old term: the entry and
// its notice say slave, and the heartbeat reports the refusal.
func testMasterWriteFenced(t *testing.T, tg target) {
	e := newEnv(t, tg, Config{})
	ch := e.events()
	e.holdLock("a", 5)
	e.register(ProcessInfo{ProcessID: "a", Role: RoleMaster, Term: 5, Identifier: "svc"})
	if v := expectNotice(t, ch, "registered", "a"); v["role"] != "master" {
		t.Fatalf("notice %v, want role master", v)
	}
	e.heartbeat("a") // still master: renewed as master, no notice

	// a pauses; its lock expires and b takes it; a's entry expires too.
	e.holdLock("b", 6)
	e.pass(e.ttl + time.Second)
	err := e.reg.Heartbeat(e.ctx, "a")
	if err == nil {
		t.Errorf("the heartbeat of a replaced master reported nothing")
	}
	if !errors.Is(err, ErrNotMaster) || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "term 6") {
		t.Errorf("heartbeat = %v, want ErrNotMaster naming the holder b and term 6", err)
	}
	v := expectNotice(t, ch, "registered", "a")
	p, _ := v["process"].(map[string]any)
	if v["role"] != "slave" || p["role"] != "slave" || p["term"] != nil {
		t.Errorf("re-registration notice %v, want role slave and no term", v)
	}
	got, err := e.reg.Process(e.ctx, "a")
	if err != nil || got.Role != RoleSlave || got.Term != 0 || got.Identifier != "svc" {
		t.Fatalf("entry after the refused heartbeat = %+v, %v; want the same info as a slave", got, err)
	}
	// Later heartbeats keep the slave role, without error or notice.
	e.pass(time.Second)
	e.heartbeat("a")
	if got, err := e.reg.Process(e.ctx, "a"); err != nil || got.Role != RoleSlave {
		t.Fatalf("entry after the next heartbeat = %+v, %v; want role slave", got, err)
	}

	// A live master entry whose lock was taken: the heartbeat demotes it and
	// announces the change of role.
	e.holdLock("c", 7)
	e.register(ProcessInfo{ProcessID: "c", Role: RoleMaster, Term: 7})
	expectNotice(t, ch, "registered", "c")
	e.holdLock("a", 8)
	if err := e.reg.Heartbeat(e.ctx, "c"); !errors.Is(err, ErrNotMaster) {
		t.Errorf("heartbeat of c after a took the lock = %v, want ErrNotMaster", err)
	}
	if v := expectNotice(t, ch, "registered", "c"); v["role"] != "slave" {
		t.Errorf("notice %v, want role slave", v)
	}

	// Registrations: the holder under another term, another holder, no
	// term, a lock key of the wrong type: all refused, written as slave.
	for _, tc := range []struct {
		name string
		info ProcessInfo
		lock func()
		want string
	}{
		{"older term", ProcessInfo{ProcessID: "a", Role: RoleMaster, Term: 7}, func() {}, `held by "a" under term 8`},
		{"another holder", ProcessInfo{ProcessID: "d", Role: RoleMaster, Term: 8}, func() {}, `held by "a"`},
		{"no term", ProcessInfo{ProcessID: "a", Role: RoleMaster}, func() {}, "term 8"},
		{"no lock", ProcessInfo{ProcessID: "a", Role: RoleMaster, Term: 8}, func() {
			if err := e.c.Del(e.ctx, e.keys.Master).Err(); err != nil {
				t.Fatal(err)
			}
		}, "nobody holds the lock"},
		{"lock of the wrong type", ProcessInfo{ProcessID: "a", Role: RoleMaster, Term: 8}, func() {
			if err := e.c.HSet(e.ctx, e.keys.Master, "x", "a").Err(); err != nil {
				t.Fatal(err)
			}
		}, "nobody holds the lock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.lock()
			err := e.reg.Register(e.ctx, tc.info)
			if !errors.Is(err, ErrNotMaster) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Register = %v, want ErrNotMaster with %q", err, tc.want)
			}
			if v := expectNotice(t, ch, "registered", tc.info.ProcessID); v["role"] != "slave" {
				t.Errorf("notice %v, want role slave", v)
			}
			if p, err := e.reg.Process(e.ctx, tc.info.ProcessID); err != nil || p.Role != RoleSlave || p.Term != 0 {
				t.Errorf("entry = %+v, %v; want role slave without term", p, err)
			}
		})
	}

	// Holding the lock again, the process registers as master.
	if err := e.c.Del(e.ctx, e.keys.Master).Err(); err != nil {
		t.Fatal(err)
	}
	e.holdLock("a", 9)
	e.register(ProcessInfo{ProcessID: "a", Role: RoleMaster, Term: 9})
	expectNotice(t, ch, "registered", "a")
	e.heartbeat("a")
	if p, err := e.reg.Process(e.ctx, "a"); err != nil || p.Role != RoleMaster || p.Term != 9 {
		t.Errorf("entry = %+v, %v; want master of term 9", p, err)
	}
}
