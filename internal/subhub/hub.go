package subhub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// hubKey identifies the hub of a client: the client value, and under Redis
// Cluster the hash slot of the node it subscribes on.
type hubKey struct {
	client any
	slot   int // -1 unless the client is a *redis.ClusterClient
}

// hubs is the process-wide registry of the hubs that have a subscription.
var hubs struct {
	mu sync.Mutex
	m  map[hubKey]*hub
}

// acquire returns the hub of client for a subscription whose first channel
// is first, made if need be, and counts the subscription.
func acquire(client redis.UniversalClient, first string) *hub {
	key := hubKey{client: client, slot: -1}
	if _, ok := client.(*redis.ClusterClient); ok {
		key.slot = Slot(first)
	}
	if !reflect.TypeOf(client).Comparable() {
		key.client = new(byte) // cannot be a map key: a hub of its own
	}
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	h := hubs.m[key]
	if h == nil {
		if hubs.m == nil {
			hubs.m = make(map[hubKey]*hub)
		}
		h = &hub{client: client, key: key, chans: map[string]*channel{}, stale: map[string]int{}, subs: map[*Subscription]bool{}}
		hubs.m[key] = h
	}
	h.refs++
	return h
}

// release uncounts a subscription of h and reports whether it was the last
// one; h is then out of the registry, for the caller to shut down.
func release(h *hub) (last bool) {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	h.refs--
	if h.refs > 0 {
		return false
	}
	delete(hubs.m, h.key)
	return true
}

// hub is the subscription connection of one client (and slot), shared by
// its subscriptions, with the goroutine that reads it (run).
type hub struct {
	client redis.UniversalClient
	key    hubKey
	refs   int // guarded by hubs.mu: the subscriptions made and not yet closed

	// cmdMu is held by whoever changes the channels together with the
	// command that tells the server (add, remove), and by the reader while
	// it connects: the server sees the commands in the order of the changes.
	// Taken before mu.
	cmdMu sync.Mutex

	mu      sync.Mutex
	ps      *redis.PubSub          // guarded by mu; nil while not connected
	chans   map[string]*channel    // guarded by mu: every channel a subscription holds
	stale   map[string]int         // guarded by mu: "subscribe" replies still to come for channels dropped before their confirmation
	subs    map[*Subscription]bool // guarded by mu
	started bool                   // guarded by mu: run was started
	closed  bool                   // guarded by mu: shut down
	cancel  context.CancelFunc     // guarded by mu: ends run
	done    chan struct{}          // guarded by mu: closed when run returns
}

// channel is one channel of a hub.
type channel struct {
	subs      []*Subscription // its holders; replaced, never changed in place, so the reader may range over a copy
	confirmed bool            // the server confirmed it on the current connection
}

// add adds s's channels, sends SUBSCRIBE for those nobody held, and starts
// the reader with the hub's first subscription. ctx bounds the command.
func (h *hub) add(ctx context.Context, s *Subscription) {
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	h.mu.Lock()
	var fresh []string
	for _, name := range s.channels {
		c := h.chans[name]
		if c == nil {
			c = &channel{}
			h.chans[name] = c
			fresh = append(fresh, name)
		}
		c.subs = append(slices.Clip(c.subs), s)
	}
	h.subs[s] = true
	h.checkReady(s)
	ps := h.ps
	if !h.started {
		h.started = true
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		h.cancel, h.done = cancel, make(chan struct{})
		go h.run(rctx, h.done) // it connects with every channel
	}
	h.mu.Unlock()
	if ps != nil && len(fresh) > 0 {
		// On an error the connection is broken: the reader reconnects
		// with every channel of the hub.
		_ = ps.Subscribe(ctx, fresh...)
	}
}

// remove takes s's channels away and sends UNSUBSCRIBE for those nobody
// holds any more. ctx bounds the command.
func (h *hub) remove(ctx context.Context, s *Subscription) {
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	h.mu.Lock()
	delete(h.subs, s)
	var gone []string
	for _, name := range s.channels {
		c := h.chans[name]
		if c == nil {
			continue
		}
		c.subs = slices.DeleteFunc(slices.Clone(c.subs), func(x *Subscription) bool { return x == s })
		if len(c.subs) > 0 {
			continue
		}
		delete(h.chans, name)
		gone = append(gone, name)
		if !c.confirmed && h.ps != nil {
			h.stale[name]++ // its confirmation is on its way
		}
	}
	ps := h.ps
	h.mu.Unlock()
	if ps != nil && len(gone) > 0 {
		_ = ps.Unsubscribe(ctx, gone...)
	}
}

// shutdown stops the reader, closes the connection and waits for the
// reader. Only the last subscription's Close calls it.
func (h *hub) shutdown() {
	h.mu.Lock()
	h.closed = true
	ps, cancel, done := h.ps, h.cancel, h.done
	h.ps = nil
	h.mu.Unlock()
	if cancel != nil {
		cancel() // first, so that the reader reads the closed connection as "stop"
	}
	if ps != nil {
		_ = ps.Close()
	}
	if done != nil {
		<-done
	}
}

// checkReady makes s ready when every channel of it is confirmed. h.mu is
// held.
func (h *hub) checkReady(s *Subscription) {
	for _, name := range s.channels {
		if c := h.chans[name]; c == nil || !c.confirmed {
			return
		}
	}
	s.confirmed()
}

// timing returns the smallest PingInterval and MaxRetryDelay the
// subscriptions asked for.
func (h *hub) timing() (ping, retry time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) == 0 {
		return DefaultPingInterval, DefaultMaxRetryDelay
	}
	ping, retry = math.MaxInt64, math.MaxInt64
	for s := range h.subs {
		ping, retry = min(ping, s.opts.PingInterval), min(retry, s.opts.MaxRetryDelay)
	}
	return ping, retry
}

// errNoChannels: the hub has nothing to subscribe to (its last subscription
// is closing).
var errNoChannels = errors.New("subhub: no channel to subscribe to")

// connect opens a new connection subscribed to every channel of the hub,
// those of the hub's slot first (under Redis Cluster the connection goes to
// the node of the first channel's slot). It returns nil, nil when the hub
// was shut down.
func (h *hub) connect(ctx context.Context) (*redis.PubSub, error) {
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil
	}
	names := slices.Sorted(maps.Keys(h.chans))
	if h.key.slot >= 0 {
		slices.SortStableFunc(names, func(a, b string) int {
			ia, ib := Slot(a) == h.key.slot, Slot(b) == h.key.slot
			switch {
			case ia == ib:
				return 0
			case ia:
				return -1
			}
			return 1
		})
	}
	h.mu.Unlock()
	if len(names) == 0 {
		return nil, errNoChannels
	}
	// One SUBSCRIBE per channel: the server refuses a command as a whole
	// when one of its channels is not allowed (ACL), which must cost only
	// that channel. The first one dials.
	ps := h.client.Subscribe(ctx) // no channel: no I/O yet
	for _, name := range names {
		if err := ps.Subscribe(ctx, name); err != nil {
			_ = ps.Close()
			return nil, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		_ = ps.Close()
		return nil, nil
	}
	h.ps = ps
	clear(h.stale)
	return ps, nil
}

// fail drops the connection ps (nil: none was made) after err, and tells
// every subscription.
func (h *hub) fail(ps *redis.PubSub, err error) {
	h.mu.Lock()
	if h.ps == ps {
		h.ps = nil
	}
	for _, c := range h.chans {
		c.confirmed = false
	}
	clear(h.stale)
	subs := slices.Collect(maps.Keys(h.subs))
	h.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	for _, s := range subs {
		s.failed(err)
	}
}

// refused tells every subscription of an error reply on the connection:
// the server refused a command (an ACL without the channel, most likely),
// and the connection is fine. A subscription waiting for a channel the
// reply was about keeps waiting, and its Subscribe names the reply when
// its ctx ends.
func (h *hub) refused(err error) {
	h.mu.Lock()
	subs := slices.Collect(maps.Keys(h.subs))
	h.mu.Unlock()
	for _, s := range subs {
		s.failed(err)
	}
}

// confirm records the server's confirmation of channel name and returns
// the running subscriptions to tell (resubscribed after a reconnect).
func (h *hub) confirm(name string) (tell []*Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stale[name] > 0 {
		h.stale[name]-- // for a holder that has gone since
		return nil
	}
	c := h.chans[name]
	if c == nil {
		return nil
	}
	c.confirmed = true
	for _, s := range c.subs {
		if !s.waiting() {
			tell = append(tell, s)
		} else {
			h.checkReady(s)
		}
	}
	return tell
}

// holders returns the subscriptions of channel name.
func (h *hub) holders(name string) []*Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chans[name]; c != nil {
		return c.subs
	}
	return nil
}

// run is the reader: it connects, reads, pings and reconnects until ctx
// ends, and hands what it reads to the subscriptions.
func (h *hub) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	r := reader{h: h}
	for ctx.Err() == nil {
		ping, retry := h.timing()
		if r.ps == nil {
			if !r.connect(ctx, retry) {
				return
			}
			if r.ps == nil {
				continue // it failed and waited: again
			}
		}
		v, err := r.ps.ReceiveTimeout(ctx, ping)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !r.readFailed(ctx, err, ping, retry) {
				return
			}
			continue
		}
		r.delay, r.pinged = 0, false
		h.dispatch(v)
	}
}

// reader is the state of run's loop, owned by its goroutine.
type reader struct {
	h      *hub
	ps     *redis.PubSub // the connection; nil while there is none
	delay  time.Duration // the last wait before a reconnect; 0 after a read
	pinged bool          // a PING on ps is unanswered
}

// connect opens a connection, and on an error tells the subscriptions and
// waits (backoff), leaving r.ps nil. It reports false when the reader is to
// stop: ctx ended or the hub was shut down.
func (r *reader) connect(ctx context.Context, retry time.Duration) bool {
	ps, err := r.h.connect(ctx)
	if ctx.Err() != nil || (ps == nil && err == nil) {
		return false
	}
	if err != nil {
		return r.backoff(ctx, fmt.Errorf("connect: %w", err), retry)
	}
	r.ps, r.pinged = ps, false
	return true
}

// readFailed handles an error of a read. A timeout sends a PING, or drops
// the connection when the last PING is still unanswered; an error reply is
// a command the server refused, on a connection that is fine; any other
// error, or a PING that cannot be sent, drops the connection and waits
// (backoff). It reports false when ctx ended during the wait.
func (r *reader) readFailed(ctx context.Context, err error, ping, retry time.Duration) bool {
	var rerr redis.Error
	switch {
	case isTimeout(err):
		if r.pinged {
			r.h.fail(r.ps, fmt.Errorf("no reply to PING within %s; reconnecting", ping))
			r.ps = nil
			return true
		}
		if err = r.ps.Ping(ctx); err == nil {
			r.pinged = true
			return true
		}
		err = fmt.Errorf("ping: %w", err)
	case errors.As(err, &rerr):
		r.delay, r.pinged = 0, false
		r.h.refused(fmt.Errorf("the server refused a command: %w", err))
		return true
	default:
		err = fmt.Errorf("receive: %w", err)
	}
	return r.backoff(ctx, err, retry)
}

// backoff drops the connection after err, tells the subscriptions, and
// waits twice as long as last time (at least minRetryDelay, at most retry).
// It reports false when ctx ended during the wait.
func (r *reader) backoff(ctx context.Context, err error, retry time.Duration) bool {
	r.h.fail(r.ps, err)
	r.ps = nil
	r.delay = min(max(2*r.delay, minRetryDelay), retry)
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// dispatch hands what the reader read to the subscriptions: a message to
// the holders of its channel, a confirmation of a channel to the running
// subscriptions that were resubscribed to it (confirm).
func (h *hub) dispatch(v any) {
	switch v := v.(type) {
	case *redis.Message:
		for _, s := range h.holders(v.Channel) {
			s.deliver(event{msg: v})
		}
	case *redis.Subscription:
		if v.Kind == "subscribe" {
			for _, s := range h.confirm(v.Channel) {
				s.deliver(event{subscribed: v.Channel})
			}
		}
	}
}

// isTimeout reports whether err is a network timeout: a read that got
// nothing within its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
