package subhub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	// DefaultMaxQueue is the default bound of a queued subscription's
	// queue: 32 MiB, Redis's default client-output-buffer-limit for pub/sub
	// clients, past which Redis itself would drop the whole connection.
	DefaultMaxQueue = 32 << 20
	// DefaultPingInterval is the default Options.PingInterval.
	DefaultPingInterval = 30 * time.Second
	// DefaultMaxRetryDelay is the default Options.MaxRetryDelay.
	DefaultMaxRetryDelay = time.Second
	// minRetryDelay is the first wait before a reconnection.
	minRetryDelay = 10 * time.Millisecond
	// closeTimeout bounds the UNSUBSCRIBE that Close sends.
	closeTimeout = time.Second
)

// Options describe a subscription. Every callback of one subscription is
// called one at a time, in order, with a context that ends at Close; none
// may call Close.
type Options struct {
	// Channels are the channels to subscribe to; under Redis Cluster the
	// first one's hash slot picks the node (and the hub). Required.
	Channels []string
	// OnMessage receives each message of the channels. The message is
	// shared with the other subscriptions of its channel: read only.
	// Required.
	OnMessage func(ctx context.Context, m *redis.Message)
	// OnSubscribed is called for each channel once Subscribe has them all
	// confirmed (on the goroutine that called Subscribe, with its ctx,
	// before any message is delivered), and again each time the server
	// confirms a channel after a reconnect. Messages published meanwhile
	// are lost: read what they would have told. May be nil.
	OnSubscribed func(ctx context.Context, channel string)
	// OnError receives the connection's failures (each followed by a
	// reconnection), and the server's refusals of a command on it (an ACL
	// without a channel some subscription asked for; the connection
	// stays). It is not called before Subscribe returned: Subscribe
	// returns the last one when it fails. May be nil.
	OnError func(err error)
	// OnDropped is told how many messages were dropped because the queue
	// was full (a slow OnMessage), in order with the messages. May be nil.
	OnDropped func(n int)
	// Inline runs the callbacks on the hub's reader goroutine; they must
	// never block, or every subscription of the hub waits. Default: false,
	// the subscription has a goroutine and a queue of its own.
	Inline bool
	// MaxQueue bounds the bytes (channel and payload) of the messages
	// waiting for OnMessage; one that does not fit is dropped (OnDropped).
	// Default: DefaultMaxQueue.
	MaxQueue int
	// PingInterval is how long the connection may stay silent before the
	// reader sends PING; the hub uses the smallest of its subscriptions'.
	// A connection that does not answer within another interval is
	// replaced. Default: DefaultPingInterval.
	PingInterval time.Duration
	// MaxRetryDelay caps the wait between reconnection attempts, which
	// starts at 10ms and doubles; the hub uses the smallest of its
	// subscriptions'. Default: DefaultMaxRetryDelay.
	MaxRetryDelay time.Duration
}

// Subscription is one user's subscription to some channels of a shared
// connection. Its methods are safe for concurrent use.
type Subscription struct {
	hub      *hub
	channels []string // distinct, in the order given
	opts     Options
	ctx      context.Context // the callbacks'; ends at Close
	cancel   context.CancelFunc
	ready    chan struct{} // closed when every channel is confirmed
	once     sync.Once     // Close

	mu      sync.Mutex
	cond    sync.Cond     // on mu: the queue has work, or the subscription closed
	state   int           // guarded by mu
	queue   []event       // guarded by mu: waiting for the callbacks
	queued  int           // guarded by mu: bytes of the messages in queue
	lastErr error         // guarded by mu: the last failure while waiting
	pumped  chan struct{} // guarded by mu: closed when the queue's goroutine returns; nil for an inline one
}

// States of a Subscription.
const (
	stateWaiting  = iota // for the server's confirmations
	stateStarting        // confirmed; Subscribe calls OnSubscribed, what comes is queued
	stateRunning
	stateClosed
)

// event is one thing to tell a subscription: exactly one field is set.
type event struct {
	msg        *redis.Message
	subscribed string // a channel confirmed again
	err        error  // a failure of the connection
	dropped    int    // messages dropped
}

// Subscribe subscribes to o.Channels on the connection of client's hub and
// waits until the server has confirmed each of them (at once for channels
// already confirmed for another subscription), then calls o.OnSubscribed
// for each and starts the delivery. When ctx ends first it undoes what it
// did and returns ctx's error, with the last error of the connection (or
// the server's refusal of a command) if any. The hub keeps reconnecting
// meanwhile.
func Subscribe(ctx context.Context, client redis.UniversalClient, o Options) (*Subscription, error) {
	if client == nil || !o.complete() {
		return nil, errors.New("subhub: Subscribe needs a client, channels (not empty) and OnMessage")
	}
	o.fillDefaults()
	channels := distinct(o.Channels)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Subscription{
		hub:      acquire(client, channels[0]),
		channels: channels,
		opts:     o,
		ctx:      sctx,
		cancel:   cancel,
		ready:    make(chan struct{}),
	}
	s.cond.L = &s.mu
	s.hub.add(ctx, s)
	if err := s.awaitReady(ctx); err != nil {
		return nil, err
	}
	for _, c := range channels {
		o.OnSubscribed(ctx, c)
	}
	s.start()
	return s, nil
}

// complete reports whether o has what Subscribe requires: channels, none
// of them empty, and OnMessage.
func (o *Options) complete() bool {
	return len(o.Channels) > 0 && !slices.Contains(o.Channels, "") && o.OnMessage != nil
}

// fillDefaults sets the limits o leaves at zero (or below) to their
// defaults, and the callbacks it leaves nil to ones that do nothing, so
// that the delivery calls each without a check.
func (o *Options) fillDefaults() {
	o.MaxQueue = positiveOr(o.MaxQueue, DefaultMaxQueue)
	o.PingInterval = positiveOr(o.PingInterval, DefaultPingInterval)
	o.MaxRetryDelay = positiveOr(o.MaxRetryDelay, DefaultMaxRetryDelay)
	if o.OnSubscribed == nil {
		o.OnSubscribed = func(context.Context, string) {}
	}
	if o.OnError == nil {
		o.OnError = func(error) {}
	}
	if o.OnDropped == nil {
		o.OnDropped = func(int) {}
	}
}

// positiveOr returns v when it is positive, else def.
func positiveOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// distinct returns the channels without repeats, in the order given.
func distinct(channels []string) []string {
	var out []string
	for _, c := range channels {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// awaitReady waits until every channel of s is confirmed. When ctx ends
// first it gives s up (abandon).
func (s *Subscription) awaitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return s.abandon(ctx)
	}
}

// abandon closes s, whose Subscribe gave up when ctx ended, and returns
// Subscribe's error: ctx's, with the last error of the connection
// meanwhile if any.
func (s *Subscription) abandon(ctx context.Context) error {
	s.mu.Lock()
	last := s.lastErr
	s.mu.Unlock()
	s.Close()
	if last != nil {
		return fmt.Errorf("subscribe to %q: %w (last error: %w)", s.channels, ctx.Err(), last)
	}
	return fmt.Errorf("subscribe to %q: %w", s.channels, ctx.Err())
}

// start begins the delivery once Subscribe has called OnSubscribed: an
// inline subscription handles what queued meanwhile at once, a queued one
// starts its goroutine (pump). A subscription closed meanwhile stays so.
func (s *Subscription) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarting {
		return
	}
	s.state = stateRunning
	if !s.opts.Inline {
		s.pumped = make(chan struct{})
		go s.pump(s.pumped)
		return
	}
	for _, ev := range s.queue {
		s.handle(ev)
	}
	s.queue, s.queued = nil, 0
}

// Close ends the subscription: no callback is called after it returns
// (the one in progress sees its ctx end, and Close waits for it), and what
// is queued is dropped. The server is sent UNSUBSCRIBE for the channels no
// other subscription holds, and the connection is closed with the hub's
// last subscription. Close is idempotent; it must not be called from a
// callback.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.cancel()
		s.mu.Lock()
		s.state = stateClosed
		s.queue, s.queued = nil, 0
		s.cond.Broadcast()
		pumped := s.pumped
		s.mu.Unlock()
		if pumped != nil {
			<-pumped
		}
		if release(s.hub) {
			s.hub.shutdown()
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), closeTimeout)
		defer cancel()
		s.hub.remove(ctx, s)
	})
}

// waiting reports whether s waits for its first confirmations.
func (s *Subscription) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateWaiting
}

// confirmed moves s on from waiting, once every channel of it is confirmed
// (the hub's mu is held).
func (s *Subscription) confirmed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateWaiting {
		s.state = stateStarting
		close(s.ready)
	}
}

// failed tells s of a failure of the connection.
func (s *Subscription) failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateWaiting {
		s.lastErr = err
		return
	}
	s.deliverLocked(event{err: err})
}

// deliver hands ev to s: to the callback at once when s is inline and
// running, else to its queue.
func (s *Subscription) deliver(ev event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliverLocked(ev)
}

func (s *Subscription) deliverLocked(ev event) {
	switch {
	case s.state == stateClosed:
	case s.state == stateRunning && s.opts.Inline:
		s.handle(ev)
	default:
		s.enqueue(ev)
	}
}

// enqueue queues ev, or, for a message that does not fit, counts it as
// dropped. s.mu is held.
func (s *Subscription) enqueue(ev event) {
	size := ev.size()
	if s.queued+size > s.opts.MaxQueue {
		s.countDropped()
		return
	}
	s.queued += size
	s.queue = append(s.queue, ev)
	s.cond.Signal()
}

// countDropped counts a message dropped, in the marker after the last
// queued message (one is queued when the last event is not a marker).
// s.mu is held.
func (s *Subscription) countDropped() {
	if n := len(s.queue); n > 0 && s.queue[n-1].dropped > 0 {
		s.queue[n-1].dropped++
	} else {
		s.queue = append(s.queue, event{dropped: 1})
	}
	s.cond.Signal()
}

// size is what ev counts against Options.MaxQueue: the bytes of a
// message's channel and payload, 0 for the other events.
func (ev event) size() int {
	if ev.msg == nil {
		return 0
	}
	return len(ev.msg.Channel) + len(ev.msg.Payload)
}

// pump runs the callbacks of a queued subscription until Close.
func (s *Subscription) pump(done chan struct{}) {
	defer close(done)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.awaitWork() {
		ev := s.pop()
		s.mu.Unlock()
		s.handle(ev)
		s.mu.Lock()
	}
}

// awaitWork waits until the queue has an event or s is closed, and reports
// whether there is an event to handle (false once s is closed). s.mu is
// held.
func (s *Subscription) awaitWork() bool {
	for len(s.queue) == 0 && s.state != stateClosed {
		s.cond.Wait()
	}
	return s.state != stateClosed
}

// pop takes the first event off the queue, which is not empty. s.mu is
// held.
func (s *Subscription) pop() event {
	ev := s.queue[0]
	s.queue[0] = event{}
	s.queue = s.queue[1:]
	if len(s.queue) == 0 {
		s.queue = nil
	}
	s.queued -= ev.size()
	return ev
}

// handle calls the callback of ev.
func (s *Subscription) handle(ev event) {
	switch {
	case ev.msg != nil:
		s.opts.OnMessage(s.ctx, ev.msg)
	case ev.subscribed != "":
		s.opts.OnSubscribed(s.ctx, ev.subscribed)
	case ev.err != nil:
		s.opts.OnError(ev.err)
	case ev.dropped > 0:
		s.opts.OnDropped(ev.dropped)
	}
}
