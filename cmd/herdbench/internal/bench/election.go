package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/masterelection"
)

// Timings returns a configuration of lockName with LockTTL ttl and the
// specification's ratios (30 s : 10 s : 5 s : 2 s): HeartbeatInterval
// ttl/3, CheckInterval ttl/6, ElectionJitter ttl/15. ttl = 30 s gives
// DefaultConfig's timings but for CheckInterval, whose default is the
// renewal interval, ttl/3: these rows keep the specification's, which
// sets when a slave looks at the lock, not what a handover or failover
// waits for.
func Timings(lockName, nodeID string, ttl time.Duration) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = lockName
	cfg.NodeID = nodeID
	cfg.Identifier = nodeID
	cfg.LockTTL = ttl
	cfg.HeartbeatInterval = ttl / 3
	cfg.CheckInterval = ttl / 6
	cfg.ElectionJitter = ttl / 15
	return cfg
}

// node is one election with its own client, as one process would have. When
// shared is set, the client belongs to someone else and close leaves it open.
type node struct {
	*masterelection.MasterElection
	client   *redis.Client
	shared   bool
	acquired chan time.Time // when OnMasterAcquired was called; buffered
}

func newNode(c *redis.Client, shared bool, cfg masterelection.Config) (*node, error) {
	m, err := masterelection.New(c, cfg)
	if err != nil {
		if !shared {
			_ = c.Close()
		}
		return nil, err
	}
	n := &node{MasterElection: m, client: c, shared: shared, acquired: make(chan time.Time, 16)}
	m.OnMasterAcquired(func(context.Context, int64) {
		at := time.Now()
		select {
		case n.acquired <- at:
		default:
		}
	})
	return n, nil
}

// newWarmNode makes a node on a client of its own, connected before it is
// returned, so what is timed later does not include dialling.
func newWarmNode(ctx context.Context, env *Env, cfg masterelection.Config) (*node, error) {
	c := env.NewClient()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return newNode(c, false, cfg)
}

// close stops the election (bounded by a second: a crashed node's release
// fails) and closes its own client.
func (n *node) close(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_ = n.Stop(sctx)
	cancel()
	if !n.shared {
		_ = n.client.Close()
	}
}

// closeAll stops every node, slaves first and concurrently, the master
// last, so that the master's release does not set off an election among
// nodes that are being stopped anyway.
func closeAll(ctx context.Context, nodes []*node) {
	closeSlavesFirst(nodes, func(n *node) bool { return n != nil && n.IsMaster() }, func(n *node) {
		if n != nil {
			n.close(ctx)
		}
	})
}

// closeSlavesFirst closes every node with close: those that are not master
// concurrently (64 at a time), then the masters, so that no release sets
// off an election among nodes being stopped anyway.
func closeSlavesFirst[N any](nodes []N, master func(N) bool, close func(N)) {
	var masters []N
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, n := range nodes {
		if master(n) {
			masters = append(masters, n)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			close(n)
		}()
	}
	wg.Wait()
	for _, n := range masters {
		close(n)
	}
}

// startAll starts every node at the same instant and returns how long it
// took until every Start had returned, that is until every node knew its
// role. It fails unless exactly one node is master then.
func startAll(ctx context.Context, nodes []*node) (time.Duration, error) {
	gate := make(chan struct{})
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			errs[i] = n.Start(ctx)
		}()
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	d := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	masters := 0
	for _, n := range nodes {
		if n.IsMaster() {
			masters++
		}
	}
	if masters != 1 {
		return 0, fmt.Errorf("%d masters among %d nodes after every Start returned", masters, len(nodes))
	}
	return d, nil
}

// Contended starts candidates elections on one lock name at the same
// instant, each with a client of its own (connected beforehand), and
// measures, reps times, the time until every Start has returned with
// exactly one master among them. Timings are the defaults.
func Contended(ctx context.Context, env *Env, candidates, reps int) ([]time.Duration, error) {
	var samples []time.Duration
	for r := range reps {
		lock := env.LockName("contended")
		nodes := make([]*node, 0, candidates)
		var err error
		for i := range candidates {
			var n *node
			n, err = newWarmNode(ctx, env, Timings(lock, fmt.Sprintf("candidate-%d", i), 30*time.Second))
			if err != nil {
				break
			}
			nodes = append(nodes, n)
		}
		var d time.Duration
		if err == nil {
			d, err = startAll(ctx, nodes)
		}
		closeAll(ctx, nodes)
		if err != nil {
			return nil, fmt.Errorf("contended election, round %d: %w", r+1, err)
		}
		samples = append(samples, d)
	}
	return samples, nil
}

// HandoverResult is what Handover measured, per round.
type HandoverResult struct {
	// Total is the time from the call of the master's Stop until
	// OnMasterAcquired ran on the slave that took over.
	Total []time.Duration
	// Phases splits Total, per round, at the instants a client hook saw the
	// master send the release script and get its reply, the slave send its
	// acquire script and get the acquire's reply: [0] Stop's work before the
	// release (handlers), [1] the release's round trip, [2] the release's
	// reply → the slave's acquire sent (the notice, the slave's loop waking;
	// negative when the slave was quicker than the master's own reply),
	// [3] the acquire's round trip, [4] reply → OnMasterAcquired (the event
	// bus).
	Phases [5][]time.Duration
}

// Handover measures, reps times, a graceful handover at default timings:
// from the call of the master's Stop until OnMasterAcquired runs on the
// slave that takes over. Each round starts a fresh slave, stops the
// master, and the slave becomes the next round's master.
func Handover(ctx context.Context, env *Env, reps int) (HandoverResult, error) {
	var res HandoverResult
	lock := env.LockName("handover")
	newHooked := func(i int) (*node, *scriptTimes, error) {
		c := env.NewClient()
		h := &scriptTimes{}
		c.AddHook(h)
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return nil, nil, fmt.Errorf("connect: %w", err)
		}
		n, err := newNode(c, false, Timings(lock, fmt.Sprintf("node-%d", i), 30*time.Second))
		return n, h, err
	}
	master, mh, err := newHooked(0)
	if err != nil {
		return res, err
	}
	defer func() { master.close(ctx) }()
	if err := master.Start(ctx); err != nil {
		return res, fmt.Errorf("handover: start the first master: %w", err)
	}
	if !master.IsMaster() {
		return res, fmt.Errorf("handover: the first node of lock %q is not master", lock)
	}
	for r := range reps {
		next, nh, err := newHooked(r + 1)
		if err != nil {
			return res, err
		}
		if err := next.Start(ctx); err != nil {
			next.close(ctx)
			return res, fmt.Errorf("handover, round %d: start the slave: %w", r+1, err)
		}
		if next.IsMaster() {
			next.close(ctx)
			return res, fmt.Errorf("handover, round %d: the new node became master while the old one held the lock", r+1)
		}
		mh.reset()
		nh.reset()
		t0 := time.Now()
		stopErr := stopWithin(ctx, master.MasterElection, 5*time.Second)
		var at time.Time
		select {
		case at = <-next.acquired:
		case <-time.After(5 * time.Second):
		}
		_ = master.client.Close()
		rel, relDone := mh.first(rdb.ReleaseSHA)
		acqSent, acqDone := nh.first(rdb.AcquireSHA)
		master, mh = next, nh
		if stopErr != nil {
			return res, fmt.Errorf("handover, round %d: %w", r+1, stopErr)
		}
		if at.IsZero() {
			return res, fmt.Errorf("handover, round %d: no take-over within 5s of the master's Stop", r+1)
		}
		res.Total = append(res.Total, at.Sub(t0))
		if !rel.IsZero() && !relDone.IsZero() && !acqSent.IsZero() {
			for i, d := range []time.Duration{rel.Sub(t0), relDone.Sub(rel), acqSent.Sub(relDone), acqDone.Sub(acqSent), at.Sub(acqDone)} {
				res.Phases[i] = append(res.Phases[i], d)
			}
		}
	}
	return res, nil
}

// scriptTimes is a client hook that remembers when the first call of each
// script (by SHA) since the last reset was sent and answered.
type scriptTimes struct {
	mu   sync.Mutex
	sent map[string]time.Time
	done map[string]time.Time
}

func (h *scriptTimes) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent, h.done = map[string]time.Time{}, map[string]time.Time{}
}

func (h *scriptTimes) first(sha string) (sent, done time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent[sha], h.done[sha]
}

func (h *scriptTimes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptTimes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		sha := ""
		if len(args) > 1 && cmd.Name() == "evalsha" {
			sha, _ = args[1].(string)
		}
		if sha != "" {
			h.mark(&h.sent, sha)
		}
		err := next(ctx, cmd)
		if sha != "" {
			h.mark(&h.done, sha)
		}
		return err
	}
}

func (h *scriptTimes) mark(m *map[string]time.Time, sha string) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if *m == nil {
		*m = map[string]time.Time{}
	}
	if _, ok := (*m)[sha]; !ok {
		(*m)[sha] = now
	}
}

func (h *scriptTimes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func stopWithin(ctx context.Context, m *masterelection.MasterElection, d time.Duration) error {
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return m.Stop(sctx)
}

// FailoverResult is what Failover measured, per round.
type FailoverResult struct {
	// LockTTL is the lock TTL used.
	LockTTL time.Duration
	// FromCut is the time from cutting the master's connection until
	// OnMasterAcquired ran on another node. The lock then had between
	// LockTTL - HeartbeatInterval and LockTTL left to live.
	FromCut []time.Duration
	// FromExpiry is the time from the lock's expiry (read with PTTL right
	// after the cut; millisecond resolution) until OnMasterAcquired ran on
	// another node.
	FromExpiry []time.Duration
}

// Failover measures, reps times, a crash failover among nodes processes
// with LockTTL ttl and the default ratios: the master's client is closed
// (it can neither renew nor release, as if it had been killed) and the
// clock runs until another node's OnMasterAcquired. The crashed node is
// replaced by a fresh slave for the next round.
func Failover(ctx context.Context, env *Env, ttl time.Duration, nodes, reps int) (FailoverResult, error) {
	res := FailoverResult{LockTTL: ttl}
	if nodes < 2 {
		return res, fmt.Errorf("failover needs at least 2 nodes, got %d", nodes)
	}
	lock := env.LockName("failover")
	keys := keyspace.NewKeys(lock, false)
	admin := env.NewClient()
	defer admin.Close()
	seq := 0
	fresh := func() (*node, error) {
		seq++
		return newWarmNode(ctx, env, Timings(lock, fmt.Sprintf("node-%d", seq), ttl))
	}
	var live []*node
	defer func() { closeAll(ctx, live) }()
	for range nodes {
		n, err := fresh()
		if err != nil {
			return res, err
		}
		live = append(live, n)
	}
	if _, err := startAll(ctx, live); err != nil {
		return res, fmt.Errorf("failover: first election: %w", err)
	}
	for r := range reps {
		var master *node
		for _, n := range live {
			if n.IsMaster() {
				master = n
			}
		}
		if master == nil {
			return res, fmt.Errorf("failover, round %d: no master", r+1)
		}
		for _, n := range live { // forget earlier take-overs
			for len(n.acquired) > 0 {
				<-n.acquired
			}
		}
		t0 := time.Now()
		_ = master.client.Close()
		tq := time.Now()
		pttl, err := admin.PTTL(ctx, keys.Master).Result()
		if err != nil {
			return res, fmt.Errorf("failover, round %d: PTTL: %w", r+1, err)
		}
		expiry := tq.Add(pttl)
		var at time.Time
		deadline := time.After(3*ttl + 5*time.Second)
	wait:
		for {
			for _, n := range live {
				if n == master {
					continue
				}
				select {
				case at = <-n.acquired:
					break wait
				default:
				}
			}
			select {
			case <-deadline:
				return res, fmt.Errorf("failover, round %d: no take-over within %v of the crash", r+1, 3*ttl+5*time.Second)
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(100 * time.Microsecond):
			}
		}
		res.FromCut = append(res.FromCut, at.Sub(t0))
		res.FromExpiry = append(res.FromExpiry, at.Sub(expiry))
		master.close(ctx)
		n, err := fresh()
		if err != nil {
			return res, err
		}
		for i := range live {
			if live[i] == master {
				live[i] = n
			}
		}
		if err := n.Start(ctx); err != nil {
			return res, fmt.Errorf("failover, round %d: start a replacement: %w", r+1, err)
		}
	}
	return res, nil
}

// Transfer measures, reps times, a directed hand-over at default timings:
// from the call of the master's Transfer naming a slave until
// OnMasterAcquired runs on that slave. Three nodes stay up; each round the
// master transfers to the next one, round robin.
func Transfer(ctx context.Context, env *Env, reps int) ([]time.Duration, error) {
	lock := env.LockName("transfer")
	var nodes []*node
	defer func() { closeAll(ctx, nodes) }()
	for i := range 3 {
		n, err := newWarmNode(ctx, env, Timings(lock, fmt.Sprintf("node-%d", i), 30*time.Second))
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		if err := n.Start(ctx); err != nil {
			return nil, fmt.Errorf("transfer: start node %d: %w", i, err)
		}
	}
	if !nodes[0].IsMaster() {
		return nil, fmt.Errorf("transfer: the first node of lock %q is not master", lock)
	}
	<-nodes[0].acquired
	var took []time.Duration
	for r := range reps {
		from, to := nodes[r%3], nodes[(r+1)%3]
		t0 := time.Now()
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := from.Transfer(tctx, to.NodeID())
		cancel()
		if err != nil {
			return took, fmt.Errorf("transfer, round %d: %w", r+1, err)
		}
		select {
		case at := <-to.acquired:
			took = append(took, at.Sub(t0))
		case <-time.After(5 * time.Second):
			return took, fmt.Errorf("transfer, round %d: %s's OnMasterAcquired did not run within 5s", r+1, to.NodeID())
		}
	}
	return took, nil
}
