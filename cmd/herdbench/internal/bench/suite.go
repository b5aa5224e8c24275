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
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
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
	}
}

// Steps are the names of the parts of a run, for Plan.Only.
var Steps = []string{"ops", "start", "contended", "handover", "transfer", "failover", "processes", "joined", "routing", "adoption", "rest", "cost", "scale"}

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
			fmt.Sprintf("Default timings, one candidate on a lock name no process uses, on a client already connected; from the call of New until Start returned as master: the registry probe, the eviction check (INFO memory), the lock check, the subscription on a connection of its own and the acquire. %d commands through the client's hooks per Start.", res.Commands))
		row.Err = err
		return []Row{row}
	})
	step("contended", fmt.Sprintf("contended election of %d", plan.Candidates), func() []Row {
		s, err := Contended(ctx, env, plan.Candidates, plan.ContendedReps)
		row := LatencyRow("3", fmt.Sprintf("contended election, %d candidates at once → one master known to all", plan.Candidates), s, "—",
			fmt.Sprintf("%d MasterElections at default timings, each with its own connected client, Start called at the same instant; timed until every Start has returned (each knows its role), exactly one master then; %d rounds.", plan.Candidates, plan.ContendedReps))
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
			fmt.Sprintf("Default timings (LockTTL 30s), 2 nodes; from the call of the master's Stop to the slave's OnMasterAcquired handler. Medians of its phases (client hooks): Stop's work before the release script is sent %s; the release's round trip %s; its reply → the slave's acquire sent (the notice, the slave's loop) %s; the acquire's round trip %s; reply → handler (event bus) %s.",
				phases[0], phases[1], phases[2], phases[3], phases[4]))
		row.Err = err
		return []Row{row}
	})
	step("transfer", "directed hand-over", func() []Row {
		s, err := Transfer(ctx, env, plan.HandoverReps)
		row := LatencyRow("4t", "directed hand-over: master Transfer(node) → master-acquired on that node", s, "within a few round trips",
			"Default timings (LockTTL 30s), 3 nodes up; from the call of the master's Transfer naming the next node to that node's OnMasterAcquired handler: the handlers' return, the release that reserves the lock for it, its notice, the named node's acquire, the event bus.")
		row.Err = err
		return []Row{row}
	})
	step("failover", "crash failover", func() []Row {
		res, err := Failover(ctx, env, plan.FailoverTTL, plan.FailoverNodes, plan.FailoverReps)
		cut := LatencyRow("5a", "crash failover: master's connection cut → master-acquired elsewhere", res.FromCut, fmt.Sprintf("≤ LockTTL + 100ms = %s", benchkit.FormatDuration(plan.FailoverTTL+100*time.Millisecond)),
			fmt.Sprintf("LockTTL %v with the default ratios (heartbeat TTL/3, check TTL/6, jitter TTL/15), %d nodes; the master's client is closed (no renew, no release) at a random point of its heartbeat cycle, so its lock has between 2/3 and all of LockTTL left.", plan.FailoverTTL, plan.FailoverNodes))
		cut.TTL = plan.FailoverTTL
		exp := LatencyRow("5b", "crash failover: lock expiry → master-acquired elsewhere", res.FromExpiry, "≤ 100ms",
			"The same failovers timed from the lock's expiry (PTTL read right after the cut, ms resolution): what failover adds to LockTTL. Slaves check at the instant the lock expires, then wait a random jitter (0 to TTL/15) before contending.")
		cut.Err, exp.Err = err, err
		return []Row{cut, exp}
	})
	step("processes", "registry: Processes()", func() []Row {
		rows := processesRows(ctx, env, rep.Server, plan.RegistrySizes)
		for _, path := range plan.RegistryServers {
			rows = append(rows, processesOn(ctx, path, serverShort(rep.Server), plan.RegistrySizes)...)
		}
		return letter("7", rows)
	})
	step("joined", "slave-registered latency", func() []Row {
		s, err := SlaveRegistered(ctx, env, plan.JoinReps)
		row := LatencyRow("8", "slave-registered latency: slave's Register → master's tracker reports the join", s, "p99 ≤ 2ms",
			"A slave's registry.Register (its own client) until OnJoin of the master's registry.SlaveTracker, which a subscription to the registry events channel feeds as the election does; a new slave each round.")
		row.Err = err
		return []Row{row}
	})
	step("routing", "routed messages", func() []Row {
		res, err := Routing(ctx, env, plan.Slaves, plan.RouteLatencyN, plan.RouteMessages, plan.RouteSenders)
		lat := LatencyRow("9a", fmt.Sprintf("routed message latency: Router.Send → slave handler, 1 master, %d slaves", plan.Slaves), res.Latency, "p99 ≤ 1ms",
			"pubsub.Router on the master's client (a real MasterElection, for the term), pubsub.Subscriber per slave with its own client; one message in flight at a time, round-robin over the slaves; a small JSON payload.")
		tput := Row{ID: "9b", What: fmt.Sprintf("routed message throughput, 1 master → %d slaves", plan.Slaves), N: res.Messages,
			Value: fmt.Sprintf("%.0f msg/s", res.Rate()), Goal: "≥ 50,000 msg/s",
			Note: fmt.Sprintf("%d messages sent with Router.Send by %d goroutines of the master at once, spread evenly over the slaves; timed until every handler had seen its share (%v). %v.", res.Messages, res.Senders, res.Elapsed.Round(time.Millisecond), res.CPU)}
		lat.Err, tput.Err = err, err
		rows := []Row{lat, tput}
		for _, batch := range []int{1, 64} {
			rate, cpu, err := RawPublish(ctx, env, plan.Slaves, plan.RouteMessages, plan.RouteSenders, batch)
			r := Row{ID: fmt.Sprintf("9%c", 'c'+len(rows)-2), N: plan.RouteMessages, Value: fmt.Sprintf("%.0f msg/s", rate), Goal: "—", Err: err}
			if batch == 1 {
				r.What = "floor under 9b: plain PUBLISH, one message per round trip"
				r.Note = fmt.Sprintf("The same traffic without herd: %d goroutines PUBLISH a 200-byte payload to %d plain go-redis subscriptions, one PUBLISH per round trip as Router.Send; what this machine allows without batching. %v.", plan.RouteSenders, plan.Slaves, cpu)
			} else {
				r.What = fmt.Sprintf("plain PUBLISH pipelined, %d messages per round trip", batch)
				r.Note = fmt.Sprintf("As 9c with %d PUBLISH commands per pipeline: what batching would allow. %v.", batch, cpu)
			}
			rows = append(rows, r)
		}
		b, err := RoutingBatch(ctx, env, plan.Slaves, plan.RouteMessages, plan.RouteSenders, plan.RouteBatch)
		rows = append(rows, Row{ID: "9e", What: fmt.Sprintf("routed message throughput with Router.SendBatch, %d messages per call, 1 master → %d slaves", b.Batch, plan.Slaves),
			N: b.Messages, Value: fmt.Sprintf("%.0f msg/s", b.Rate()), Goal: "≥ 50,000 msg/s", Err: err,
			Note: fmt.Sprintf("As 9b, but each of the %d goroutines sends its share with Router.SendBatch, %d messages per call: %d script calls in all, each one round trip and one fencing check for all its messages (route_batch.lua); timed until every handler had seen its share (%v). The herd counterpart of 9d. %v.",
				b.Senders, b.Batch, b.Calls, b.Elapsed.Round(time.Millisecond), b.CPU)})
		return append(rows, durableRows(ctx, env, plan)...)
	})
	step("adoption", fmt.Sprintf("durable backlog: adoption of %d entries, failover", plan.Backlog), func() []Row {
		return adoptionRows(ctx, env, plan)
	})
	step("rest", "cost at rest", func() []Row {
		res, err := CostAtRest(ctx, env, plan.RestProcesses, plan.RestWindow)
		rt := Row{ID: "10a", What: "round trips per process per minute at rest, default timings", N: plan.RestProcesses,
			Value: fmt.Sprintf("%.1f /min", res.RoundTrips), Goal: "—",
			Note: fmt.Sprintf("%d processes (1 master, %d slaves) at default timings, idle; INFO commandstats deltas over a %v window scaled to one minute, per process: %s. Through the command path only (client hook; a subscription's PINGs do not pass it): master %.1f /min, slave %.1f /min.",
				res.Processes, res.Processes-1, res.Window.Round(100*time.Millisecond), res.Breakdown(true), res.MasterSent, res.SlaveSent)}
		ex := Row{ID: "10b", What: "Redis commands executed per process per minute at rest (inside scripts included)", N: plan.RestProcesses,
			Value: fmt.Sprintf("%.1f /min", res.Executed), Goal: "—",
			Note: "Same window; the commands the scripts run: " + res.Breakdown(false) + "."}
		cpu := Row{ID: "10c", What: "CPU time of this process per herd process per minute at rest", N: plan.RestProcesses,
			Value: benchkit.FormatDuration(res.ClientCPU) + " /min", Goal: "—",
			Note: "Same window: this process's CPU time (getrusage), which ran the processes' elections and nothing else, per process, scaled to a minute."}
		rt.Err, ex.Err, cpu.Err = err, err, err
		return []Row{rt, ex, cpu}
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
				P50: res.ToMaster, P99: res.ToMaster, Goal: "—",
				Note: fmt.Sprintf("%d MasterElections at default timings sharing one client (%s), Start called at the same instant; one measurement, so p50 = p99.", plan.ScaleNodes, pool)}
			reg := Row{ID: "11b", What: fmt.Sprintf("scale: %d nodes → all listed in the registry", plan.ScaleNodes), N: 1,
				P50: res.Registered, P99: res.Registered, Goal: "—",
				Note: "From the same instant until HLEN of the registry hash reached the number of nodes (polled every 10ms): each node registers itself after Start; registrations are announced on the registry events channel, which only the master reads."}
			cpu := Row{ID: "11c", What: fmt.Sprintf("scale: Redis CPU while %d nodes idle", plan.ScaleNodes), N: 1,
				Value: fmt.Sprintf("%.2f%% of a CPU (%.2f%% with no nodes)", res.IdleCPU, res.BaselineCPU), Goal: "—",
				Note: fmt.Sprintf("INFO cpu (used_cpu_sys + used_cpu_user) deltas over %v starting 2s after all were registered, against a window of the same length before the nodes started; the server executed %.0f commands/s meanwhile (inside scripts included); this process, running the elections, used %.2f%% of a CPU.",
					res.Window.Round(100*time.Millisecond), res.IdleCommands, res.ClientCPU)}
			start.Err, reg.Err, cpu.Err = err, err, err
			return []Row{start, reg, cpu}
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
	insideNote := fmt.Sprintf(" Inside Redis (INFO commandstats, mean per call): PING %s, empty script %s, renew %s, check %s, heartbeat %s; the rest of each round trip is loopback, go-redis and the scheduler.",
		inside["ping"], inside["empty script"], inside["renew"], inside["check"], inside["heartbeat"])
	rows := []Row{
		LatencyRow("1", "PING round trip (the baseline)", samples[0], "—",
			"One client, one connection, calls one after the other; the operations of rows 1, 2 and 6 are interleaved call by call so that load on the machine affects them alike."),
		LatencyRow("1r", "PING round trip from rest: each after 10 ms of idleness", rested, "—",
			"The same client and connection, each PING sent after this goroutine slept 10 ms: the round trip pays for waking the idle threads and cores on both sides. Every round trip of the scenario rows (3-5, 8, 9a) starts from rest; row 1 is the floor of calls sent back to back."),
		LatencyRow("2a", "acquire script, uncontested", samples[1], "≤ 1.15× row 2d",
			"scripts.Acquire on a free lock with a ProcessInfo JSON of "+fmt.Sprint(len(info))+" bytes (EVALSHA); the lock is released untimed after each call."),
		LatencyRow("2b", "renew script", samples[2], "≤ 1.15× row 2d", "scripts.Renew with the term, as the master's loop calls it (EVALSHA)."),
		LatencyRow("2c", "check script (a slave's poll)", samples[3], "—", "scripts.Check of a held lock, as every slave calls it each CheckInterval (EVALSHA)."),
		LatencyRow("2d", "empty script (EVALSHA of \"return 1\"): the floor of any script call", samples[6], "—", "What calling a script costs before it does anything; rows 2a-2c and 6 minus this is the work of their scripts."+insideNote),
		LatencyRow("6a", "registration (registry.Register)", samples[4], "≤ 1.5× PING",
			fmt.Sprintf("registry.Register of a slave entry (%d bytes of JSON) on the %s backend: entry, TTL and notice in one script.", exampleEntrySize(), reg.Backend())),
		LatencyRow("6b", "heartbeat (registry.Heartbeat)", samples[5], "≤ 1.5× PING",
			fmt.Sprintf("registry.Heartbeat of that entry on the %s backend.", reg.Backend())),
	}
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
	row := func(id, what, note string, body func(b *testing.B) error) Row {
		r := Row{ID: id, What: what, Goal: "—", Note: note}
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
	rows := []Row{row("10d", "allocations and CPU per renew script call (this process)",
		"Go benchmark BenchmarkRenew (testing.Benchmark, 1s): heap allocations and this process's CPU time (getrusage) per scripts.Renew call.", renew.BenchFunc())}
	if renew.Close != nil {
		_ = renew.Close(ctx)
	}
	rows = append(rows, row("10e", "allocations and CPU per heartbeat of the election loop (this process)",
		"Go benchmark BenchmarkLoopRenew: a master with HeartbeatInterval 1ms renews back to back; per renewal counted by a client hook, everything the process does (timers, contexts, script call, event plumbing).", LoopRenewFunc(env)))
	check, cerr := CheckOp(ctx, c, env.LockName("bench-check"), "bench-node", 30*time.Second)
	if cerr != nil {
		err = errors.Join(err, cerr)
	}
	rows = append(rows, row("10f", "allocations and CPU per check script call (this process)",
		"Go benchmark BenchmarkCheck: per scripts.Check call, as a slave polls.", check.BenchFunc()))
	if check.Close != nil {
		_ = check.Close(ctx)
	}
	return rows
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
		if len(rows) > 0 && err == nil {
			rows[len(rows)-len(sizes)].Note = fmt.Sprintf("registry.Registry.Processes() on the %s backend with that many slave entries (about %d bytes of JSON each), read and decoded; registered beforehand by 16 goroutines.", b, exampleEntrySize())
		}
		_ = c.Del(ctx, scripts.NewKeys(lock, false).Processes, scripts.NewKeys(lock, false).ProcessesExpiry).Err()
	}
	return rows
}

// hgetallFloor times a bare go-redis HGETALL of the registry hash of lock
// (size entries), read into a map and not decoded: the floor under
// Processes() on that server.
func hgetallFloor(ctx context.Context, c redis.UniversalClient, lock string, size int, short string) Row {
	what := fmt.Sprintf("floor under Processes() with %s entries: HGETALL of the same hash through go-redis, no decoding (%s)", thousands(size), short)
	key := scripts.NewKeys(lock, false).Processes
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
