package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/internal/testkit/redisproc"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

// ScaleSet is the plan of the scale row set (rows 13-15, issue 28): a herd
// of N processes simulated as N MasterElections in this process, each on a
// go-redis client of its own (as N processes have) with a pubsub.Subscriber
// on it (as a slave that receives routed messages has), LockTTL 3 s and
// the library's defaults otherwise, measured at every size of Sizes.
type ScaleSet struct {
	// Sizes are the herd sizes N measured, in order; the first is the base
	// of the handover ratio. Empty skips the set.
	Sizes []int
	// Storm, when positive, also counts the error events of Storm elections
	// started at once (nothing else is measured at that size).
	Storm int
	// LockTTL is every election's lock TTL; its other timings are the
	// library's defaults for it.
	LockTTL time.Duration
	// Handovers and Failovers are the graceful handovers and crash
	// failovers per size; Broadcasts the Broadcasts timed per size.
	Handovers, Failovers, Broadcasts int
	// Idle is the idle window of the CPU and command rows.
	Idle time.Duration
}

// DefaultScaleSet is what `make bench` measures: N = 10, 100, 1,000.
func DefaultScaleSet() ScaleSet {
	return ScaleSet{
		Sizes:      []int{10, 100, 1000},
		LockTTL:    3 * time.Second,
		Handovers:  9,
		Failovers:  3,
		Broadcasts: 20,
		Idle:       6 * time.Second,
	}
}

// QuickScaleSet checks the set works in seconds, at small N.
func QuickScaleSet() ScaleSet {
	return ScaleSet{
		Sizes:      []int{10, 100},
		LockTTL:    3 * time.Second,
		Handovers:  2,
		Failovers:  1,
		Broadcasts: 5,
		Idle:       2 * time.Second,
	}
}

// MaxScaleSizes is the most sizes a set may have: each of rows 13 and 14
// holds five measurements per size (and the storm's), one letter each.
const MaxScaleSizes = 5

// ParseScaleSizes reads a comma-separated list of herd sizes ("10,100,1000").
func ParseScaleSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			return nil, fmt.Errorf("herd size %q: want a whole number of at least 2", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no herd size given")
	}
	if len(out) > MaxScaleSizes {
		return nil, fmt.Errorf("%d herd sizes: at most %d", len(out), MaxScaleSizes)
	}
	return out, nil
}

// ScalePoint is what MeasureScale measured at one herd size.
type ScalePoint struct {
	// N is the number of elections; LockTTL their lock TTL.
	N       int
	LockTTL time.Duration

	// StartTook is the time from starting all N at once until every Start
	// had returned. StartErrors counts the error events the N elections
	// emitted meanwhile (and in the second after); StartFailed the Starts
	// that returned an error.
	StartTook   time.Duration
	StartErrors int
	StartFailed int
	// StartKinds and LaterKinds are the error events' messages (digits
	// blanked, cut short) with their counts, during the start and later.
	StartKinds, LaterKinds map[string]int

	// ConnsBase is the server's connected_clients before the herd (the
	// benchmark's own); ConnsNoSub and ConnsSub are the connections above
	// it per process, settled, before and after each process started its
	// Subscriber.
	ConnsBase            int
	ConnsNoSub, ConnsSub float64

	// Idle is the idle window (every Subscriber running); IdleCPU the
	// server's CPU in it (percent of one CPU); Commands the server's
	// total_commands_processed per second per process (commands sent by
	// clients), Executed every command per second per process (INFO
	// commandstats: the commands scripts run included, INFO left out);
	// PerSecond the top-level commands per process per second by name;
	// ClientCPU this process's CPU (percent of one CPU; it runs the herd).
	Idle      time.Duration
	IdleCPU   float64
	Commands  float64
	Executed  float64
	PerSecond map[string]float64
	ClientCPU float64

	// Broadcast is, per Broadcast from the master, the time from its call
	// until every one of the N-1 slaves' handlers had the message;
	// BroadcastCall until the call returned.
	Broadcast, BroadcastCall []time.Duration

	// HandoverAcquires is, per graceful handover, the acquire script calls
	// (EVALSHA of rdb.AcquireRegisterSHA or rdb.AcquireSHA, seen by a hook on every client) from
	// the master's Stop until a second after it (or half a second after the
	// takeover, if later); Handover the time from the call of Stop until
	// another node's OnMasterAcquired; StopTook until Stop returned.
	HandoverAcquires []int
	Handover         []time.Duration
	StopTook         []time.Duration

	// FailoverAcquires is, per crash failover (the master's client closed:
	// no renewal, no release), the acquire script calls of the other nodes
	// from the cut until a second after the takeover; Failover the time
	// from the cut until another node's OnMasterAcquired; FromExpiry from
	// the lock's expiry (PTTL read after the cut) until then.
	FailoverAcquires []int
	Failover         []time.Duration
	FromExpiry       []time.Duration

	// LaterErrors counts the error events after the start (crashed nodes
	// left out once cut); Removed the slave-removed events; Masters the
	// most nodes seen master at once after a takeover (crashed ones left
	// out): 1 unless the election is broken.
	LaterErrors int
	Removed     int
	Masters     int
}

// scaleNode is one simulated process: an election and a Subscriber on a
// client of its own, with a hook counting the client's acquire attempts.
type scaleNode struct {
	m        *masterelection.MasterElection
	c        *redis.Client
	sub      *pubsub.Subscriber
	acquires atomic.Int64
	errs     atomic.Int64
	crashed  atomic.Bool // cut: its errors are no longer counted
}

func (n *scaleNode) DialHook(next redis.DialHook) redis.DialHook { return next }

func (n *scaleNode) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		n.countAcquire(cmd)
		return next(ctx, cmd)
	}
}

func (n *scaleNode) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			n.countAcquire(cmd)
		}
		return next(ctx, cmds)
	}
}

func (n *scaleNode) countAcquire(cmd redis.Cmder) {
	if args := cmd.Args(); len(args) > 1 && cmd.Name() == "evalsha" {
		if sha, _ := args[1].(string); sha == rdb.AcquireSHA || sha == rdb.AcquireRegisterSHA {
			n.acquires.Add(1)
		}
	}
}

// scaleTakeover is one OnMasterAcquired call.
type scaleTakeover struct {
	n  *scaleNode
	at time.Time
}

// scaleHerd is the N simulated processes of one size.
type scaleHerd struct {
	env      *Env
	lock     string
	ttl      time.Duration
	seq      int
	nodes    []*scaleNode
	acquired chan scaleTakeover
	removed  atomic.Int64
	kinds    scaleErrorKinds // of the error events counted
	started  atomic.Bool
	fan      scaleFanIn
}

// scaleFanIn tells when every slave's handler has had the Broadcast armed last.
type scaleFanIn struct {
	seq, got, target atomic.Int64
	done             atomic.Pointer[chan time.Time]
}

func (f *scaleFanIn) arm(seq, target int64) chan time.Time {
	ch := make(chan time.Time, 1)
	f.got.Store(0)
	f.target.Store(target)
	f.done.Store(&ch)
	f.seq.Store(seq)
	return ch
}

func (f *scaleFanIn) handle(_ context.Context, m pubsub.Message) error {
	var p benchPayload
	if err := m.Decode(&p); err != nil {
		return err
	}
	if int64(p.Seq) != f.seq.Load() {
		return nil
	}
	if f.got.Add(1) == f.target.Load() {
		if ch := f.done.Load(); ch != nil {
			select {
			case *ch <- time.Now():
			default:
			}
		}
	}
	return nil
}

const scaleBroadcastType = "scale-broadcast"

// newNode makes one more process (not started): a client of its own with
// the acquire hook, an election with LockTTL h.ttl and default timings
// otherwise.
func (h *scaleHerd) newNode() (*scaleNode, error) {
	h.seq++
	n := &scaleNode{c: h.env.NewClient()}
	n.c.AddHook(n)
	id := fmt.Sprintf("scale-%d", h.seq)
	m, err := masterelection.New(n.c, masterelection.Config{LockName: h.lock, NodeID: id, Identifier: id, LockTTL: h.ttl})
	if err != nil {
		_ = n.c.Close()
		return nil, err
	}
	n.m = m
	m.OnMasterAcquired(func(context.Context, int64) {
		select {
		case h.acquired <- scaleTakeover{n: n, at: time.Now()}:
		default:
		}
	})
	m.OnError(func(err error) {
		if !n.crashed.Load() {
			n.errs.Add(1)
			h.kinds.add(h.started.Load(), err)
		}
	})
	m.OnSlaveRemoved(func(string) { h.removed.Add(1) })
	return n, nil
}

// startSub starts n's Subscriber on its own client.
func (h *scaleHerd) startSub(ctx context.Context, n *scaleNode) error {
	s, err := pubsub.NewSubscriber(n.c, n.m.NodeID(), pubsub.Config{LockName: h.lock, Terms: n.m})
	if err != nil {
		return err
	}
	if err := s.Handle(scaleBroadcastType, h.fan.handle); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("start the Subscriber of %s: %w", n.m.NodeID(), err)
	}
	n.sub = s
	return nil
}

// close stops n: its Subscriber, its election (bounded: a crashed node's
// release fails), its client.
func (n *scaleNode) close(ctx context.Context) {
	if n.sub != nil {
		_ = n.sub.Close()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = n.m.Stop(sctx)
	cancel()
	_ = n.c.Close()
}

// close stops every node, slaves first and concurrently, masters last (so
// that no release sets off an election among nodes being stopped anyway).
func (h *scaleHerd) close(ctx context.Context) {
	closeSlavesFirst(h.nodes, func(n *scaleNode) bool { return n.m.IsMaster() && !n.crashed.Load() },
		func(n *scaleNode) { n.close(ctx) })
	h.nodes = nil
}

// scaleEach calls f for every node, at most 64 at once, and joins the errors.
func scaleEach(nodes []*scaleNode, f func(*scaleNode) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// live returns the nodes not cut.
func (h *scaleHerd) live() []*scaleNode {
	var out []*scaleNode
	for _, n := range h.nodes {
		if !n.crashed.Load() {
			out = append(out, n)
		}
	}
	return out
}

// master returns the one live master; an error when there are none or more.
func (h *scaleHerd) master() (*scaleNode, error) {
	var ms []*scaleNode
	for _, n := range h.live() {
		if n.m.IsMaster() {
			ms = append(ms, n)
		}
	}
	if len(ms) != 1 {
		return nil, fmt.Errorf("%d masters among %d live nodes", len(ms), len(h.live()))
	}
	return ms[0], nil
}

// masters counts the live nodes that are master.
func (h *scaleHerd) masters() int {
	k := 0
	for _, n := range h.live() {
		if n.m.IsMaster() {
			k++
		}
	}
	return k
}

func (h *scaleHerd) errorEvents() int {
	k := 0
	for _, n := range h.nodes {
		k += int(n.errs.Load())
	}
	return k
}

// acquireCounts snapshots every node's acquire attempts.
func (h *scaleHerd) acquireCounts() map[*scaleNode]int64 {
	out := make(map[*scaleNode]int64, len(h.nodes))
	for _, n := range h.nodes {
		out[n] = n.acquires.Load()
	}
	return out
}

// acquiresSince sums the acquire attempts since before of every node but skip.
func (h *scaleHerd) acquiresSince(before map[*scaleNode]int64, skip *scaleNode) int {
	k := int64(0)
	for _, n := range h.nodes {
		if n != skip {
			k += n.acquires.Load() - before[n]
		}
	}
	return int(k)
}

func (h *scaleHerd) drainAcquired() {
	for {
		select {
		case <-h.acquired:
		default:
			return
		}
	}
}

// waitTakeover waits for OnMasterAcquired on a node other than old.
func (h *scaleHerd) waitTakeover(ctx context.Context, old *scaleNode, within time.Duration) (scaleTakeover, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case t := <-h.acquired:
			if t.n != old {
				return t, nil
			}
		case <-deadline.C:
			return scaleTakeover{}, fmt.Errorf("no node took over within %v", within)
		case <-ctx.Done():
			return scaleTakeover{}, ctx.Err()
		}
	}
}

// replace swaps old (stopped or cut) for a fresh process, started with its
// Subscriber, so the herd keeps its size.
func (h *scaleHerd) replace(ctx context.Context, old *scaleNode) error {
	old.close(ctx)
	n, err := h.newNode()
	if err != nil {
		return err
	}
	for i := range h.nodes {
		if h.nodes[i] == old {
			h.nodes[i] = n
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.m.Start(sctx); err != nil {
		return fmt.Errorf("start a replacement: %w", err)
	}
	return h.startSub(ctx, n)
}

// startStorm makes n nodes and starts them all at the same instant: the
// time until every Start returned, the error events meanwhile and in the
// second after, and the Starts that failed. The nodes are h.nodes.
func (h *scaleHerd) startStorm(ctx context.Context, n int) (took time.Duration, errEvents, failed int, err error) {
	for range n {
		nd, err := h.newNode()
		if err != nil {
			return 0, 0, 0, err
		}
		h.nodes = append(h.nodes, nd)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	gate := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range h.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			errs[i] = nd.m.Start(sctx)
		}()
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	took = time.Since(t0)
	if err := sleep(ctx, time.Second); err != nil { // error handlers run on their own goroutines
		return took, 0, 0, err
	}
	for _, e := range errs {
		if e != nil {
			failed++
		}
	}
	if failed > 0 {
		err = fmt.Errorf("%d of %d Starts failed, the first: %w", failed, n, errors.Join(errs...))
	} else if k := h.masters(); k != 1 {
		err = fmt.Errorf("%d masters among %d nodes after every Start returned", k, n)
	}
	h.started.Store(true)
	return took, h.errorEvents(), failed, err
}

// scaleSnap is one INFO reading of the server.
type scaleSnap struct {
	at        time.Time
	clients   int
	commands  int64 // total_commands_processed
	cpu       float64
	cmdstats  benchkit.CommandStats
	processed time.Duration // this process's CPU
}

func snapScale(ctx context.Context, admin redis.UniversalClient) (scaleSnap, error) {
	info, err := admin.Info(ctx, "clients", "cpu", "stats", "commandstats").Result()
	if err != nil {
		return scaleSnap{}, fmt.Errorf("INFO: %w", err)
	}
	s := scaleSnap{at: time.Now(), cmdstats: benchkit.ParseCommandStats(info)}
	s.processed, _ = processCPU()
	v, ok := redisproc.InfoField(info, "connected_clients")
	if s.clients, err = strconv.Atoi(v); !ok || err != nil {
		return s, fmt.Errorf("INFO clients: connected_clients %q", v)
	}
	v, ok = redisproc.InfoField(info, "total_commands_processed")
	if s.commands, err = strconv.ParseInt(v, 10, 64); !ok || err != nil {
		return s, fmt.Errorf("INFO stats: total_commands_processed %q", v)
	}
	s.cpu, err = ServerCPU(info)
	return s, err
}

// scaleClients reads connected_clients until two readings 200ms apart
// agree (the server notices closed connections asynchronously), for at most
// 10s; the last reading otherwise.
func scaleClients(ctx context.Context, admin redis.UniversalClient) (int, error) {
	prev := -1
	for t0 := time.Now(); ; {
		s, err := snapScale(ctx, admin)
		if err != nil {
			return 0, err
		}
		if s.clients == prev || time.Since(t0) > 10*time.Second {
			return s.clients, nil
		}
		prev = s.clients
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// MeasureScale measures the scale rows at herd size n: all n start at once
// (error events counted), then connections per process without and with a
// Subscriber each, the idle server, Broadcasts from the master,
// set.Handovers graceful handovers and set.Failovers crash failovers (the
// stopped or cut master replaced by a fresh process each time). It
// returns what it measured up to an error.
func MeasureScale(ctx context.Context, env *Env, set ScaleSet, n int) (p ScalePoint, err error) {
	p = ScalePoint{N: n, LockTTL: set.LockTTL, Masters: 1}
	if n < 2 {
		return p, fmt.Errorf("scale needs at least 2 processes, got %d", n)
	}
	admin := env.NewClient()
	defer admin.Close()
	if err := rdb.Load(ctx, admin); err != nil { // no NOSCRIPT fallback in what is counted
		return p, err
	}
	if p.ConnsBase, err = scaleClients(ctx, admin); err != nil {
		return p, err
	}
	h := &scaleHerd{env: env, lock: env.LockName(fmt.Sprintf("scale%d", n)), ttl: set.LockTTL, acquired: make(chan scaleTakeover, 64)}
	defer func() { h.close(ctx) }()
	defer func() {
		if len(h.nodes) > 0 {
			p.LaterErrors = h.errorEvents() - p.StartErrors
			p.Removed = int(h.removed.Load())
			p.StartKinds, p.LaterKinds = h.kinds.counts()
		}
	}()

	// Row 14: the start storm.
	p.StartTook, p.StartErrors, p.StartFailed, err = h.startStorm(ctx, n)
	if err != nil {
		return p, fmt.Errorf("start: %w", err)
	}
	master, err := h.master()
	if err != nil {
		return p, err
	}
	// Every slave registered and listed, as Broadcast will list them.
	for t0 := time.Now(); ; {
		slaves, err := master.m.Slaves(ctx)
		if err == nil && len(slaves) == n-1 {
			break
		}
		if time.Since(t0) > 30*time.Second {
			return p, fmt.Errorf("the master lists %d of %d slaves 30s after the start (last error: %v)", len(slaves), n-1, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return p, err
		}
	}

	// Row 14: connections per process, without and with a Subscriber.
	if err := sleep(ctx, time.Second); err != nil {
		return p, err
	}
	c, err := scaleClients(ctx, admin)
	if err != nil {
		return p, err
	}
	p.ConnsNoSub = float64(c-p.ConnsBase) / float64(n)
	if err := scaleEach(h.nodes, func(nd *scaleNode) error { return h.startSub(ctx, nd) }); err != nil {
		return p, err
	}
	if err := sleep(ctx, time.Second); err != nil {
		return p, err
	}
	if c, err = scaleClients(ctx, admin); err != nil {
		return p, err
	}
	p.ConnsSub = float64(c-p.ConnsBase) / float64(n)

	// Row 14: the idle server.
	s0, err := snapScale(ctx, admin)
	if err != nil {
		return p, err
	}
	if err := sleep(ctx, set.Idle); err != nil {
		return p, err
	}
	s1, err := snapScale(ctx, admin)
	if err != nil {
		return p, err
	}
	p.Idle = s1.at.Sub(s0.at)
	secs := p.Idle.Seconds()
	p.IdleCPU = (s1.cpu - s0.cpu) / secs * 100
	p.ClientCPU = float64(s1.processed-s0.processed) / float64(p.Idle) * 100
	// The first INFO is counted in the second's total, not in its own.
	p.Commands = float64(s1.commands-s0.commands-1) / secs / float64(n)
	executed := s1.cmdstats.Sub(s0.cmdstats)
	p.Executed = float64(executed.Total("info")) / secs / float64(n)
	p.PerSecond = map[string]float64{}
	for name, k := range executed {
		if slices.Contains(topLevel, name) {
			p.PerSecond[name] = float64(k) / secs / float64(n)
		}
	}

	// Row 15: Broadcast from the master to its n-1 slaves.
	if master, err = h.master(); err != nil {
		return p, err
	}
	router, err := pubsub.NewRouter(master.c, master.m, master.m, pubsub.Config{LockName: h.lock})
	if err != nil {
		return p, err
	}
	for i := range 2 + set.Broadcasts { // 2 untimed: the slaves verify the term once
		done := h.fan.arm(int64(i), int64(n-1))
		t0 := time.Now()
		delivered, err := router.Broadcast(ctx, scaleBroadcastType, benchPayload{Seq: i})
		called := time.Since(t0)
		if err != nil {
			return p, fmt.Errorf("broadcast %d: %w", i+1, err)
		}
		if delivered != n-1 {
			return p, fmt.Errorf("broadcast %d reached %d of %d slaves", i+1, delivered, n-1)
		}
		select {
		case at := <-done:
			if i >= 2 {
				p.Broadcast = append(p.Broadcast, at.Sub(t0))
				p.BroadcastCall = append(p.BroadcastCall, called)
			}
		case <-time.After(10 * time.Second):
			return p, fmt.Errorf("broadcast %d: %d of %d slaves' handlers had it 10s after", i+1, h.fan.got.Load(), n-1)
		case <-ctx.Done():
			return p, ctx.Err()
		}
	}

	// Row 13: graceful handovers.
	for r := range set.Handovers {
		acq, took, stopTook, err := h.handover(ctx)
		if err != nil {
			return p, fmt.Errorf("handover %d: %w", r+1, err)
		}
		p.HandoverAcquires = append(p.HandoverAcquires, acq)
		p.Handover = append(p.Handover, took)
		p.StopTook = append(p.StopTook, stopTook)
		p.Masters = max(p.Masters, h.masters())
	}

	// Row 13: crash failovers.
	for r := range set.Failovers {
		acq, fromCut, fromExpiry, masters, err := h.failover(ctx, admin)
		if err != nil {
			return p, fmt.Errorf("crash failover %d: %w", r+1, err)
		}
		p.FailoverAcquires = append(p.FailoverAcquires, acq)
		p.Failover = append(p.Failover, fromCut)
		p.FromExpiry = append(p.FromExpiry, fromExpiry)
		p.Masters = max(p.Masters, masters)
	}
	return p, nil
}

// handover stops the master, times the takeover, counts the acquire
// attempts of the others, and replaces the stopped master.
func (h *scaleHerd) handover(ctx context.Context) (acquires int, took, stopTook time.Duration, err error) {
	old, err := h.master()
	if err != nil {
		return 0, 0, 0, err
	}
	h.drainAcquired()
	before := h.acquireCounts()
	stopped := make(chan error, 1)
	t0 := time.Now()
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := old.m.Stop(sctx)
		stopTook = time.Since(t0)
		stopped <- err
	}()
	t, err := h.waitTakeover(ctx, old, 10*time.Second)
	if err == nil {
		err = <-stopped // Stop returns within 10s
	} else {
		<-stopped
	}
	if err != nil {
		return 0, 0, 0, err
	}
	// Late attempts (a notice read late) count too.
	if err := scaleSleepUntil(ctx, scaleLater(t0.Add(time.Second), t.at.Add(500*time.Millisecond))); err != nil {
		return 0, 0, 0, err
	}
	acquires = h.acquiresSince(before, old)
	if err := h.replace(ctx, old); err != nil {
		return 0, 0, 0, err
	}
	return acquires, t.at.Sub(t0), stopTook, sleep(ctx, 300*time.Millisecond)
}

// failover closes the master's client at a random point of its renewal
// cycle (no renewal, no release: a killed process), times the takeover,
// counts the others' acquire attempts, and replaces the cut master.
func (h *scaleHerd) failover(ctx context.Context, admin redis.UniversalClient) (acquires int, fromCut, fromExpiry time.Duration, masters int, err error) {
	old, err := h.master()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if err := sleep(ctx, rand.N(h.ttl/3)); err != nil { // HeartbeatInterval's default: TTL/3
		return 0, 0, 0, 0, err
	}
	h.drainAcquired()
	before := h.acquireCounts()
	old.crashed.Store(true)
	t0 := time.Now()
	_ = old.c.Close() // its subscriptions' connections too
	tq := time.Now()
	pttl, err := admin.PTTL(ctx, old.m.Keys().Master).Result()
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("PTTL: %w", err)
	}
	expiry := tq.Add(pttl)
	t, err := h.waitTakeover(ctx, old, 3*h.ttl+5*time.Second)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	masters = h.masters()
	if err := scaleSleepUntil(ctx, t.at.Add(time.Second)); err != nil {
		return 0, 0, 0, 0, err
	}
	acquires = h.acquiresSince(before, old)
	if err := h.replace(ctx, old); err != nil {
		return 0, 0, 0, 0, err
	}
	return acquires, t.at.Sub(t0), t.at.Sub(expiry), masters, sleep(ctx, 300*time.Millisecond)
}

func scaleSleepUntil(ctx context.Context, t time.Time) error {
	if d := time.Until(t); d > 0 {
		return sleep(ctx, d)
	}
	return nil
}

func scaleLater(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// StormResult is what StartStorm measured.
type StormResult struct {
	N           int
	Took        time.Duration
	ErrorEvents int
	// Kinds are the error events' messages (digits blanked) and counts.
	Kinds  map[string]int
	Failed int
}

// StartStorm starts n elections (own clients, LockTTL ttl) at once and
// counts the error events they emit meanwhile and in the second after,
// and the Starts that fail; then stops them.
func StartStorm(ctx context.Context, env *Env, n int, ttl time.Duration) (StormResult, error) {
	res := StormResult{N: n}
	h := &scaleHerd{env: env, lock: env.LockName(fmt.Sprintf("storm%d", n)), ttl: ttl, acquired: make(chan scaleTakeover, 64)}
	defer h.close(ctx)
	var err error
	res.Took, res.ErrorEvents, res.Failed, err = h.startStorm(ctx, n)
	res.Kinds, _ = h.kinds.counts()
	if res.Failed > 0 {
		err = nil // counted: the row reports it
	}
	return res, err
}

// scaleRows measures set and returns rows 13 (election), 14 (cost) and 15
// (Broadcast), measurement by measurement, size by size. Each size's
// progress goes to progress.
func scaleRows(ctx context.Context, env *Env, set ScaleSet, progress io.Writer) []Row {
	if len(set.Sizes) == 0 {
		return nil
	}
	if len(set.Sizes) > MaxScaleSizes {
		return []Row{{ID: "13", What: "scale row set", Err: fmt.Errorf("%d herd sizes: at most %d", len(set.Sizes), MaxScaleSizes)}}
	}
	points := make([]ScalePoint, len(set.Sizes))
	errs := make([]error, len(set.Sizes))
	for i, n := range set.Sizes {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			continue
		}
		t0 := time.Now()
		points[i], errs[i] = MeasureScale(ctx, env, set, n)
		fmt.Fprintf(progress, " N=%d %v;", n, time.Since(t0).Round(100*time.Millisecond))
	}
	var storm StormResult
	var stormErr error
	if set.Storm > 0 && ctx.Err() == nil {
		t0 := time.Now()
		storm, stormErr = StartStorm(ctx, env, set.Storm, set.LockTTL)
		fmt.Fprintf(progress, " storm N=%d %v;", set.Storm, time.Since(t0).Round(100*time.Millisecond))
	}

	base := points[0]
	baseP50 := benchkit.Summarize(base.Handover).P50
	at1000 := func(n int, goal string) string {
		if n == 1000 {
			return goal + " (issue 28)"
		}
		return "—"
	}
	// each makes one row per size; row gives it its measurement, and
	// failed when the size's error left it without one.
	each := func(row func(i int, p ScalePoint) (r Row, ok bool)) []Row {
		var rows []Row
		for i, p := range points {
			r, ok := row(i, p)
			if !ok {
				// Not measured: failed, or no such row at this size.
				if r.Err = errs[i]; r.Err == nil || r.What == "" {
					continue
				}
				r.N, r.Value, r.Note = 0, "", ""
			}
			r.What = fmt.Sprintf("scale, N=%s: %s", thousands(set.Sizes[i]), r.What)
			rows = append(rows, r)
		}
		return rows
	}
	ttl := set.LockTTL
	var election []Row
	election = append(election, each(func(i int, p ScalePoint) (Row, bool) {
		r := Row{What: "acquire attempts per graceful handover (master Stop → next master-acquired), median", N: len(p.HandoverAcquires),
			Goal: at1000(p.N, "≤ 3"), Value: scaleMedian(p.HandoverAcquires) + " /handover", Note: "per handover: " + scaleJoin(p.HandoverAcquires)}
		return r, len(p.HandoverAcquires) > 0
	})...)
	election = append(election, each(func(i int, p ScalePoint) (Row, bool) {
		r := LatencyRow("", "graceful handover: master Stop called → master-acquired on another node", p.Handover, "—",
			fmt.Sprintf("Stop returned after %s p50.", benchkit.FormatDuration(benchkit.Summarize(p.StopTook).P50)))
		return r, len(p.Handover) > 0
	})...)
	election = append(election, each(func(i int, p ScalePoint) (Row, bool) {
		if i == 0 {
			return Row{}, false
		}
		r := Row{What: fmt.Sprintf("graceful handover p50 ÷ N=%s's", thousands(set.Sizes[0])), N: len(p.Handover), Goal: at1000(p.N, "≤ 2×")}
		p50 := benchkit.Summarize(p.Handover).P50
		if p50 == 0 {
			return r, false
		}
		if baseP50 == 0 {
			r.Err = fmt.Errorf("no handover measured at N=%d to compare with", set.Sizes[0])
			return r, true
		}
		r.Value = benchkit.FormatRatio(float64(p50) / float64(baseP50))
		return r, true
	})...)
	election = append(election, each(func(i int, p ScalePoint) (Row, bool) {
		r := Row{What: "acquire attempts per crash failover (master's client closed → master-acquired elsewhere, +1s), median", N: len(p.FailoverAcquires),
			Goal: at1000(p.N, "≤ 3"), Value: scaleMedian(p.FailoverAcquires) + " /failover", Note: "per failover: " + scaleJoin(p.FailoverAcquires)}
		return r, len(p.FailoverAcquires) > 0
	})...)
	election = append(election, each(func(i int, p ScalePoint) (Row, bool) {
		r := LatencyRow("", "crash failover: master's client closed → master-acquired elsewhere", p.Failover, at1000(p.N, "p50 ≤ 1.1 × TTL"),
			fmt.Sprintf("Lock expiry → master-acquired %s p50, so the master's last renewal → master-acquired %s (%.2f × TTL).",
				benchkit.FormatDuration(benchkit.Summarize(p.FromExpiry).P50), benchkit.FormatDuration(ttl+benchkit.Summarize(p.FromExpiry).P50),
				float64(ttl+benchkit.Summarize(p.FromExpiry).P50)/float64(ttl)))
		r.TTL = ttl
		return r, len(p.Failover) > 0
	})...)

	var cost []Row
	cost = append(cost, each(func(i int, p ScalePoint) (Row, bool) {
		return Row{What: "Redis connections per process, no Subscriber (INFO connected_clients)", N: p.N,
			Value: fmt.Sprintf("%.2f /process", p.ConnsNoSub), Goal: "—",
			Note: fmt.Sprintf("connected_clients %d before the herd (the benchmark's own), +%.0f.", p.ConnsBase, p.ConnsNoSub*float64(p.N))}, p.ConnsNoSub > 0
	})...)
	cost = append(cost, each(func(i int, p ScalePoint) (Row, bool) {
		return Row{What: "Redis connections per process with a pubsub.Subscriber each", N: p.N,
			Value: fmt.Sprintf("%.2f /process", p.ConnsSub), Goal: at1000(p.N, "≤ 2.2"),
			Note: fmt.Sprintf("+%.0f above the %d before the herd.", p.ConnsSub*float64(p.N), p.ConnsBase)}, p.ConnsSub > 0
	})...)
	cost = append(cost, each(func(i int, p ScalePoint) (Row, bool) {
		return Row{What: fmt.Sprintf("idle Redis CPU (INFO cpu, over %v)", p.Idle.Round(100*time.Millisecond)), N: p.N,
			Value: fmt.Sprintf("%.2f%% of a CPU", p.IdleCPU), Goal: at1000(p.N, "≤ ½ of before the fix"),
			Note: fmt.Sprintf("This process (the herd) %.1f%% of a CPU meanwhile.", p.ClientCPU)}, p.Idle > 0
	})...)
	cost = append(cost, each(func(i int, p ScalePoint) (Row, bool) {
		return Row{What: "Redis commands per second per process at idle (INFO total_commands_processed, commands scripts run included)", N: p.N,
			Value: fmt.Sprintf("%.2f /s", p.Commands), Goal: "—",
			Note: fmt.Sprintf("Sent by clients, by name (INFO commandstats): %s; every command INFO commandstats counted (INFO left out): %.2f /s.", scaleRates(p.PerSecond), p.Executed)}, p.Idle > 0
	})...)
	cost = append(cost, each(func(i int, p ScalePoint) (Row, bool) {
		return Row{What: "error events while all Start at once", N: p.N,
			Value: fmt.Sprintf("%d", p.StartErrors), Goal: "—",
			Note: fmt.Sprintf("Every Start returned after %s; %d Starts failed. Later in the run: %d error events (cut masters' left out once cut), %d slave-removed events, at most %d master(s) at once.",
				benchkit.FormatDuration(p.StartTook), p.StartFailed, p.LaterErrors, p.Removed, p.Masters) + scaleKindsNote(p.StartKinds, p.LaterKinds)}, p.StartTook > 0
	})...)
	if set.Storm > 0 {
		r := Row{What: fmt.Sprintf("scale, N=%s: error events while all Start at once (no other row at this size)", thousands(set.Storm)), N: set.Storm, Goal: "0 (issue 28)", Err: stormErr}
		if storm.Took > 0 {
			r.Value, r.Err = fmt.Sprintf("%d", storm.ErrorEvents), nil
			r.Note = fmt.Sprintf("Every Start returned after %s; %d Starts failed.", benchkit.FormatDuration(storm.Took), storm.Failed) + scaleKindsNote(storm.Kinds, nil)
		}
		cost = append(cost, r)
	}

	bcast := each(func(i int, p ScalePoint) (Row, bool) {
		r := LatencyRow("", fmt.Sprintf("Broadcast from the master to its %s slaves: call → every slave's handler had it", thousands(p.N-1)), p.Broadcast, "—",
			fmt.Sprintf("Broadcast returned after %s p50.", benchkit.FormatDuration(benchkit.Summarize(p.BroadcastCall).P50)))
		return r, len(p.Broadcast) > 0
	})

	sizes := make([]string, len(set.Sizes))
	for i, n := range set.Sizes {
		sizes[i] = thousands(n)
	}
	setup := fmt.Sprintf("N = %s herd processes simulated as N MasterElections in this process, each on a go-redis client of its own (go-redis defaults, not connected beforehand) with a pubsub.Subscriber on it once started; LockTTL %v, every other setting the library's default for it (renew TTL/3, check TTL/3, jitter TTL/15, ProcessTTL 1.5 × TTL, SlaveTimeout TTL/2).",
		strings.Join(sizes, ", "), ttl)
	rows := group(setup+fmt.Sprintf(" Acquire attempts: EVALSHA of the acquire script (rdb.AcquireRegisterSHA, the acquire with the registration, or rdb.AcquireSHA) seen by a hook on every client but the old master's; after a Stop from its call until 1s later or 0.5s after the takeover, whichever is later; after a crash from the cut until 1s after the takeover. Per size, graceful handovers: %d, then crash failovers: %d (the client closed at a random point of the renewal cycle: no renewal, no release); the stopped or cut master replaced by a fresh process each time, so N stays.",
		set.Handovers, set.Failovers), letter("13", election))
	rows = append(rows, group(fmt.Sprintf("As 13. Connections: INFO clients connected_clients, settled, 1s after the master listed every slave (before the Subscribers started) and 1s after every Subscriber started, minus those before the herd; per process. Idle: INFO cpu and stats deltas over %v with every Subscriber running. Start errors: error events (OnError) from all N Starts called at once until a second after the last returned.", set.Idle),
		letter("14", cost))...)
	rows = append(rows, group(fmt.Sprintf("As 13: pubsub.Router.Broadcast on the master's client, slaves listed from the registry (the election's Slaves), a small JSON payload; %d timed after 2 untimed; until the last of the N−1 Subscribers' handlers ran.", set.Broadcasts),
		letter("15", bcast))...)
	return rows
}

func scaleMedian(xs []int) string {
	if len(xs) == 0 {
		return ""
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return strconv.Itoa(s[m])
	}
	return strconv.FormatFloat(float64(s[m-1]+s[m])/2, 'f', -1, 64)
}

func scaleJoin(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}

// scaleRates formats per-name rates as "EVALSHA 3.98, PING 0.10" in
// decreasing order.
func scaleRates(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case m[a] > m[b]:
			return -1
		case m[a] < m[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %.2f", strings.ToUpper(k), m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// scaleErrorKinds counts error events by message, digits blanked (ports, node
// numbers, durations) and cut at 160 bytes, apart for the start and later.
type scaleErrorKinds struct {
	mu           sync.Mutex
	start, later map[string]int
}

func (k *scaleErrorKinds) add(later bool, err error) {
	msg := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, err.Error())
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	m := &k.start
	if later {
		m = &k.later
	}
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[msg]++
}

func (k *scaleErrorKinds) counts() (start, later map[string]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.start), maps.Clone(k.later)
}

// scaleKindsNote names the two commonest messages of each map, or "".
func scaleKindsNote(start, later map[string]int) string {
	var out string
	for _, x := range []struct {
		what  string
		kinds map[string]int
	}{{"at the start", start}, {"later", later}} {
		if len(x.kinds) == 0 {
			continue
		}
		msgs := slices.Collect(maps.Keys(x.kinds))
		slices.SortFunc(msgs, func(a, b string) int {
			if x.kinds[a] != x.kinds[b] {
				return x.kinds[b] - x.kinds[a]
			}
			return strings.Compare(a, b)
		})
		var parts []string
		for _, m := range msgs[:min(2, len(msgs))] {
			parts = append(parts, fmt.Sprintf("%d× %q", x.kinds[m], m))
		}
		out += fmt.Sprintf(" Error events %s (%d kinds): %s.", x.what, len(msgs), strings.Join(parts, "; "))
	}
	return out
}
