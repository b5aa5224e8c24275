package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/internal/testkit/testsync"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// instance is one cron process run as main runs it.
type instance struct {
	c      *cron
	out    *testsync.Buffer
	cancel context.CancelFunc
	done   chan error
}

func startCron(t *testing.T, o options) *instance {
	t.Helper()
	out := &testsync.Buffer{}
	c, err := newCron(o, out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{c: c, out: out, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- c.run(ctx) }()
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
			t.Errorf("%s: %v", in.c.o.ID, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s did not stop", in.c.o.ID)
	}
}

type run struct {
	term int64
	node string
}

// history reads the runs recorded in the stream, oldest first.
func history(t *testing.T, mr *miniredis.Miniredis, lock string) []run {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	entries, err := c.XRange(context.Background(), keys(lock).runs, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []run
	for _, e := range entries {
		term, err := strconv.ParseInt(e.Values["term"].(string), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, run{term: term, node: e.Values["node"].(string)})
	}
	return out
}

func opts(addr, id string) options {
	return options{Node: setup.Node{Redis: addr, ID: id, Lock: "cron-test", LockTTL: 600 * time.Millisecond}, Every: 20 * time.Millisecond}
}

// TestJobRunsOnTheMasterOnly: two processes, one runs the job; when it
// pauses its candidacy it hands over, and from then on only the other runs.
func TestJobRunsOnTheMasterOnly(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	a, b := startCron(t, opts(mr.Addr(), "a")), startCron(t, opts(mr.Addr(), "b"))
	testsync.WaitFor(t, "three runs", func() bool { return a.c.runs.Load()+b.c.runs.Load() >= 3 })
	first, other := a, b
	if b.c.m.IsMaster() {
		first, other = b, a
	}
	if other.c.runs.Load() != 0 {
		t.Fatalf("both processes ran the job: %d and %d runs", first.c.runs.Load(), other.c.runs.Load())
	}

	first.c.m.SetCandidate(false) // hands over; its schedule stops with the mastership
	testsync.WaitFor(t, "runs on the other process", func() bool { return other.c.runs.Load() >= 3 })
	before := first.c.runs.Load()
	time.Sleep(5 * first.c.o.Every)
	if after := first.c.runs.Load(); after != before {
		t.Errorf("%s ran %d more times after handing over", first.c.o.ID, after-before)
	}

	h := history(t, mr, "cron-test")
	switched := false
	for i, r := range h {
		if i > 0 && r.term < h[i-1].term {
			t.Fatalf("run %d has term %d after a run of term %d", i, r.term, h[i-1].term)
		}
		if r.node == other.c.o.ID {
			switched = true
		} else if switched {
			t.Fatalf("run %d by %s after %s had taken over: %v", i, r.node, other.c.o.ID, h)
		}
	}
	if !switched {
		t.Fatalf("no run by %s recorded: %v", other.c.o.ID, h)
	}
	for _, in := range []*instance{a, b} {
		if out := in.out.String(); strings.Contains(out, "fenced off") || strings.Contains(out, "run failed") {
			t.Errorf("%s:\n%s", in.c.o.ID, out)
		}
	}
	if !strings.Contains(first.out.String(), "schedule of term") {
		t.Errorf("%s does not say its schedule stopped:\n%s", first.c.o.ID, first.out.String())
	}
}

// TestStaleRunIsFenced: a run with a term below one already recorded
// writes nothing.
func TestStaleRunIsFenced(t *testing.T) {
	mr := miniredis.RunT(t)
	c, err := newCron(opts(mr.Addr(), "late"), &testsync.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer c.close()
	defer func() { _ = c.m.Stop(ctx) }() // never started: Stop only ends the event handlers
	if err := c.job(ctx, 200); err != nil {
		t.Fatalf("run with term 200: %v", err)
	}
	if err := c.job(ctx, 100); !errors.Is(err, errStale) {
		t.Fatalf("run with the older term 100: %v, want errStale", err)
	}
	if err := c.job(ctx, 200); err != nil {
		t.Fatalf("second run with term 200: %v", err)
	}
	if h := history(t, mr, "cron-test"); len(h) != 2 || h[0].term != 200 || h[1].term != 200 {
		t.Fatalf("history %v: want the two runs of term 200 only", h)
	}
}

func TestStandaloneRunsWithoutRedis(t *testing.T) {
	o := opts("", "solo")
	o.Standalone = true
	in := startCron(t, o)
	testsync.WaitFor(t, "two runs", func() bool { return in.c.runs.Load() >= 2 })
	in.stop(t)
	out := in.out.String()
	for _, want := range []string{"MASTER with term", "run #1 (standalone)", "no longer master"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		edit func(*options)
		want string
	}{
		{"every zero", func(o *options) { o.Every = 0 }, "-every"},
		{"bad url", func(o *options) { o.Redis = "redis://[::1" }, "-redis"},
		{"bad lock", func(o *options) { o.Lock = "a b" }, "LockName"},
		{"bad ttl", func(o *options) { o.LockTTL = -time.Second }, "LockTTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts("127.0.0.1:1", "x")
			tt.edit(&o)
			c, err := newCron(o, &testsync.Buffer{})
			if err == nil {
				c.close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("newCron: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
