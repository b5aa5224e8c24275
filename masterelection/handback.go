package masterelection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

// handBack is one mastership's watch over the candidate slaves of higher
// Priority than the master's own (Config.Priority): once one of them has
// been ready for HandBackWindow, as this master saw it, the master hands
// over to it as Transfer does. Ready means reported joined by the slave
// tracker (registered as a slave, heartbeating within SlaveTimeout) and
// not reported gone since; HandBackWindow is at least SlaveTimeout +
// CheckInterval, so a slave that crashed soon after registering is reported
// gone before it counts as ready. Right before handing over, the master
// reads the slave's entry again: a process that restarted in between (a
// new registeredAt) starts its count again.
//
// At most one hand-back per window in the whole herd: the master takes
// Keys.HandBack (handback.lua, fenced by its lock and term) before it hands
// over, and waits out the key's TTL when another master took it. Each
// hand-back is a Transfer, so safety and the failover bounds are those of
// Transfer (docs/safety.md, guarantee 5).
//
// The tracker's callbacks (join, leave) and run's goroutine share the
// state under mu; run ends with the mastership.
type handBack struct {
	mb     *membership
	l      *mastership
	key    string // the succession's rendezvous key, for ties
	window time.Duration

	mu    sync.Mutex
	ready map[string]preferred // candidate slaves of higher priority, by node id
	poke  chan struct{}        // a join or leave happened (capacity 1)
}

// preferred is a slave of higher priority as the master saw it join.
type preferred struct {
	priority     int
	registeredAt time.Time // its entry's, at join: a restart writes another
	incarnation  string    // its entry's, at join: a restart draws another
	since        time.Time // on the master's clock: when it joined
}

// newHandBack returns the watch of mastership l, or nil when hand-backs
// are off (a negative HandBackWindow).
func (mb *membership) newHandBack(l *mastership, key string) *handBack {
	if mb.cfg.HandBackWindow <= 0 {
		return nil
	}
	return &handBack{mb: mb, l: l, key: key, window: mb.cfg.HandBackWindow,
		ready: map[string]preferred{}, poke: make(chan struct{}, 1)}
}

// join records a slave the tracker reports joined, when it is a candidate
// of higher priority than this master.
func (h *handBack) join(s registry.SlaveNode) {
	if h == nil || s.NonCandidate || s.Priority <= h.mb.cfg.Priority {
		return
	}
	h.mu.Lock()
	h.ready[s.NodeID] = preferred{priority: s.Priority, registeredAt: s.RegisteredAt, incarnation: s.Incarnation, since: h.mb.clock.Now()}
	h.mu.Unlock()
	h.wake()
}

// leave forgets a slave the tracker reports gone.
func (h *handBack) leave(id string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	_, had := h.ready[id]
	delete(h.ready, id)
	h.mu.Unlock()
	if had {
		h.wake()
	}
}

func (h *handBack) wake() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// next returns the slave to hand over to at now: of those ready for the
// window, the highest priority, ties by the succession's order; or, when
// none is ready yet, how long until the first one is (0: none is waiting).
func (h *handBack) next(now time.Time) (to string, p preferred, wait time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, c := range h.ready {
		if rest := c.since.Add(h.window).Sub(now); rest > 0 {
			if wait == 0 || rest < wait {
				wait = rest
			}
			continue
		}
		if to == "" || ranksBefore(h.key, id, c.priority, to, p.priority) {
			to, p = id, c
		}
	}
	return to, p, wait
}

// restarted records that slave id's entry now shows another process
// (registeredAt): its count starts again at now.
func (h *handBack) restarted(id string, info registry.ProcessInfo, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.ready[id]; ok {
		h.ready[id] = preferred{priority: info.Priority, registeredAt: info.RegisteredAt, incarnation: info.Incarnation, since: now}
	}
}

// drop forgets slave id until the tracker reports it joined again.
func (h *handBack) drop(id string) {
	h.mu.Lock()
	delete(h.ready, id)
	h.mu.Unlock()
}

// run hands over once a slave is ready, until the mastership ends (the
// hand-back itself ends it).
func (h *handBack) run() {
	mb, l := h.mb, h.l
	defer mb.bg.Done()
	for {
		to, p, wait := h.next(mb.clock.Now())
		if to != "" {
			wait = h.try(to, p)
		}
		var due <-chan time.Time
		stop := func() bool { return false }
		if wait > 0 {
			t := mb.clock.NewTimer(wait)
			due, stop = t.C(), t.Stop
		}
		select {
		case <-l.ctx.Done():
			stop()
			return
		case <-h.poke:
		case <-due:
		}
		stop()
	}
}

// try hands over to slave to (ready with p), unless something holds it
// back; it returns how long to wait before looking again (0: at the next
// join or leave, or at once when the state changed).
func (h *handBack) try(to string, p preferred) time.Duration {
	mb, l := h.mb, h.l
	// No hand-back while another hand-over is coming: a step-down
	// (SetCandidate(false)), Stop, or a mastership that is ending.
	if !mb.core.current(l) || !mb.candidate.Load() {
		return mb.cfg.CheckInterval
	}
	ctx, cancel := context.WithTimeout(l.ctx, mb.opTimeout())
	defer cancel()
	info, wait, ok := h.stillPreferred(ctx, to, p)
	if !ok {
		return wait
	}
	if wait, ok := h.takeWindow(ctx, to); !ok {
		return wait
	}
	req := transferRequest{to: to, reason: fmt.Sprintf("transferred to %s: handed back (its priority %d above %d)", to, info.Priority, mb.cfg.Priority)}
	// When a Transfer is pending, it hands over; this window's hand-back
	// is spent.
	if mb.core.offer(req) {
		mb.log.Info().Str("to", to).Int("priority", info.Priority).Int64("term", l.term).Msg("handing back to a process of higher priority")
	}
	return mb.cfg.CheckInterval
}

// stillPreferred reads slave to's registry entry and reports whether it is
// still the process that was ready with p, a candidate slave of higher
// priority; when not, it returns how long try waits.
func (h *handBack) stillPreferred(ctx context.Context, to string, p preferred) (info registry.ProcessInfo, wait time.Duration, ok bool) {
	mb := h.mb
	reg := mb.registry()
	if reg == nil {
		return info, mb.cfg.CheckInterval, false
	}
	info, err := reg.Process(ctx, to)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		h.drop(to) // gone: the tracker reports its leave, or its join when it is back
		return info, 0, false
	case err != nil:
		mb.log.Debug().Err(err).Str("to", to).Msg("hand-back: the registry could not be read: trying again at the next CheckInterval")
		return info, mb.cfg.CheckInterval, false
	case !info.RegisteredAt.Equal(p.registeredAt) || info.Incarnation != p.incarnation:
		// Another process under the id (a restart the tracker saw no
		// leave of): it has to be ready for a whole window itself.
		h.restarted(to, info, mb.clock.Now())
		return info, 0, false
	case info.Role != registry.RoleSlave || info.NonCandidate || info.Priority <= mb.cfg.Priority:
		h.drop(to)
		return info, 0, false
	}
	return info, 0, true
}

// takeWindow takes this window's hand-back in Redis (handback.lua), so that
// no other master of the window hands back; when it cannot, it returns how
// long try waits.
func (h *handBack) takeWindow(ctx context.Context, to string) (wait time.Duration, ok bool) {
	mb := h.mb
	taken, err := rdb.TakeHandBack(ctx, mb.client, mb.keys, mb.cfg.NodeID, h.l.term, h.window)
	switch {
	case err != nil:
		mb.log.Debug().Err(err).Str("to", to).Msg("hand-back: no answer from Redis: trying again at the next CheckInterval")
		return mb.cfg.CheckInterval, false
	case taken.NotMaster:
		return mb.cfg.CheckInterval, false // the mastership is ending: run returns with it
	case taken.Wait < 0:
		mb.emitError(fmt.Errorf("hand back to %q: %w: %s has no TTL, so no master hands back while it exists: delete it",
			to, ErrGarbage, mb.keys.HandBack))
		return h.window, false
	case !taken.Taken:
		// Another master handed back within the window.
		return max(taken.Wait, time.Millisecond), false
	}
	return 0, true
}
