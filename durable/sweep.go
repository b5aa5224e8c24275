package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/internal/atomicmax"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// Swept is the outcome of Router.Sweep.
type Swept struct {
	// Term is the term the sweep ran under.
	Term int64
	// Inboxes is the number of inboxes looked at.
	Inboxes int
	// Adopted is the number of entries of older terms added again under
	// Term (Config.DropBacklog unset); Dropped the number deleted instead
	// (Config.DropBacklog set).
	Adopted, Dropped int
	// Malformed is the number of entries without an envelope deleted (not
	// written by herd).
	Malformed int
	// Moved is the number of entries moved out of the inboxes of processes
	// that are not live, by the process whose inbox they left.
	Moved map[string]int
	// Deleted is the number of inboxes deleted: empty, and their process
	// not live, or this process's own, emptied by a move.
	Deleted int
	// Waiting are the processes, not live, whose inboxes stay in place
	// within their Config.Grace, waiting for them to come back (sorted).
	Waiting []string
	// Orphans are the processes, not live (or this process, master),
	// whose inboxes still hold entries because no live slave could take
	// them (ErrNoSlaves) or their move failed; the next sweep tries again.
	Orphans []string
	// Calls is the number of script calls, each one round trip.
	Calls int
}

// changed reports whether the sweep did or left anything worth reporting.
func (s Swept) changed() bool {
	return s.Adopted+s.Dropped+s.Malformed+s.Deleted+len(s.Moved)+len(s.Orphans) > 0
}

// Sweep makes every inbox (the set keyspace.Keys.Inboxes lists) hold only
// work that a live process will read under this mastership:
//
//   - the entries written under an older term, which a slave that knows
//     this term would not handle, are adopted: added again at the inbox's
//     end under this process's term, with their envelope (message id) and
//     delivery count kept; with Config.DropBacklog they are deleted and
//     counted instead. A slave that met such an entry before the sweep
//     left it in its inbox (acknowledged, not deleted) for this step.
//   - the inboxes of processes that are not live in the registry, and this
//     process's own inbox (what it was sent while a slave, which no
//     Consumer of a master need read), are moved to the live slaves with
//     Reassign (pick as there; nil: PickRendezvous), and deleted once
//     empty; the inbox of a process this Router saw live stays in place
//     until its Config.Grace has ended (Swept.Waiting), for a process with
//     its id to come back and read it. This process's inbox is not adopted: a Consumer it may still
//     run would read adopted entries while they move. With Config.Terms
//     set, that Consumer rejects the moved entries' old terms; the entry in
//     its hands at the change is handled there and again after the move.
//
// Each script call checks that this process holds the lock under its term
// in the same atomic step as its changes, so a deposed master changes
// nothing and gets an error matching ErrNotMaster and keyspace.ErrFenced. An
// entry that a slave was handling under the old term while the sweep
// adopted it is handled twice (Delivery.Deliveries counts both).
//
// Maintain runs Sweep by itself; the first Send or SendBatch of each
// mastership runs its adoption step and waits for it.
func (r *Router) Sweep(ctx context.Context, pick Pick) (Swept, error) {
	term, err := route.LiveTerm(r.mastership)
	if err != nil {
		return Swept{}, err
	}
	res, gone, own, err := r.adopt(ctx, term)
	if err != nil {
		return res, err
	}
	r.backlog.done(term)
	var errs []error
	self := r.mastership.NodeID()
	// This process's own inbox first: it holds what was sent to it while
	// it was a slave, which the slaves take over whether or not this
	// process still runs a Consumer. It is live, whatever the registry
	// said a moment ago.
	gone = slices.DeleteFunc(gone, func(id string) bool { return id == self })
	if own {
		gone = append([]string{self}, gone...)
	}
	now := r.cfg.clock.Now()
	for _, id := range gone {
		if id != self {
			if end := r.waits.until(id, now, r.cfg.Grace); now.Before(end) {
				res.Waiting = append(res.Waiting, id)
				continue
			}
		}
		moved, err := r.Reassign(ctx, id, pick)
		res.Calls += moved.Calls
		res.Malformed += moved.Dropped
		if n := moved.Total(); n > 0 {
			if res.Moved == nil {
				res.Moved = map[string]int{}
			}
			res.Moved[id] += n
		}
		if err != nil {
			res.Orphans = append(res.Orphans, id)
			if errors.Is(err, ErrNotMaster) {
				r.orphans.set(res.Orphans)
				return res, err
			}
			if !errors.Is(err, ErrNoSlaves) {
				errs = append(errs, err)
			}
			continue
		}
		if id != self || moved.Total()+moved.Gone+moved.Dropped > 0 {
			res.Deleted++ // Reassign deletes the inbox it emptied
		}
	}
	r.orphans.set(res.Orphans)
	if len(res.Orphans) > 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("sweep: the inboxes of %q: %w", res.Orphans, ErrNoSlaves))
	}
	return res, errors.Join(errs...)
}

// sweepChunk is the most inboxes one inbox_adopt call walks.
const sweepChunk = 128

// adopt walks every inbox but this process's own once with inbox_adopt.lua
// under term, adopting (or dropping) the entries of older terms, and
// returns the processes that are not live whose inboxes still exist, and
// whether this process's own inbox is listed.
func (r *Router) adopt(ctx context.Context, term int64) (res Swept, gone []string, own bool, err error) {
	res = Swept{Term: term}
	ids, err := r.client.SMembers(ctx, r.keys.Inboxes).Result()
	if err != nil {
		return res, nil, false, fmt.Errorf("sweep: list the inboxes (%q): %w", r.keys.Inboxes, err)
	}
	slices.Sort(ids)
	res.Inboxes = len(ids)
	mode := rdb.AdoptKeep
	if r.cfg.DropBacklog {
		mode = rdb.AdoptDrop
	}
	self := r.mastership.NodeID()
	own = slices.Contains(ids, self)
	// This process's own inbox is not adopted but moved to the slaves, by
	// Sweep: adopted in place, its entries would be this term's and read by
	// its own Consumer, if any, while a sweep moves them.
	todo := slices.DeleteFunc(ids, func(id string) bool { return id == self || route.CheckName("process id", id) != nil })
	known := map[string]bool{} // the inboxes that still exist, with their process live or not
	defer func() {
		if err == nil {
			r.waits.keep(known)
		}
	}()
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), sweepChunk)]
		res.Calls++
		states, err := rdb.InboxAdopt(ctx, r.client, r.keys, r.mastership.NodeID(), term, keyspace.InboxGroup, mode, r.cfg.ReassignBatch, chunk)
		if err != nil {
			return res, gone, own, fmt.Errorf("sweep: %w", err) // matches ErrNotMaster too when fenced
		}
		var again []string
		for i, st := range states {
			if mode == rdb.AdoptDrop {
				res.Dropped += st.Taken
			} else {
				res.Adopted += st.Taken
			}
			res.Malformed += st.Malformed
			if st.Live {
				r.waits.sawLive(chunk[i])
			}
			switch {
			case st.More:
				again = append(again, chunk[i])
			case st.Gone:
				if !st.Live {
					res.Deleted++
				}
			case !st.Live:
				gone = append(gone, chunk[i])
				known[chunk[i]] = true
			default:
				known[chunk[i]] = true
			}
		}
		todo = append(again, todo[len(chunk):]...)
	}
	return res, gone, own, nil
}

// takeOver runs the adoption step of a sweep once per term, before this
// master's first send under it, so its entries come after the adopted ones.
func (r *Router) takeOver(ctx context.Context, term int64) error {
	if r.backlog.term.Load() == term {
		return nil
	}
	// One adoption at a time; a sender waiting for another's gives up
	// with its own ctx.
	select {
	case r.backlog.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("take over the inboxes of the earlier masters: %w", ctx.Err())
	}
	defer func() { <-r.backlog.turn }()
	if r.backlog.term.Load() == term {
		return nil
	}
	res, _, _, err := r.adopt(ctx, term)
	if err != nil {
		return fmt.Errorf("take over the inboxes of the earlier masters: %w", err)
	}
	r.backlog.done(term)
	if res.changed() && r.cfg.OnSweep != nil {
		r.cfg.OnSweep(res)
	}
	return nil
}

// backlog records the last term whose adoption step ran to its end.
type backlog struct {
	turn chan struct{} // one slot: serialises the adoption step of takeOver
	term atomic.Int64
}

func (b *backlog) done(term int64) { atomicmax.Raise(&b.term, term) }

// waits is a Router's memory for Config.Grace: the processes whose inbox
// a sweep found live, and when each of them was learned gone.
type waits struct {
	mu   sync.Mutex
	live map[string]bool      // guarded by mu: seen live, inbox still there
	left map[string]time.Time // guarded by mu: when each process of live was learned gone
}

// sawLive records that a sweep found id live: it is no longer waited for.
func (w *waits) sawLive(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live == nil {
		w.live, w.left = map[string]bool{}, map[string]time.Time{}
	}
	w.live[id] = true
	delete(w.left, id)
}

// removed records that the master removed id at t (its slave-removed
// event), if a sweep saw it live and it was not learned gone before.
func (w *waits) removed(id string, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.left[id]; w.live[id] && !ok {
		w.left[id] = t
	}
}

// until returns when the grace of id, found gone at now, ends: grace after
// it was learned gone; the zero time for a process never seen live, or
// grace negative.
func (w *waits) until(id string, now time.Time, grace time.Duration) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if grace < 0 || !w.live[id] {
		return time.Time{}
	}
	t, ok := w.left[id]
	if !ok {
		t = now
		w.left[id] = t
	}
	return t.Add(grace)
}

// next returns the earliest end of a grace after now; zero when none.
func (w *waits) next(now time.Time, grace time.Duration) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, t := range w.left {
		if end := t.Add(grace); now.Before(end) && (first.IsZero() || end.Before(first)) {
			first = end
		}
	}
	return first
}

// keep forgets the processes whose inbox is not in inboxes (deleted).
func (w *waits) keep(inboxes map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.live {
		if !inboxes[id] {
			delete(w.live, id)
			delete(w.left, id)
		}
	}
}

// Orphans returns the processes, not live, whose inboxes the last sweep
// could not move to a slave (sorted).
func (r *Router) Orphans() []string { return r.orphans.list() }

// orphans is the set of inboxes the last sweep left behind.
type orphans struct {
	mu  sync.Mutex
	ids []string // guarded by mu
}

func (o *orphans) set(ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = slices.Sorted(slices.Values(ids))
}

func (o *orphans) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ids)
}

// Events is the part of the election Maintain listens to;
// *masterelection.MasterElection implements it (its handlers run on
// goroutines of their own). When it also has RunIfMaster, as the election
// has, Maintain covers a mastership that began before it was called.
type Events interface {
	OnMasterAcquired(fn func(ctx context.Context, term int64)) (unsubscribe func())
	OnSlaveRemoved(fn func(nodeID string)) (unsubscribe func())
	OnSlaveRegistered(fn func(registry.SlaveNode)) (unsubscribe func())
}

// masterRunner is the election's RunIfMaster.
type masterRunner interface {
	RunIfMaster(ctx context.Context, fn func(ctx context.Context, term int64) error) (bool, error)
}

// Maintain keeps the inboxes swept while this process is master: it runs
// Sweep(pick) at each master-acquired, at each slave-registered and
// slave-removed event, and every Config.SweepInterval, each run bounded by
// Config.ReassignTimeout, on one goroutine per mastership that ends with
// the mastership. So the predecessors' backlog is adopted (or dropped, with
// Config.DropBacklog) as soon as this process becomes master, and the
// entries of a process that left the registry move to the live slaves
// within SweepInterval of its removal, also when it left between a send and
// its handling. Outcomes go to Config.OnSweep, errors to Config.OnError.
//
// The returned function unsubscribes and waits for a sweep in progress to
// end.
func (r *Router) Maintain(events Events, pick Pick) (stop func()) {
	m := &maintainer{r: r, pick: pick, kick: make(chan struct{}, 1), quit: make(chan struct{})}
	u1 := events.OnMasterAcquired(func(ctx context.Context, _ int64) { m.start(ctx) })
	u2 := events.OnSlaveRemoved(func(id string) {
		r.waits.removed(id, r.cfg.clock.Now())
		m.poke()
	})
	u3 := events.OnSlaveRegistered(func(registry.SlaveNode) { m.poke() })
	if mr, ok := events.(masterRunner); ok && m.r.mastership.IsMaster() {
		// A mastership already under way: its ctx lives as long as
		// RunIfMaster's fn, so the sweeps run inside it.
		quit, cancel := context.WithCancel(context.Background())
		go func() {
			<-m.quit
			cancel()
		}()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer cancel()
			_, _ = mr.RunIfMaster(quit, func(ctx context.Context, _ int64) error {
				m.loop(ctx)
				return nil
			})
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			u1()
			u2()
			u3()
			m.mu.Lock()
			m.stopped = true
			close(m.quit)
			m.mu.Unlock()
			m.wg.Wait()
		})
	}
}

// maintainer is Maintain's state: one sweeping goroutine per mastership.
type maintainer struct {
	r    *Router
	pick Pick
	kick chan struct{} // a sweep is wanted; buffered 1
	quit chan struct{} // closed by stop

	mu      sync.Mutex
	stopped bool // guarded by mu
	wg      sync.WaitGroup

	orphans []string // guarded by mu; the last sweep's
}

func (m *maintainer) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// start runs loop on a goroutine of its own, unless Maintain stopped.
func (m *maintainer) start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.loop(ctx)
	}()
}

// loop sweeps until the mastership's ctx is done or Maintain stops, also
// when the first grace of an inbox left in place ends.
func (m *maintainer) loop(ctx context.Context) {
	clk := m.r.cfg.clock
	t := clk.NewTimer(m.r.cfg.SweepInterval) // every SweepInterval, as a ticker
	defer t.Stop()
	grace := clk.NewTimer(time.Hour)
	defer grace.Stop()
	for {
		m.sweep(ctx)
		var graceC <-chan time.Time
		if end := m.r.waits.next(clk.Now(), m.r.cfg.Grace); !end.IsZero() {
			grace.Reset(end.Sub(clk.Now()) + time.Millisecond)
			graceC = grace.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-m.quit:
			return
		case <-t.C():
			t.Reset(m.r.cfg.SweepInterval)
		case <-m.kick:
		case <-graceC:
		}
	}
}

func (m *maintainer) sweep(mastership context.Context) {
	ctx, cancel := context.WithTimeout(mastership, m.r.cfg.ReassignTimeout)
	defer cancel()
	res, err := m.r.Sweep(ctx, m.pick)
	if mastership.Err() != nil {
		return // the mastership ended: its errors are no news
	}
	// The same orphans as the sweep before, waiting for a slave, are no
	// news either: reported once, not every SweepInterval.
	m.mu.Lock()
	same := slices.Equal(res.Orphans, m.orphans)
	m.orphans = res.Orphans
	m.mu.Unlock()
	news := res.Adopted+res.Dropped+res.Malformed+res.Deleted+len(res.Moved) > 0 || !same
	if news && m.r.cfg.OnSweep != nil {
		m.r.cfg.OnSweep(res)
	}
	if err != nil && !(same && errors.Is(err, ErrNoSlaves) && len(res.Orphans) > 0 && isOnly(err, ErrNoSlaves)) {
		m.r.cfg.report(err)
	}
}

// isOnly reports whether err is target wrapped alone, not joined with
// other errors.
func isOnly(err, target error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		return len(errs) == 1 && isOnly(errs[0], target)
	}
	return errors.Is(err, target)
}
