package durable

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/registry"
)

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
		m.join(mr)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			u1()
			u2()
			u3()
			m.stop()
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

// poke asks for a sweep; a request already waiting covers it.
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

// join runs loop inside a mastership already under way when Maintain was
// called: its ctx lives as long as RunIfMaster's fn, so the sweeps run
// inside it; stop ends it.
func (m *maintainer) join(mr masterRunner) {
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

// stop ends the loops, starts no more, and waits for a sweep in progress
// to end.
func (m *maintainer) stop() {
	m.mu.Lock()
	m.stopped = true
	close(m.quit)
	m.mu.Unlock()
	m.wg.Wait()
}

// loop sweeps until the mastership's ctx is done or Maintain stops, also
// when the first grace of an inbox left in place ends.
func (m *maintainer) loop(ctx context.Context) {
	t := clock.NewTicker(m.r.cfg.clock, m.r.cfg.SweepInterval)
	defer t.Stop()
	grace := m.r.cfg.clock.NewTimer(time.Hour)
	defer grace.Stop()
	for {
		m.sweep(ctx)
		graceC := m.armGrace(grace)
		select {
		case <-ctx.Done():
			return
		case <-m.quit:
			return
		case <-t.C():
			t.Next()
		case <-m.kick:
		case <-graceC:
		}
	}
}

// armGrace sets grace to fire when the first grace of an inbox left in
// place ends, and returns its channel; nil, which never fires, when no
// inbox waits.
func (m *maintainer) armGrace(grace clock.Timer) <-chan time.Time {
	clk := m.r.cfg.clock
	end := m.r.waits.next(clk.Now(), m.r.cfg.Grace)
	if end.IsZero() {
		return nil
	}
	grace.Reset(end.Sub(clk.Now()) + time.Millisecond)
	return grace.C()
}

// sweep runs one Sweep, bounded by Config.ReassignTimeout, and reports
// its news: outcomes to Config.OnSweep, errors to Config.OnError. The
// errors of a mastership that ended meanwhile are no news, and neither are
// the same orphans as the sweep before, still waiting for a slave:
// reported once, not every SweepInterval.
func (m *maintainer) sweep(mastership context.Context) {
	ctx, cancel := context.WithTimeout(mastership, m.r.cfg.ReassignTimeout)
	defer cancel()
	res, err := m.r.Sweep(ctx, m.pick)
	if mastership.Err() != nil {
		return
	}
	same := m.sameOrphans(res.Orphans)
	if res.acted() || !same {
		m.r.cfg.swept(res)
	}
	if err != nil && !(same && waitForSlaves(err, res.Orphans)) {
		m.r.cfg.report(err)
	}
}

// waitForSlaves reports whether err, a sweep's, says only that orphans
// wait for a slave to take them (ErrNoSlaves).
func waitForSlaves(err error, orphans []string) bool {
	return len(orphans) > 0 && isOnly(err, ErrNoSlaves)
}

// sameOrphans records the orphans of the last sweep and reports whether
// the sweep before left the same.
func (m *maintainer) sameOrphans(orphans []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	same := slices.Equal(orphans, m.orphans)
	m.orphans = orphans
	return same
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
