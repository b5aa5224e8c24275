package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/assign"
	"github.com/herdkit/herd/masterelection"
	"github.com/herdkit/herd/pubsub"
)

// msgCameras is the type of the assignment message: the full list of
// cameras a slave must serve. Sending the whole list rather than per-camera
// deltas makes every message idempotent and lets a new master, which does
// not know what the slaves hold, simply send everyone their list: over an
// at-most-once channel the next assignment repairs a lost one.
const msgCameras = "cameras"

// assignment is the payload of msgCameras.
type assignment struct {
	Cameras []string `json:"cameras"`
}

// node is one process of the demo: an election with its own Redis client, a
// Subscriber for the assignments routed to it, a Router and a coordinator
// that plans and routes the assignments while it is master.
type node struct {
	id     string
	cfg    masterelection.Config
	client *redis.Client
	m      *masterelection.MasterElection
	sub    *pubsub.Subscriber
	router *pubsub.Router
	env    *env

	// gone is set when the node is killed or cut off from Redis: the
	// errors it reports from then on are expected, and counted apart.
	gone atomic.Bool

	mu      sync.Mutex
	serving map[string]bool // cameras this node serves as a slave

	coord *coordinator

	cancel context.CancelFunc // stops the coordinator
	wg     sync.WaitGroup     // the coordinator goroutine
}

// env is what the nodes share with the scenario: the timeline, the
// cameras, the counters.
type env struct {
	tl      *timeline
	pcfg    pubsub.Config
	cameras []string
	settle  time.Duration // how long a coordinator waits for more membership changes before it plans
	stats   *stats
}

// stats are the counters and instants the summary reports.
type stats struct {
	mu            sync.Mutex
	terms         []int64
	routed        int                  // assignment messages Redis delivered
	refusedLocal  int                  // stale sends refused with ErrNotMaster by the old master itself
	refusedRedis  int                  // stale sends refused with ErrNotMaster by the route script
	refusedLate   int                  // assignments refused because the mastership ended while planning
	rejected      int                  // messages a slave rejected by term
	errors        int                  // error events of live nodes
	expected      int                  // error events of killed or cut-off nodes
	removedAt     map[string]time.Time // slave-removed, by slave
	lostAt        map[string]time.Time // master-lost, by node
	errorMessages []string
}

func (s *stats) add(f func(s *stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// at returns instants[id] read under s.mu; instants is one of s's maps of
// instants (removedAt, lostAt), which are never replaced, only written.
func (s *stats) at(instants map[string]time.Time, id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := instants[id]
	return t, ok
}

func newNode(e *env, cfg masterelection.Config, client *redis.Client) (*node, error) {
	m, err := masterelection.New(client, cfg)
	if err != nil {
		return nil, err
	}
	n := &node{id: cfg.NodeID, cfg: cfg, client: client, m: m, env: e, serving: map[string]bool{}}
	scfg := e.pcfg
	scfg.Terms = m // also fence with the terms the election's lock checks see
	scfg.OnError = n.onSubscriberError
	if n.sub, err = pubsub.NewSubscriber(client, n.id, scfg); err != nil {
		return nil, err
	}
	if err := n.sub.Handle(msgCameras, n.onAssignment); err != nil {
		return nil, err
	}
	if n.router, err = pubsub.NewRouter(client, m, nil, e.pcfg); err != nil {
		return nil, err
	}
	n.coord = &coordinator{n: n, events: make(chan masterelection.Event, 256), done: make(chan struct{})}
	m.OnEvent(n.onEvent)
	return n, nil
}

// start subscribes to the node's channel, starts its coordinator, and joins
// the election; it returns when the first election has resolved. The
// subscription comes first so that the node can receive its assignment as
// soon as the master sees it registered.
func (n *node) start(ctx context.Context) error {
	c := n.cfg.Capabilities
	n.env.tl.event(n.id, fmt.Sprintf("starts: MaxSubscriptions %d, PreferredWorkload %d%% (weight %g)",
		c.MaxSubscriptions, c.PreferredWorkload, assign.Weight(c)), kindInfo)
	if err := n.sub.Start(ctx); err != nil {
		return fmt.Errorf("%s: start subscriber: %w", n.id, err)
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.coord.run(cctx)
	}()
	if err := n.m.Start(ctx); err != nil {
		return fmt.Errorf("%s: %w", n.id, err)
	}
	return nil
}

// stop leaves the election gracefully (the lock is released if this node
// is master) and then stops everything else. A node that was cut off gets
// errors from its closed client here; they are expected and ignored.
func (n *node) stop(ctx context.Context) error {
	err := n.m.Stop(ctx)
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	_ = n.sub.Close()
	_ = n.client.Close()
	if n.gone.Load() {
		return nil
	}
	return err
}

// cutOff closes the node's connections to Redis, as a crash or a network
// partition would, without releasing or unregistering anything. The node's
// election keeps running in memory: it can no longer renew, so it fences
// itself, and the others take over when the lock expires.
func (n *node) cutOff() {
	n.gone.Store(true)
	_ = n.sub.Close()
	_ = n.client.Close()
}

// kill is cutOff followed by the end of the process: the election stops
// without being able to unregister, so the registry entry stays until the
// master finds it stale.
func (n *node) kill(ctx context.Context) {
	n.cutOff()
	_ = n.stop(ctx)
}

func (n *node) isMaster() bool { return !n.gone.Load() && n.m.IsMaster() }

// holdings returns a copy of the cameras the node serves.
func (n *node) holdings() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.serving)
}

// onEvent prints the node's role changes and feeds the coordinator.
func (n *node) onEvent(e masterelection.Event) {
	tl, st := n.env.tl, n.env.stats
	switch e.Kind {
	case masterelection.EventMasterAcquired:
		st.add(func(s *stats) { s.terms = append(s.terms, e.Term) })
		tl.event(n.id, fmt.Sprintf("MASTER, term %d", e.Term), kindMaster)
		n.mu.Lock()
		dropped := len(n.serving)
		clear(n.serving)
		n.mu.Unlock()
		if dropped > 0 {
			tl.event(n.id, fmt.Sprintf("stops serving its %d cameras: the master coordinates, slaves serve", dropped), kindInfo)
		}
	case masterelection.EventMasterLost:
		st.add(func(s *stats) { s.lostAt[n.id] = time.Now() })
		what := fmt.Sprintf("no longer master (term %d)", e.Term)
		if n.gone.Load() {
			what += ": self-fenced, it could not renew in time"
		}
		tl.event(n.id, what, kindLost)
	case masterelection.EventElectionCompleted:
		if !e.IsMaster {
			tl.event(n.id, "slave", kindInfo)
		}
	case masterelection.EventError:
		if n.gone.Load() {
			st.add(func(s *stats) { s.expected++ })
			return
		}
		st.add(func(s *stats) { s.errors++; s.errorMessages = append(s.errorMessages, n.id+": "+e.Err.Error()) })
		tl.event(n.id, "error: "+e.Err.Error(), kindError)
	}
	n.coord.feed(e)
}

// onAssignment is the slave's handler of msgCameras: it replaces the set of
// cameras it serves with the one assigned.
func (n *node) onAssignment(_ context.Context, msg pubsub.Message) error {
	var a assignment
	if err := msg.Decode(&a); err != nil {
		return err
	}
	n.mu.Lock()
	added, removed := 0, 0
	next := make(map[string]bool, len(a.Cameras))
	for _, c := range a.Cameras {
		next[c] = true
		if !n.serving[c] {
			added++
		}
	}
	for c := range n.serving {
		if !next[c] {
			removed++
		}
	}
	n.serving = next
	n.mu.Unlock()
	n.env.tl.event(n.id, fmt.Sprintf("<- %s from %s: serves %d cameras (+%d -%d)", msgCameras, msg.From, len(a.Cameras), added, removed), kindMessage)
	return nil
}

// onSubscriberError reports what the Subscriber rejected or could not deliver.
func (n *node) onSubscriberError(err error) {
	var stale *pubsub.StaleTermError
	switch {
	case errors.As(err, &stale):
		n.env.stats.add(func(s *stats) { s.rejected++ })
		n.env.tl.event(n.id, fmt.Sprintf("REJECTED %s from %s: its term %d is older than term %d", stale.Type, stale.From, stale.Term, stale.Highest), kindReject)
	case n.gone.Load():
		n.env.stats.add(func(s *stats) { s.expected++ })
	default:
		n.env.stats.add(func(s *stats) { s.errors++; s.errorMessages = append(s.errorMessages, n.id+": "+err.Error()) })
		n.env.tl.event(n.id, "subscriber: "+err.Error(), kindError)
	}
}

// coordinator is the master's work: it keeps the set of live slaves from
// the election's slave events, and after each change (once changes have
// settled) plans the cameras with assign.Reassign and routes to each slave
// its list. It runs on every node and acts only while that node is master.
type coordinator struct {
	n      *node
	events chan masterelection.Event
	done   chan struct{} // closed when run has returned: feed no longer waits

	mu      sync.Mutex
	term    int64                   // the mastership it plans for; 0 while slave
	slaves  map[string]assign.Slave // live slaves as the election reports them
	sent    map[string][]string     // the list each slave last received in this mastership
	plan    assign.Plan             // the last plan
	pending bool                    // a plan is due or some slave has not received its list
}

// feed hands an event to the coordinator; it waits only while the
// coordinator's queue is full, and never after the coordinator stopped.
func (c *coordinator) feed(e masterelection.Event) {
	switch e.Kind {
	case masterelection.EventMasterAcquired, masterelection.EventMasterLost,
		masterelection.EventSlaveRegistered, masterelection.EventSlaveRemoved:
	default:
		return
	}
	select {
	case c.events <- e:
	case <-c.done:
	}
}

// run is the coordinator loop; it returns when ctx ends.
func (c *coordinator) run(ctx context.Context) {
	defer close(c.done)
	var due <-chan time.Time // fires when routing is due; nil while it is not
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-c.events:
			if c.apply(ctx, e) {
				due = time.After(c.n.env.settle)
			}
		case <-due:
			due = nil
			if retry := c.route(ctx); retry {
				due = time.After(c.n.cfg.CheckInterval)
			}
		}
	}
}

// apply updates the coordinator's view with one event and reports whether a
// new plan is due.
func (c *coordinator) apply(ctx context.Context, e masterelection.Event) bool {
	tl := c.n.env.tl
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case masterelection.EventMasterAcquired:
		c.term, c.slaves, c.sent, c.plan = e.Term, map[string]assign.Slave{}, map[string][]string{}, assign.Plan{}
		// Continue from the last master's plan, so that only the cameras
		// that must move do (assign.Planner keeps its plan in Redis alike).
		rctx, cancel := context.WithTimeout(ctx, c.n.cfg.HeartbeatInterval)
		if owner, err := c.n.client.HGetAll(rctx, c.planKey()).Result(); err == nil {
			c.plan.Owner = owner
		}
		cancel()
		c.pending = true
		return true
	case masterelection.EventMasterLost:
		c.term, c.pending = 0, false
		return false
	case masterelection.EventSlaveRegistered:
		if c.term == 0 {
			return false
		}
		id := e.Slave.NodeID
		rctx, cancel := context.WithTimeout(ctx, c.n.cfg.HeartbeatInterval)
		info, err := c.n.m.Process(rctx, id) // the capabilities are in the registry entry
		cancel()
		if err != nil {
			tl.event(c.n.id, fmt.Sprintf("slave-registered %s, but its entry is gone (%v): not planned for", id, err), kindInfo)
			return false
		}
		c.slaves[id] = assign.Slave{ID: id, Capabilities: info.Capabilities}
		tl.event(c.n.id, fmt.Sprintf("slave-registered %s (weight %g)", id, assign.Weight(info.Capabilities)), kindInfo)
	case masterelection.EventSlaveRemoved:
		if c.term == 0 {
			return false
		}
		c.n.env.stats.add(func(s *stats) { s.removedAt[e.NodeID] = time.Now() })
		delete(c.slaves, e.NodeID)
		delete(c.sent, e.NodeID)
		tl.event(c.n.id, fmt.Sprintf("slave-removed %s: its cameras go to the others", e.NodeID), kindLost)
	}
	c.pending = true
	return true
}

// route plans and sends each slave whose list changed its new list. It
// reports whether some send failed and should be retried.
func (c *coordinator) route(ctx context.Context) (retry bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term == 0 || !c.pending {
		return false
	}
	tl := c.n.env.tl
	plan, err := assign.Reassign(c.plan, c.n.env.cameras, slices.Collect(maps.Values(c.slaves)))
	if err != nil {
		tl.event(c.n.id, "plan: "+err.Error(), kindError)
		return false
	}
	c.plan = plan
	// Kept for the next master. Unlike assign.Planner's, this write is not
	// fenced: a deposed master could still overwrite it, costing moves only.
	_, err = c.n.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, c.planKey())
		if len(plan.Owner) > 0 {
			p.HSet(ctx, c.planKey(), plan.Owner)
		}
		return nil
	})
	if err != nil {
		tl.event(c.n.id, "plan not kept: "+err.Error(), kindError)
	}
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(c.slaves)) {
		parts = append(parts, fmt.Sprintf("%s %d", id, len(plan.Items(id))))
	}
	line := fmt.Sprintf("plans %d cameras over %s: %s", len(plan.Owner), plural(len(c.slaves), "slave"), strings.Join(parts, ", "))
	if len(plan.Unassigned) > 0 {
		line += fmt.Sprintf("; %d unassigned (no slave has room)", len(plan.Unassigned))
	}
	tl.event(c.n.id, line, kindInfo)

	c.pending = false
	for _, id := range slices.Sorted(maps.Keys(c.slaves)) {
		items := plan.Items(id)
		if prev, ok := c.sent[id]; ok && slices.Equal(prev, items) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, c.n.cfg.HeartbeatInterval)
		err := c.n.router.Send(sctx, id, msgCameras, assignment{Cameras: items})
		cancel()
		var gone *pubsub.NoSubscriberError
		switch {
		case err == nil:
			c.sent[id] = items
			c.n.env.stats.add(func(s *stats) { s.routed++ })
		case errors.Is(err, pubsub.ErrNotMaster):
			c.n.env.stats.add(func(s *stats) { s.refusedLate++ })
			tl.event(c.n.id, "-> "+id+": refused, no longer master: "+err.Error(), kindReject)
			return false
		case errors.As(err, &gone):
			tl.event(c.n.id, fmt.Sprintf("-> %s: nobody listens on its channel; retrying until it is back or removed", id), kindLost)
			c.pending = true
		default:
			tl.event(c.n.id, fmt.Sprintf("-> %s: %v; retrying", id, err), kindError)
			c.pending = true
		}
	}
	return c.pending
}

// planKey holds the last plan: camera -> slave.
func (c *coordinator) planKey() string { return planKey(c.n.m.LockName()) }

// planKey is the key of the coordinators' plan on lock: camera -> slave.
func planKey(lock string) string { return lock + ":demo:plan" }

// settled reports the last plan of the mastership term when every slave has
// received its list, the plan is not stale, and the slaves are exactly want.
func (c *coordinator) settled(term int64, want []string) (assign.Plan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != term || c.pending || c.plan.Owner == nil {
		return assign.Plan{}, false
	}
	if !slices.Equal(slices.Sorted(maps.Keys(c.slaves)), want) || !slices.Equal(slices.Sorted(maps.Keys(c.sent)), want) {
		return assign.Plan{}, false
	}
	return c.plan, true
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
