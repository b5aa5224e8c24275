package masterelection

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/subhub"
	"github.com/herdkit/herd/keyspace"
)

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
// in place before Start returns as slave: a release announced after that is
// never missed (a master's Start does not wait: awaitStarted). When that fails (Redis was not answering yet, most likely), it
// tries once more when opened closes (the registry is open: Redis
// answers), and a second failure is an error event; it then waits, until
// ctx ends, for the shared connection to subscribe, and polling covers the
// gap. A failure of the connection afterwards is an error event, one per
// outage. ctx ends the attempts.
func (c *core) openFeed(ctx context.Context, opened <-chan struct{}) *noticeFeed {
	sctx, cancel := context.WithCancel(ctx)
	f := &noticeFeed{
		ready:     make(chan struct{}),
		confirmed: make(chan struct{}),
		done:      make(chan struct{}),
		cancel:    cancel,
	}
	var down atomic.Bool // an error event was emitted since the last (re)subscription
	opts := subhub.Options{
		Channels: c.feedChannels(),
		OnMessage: func(_ context.Context, msg *redis.Message) {
			if read := f.read.Load(); read != nil {
				(*read)(msg)
			}
		},
		OnSubscribed: func(context.Context, string) { down.Store(false) },
		OnError: func(err error) {
			if !down.Swap(true) {
				c.emitError(fmt.Errorf("notice feed on %s: %w", c.keys.Events, err))
			}
		},
		PingInterval:  healthCheckInterval,
		MaxRetryDelay: feedRetryDelay,
	}
	go c.subscribeFeed(sctx, f, opts, opened)
	return f
}

// subscribeFeed is openFeed's goroutine: it subscribes feed f with opts
// (see openFeed for the attempts), sets f.sub and closes f.confirmed once
// subscribed, closes f.ready when Start need wait no longer, and closes
// f.done when it returns.
func (c *core) subscribeFeed(ctx context.Context, f *noticeFeed, opts subhub.Options, opened <-chan struct{}) {
	defer close(f.done)
	closeReady := sync.OnceFunc(func() { close(f.ready) })
	defer closeReady()
	attempt := func() (*subhub.Subscription, error) {
		rctx, cancel := context.WithTimeout(ctx, c.startTimeout())
		defer cancel()
		return subhub.Subscribe(rctx, c.client, opts)
	}
	sub, err := attempt()
	if err != nil {
		select {
		case <-opened:
		case <-ctx.Done():
			return
		}
		sub, err = attempt()
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		c.emitError(fmt.Errorf("notice feed: %w", err)) // err names the channels
		closeReady()
		if sub, err = subhub.Subscribe(ctx, c.client, opts); err != nil {
			return // ctx ended
		}
	}
	f.sub = sub
	close(f.confirmed)
}

// feedChannels are the channels of the notice feed: the events channel,
// this process's own notice channel (Keys.Turn: a release in which the
// master ranked it), and unless Config.IgnoreRemoteTransfers the control
// channel.
func (c *core) feedChannels() []string {
	channels := []string{c.keys.Events, c.keys.Turn(c.cfg.NodeID)}
	if !c.cfg.IgnoreRemoteTransfers {
		channels = append(channels, c.keys.Control)
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
func (c *core) readFeed(ctx context.Context, f *noticeFeed) (closeFeed func()) {
	read := func(msg *redis.Message) {
		if msg.Channel == c.keys.Control {
			c.controlMessage(ctx, msg.Payload)
			return
		}
		c.lockNotice(msg.Payload)
	}
	f.read.Store(&read)
	return f.close
}

// controlMessage hands a transfer request of the control channel to the
// loop, when this process is master and honours it (remoteTransfer).
func (c *core) controlMessage(ctx context.Context, payload string) {
	if c.term() == 0 {
		return // only the master hands over
	}
	if req, ok := c.remoteTransfer(ctx, payload); ok {
		c.offer(req) // unless a transfer is pending already
	}
}

// lockNotice hands a lock notice to the loop; one that is not a notice of
// herd's is an error event, and one the busy loop has no room for is
// dropped.
func (c *core) lockNotice(payload string) {
	n, err := parseNotice(payload)
	if err != nil {
		c.emitError(err)
		return
	}
	if !n.Lock() {
		return // not a lock notice: another version's, or someone else's
	}
	if n.Event == keyspace.NoticeAcquired {
		c.claims.fire()
	}
	select {
	case c.notices <- n:
	default:
		c.log.Debug().Str("event", n.Event).Msg("election loop busy: notice dropped, polling will catch up")
	}
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
func (c *core) followHint(ls *loopState, n notice) noticeHint {
	switch {
	case n.Event == keyspace.NoticeReleased && n.NodeID != c.cfg.NodeID && c.contends():
		if n.To == c.cfg.NodeID {
			ls.holdOff = time.Time{} // named by a Transfer: an own step-down's hold-off gives way
		}
		return hintContend
	case n.Event == keyspace.NoticeAcquired && n.NodeID != c.cfg.NodeID && n.Term > c.observedTerm.Load():
		ls.noteClaim(n, c.clock.Now())
		return hintAsk
	}
	return hintNone
}

// masterHint reads notice n, arrived at now, on the master loop of mastership
// l. Another node's claim of a higher term is kept for Redis to confirm,
// and suggests a renewal now: it either extends this mastership or, the
// lock gone, ends it.
func (c *core) masterHint(ls *loopState, l *mastership, n notice, now time.Time) noticeHint {
	if n.Event == keyspace.NoticeAcquired && n.NodeID != c.cfg.NodeID && n.Term > l.term {
		ls.noteClaim(n, now)
		return hintAsk
	}
	return hintNone
}

// remoteTransfer turns a message of the control channel into a transfer
// request, or reports why it is ignored. It is honoured only by the master,
// only when it names the master's term or none, and only for a node with a
// live registry entry other than this one: a request that names no such
// process changes nothing.
func (c *core) remoteTransfer(ctx context.Context, payload string) (transferRequest, bool) {
	var req keyspace.ControlRequest
	if err := json.Unmarshal([]byte(payload), &req); err != nil || req.Request != keyspace.ControlTransfer {
		c.log.Debug().Str("payload", fmt.Sprintf("%.96q", payload)).Msg("control channel: not a transfer request, ignored")
		return transferRequest{}, false
	}
	if req.To == c.cfg.NodeID {
		return transferRequest{}, false
	}
	if req.Term != 0 && req.Term != c.term() {
		// For another master: an earlier one's, sent again after this
		// process took over, or a later one's.
		c.log.Debug().Int64("term", req.Term).Msg("control channel: a transfer request for another term, ignored")
		return transferRequest{}, false
	}
	if req.To != "" && !c.liveProcess(ctx, req.To) {
		return transferRequest{}, false
	}
	c.log.Info().Str("to", req.To).Msg("control channel: transfer requested")
	return transferRequest{to: req.To}, true
}

// liveProcess reports whether id, named by a control-channel request, is a
// valid node id with a live registry entry; a lookup that fails is an
// error event.
func (c *core) liveProcess(ctx context.Context, id string) bool {
	reg := c.registry()
	if reg == nil || keyspace.ValidateName("node id", id) != nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, c.opTimeout())
	defer cancel()
	if _, err := reg.Process(rctx, id); err != nil {
		c.emitError(fmt.Errorf("control channel: transfer to %q ignored: no live process of that id (%v)", id, err))
		return false
	}
	return true
}
