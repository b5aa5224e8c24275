package masterelection

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/registry"
)

// startTracker starts the slave tracker of mastership l (trackSlaves) on a
// goroutine of its own.
func (mb *membership) startTracker(l *mastership) {
	mb.bg.Add(1)
	go mb.trackSlaves(l)
}

// trackSlaves runs the slave tracker for mastership l until it ends. Its
// slave events go through slaveEvent, so none is emitted by a process that
// is not master at that instant, and none follows the master-lost of l.
func (mb *membership) trackSlaves(l *mastership) {
	defer mb.bg.Done()
	next := newSuccession(l.term)
	back := mb.newHandBack(l, next.key)
	if back != nil {
		mb.bg.Add(1)
		go back.run()
	}
	w := &slaveWatch{mb: mb, l: l, next: next, writer: mb.startSuccessionWriter(l), back: back}
	tracker, err := registry.NewSlaveTracker(mb.reg, registry.TrackerConfig{
		SlaveTimeout:  mb.cfg.SlaveTimeout,
		SweepInterval: mb.cfg.sweepInterval(),
		Self:          mb.cfg.NodeID,
		OnJoin:        w.joined,
		OnLeave:       w.left,
		OnError:       func(err error) { mb.emitError(fmt.Errorf("track slaves: %w", err)) },
	})
	if err != nil {
		mb.emitError(fmt.Errorf("track slaves: %w", err))
		return
	}
	// The registry's notices go to their own channel, which only the master
	// listens to, on the client's shared pub/sub connection. Subscribing
	// before Run (whose first sweep reads the whole registry) loses no
	// registration in between. tracker.Notice never blocks (it drops a
	// notice when its queue is full, and sweeps), so it runs on the
	// connection's reader; the notice feed reports the connection's errors.
	sub, err := subhub.Subscribe(l.ctx, mb.client, subhub.Options{
		Channels:     []string{mb.keys.RegistryEvents},
		Inline:       true,
		OnMessage:    func(_ context.Context, msg *redis.Message) { tracker.Notice([]byte(msg.Payload)) },
		PingInterval: healthCheckInterval,
	})
	if err != nil {
		return // the mastership ended first: Subscribe waits for the connection until then
	}
	defer sub.Close()
	if err := tracker.Run(l.ctx); err != nil {
		mb.emitError(fmt.Errorf("track slaves: %w", err))
	}
}

// slaveWatch is what a master does with the tracker's joins and leaves:
// a slave event, the succession ranking (written when it changes) and the
// hand-back's watch. Only the tracker's goroutine calls it.
type slaveWatch struct {
	mb     *membership
	l      *mastership
	next   *succession
	writer *successionWriter
	back   *handBack // nil without hand-back
}

// joined handles slave s's join.
func (w *slaveWatch) joined(s registry.SlaveNode) {
	w.mb.slaveEvent(w.l, topicSlaveRegistered, payload{slave: s})
	if !s.NonCandidate && w.next.join(s.NodeID, s.Priority) {
		w.writer.write(w.next.order)
	}
	w.back.join(s)
}

// left handles slave id's leave, for reason why.
func (w *slaveWatch) left(id string, why registry.LeaveReason) {
	w.mb.slaveEvent(w.l, topicSlaveRemoved, payload{nodeID: id, reason: why})
	if w.next.leave(id) {
		w.writer.write(w.next.order)
	}
	w.back.leave(id)
}

// successionWriter writes a master's latest succession ranking to Redis
// on a goroutine of its own, until the mastership ends. The ranking changes
// on the tracker's goroutine, which so never waits on Redis for it, and a
// burst of joins (a first sweep) costs a write or two. A write Redis did
// not answer is sent again every CheckInterval until one is, or a newer
// ranking replaces it.
type successionWriter struct {
	mb     *membership
	l      *mastership
	orders chan []string // the latest ranking not yet taken by run (capacity 1)
}

// startSuccessionWriter starts the writer of mastership l's rankings.
func (mb *membership) startSuccessionWriter(l *mastership) *successionWriter {
	w := &successionWriter{mb: mb, l: l, orders: make(chan []string, 1)}
	mb.bg.Add(1)
	go w.run()
	return w
}

// write hands a copy of order to the writer, in place of an older ranking
// it has not taken yet. Only the tracker's goroutine calls it.
func (w *successionWriter) write(order []string) {
	select {
	case <-w.orders: // replaced by the newer ranking: only one sender
	default:
	}
	w.orders <- slices.Clone(order)
}

// run writes each ranking, again every CheckInterval while Redis does not
// answer, until the mastership's ctx ends.
func (w *successionWriter) run() {
	defer w.mb.bg.Done()
	retry := w.mb.clock.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	var pending []string // a ranking whose write failed
	for {
		select {
		case <-w.l.ctx.Done():
			return
		case pending = <-w.orders:
		case <-retry.C():
		}
		if pending == nil {
			continue
		}
		if w.mb.publishSuccession(w.l, pending) {
			pending = nil
		} else {
			retry.Reset(w.mb.cfg.CheckInterval)
		}
	}
}

// slaveEvent emits a slave event of mastership l, only while l is this
// process's mastership and its self-fencing deadline has not passed: the
// tracker may reach an event after the deadline before the loop has ended
// l (a process resumed after a pause runs both at once), and a process that
// IsMaster calls slave must not report slaves. It runs under trackMu, which
// endMastership holds to emit master-lost, so no slave event of l follows it.
// An event not emitted is not reported later: the next mastership starts
// from every slave registered.
func (mb *membership) slaveEvent(l *mastership, topic string, p payload) {
	mb.trackMu.Lock()
	defer mb.trackMu.Unlock()
	if !mb.core.current(l) {
		mb.log.Debug().Str("event", topic).Int64("term", l.term).Msg("slave event dropped: no longer master")
		return
	}
	mb.bus.emit(topic, p)
}

// publishSuccession writes order as the succession of mastership l, while
// l is this process's: Redis refuses it otherwise (next.lua), so a deposed
// master's late write cannot replace its successor's. It reports false
// when the write should be sent again: Redis did not answer (or refused
// the script), and l goes on. Until then the slaves contend as without a
// succession: a failed write costs speed only.
func (mb *membership) publishSuccession(l *mastership, order []string) (done bool) {
	if l.ctx.Err() != nil || !l.holds(mb.clock.Now()) {
		return true
	}
	ctx, cancel := context.WithTimeout(l.ctx, mb.opTimeout())
	defer cancel()
	written, err := rdb.WriteSuccession(ctx, mb.client, mb.keys, mb.cfg.NodeID, rdb.Succession{Term: l.term, Order: order})
	switch {
	case l.ctx.Err() != nil:
		return true
	case err != nil:
		mb.log.Debug().Err(err).Int64("term", l.term).Msg("succession not written, sent again at the next CheckInterval: the slaves contend as without one")
		return false
	case !written:
		mb.log.Debug().Int64("term", l.term).Msg("succession refused: the lock is not this mastership's")
	}
	return true
}
