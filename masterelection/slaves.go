package masterelection

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rendezvous"
	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// trackSlaves runs the slave tracker for mastership l until it ends. Its
// slave events go through slaveEvent, so none is emitted by a process that
// is not master at that instant, and none follows the master-lost of l.
func (m *MasterElection) trackSlaves(l *mastership) {
	defer m.bg.Done()
	next := newSuccession(l.term)
	back := m.newHandBack(l, next.key)
	if back != nil {
		m.bg.Add(1)
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
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		retry := m.clock.NewTimer(0)
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
			if m.publishSuccession(l, pending) {
				pending = nil
			} else {
				retry.Reset(m.cfg.CheckInterval)
			}
		}
	}()
	tracker, err := registry.NewSlaveTracker(m.reg, registry.TrackerConfig{
		SlaveTimeout:  m.cfg.SlaveTimeout,
		SweepInterval: m.cfg.CheckInterval,
		Self:          m.cfg.NodeID,
		OnJoin: func(s registry.SlaveNode) {
			m.slaveEvent(l, topicSlaveRegistered, payload{slave: s})
			if !s.NonCandidate && next.join(s.NodeID, s.Priority) {
				publish()
			}
			back.join(s)
		},
		OnLeave: func(id string, why registry.LeaveReason) {
			m.slaveEvent(l, topicSlaveRemoved, payload{nodeID: id, reason: why})
			if next.leave(id) {
				publish()
			}
			back.leave(id)
		},
		OnError: func(err error) { m.emitError(fmt.Errorf("track slaves: %w", err)) },
	})
	if err != nil {
		m.emitError(fmt.Errorf("track slaves: %w", err))
		return
	}
	// The registry's notices go to their own channel, which only the master
	// listens to, on the client's shared pub/sub connection. Subscribing
	// before Run (whose first sweep reads the whole registry) loses no
	// registration in between. tracker.Notice never blocks (it drops a
	// notice when its queue is full, and sweeps), so it runs on the
	// connection's reader; the notice feed reports the connection's errors.
	sub, err := subhub.Subscribe(l.ctx, m.client, subhub.Options{
		Channels:     []string{m.keys.RegistryEvents},
		Inline:       true,
		OnMessage:    func(_ context.Context, msg *redis.Message) { tracker.Notice([]byte(msg.Payload)) },
		PingInterval: healthCheckInterval,
	})
	if err != nil {
		return // the mastership ended first: Subscribe waits for the connection until then
	}
	defer sub.Close()
	if err := tracker.Run(l.ctx); err != nil {
		m.emitError(fmt.Errorf("track slaves: %w", err))
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
func (m *MasterElection) slaveEvent(l *mastership, topic string, p payload) {
	m.trackMu.Lock()
	defer m.trackMu.Unlock()
	if l.ctx.Err() != nil || m.mastership.Load() != l || !m.holds(l, m.clock.Now()) {
		m.log.Debug().Str("event", topic).Int64("term", l.term).Msg("slave event dropped: no longer master")
		return
	}
	m.bus.emit(topic, p)
}

// maxSuccession is how many slaves a master ranks in its succession.
const maxSuccession = 3

// succession is a master's ranking of its slaves for the next election
// (scripts.Succession): the maxSuccession candidate slaves (their registry
// entry at join says so) that rank first by ranksBefore: the highest
// Priority first, then, among equal priorities, the highest rendezvous hash
// of the master's term, so that each term ranks the herd afresh and every
// slave of one priority is first as often as any other. A slave that stops
// being a candidate after its join stays ranked (its turn passes unused,
// costing the next one a step), and one that becomes a candidate after it
// is ranked from the next term.
type succession struct {
	key    string         // the term, the rendezvous key
	slaves map[string]int // every candidate slave the tracker reports live, with its priority
	order  []string       // the ranking: at most maxSuccession slaves
}

func newSuccession(term int64) *succession {
	return &succession{key: strconv.FormatInt(term, 10), slaves: map[string]int{}}
}

// ranksBefore reports whether slave a, of priority pa, ranks before slave
// b, of priority pb, in the succession of the term whose decimal form is
// key. It is also the hand-back's order among slaves it may pick.
func ranksBefore(key, a string, pa int, b string, pb int) bool {
	if pa != pb {
		return pa > pb
	}
	ha, hb := rendezvous.Hash(key, a), rendezvous.Hash(key, b)
	return ha > hb || ha == hb && a < b
}

// before reports whether slave a ranks before slave b.
func (s *succession) before(a, b string) bool {
	return ranksBefore(s.key, a, s.slaves[a], b, s.slaves[b])
}

// join adds slave id of priority p and reports whether the ranking
// changed.
func (s *succession) join(id string, p int) bool {
	if _, ok := s.slaves[id]; ok {
		return false
	}
	s.slaves[id] = p
	return s.rank(id)
}

// leave removes slave id and reports whether the ranking changed; a ranked
// slave's place goes to the best of the rest.
func (s *succession) leave(id string) bool {
	if _, ok := s.slaves[id]; !ok {
		return false
	}
	delete(s.slaves, id)
	if !slices.Contains(s.order, id) {
		return false
	}
	s.order = s.order[:0]
	for other := range s.slaves {
		s.rank(other)
	}
	return true
}

// rank puts slave id in the ranking when it belongs there and reports
// whether it does.
func (s *succession) rank(id string) bool {
	i := len(s.order)
	for i > 0 && s.before(id, s.order[i-1]) {
		i--
	}
	if i >= maxSuccession {
		return false
	}
	s.order = slices.Insert(s.order, i, id)
	s.order = s.order[:min(len(s.order), maxSuccession)]
	return true
}

// publishSuccession writes order as the succession of mastership l, while
// l is this process's: Redis refuses it otherwise (next.lua), so a deposed
// master's late write cannot replace its successor's. It reports false
// when the write should be sent again: Redis did not answer (or refused
// the script), and l goes on. Until then the slaves contend as without a
// succession: a failed write costs speed only.
func (m *MasterElection) publishSuccession(l *mastership, order []string) (done bool) {
	if l.ctx.Err() != nil || !m.holds(l, m.clock.Now()) {
		return true
	}
	ctx, cancel := context.WithTimeout(l.ctx, m.opTimeout())
	defer cancel()
	written, err := scripts.WriteSuccession(ctx, m.client, m.keys, m.cfg.NodeID, scripts.Succession{Term: l.term, Order: order})
	switch {
	case l.ctx.Err() != nil:
		return true
	case err != nil:
		m.log.Debug().Err(err).Int64("term", l.term).Msg("succession not written, sent again at the next CheckInterval: the slaves contend as without one")
		return false
	case !written:
		m.log.Debug().Int64("term", l.term).Msg("succession refused: the lock is not this mastership's")
	}
	return true
}
