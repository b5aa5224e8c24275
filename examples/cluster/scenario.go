package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// options are the demo's settings (its flags).
type options struct {
	Nodes        int
	Cameras      int
	LockTTL      time.Duration
	SlaveTimeout time.Duration // 0: LockTTL
	Quiet        bool
	Color        bool
}

func defaultOptions() options {
	return options{Nodes: 4, Cameras: 40, LockTTL: time.Second}
}

// validate names every option that cannot run the scenario.
func (o options) validate() error {
	var errs []error
	if o.Nodes < 4 {
		errs = append(errs, fmt.Errorf("-nodes %d: the scenario needs at least 4 (a master, a slave to kill, and two more for the failover and the handover)", o.Nodes))
	}
	if o.Nodes > 50 {
		errs = append(errs, fmt.Errorf("-nodes %d: at most 50", o.Nodes))
	}
	if o.Cameras < 1 || o.Cameras > 100000 {
		errs = append(errs, fmt.Errorf("-cameras %d: must be between 1 and 100000", o.Cameras))
	}
	if o.LockTTL < 30*time.Millisecond || o.LockTTL > 10*time.Second {
		errs = append(errs, fmt.Errorf("-lock-ttl %v: must be between 30ms and 10s, so that the demo stays short and its timers above the scheduler's noise", o.LockTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Whatever else is wrong is what masterelection says.
	if err := o.config("check", 1).Validate(); err != nil {
		return fmt.Errorf("the timings derived from the flags are invalid: %w", err)
	}
	return nil
}

// profiles are the capabilities the nodes declare, in turn.
var profiles = []registry.Capabilities{
	{CanProcessDetections: true, MaxSubscriptions: 60, PreferredWorkload: 80},
	{CanProcessDetections: true, MaxSubscriptions: 40, PreferredWorkload: 100},
	{CanProcessDetections: true, MaxSubscriptions: 50, PreferredWorkload: 60},
	{CanProcessDetections: true, MaxSubscriptions: 80, PreferredWorkload: 50},
	{CanProcessDetections: true, MaxSubscriptions: 45, PreferredWorkload: 100},
	{CanProcessDetections: true, MaxSubscriptions: 70, PreferredWorkload: 40},
}

// config derives node i's configuration from the LockTTL with the ratios
// of the defaults (LockTTL 30s, HeartbeatInterval 10s, CheckInterval 10s,
// ElectionJitter 2s, SlaveTimeout 15s, ProcessTTL 45s), and a
// StepDownMargin of LockTTL/10. -slave-timeout overrides SlaveTimeout;
// ProcessTTL is then three times it, at least 1.5 × LockTTL.
func (o options) config(lock string, i int) masterelection.Config {
	cfg := masterelection.DefaultConfig()
	cfg.LockName = lock
	cfg.NodeID = fmt.Sprintf("node-%d", i)
	cfg.Identifier = cfg.NodeID
	cfg.LockTTL = o.LockTTL
	cfg.HeartbeatInterval = (o.LockTTL / 3).Truncate(time.Millisecond)
	cfg.CheckInterval = (o.LockTTL / 3).Truncate(time.Millisecond)
	cfg.ElectionJitter = (o.LockTTL / 15).Truncate(time.Millisecond)
	cfg.StepDownMargin = (o.LockTTL / 10).Truncate(time.Millisecond)
	cfg.SlaveTimeout = o.LockTTL / 2
	if o.SlaveTimeout > 0 {
		cfg.SlaveTimeout = o.SlaveTimeout
	}
	cfg.ProcessTTL = max(3*cfg.SlaveTimeout, o.LockTTL*3/2)
	cfg.Capabilities = profiles[(i-1)%len(profiles)]
	return cfg
}

// summary is what the scenario measured and counted.
type summary struct {
	Config        masterelection.Config // node-1's, for the bounds
	FirstElection time.Duration
	SlaveRemoved  time.Duration // kill -> slave-removed on the master
	SelfFenced    time.Duration // master cut off -> it stops calling itself master
	Failover      time.Duration // master cut off -> another node is master
	Handover      time.Duration // Stop of the master -> another node is master
	Terms         []int64       // the master's term after each step that changed it
	Routed        int           // assignment messages delivered
	RefusedLocal  int           // sends refused by the fenced node itself
	RefusedRedis  int           // sends refused by the route script
	RefusedLate   int           // assignments refused because the mastership ended meanwhile
	Rejected      int           // messages rejected by term at a slave
	Moves         []movement
	Errors        int // error events of live nodes
	Expected      int // error events of killed or cut-off nodes (their Redis client is closed)
}

// movement is how many cameras changed hands in a step, against the share
// of the one node that left or joined.
type movement struct {
	Step  string
	Moved int
	Share int
}

// scenario is one run of the demo.
type scenario struct {
	o         options
	env       *env
	newClient func() *redis.Client
	lock      string
	all       []*node // every node created, for the teardown
	live      []*node // nodes running and connected
	sum       summary

	oldMaster *node // the master cut off in step 3
	oldTerm   int64 // its term
}

// runScenario: elect and assign, kill a slave, crash the master, bring it
// back with a stale term, hand over gracefully.
func runScenario(ctx context.Context, o options, lock string, newClient func() *redis.Client, tl *timeline) (summary, error) {
	cameras := make([]string, o.Cameras)
	for i := range cameras {
		cameras[i] = fmt.Sprintf("cam-%02d", i+1)
	}
	pcfg := pubsub.Config{LockName: lock}
	s := &scenario{
		o: o, newClient: newClient, lock: lock,
		env: &env{
			tl: tl, pcfg: pcfg, cameras: cameras,
			settle: min(50*time.Millisecond, o.config(lock, 1).CheckInterval),
			stats:  &stats{removedAt: map[string]time.Time{}, lostAt: map[string]time.Time{}},
		},
	}
	s.sum.Config = o.config(lock, 1)
	defer s.teardown()
	steps := []func(context.Context) error{s.elect, s.killSlave, s.crashMaster, s.comeBack, s.handOver}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return s.sum, err
		}
	}
	st := s.env.stats
	st.mu.Lock()
	s.sum.Routed, s.sum.Rejected = st.routed, st.rejected
	s.sum.RefusedLocal, s.sum.RefusedRedis, s.sum.RefusedLate = st.refusedLocal, st.refusedRedis, st.refusedLate
	s.sum.Errors, s.sum.Expected = st.errors, st.expected
	st.mu.Unlock()
	for i := 1; i < len(s.sum.Terms); i++ {
		if s.sum.Terms[i] <= s.sum.Terms[i-1] {
			return s.sum, fmt.Errorf("terms did not increase: %v", s.sum.Terms)
		}
	}
	return s.sum, nil
}

// teardown stops every node still running, without printing.
func (s *scenario) teardown() {
	s.env.tl.mute()
	for _, n := range s.all {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.stop(sctx)
		cancel()
	}
}

func (s *scenario) addNode(ctx context.Context, cfg masterelection.Config) (*node, error) {
	c := s.newClient()
	n, err := newNode(s.env, cfg, c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.all = append(s.all, n)
	return n, nil
}

// 1. Every node starts at once; one becomes master and assigns the cameras.
func (s *scenario) elect(ctx context.Context) error {
	tl := s.env.tl
	tl.step(fmt.Sprintf("1. election: %d nodes start at once", s.o.Nodes))
	for i := 1; i <= s.o.Nodes; i++ {
		n, err := s.addNode(ctx, s.o.config(s.lock, i))
		if err != nil {
			return err
		}
		s.live = append(s.live, n)
	}
	began := time.Now()
	errs := make(chan error, len(s.live))
	for _, n := range s.live {
		go func() { errs <- n.start(ctx) }()
	}
	var startErrs []error
	for range s.live {
		startErrs = append(startErrs, <-errs)
	}
	if err := errors.Join(startErrs...); err != nil {
		return err
	}
	s.sum.FirstElection = time.Since(began)
	master, err := s.waitMaster(ctx, s.live, s.o.LockTTL)
	if err != nil {
		return err
	}
	s.sum.Terms = append(s.sum.Terms, master.m.Term())
	tl.measure(fmt.Sprintf("first election took %v; %s is master with term %d", round(s.sum.FirstElection), master.id, master.m.Term()))
	if _, err := s.waitSettled(ctx, master, 2*s.o.LockTTL); err != nil {
		return err
	}
	tl.measure("every camera is served by exactly one slave: " + s.servingLine(master))
	return nil
}

// 2. A slave dies without unregistering; the master notices when its entry
// goes stale and gives its cameras to the others.
func (s *scenario) killSlave(ctx context.Context) error {
	tl := s.env.tl
	master := s.master()
	var victim *node
	for _, n := range s.live {
		if n != master && len(n.holdings()) > 0 {
			victim = n // the last slave serving something
		}
	}
	if victim == nil {
		return errors.New("no slave serves any camera")
	}
	before := s.owners()
	cfg := victim.cfg
	tl.step(fmt.Sprintf("2. kill %s, a slave serving %d cameras: its process dies without unregistering", victim.id, len(victim.holdings())))
	tl.note(fmt.Sprintf("the master notices when its last heartbeat is older than SlaveTimeout (%v); it looks every CheckInterval (%v)", cfg.SlaveTimeout, cfg.CheckInterval))
	killAt := time.Now()
	kctx, cancel := context.WithTimeout(ctx, time.Second)
	victim.kill(kctx)
	cancel()
	s.live = without(s.live, victim)
	if _, err := s.waitSettled(ctx, master, cfg.SlaveTimeout+3*s.o.LockTTL); err != nil {
		return err
	}
	if at, ok := s.removedAt(victim.id); ok {
		s.sum.SlaveRemoved = at.Sub(killAt)
	}
	tl.measure(fmt.Sprintf("slave-removed came %v after the kill", round(s.sum.SlaveRemoved)))
	return s.checkMoves("slave killed", before, victim.id, "from")
}

// 3. The master is cut off from Redis without releasing its lock: it fences
// itself, and a slave takes over when the lock expires.
func (s *scenario) crashMaster(ctx context.Context) error {
	tl := s.env.tl
	old := s.master()
	cfg := old.cfg
	margin := cfg.StepDownMargin
	tl.step(fmt.Sprintf("3. the master %s crashes: its connection dies, no release; its lock (LockTTL %v) must expire", old.id, cfg.LockTTL))
	tl.note(fmt.Sprintf("it fences itself %v after its last renewal (LockTTL - StepDownMargin); a slave takes over within %v of it (LockTTL + ElectionJitter)", cfg.LockTTL-margin, cfg.LockTTL+cfg.ElectionJitter))
	s.oldMaster, s.oldTerm = old, old.m.Term()
	before := s.owners()
	cutAt := time.Now()
	old.cutOff()
	s.live = without(s.live, old)
	next, err := s.waitMaster(ctx, s.live, 3*cfg.LockTTL)
	if err != nil {
		return err
	}
	s.sum.Failover = time.Since(cutAt)
	s.sum.Terms = append(s.sum.Terms, next.m.Term())
	if err := waitFor(ctx, cfg.LockTTL, func() bool { _, ok := s.lostAt(old.id); return ok }); err != nil {
		return fmt.Errorf("%s did not fence itself within LockTTL of the crash: %w", old.id, err)
	}
	at, _ := s.lostAt(old.id)
	s.sum.SelfFenced = at.Sub(cutAt)
	tl.measure(fmt.Sprintf("%s fenced itself %v after the crash; failover to %s took %v", old.id, round(s.sum.SelfFenced), next.id, round(s.sum.Failover)))
	if _, err := s.waitSettled(ctx, next, 2*cfg.LockTTL); err != nil {
		return err
	}
	return s.checkMoves("master crashed", before, next.id, "from")
}

// 4. The old master comes back with the state of its old term. Its sends
// are refused (by itself, and by Redis even when it still believes it is
// master), and a message of its term still in flight is rejected by the
// slave. Then it restarts and joins as a slave.
func (s *scenario) comeBack(ctx context.Context) error {
	tl := s.env.tl
	old, term := s.oldMaster, s.oldTerm
	master := s.master()
	var target *node
	for _, n := range s.live {
		if n != master {
			target = n
			break
		}
	}
	tl.step(fmt.Sprintf("4. %s comes back, with its state from term %d; %s is master with term %d", old.id, term, master.id, master.m.Term()))
	all := assignment{Cameras: s.env.cameras}

	// a. Its own Router: the election fenced itself, so Send refuses at once.
	err := old.router.Send(ctx, target.id, msgCameras, all)
	if !errors.Is(err, pubsub.ErrNotMaster) {
		return fmt.Errorf("%s's Router sent although it is no longer master: %v", old.id, err)
	}
	s.env.stats.add(func(st *stats) { st.refusedLocal++ })
	tl.event(old.id, fmt.Sprintf("-> %s via its Router: refused before sending, it fenced itself: %v", target.id, err), kindReject)

	// b. A send prepared while it was master and paused before it reached
	//    Redis: the route script on the server refuses it.
	c := s.newClient()
	defer c.Close()
	stale, err := pubsub.NewRouter(c, pausedView{id: old.id, term: term}, nil, s.env.pcfg)
	if err != nil {
		return err
	}
	err = stale.Send(ctx, target.id, msgCameras, all)
	// pausedView still claims the mastership, so ErrNotMaster can only come
	// from the route script on the server.
	if !errors.Is(err, pubsub.ErrNotMaster) {
		return fmt.Errorf("a send with the stale term %d was not refused by Redis: %v", term, err)
	}
	s.env.stats.add(func(st *stats) { st.refusedRedis++ })
	tl.event(old.id, fmt.Sprintf("-> %s, a send prepared before a pause: refused by Redis: %v", target.id, err), kindReject)

	// c. A message of the old term that was already in flight when the lock
	//    moved reaches the slave, which rejects it by term.
	raw, err := json.Marshal(all)
	if err != nil {
		return err
	}
	envelope, err := pubsub.Message{ID: uuid.NewString(), From: old.id, Term: term, Type: msgCameras, Payload: raw, SentAt: time.Now()}.MarshalJSON()
	if err != nil {
		return err
	}
	held := target.holdings()
	rejected := target.sub.Rejected()
	tl.event(old.id, fmt.Sprintf("-> %s, a message of term %d that was in flight when the lock moved, arriving now", target.id, term), kindInfo)
	if err := c.Publish(ctx, s.env.pcfg.SlaveChannel(target.id), envelope).Err(); err != nil {
		return fmt.Errorf("publish the in-flight message: %w", err)
	}
	if err := waitFor(ctx, s.o.LockTTL, func() bool { return target.sub.Rejected() > rejected }); err != nil {
		return fmt.Errorf("%s did not reject the message of term %d: %w", target.id, term, err)
	}
	if got := target.holdings(); !maps.Equal(got, held) {
		return fmt.Errorf("%s applied a stale assignment: it serves %d cameras instead of %d", target.id, len(got), len(held))
	}

	// d. It restarts and joins as a slave; only its share moves to it.
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	_ = old.stop(sctx) // its client is closed: it can neither release nor unregister
	cancel()
	tl.event(old.id, "restarts and rejoins", kindInfo)
	before := s.owners()
	back, err := s.addNode(ctx, old.cfg)
	if err != nil {
		return err
	}
	if err := back.start(ctx); err != nil {
		return err
	}
	s.live = append(s.live, back)
	if _, err := s.waitSettled(ctx, master, 2*s.o.LockTTL); err != nil {
		return err
	}
	return s.checkMoves("old master rejoined", before, back.id, "to")
}

// 5. The master stops gracefully: it releases its lock and announces it,
// and a slave takes over at once.
func (s *scenario) handOver(ctx context.Context) error {
	tl := s.env.tl
	old := s.master()
	tl.step(fmt.Sprintf("5. graceful handover: %s stops (a rolling deploy); it releases the lock and announces it", old.id))
	rest := without(s.live, old)
	before := s.owners()
	stopped := make(chan error, 1)
	began := time.Now()
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		stopped <- old.stop(sctx)
	}()
	next, err := s.waitMaster(ctx, rest, s.o.LockTTL)
	if err != nil {
		return err
	}
	s.sum.Handover = time.Since(began)
	s.sum.Terms = append(s.sum.Terms, next.m.Term())
	if err := <-stopped; err != nil {
		return fmt.Errorf("stop %s: %w", old.id, err)
	}
	s.live = rest
	tl.measure(fmt.Sprintf("handover to %s took %v", next.id, round(s.sum.Handover)))
	if _, err := s.waitSettled(ctx, next, 2*s.o.LockTTL); err != nil {
		return err
	}
	if err := s.checkMoves("graceful handover", before, next.id, "from"); err != nil {
		return err
	}
	tl.measure("every camera is served by exactly one slave: " + s.servingLine(next))
	return nil
}

// pausedView is the mastership as a master saw it just before it was
// paused (a long GC, a stopped VM): master, with its old term. A Router
// that read the term before the pause sends with it after the pause; the
// route script, run by Redis, refuses it because the lock has moved on.
type pausedView struct {
	id   string
	term int64
}

func (p pausedView) NodeID() string { return p.id }
func (p pausedView) IsMaster() bool { return true }
func (p pausedView) Term() int64    { return p.term }

// master returns the live master, or nil.
func (s *scenario) master() *node {
	for _, n := range s.live {
		if n.isMaster() {
			return n
		}
	}
	return nil
}

// slaveIDs returns the ids of the live nodes other than master, sorted.
func (s *scenario) slaveIDs(master *node) []string {
	var ids []string
	for _, n := range s.live {
		if n != master {
			ids = append(ids, n.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// waitMaster waits for one of nodes to be master.
func (s *scenario) waitMaster(ctx context.Context, nodes []*node, within time.Duration) (*node, error) {
	var m *node
	err := waitFor(ctx, within, func() bool {
		for _, n := range nodes {
			if n.isMaster() {
				m = n
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no master elected within %v: %w", within, err)
	}
	return m, nil
}

// waitSettled waits until master has planned for exactly the live slaves,
// every slave has received its list, and every slave serves exactly its
// list: each camera is served by exactly one live slave.
func (s *scenario) waitSettled(ctx context.Context, master *node, within time.Duration) (assign.Plan, error) {
	want := s.slaveIDs(master)
	var plan assign.Plan
	err := waitFor(ctx, within, func() bool {
		term := master.m.Term()
		if term == 0 {
			return false
		}
		p, ok := master.coord.settled(term, want)
		if !ok {
			return false
		}
		for _, n := range s.live {
			if n == master {
				continue
			}
			if !slices.Equal(slices.Sorted(maps.Keys(n.holdings())), p.Items(n.id)) {
				return false
			}
		}
		plan = p
		return true
	})
	if err != nil {
		return plan, fmt.Errorf("the cameras were not assigned to %v by %s within %v: %w", want, master.id, within, err)
	}
	return plan, nil
}

// owners maps each camera to the live node serving it.
func (s *scenario) owners() map[string]string {
	o := map[string]string{}
	for _, n := range s.live {
		for c := range n.holdings() {
			o[c] = n.id
		}
	}
	return o
}

// checkMoves compares who serves what before and now: only the cameras of
// the node that left (dir "from") or joined (dir "to") may have moved.
func (s *scenario) checkMoves(step string, before map[string]string, id, dir string) error {
	after := s.owners()
	moved, share := 0, 0
	for _, c := range s.env.cameras {
		if before[c] != after[c] {
			moved++
		}
		if (dir == "from" && before[c] == id) || (dir == "to" && after[c] == id) {
			share++
		}
	}
	s.sum.Moves = append(s.sum.Moves, movement{Step: step, Moved: moved, Share: share})
	what := fmt.Sprintf("%d cameras moved, %s's share %s it", moved, id, map[string]string{"from": "taken from", "to": "given to"}[dir])
	if moved != share {
		what = fmt.Sprintf("%d cameras moved, %d more than %s's share (some slave is at its MaxSubscriptions)", moved, moved-share, id)
	}
	s.env.tl.measure(what + ": " + s.servingLine(s.master()))
	return nil
}

// servingLine lists how many cameras each live slave serves.
func (s *scenario) servingLine(master *node) string {
	var parts []string
	total := 0
	for _, n := range s.live {
		if n == master {
			continue
		}
		h := len(n.holdings())
		total += h
		parts = append(parts, fmt.Sprintf("%s %d", n.id, h))
	}
	slices.Sort(parts)
	return fmt.Sprintf("%s (%d of %d)", strings.Join(parts, ", "), total, len(s.env.cameras))
}

// removedAt returns when the master reported slave id removed, if it did.
func (s *scenario) removedAt(id string) (time.Time, bool) {
	return s.env.stats.at(s.env.stats.removedAt, id)
}

// lostAt returns when node id reported its mastership lost, if it did.
func (s *scenario) lostAt(id string) (time.Time, bool) {
	return s.env.stats.at(s.env.stats.lostAt, id)
}

// waitFor polls cond until it holds, within ends, or ctx ends.
func waitFor(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Microsecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return errors.New("timed out")
		case <-tick.C:
		}
	}
	return nil
}

func without(nodes []*node, x *node) []*node {
	var out []*node
	for _, n := range nodes {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
