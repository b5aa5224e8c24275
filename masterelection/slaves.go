package masterelection

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

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
	// The ranking changes on the tracker's goroutine; a goroutine of its
	// own writes the latest one, so that the tracker never waits on Redis
	// for it and a burst of joins (a first sweep) costs a write or two. A
	// write Redis did not answer is sent again every CheckInterval until
	// one is, or a newer ranking replaces it.
	orders := make(chan []string, 1)
	publish := func() {
		select {
		case <-orders: // replaced by the newer ranking: only one sender
		default:
		}
		orders <- slices.Clone(next.order)
	}
	mb.bg.Add(1)
	go func() {
		defer mb.bg.Done()
		retry := mb.clock.NewTimer(0)
		retry.Stop()
		defer retry.Stop()
		var pending []string // a ranking whose write failed
		for {
			select {
			case <-l.ctx.Done():
				return
			case pending = <-orders:
			case <-retry.C():
			}
			if pending == nil {
				continue
			}
			if mb.publishSuccession(l, pending) {
				pending = nil
			} else {
				retry.Reset(mb.cfg.CheckInterval)
			}
		}
	}()
	tracker, err := registry.NewSlaveTracker(mb.reg, registry.TrackerConfig{
		SlaveTimeout:  mb.cfg.SlaveTimeout,
		SweepInterval: mb.cfg.CheckInterval,
		Self:          mb.cfg.NodeID,
		OnJoin: func(s registry.SlaveNode) {
			mb.slaveEvent(l, topicSlaveRegistered, payload{slave: s})
			if !s.NonCandidate && next.join(s.NodeID, s.Priority) {
				publish()
			}
			back.join(s)
		},
		OnLeave: func(id string, why registry.LeaveReason) {
			mb.slaveEvent(l, topicSlaveRemoved, payload{nodeID: id, reason: why})
			if next.leave(id) {
				publish()
			}
			back.leave(id)
		},
		OnError: func(err error) { mb.emitError(fmt.Errorf("track slaves: %w", err)) },
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
	written, err := scripts.WriteSuccession(ctx, mb.client, mb.keys, mb.cfg.NodeID, scripts.Succession{Term: l.term, Order: order})
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
