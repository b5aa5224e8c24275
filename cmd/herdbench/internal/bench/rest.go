package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/keyspace"
)

// topLevel are the commands herd's election sends over the wire at rest;
// every other command in INFO commandstats during a quiet window ran inside
// a script.
var topLevel = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "ping", "subscribe", "unsubscribe", "script|load"}

// RestResult is what CostAtRest measured.
type RestResult struct {
	// Processes is the number of elections (1 master, the rest slaves).
	Processes int
	// Window is the measured wall time.
	Window time.Duration
	// PerMinute is, per command name, the calls per process per minute the
	// server saw (INFO commandstats), scaled from Window to a minute. INFO
	// itself is left out.
	PerMinute map[string]float64
	// RoundTrips is the sum of PerMinute over the commands herd sends
	// itself (EVALSHA, PING, ...): round trips per process per minute.
	RoundTrips float64
	// Executed is the sum of PerMinute over every command, the ones the
	// scripts run included.
	Executed float64
	// MasterSent and SlaveSent are the commands per minute sent through the
	// command path of the master's client and, on average, of a slave's
	// (a client hook; the subscription's PINGs do not pass it).
	MasterSent, SlaveSent float64
	// ClientCPU is this process's CPU time per process per minute during
	// the window (this process runs the elections and nothing else then).
	ClientCPU time.Duration
}

// CostAtRest starts processes elections at default timings on one lock
// name, lets them settle, and counts the commands the server executes
// during window (INFO commandstats deltas), scaled to a minute. Choose a
// window that is a multiple of the periods involved (10 s renew, 5 s
// check, go-redis's 3 s subscription health check): 30 s.
func CostAtRest(ctx context.Context, env *Env, processes int, window time.Duration) (RestResult, error) {
	res := RestResult{Processes: processes}
	if processes < 1 {
		return res, fmt.Errorf("cost at rest needs at least 1 process, got %d", processes)
	}
	lock := env.LockName("rest")
	admin := env.NewClient()
	defer admin.Close()
	nodes := make([]*node, 0, processes)
	hooks := make([]*commandCount, 0, processes)
	defer func() { closeAll(ctx, nodes) }()
	for i := range processes {
		c := env.NewClient()
		h := &commandCount{}
		c.AddHook(h)
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return res, fmt.Errorf("connect: %w", err)
		}
		n, err := newNode(c, false, Timings(lock, fmt.Sprintf("rest-%d", i), 30*time.Second))
		if err != nil {
			return res, err
		}
		nodes = append(nodes, n)
		hooks = append(hooks, h)
	}
	if _, err := startAll(ctx, nodes); err != nil {
		return res, fmt.Errorf("cost at rest: %w", err)
	}
	if err := sleep(ctx, time.Second); err != nil { // let the start-up traffic pass
		return res, err
	}
	sent0 := make([]int, len(hooks))
	for i, h := range hooks {
		sent0[i] = h.count()
	}
	w, err := measureWindow(ctx, admin, window)
	if err != nil {
		return res, err
	}
	res.Window = w.wall
	scale := float64(time.Minute) / float64(res.Window) / float64(processes)
	res.PerMinute = map[string]float64{}
	for name, n := range w.executed {
		if name == "info" {
			continue
		}
		v := float64(n) * scale
		res.PerMinute[name] = v
		res.Executed += v
		if slices.Contains(topLevel, name) {
			res.RoundTrips += v
		}
	}
	perMin := float64(time.Minute) / float64(res.Window)
	res.ClientCPU = time.Duration(float64(w.clientTime) * perMin / float64(processes))
	slaves := 0
	for i, n := range nodes {
		sent := float64(hooks[i].count()-sent0[i]) * perMin
		if n.IsMaster() {
			res.MasterSent = sent
		} else {
			res.SlaveSent += sent
			slaves++
		}
	}
	if slaves > 0 {
		res.SlaveSent /= float64(slaves)
	}
	return res, nil
}

// Breakdown formats PerMinute as "evalsha 11.4, ping 20.0, ..." in
// decreasing order.
func (r RestResult) Breakdown(topOnly bool) string {
	names := slices.Collect(maps.Keys(r.PerMinute))
	slices.SortFunc(names, func(a, b string) int {
		if r.PerMinute[a] != r.PerMinute[b] {
			if r.PerMinute[a] > r.PerMinute[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, n := range names {
		if topOnly != slices.Contains(topLevel, n) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", strings.ToUpper(n), r.PerMinute[n]))
	}
	return strings.Join(parts, ", ")
}

// ScaleResult is what Scale measured.
type ScaleResult struct {
	// Nodes is the number of elections.
	Nodes int
	// ToMaster is the time from starting every node at once until every
	// Start had returned, with exactly one master.
	ToMaster time.Duration
	// Registered is the time from starting every node at once until the
	// registry listed all of them (polled every 10ms).
	Registered time.Duration
	// Window is the idle window measured.
	Window time.Duration
	// BaselineCPU is the server's CPU use (percent of one CPU) in a window
	// of the same length before the nodes started.
	BaselineCPU float64
	// IdleCPU is the server's CPU use (percent of one CPU) while the nodes
	// were idle.
	IdleCPU float64
	// IdleCommands is the commands per second the server saw while idle
	// (INFO left out), the ones scripts run included.
	IdleCommands float64
	// ClientCPU is this process's CPU use (percent of one CPU) while idle.
	ClientCPU float64
}

// Scale runs nodes elections at default timings in this process, all on one
// shared client as one process would have them: time to a single master,
// time until all are registered, then (2 s later) the server's CPU while
// they idle for window (INFO cpu deltas), against a baseline window of the
// same length with no nodes.
func Scale(ctx context.Context, env *Env, nodes int, window time.Duration) (ScaleResult, error) {
	res := ScaleResult{Nodes: nodes}
	lock := env.LockName("scale")
	admin := env.NewClient()
	defer admin.Close()

	base, err := measureWindow(ctx, admin, window)
	if err != nil {
		return res, err
	}
	res.BaselineCPU = base.cpu

	c := env.NewClient()
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	all := make([]*node, 0, nodes)
	defer func() { closeAll(ctx, all) }()
	for i := range nodes {
		n, err := newNode(c, true, Timings(lock, fmt.Sprintf("scale-%d", i), 30*time.Second))
		if err != nil {
			return res, err
		}
		all = append(all, n)
	}
	if res.ToMaster, err = startAll(ctx, all); err != nil {
		return res, fmt.Errorf("scale: %w", err)
	}
	t1 := time.Now()
	processes := keyspace.NewKeys(lock, false).Processes
	for {
		n, err := admin.HLen(ctx, processes).Result()
		if err != nil {
			return res, fmt.Errorf("scale: count registry entries: %w", err)
		}
		if n >= int64(nodes) {
			break
		}
		if time.Since(t1) > time.Minute {
			return res, fmt.Errorf("scale: %d of %d nodes registered a minute after Start", n, nodes)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.Registered = res.ToMaster + time.Since(t1)
	if err := sleep(ctx, 2*time.Second); err != nil { // let the notices of the registrations drain
		return res, err
	}
	idle, err := measureWindow(ctx, admin, window)
	if err != nil {
		return res, err
	}
	res.Window, res.IdleCPU, res.IdleCommands, res.ClientCPU = idle.wall, idle.cpu, idle.commands, idle.client
	return res, nil
}

// cpuWindow is what the server and this process did during one window.
type cpuWindow struct {
	wall       time.Duration
	cpu        float64               // server, percent of one CPU
	executed   benchkit.CommandStats // the server's commands (INFO commandstats delta)
	commands   float64               // per second, INFO left out
	clientTime time.Duration         // this process's CPU time
	client     float64               // this process, percent of one CPU
}

// measureWindow waits window and returns what the server (INFO commandstats
// and INFO cpu deltas, read through admin) and this process did meanwhile.
func measureWindow(ctx context.Context, admin redis.UniversalClient, window time.Duration) (cpuWindow, error) {
	var w cpuWindow
	cs0, err := commandStats(ctx, admin)
	if err != nil {
		return w, err
	}
	s0, err := serverCPU(ctx, admin)
	if err != nil {
		return w, err
	}
	p0, _ := processCPU()
	t0 := time.Now()
	if err := sleep(ctx, window); err != nil {
		return w, err
	}
	s1, err := serverCPU(ctx, admin)
	if err != nil {
		return w, err
	}
	p1, _ := processCPU()
	w.wall = time.Since(t0)
	cs1, err := commandStats(ctx, admin)
	if err != nil {
		return w, err
	}
	w.cpu = (s1 - s0) / w.wall.Seconds() * 100
	w.clientTime = p1 - p0
	w.client = float64(w.clientTime) / float64(w.wall) * 100
	w.executed = cs1.Sub(cs0)
	w.commands = float64(w.executed.Total("info")) / w.wall.Seconds()
	return w, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
