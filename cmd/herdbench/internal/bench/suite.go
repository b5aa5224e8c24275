package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/internal/testkit/redisproc"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// Plan is how much of each row a run measures.
type Plan struct {
	// Ops is the number of timed calls of each per-operation row (PING,
	// acquire, renew, check), taken interleaved so drift affects all alike.
	Ops int
	// Candidates and ContendedReps: the contended election's size and rounds.
	Candidates, ContendedReps int
	// StartReps is the number of uncontested starts timed (row 3s).
	StartReps int
	// HandoverReps is the number of graceful handovers timed.
	HandoverReps int
	// FailoverTTL, FailoverNodes and FailoverReps: the crash failover rows.
	FailoverTTL   time.Duration
	FailoverNodes int
	FailoverReps  int
	// RestProcesses and RestWindow: the cost-at-rest row.
	RestProcesses int
	RestWindow    time.Duration
	// RegistrySizes are the registry sizes Processes() is timed at (row 7),
	// on every backend the server runs.
	RegistrySizes []int
	// RegistryServers are more server executables on which row 7 is also
	// measured (started one after the other), for the backends the main
	// server lacks.
	RegistryServers []string
	// JoinReps is the number of slave-registered latencies timed (row 8).
	JoinReps int
	// Slaves, RouteLatencyN, RouteMessages, RouteSenders: row 9.
	Slaves, RouteLatencyN, RouteMessages, RouteSenders int
	// RouteBatch is the number of messages per Router.SendBatch call of
	// row 9e (RouteMessages sent by RouteSenders goroutines).
	RouteBatch int
	// Backlog is the number of entries of rows 9k to 9o: the backlog a new
	// master adopts, spread evenly over the inboxes of Slaves slaves.
	Backlog int
	// AdoptReps and BacklogReps are the rounds of rows 9k-9m (a new
	// master's Sweep) and of rows 9n-9o (failover → backlog handled).
	AdoptReps, BacklogReps int
	// Benchmarks runs the Go benchmarks of row 10 (one second each).
	Benchmarks bool
	// Only, when not empty, limits the run to the named Steps (for
	// profiling one part).
	Only []string
	// ScaleNodes and ScaleWindow: the scale rows (0 nodes skips them).
	ScaleNodes  int
	ScaleWindow time.Duration
	// ScaleSet is the scale row set of rows 13-15 (scale.go); no Sizes
	// skips it.
	ScaleSet ScaleSet
	// IdleSet is the idle-cost rows 16a-16e (idle.go); N 0 skips them.
	IdleSet IdleSet
}

// DefaultPlan is what `make bench` measures, in about two minutes.
func DefaultPlan() Plan {
	return Plan{
		Ops:           5000,
		Candidates:    100,
		ContendedReps: 20,
		StartReps:     200,
		HandoverReps:  200,
		FailoverTTL:   time.Second,
		FailoverNodes: 3,
		FailoverReps:  12,
		RestProcesses: 10,
		RestWindow:    30 * time.Second,
		RegistrySizes: []int{10, 1000, 10000},
		JoinReps:      200,
		Slaves:        10,
		RouteLatencyN: 2000,
		RouteMessages: 50000,
		RouteSenders:  16,
		RouteBatch:    64,
		Backlog:       1000,
		AdoptReps:     30,
		BacklogReps:   20,
		Benchmarks:    true,
		ScaleNodes:    1000,
		ScaleWindow:   10 * time.Second,
		ScaleSet:      DefaultScaleSet(),
		IdleSet:       DefaultIdleSet(),
	}
}

// QuickPlan measures every row a little, to check that the suite works
// (seconds, not minutes); its numbers are not worth publishing.
func QuickPlan() Plan {
	return Plan{
		Ops:           50,
		Candidates:    10,
		ContendedReps: 2,
		StartReps:     5,
		HandoverReps:  5,
		FailoverTTL:   300 * time.Millisecond,
		FailoverNodes: 2,
		FailoverReps:  1,
		RestProcesses: 2,
		RestWindow:    time.Second,
		RegistrySizes: []int{10, 100},
		JoinReps:      5,
		Slaves:        2,
		RouteLatencyN: 20,
		RouteMessages: 200,
		RouteSenders:  2,
		RouteBatch:    16,
		Backlog:       200,
		AdoptReps:     2,
		BacklogReps:   2,
		Benchmarks:    false,
		ScaleNodes:    20,
		ScaleWindow:   time.Second,
		ScaleSet:      QuickScaleSet(),
		IdleSet:       QuickIdleSet(),
	}
}

// Steps are the names of the parts of a run, for Plan.Only.
var Steps = []string{"ops", "start", "contended", "handover", "transfer", "failover", "processes", "joined", "routing", "adoption", "assign", "rest", "cost", "scale", "herd", "idle"}

// Run measures every row of plan on env and returns the report. A row that
// fails carries its error and the run goes on; progress lines go to
// progress (which may be io.Discard).
func Run(ctx context.Context, env *Env, server string, plan Plan, progress io.Writer) Report {
	began := time.Now()
	rep := Report{Machine: benchkit.ThisMachine(), Server: server}
	if len(plan.Only) == 0 || slices.Contains(plan.Only, "processes") {
		// Versions, not paths: a path names one machine's directories.
		for _, path := range plan.RegistryServers {
			name, err := redisproc.Version(ctx, path)
			if err != nil {
				name = filepath.Base(path)
			}
			rep.MoreServers = append(rep.MoreServers, name)
		}
	}
	step := func(key, what string, f func() []Row) {
		if len(plan.Only) > 0 && !slices.Contains(plan.Only, key) || ctx.Err() != nil {
			return
		}
		t0 := time.Now()
		fmt.Fprintf(progress, "herdbench: %s ...", what)
		rows := f()
		fmt.Fprintf(progress, " %v\n", time.Since(t0).Round(100*time.Millisecond))
		rep.Rows = append(rep.Rows, rows...)
	}

	admin := env.NewClient()
	defer admin.Close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := env.Cleanup(cctx, admin); err != nil {
			fmt.Fprintf(progress, "herdbench: %v\n", err)
		}
	}()

	step("ops", "PING, the lock scripts, registration, heartbeat", func() []Row {
		rows, ping := opRows(ctx, env, plan.Ops)
		rep.Ping = ping
		return rows
	})
	step("start", "New + Start on a fresh lock", func() []Row {
		res, err := StartUncontested(ctx, env, plan.StartReps)
		row := LatencyRow("3s", "uncontested start: New + Start on a fresh lock → master", res.Total, "≤ 8× PING",
			fmt.Sprintf("Default timings, a connected client: registry probe, eviction check (INFO memory), lock check, and the acquire with the registration, in one script call (rdb.AskTaking); the subscription on its own connection, which a master's Start does not wait for; %d commands (client hooks).", res.Commands))
		row.Err = err
		return []Row{row}
	})
	step("contended", fmt.Sprintf("contended election of %d", plan.Candidates), func() []Row {
		s, err := Contended(ctx, env, plan.Candidates, plan.ContendedReps)
		row := LatencyRow("3", fmt.Sprintf("contended election, %d candidates at once → one master known to all", plan.Candidates), s, "—",
			"MasterElections (default timings), each on its own connected client; timed until every Start returned.")
		row.Err = err
		return []Row{row}
	})
	step("handover", "graceful handover", func() []Row {
		res, err := Handover(ctx, env, plan.HandoverReps)
		var phases [5]string
		for i, p := range res.Phases {
			phases[i] = benchkit.FormatDuration(benchkit.Summarize(p).P50)
		}
		row := LatencyRow("4", "graceful handover: master Stop → master-acquired on a slave", res.Total, "p50 ≤ 6×, p99 ≤ 20× PING",
			fmt.Sprintf("Default timings (LockTTL 30s), 2 nodes, until the OnMasterAcquired handler. Phase medians (client hooks): Stop's work before the release %s; release round trip %s; reply → slave's acquire sent (notice, loop) %s; acquire round trip %s; reply → handler (event bus) %s.",
				phases[0], phases[1], phases[2], phases[3], phases[4]))
		row.Err = err
		return []Row{row}
	})
	step("transfer", "directed hand-over", func() []Row {
		s, err := Transfer(ctx, env, plan.HandoverReps)
		row := LatencyRow("4t", "directed hand-over: master Transfer(node) → master-acquired on that node", s, "within a few round trips",
			"As 4, 3 nodes: the handlers' return, a release reserving the lock for the named node, its notice, its acquire, the event bus.")
		row.Err = err
		return []Row{row}
	})
	step("failover", "crash failover", func() []Row {
		res, err := Failover(ctx, env, plan.FailoverTTL, plan.FailoverNodes, plan.FailoverReps)
		cut := LatencyRow("5a", "crash failover: master's connection cut → master-acquired elsewhere", res.FromCut, fmt.Sprintf("≤ LockTTL + 100ms = %s", benchkit.FormatDuration(plan.FailoverTTL+100*time.Millisecond)), "")
		cut.TTL = plan.FailoverTTL
		exp := LatencyRow("5b", "crash failover: lock expiry → master-acquired elsewhere", res.FromExpiry, "≤ 100ms", "")
		cut.Err, exp.Err = err, err
		return group(fmt.Sprintf("LockTTL %v, the specification's ratios (heartbeat TTL/3, check TTL/6, jitter TTL/15), %d nodes; the master's client closed (no renew, no release) at a random point of its heartbeat cycle, leaving 2/3 to all of LockTTL. 5b from expiry (PTTL read after the cut, ms resolution): slaves check at expiry; the master's first-ranked slave contends at once, the others in their turns within TTL/15.",
			plan.FailoverTTL, plan.FailoverNodes), []Row{cut, exp})
	})
	step("processes", "registry: Processes()", func() []Row {
		rows := processesRows(ctx, env, rep.Server, plan.RegistrySizes)
		for _, path := range plan.RegistryServers {
			rows = append(rows, processesOn(ctx, path, serverShort(rep.Server), plan.RegistrySizes)...)
		}
		return group(fmt.Sprintf("registry.Registry.Processes(), read and decoded; slave entries of about %d bytes, registered beforehand by 16 goroutines.", exampleEntrySize()), letter("7", rows))
	})
	step("joined", "slave-registered latency", func() []Row {
		s, err := SlaveRegistered(ctx, env, plan.JoinReps)
		row := LatencyRow("8", "slave-registered latency: slave's Register → master's tracker reports the join", s, "p99 ≤ 2ms",
			"OnJoin of the master's registry.SlaveTracker, fed by a subscription to the registry events channel as in the election; a new slave, own client, each round.")
		row.Err = err
		return []Row{row}
	})
	step("routing", "routed messages", func() []Row {
		res, err := Routing(ctx, env, plan.Slaves, plan.RouteLatencyN, plan.RouteMessages, plan.RouteSenders)
		lat := LatencyRow("9a", fmt.Sprintf("routed message latency: Router.Send → slave handler, 1 master, %d slaves", plan.Slaves), res.Latency, "p99 ≤ 1ms", "")
		tput := Row{ID: "9b", What: fmt.Sprintf("routed message throughput, 1 master → %d slaves", plan.Slaves), N: res.Messages,
			Value: fmt.Sprintf("%.0f msg/s", res.Rate()), Goal: "≥ 50,000 msg/s"}
		lat.Err, tput.Err = err, err
		rows := []Row{lat, tput}
		var raw []CPU
		for _, batch := range []int{1, 64} {
			rate, cpu, err := RawPublish(ctx, env, plan.Slaves, plan.RouteMessages, plan.RouteSenders, batch)
			r := Row{ID: fmt.Sprintf("9%c", 'c'+len(rows)-2), N: plan.RouteMessages, Value: fmt.Sprintf("%.0f msg/s", rate), Goal: "—", Err: err}
			if batch == 1 {
				r.What = "floor under 9b: plain PUBLISH, one message per round trip"
			} else {
				r.What = fmt.Sprintf("plain PUBLISH pipelined, %d messages per round trip", batch)
			}
			raw = append(raw, cpu)
			rows = append(rows, r)
		}
		b, err := RoutingBatch(ctx, env, plan.Slaves, plan.RouteMessages, plan.RouteSenders, plan.RouteBatch)
		rows = append(rows, Row{ID: "9e", What: fmt.Sprintf("routed message throughput with Router.SendBatch, %d messages per call, 1 master → %d slaves", b.Batch, plan.Slaves),
			N: b.Messages, Value: fmt.Sprintf("%.0f msg/s", b.Rate()), Goal: "≥ 50,000 msg/s", Err: err})
		rows = group(fmt.Sprintf("pubsub.Router on the master's client (a real MasterElection, for the term), a pubsub.Subscriber per slave on its own client; 9a one small JSON message in flight, round-robin. 9b-9e: %d goroutines of the master at once (9b with Router.Send), spread evenly, until each handler had its share: 9b %v, 9e %v (%d route_batch.lua calls, one round trip and fence check each). 9c-9d: a 200-byte PUBLISH to a plain go-redis subscription per slave. CPU per message, this process/Redis: 9b %v, 9c %v, 9d %v, 9e %v.",
			plan.RouteSenders, res.Elapsed.Round(time.Millisecond), b.Elapsed.Round(time.Millisecond), b.Calls, res.CPU, raw[0], raw[1], b.CPU), rows)
		return append(rows, durableRows(ctx, env, plan)...)
	})
	step("adoption", fmt.Sprintf("durable backlog: adoption of %d entries, failover", plan.Backlog), func() []Row {
		return adoptionRows(ctx, env, plan)
	})
	step("assign", "assign: plan, renewals, a slave's death", func() []Row {
		return assignRows(ctx, env, 5)
	})
	step("rest", "cost at rest", func() []Row {
		res, err := CostAtRest(ctx, env, plan.RestProcesses, plan.RestWindow)
		rt := Row{ID: "10a", What: "round trips per process per minute at rest, default timings", N: plan.RestProcesses,
			Value: fmt.Sprintf("%.1f /min", res.RoundTrips), Goal: "—"}
		ex := Row{ID: "10b", What: "Redis commands executed per process per minute at rest (inside scripts included)", N: plan.RestProcesses,
			Value: fmt.Sprintf("%.1f /min", res.Executed), Goal: "—"}
		cpu := Row{ID: "10c", What: "CPU time of this process per herd process per minute at rest", N: plan.RestProcesses,
			Value: benchkit.FormatDuration(res.ClientCPU) + " /min", Goal: "—"}
		rt.Err, ex.Err, cpu.Err = err, err, err
		return group(fmt.Sprintf("1 master, %d slaves, idle; deltas over %v scaled to a minute. 10a by INFO commandstats: %s; through the command path (client hook; subscriptions' PINGs bypass it) master %.1f, slave %.1f /min. 10b, commands inside scripts: %s. 10c by getrusage; this process ran only the elections.",
			plan.RestProcesses-1, res.Window.Round(100*time.Millisecond), res.Breakdown(true), res.MasterSent, res.SlaveSent, res.Breakdown(false)), []Row{rt, ex, cpu})
	})
	step("cost", "allocations and CPU per operation (Go benchmarks)", func() []Row {
		if !plan.Benchmarks {
			return nil
		}
		return costRows(ctx, env)
	})
	if plan.ScaleNodes > 0 {
		step("scale", fmt.Sprintf("scale: %d nodes", plan.ScaleNodes), func() []Row {
			res, err := Scale(ctx, env, plan.ScaleNodes, plan.ScaleWindow)
			pool := "go-redis's default pool"
			if env.opts.PoolSize > 0 {
				pool = fmt.Sprintf("a pool of %d", env.opts.PoolSize)
			}
			start := Row{ID: "11a", What: fmt.Sprintf("scale: %d nodes in one process → one master known to all", plan.ScaleNodes), N: 1,
				P50: res.ToMaster, P99: res.ToMaster, Goal: "—"}
			reg := Row{ID: "11b", What: fmt.Sprintf("scale: %d nodes → all listed in the registry", plan.ScaleNodes), N: 1,
				P50: res.Registered, P99: res.Registered, Goal: "—"}
			cpu := Row{ID: "11c", What: fmt.Sprintf("scale: Redis CPU while %d nodes idle", plan.ScaleNodes), N: 1,
				Value: fmt.Sprintf("%.2f%% of a CPU (%.2f%% with no nodes)", res.IdleCPU, res.BaselineCPU), Goal: "—"}
			start.Err, reg.Err, cpu.Err = err, err, err
			return group(fmt.Sprintf("MasterElections (default timings) sharing one client (%s), Started at once. 11b: until HLEN of the registry hash reached the node count (polled every 10ms); nodes register after Start, announced on the registry events channel only the master reads. 11c: INFO cpu (used_cpu_sys + used_cpu_user) over %v from 2s after all registered, against an equal window before; meanwhile the server ran %.0f commands/s (inside scripts included), this process (the elections) %.2f%% of a CPU.",
				pool, res.Window.Round(100*time.Millisecond), res.IdleCommands, res.ClientCPU), []Row{start, reg, cpu})
		})
	}
	if len(plan.ScaleSet.Sizes) > 0 {
		step("herd", "scale row set: N elections with clients of their own", func() []Row {
			return scaleRows(ctx, env, plan.ScaleSet, progress)
		})
	}
	if plan.IdleSet.N > 0 {
		step("idle", fmt.Sprintf("idle herd of %d: the defaults, the large-herd set and the floor (PING)", plan.IdleSet.N), func() []Row {
			return idleRows(ctx, env, plan.IdleSet, progress)
		})
	}
	sortRows(rep.Rows)
	rep.Elapsed = time.Since(began)
	return rep
}

// opRows measures PING, the lock scripts, registration and heartbeat
// interleaved, and returns their rows and the PING p50.
func opRows(ctx context.Context, env *Env, n int) ([]Row, time.Duration) {
	c := env.NewClient()
	defer c.Close()
	var ops []Op
	defer func() {
		for _, op := range ops {
			if op.Close != nil {
				_ = op.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	info, err := exampleInfo()
	fail := func(err error) ([]Row, time.Duration) {
		return []Row{{ID: "1", What: "PING round trip", Err: err}}, 0
	}
	if err != nil {
		return fail(err)
	}
	ops = append(ops, PingOp(c), AcquireOp(c, env.LockName("acquire"), "bench-node", 30*time.Second, info))
	renew, err := RenewOp(ctx, c, env.LockName("renew"), "bench-node", 30*time.Second, info)
	if err != nil {
		return fail(err)
	}
	ops = append(ops, renew)
	check, err := CheckOp(ctx, c, env.LockName("check"), "bench-node", 30*time.Second)
	if err != nil {
		return fail(err)
	}
	ops = append(ops, check)
	reg, err := OpenRegistry(ctx, c, env.LockName("register"), registry.BackendAuto)
	if err != nil {
		return fail(err)
	}
	ops = append(ops, RegisterOp(reg, "bench-slave"))
	hb, err := HeartbeatOp(ctx, reg, "bench-slave-2")
	if err != nil {
		return fail(err)
	}
	ops = append(ops, hb, FloorOp(c))
	samples, err := MeasureInterleaved(ctx, ops, min(n/10, 500), n)
	if err != nil {
		return fail(err)
	}
	// What each call costs inside Redis, from INFO commandstats: the part
	// of a round trip that trimming a script can change.
	inside := map[string]string{}
	for _, i := range []int{0, 2, 3, 5, 6} {
		command := "evalsha"
		if i == 0 {
			command = "ping"
		}
		us, err := ServerMicros(ctx, c, ops[i], command, min(n, 2000))
		if err != nil {
			return fail(err)
		}
		inside[ops[i].Name] = fmt.Sprintf("%.2fµs", us)
	}
	// The same PING after a rest: the floor of a round trip that starts from
	// idle threads, as every round trip of the scenario rows does.
	rested, err := MeasureFromRest(ctx, ops[0], 10*time.Millisecond, min(n/10, 500))
	if err != nil {
		return fail(err)
	}
	rows := []Row{
		LatencyRow("1", "PING round trip (the baseline)", samples[0], "—",
			"One connection, calls back to back, interleaved call by call with rows 2 and 6 so load hits all alike."),
		LatencyRow("1r", "PING round trip from rest: each after 10 ms of idleness", rested, "—",
			"Same connection; pays for waking idle threads and cores on both sides, like every round trip of rows 3-5, 8 and 9a."),
		LatencyRow("2a", "acquire script, uncontested", samples[1], "≤ 1.15× row 2d", ""),
		LatencyRow("2b", "renew script", samples[2], "≤ 1.15× row 2d", ""),
		LatencyRow("2c", "check script (a slave's poll)", samples[3], "—", ""),
		LatencyRow("2d", "empty script (EVALSHA of \"return 1\"): the floor of any script call", samples[6], "—", ""),
		LatencyRow("6a", "registration (registry.Register)", samples[4], "≤ 1.5× PING", ""),
		LatencyRow("6b", "heartbeat (registry.Heartbeat)", samples[5], "≤ 1.5× PING", ""),
	}
	group(fmt.Sprintf("EVALSHA on that connection: rdb.Acquire of a free lock (%d-byte ProcessInfo; released untimed after each), rdb.Renew with the term (the master's loop), rdb.Check of a held lock (each slave, every CheckInterval). 2a-2c and 6 minus 2d is script work. Inside Redis (INFO commandstats, mean per call): PING %s, empty script %s, renew %s, check %s, heartbeat %s; the rest is loopback, go-redis and the scheduler.",
		len(info), inside["ping"], inside["empty script"], inside["renew"], inside["check"], inside["heartbeat"]), rows[2:6])
	group(fmt.Sprintf("A %d-byte slave entry, %s backend; Register writes entry, TTL and notice in one script.", exampleEntrySize(), reg.Backend()), rows[6:8])
	return rows, benchkit.Summarize(samples[0]).P50
}

// exampleInfo is a master's ProcessInfo JSON as the election encodes it.
func exampleInfo() ([]byte, error) {
	now := time.Now()
	return json.Marshal(registry.ProcessInfo{
		ProcessID: "bench-node", NodeID: "bench-node", Role: registry.RoleMaster,
		LastSeen: now, Identifier: "herdbench", RegisteredAt: now,
	})
}

// MeasureInterleaved calls the ops round-robin, warmup rounds untimed then
// n rounds timed, and returns each op's n durations in op order.
func MeasureInterleaved(ctx context.Context, ops []Op, warmup, n int) ([][]time.Duration, error) {
	for range warmup {
		for _, op := range ops {
			if err := once(ctx, op); err != nil {
				return nil, err
			}
		}
	}
	out := make([][]time.Duration, len(ops))
	for i := range out {
		out[i] = make([]time.Duration, 0, n)
	}
	for range n {
		for i, op := range ops {
			s, err := Measure(ctx, op, 0, 1)
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], s[0])
		}
	}
	return out, nil
}

// costRows runs the Go benchmarks of row 10.
func costRows(ctx context.Context, env *Env) []Row {
	c := env.NewClient()
	defer c.Close()
	info, err := exampleInfo()
	row := func(id, what string, body func(b *testing.B) error) Row {
		r := Row{ID: id, What: what, Goal: "—"}
		if err != nil {
			r.Err = err
			return r
		}
		cost, berr := RunBenchmark(body)
		r.N, r.Value, r.Err = cost.N, cost.String(), berr
		return r
	}
	renew, rerr := RenewOp(ctx, c, env.LockName("bench-renew"), "bench-node", 30*time.Second, info)
	if rerr != nil {
		err = errors.Join(err, rerr)
	}
	rows := []Row{row("10d", "allocations and CPU per renew script call (this process)", renew.BenchFunc())}
	if renew.Close != nil {
		_ = renew.Close(ctx)
	}
	rows = append(rows, row("10e", "allocations and CPU per heartbeat of the election loop (this process)", LoopRenewFunc(env)))
	check, cerr := CheckOp(ctx, c, env.LockName("bench-check"), "bench-node", 30*time.Second)
	if cerr != nil {
		err = errors.Join(err, cerr)
	}
	rows = append(rows, row("10f", "allocations and CPU per check script call (this process)", check.BenchFunc()))
	if check.Close != nil {
		_ = check.Close(ctx)
	}
	return group("Go benchmarks (testing.Benchmark, 1s): heap allocations and this process's CPU (getrusage) per call: 10d BenchmarkRenew (rdb.Renew); 10e BenchmarkLoopRenew, a master renewing back to back (HeartbeatInterval 1ms), all the process does per renewal (counted by a client hook: timers, contexts, script call, events); 10f BenchmarkCheck (rdb.Check, a slave's poll).", rows)
}

// sortRows orders rows by their number, then their letter.
func sortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool {
		ni, si := splitID(rows[i].ID)
		nj, sj := splitID(rows[j].ID)
		if ni != nj {
			return ni < nj
		}
		return si < sj
	})
}

func splitID(id string) (int, string) {
	i := strings.IndexFunc(id, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(id)
	}
	n, _ := strconv.Atoi(id[:i])
	return n, id[i:]
}

// letter numbers rows id+"a", id+"b", ... in order.
func letter(id string, rows []Row) []Row {
	for i := range rows {
		rows[i].ID = id + string(rune('a'+i%26))
	}
	return rows
}

// processesRows times Processes() at every size on every backend the
// server of env runs.
func processesRows(ctx context.Context, env *Env, server string, sizes []int) []Row {
	c := env.NewClient()
	defer c.Close()
	short := serverShort(server)
	var rows []Row
	floored := false // the HGETALL floor is measured once per server
	for _, b := range Backends {
		lock := env.LockName("registry-" + string(b))
		reg, err := OpenRegistry(ctx, c, lock, b)
		if errors.Is(err, registry.ErrBackendUnsupported) {
			rows = append(rows, Row{What: fmt.Sprintf("Processes(), %s backend (%s)", b, short), Value: "not supported by this server", Goal: "—"})
			continue
		}
		populated := 0
		for _, size := range sizes {
			what := fmt.Sprintf("Processes() with %s entries, %s backend (%s)", thousands(size), b, short)
			goal := "—"
			if size == 10000 {
				goal = "< 15ms"
			}
			row := Row{What: what, Goal: goal}
			if err == nil {
				err = Populate(ctx, reg, "p", size, 16)
				// Populate registers p-0 … p-(size-1): the earlier ones again.
				populated = size
			}
			if err == nil {
				reps := min(max(100000/size, 20), 500)
				var s []time.Duration
				s, err = Measure(ctx, ProcessesOp(reg, populated), min(reps/10, 5), reps)
				row = LatencyRow("", what, s, goal, "")
			}
			row.Err = err
			rows = append(rows, row)
			if err == nil && size == 10000 && !floored {
				floored = true
				rows = append(rows, hgetallFloor(ctx, c, lock, size, short))
			}
		}
		_ = c.Del(ctx, keyspace.NewKeys(lock, false).Processes, keyspace.NewKeys(lock, false).ProcessesExpiry).Err()
	}
	return rows
}

// hgetallFloor times a bare go-redis HGETALL of the registry hash of lock
// (size entries), read into a map and not decoded: the floor under
// Processes() on that server.
func hgetallFloor(ctx context.Context, c redis.UniversalClient, lock string, size int, short string) Row {
	what := fmt.Sprintf("floor under Processes() with %s entries: HGETALL of the same hash through go-redis, no decoding (%s)", thousands(size), short)
	key := keyspace.NewKeys(lock, false).Processes
	s, err := Measure(ctx, Op{
		Name: "hgetall",
		Do: func(ctx context.Context) error {
			m, err := c.HGetAll(ctx, key).Result()
			if err == nil && len(m) != size {
				err = fmt.Errorf("%w: HGETALL returned %d entries, %d registered", errUnexpected, len(m), size)
			}
			return err
		},
	}, 2, 20)
	row := LatencyRow("", what, s, "—", "")
	row.Err = err
	return row
}

// processesOn starts the server executable at path and measures row 7
// there, unless it is the same product and version as skip.
func processesOn(ctx context.Context, path, skip string, sizes []int) []Row {
	s, err := StartServer(ctx, path)
	if err != nil {
		return []Row{{What: "Processes() on " + path, Err: err}}
	}
	defer s.Close()
	if s.Name == skip {
		return nil
	}
	return processesRows(ctx, NewEnv(ClientOptions(s.Addr)), s.Name, sizes)
}

// serverShort is the first word of a server description: "redis-7.0.15".
func serverShort(server string) string {
	if i := strings.IndexByte(server, ' '); i > 0 {
		return server[:i]
	}
	return server
}

func exampleEntrySize() int {
	b, err := json.Marshal(slaveInfo("p-1000"))
	if err != nil {
		return 0
	}
	return len(b)
}

// thousands formats n with commas: 10000 -> "10,000".
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
