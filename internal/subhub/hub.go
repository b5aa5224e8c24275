package subhub

import (
	"context"
	"errors"
	"maps"
	"math"
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
var hubs = struct {
	mu sync.Mutex
	m  map[hubKey]*hub
}{m: map[hubKey]*hub{}}

// acquire returns the hub of client for a subscription whose first channel
// is first, made if need be, and counts the subscription.
func acquire(client redis.UniversalClient, first string) *hub {
	key := keyOf(client, first)
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	h := hubs.m[key]
	if h == nil {
		h = &hub{client: client, key: key, chans: map[string]*channel{}, stale: map[string]int{}, subs: map[*Subscription]bool{}}
		hubs.m[key] = h
	}
	h.refs++
	return h
}

// keyOf returns the key of the hub of client for a subscription whose
// first channel is first: under Redis Cluster, one hub per hash slot; a
// client whose type cannot be a map key gets a hub of its own.
func keyOf(client redis.UniversalClient, first string) hubKey {
	key := hubKey{client: client, slot: -1}
	if _, ok := client.(*redis.ClusterClient); ok {
		key.slot = Slot(first)
	}
	if !reflect.TypeOf(client).Comparable() {
		key.client = new(byte) // cannot be a map key: a hub of its own
	}
	return key
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
	// it installs a new connection and tells it what changed during the
	// dial (connect): the server sees the commands in the order of the
	// changes. The dial itself holds no lock. Taken before mu.
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
		if h.hold(name, s) {
			fresh = append(fresh, name)
		}
	}
	h.subs[s] = true
	h.checkReady(s)
	ps := h.ps
	if !h.started {
		h.startReader(ctx) // it connects with every channel
	}
	h.mu.Unlock()
	send(ctx, ps, (*redis.PubSub).Subscribe, fresh)
}

// hold adds s to the holders of channel name and reports whether nobody
// held it before (the channel is then new to the hub). h.mu is held.
func (h *hub) hold(name string, s *Subscription) (fresh bool) {
	c, held := h.chans[name]
	if !held {
		c = &channel{}
		h.chans[name] = c
	}
	c.subs = append(slices.Clip(c.subs), s)
	return !held
}

// startReader starts the reader (run), which the hub's first subscription
// does; it lives until shutdown, whatever ctx does. h.mu is held.
func (h *hub) startReader(ctx context.Context) {
	h.started = true
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel, h.done = cancel, make(chan struct{})
	go h.run(rctx, h.done)
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
		if h.unhold(name, s) {
			gone = append(gone, name)
		}
	}
	ps := h.ps
	h.mu.Unlock()
	send(ctx, ps, (*redis.PubSub).Unsubscribe, gone)
}

// send sends the command cmd (SUBSCRIBE or UNSUBSCRIBE) for names on ps,
// when there is a connection and there are names. An error is not
// returned: the connection is broken, and the reader reconnects with
// every channel the hub holds then.
func send(ctx context.Context, ps *redis.PubSub, cmd func(*redis.PubSub, context.Context, ...string) error, names []string) {
	if ps != nil && len(names) > 0 {
		_ = cmd(ps, ctx, names...)
	}
}

// unhold takes s off the holders of channel name and reports whether
// nobody holds it any more: the channel is then gone from the hub, and a
// confirmation still on its way for it is expected (stale). h.mu is held.
func (h *hub) unhold(name string, s *Subscription) (gone bool) {
	c := h.chans[name]
	if c == nil {
		return false
	}
	c.subs = slices.DeleteFunc(slices.Clone(c.subs), func(x *Subscription) bool { return x == s })
	if len(c.subs) > 0 {
		return false
	}
	delete(h.chans, name)
	if !c.confirmed && h.ps != nil {
		h.stale[name]++ // its confirmation is on its way
	}
	return true
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
//
// The dial holds no lock: a subscription added or closed meanwhile (add,
// remove) does not wait for it, and sends nothing, as there is no
// connection; once the dial is done, connect subscribes to the channels
// added since and unsubscribes from those nobody holds any more (since).
func (h *hub) connect(ctx context.Context) (*redis.PubSub, error) {
	names, closed := h.subscribeOrder()
	switch {
	case closed:
		return nil, nil
	case len(names) == 0:
		return nil, errNoChannels
	}
	ps, err := h.dial(ctx, names)
	if err != nil {
		return nil, err
	}
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	if ps = h.install(ps); ps == nil {
		return nil, nil
	}
	added, gone := h.since(names)
	for _, name := range added {
		// One SUBSCRIBE per channel, as dial does: they may be several
		// subscriptions', and a channel the ACL refuses must cost only
		// its own.
		send(ctx, ps, (*redis.PubSub).Subscribe, []string{name})
	}
	send(ctx, ps, (*redis.PubSub).Unsubscribe, gone)
	return ps, nil
}

// since compares the channels a connection was dialled with, names, with
// those the hub holds now: added are held and not in names, gone are in
// names and held no more, whose confirmations, on their way, are then
// not for the holders it may have again by the time they come (stale).
func (h *hub) since(names []string) (added, gone []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	dialled := make(map[string]bool, len(names))
	for _, name := range names {
		dialled[name] = true
		if h.chans[name] == nil {
			gone = append(gone, name)
			h.stale[name]++
		}
	}
	for name := range h.chans {
		if !dialled[name] {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	return added, gone
}

// subscribeOrder returns the channels of the hub in the order connect
// subscribes to them: sorted, those of the hub's slot first under Redis
// Cluster. closed is true when the hub was shut down.
func (h *hub) subscribeOrder() (names []string, closed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, true
	}
	names = slices.Sorted(maps.Keys(h.chans))
	if h.key.slot >= 0 {
		names = slotFirst(names, h.key.slot)
	}
	return names, false
}

// slotFirst returns names with those of hash slot slot first, each part
// in the order given.
func slotFirst(names []string, slot int) []string {
	first := make([]string, 0, len(names))
	var rest []string
	for _, name := range names {
		if Slot(name) == slot {
			first = append(first, name)
		} else {
			rest = append(rest, name)
		}
	}
	return append(first, rest...)
}

// dial opens a connection subscribed to names, one SUBSCRIBE per channel:
// the server refuses a command as a whole when one of its channels is not
// allowed (ACL), which must cost only that channel. The first one dials.
func (h *hub) dial(ctx context.Context, names []string) (*redis.PubSub, error) {
	ps := h.client.Subscribe(ctx) // no channel: no I/O yet
	for _, name := range names {
		if err := ps.Subscribe(ctx, name); err != nil {
			_ = ps.Close()
			return nil, err
		}
	}
	return ps, nil
}

// install makes ps the hub's connection, or closes it and returns nil
// when the hub was shut down meanwhile.
func (h *hub) install(ps *redis.PubSub) *redis.PubSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		_ = ps.Close()
		return nil
	}
	h.ps = ps
	clear(h.stale)
	return ps
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

// dispatch hands what the reader read to the subscriptions: a message to
// the holders of its channel, a confirmation of a channel to the running
// subscriptions that were resubscribed to it (confirm).
func (h *hub) dispatch(v any) {
	switch v := v.(type) {
	case *redis.Message:
		deliverAll(h.holders(v.Channel), event{msg: v})
	case *redis.Subscription:
		if v.Kind == "subscribe" {
			deliverAll(h.confirm(v.Channel), event{subscribed: v.Channel})
		}
	}
}

// deliverAll hands ev to each of subs, in order.
func deliverAll(subs []*Subscription, ev event) {
	for _, s := range subs {
		s.deliver(ev)
	}
}
