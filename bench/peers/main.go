// Command peers measures herd against what a user would pick instead, in
// one run on one machine: etcd's concurrency.Election on an embedded
// single-member etcd, leader loops on bsm/redislock and go-redsync/redsync,
// and the specification's polling behaviour, on a redis-server it starts
// itself. It prints one table and writes it into docs/performance.md
// between the herdpeers markers. `make bench-peers` runs it.
//
// It is a module of its own so that herd's module does not depend on the
// peers; its go.mod replaces herd with the working tree (../..).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/version"

	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/internal/testkit/redisproc"
)

func main() {
	var (
		out         = flag.String("out", "../../docs/performance.md", "document to write the table into, between the herdpeers markers ('' writes nothing)")
		server      = flag.String("redis-server", "redis-server", "redis-server executable to start")
		roundTrips  = flag.Int("roundtrips", 2000, "store round trips measured, of each store")
		solo        = flag.Int("uncontested", 100, "uncontested elections per peer")
		handoverN   = flag.Int("handovers", 100, "graceful handovers per peer")
		crashN      = flag.Int("crashes", 20, "crash failovers per peer")
		ttl         = flag.Duration("ttl", time.Second, "lock TTL of handovers and failovers, on every peer (etcd: whole seconds)")
		idleWindow  = flag.Duration("idle", 30*time.Second, "window over which idle round trips are counted (0 skips them)")
		idleProcs   = flag.Int("idle-processes", 5, "processes per peer while idle")
		sends       = flag.Int("sends", 3000, "durable sends and asynq enqueues per round (0 skips them)")
		sendWorkers = flag.Int("send-workers", 4, "slaves with a durable Consumer, and asynq's Concurrency")
		sendRounds  = flag.Int("send-rounds", 2, "rounds of sends per sender, taking turns")
		onlySends   = flag.Bool("only-sends", false, "measure the store round trips and the sends alone (writes no document)")
		quick       = flag.Bool("quick", false, "a few trials of everything: checks the program, numbers not worth keeping")
		showVersion = flag.Bool("versions", false, "print the versions measured and exit")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench-peers: ")
	instructions := instructionCalls
	if *quick {
		*roundTrips, *solo, *handoverN, *crashN, *idleWindow, *out = 100, 5, 5, 2, 3*time.Second, ""
		*sends, *sendRounds, instructions = 200, 1, 100
	}
	if *onlySends {
		*out = ""
	}
	if *showVersion {
		fmt.Println(strings.Join(versions(), "\n"))
		return
	}
	if *ttl < time.Second || *ttl%time.Second != 0 {
		log.Fatalf("-ttl %v: etcd leases have whole seconds, at least 1s", *ttl)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := run(ctx, config{
		server: *server, roundTrips: *roundTrips, uncontested: *solo, handovers: *handoverN,
		crashes: *crashN, ttl: *ttl, idleWindow: *idleWindow, idleProcesses: *idleProcs,
		sends: sendPlan{messages: *sends, workers: *sendWorkers, rounds: *sendRounds}, onlySends: *onlySends,
		instructionCalls: instructions,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.writeText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	if *out != "" {
		if err := benchkit.WriteMarkdown(*out, r.markdown(), markers); err != nil {
			log.Fatal(err)
		}
		log.Printf("table written to %s", *out)
	}
	for _, x := range r.rows {
		if x.err != nil {
			log.Fatalf("row %s (%s) failed: %v", x.id, x.peer, x.err)
		}
	}
}

type config struct {
	server                             string
	roundTrips, uncontested, handovers int
	crashes, idleProcesses             int
	ttl, idleWindow                    time.Duration
	sends                              sendPlan
	onlySends                          bool
	instructionCalls                   int // calls counted per kind in rows 5n-5p
}

// display names of the peers in the table.
var display = map[string]string{
	"herd":      "herd",
	"etcd":      "etcd concurrency.Election",
	"redislock": "bsm/redislock loop",
	"redsync":   "go-redsync/redsync loop",
	"spec":      "spec: polling, no notices",
}

func run(ctx context.Context, cfg config) (report, error) {
	start := time.Now()
	r := report{machine: benchkit.ThisMachine(), versions: versions(),
		rt: map[string]benchkit.Summary{}, rtWhat: map[string]string{}}
	rs, err := redisproc.Start(ctx, cfg.server)
	if err != nil {
		return r, err
	}
	defer rs.Close()
	es, err := startEtcd()
	if err != nil {
		return r, err
	}
	defer es.close()
	r.servers = fmt.Sprintf("%s started on 127.0.0.1 (no persistence); etcd %s embedded in this process (single member, data in a temporary directory, fsync on, heartbeat 50ms, election timeout 500ms)", rs.Name, version.Version)
	r.params = fmt.Sprintf("handovers and failovers at TTL %v on every peer: herd LockTTL %v (HeartbeatInterval and CheckInterval TTL/3, ElectionJitter TTL/15), etcd session TTL %ds, lock loops refresh every TTL/3 and poll every TTL/6; idle at TTL 30s with the same ratios (herd's defaults), %d processes per peer", cfg.ttl, cfg.ttl, int(cfg.ttl/time.Second), cfg.idleProcesses)

	rc, err := connectRedis(ctx, rs.Addr, nil)
	if err != nil {
		return r, err
	}
	defer rc.Close()
	ec, err := connectEtcd(ctx, es.endpoint, nil)
	if err != nil {
		return r, err
	}
	defer ec.Close()

	log.Printf("store round trips (%d of each)", cfg.roundTrips)
	ping, get, err := storeRoundTrips(ctx, rc, ec, cfg.roundTrips)
	if err != nil {
		return r, err
	}
	r.rt["redis"], r.rt["etcd"] = benchkit.Summarize(ping), benchkit.Summarize(get)
	r.rtWhat["redis"] = "Redis PING through go-redis, one connection"
	r.rtWhat["etcd"] = "etcd Get of one key through clientv3, linearizable (the default), one connection"

	if cfg.onlySends {
		r.rows = append(r.rows, sendRows(ctx, rs.Addr, cfg.sends)...)
		r.rows = append(r.rows, instructionRows(ctx, cfg.server, cfg.instructionCalls)...)
		r.elapsed = time.Since(start)
		return r, nil
	}
	t := timingsOf(cfg.ttl)
	traces := map[string]int{}
	herd := herdPeer(rs.Addr, nil, func(s string) { traces[s]++ })
	etcd := etcdPeer(es.endpoint)
	rl := pollingPeer("redislock", rs.Addr, nil, newRedislock)
	rsy := pollingPeer("redsync", rs.Addr, nil, newRedsync)
	spec := pollingPeer("spec", rs.Addr, nil, newSpec)
	spec.uncontested = nil // the same as herd's when nobody contends

	log.Printf("uncontested elections (%d per peer)", cfg.uncontested)
	u := uncontested(ctx, []peer{herd, etcd, rl, rsy}, cfg.uncontested)
	herdU := &row{id: "1a", what: "uncontested election: New + Start on a fresh lock until Start returns as master", peer: "herd", store: "redis", s: benchkit.Summarize(u["herd"].total), err: u["herd"].err,
		note: "A connected client; masterelection.New and Start on a lock nobody holds (Start also opens the process registry and its subscriptions); timed until Start returned with IsMaster true. What Start sent (a client hook; the subscriptions' own commands do not pass it): " + mostCommon(traces) + "."}
	r.rows = append(r.rows, *herdU,
		row{id: "1b", what: "uncontested election: NewSession + NewElection + Campaign until it returns", peer: display["etcd"], store: "etcd", s: benchkit.Summarize(u["etcd"].total), err: u["etcd"].err, herd: herdU, goal50: 0.5, goal99: 0.8,
			note: "A connected client; a session (lease grant and keep-alive stream) and a Campaign on a prefix nobody holds, as a process joining an election does."},
		row{id: "1c", what: "uncontested election: Campaign alone, on a session already open", peer: display["etcd"], store: "etcd", s: benchkit.Summarize(u["etcd"].part), err: u["etcd"].err, herd: herdU, goal50: 0.5, goal99: 0.8,
			note: "The Campaign part of 1b: a transaction and the read of the keys ahead of it."},
		row{id: "1d", what: "uncontested election: one Obtain", peer: display["redislock"], store: "redis", s: benchkit.Summarize(u["redislock"].total), err: u["redislock"].err, herd: herdU, goal50: 1, goal99: 1,
			note: "A connected client; Obtain without retries on a free key: one script call."},
		row{id: "1e", what: "uncontested election: one TryLock", peer: display["redsync"], store: "redis", s: benchkit.Summarize(u["redsync"].total), err: u["redsync"].err, herd: herdU, goal50: 1, goal99: 1,
			note: "A connected client; NewMutex and TryLockContext on a free key: one SET NX PX."},
	)

	log.Printf("graceful handovers (%d per peer, TTL %v)", cfg.handovers, cfg.ttl)
	h := handovers(ctx, []peer{herd, etcd, rl, rsy, spec}, t, cfg.handovers)
	herdH := &row{id: "2a", what: "graceful handover: leader stops → the next learns it leads", peer: "herd", store: "redis", s: benchkit.Summarize(h["herd"].samples), err: h["herd"].err,
		note: "Two processes, each with a client of its own; a new one starts and settles (50ms plus a random part of one CheckInterval), then the master's Stop is called; timed until the other's OnMasterAcquired handler runs. The release announces itself on the lock's events channel."}
	r.rows = append(r.rows, *herdH,
		row{id: "2b", what: "graceful handover: Resign → the waiter's Campaign returns", peer: display["etcd"], store: "etcd", s: benchkit.Summarize(h["etcd"].samples), err: h["etcd"].err, herd: herdH, goal50: 0.5, goal99: 0.8,
			note: "As 2a: the waiter's Campaign is blocked watching the leader's key; the leader's stop is Resign, then closing its session and client; timed from the call of Resign until the waiter's Campaign returned."},
		row{id: "2c", what: "graceful handover: Release → the next poll obtains", peer: display["redislock"], store: "redis", s: benchkit.Summarize(h["redislock"].samples), err: h["redislock"].err, herd: herdH, goal50: 1, goal99: 1,
			note: "As 2a; the leader's stop releases the lock, the waiter finds it at its next poll (every TTL/6): the handover is bounded by the poll interval, not the round trip."},
		row{id: "2d", what: "graceful handover: Unlock → the next poll locks", peer: display["redsync"], store: "redis", s: benchkit.Summarize(h["redsync"].samples), err: h["redsync"].err, herd: herdH, goal50: 1, goal99: 1,
			note: "As 2c with redsync's TryLock, Extend and Unlock."},
		row{id: "2e", what: "graceful handover: release → the next check, jitter, SET NX", peer: display["spec"], store: "redis", s: benchkit.Summarize(h["spec"].samples), err: h["spec"].err, herd: herdH, goal50: 1, goal99: 1,
			note: "The specification's behaviour without herd's release notice: slaves check the lock every CheckInterval (TTL/6) and wait a random delay of up to ElectionJitter (TTL/15) before they contend."},
	)

	log.Printf("crash failovers (%d per peer, TTL %v, 3 processes)", cfg.crashes, cfg.ttl)
	f := failovers(ctx, []peer{herd, etcd, rl, rsy, spec}, t, 3, cfg.crashes)
	herdF := &row{id: "3a", what: "crash failover: leader's connections closed → another learns it leads", peer: "herd", store: "redis", s: benchkit.Summarize(f["herd"].samples), ttl: cfg.ttl, err: f["herd"].err,
		note: "Three processes; at a random point of the master's renewal cycle its client is closed (no renewal, no release, as if killed); timed until another process's OnMasterAcquired. Slaves look at the lock at the instant it would expire."}
	r.rows = append(r.rows, *herdF,
		row{id: "3b", what: "crash failover: lease expires → the waiter's Campaign returns", peer: display["etcd"], store: "etcd", s: benchkit.Summarize(f["etcd"].samples), ttl: cfg.ttl, err: f["etcd"].err, herd: herdF, goal50: 1, goal99: 1,
			note: "As 3a; the leader's client is closed without revoking its lease (keep-alives every TTL/3 stop). etcd looks for expired leases every 500ms, which adds up to half a second to the TTL."},
		row{id: "3c", what: "crash failover: lock expires → the next poll obtains", peer: display["redislock"], store: "redis", s: benchkit.Summarize(f["redislock"].samples), ttl: cfg.ttl, err: f["redislock"].err, herd: herdF, goal50: 1, goal99: 1,
			note: "As 3a; waiters poll every TTL/6."},
		row{id: "3d", what: "crash failover: lock expires → the next poll locks", peer: display["redsync"], store: "redis", s: benchkit.Summarize(f["redsync"].samples), ttl: cfg.ttl, err: f["redsync"].err, herd: herdF, goal50: 1, goal99: 1,
			note: "As 3c."},
		row{id: "3e", what: "crash failover: lock expires → the next check, jitter, SET NX", peer: display["spec"], store: "redis", s: benchkit.Summarize(f["spec"].samples), ttl: cfg.ttl, err: f["spec"].err, herd: herdF, goal50: 1, goal99: 1,
			note: "As 2e: a check every TTL/6, then up to TTL/15 of jitter."},
	)

	if cfg.idleWindow > 0 {
		log.Printf("idle round trips (%d processes per peer, %v window)", cfg.idleProcesses, cfg.idleWindow)
		rows, err := idleRows(ctx, cfg, es.endpoint)
		if err != nil {
			return r, err
		}
		r.rows = append(r.rows, rows...)
	}
	if p := cfg.sends; p.messages > 0 && p.workers > 0 && p.rounds > 0 {
		log.Printf("durable sends beside task enqueues (%d rounds of %d, %d workers)", p.rounds, p.messages, p.workers)
		r.rows = append(r.rows, sendRows(ctx, rs.Addr, p)...)
		r.rows = append(r.rows, instructionRows(ctx, cfg.server, cfg.instructionCalls)...)
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// idleRows counts idle round trips, each Redis peer on a redis-server of
// its own, so that the server's counts of subscription traffic are that
// peer's alone.
func idleRows(ctx context.Context, cfg config, etcdEndpoint string) ([]row, error) {
	names := []string{"herd", "redislock", "redsync"}
	servers := map[string]*redis.Client{}
	addrs := map[string]string{}
	for _, name := range names {
		s, err := redisproc.Start(ctx, cfg.server)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		c, err := connectRedis(ctx, s.Addr, nil)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		servers[name], addrs[name] = c, s.Addr
	}
	peers := []peer{
		herdPeer(addrs["herd"], &rtHook{}, nil),
		etcdPeer(etcdEndpoint),
		pollingPeer("redislock", addrs["redislock"], &rtHook{}, newRedislock),
		pollingPeer("redsync", addrs["redsync"], &rtHook{}, newRedsync),
	}
	res := idle(ctx, peers, servers, timingsOf(30*time.Second), cfg.idleProcesses, cfg.idleWindow)
	mk := func(id, name, what, note string) row {
		x := res[name]
		return row{id: id, what: what, peer: display[name], value: fmt.Sprintf("%.1f /min", x.perMinute), x: x.perMinute, err: x.err,
			note: note + " Counted: " + x.detail + "."}
	}
	herdI := mk("4a", "herd", "idle round trips per process per minute", fmt.Sprintf("%d processes at default timings (LockTTL 30s, renew 10s, check 10s), idle; the client hook's round trips (a command or a pipeline each) plus the subscriptions' PINGs and (un)subscriptions from the server's INFO commandstats. Includes the process registry's heartbeats, which the peers do not have.", cfg.idleProcesses))
	out := []row{herdI}
	for _, p := range []struct{ id, name, note string }{
		{"4b", "etcd", "Session TTL 30s: a keep-alive every 10s; waiters watch, which costs no request while nothing changes. Requests counted by a gRPC client interceptor (unary calls and stream messages sent)."},
		{"4c", "redislock", "Lock TTL 30s, refresh every 10s, poll every 5s; round trips counted by a client hook."},
		{"4d", "redsync", "As 4c; a failed TryLock also sends its release script (redsync cleans up after every failed attempt), two round trips per poll."},
	} {
		x := mk(p.id, p.name, "idle round trips per process per minute", p.note)
		x.herd, x.goal50, x.goal99 = &herdI, 1, 1
		out = append(out, x)
	}
	return out, nil
}

// versions lists herd's commit and the peers' module versions.
func versions() []string {
	herd := "herd (working tree)"
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		herd = "herd " + strings.TrimSpace(string(b))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			herd += " with uncommitted changes"
		}
	}
	out := []string{herd}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	want := []struct{ path, name string }{
		{"go.etcd.io/etcd/server/v3", "etcd server"},
		{"go.etcd.io/etcd/client/v3", "etcd client"},
		{"github.com/bsm/redislock", "bsm/redislock"},
		{"github.com/go-redsync/redsync/v4", "go-redsync/redsync"},
		{"github.com/redis/go-redis/v9", "go-redis"},
		{"github.com/hibiken/asynq", "hibiken/asynq"},
	}
	for _, w := range want {
		for _, d := range bi.Deps {
			if d.Path == w.path {
				out = append(out, w.name+" "+d.Version)
			}
		}
	}
	return out
}

// mostCommon returns the most frequent key of counts, with how many of all
// it was.
func mostCommon(counts map[string]int) string {
	best, n, all := "", 0, 0
	for k, c := range counts {
		all += c
		if c > n || (c == n && k < best) {
			best, n = k, c
		}
	}
	if all == 0 {
		return "nothing recorded"
	}
	return fmt.Sprintf("%s (in %d of %d Starts)", best, n, all)
}
