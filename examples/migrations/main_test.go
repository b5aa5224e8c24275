package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"

	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/internal/testkit/testsync"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type instance struct {
	p      *process
	out    *testsync.Buffer
	cancel context.CancelFunc
	done   chan error
}

func opts(addr, id string) options {
	return options{Node: setup.Node{Redis: addr, ID: id, Lock: "migrations-test", LockTTL: 600 * time.Millisecond}, Wait: 10 * time.Second, Candidate: true}
}

func start(t *testing.T, o options) *instance {
	t.Helper()
	out := &testsync.Buffer{}
	p, err := newProcess(o, out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{p: p, out: out, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- p.run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

func (in *instance) stop(t *testing.T) {
	t.Helper()
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("%s: %v\n%s", in.p.o.ID, err, in.out.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s did not stop", in.p.o.ID)
	}
}

func (in *instance) waitServing(t *testing.T) {
	t.Helper()
	select {
	case <-in.p.serving:
	case err := <-in.done:
		in.cancel = nil
		t.Fatalf("%s ended before serving: %v\n%s", in.p.o.ID, err, in.out.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("%s is not serving:\n%s", in.p.o.ID, in.out.String())
	}
}

func (in *instance) applied() []int {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	return slices.Clone(in.p.applied)
}

// TestMigrationsRunOnceOnTheMaster: three processes start together; the
// master migrates, every process serves only with the current schema, and
// a second generation of processes migrates nothing.
func TestMigrationsRunOnceOnTheMaster(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	k := newAppKeys("migrations-test")
	var gen []*instance
	for _, id := range []string{"a", "b", "c"} {
		gen = append(gen, start(t, opts(mr.Addr(), id)))
	}
	migrators := 0
	for _, in := range gen {
		in.waitServing(t)
		switch got := in.applied(); {
		case len(got) == 0:
		case slices.Equal(got, []int{1, 2, 3}):
			migrators++
		default:
			t.Errorf("%s applied %v", in.p.o.ID, got)
		}
		if !strings.Contains(in.out.String(), "serving with schema v3: 3 cameras") {
			t.Errorf("%s:\n%s", in.p.o.ID, in.out.String())
		}
	}
	if migrators != 1 {
		t.Fatalf("%d processes migrated, want exactly one", migrators)
	}
	if v, _ := mr.Get(k.version); v != "3" {
		t.Fatalf("schema version %q, want 3", v)
	}
	if steps, err := mr.HKeys(k.history); err != nil || len(steps) != 3 {
		t.Fatalf("history has the steps %v (%v), want 3", steps, err)
	}
	if loc := mr.HGet(k.camera("lobby"), "location"); loc != "site-1" {
		t.Fatalf("v2 did not run: location %q", loc)
	}

	// A rolling restart: the new processes find the schema current.
	for _, in := range gen {
		in.stop(t)
	}
	for _, id := range []string{"a", "b"} {
		in := start(t, opts(mr.Addr(), id))
		in.waitServing(t)
		if got := in.applied(); len(got) != 0 {
			t.Errorf("%s migrated %v again", id, got)
		}
	}
}

// TestSlaveGivesUpWithoutMaster: a process that is not a candidate waits
// for a master that never comes, and fails after -wait.
func TestSlaveGivesUpWithoutMaster(t *testing.T) {
	mr := miniredis.RunT(t)
	o := opts(mr.Addr(), "follower")
	o.Candidate, o.Wait = false, 150*time.Millisecond
	p, err := newProcess(o, &testsync.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	err = p.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not at v3 after 150ms") {
		t.Fatalf("run: %v, want the -wait timeout", err)
	}
}

// TestStepRefusedWithoutTheLock: a node that does not hold the lock cannot
// apply a step, whatever it believes.
func TestStepRefusedWithoutTheLock(t *testing.T) {
	mr := miniredis.RunT(t)
	p, err := newProcess(opts(mr.Addr(), "stale"), &testsync.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() { _ = p.client.Close() }()
	defer func() { _ = p.m.Stop(ctx) }() // never started: ends the event handlers
	if err := mr.Set(p.lock.Master, "someone-else"); err != nil {
		t.Fatal(err)
	}
	if err := p.migrate(ctx, 1); !errors.Is(err, errNotMaster) {
		t.Fatalf("migrate without the lock: %v, want errNotMaster", err)
	}
	if mr.Exists(p.keys.version) {
		t.Fatal("a step was applied without the lock")
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		edit func(*options)
		want string
	}{
		{"wait zero", func(o *options) { o.Wait = 0 }, "-wait"},
		{"bad url", func(o *options) { o.Redis = "redis://[::1" }, "-redis"},
		{"bad id", func(o *options) { o.ID = "a*b" }, "NodeID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts("127.0.0.1:1", "x")
			tt.edit(&o)
			if _, err := newProcess(o, &testsync.Buffer{}); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("newProcess: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
