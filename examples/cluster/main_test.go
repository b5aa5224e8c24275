package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdkit/herd/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// checkSummary asserts what the scenario must have shown, whatever the timings.
func checkSummary(t *testing.T, s summary, out string) {
	t.Helper()
	if len(s.Terms) != 3 {
		t.Errorf("terms %v: want one per master (election, failover, handover)", s.Terms)
	}
	for i := 1; i < len(s.Terms); i++ {
		if s.Terms[i] <= s.Terms[i-1] {
			t.Errorf("terms %v do not increase", s.Terms)
		}
	}
	if s.RefusedLocal != 1 || s.RefusedRedis != 1 || s.Rejected != 1 {
		t.Errorf("stale messages: %d refused by the old master, %d by Redis, %d rejected by term; want 1 each",
			s.RefusedLocal, s.RefusedRedis, s.Rejected)
	}
	if len(s.Moves) != 4 {
		t.Errorf("movements %+v: want one per membership change (kill, crash, rejoin, handover)", s.Moves)
	}
	for _, m := range s.Moves {
		if m.Moved != m.Share || m.Share == 0 {
			t.Errorf("%s: %d cameras moved, the share of the node that changed was %d", m.Step, m.Moved, m.Share)
		}
	}
	if s.Errors != 0 {
		t.Errorf("%d unexpected error events", s.Errors)
	}
	for _, d := range []time.Duration{s.FirstElection, s.SlaveRemoved, s.SelfFenced, s.Failover, s.Handover} {
		if d <= 0 {
			t.Errorf("a measurement is missing: %+v", s)
			break
		}
	}
	// The failover needs the lock to expire; the self-fencing comes first.
	if s.SelfFenced >= s.Failover {
		t.Errorf("the crashed master fenced itself after %v, not before the failover (%v)", s.SelfFenced, s.Failover)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

func TestDemoOnEmbeddedRedis(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := demo(ctx, defaultOptions(), "", &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"MASTER, term", "slave-registered node-", "plans 40 cameras over 3 slaves",
		"slave-removed node-", "self-fenced", "refused by Redis", "REJECTED cameras from node-",
		"restarts and rejoins", "handover to node-", "SUMMARY",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(text, "\x1b[") {
		t.Error("output has colour codes although it is not a terminal")
	}
	checkSummary(t, s, text)
}

func TestDemoQuietPrintsOnlyTheSummary(t *testing.T) {
	o := defaultOptions()
	o.Nodes, o.Cameras, o.Quiet = 5, 25, true
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := demo(ctx, o, "", &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	if strings.Contains(text, "==>") || strings.Contains(text, "MASTER") {
		t.Errorf("quiet output has timeline lines:\n%s", text)
	}
	if !strings.Contains(text, "SUMMARY") {
		t.Errorf("quiet output lacks the summary:\n%s", text)
	}
	checkSummary(t, s, text)
}

// TestDemoOnRealRedis runs the demo as `-redis redis://...` would, on a
// real server, and checks that it leaves no key behind.
func TestDemoOnRealRedis(t *testing.T) {
	inst := redistest.Start(t, redistest.Default(t))
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := demo(ctx, defaultOptions(), "redis://"+inst.Addr, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	checkSummary(t, s, out.String())
	c := inst.Client(t)
	keys, err := c.Keys(ctx, "herd-demo-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("the demo left keys behind: %v", keys)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*options)
		want string // "" for valid
	}{
		{"defaults", func(*options) {}, ""},
		{"many nodes, slow timings", func(o *options) { o.Nodes, o.LockTTL = 8, 3*time.Second }, ""},
		{"too few nodes", func(o *options) { o.Nodes = 3 }, "-nodes 3"},
		{"too many nodes", func(o *options) { o.Nodes = 51 }, "-nodes 51"},
		{"no cameras", func(o *options) { o.Cameras = 0 }, "-cameras 0"},
		{"lock TTL too short", func(o *options) { o.LockTTL = time.Millisecond }, "-lock-ttl 1ms"},
		{"lock TTL too long", func(o *options) { o.LockTTL = time.Minute }, "-lock-ttl 1m0s"},
		{"slave timeout within a heartbeat", func(o *options) { o.SlaveTimeout = 100 * time.Millisecond }, "SlaveTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaultOptions()
			tt.edit(&o)
			err := o.validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("validate: %v, want an error naming %q", err, tt.want)
			}
		})
	}
	var out bytes.Buffer
	o := defaultOptions()
	o.Nodes = 2
	if _, err := demo(context.Background(), o, "", &out); err == nil || !strings.Contains(err.Error(), "at least 4") {
		t.Fatalf("demo with 2 nodes: %v", err)
	}
}

func TestDemoReportsUnreachableRedis(t *testing.T) {
	var out bytes.Buffer
	_, err := demo(context.Background(), defaultOptions(), "127.0.0.1:1", &out)
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis at 127.0.0.1:1") {
		t.Fatalf("demo on a closed port: %v", err)
	}
}
