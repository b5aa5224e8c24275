//go:build linux

package faults

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/redistest"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// timing is what every node of a run is started with.
type timing struct {
	ttl, heartbeat, check, jitter, margin time.Duration
	processTTL, slaveTimeout              time.Duration
	send, publishDelay                    time.Duration
	// slack is the allowance for process scheduling on a busy machine (the
	// tests share two cores with other test packages).
	slack time.Duration
}

// fastTiming keeps failovers around a second.
var fastTiming = timing{
	ttl:          time.Second,
	heartbeat:    250 * time.Millisecond,
	check:        200 * time.Millisecond,
	jitter:       50 * time.Millisecond,
	margin:       100 * time.Millisecond,
	processTTL:   2 * time.Second,
	slaveTimeout: time.Second,
	send:         20 * time.Millisecond,
	publishDelay: 2 * time.Millisecond,
	slack:        time.Second,
}

func (tm timing) params() Params {
	return Params{LockTTL: tm.ttl, ElectionJitter: tm.jitter, CheckInterval: tm.check, SlaveTimeout: tm.slaveTimeout, Slack: tm.slack,
		HeartbeatInterval: tm.heartbeat, StepDownMargin: tm.margin, ProcessTTL: tm.processTTL,
		TransferWindow: tm.ttl / 10, HandBackWindow: max(tm.ttl, tm.slaveTimeout+tm.check), RoundTrip: 50 * time.Millisecond, Reconnect: pubsub.DefaultMaxRetryDelay}
}

func (tm timing) args() []string {
	return []string{
		"-ttl", tm.ttl.String(), "-heartbeat", tm.heartbeat.String(), "-check", tm.check.String(),
		"-jitter", tm.jitter.String(), "-margin", tm.margin.String(),
		"-process-ttl", tm.processTTL.String(), "-slave-timeout", tm.slaveTimeout.String(),
		"-send", tm.send.String(), "-publish-delay", tm.publishDelay.String(),
	}
}

// nodeBinEnv names a node binary to run instead of building one: for
// example a node built from another commit, to play schedules against that
// commit's library with this tree's checkers (the binary must write the
// records this tree's checkers read).
const nodeBinEnv = "HERD_FAULTS_NODE_BIN"

// The node binary is built once per test binary run, into a directory that
// TestMain removes, unless HERD_FAULTS_NODE_BIN names one.
var nodeBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func nodeBinary(t testing.TB) string {
	t.Helper()
	nodeBin.once.Do(func() {
		if path := os.Getenv(nodeBinEnv); path != "" {
			nodeBin.path, nodeBin.err = filepath.Abs(path)
			if nodeBin.err == nil {
				_, nodeBin.err = os.Stat(nodeBin.path)
			}
			return
		}
		nodeBin.dir, nodeBin.err = os.MkdirTemp("", "herd-faults-")
		if nodeBin.err != nil {
			return
		}
		path := filepath.Join(nodeBin.dir, "node")
		args := []string{"build", "-o", path}
		if os.Getenv("HERD_FAULTS_NODE_RACE") == "1" {
			args = append(args, "-race")
		}
		args = append(args, "github.com/herdkit/herd/integration/node")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			nodeBin.err = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
			return
		}
		nodeBin.path = path
	})
	if nodeBin.err != nil {
		t.Fatalf("build the node program: %v", nodeBin.err)
	}
	return nodeBin.path
}

func removeNodeBinary() {
	if nodeBin.dir != "" {
		_ = os.RemoveAll(nodeBin.dir)
	}
}

// cluster is one run: a Redis, one toxiproxy proxy per node slot, and the
// node processes, with the merged history of all of them.
type cluster struct {
	t     testing.TB
	rng   *rand.Rand
	tm    timing
	lock  string
	bin   string
	args  []string // given to every node after the timing flags
	seq   int64    // the last fault number given out; owned by the schedule's goroutine
	redis *redistest.Instance
	admin *redis.Client
	toxi  *toxiproxy.ApiServer
	slots []*slot
	procs []*process // every process ever spawned
	keys  keyspace.Keys
	// nonCandidate is the slot whose processes run with -candidate=false,
	// or nil.
	nonCandidate *slot
	watcher      *watcher
	// forgeRegistry lets the forger forge registry notices (see
	// schedule.forgeRegistry).
	forgeRegistry bool

	// requests are the goroutines that send a control-channel request
	// again until it is honoured (requestTransfer); close waits for them.
	requests sync.WaitGroup

	mu         sync.Mutex
	recs       []Record
	violations []Violation // found by the harness while running
	unlisted   int         // live processes missing from the registry
}

// slot is one place for a node: its proxy stays, its process is replaced
// by a new incarnation (new label, new node id) when restarted.
type slot struct {
	idx      int
	priority int // its processes' -priority
	proxy    *toxiproxy.Proxy
	inc      int
	cur      *process // nil while no process runs in the slot
	// faulted is set while a fault on the slot's process is in force; owned
	// by the schedule's goroutine. Other faults are not aimed at it, and
	// the cluster counts as settled without it (see stableMaster).
	faulted bool
}

// process is one node process.
type process struct {
	label     string // also its node id, but for a twin's
	node      string // its node id: label, or a twin's peer's
	twin      bool   // started under the node id of a live process (FaultTwin), outside its slot
	slot      *slot
	candidate bool
	stdin     io.WriteCloser // the node's commands (see integration/node)
	cmd       *exec.Cmd
	done      chan struct{} // closed once reaped and its output read
	stderr    tail
	master    atomic.Int64 // term while its records say it is master
	ready     atomic.Bool
	paused    atomic.Bool
	// stored counts its KindDurableStored records, bursts its bursts that
	// ended (a KindBurst other than "begun"); quiet is set by its
	// KindDurableQuiet.
	stored, bursts atomic.Int64
	quiet          atomic.Bool
	// items are the assign items whose OnAssigned ctx its records say is
	// live, each with the ctx's serial.
	mu    sync.Mutex
	items map[string]int64
}

func (p *process) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// newCluster starts Redis on server s, the proxies, the registry watcher
// and n nodes (each given args after the timing flags, and -priority
// priorities[i] in slot i when not 0); with nonCandidate
// set, the processes of the last slot are not candidates.
func newCluster(t testing.TB, s redistest.Server, n int, tm timing, rng *rand.Rand, nonCandidate bool, priorities []int, args ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, rng: rng, tm: tm, lock: "faults", bin: nodeBinary(t), args: args}
	c.keys = keyspace.NewKeys(c.lock, false)
	c.redis = redistest.Start(t, s)
	c.admin = c.redis.Client(t)
	c.toxi = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	t.Cleanup(c.close)
	for i := range n {
		px := toxiproxy.NewProxy(c.toxi, fmt.Sprintf("slot%d", i), "127.0.0.1:0", c.redis.Addr)
		if err := px.Start(); err != nil {
			t.Fatalf("start proxy %d: %v", i, err)
		}
		sl := &slot{idx: i, proxy: px}
		if i < len(priorities) {
			sl.priority = priorities[i]
		}
		c.slots = append(c.slots, sl)
	}
	if nonCandidate && n > 1 {
		c.nonCandidate = c.slots[n-1]
	}
	c.watcher = c.watch()
	for _, sl := range c.slots {
		c.spawn(sl)
	}
	return c
}

// close kills every process still running (twins too) and stops the
// watcher and the proxies.
func (c *cluster) close() {
	c.requests.Wait()
	if c.watcher != nil {
		c.watcher.close()
	}
	for _, p := range c.procs {
		if p.alive() {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	for _, sl := range c.slots {
		sl.proxy.Stop()
	}
}

func (c *cluster) add(r Record) {
	if r.T == 0 {
		r.T = Now()
	}
	if r.Proc == "" {
		r.Proc = HarnessNode
	}
	c.mu.Lock()
	c.recs = append(c.recs, r)
	c.mu.Unlock()
}

func (c *cluster) violate(check, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, Violation{Check: check, T: Now(), Text: fmt.Sprintf(format, args...)})
}

func (c *cluster) records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), c.recs...)
}

// spawn starts a new incarnation of a node in slot sl.
func (c *cluster) spawn(sl *slot) *process {
	c.t.Helper()
	sl.inc++
	label := fmt.Sprintf("n%d.%d", sl.idx+1, sl.inc)
	p := c.start(&process{label: label, node: label, slot: sl, done: make(chan struct{}), candidate: sl != c.nonCandidate}, "")
	sl.cur = p
	return p
}

// spawnTwin starts a twin of peer: a process with peer's node id and flags,
// through the proxy of peer's slot, labelled <peer>-twin<seq>. It is not
// its slot's process: the harness stops it when its fault heals.
func (c *cluster) spawnTwin(peer *process, seq int64) *process {
	c.t.Helper()
	p := &process{label: fmt.Sprintf("%s-twin%d", peer.label, seq), node: peer.node, twin: true, slot: peer.slot,
		done: make(chan struct{}), candidate: peer.candidate}
	return c.start(p, TwinOf+peer.label)
}

// start starts process p (label, node id, slot and candidacy set) with the
// flags of its slot, and records its spawn with detail.
func (c *cluster) start(p *process, detail string) *process {
	c.t.Helper()
	sl := p.slot
	args := append([]string{"-redis", sl.proxy.Listen, "-lock", c.lock, "-id", p.node, "-proc", p.label}, c.tm.args()...)
	if !p.candidate {
		args = append(args, "-candidate=false")
	}
	if sl.priority != 0 {
		args = append(args, "-priority", strconv.Itoa(sl.priority))
	}
	args = append(args, c.args...)
	p.cmd = exec.Command(c.bin, args...)
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		c.t.Fatalf("spawn %s: %v", p.label, err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		c.t.Fatalf("spawn %s: %v", p.label, err)
	}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("spawn %s: %v", p.label, err)
	}
	c.add(Record{Kind: KindSpawn, Peer: p.label, Node: p.node, Pid: p.cmd.Process.Pid, Detail: detail})
	c.procs = append(c.procs, p)
	go c.collect(p, stdout)
	return p
}

// collect reads a node's records until its stdout closes, then reaps it.
func (c *cluster) collect(p *process, stdout interface{ Read([]byte) (int, error) }) {
	defer close(p.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		r, err := ParseRecord(sc.Bytes())
		if err != nil {
			// A process killed in the middle of a write leaves a torn line.
			c.add(Record{Kind: KindNote, Peer: p.label, Detail: err.Error()})
			continue
		}
		switch r.Kind {
		case KindAcquired:
			p.master.Store(r.Term)
		case KindLost:
			p.master.CompareAndSwap(r.Term, 0)
		case KindReady:
			p.ready.Store(true)
		case KindDurableStored:
			p.stored.Add(1)
		case KindBurst:
			if r.Detail != "begun" {
				p.bursts.Add(1)
			}
		case KindDurableQuiet:
			p.quiet.Store(true)
		case KindItemLive:
			p.mu.Lock()
			if p.items == nil {
				p.items = map[string]int64{}
			}
			p.items[r.Detail] = r.Seq
			p.mu.Unlock()
		case KindItemDone:
			p.mu.Lock()
			if p.items[r.Detail] == r.Seq {
				delete(p.items, r.Detail)
			}
			p.mu.Unlock()
		}
		c.add(r)
	}
	err := p.cmd.Wait()
	how := "exited 0"
	if err != nil {
		how = err.Error()
	}
	c.add(Record{Kind: KindDead, Peer: p.label, Node: p.node, Detail: how})
}

// live returns the running processes.
func (c *cluster) live() []*process {
	var ps []*process
	for _, sl := range c.slots {
		if p := sl.cur; p != nil && p.alive() {
			ps = append(ps, p)
		}
	}
	return ps
}

// stableMaster returns the master when the cluster is settled: every slot
// runs a ready, unpaused process, exactly one of them says it is master,
// and Redis agrees on its node id and term. A slot under a fault that is
// still in force (faults overlap) is left out, except that its process,
// when it runs, must not say it is master beside another. A twin of a
// faulted slot's process that says it is master stands for its slot: its
// peer steps aside when the twin holds the node id first, as after Redis
// lost its data while the twin ran (docs/safety.md, twins).
func (c *cluster) stableMaster(ctx context.Context) (*process, error) {
	var master *process
	for _, sl := range c.slots {
		p := sl.cur
		if sl.faulted && (p == nil || !p.alive() || p.paused.Load() || p.master.Load() == 0) {
			p = c.masterTwin(sl)
			if p == nil {
				continue
			}
		}
		switch {
		case p == nil || !p.alive():
			return nil, fmt.Errorf("slot %d has no process", sl.idx+1)
		case !p.ready.Load():
			return nil, fmt.Errorf("%s is not ready", p.label)
		case p.paused.Load():
			return nil, fmt.Errorf("%s is paused", p.label)
		case p.master.Load() != 0 && master != nil:
			return nil, fmt.Errorf("%s and %s both say they are master", master.label, p.label)
		case p.master.Load() != 0:
			master = p
		}
	}
	if master == nil {
		return nil, errors.New("no process says it is master")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := rdb.Check(cctx, c.admin, c.keys)
	switch {
	case err != nil:
		return nil, fmt.Errorf("check the lock: %w", err)
	case !st.Exists || st.NodeID != master.node || st.Term != master.master.Load():
		return nil, fmt.Errorf("%s says it is master with term %d, Redis says %q with term %d", master.label, master.master.Load(), st.NodeID, st.Term)
	}
	return master, nil
}

// masterTwin returns a live, unpaused twin started in slot sl that says it
// is master, or nil.
func (c *cluster) masterTwin(sl *slot) *process {
	for _, p := range c.procs {
		if p.twin && p.slot == sl && p.alive() && !p.paused.Load() && p.master.Load() != 0 {
			return p
		}
	}
	return nil
}

// waitStable waits until stableMaster succeeds and every live process is
// listed in the registry. Not getting there within the bound is a
// violation of liveness (failover) or membership (a process not listed).
func (c *cluster) waitStable(what string) *process {
	c.t.Helper()
	ctx := context.Background()
	bound := 3*c.tm.params().FailoverBound() + c.tm.processTTL
	deadline := time.Now().Add(bound)
	var err error
	for time.Now().Before(deadline) {
		var m *process
		if m, err = c.stableMaster(ctx); err == nil {
			if err = c.waitListed(ctx, deadline); err == nil {
				c.add(Record{Kind: KindSettled, Peer: m.label, Node: m.node, Term: m.master.Load(), Detail: what})
				return m
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.violate("liveness", "%s: not settled within %v: %v", what, bound, err)
	return nil
}

// waitListed waits until the registry lists every live process, which
// heartbeats; one missing at the deadline is counted as lost.
func (c *cluster) waitListed(ctx context.Context, deadline time.Time) error {
	reg, err := registry.New(ctx, c.admin, c.keys, registry.Config{})
	if err != nil {
		return fmt.Errorf("open the registry: %w", err)
	}
	var missing []string
	for {
		missing = missing[:0]
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		procs, err := reg.Processes(lctx)
		cancel()
		if err == nil {
			listed := map[string]bool{}
			for _, p := range procs {
				listed[p.ProcessID] = true
			}
			for _, p := range c.live() {
				if !listed[p.label] && !p.slot.faulted {
					missing = append(missing, p.label)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			c.mu.Lock()
			c.unlisted += len(missing)
			c.mu.Unlock()
			c.violate("membership", "live processes %v not listed in the registry (last error: %v)", missing, err)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slaves returns the live processes other than m that no fault in force
// holds.
func (c *cluster) slaves(m *process) []*process {
	var out []*process
	for _, p := range c.live() {
		if p != m && !p.slot.faulted {
			out = append(out, p)
		}
	}
	return out
}

// otherCandidates returns the live candidates other than m that no fault
// holds.
func (c *cluster) otherCandidates(m *process) []*process {
	var out []*process
	for _, p := range c.slaves(m) {
		if p.candidate {
			out = append(out, p)
		}
	}
	return out
}

// kill sends SIGKILL and waits until the process is reaped.
func (c *cluster) kill(p *process) {
	if p.cmd.Process.Signal(syscall.SIGKILL) == nil {
		c.add(Record{Kind: KindKilled, Peer: p.label, Node: p.node})
	}
	<-p.done
}

// terminate sends SIGTERM and waits for a graceful exit.
func (c *cluster) terminate(p *process) {
	c.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		c.violate("stop", "%s did not exit within 10s of SIGTERM", p.label)
		c.kill(p)
	}
}

// pause stops p with SIGSTOP and returns once the kernel reports it stopped.
func (c *cluster) pause(p *process) {
	c.t.Helper()
	p.paused.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", p.label, err)
	}
	if err := waitState(p.cmd.Process.Pid, true); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", p.label, err)
	}
}

func (c *cluster) resume(p *process) {
	c.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", p.label, err)
	}
	if err := waitState(p.cmd.Process.Pid, false); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", p.label, err)
	}
	p.paused.Store(false)
}

// waitState waits until /proc reports pid stopped (state T) or not.
func waitState(pid int, stopped bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return err
		}
		j := bytes.LastIndexByte(b, ')')
		if j < 0 || j+2 >= len(b) {
			return fmt.Errorf("malformed /proc/%d/stat", pid)
		}
		if (b[j+2] == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d in state %c, want stopped=%v", pid, b[j+2], stopped)
		}
		time.Sleep(time.Millisecond)
	}
}

// toxic puts a toxic of kind on the given streams between p and Redis, and
// returns the function that takes it away.
//
// Both steps replace p's proxy with a fresh one on the same address rather
// than adding or removing a toxic on the running proxy: toxiproxy v2.12.0
// can deadlock when a toxic is added or removed while one of the proxy's
// connections is closing (the collection's lock is held while it waits for
// a toxic that is blocked writing to the closed connection's writer, which
// waits for that lock). A fresh proxy gets its toxics before it accepts any
// connection. So every network fault begins and ends with p's connections
// reset, as a partition that heals through reconnection.
func (c *cluster) toxic(p *process, name, kind string, streams []string, attrs string) func() {
	c.t.Helper()
	var specs []string
	for _, s := range streams {
		specs = append(specs, fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name+"-"+s, kind, s, attrs))
	}
	sl := p.slot
	c.replaceProxy(sl, specs)
	return func() { c.replaceProxy(sl, nil) }
}

// replaceProxy stops sl's proxy and starts a new one on the same address
// with the given toxics (toxiproxy's JSON form).
func (c *cluster) replaceProxy(sl *slot, toxics []string) {
	c.t.Helper()
	addr := sl.proxy.Listen
	sl.proxy.Stop()
	px := toxiproxy.NewProxy(c.toxi, sl.proxy.Name, addr, c.redis.Addr)
	for _, js := range toxics {
		if _, err := px.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			c.t.Fatalf("add toxic %s: %v", js, err)
		}
	}
	var err error
	for try := 0; try < 50; try++ {
		if err = px.Start(); err == nil {
			sl.proxy = px
			return
		}
		time.Sleep(20 * time.Millisecond) // the old listener's port is being released
	}
	c.t.Fatalf("restart proxy of slot %d on %s: %v", sl.idx+1, addr, err)
}

// shutdown stops every node gracefully, the slaves first.
func (c *cluster) shutdown() {
	c.add(Record{Kind: KindShutdown})
	var master *process
	for _, p := range c.live() {
		if p.master.Load() != 0 {
			master = p
			continue
		}
		c.terminate(p)
	}
	if master != nil {
		// Leave the master time to see its slaves leave.
		time.Sleep(2 * c.tm.check)
		c.terminate(master)
	}
}

// stderrTails returns the end of every process's stderr.
func (c *cluster) stderrTails() string {
	var b strings.Builder
	for _, p := range c.procs {
		if s := p.stderr.String(); s != "" {
			fmt.Fprintf(&b, "--- %s stderr ---\n%s\n", p.label, s)
		}
	}
	return b.String()
}

// tail keeps the last 16 KiB written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 16<<10; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
