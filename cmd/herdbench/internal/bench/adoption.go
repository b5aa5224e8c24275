package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/durable"
	"github.com/herdkit/herd/internal/testkit/benchkit"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
)

// AdoptionResult is what Adoption measured.
type AdoptionResult struct {
	// Backlog and Slaves: each round adopted Backlog entries spread evenly
	// over the inboxes of Slaves live slaves.
	Backlog, Slaves int
	// Sweep is, per round, the time of the new master's Router.Sweep that
	// adopted the backlog.
	Sweep []time.Duration
	// Calls is the number of script calls (inbox_adopt.lua, one round trip
	// each) of one adopting Sweep; the same in every round.
	Calls int
	// Idle is, per sweep, the time of a Router.Sweep with nothing to adopt
	// and empty inboxes: the steady state of slaves that keep up, as
	// Maintain runs it every SweepInterval.
	Idle []time.Duration
	// IdleFull is the same with each inbox still holding its share of the
	// adopted backlog (entries of the current term, not yet handled).
	IdleFull []time.Duration
	// IdleCalls is the number of script calls of one such Sweep.
	IdleCalls int
	// ServerCPU is Redis's CPU time (INFO cpu) per adopted entry over the
	// adopting sweeps; zero when it could not be read.
	ServerCPU time.Duration
	// Inside is, per command of adoptCommands, the time Redis spent
	// executing it per adopted entry over the adopting sweeps (INFO
	// commandstats; "evalsha" is the script calls' whole time, the others
	// the commands they ran); nil when it could not be read.
	Inside map[string]time.Duration
}

// adoptCommands are the commands whose time inside Redis Adoption reports:
// the script call and the commands inbox_adopt.lua runs per entry.
var adoptCommands = []string{"evalsha", "xrange", "xpending", "xadd", "xack", "xdel"}

// usecs reads the microseconds Redis spent in each of cmds from INFO
// commandstats.
func usecs(ctx context.Context, c redis.UniversalClient, cmds []string) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := make(map[string]int64, len(cmds))
	for _, cmd := range cmds {
		_, usec, _ := benchkit.CommandUsec(info, cmd) // absent: not called yet
		out[cmd] = usec
	}
	return out, nil
}

// idleSweeps is the number of sweeps with nothing to adopt timed after each
// adopting sweep of Adoption.
const idleSweeps = 5

// settle is how long Adoption waits after a new master's OnMasterAcquired
// before it times the Sweep, so the election's own work after an acquire
// (registration, slave tracker) is over.
const settle = 20 * time.Millisecond

// registerSlaves registers the processes ids as live slaves in the
// registry of keys, as their elections would, on the backend the server
// offers.
func registerSlaves(ctx context.Context, c redis.UniversalClient, keys keyspace.Keys, ids []string) error {
	reg, err := registry.New(ctx, c, keys, registry.Config{ProcessTTL: 10 * time.Minute})
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	for _, id := range ids {
		if err := reg.Register(ctx, registry.ProcessInfo{ProcessID: id, Role: registry.RoleSlave}); err != nil {
			return fmt.Errorf("register %s: %w", id, err)
		}
	}
	return nil
}

// backlogSlaves registers slaves processes (slaveIDs) as live
// (registerSlaves), creates their inboxes' consumer group (as their
// Consumers' Start would), and returns their ids.
func backlogSlaves(ctx context.Context, c redis.UniversalClient, keys keyspace.Keys, slaves int) ([]string, error) {
	ids := slaveIDs(slaves)
	if err := registerSlaves(ctx, c, keys, ids); err != nil {
		return nil, err
	}
	for _, id := range ids {
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.XGroupCreateMkStream(ctx, keys.Inbox(id), keyspace.InboxGroup, "0")
			p.SAdd(ctx, keys.Inboxes, id)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("create the inbox of %s: %w", id, err)
		}
	}
	return ids, nil
}

// backlogBatch is n messages of type msgType spread round-robin over ids.
func backlogBatch(ids []string, msgType string, n int) []pubsub.Outgoing {
	out := make([]pubsub.Outgoing, n)
	for i := range out {
		out[i] = pubsub.Outgoing{SlaveID: ids[i%len(ids)], Type: msgType, Payload: benchPayload{Seq: i}}
	}
	return out
}

// sendAll sends msgs with r.SendBatch and fails unless every one was stored.
func sendAll(ctx context.Context, r *durable.Router, msgs []pubsub.Outgoing) error {
	b, err := r.SendBatch(ctx, msgs)
	if err == nil {
		err = b.Err()
	}
	if err != nil {
		return fmt.Errorf("send the backlog: %w", err)
	}
	if b.Stored() != len(msgs) {
		return fmt.Errorf("%w: %d of %d backlog entries stored", errUnexpected, b.Stored(), len(msgs))
	}
	return nil
}

// Adoption measures what a new master's Router.Sweep costs, reps times:
// an old master (a MasterElection with a durable.Router) stores backlog
// entries with SendBatch, spread evenly over the inboxes of slaves live
// slaves whose Consumers read none of them; it hands the lock over with
// Transfer to a second node, as an election would; once that node's
// OnMasterAcquired ran and settle passed, its Router.Sweep is timed. Then
// idleSweeps more sweeps, with nothing to adopt, are timed one after the
// other (IdleFull), the inboxes are emptied (XTRIM), as Consumers that keep
// up would leave them, and idleSweeps more are timed (Idle); the next round's
// backlog is stored by the node that is now master before it hands the lock
// back.
func Adoption(ctx context.Context, env *Env, slaves, backlog, reps int) (AdoptionResult, error) {
	res := AdoptionResult{Backlog: backlog, Slaves: slaves}
	if slaves < 1 || backlog < 1 || reps < 1 {
		return res, fmt.Errorf("adoption needs at least 1 slave, entry and round, got %d, %d, %d", slaves, backlog, reps)
	}
	lock := env.LockName("adopt")
	keys := keyspace.NewKeys(lock, false)
	admin := env.NewClient()
	defer admin.Close()
	nodes := make([]*node, 2)
	defer func() { closeAll(ctx, nodes) }()
	routers := make([]*durable.Router, 2)
	for i := range nodes {
		n, err := newWarmNode(ctx, env, Timings(lock, fmt.Sprintf("master-%d", i), 30*time.Second))
		if err != nil {
			return res, err
		}
		nodes[i] = n
		if err := n.Start(ctx); err != nil {
			return res, fmt.Errorf("adoption: start node %d: %w", i, err)
		}
		if routers[i], err = durable.NewRouter(n.client, n, nil, durable.Config{}); err != nil {
			return res, err
		}
	}
	if !nodes[0].IsMaster() {
		return res, fmt.Errorf("adoption: the first node of lock %q is not master", lock)
	}
	select {
	case <-nodes[0].acquired:
	case <-time.After(5 * time.Second):
		return res, fmt.Errorf("adoption: the first master's OnMasterAcquired did not run within 5s")
	}
	ids, err := backlogSlaves(ctx, admin, keys, slaves)
	if err != nil {
		return res, err
	}
	inboxes := make([]string, len(ids))
	for i, id := range ids {
		inboxes[i] = keys.Inbox(id)
	}
	defer func() { _ = admin.Del(context.WithoutCancel(ctx), inboxes...).Err() }()
	msgs := backlogBatch(ids, "backlog", backlog)
	var cpu float64
	cpuOK := true
	inside := map[string]int64{}
	cur := 0
	for r := range reps {
		from, to := cur, 1-cur
		if err := sendAll(ctx, routers[from], msgs); err != nil {
			return res, fmt.Errorf("adoption, round %d: %w", r+1, err)
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := nodes[from].Transfer(tctx, nodes[to].NodeID())
		cancel()
		if err != nil {
			return res, fmt.Errorf("adoption, round %d: transfer: %w", r+1, err)
		}
		select {
		case <-nodes[to].acquired:
		case <-time.After(5 * time.Second):
			return res, fmt.Errorf("adoption, round %d: %s's OnMasterAcquired did not run within 5s", r+1, nodes[to].NodeID())
		}
		if err := sleep(ctx, settle); err != nil {
			return res, err
		}
		u0, erru0 := usecs(ctx, admin, adoptCommands)
		s0, err0 := serverCPU(ctx, admin)
		t0 := time.Now()
		sw, err := routers[to].Sweep(ctx, nil)
		d := time.Since(t0)
		s1, err1 := serverCPU(ctx, admin)
		u1, erru1 := usecs(ctx, admin, adoptCommands)
		if err != nil {
			return res, fmt.Errorf("adoption, round %d: sweep: %w", r+1, err)
		}
		if sw.Adopted != backlog || sw.Inboxes != slaves || len(sw.Moved) > 0 || sw.Malformed > 0 {
			return res, fmt.Errorf("%w: adoption, round %d: the sweep adopted %d of %d entries in %d of %d inboxes (%+v)", errUnexpected, r+1, sw.Adopted, backlog, sw.Inboxes, slaves, sw)
		}
		res.Sweep = append(res.Sweep, d)
		res.Calls = sw.Calls
		if err0 != nil || err1 != nil {
			cpuOK = false
		}
		cpu += s1 - s0
		if erru0 != nil || erru1 != nil {
			inside = nil
		}
		if inside != nil {
			for _, cmd := range adoptCommands {
				inside[cmd] += u1[cmd] - u0[cmd]
			}
		}
		idle := func(into *[]time.Duration) error {
			for range idleSweeps {
				t0 := time.Now()
				sw, err := routers[to].Sweep(ctx, nil)
				d := time.Since(t0)
				if err != nil {
					return fmt.Errorf("adoption, round %d: idle sweep: %w", r+1, err)
				}
				if sw.Adopted+sw.Malformed+sw.Deleted+len(sw.Moved)+len(sw.Orphans) > 0 {
					return fmt.Errorf("%w: adoption, round %d: a sweep with nothing to do did %+v", errUnexpected, r+1, sw)
				}
				*into = append(*into, d)
				res.IdleCalls = sw.Calls
			}
			return nil
		}
		if err := idle(&res.IdleFull); err != nil {
			return res, err
		}
		// What a slave's Consumer would do with the adopted entries, all at
		// once: the next round's backlog starts from empty inboxes.
		if _, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range inboxes {
				p.XTrimMaxLen(ctx, k, 0)
			}
			return nil
		}); err != nil {
			return res, fmt.Errorf("adoption, round %d: empty the inboxes: %w", r+1, err)
		}
		if err := idle(&res.Idle); err != nil {
			return res, err
		}
		cur = to
	}
	if cpuOK {
		res.ServerCPU = time.Duration(cpu * float64(time.Second) / float64(reps*backlog))
	}
	if inside != nil {
		res.Inside = make(map[string]time.Duration, len(inside))
		for cmd, usec := range inside {
			res.Inside[cmd] = time.Duration(usec) * time.Microsecond / time.Duration(reps*backlog)
		}
	}
	return res, nil
}

// BacklogResult is what BacklogFailover measured.
type BacklogResult struct {
	// Backlog and Slaves: each round's backlog was Backlog entries spread
	// evenly over the inboxes of Slaves slaves.
	Backlog, Slaves int
	// Acquired is, per round, the time from the old master's Stop until
	// OnMasterAcquired ran on the new master (row 4's handover).
	Acquired []time.Duration
	// Swept is, per round, the time from that acquisition until the new
	// master's first sweep that adopted entries had ended (its
	// Config.OnSweep call).
	Swept []time.Duration
	// First is, per round, the time from that acquisition until a slave's
	// handler was called for an adopted entry (Delivery.Term = the new
	// term); a round where no entry was adopted has none.
	First []time.Duration
	// All is, per round, the time from that acquisition until every
	// message of the backlog had been handled at least once.
	All []time.Duration
	// Adopted and Calls: the entries the new masters' sweeps adopted and
	// their script calls, summed over the rounds.
	Adopted, Calls int
	// Read is the number of entries the slaves' Consumers had read and not
	// acknowledged when the master stopped (XPENDING, summed): the ones in
	// their hands, the rest still unread in the inboxes.
	Read int
	// OldTerm is the number of handler calls for entries of the old term,
	// which the slaves had read before the failover (summed).
	OldTerm int
	// Rejected is the number of entries the slaves' Consumers left as
	// stale, for the new master to adopt (Consumer.Rejected, summed).
	Rejected int
	// Twice is the number of messages handled more than once (summed).
	Twice int
}

// backlogRig is BacklogFailover's slaves' side: every handler call first
// waits for the gate, which the new master's OnMasterAcquired opens.
type backlogRig struct {
	mu      sync.Mutex
	gate    chan struct{} // closed: handlers run
	entered int           // handler calls that reached the gate this round
	backlog int
	floor   int64     // the old master's term: an acquisition must be above it
	term    int64     // the new master's term; 0 until it acquired
	acqAt   time.Time // when its OnMasterAcquired ran
	first   time.Time // first handler call for an entry of term
	allAt   time.Time // every message handled once
	sweptAt time.Time // end of the first sweep under term that adopted
	adopted, calls,
	oldTerm int
	seen    map[string]int // message id -> handler calls
	acqCh   chan struct{}  // closed at the acquisition
	allDone chan struct{}  // closed when every message was handled
	errs    []error        // sweep errors under term
}

// reset closes the gate and clears the round's counters; floor is the
// term of the master whose backlog the round measures.
func (g *backlogRig) reset(backlog int, floor int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.entered, g.backlog, g.floor = make(chan struct{}), 0, backlog, floor
	g.term, g.acqAt, g.first, g.allAt, g.sweptAt = 0, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	g.adopted, g.calls, g.oldTerm, g.errs = 0, 0, 0, nil
	g.seen = make(map[string]int, backlog)
	g.acqCh, g.allDone = make(chan struct{}), make(chan struct{})
}

// acquired is the new master's OnMasterAcquired: it notes the instant and
// the term, and opens the gate.
func (g *backlogRig) acquired(_ context.Context, term int64) {
	at := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.term != 0 || term <= g.floor {
		return // not this round's take-over
	}
	g.term, g.acqAt = term, at
	close(g.acqCh)
	close(g.gate)
}

// handle is the slaves' handler of backlog entries.
func (g *backlogRig) handle(ctx context.Context, d durable.Delivery) error {
	g.mu.Lock()
	gate := g.gate
	g.entered++
	g.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	at := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case d.Term == g.term && g.first.IsZero():
		g.first = at
	case d.Term < g.term:
		g.oldTerm++
	}
	g.seen[d.ID]++
	if g.seen[d.ID] == 1 && len(g.seen) == g.backlog {
		g.allAt = at
		close(g.allDone)
	}
	return nil
}

// swept is the new master's Config.OnSweep.
func (g *backlogRig) swept(s durable.Swept) {
	at := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.term == 0 || s.Term != g.term {
		return
	}
	if s.Adopted > 0 && g.sweptAt.IsZero() {
		g.sweptAt = at
	}
	g.adopted += s.Adopted
	g.calls += s.Calls
}

// sweepErr is the new master's Config.OnError.
func (g *backlogRig) sweepErr(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.term != 0 {
		g.errs = append(g.errs, err)
	}
}

func (g *backlogRig) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entered
}

// BacklogFailover measures, reps times, how soon the backlog of a master
// that steps down is handled under its successor. The slaves are real
// processes: a MasterElection each (NonCandidate: registered, following
// the terms) with a durable.Consumer on the same client, Terms set to the
// election, default Consumer settings but Block 100ms. Their handler
// blocks every call until the round's gate opens: a slave busy with its
// first entry, the rest of its inbox waiting (the Consumer has read up to
// ReadCount of them). Each round a new candidate starts with a
// durable.Router whose Maintain runs on its election; the master stores
// backlog entries with SendBatch, spread evenly over the slaves, and,
// once every slave is in its handler, stops (Stop: release, as at a
// graceful handover). The new master's OnMasterAcquired handler of this
// function notes the instant and opens the gate; Maintain's sweep,
// started by the same event, adopts what is left of the old term. It
// times, from that instant, the end of the adopting sweep, the first
// handler call of an adopted entry, and the instant every message had
// been handled at least once; the round ends when the inboxes are empty.
func BacklogFailover(ctx context.Context, env *Env, slaves, backlog, reps int) (BacklogResult, error) {
	res := BacklogResult{Backlog: backlog, Slaves: slaves}
	if slaves < 1 || backlog < 1 || reps < 1 {
		return res, fmt.Errorf("backlog failover needs at least 1 slave, entry and round, got %d, %d, %d", slaves, backlog, reps)
	}
	lock := env.LockName("backlog")
	keys := keyspace.NewKeys(lock, false)
	admin := env.NewClient()
	defer admin.Close()
	g := &backlogRig{}
	g.reset(backlog, math.MaxInt64) // no round yet: no acquisition counts

	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	// The master and its router, Maintain included, as every candidate runs it.
	newMaster := func(i int) (*node, *durable.Router, func(), error) {
		n, err := newWarmNode(ctx, env, Timings(lock, fmt.Sprintf("master-%d", i), 30*time.Second))
		if err != nil {
			return nil, nil, nil, err
		}
		n.OnMasterAcquired(g.acquired)
		r, err := durable.NewRouter(n.client, n, nil, durable.Config{OnSweep: g.swept, OnError: g.sweepErr})
		if err != nil {
			n.close(ctx)
			return nil, nil, nil, err
		}
		stop := r.Maintain(n.MasterElection, nil)
		if err := n.Start(ctx); err != nil {
			stop()
			n.close(ctx)
			return nil, nil, nil, fmt.Errorf("start %s: %w", n.NodeID(), err)
		}
		return n, r, stop, nil
	}
	master, router, stopMaintain, err := newMaster(0)
	if err != nil {
		return res, err
	}
	defer func() {
		stopMaintain()
		master.close(ctx)
	}()
	if !master.IsMaster() {
		return res, fmt.Errorf("backlog failover: the first node of lock %q is not master", lock)
	}
	ids := slaveIDs(slaves)
	var consumers []*durable.Consumer
	for i := range ids {
		cfg := Timings(lock, ids[i], 30*time.Second)
		cfg.NonCandidate = true
		s, err := newWarmNode(ctx, env, cfg)
		if err != nil {
			return res, err
		}
		closers = append(closers, func() { s.close(ctx) })
		if err := s.Start(ctx); err != nil {
			return res, fmt.Errorf("start %s: %w", ids[i], err)
		}
		con, err := durable.NewConsumer(s.client, ids[i], durable.Config{Block: 100 * time.Millisecond, Terms: s.MasterElection})
		if err != nil {
			return res, err
		}
		if err := con.Handle("backlog", g.handle); err != nil {
			return res, err
		}
		if err := con.Start(ctx); err != nil {
			return res, fmt.Errorf("start the consumer of %s: %w", ids[i], err)
		}
		consumers = append(consumers, con)
		closers = append(closers, func() {
			_ = con.Close()
			_ = admin.Del(context.WithoutCancel(ctx), keys.Inbox(ids[i])).Err()
		})
	}
	// Sends reach only live processes: wait for every slave's registration.
	if err := until(ctx, 5*time.Second, func() (bool, error) {
		n, err := admin.HMGet(ctx, keys.Processes, ids...).Result()
		if err != nil {
			return false, err
		}
		for _, v := range n {
			if v == nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return res, fmt.Errorf("backlog failover: the slaves' registrations: %w", err)
	}
	rejected := func() int {
		n := 0
		for _, c := range consumers {
			n += int(c.Rejected())
		}
		return n
	}
	msgs := backlogBatch(ids, "backlog", backlog)
	for r := range reps {
		next, nextRouter, nextStop, err := newMaster(r + 1)
		if err != nil {
			return res, fmt.Errorf("backlog failover, round %d: %w", r+1, err)
		}
		if next.IsMaster() {
			nextStop()
			next.close(ctx)
			return res, fmt.Errorf("backlog failover, round %d: the new node became master while the old one held the lock", r+1)
		}
		floor := master.Term()
		if floor == 0 {
			nextStop()
			next.close(ctx)
			return res, fmt.Errorf("backlog failover, round %d: the master lost the lock before its backlog was stored", r+1)
		}
		g.reset(backlog, floor)
		rej0 := rejected()
		if err := sendAll(ctx, router, msgs); err != nil {
			nextStop()
			next.close(ctx)
			return res, fmt.Errorf("backlog failover, round %d: %w", r+1, err)
		}
		if err := until(ctx, 5*time.Second, func() (bool, error) { return g.count() >= slaves, nil }); err != nil {
			nextStop()
			next.close(ctx)
			return res, fmt.Errorf("backlog failover, round %d: the slaves did not all start on the backlog: %w", r+1, err)
		}
		for _, id := range ids {
			p, err := admin.XPending(ctx, keys.Inbox(id), keyspace.InboxGroup).Result()
			if err != nil {
				nextStop()
				next.close(ctx)
				return res, fmt.Errorf("backlog failover, round %d: XPENDING: %w", r+1, err)
			}
			res.Read += int(p.Count)
		}
		t0 := time.Now()
		stopErr := stopWithin(ctx, master.MasterElection, 5*time.Second)
		stopMaintain()
		master.close(ctx)
		master, router, stopMaintain = next, nextRouter, nextStop
		if stopErr != nil {
			return res, fmt.Errorf("backlog failover, round %d: stop the master: %w", r+1, stopErr)
		}
		select {
		case <-g.acqCh:
		case <-time.After(5 * time.Second):
			return res, fmt.Errorf("backlog failover, round %d: no take-over within 5s of the master's Stop", r+1)
		}
		select {
		case <-g.allDone:
		case <-time.After(30 * time.Second):
			g.mu.Lock()
			n := len(g.seen)
			g.mu.Unlock()
			return res, fmt.Errorf("backlog failover, round %d: %d of %d messages handled within 30s of the take-over", r+1, n, backlog)
		}
		// The round ends when the inboxes are empty: every adopted entry
		// handled too, so the next round starts clean.
		if err := until(ctx, 30*time.Second, func() (bool, error) {
			total := int64(0)
			for _, id := range ids {
				n, err := admin.XLen(ctx, keys.Inbox(id)).Result()
				if err != nil {
					return false, err
				}
				total += n
			}
			return total == 0, nil
		}); err != nil {
			return res, fmt.Errorf("backlog failover, round %d: the inboxes did not empty: %w", r+1, err)
		}
		g.mu.Lock()
		res.Acquired = append(res.Acquired, g.acqAt.Sub(t0))
		res.All = append(res.All, g.allAt.Sub(g.acqAt))
		if !g.first.IsZero() {
			res.First = append(res.First, g.first.Sub(g.acqAt))
		}
		if !g.sweptAt.IsZero() {
			res.Swept = append(res.Swept, g.sweptAt.Sub(g.acqAt))
		}
		res.Adopted += g.adopted
		res.Calls += g.calls
		res.OldTerm += g.oldTerm
		for _, n := range g.seen {
			if n > 1 {
				res.Twice++
			}
		}
		errs := errors.Join(g.errs...)
		g.mu.Unlock()
		res.Rejected += rejected() - rej0
		if errs != nil {
			return res, fmt.Errorf("backlog failover, round %d: the new master's sweeps: %w", r+1, errs)
		}
	}
	return res, nil
}

// until polls cond every millisecond until it holds, returns an error, or
// limit passes.
func until(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		if err := sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

// adoptionRows are rows 9k to 9o: what a new master's adoption of its
// predecessor's durable backlog costs (9k-9m), and how soon a backlog is
// handled after a failover (9n, 9o).
func adoptionRows(ctx context.Context, env *Env, plan Plan) []Row {
	a, err := Adoption(ctx, env, plan.Slaves, plan.Backlog, plan.AdoptReps)
	per := make([]time.Duration, len(a.Sweep))
	for i, d := range a.Sweep {
		per[i] = d / time.Duration(max(a.Backlog, 1))
	}
	cpu := "Redis CPU not read"
	if a.ServerCPU > 0 {
		cpu = fmt.Sprintf("Redis CPU %v (INFO cpu)", benchkit.FormatDuration(a.ServerCPU))
	}
	if a.Inside != nil {
		cpu += fmt.Sprintf("; inside Redis (INFO commandstats) the script %s, of which XRANGE %s, XPENDING %s, XADD %s, XACK %s, XDEL %s",
			benchkit.FormatDuration(a.Inside["evalsha"]), benchkit.FormatDuration(a.Inside["xrange"]), benchkit.FormatDuration(a.Inside["xpending"]),
			benchkit.FormatDuration(a.Inside["xadd"]), benchkit.FormatDuration(a.Inside["xack"]), benchkit.FormatDuration(a.Inside["xdel"]))
	}
	sweep := LatencyRow("9k", fmt.Sprintf("adoption: a new master's durable Router.Sweep of a backlog of %s entries of the old term in %d live slaves' inboxes", thousands(plan.Backlog), plan.Slaves), a.Sweep, "—", "")
	perEntry := LatencyRow("9l", fmt.Sprintf("adoption per entry: row 9k divided by its %s entries", thousands(plan.Backlog)), per, "—", "")
	idle := LatencyRow("9m", fmt.Sprintf("steady-state sweep: Router.Sweep with nothing to adopt, %d inboxes, every process live", plan.Slaves), a.Idle, "—", "")
	sweep.Err, perEntry.Err, idle.Err = err, err, err
	rows := group(fmt.Sprintf("Two MasterElections (default timings) on one lock, each with a durable.Router. Per round the master stores the backlog by SendBatch, %d per inbox (consumer groups created, nothing reading), and Transfers the lock; %v after the other's OnMasterAcquired, its Sweep is timed: an SMEMBERS of the inbox set, then %d fenced inbox_adopt.lua calls (Config.ReassignBatch: 128 entries) that per entry XRANGE, XPENDING (its deliveries), XADD under the new term, XACK and XDEL. Per adopted entry: %s. 9m: Maintain's sweep every Config.SweepInterval (5s default) and slave event while slaves keep up: after each 9k round, inboxes emptied, %d sweeps back to back, each an SMEMBERS and %d inbox_adopt call; with each inbox still holding its %d adopted entries (current term): %s p50, %s p99 (inbox_adopt XRANGEs up to 64 entries per inbox before checking the first one's term).",
		plan.Backlog/max(plan.Slaves, 1), settle, a.Calls, cpu, idleSweeps, a.IdleCalls, plan.Backlog/max(plan.Slaves, 1), benchkit.FormatDuration(benchkit.Summarize(a.IdleFull).P50), benchkit.FormatDuration(benchkit.Summarize(a.IdleFull).P99)),
		[]Row{sweep, perEntry, idle})

	b, err := BacklogFailover(ctx, env, plan.Slaves, plan.Backlog, plan.BacklogReps)
	rounds := float64(max(len(b.All), 1))
	first := LatencyRow("9n", fmt.Sprintf("failover with a durable backlog of %s entries, %d slaves: new master's acquisition → first adopted entry handled by a slave", thousands(plan.Backlog), plan.Slaves), b.First, "—", "")
	all := LatencyRow("9o", fmt.Sprintf("failover with a durable backlog of %s entries, %d slaves: new master's acquisition → the whole backlog handled", thousands(plan.Backlog), plan.Slaves), b.All, "—", "")
	first.Err, all.Err = err, err
	return append(rows, group(fmt.Sprintf("Per round: a new candidate (MasterElection, default timings) with a durable.Router, Maintain on its election; the master stores the backlog by SendBatch, %d per slave; each slave a NonCandidate MasterElection (registered, following terms) with a durable.Consumer (Terms = it, Block 100ms, else defaults) whose handler waits at a gate. With every slave in its handler on its first entry (%.1f entries read per round, per XPENDING; the rest still queued), the master Stops (%v p50 to OnMasterAcquired); the new master's OnMasterAcquired (the benchmark's) starts the clock and opens the gate. Maintain's sweep, on the same event, adopts the old term's rest (done %v after, p50; %.0f entries in %.1f script calls per round); slaves finish the entry in hand, then the old-term entries read: stale once their election knows the new term (%.1f per round), else handled (%.1f per round, entries in hand included; %.1f under both terms). 9n ends at the first handler call for a new-term entry (Delivery.Term; %d of %d rounds had one); 9o when every message was handled at least once (by id, either term); a round ends when every inbox is empty.",
		plan.Backlog/max(plan.Slaves, 1), float64(b.Read)/rounds, benchkit.FormatDuration(benchkit.Summarize(b.Acquired).P50), benchkit.FormatDuration(benchkit.Summarize(b.Swept).P50),
		float64(b.Adopted)/rounds, float64(b.Calls)/rounds, float64(b.Rejected)/rounds, float64(b.OldTerm)/rounds, float64(b.Twice)/rounds, len(b.First), len(b.All)), []Row{first, all})...)
}
