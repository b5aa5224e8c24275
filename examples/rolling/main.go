// Command rolling runs a herd of five processes with static node ids
// (c1..c5, as a StatefulSet names its pods) that share 40 items through
// package assign, then restarts the four slaves one at a time as a
// deployment does (SIGTERM, down for a while, the same id started again),
// then starts a twin of a live slave, and prints what it saw: how many
// items moved, the longest time an item had no owner, what the twin was
// told, and the overlaps (an item worked by two processes at once), which
// must be 0.
//
//	go run ./examples/rolling                                  # embedded miniredis
//	go run ./examples/rolling -redis redis://127.0.0.1:6379 -lock-ttl 6s -down 3s
//
// Every node is an OS process of its own: this program starts itself again
// with -node for each. A restarted node gets its items back with no move
// while it is down for less than assign's Grace (LockTTL × 2/3 by
// default); a twin is refused at Start with ErrDuplicateNodeID.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/examples/internal/setup"
	"github.com/herdkit/herd/masterelection"
)

// options are the demo's settings.
type options struct {
	Redis   string        // the Redis the nodes use (host:port or URL)
	Items   int           // how many items to share
	LockTTL time.Duration // the election's LockTTL; assign's timings follow it
	Down    time.Duration // how long a restarted slave stays down
}

func defaultOptions() options {
	return options{Items: 40, LockTTL: 6 * time.Second, Down: 3 * time.Second}
}

func main() {
	if os.Getenv(nodeEnv) != "" {
		os.Exit(node(os.Args[1:]))
	}
	o := defaultOptions()
	fs := setup.Flags("rolling")
	redisAddr := setup.RedisFlag(fs)
	fs.IntVar(&o.Items, "items", o.Items, "how many items to share")
	fs.DurationVar(&o.LockTTL, "lock-ttl", o.LockTTL, "the election's LockTTL (assign's timings follow it)")
	fs.DurationVar(&o.Down, "down", o.Down, "how long each restarted slave stays down")
	_ = fs.Parse(os.Args[1:])
	newClient, where, cleanup, err := setup.Connect(*redisAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rolling:", err)
		os.Exit(1)
	}
	defer cleanup()
	o.Redis = *redisAddr
	if o.Redis == "" { // the embedded server
		c := newClient()
		o.Redis = c.Options().Addr
		_ = c.Close()
	}
	fmt.Printf("herd rolling-restart demo on %s\n", where)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := run(ctx, o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rolling:", err)
		cleanup()
		os.Exit(1)
	}
	s.print(os.Stdout)
	if s.Overlaps > 0 || s.TwinItems > 0 {
		cleanup()
		os.Exit(1)
	}
}

// nodeEnv, set in a child's environment, makes the program a node.
const nodeEnv = "HERD_ROLLING_NODE"

// node is one herd process: an election, a Planner and a Worker under the
// static id given. It prints "start <item> <unix ns>" and "end <item> <unix
// ns>" for each item it works, "master"/"slave" on role changes, and runs
// until SIGTERM, when it stops in the documented order.
func node(args []string) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	var (
		addr, id string
		ttl      time.Duration
		items    int
	)
	fs.StringVar(&addr, "redis", "", "Redis address")
	fs.StringVar(&id, "id", "", "static node id")
	fs.DurationVar(&ttl, "lock-ttl", 6*time.Second, "LockTTL")
	fs.IntVar(&items, "items", 0, "set this many items once started")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	opts, err := setup.Options(addr)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var out sync.Mutex
	say := func(format string, a ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	cfg := masterelection.DefaultConfig()
	cfg.LockName, cfg.NodeID, cfg.LockTTL = "rolling", id, ttl
	e, err := masterelection.New(c, cfg)
	if err != nil {
		say("error %v", err)
		return 1
	}
	e.OnMasterAcquired(func(context.Context, int64) { say("master") })
	e.OnMasterLost(func() { say("slave") })
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := e.Start(ctx); err != nil {
		say("refused %v", err)
		return 3
	}
	p, err := assign.NewPlanner(c, e, assign.Config{})
	if err != nil {
		say("error %v", err)
		return 1
	}
	w, err := assign.NewWorker(c, e, assign.Config{})
	if err != nil {
		say("error %v", err)
		return 1
	}
	_ = w.OnAssigned(func(ctx context.Context, item string) {
		say("start %s %d", item, time.Now().UnixNano())
		<-ctx.Done()
		say("end %s %d", item, time.Now().UnixNano())
	})
	_ = w.Start(ctx)
	planned := make(chan struct{})
	go func() {
		defer close(planned)
		_ = p.Run(ctx)
	}()
	if items > 0 {
		if err := p.SetItems(ctx, names(items)...); err != nil {
			say("error %v", err)
		}
	}
	say("ready")
	<-ctx.Done()
	// The stop order of docs/tuning.md: the Planner, the Worker (its items
	// are given up), then the election (the entry is deleted).
	<-planned
	sctx, cancel := context.WithTimeout(context.Background(), ttl)
	defer cancel()
	_ = w.Stop(sctx)
	_ = e.Stop(sctx)
	return 0
}

// names returns n item names.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("item-%02d", i)
	}
	return out
}

// span is one stretch of work on an item by one process.
type span struct {
	proc       string // "<id>#<n>": the node id and which start of it
	id         string
	start, end time.Time // end is zero while it runs
}

// herd is the driver's view of the node processes and what they printed.
type herd struct {
	o   options
	out io.Writer

	mu      sync.Mutex
	spans   map[string][]*span // by item
	master  map[string]bool    // by proc
	ready   map[string]bool    // by proc
	refused map[string]string  // by proc: the error a refused node printed
	starts  map[string]int     // by id
	procs   map[string]*exec.Cmd
	exited  map[string]chan struct{}
}

// spawn starts a node process under id; extra flags are passed on.
func (h *herd) spawn(id string, extra ...string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	h.mu.Lock()
	h.starts[id]++
	proc := fmt.Sprintf("%s#%d", id, h.starts[id])
	h.mu.Unlock()
	args := append([]string{"-redis", h.o.Redis, "-id", id, "-lock-ttl", h.o.LockTTL.String()}, extra...)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), nodeEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan struct{})
	h.mu.Lock()
	h.procs[proc], h.exited[proc] = cmd, done
	h.mu.Unlock()
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.line(proc, id, sc.Text())
		}
		_ = cmd.Wait()
	}()
	return proc, nil
}

// line records one line a node printed.
func (h *herd) line(proc, id, l string) {
	f := strings.Fields(l)
	if len(f) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch f[0] {
	case "start", "end":
		if len(f) != 3 {
			return
		}
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		t := time.Unix(0, ns)
		if f[0] == "start" {
			h.spans[f[1]] = append(h.spans[f[1]], &span{proc: proc, id: id, start: t})
			return
		}
		for _, s := range h.spans[f[1]] {
			if s.proc == proc && s.end.IsZero() {
				s.end = t
			}
		}
	case "master":
		h.master[proc] = true
	case "slave":
		h.master[proc] = false
	case "ready":
		h.ready[proc] = true
	case "refused":
		h.refused[proc] = strings.TrimPrefix(l, "refused ")
	case "error":
		fmt.Fprintf(h.out, "  %s: %s\n", proc, l)
	}
}

// owned reports how many items run in exactly one process now.
func (h *herd) owned() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ss := range h.spans {
		live := 0
		for _, s := range ss {
			if s.end.IsZero() {
				live++
			}
		}
		if live == 1 {
			n++
		}
	}
	return n
}

// wait polls cond every 5 ms until it holds or within passes.
func wait(ctx context.Context, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// terminate sends SIGTERM to proc and waits for it to exit.
func (h *herd) terminate(proc string) {
	h.mu.Lock()
	cmd, done := h.procs[proc], h.exited[proc]
	h.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-done
}

// summary is what the demo saw.
type summary struct {
	Restarts   int           // slaves restarted
	Moved      int           // items that changed process id during the restarts
	LongestGap time.Duration // the longest an item had no owner during the restarts
	Twin       string        // what the twin was told ("" when it was not refused)
	TwinItems  int           // items the twin worked
	Overlaps   int           // items worked by two processes at once
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "rolling restart of %d slaves: %d items moved, longest without an owner %v\n", s.Restarts, s.Moved, s.LongestGap.Round(time.Millisecond))
	fmt.Fprintf(w, "twin of a live slave: worked %d items; refused with: %s\n", s.TwinItems, s.Twin)
	fmt.Fprintf(w, "overlaps (an item live in two processes at once): %d\n", s.Overlaps)
}

// run plays the demo against o.Redis and returns what it saw.
func run(ctx context.Context, o options, out io.Writer) (summary, error) {
	h := &herd{o: o, out: out, spans: map[string][]*span{}, master: map[string]bool{}, ready: map[string]bool{},
		refused: map[string]string{}, starts: map[string]int{}, procs: map[string]*exec.Cmd{}, exited: map[string]chan struct{}{}}
	defer func() {
		h.mu.Lock()
		var live []string
		for proc, done := range h.exited {
			select {
			case <-done:
			default:
				live = append(live, proc)
			}
		}
		h.mu.Unlock()
		for _, proc := range live {
			h.terminate(proc)
		}
	}()
	current := map[string]string{} // id -> its running proc
	for i, id := range []string{"c1", "c2", "c3", "c4", "c5"} {
		var extra []string
		if i == 0 {
			extra = []string{"-items", strconv.Itoa(o.Items)}
		}
		proc, err := h.spawn(id, extra...)
		if err != nil {
			return summary{}, err
		}
		current[id] = proc
	}
	if !wait(ctx, 30*o.LockTTL, func() bool { return h.owned() == o.Items }) {
		return summary{}, fmt.Errorf("the %d items were not all owned within %v (%d are)", o.Items, 30*o.LockTTL, h.owned())
	}
	time.Sleep(o.LockTTL / 2) // the plan settles
	fmt.Fprintf(out, "5 processes own all %d items\n", o.Items)

	var s summary
	from := time.Now()
	ids := []string{"c1", "c2", "c3", "c4", "c5"}
	for _, id := range ids {
		h.mu.Lock()
		isMaster := h.master[current[id]]
		h.mu.Unlock()
		if isMaster {
			continue
		}
		h.terminate(current[id])
		time.Sleep(o.Down)
		proc, err := h.spawn(id)
		if err != nil {
			return summary{}, err
		}
		current[id] = proc
		s.Restarts++
		if !wait(ctx, 30*o.LockTTL, func() bool { return h.owned() == o.Items }) {
			return summary{}, fmt.Errorf("after restarting %s the items were not all owned within %v (%d are)", id, 30*o.LockTTL, h.owned())
		}
		fmt.Fprintf(out, "restarted %s (down %v): all items owned again\n", id, o.Down)
	}
	time.Sleep(o.LockTTL / 2)
	s.Moved, s.LongestGap = h.moves(from)

	// A twin of a live slave.
	var victim string
	for _, id := range ids {
		h.mu.Lock()
		isMaster := h.master[current[id]]
		h.mu.Unlock()
		if !isMaster {
			victim = id
			break
		}
	}
	twin, err := h.spawn(victim)
	if err != nil {
		return summary{}, err
	}
	h.mu.Lock()
	done := h.exited[twin]
	h.mu.Unlock()
	select {
	case <-done:
	case <-time.After(30 * o.LockTTL):
		return summary{}, errors.New("the twin was not refused")
	case <-ctx.Done():
		return summary{}, ctx.Err()
	}
	h.mu.Lock()
	s.Twin = h.refused[twin]
	for _, ss := range h.spans {
		for _, sp := range ss {
			if sp.proc == twin {
				s.TwinItems++
			}
		}
	}
	h.mu.Unlock()
	fmt.Fprintf(out, "twin of %s exited\n", victim)
	s.Overlaps = h.overlaps()
	return s, nil
}

// moves counts the spans begun since from by another node id than the
// item's previous one, and the longest gap between two spans of an item.
func (h *herd) moves(from time.Time) (int, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	moved, longest := 0, time.Duration(0)
	for _, ss := range h.spans {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start.Before(ss[j].start) })
		for i := 1; i < len(ss); i++ {
			if ss[i].start.Before(from) {
				continue
			}
			if ss[i].id != ss[i-1].id {
				moved++
			}
			if !ss[i-1].end.IsZero() {
				longest = max(longest, ss[i].start.Sub(ss[i-1].end))
			}
		}
	}
	return moved, longest
}

// overlaps counts the pairs of spans of one item, by two processes, that
// ran at once.
func (h *herd) overlaps() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	now, n := time.Now(), 0
	for _, ss := range h.spans {
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				a, b := ss[i], ss[j]
				ae, be := a.end, b.end
				if ae.IsZero() {
					ae = now
				}
				if be.IsZero() {
					be = now
				}
				if a.proc != b.proc && a.start.Before(be) && b.start.Before(ae) {
					n++
				}
			}
		}
	}
	return n
}
