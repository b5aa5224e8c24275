package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
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

// proc is one node run as main runs it, with its own ctx (Ctrl+C) and stdin.
type proc struct {
	id     string
	cancel context.CancelFunc
	stdin  *io.PipeWriter
	out    *testsync.Buffer
	done   chan error
	n      *node
}

func startProc(t *testing.T, addr, id string) *proc {
	t.Helper()
	return startWith(t, options{Node: setup.Node{Redis: addr, ID: id, Lock: "node-test", LockTTL: 600 * time.Millisecond}, Every: 50 * time.Millisecond, MaxSubs: 10, Workload: 100, Candidate: true})
}

// startWith starts a node with the flags o.
func startWith(t *testing.T, o options) *proc {
	t.Helper()
	id := o.ID
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	p := &proc{id: id, cancel: cancel, stdin: w, out: &testsync.Buffer{}, done: make(chan error, 1)}
	n, err := newNode(o, p.out)
	if err != nil {
		t.Fatal(err)
	}
	p.n = n
	go func() { p.done <- n.run(ctx, r) }()
	t.Cleanup(func() { p.exit(t) })
	return p
}

// exit is Ctrl+C: it waits for the node to stop.
func (p *proc) exit(t *testing.T) {
	t.Helper()
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	_ = p.stdin.Close()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("%s: %v", p.id, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s did not stop", p.id)
	}
}

func masters(ps []*proc) []*proc {
	var out []*proc
	for _, p := range ps {
		if p.cancel != nil && p.n.m.IsMaster() {
			out = append(out, p)
		}
	}
	return out
}

func TestNodesElectRouteAndHandOver(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	ps := []*proc{startProc(t, mr.Addr(), "a"), startProc(t, "redis://"+mr.Addr(), "b"), startProc(t, mr.Addr(), "c")}
	testsync.WaitFor(t, "one master", func() bool { return len(masters(ps)) == 1 })
	first := masters(ps)[0]

	// The master broadcasts jobs; both slaves get them and report back.
	testsync.WaitFor(t, "jobs and reports", func() bool {
		for _, p := range ps {
			if p != first && p.n.jobs.Load() < 2 {
				return false
			}
		}
		return first.n.reports.Load() >= 4
	})
	for _, p := range ps {
		if p != first && p.n.sent.Load() != 0 {
			t.Errorf("slave %s broadcast jobs", p.id)
		}
	}

	// "pause" makes the master hand over while it keeps running.
	_, _ = io.WriteString(first.stdin, "pause\n")
	testsync.WaitFor(t, "a new master after pause", func() bool { m := masters(ps); return len(m) == 1 && m[0] != first })
	second := masters(ps)[0]
	testsync.WaitFor(t, "the new master's jobs and reports", func() bool { return second.n.reports.Load() >= 2 })
	_, _ = io.WriteString(first.stdin, "status\nbogus\n")
	// The node reads its commands one at a time: "bogus" is answered after
	// the status line, so wait for both rather than check the second at once.
	testsync.WaitFor(t, "status output", func() bool { return strings.Contains(first.out.String(), "candidate: false") })
	testsync.WaitFor(t, "the unknown command reported", func() bool { return strings.Contains(first.out.String(), `unknown command "bogus"`) })
	_, _ = io.WriteString(first.stdin, "resume\n")

	// Ctrl+C on the master: graceful handover to another node.
	second.exit(t)
	testsync.WaitFor(t, "a master after Ctrl+C", func() bool { return len(masters(ps)) == 1 })
	if m := masters(ps)[0]; m == second {
		t.Fatal("the stopped node is still master")
	}
	out := second.out.String()
	for _, want := range []string{"MASTER with term", "-> job #", "<- done #", "stopping: leaving the election", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s's output lacks %q:\n%s", second.id, want, out)
		}
	}
}

func TestRunStopsOnCtrlC(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := &testsync.Buffer{}
	r, w := io.Pipe()
	defer w.Close()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{Node: setup.Node{Redis: mr.Addr(), ID: "solo", Lock: "run-test", LockTTL: 600 * time.Millisecond}, Every: time.Second, MaxSubs: 1, Workload: 1, Candidate: true}, r, out)
	}()
	testsync.WaitFor(t, "mastership", func() bool { return strings.Contains(out.String(), "MASTER with term") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after Ctrl+C")
	}
	if n, _ := mr.Get("run-test:master"); n != "" {
		t.Errorf("the lock is still held by %q after a graceful stop", n)
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		o    options
		want string
	}{
		{"bad url", options{Node: setup.Node{Redis: "redis://[::1", ID: "x", Lock: "l", LockTTL: time.Second}, Every: time.Second}, "-redis"},
		{"bad id", options{Node: setup.Node{Redis: "127.0.0.1:1", ID: "has space", Lock: "l", LockTTL: time.Second}, Every: time.Second}, "NodeID"},
		{"bad ttl", options{Node: setup.Node{Redis: "127.0.0.1:1", ID: "x", Lock: "l", LockTTL: -time.Second}, Every: time.Second}, "LockTTL"},
		{"bad every", options{Node: setup.Node{Redis: "127.0.0.1:1", ID: "x", Lock: "l", LockTTL: time.Second}}, "-every"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newNode(tt.o, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("newNode: %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// With -metrics the node serves its metrics and probes, from before its
// election starts until it stops.
func TestMetricsAndProbes(t *testing.T) {
	mr := miniredis.RunT(t)
	p := startWith(t, options{Node: setup.Node{Redis: mr.Addr(), ID: "m", Lock: "node-test", LockTTL: 600 * time.Millisecond}, Every: 50 * time.Millisecond, MaxSubs: 10, Workload: 100, Candidate: true, Metrics: "127.0.0.1:0"})
	testsync.WaitFor(t, "mastership", p.n.m.IsMaster)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + p.n.srvAddr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	testsync.WaitFor(t, "the mastership counted", func() bool {
		code, body := get("/metrics")
		return code == http.StatusOK && strings.Contains(body, `herd_election_is_master{lock="node-test"} 1`) &&
			strings.Contains(body, `herd_election_master_transitions_total{direction="acquired",lock="node-test"} 1`)
	})
	for _, path := range []string{"/livez", "/readyz"} {
		code, body := get(path)
		var rep struct{ Status, Role string }
		if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusOK || rep.Status != "ok" || rep.Role != "master" {
			t.Errorf("%s: %d %s, want 200 with status ok and role master", path, code, body)
		}
	}
	if !strings.Contains(p.out.String(), "metrics on http://") {
		t.Errorf("the metrics address is not printed:\n%s", p.out.String())
	}
}
