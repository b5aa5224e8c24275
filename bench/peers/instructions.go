package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/testkit/redisproc"
	"github.com/herdkit/herd/masterelection"
)

// instructionCalls is how many calls of each kind the instruction rows
// count (-quick counts 100): enough that what Redis does on its own
// schedule (serverCron, at hz 1 here) is a small part of each call's
// share.
const instructionCalls = 2000

// instructionRows counts the CPU instructions Redis runs per call (rows
// 5n-5p): a durable Router.Send, asynq's Client.Enqueue and a PING, each
// taking turns twice on one redis-server started under valgrind's
// callgrind, which counts only while the calls run. Unlike the times of
// rows 5g-5i, the counts do not move with what else the machine does: the
// same binary and calls give the same count within a percent or two. No
// rows when valgrind is not installed.
func instructionRows(ctx context.Context, server string, calls int) []row {
	for _, tool := range []string{"valgrind", "callgrind_control", "callgrind_annotate"} {
		if _, err := exec.LookPath(tool); err != nil {
			log.Printf("rows 5n-5p skipped: %s not found (Debian's valgrind package has the three tools)", tool)
			return nil
		}
	}
	log.Printf("Redis instructions per call under callgrind (%d calls of each, twice)", calls)
	got, err := countInstructions(ctx, server, calls)
	send := &row{id: "5n", what: "durable send inside Redis: CPU instructions per Router.Send (callgrind)", peer: "herd", store: "redis", err: err}
	enqueue := row{id: "5o", what: "task enqueue inside Redis: CPU instructions per Client.Enqueue (callgrind)", peer: "hibiken/asynq", store: "redis", err: err, herd: send}
	ping := row{id: "5p", what: "Redis PING: CPU instructions per call (callgrind), the floor of any call", peer: "go-redis", store: "redis", err: err, herd: send}
	if err == nil {
		for x, n := range map[*row]float64{send: got.send.min(), &enqueue: got.enqueue.min(), &ping: got.ping.min()} {
			x.x = n
			x.value = fmt.Sprintf("%.1fk (%.1f× PING)", n/1000, n/got.ping.min())
		}
		send.note = fmt.Sprintf("%s; a master and one registered slave (masterelection, LockTTL 30m: its renewals, checks, heartbeats and sweeps come minutes apart, none in a count), a durable.Router on the master's client, the slave's inbox created; the payload as 5a's. Redis runs inbox_send.lua (the %s registry: %s). Counted by callgrind_control around %d sends, then %d enqueues, then %d PINGs, twice in that order; each row gives the smaller of its kind's two counts, over its calls: everything the server ran meanwhile, reading the command, the script and writing the reply. The two rounds: %s.", got.server, got.backend, deadlineNote(got.backend), calls, calls, calls, got.send.text())
		enqueue.note = "As 5n: asynq's Client.Enqueue of the same payload to queue default (its enqueue script: EXISTS, HSET of the task, LPUSH), no Server running. The two rounds: " + got.enqueue.text() + "."
		ping.note = "As 5n: PING through go-redis, one connection; what reading a command and writing a reply costs Redis. The two rounds: " + got.ping.text() + "."
	}
	return []row{*send, enqueue, ping}
}

// deadlineNote says what inbox_send's registry check runs for a master
// whose registry backend is backend ("none": the Router cannot tell, and
// checks deadlines).
func deadlineNote(backend string) string {
	if backend == "emulated" || backend == "none" {
		return "HEXISTS, and ZSCORE with TIME for the slave's deadline"
	}
	return "HEXISTS alone, Redis expiring the entries itself"
}

// instructions are the counts of rows 5n-5p: instructions Redis ran per
// call of each kind, the server they ran on, and the master's registry
// backend.
type instructions struct {
	send, enqueue, ping rounds
	server, backend     string
}

// rounds are one kind's counts per call, one per round.
type rounds []float64

// min is the smallest count.
func (r rounds) min() float64 {
	m := r[0]
	for _, x := range r[1:] {
		m = min(m, x)
	}
	return m
}

// text lists the counts: "78.8k, 79.1k".
func (r rounds) text() string {
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = fmt.Sprintf("%.1fk", x/1000)
	}
	return strings.Join(parts, ", ")
}

// countInstructions starts server under callgrind and counts the
// instructions per call of each kind.
func countInstructions(ctx context.Context, server string, calls int) (got instructions, err error) {
	cg, err := startCallgrind(ctx, server)
	if err != nil {
		return got, err
	}
	defer cg.close()
	c := redis.NewClient(redisOptions(cg.addr))
	defer c.Close()

	// LockTTL alone rescales the other timings: renewals, checks,
	// heartbeats and sweeps minutes apart, none within a count.
	cfg := masterelection.DefaultConfig()
	cfg.LockName, cfg.LockTTL = "herdpeers-instructions", 30*time.Minute
	cfg.NodeID = "master"
	master, err := startElection(ctx, c, cfg)
	if err != nil {
		return got, err
	}
	defer stopElection(ctx, master)
	sc := redis.NewClient(redisOptions(cg.addr))
	defer sc.Close()
	scfg := cfg
	scfg.NodeID, scfg.NonCandidate = "worker", true
	slave, err := startElection(ctx, sc, scfg)
	if err != nil {
		return got, err
	}
	defer stopElection(ctx, slave)
	router, err := durable.NewRouter(c, master, nil, durable.Config{LockName: cfg.LockName})
	if err != nil {
		return got, err
	}
	// The slave's Consumer would create its inbox; it is closed before the
	// count so that no read wakes during it.
	con, err := durable.NewConsumer(sc, "worker", durable.Config{LockName: cfg.LockName, Terms: slave, Holds: slave.HoldsNodeID})
	if err == nil {
		err = con.Start(ctx)
	}
	if err != nil {
		return got, fmt.Errorf("herd consumer under callgrind: %w", err)
	}
	_ = con.Close()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: cg.addr})
	defer client.Close()

	kinds := []struct {
		into *rounds
		name string
		call func(i int) error
	}{
		{&got.send, "send", func(i int) error {
			_, err := router.Send(ctx, "worker", "job", job{N: i, Kind: "resize"})
			return err
		}},
		{&got.enqueue, "enqueue", func(i int) error {
			payload, err := json.Marshal(job{N: i, Kind: "resize"})
			if err == nil {
				_, err = client.EnqueueContext(ctx, asynq.NewTask("job", payload))
			}
			return err
		}},
		{&got.ping, "ping", func(int) error { return c.Ping(ctx).Err() }},
	}
	for range 2 {
		for _, k := range kinds {
			for i := range 50 { // warm: scripts cached, queues known
				if err := k.call(i); err != nil {
					return got, fmt.Errorf("%s: %w", k.name, err)
				}
			}
			n, err := cg.count(ctx, func() error {
				for i := range calls {
					if err := k.call(i); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return got, fmt.Errorf("%s: %w", k.name, err)
			}
			per := float64(n) / float64(calls)
			if per < 1000 {
				// Less than a PING's share: counting was not on (callgrind_control
				// reports its failures on its output, not its exit code).
				return got, fmt.Errorf("%s: callgrind counted %.0f instructions per call: counting was not on for the calls", k.name, per)
			}
			*k.into = append(*k.into, per)
		}
	}
	got.backend = "none"
	if reg := master.Registry(); reg != nil {
		got.backend = string(reg.Backend())
	}
	got.server = cg.name + " under valgrind --tool=callgrind (hz 1)"
	return got, nil
}

// startElection makes and starts the election of cfg.NodeID on c.
func startElection(ctx context.Context, c *redis.Client, cfg masterelection.Config) (*masterelection.MasterElection, error) {
	e, err := masterelection.New(c, cfg)
	if err == nil {
		err = e.Start(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("herd %s under callgrind: %w", cfg.NodeID, err)
	}
	return e, nil
}

// stopElection stops e within a few seconds.
func stopElection(ctx context.Context, e *masterelection.MasterElection) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = e.Stop(sctx)
}

// callgrindServer is a redis-server run under callgrind with counting off
// until count turns it on.
type callgrindServer struct {
	name, addr, dir string
	cmd             *exec.Cmd
	out             *redisproc.TailBuffer // valgrind's and the server's output
	exited          chan struct{}         // closed when the process ended
}

// startCallgrind starts server under callgrind on a free port and waits
// until it answers as the process started (another server could take the
// port between the pick and the bind).
func startCallgrind(ctx context.Context, server string) (*callgrindServer, error) {
	name, err := redisproc.Version(ctx, server)
	if err != nil {
		return nil, err
	}
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "herdpeers-callgrind-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + filepath.Join(dir, "callgrind.out.%p"), server},
		append(redisproc.Args(port, dir), "--hz", "1")...)
	cmd := exec.Command("valgrind", args...)
	cmd.Dir = dir
	out := &redisproc.TailBuffer{Limit: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = redisproc.SysProcAttr() // killed with this program
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start valgrind: %w", err)
	}
	s := &callgrindServer{name: name, addr: redisproc.Addr(port), dir: dir, cmd: cmd, out: out, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	want := "process_id:" + strconv.Itoa(cmd.Process.Pid)
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := redisproc.InfoServer(s.addr, time.Second)
		if err == nil && strings.Contains(info, want) {
			return s, nil
		}
		if err == nil {
			err = fmt.Errorf("another server answers on %s", s.addr)
		}
		select {
		case <-s.exited:
			s.close()
			return nil, fmt.Errorf("%s under callgrind exited before it answered: %s", name, strings.TrimSpace(out.String()))
		case <-ctx.Done():
			s.close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, fmt.Errorf("%s under callgrind did not answer within 60s: %w; output: %s", name, err, strings.TrimSpace(out.String()))
		}
	}
}

// control runs callgrind_control with args on the server's process. The
// tool exits 0 on most failures and says so on its output, so that is read
// too.
func (s *callgrindServer) control(ctx context.Context, args ...string) error {
	args = append(args, strconv.Itoa(s.cmd.Process.Pid))
	out, err := exec.CommandContext(ctx, "callgrind_control", args...).CombinedOutput()
	text := string(out)
	if err == nil && (strings.Contains(text, "Error") || strings.Contains(text, "No active") || strings.Contains(text, "not detected")) {
		err = errors.New("it reports a failure")
	}
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(text))
	}
	return nil
}

// count zeroes callgrind's counters, turns counting on, runs calls, turns
// it off and returns the instructions counted meanwhile.
func (s *callgrindServer) count(ctx context.Context, calls func() error) (int64, error) {
	if err := s.control(ctx, "-z"); err != nil {
		return 0, err
	}
	if err := s.control(ctx, "-i", "on"); err != nil {
		return 0, err
	}
	err := calls()
	if cerr := s.control(ctx, "-i", "off"); cerr != nil {
		return 0, cerr
	}
	if err != nil {
		return 0, err
	}
	before, _ := filepath.Glob(filepath.Join(s.dir, "callgrind.out.*"))
	if err := s.control(ctx, "-d"); err != nil {
		return 0, err
	}
	dump, err := newDump(s.dir, before)
	if err != nil {
		return 0, err
	}
	defer os.Remove(dump)
	return programTotal(ctx, dump)
}

// newDump returns the dump file in dir that is not among before.
func newDump(dir string, before []string) (string, error) {
	for range 100 {
		now, _ := filepath.Glob(filepath.Join(dir, "callgrind.out.*"))
		for _, f := range now {
			if !contains(before, f) {
				if st, err := os.Stat(f); err == nil && st.Size() > 0 {
					return f, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", errors.New("callgrind_control -d wrote no dump within 5s")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// programTotal reads the PROGRAM TOTALS line of callgrind_annotate's
// report of dump: the instructions counted.
func programTotal(ctx context.Context, dump string) (int64, error) {
	out, err := exec.CommandContext(ctx, "callgrind_annotate", dump).Output()
	if err != nil {
		return 0, fmt.Errorf("callgrind_annotate: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "PROGRAM TOTALS") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		if f[0] == "." { // nothing counted
			return 0, nil
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(f[0], ",", ""), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("callgrind_annotate: PROGRAM TOTALS %q: %w", line, err)
		}
		return n, nil
	}
	return 0, errors.New("callgrind_annotate: no PROGRAM TOTALS line")
}

func (s *callgrindServer) close() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	_ = os.RemoveAll(s.dir)
}
