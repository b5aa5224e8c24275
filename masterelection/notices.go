package masterelection

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
)

// notice is a lock notice of the events channel (scripts.Notice), with
// the payload it was read from, for reports. This file holds all there is
// about notices: the feed they arrive by, what each loop makes of one, and
// the claims they carry, which Redis confirms or refutes.
type notice struct {
	scripts.Notice
	raw []byte
}

func parseNotice(payload string) (notice, error) {
	n, err := scripts.ParseNotice([]byte(payload))
	if err != nil {
		return notice{}, fmt.Errorf("%w: on the events channel: %w", ErrGarbage, err)
	}
	return notice{Notice: n, raw: []byte(payload)}, nil
}

// noticeFeed is the election's subscription to its events channel (and
// control channel), through which the notices arrive. Start opens it
// (openFeed) while the rest of Start goes on; run reads it (readFeed).
type noticeFeed struct {
	ps *redis.PubSub
	// ready is closed when the subscription is confirmed by the server or
	// its attempts have failed (then go-redis keeps subscribing again by
	// itself once readFeed reads ps, and polling covers the gap); confirmed
	// is closed only in the first case, before ready.
	ready, confirmed chan struct{}
	cancel           context.CancelFunc // ends the attempts
}

// close ends the attempts, closes the subscription and waits for the
// goroutine that made it.
func (f *noticeFeed) close() {
	f.cancel()
	_ = f.ps.Close()
	<-f.ready
}

// healthCheckInterval is how often go-redis pings an idle subscription to
// find a dead connection. Polling covers lost notices, so a long interval
// only delays the push; it saves most of a slave's round trips at rest.
const healthCheckInterval = 30 * time.Second

// openFeed subscribes to the events channel and, unless
// Config.IgnoreRemoteTransfers, the control channel, on a connection of its
// own, on a goroutine of its own so that Start's other round trips need not
// wait for the dial. It waits for the server's confirmation (at most
// startTimeout), so that the subscription is in place before Start
// returns: a release announced after that is never missed. When that fails
// (Redis was not answering yet, most likely), it tries once more when
// opened closes (the registry is open: Redis answers), and a second failure
// is an error event; go-redis keeps subscribing again by itself once
// readFeed reads the feed, and polling covers the gap. ctx ends the
// attempts.
func (m *MasterElection) openFeed(ctx context.Context, opened <-chan struct{}) *noticeFeed {
	channels := m.feedChannels()
	sctx, cancel := context.WithCancel(ctx)
	f := &noticeFeed{
		ps:        m.client.Subscribe(sctx), // no channel yet: no round trip
		ready:     make(chan struct{}),
		confirmed: make(chan struct{}),
		cancel:    cancel,
	}
	go func() {
		defer close(f.ready)
		confirm := func() error {
			rctx, cancel := context.WithTimeout(sctx, m.startTimeout())
			defer cancel()
			_, err := f.ps.ReceiveTimeout(rctx, m.startTimeout())
			return err
		}
		// Subscribe records the channels even when it fails, so the
		// second attempt's read subscribes again on a new connection.
		err := f.ps.Subscribe(sctx, channels...)
		if err == nil {
			err = confirm()
		}
		if err != nil {
			select {
			case <-opened:
			case <-sctx.Done():
				return
			}
			if err = confirm(); err != nil {
				if sctx.Err() == nil {
					m.emitError(fmt.Errorf("subscribe to %s: %w", m.keys.Events, err))
				}
				return
			}
		}
		close(f.confirmed)
	}()
	return f
}

// feedChannels are the channels of the notice feed: the events channel,
// this process's own notice channel (Keys.Turn: a release in which the
// master ranked it), and unless Config.IgnoreRemoteTransfers the control
// channel.
func (m *MasterElection) feedChannels() []string {
	channels := []string{m.keys.Events, m.keys.Turn(m.cfg.NodeID)}
	if !m.cfg.IgnoreRemoteTransfers {
		channels = append(channels, m.keys.Control)
	}
	return channels
}

// readFeed forwards the lock notices of feed f to m.notices until f is
// closed, and the transfer requests of the control channel that the master
// honours to m.transfers. A notice is dropped when the loop is far behind:
// polling covers what notices only speed up. go-redis reconnects and
// resubscribes by itself. It returns the function that closes f.
func (m *MasterElection) readFeed(ctx context.Context, wg *sync.WaitGroup, f *noticeFeed) (closeFeed func()) {
	ps := f.ps
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-f.ready:
		case <-ctx.Done():
			return
		}
		for msg := range ps.Channel(redis.WithChannelHealthCheckInterval(healthCheckInterval)) {
			if msg.Channel == m.keys.Control {
				if m.Term() == 0 {
					continue // only the master hands over
				}
				if req, ok := m.remoteTransfer(ctx, msg.Payload); ok {
					select {
					case m.transfers <- req:
					default: // a transfer is pending already
					}
				}
				continue
			}
			n, err := parseNotice(msg.Payload)
			if err != nil {
				m.emitError(err)
				continue
			}
			if !n.Lock() {
				continue // not a lock notice: another version's, or someone else's
			}
			select {
			case m.notices <- n:
			case <-ctx.Done():
				return
			default:
				m.log.Debug().Str("event", n.Event).Msg("election loop busy: notice dropped, polling will catch up")
			}
		}
	}()
	return f.close
}

// noticeHint is what a lock notice suggests to the loop that reads it. A
// notice is a hint, never a fact: anyone who may PUBLISH on the channel can
// send one. It only makes the process ask Redis sooner; what Redis answers
// decides.
type noticeHint int

const (
	hintNone    noticeHint = iota // nothing to do
	hintContend                   // the lock may be free: run the acquire script now, which takes it only if it is free, and not after a data loss
	hintAsk                       // another node claims the lock: ask Redis now (a check as slave, a renewal as master)
)

// followHint reads notice n on followLoop. A release by another node
// suggests contending (when this process is a candidate): a release that
// names this process as the successor of a Transfer also lifts its own
// hold-off. An acquire by another node is kept as a claim for Redis to
// confirm, and suggests a check.
func (m *MasterElection) followHint(ls *loopState, n notice) noticeHint {
	switch {
	case n.Event == scripts.NoticeReleased && n.NodeID != m.cfg.NodeID && m.candidate.Load():
		if n.To == m.cfg.NodeID {
			ls.holdOff = time.Time{} // named by a Transfer: an own step-down's hold-off gives way
		}
		return hintContend
	case n.Event == scripts.NoticeAcquired && n.NodeID != m.cfg.NodeID:
		ls.noteClaim(n, m.clock.Now())
		return hintAsk
	}
	return hintNone
}

// leadHint reads notice n, arrived at now, on the lead loop of mastership
// l. Another node's claim of a higher term is kept for Redis to confirm,
// and suggests a renewal now: it either extends this mastership or, the
// lock gone, ends it.
func (m *MasterElection) leadHint(ls *loopState, l *leadership, n notice, now time.Time) noticeHint {
	if n.Event == scripts.NoticeAcquired && n.NodeID != m.cfg.NodeID && n.Term > l.term {
		ls.noteClaim(n, now)
		return hintAsk
	}
	return hintNone
}

// noteClaim keeps the acquired notice n for the next answer of Redis (a
// check, or a renewal sent after it), which confirms or refutes it.
func (ls *loopState) noteClaim(n notice, now time.Time) {
	if n.Term > ls.claim.Term {
		ls.claim, ls.claimAt = n, now
	}
}

// confirmClaim compares the pending acquired notice with what Redis said:
// holder holds the lock (or nobody, "") and term is the last minted term. A
// notice that claims a term above it was not sent by a lock script of this
// lock: it is reported, once, and forgotten, having changed nothing.
func (m *MasterElection) confirmClaim(ls *loopState, holder string, term int64) {
	c := ls.claim
	if c.Term == 0 {
		return
	}
	ls.claim = notice{}
	if c.Term > term {
		m.emitError(fmt.Errorf("%w: %.96q on %s claims that %q took the lock with term %d, but Redis has term %d held by %q: ignored",
			ErrUnconfirmedNotice, c.raw, m.keys.Events, c.NodeID, c.Term, term, holder))
	}
}
