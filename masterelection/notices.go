package masterelection

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/subhub"
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
// control channel), through which the notices arrive: a subscription of
// the client's shared pub/sub connection (internal/subhub), with a
// goroutine of its own. Start opens it (openFeed) while the rest of Start
// goes on; run reads it (readFeed).
type noticeFeed struct {
	// ready is closed when the subscription is confirmed by the server or
	// its two bounded attempts have failed (then the hub keeps reconnecting
	// by itself, the feed waits for it, and polling covers the gap);
	// confirmed is closed once the subscription is confirmed: before ready,
	// or after it when it came late.
	ready, confirmed chan struct{}
	done             chan struct{}        // closed when openFeed's goroutine returns
	cancel           context.CancelFunc   // ends the attempts
	sub              *subhub.Subscription // set by openFeed's goroutine before done closes; nil when none was made

	// read hands a message to readFeed's routing; nil until readFeed runs
	// (a notice before it is dropped: the loop's first attempt asks Redis).
	read atomic.Pointer[func(*redis.Message)]
}

// close ends the attempts, waits for the goroutine that made them, and
// closes the subscription.
func (f *noticeFeed) close() {
	f.cancel()
	<-f.done
	if f.sub != nil {
		f.sub.Close()
	}
}

// healthCheckInterval is how often an idle feed is pinged to find a dead
// connection (the shared connection pings at the smallest interval its
// users ask for). Polling covers lost notices, so a long interval only
// delays the push; it saves most of a slave's round trips at rest.
const healthCheckInterval = 30 * time.Second

// feedRetryDelay caps the wait between two attempts to reconnect the
// client's pub/sub connection (its hub takes the smallest cap any of its
// subscriptions asks for): a feed that stays down after the network heals
// misses the release notices that make handover push-fast and the control
// channel's transfer requests, which pub/sub does not keep. A connection
// attempt to a Redis that answers costs a round trip.
const feedRetryDelay = 100 * time.Millisecond

// openFeed subscribes to the feed's channels (feedChannels) on the
// client's shared pub/sub connection, on a goroutine of its own so that
// Start's other round trips need not wait for the dial. It waits for the
// server's confirmation (at most startTimeout), so that the subscription is
// in place before Start returns: a release announced after that is never
// missed. When that fails (Redis was not answering yet, most likely), it
// tries once more when opened closes (the registry is open: Redis
// answers), and a second failure is an error event; it then waits, until
// ctx ends, for the shared connection to subscribe, and polling covers the
// gap. A failure of the connection afterwards is an error event, one per
// outage. ctx ends the attempts.
func (m *MasterElection) openFeed(ctx context.Context, opened <-chan struct{}) *noticeFeed {
	sctx, cancel := context.WithCancel(ctx)
	f := &noticeFeed{
		ready:     make(chan struct{}),
		confirmed: make(chan struct{}),
		done:      make(chan struct{}),
		cancel:    cancel,
	}
	var down atomic.Bool // an error event was emitted since the last (re)subscription
	opts := subhub.Options{
		Channels: m.feedChannels(),
		OnMessage: func(_ context.Context, msg *redis.Message) {
			if read := f.read.Load(); read != nil {
				(*read)(msg)
			}
		},
		OnSubscribed: func(context.Context, string) { down.Store(false) },
		OnError: func(err error) {
			if !down.Swap(true) {
				m.emitError(fmt.Errorf("notice feed on %s: %w", m.keys.Events, err))
			}
		},
		PingInterval:  healthCheckInterval,
		MaxRetryDelay: feedRetryDelay,
	}
	go func() {
		defer close(f.done)
		closeReady := sync.OnceFunc(func() { close(f.ready) })
		defer closeReady()
		attempt := func() (*subhub.Subscription, error) {
			rctx, cancel := context.WithTimeout(sctx, m.startTimeout())
			defer cancel()
			return subhub.Subscribe(rctx, m.client, opts)
		}
		sub, err := attempt()
		if err != nil {
			select {
			case <-opened:
			case <-sctx.Done():
				return
			}
			sub, err = attempt()
		}
		if err != nil {
			if sctx.Err() != nil {
				return
			}
			m.emitError(fmt.Errorf("notice feed: %w", err)) // err names the channels
			closeReady()
			if sub, err = subhub.Subscribe(sctx, m.client, opts); err != nil {
				return // ctx ended
			}
		}
		f.sub = sub
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

// readFeed forwards the lock notices of feed f (the events channel and
// this process's own notice channel) to m.notices until f is closed, and
// the transfer requests of the control channel that the master honours to
// m.transfers. It runs on the feed's goroutine, so a control request's
// registry read delays only the feed. A notice is dropped when the loop is
// far behind: polling covers what notices only speed up. The shared
// connection reconnects and resubscribes by itself. It returns the
// function that closes f.
func (m *MasterElection) readFeed(ctx context.Context, _ *sync.WaitGroup, f *noticeFeed) (closeFeed func()) {
	read := func(msg *redis.Message) {
		if msg.Channel == m.keys.Control {
			if m.Term() == 0 {
				return // only the master hands over
			}
			if req, ok := m.remoteTransfer(ctx, msg.Payload); ok {
				select {
				case m.transfers <- req:
				default: // a transfer is pending already
				}
			}
			return
		}
		n, err := parseNotice(msg.Payload)
		if err != nil {
			m.emitError(err)
			return
		}
		if !n.Lock() {
			return // not a lock notice: another version's, or someone else's
		}
		select {
		case m.notices <- n:
		default:
			m.log.Debug().Str("event", n.Event).Msg("election loop busy: notice dropped, polling will catch up")
		}
	}
	f.read.Store(&read)
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
// hold-off. An acquire by another node under a term above the observed one
// is kept as a claim for Redis to confirm, and suggests a check; one of a
// term already observed (a slave whose failed acquire or check already
// named that master, as in a herd starting at once) tells nothing new.
func (m *MasterElection) followHint(ls *loopState, n notice) noticeHint {
	switch {
	case n.Event == scripts.NoticeReleased && n.NodeID != m.cfg.NodeID && m.contends():
		if n.To == m.cfg.NodeID {
			ls.holdOff = time.Time{} // named by a Transfer: an own step-down's hold-off gives way
		}
		return hintContend
	case n.Event == scripts.NoticeAcquired && n.NodeID != m.cfg.NodeID && n.Term > m.ObservedTerm():
		ls.noteClaim(n, m.clock.Now())
		return hintAsk
	}
	return hintNone
}

// masterHint reads notice n, arrived at now, on the master loop of mastership
// l. Another node's claim of a higher term is kept for Redis to confirm,
// and suggests a renewal now: it either extends this mastership or, the
// lock gone, ends it.
func (m *MasterElection) masterHint(ls *loopState, l *mastership, n notice, now time.Time) noticeHint {
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
