package masterelection

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/olebedev/emitter"

	"github.com/herdkit/herd/registry"
)

// EventKind names an event; the values are the specification's event names.
type EventKind string

// The events of an election.
const (
	EventMasterAcquired    EventKind = "master-acquired"
	EventMasterLost        EventKind = "master-lost"
	EventElectionStarted   EventKind = "election-started"
	EventElectionCompleted EventKind = "election-completed"
	EventSlaveRegistered   EventKind = "slave-registered"
	EventSlaveRemoved      EventKind = "slave-removed"
	EventError             EventKind = "error"
)

// Event is one event, as OnEvent delivers it. Which fields are set depends
// on Kind.
type Event struct {
	Kind EventKind
	// Term is the term that was acquired or lost (master-acquired, master-lost).
	Term int64
	// IsMaster is the outcome of election-completed.
	IsMaster bool
	// Slave is the slave that joined (slave-registered).
	Slave registry.SlaveNode
	// NodeID is the slave that left (slave-removed).
	NodeID string
	// Reason is why it left (slave-removed): registry.LeftUnregistered (a
	// Stop), LeftStale (silent for SlaveTimeout: a crash, a pause, a cut),
	// LeftVanished or LeftMaster.
	Reason registry.LeaveReason
	// Err is the error (error).
	Err error
}

// The bus topics are the event names, which are also the emitter's topics:
// they hold no pattern characters, so each matches only itself, and
// topicAll, the emitter's wildcard, matches every one of them.
const (
	topicMasterAcquired    = string(EventMasterAcquired)
	topicMasterLost        = string(EventMasterLost)
	topicElectionStarted   = string(EventElectionStarted)
	topicElectionCompleted = string(EventElectionCompleted)
	topicSlaveRegistered   = string(EventSlaveRegistered)
	topicSlaveRemoved      = string(EventSlaveRemoved)
	topicError             = string(EventError)
	topicAll               = "*"
)

// maxPendingErrors bounds the error events queued for one subscriber whose
// handler is slow; beyond it error events are dropped and counted. Role and
// membership events are never dropped.
const maxPendingErrors = 1024

// listenerCap is the capacity of each subscriber's emitter channel. Events
// beyond it wait in the subscriber's overflow queue, which has no bound, so
// the capacity decides only how far a subscriber may fall behind before its
// events take the slower path through the overflow, never whether one is
// dropped or whether emit waits.
const listenerCap = 64

// payload is what travels on the bus, as the one argument of an emitter
// event; which fields are set depends on the topic.
type payload struct {
	topic      string // set by emit: the event's own topic, also for topicAll subscribers
	term       int64
	mastership *mastership // master-acquired: the mastership, for its ctx and handler count
	isMaster   bool
	slave      registry.SlaveNode
	nodeID     string
	reason     registry.LeaveReason
	err        error
}

// bus is the election's typed event bus, a layer over an emitter.Emitter
// that delivers payloads to handlers.
//
// Each subscriber is one emitter listener, whose channel (listenerCap) is
// read by the subscriber's own runner goroutine, which calls the handler.
// emit hands an event to the emitter synchronously (emitter.FlagSync): the
// emitter calls each listener's middleware (admit), then sends into the
// listener's channel without blocking (emitter.FlagSkip). admit lets the
// send go ahead only when the channel has room and nothing waits in the
// subscriber's overflow queue; otherwise it appends the event to the
// overflow and voids the send (emitter.FlagVoid). Once the overflow holds
// an event, every later one goes there too until the runner has emptied
// it, so the channel only ever holds events older than the overflow's.
// Hence:
//
//   - emit never waits for a handler, nor for a runner, and starts no
//     goroutine: an event reaches a runner waiting on its channel with one
//     goroutine switch;
//   - each subscriber sees events in emission order (emit is serialised,
//     and the runner empties the channel before it takes from the
//     overflow), one at a time; a slow subscriber delays only itself;
//   - no event is dropped, except error events beyond maxPendingErrors
//     waiting for one subscriber, which are counted (droppedErrors);
//   - a master-acquired event is counted in its mastership's handlers for
//     every subscriber that admits it, and counted done when its handler
//     returns or the event is dropped, so Stop can wait for the handlers;
//   - a handler's panic is recovered and reported to onPanic;
//   - unsubscribing drops the events still queued for that subscriber;
//     close lets every runner finish the events queued, bounded by ctx.
//
// The emitter's asynchronous mode (a goroutine per send, in no fixed order)
// and its blocking sends are never used.
type bus struct {
	emitMu  sync.Mutex // serialises emit, so observers and every subscriber see one order
	em      *emitter.Emitter
	wg      sync.WaitGroup // the runners
	mu      sync.Mutex
	subs    map[*subscriber]struct{} // under mu: the emitter's listeners; nil once closed
	dropped atomic.Uint64            // error events dropped because a subscriber was far behind
	onPanic func(topic string, v any, stack []byte)
	obs     observers // called by emit before the handlers get the event (observe.go)
}

func newBus(onPanic func(topic string, v any, stack []byte)) *bus {
	return &bus{
		em:      emitter.New(listenerCap),
		subs:    map[*subscriber]struct{}{},
		onPanic: onPanic,
	}
}

// subscriber is one handler of the bus: an emitter listener and the runner
// that reads it.
type subscriber struct {
	topic  string // an event's topic, or topicAll
	handle func(payload)
	ch     <-chan emitter.Event // the emitter's listener channel, set under mu, read by admit under mu and by the runner; closed by Off
	errs   atomic.Int64         // error events admitted and not yet taken by the runner

	mu       sync.Mutex
	overflow []payload // overflow[head:]: admitted when ch was full, all newer than what ch holds
	head     int
	// discard: unsubscribed; drop what is queued and admit nothing more.
	discard bool
}

// subscribe registers handle for topic and returns the function that
// removes it. handle runs on the subscriber's own goroutine.
func (b *bus) subscribe(topic string, handle func(payload)) (unsubscribe func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil { // closed
		return func() {}
	}
	s := &subscriber{topic: topic, handle: handle}
	// An Emit of another goroutine calls admit(s), which reads s.ch under
	// s.mu, from the moment On has registered s: s.ch is set under s.mu
	// too. (No lock-order cycle: Emit holds the emitter's lock, which On
	// takes, only once On has returned.)
	s.mu.Lock()
	s.ch = b.em.On(topic, b.admit(s))
	s.mu.Unlock()
	b.subs[s] = struct{}{}
	b.wg.Add(1)
	go b.runner(s)
	var once sync.Once
	return func() { once.Do(func() { b.unsubscribe(s) }) }
}

// unsubscribe removes s: its runner drops what is queued and returns once
// the handler call in progress, if any, has returned; emit gives it nothing
// more.
func (b *bus) unsubscribe(s *subscriber) {
	s.mu.Lock()
	s.discard = true
	s.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		b.em.Off(s.topic, s.ch) // closes ch: a runner waiting on it wakes up
	}
}

// admit returns s's emitter middleware. Emit calls it under the emitter's
// lock, once per event for s, right before the send into s.ch. It decides
// where the event goes: into s.ch (the send then happens and cannot
// block, since the channel has room and only Emit sends on it), into the
// overflow queue, or nowhere (unsubscribed, or an error event beyond
// maxPendingErrors). A master-acquired event that s will get is counted in
// its mastership's handlers; the runner counts it done.
func (b *bus) admit(s *subscriber) func(*emitter.Event) {
	return func(ev *emitter.Event) {
		ev.Flags = emitter.FlagSync | emitter.FlagSkip
		p := ev.Args[0].(payload)
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case s.discard:
			ev.Flags |= emitter.FlagVoid
			return
		case p.err != nil && s.errs.Load() >= maxPendingErrors:
			b.dropped.Add(1)
			ev.Flags |= emitter.FlagVoid
			return
		}
		if p.mastership != nil {
			p.mastership.handlers.Add(1)
		}
		if p.err != nil {
			s.errs.Add(1)
		}
		if s.head == len(s.overflow) && len(s.ch) < cap(s.ch) {
			return // the emitter sends it
		}
		s.push(p)
		ev.Flags |= emitter.FlagVoid
	}
}

// push appends p to the overflow queue; s.mu is held. When the array is
// full and at least half of it holds events already run, the waiting ones
// move to the front instead of the array growing, so a subscriber that is
// always a little behind does not grow it without bound.
func (s *subscriber) push(p payload) {
	if len(s.overflow) == cap(s.overflow) && s.head > 0 && s.head >= len(s.overflow)/2 {
		n := copy(s.overflow, s.overflow[s.head:])
		clear(s.overflow[n:])
		s.overflow, s.head = s.overflow[:n], 0
	}
	s.overflow = append(s.overflow, p)
}

// pop takes the oldest event of the overflow queue; s.mu is held and the
// queue is not empty.
func (s *subscriber) pop() payload {
	p := s.overflow[s.head]
	s.overflow[s.head] = payload{} // let the GC have what it holds
	s.head++
	if s.head == len(s.overflow) {
		// Empty: start again at the front of the same array.
		s.overflow, s.head = s.overflow[:0], 0
	}
	return p
}

// runner calls the handler for each event of s, in order, recovering
// panics, until s is unsubscribed (what is queued is then dropped) or the
// bus is closed (what is queued is run first).
func (b *bus) runner(s *subscriber) {
	defer b.wg.Done()
	closed := false // Off has closed s.ch, and it is empty
	for {
		s.mu.Lock()
		if s.discard {
			s.mu.Unlock()
			s.drop()
			return
		}
		// The channel's events are older than the overflow's: the
		// overflow's turn comes when the channel is empty. Only emit
		// fills the channel, and only while the overflow is empty.
		if s.head < len(s.overflow) && len(s.ch) == 0 {
			p := s.pop()
			s.mu.Unlock()
			b.call(s, p)
			continue
		}
		s.mu.Unlock()
		if closed {
			return
		}
		ev, ok := <-s.ch
		if !ok {
			closed = true
			continue
		}
		b.call(s, ev.Args[0].(payload))
	}
}

// drop counts done, without running them, the events queued for an
// unsubscribed s: those of the overflow, then those of the channel until
// Off has closed it.
func (s *subscriber) drop() {
	s.mu.Lock()
	dropped := s.overflow[s.head:]
	s.overflow, s.head = nil, 0
	s.mu.Unlock()
	for _, p := range dropped {
		p.handlerDone()
	}
	for ev := range s.ch {
		ev.Args[0].(payload).handlerDone()
	}
}

func (b *bus) call(s *subscriber, p payload) {
	if p.err != nil {
		s.errs.Add(-1)
	}
	defer p.handlerDone()
	defer func() {
		if v := recover(); v != nil {
			b.onPanic(s.topic, v, debug.Stack())
		}
	}()
	s.handle(p)
}

// handlerDone tells the mastership that one master-acquired handler has returned
// (or will never get the event).
func (p payload) handlerDone() {
	if p.mastership != nil {
		p.mastership.handlers.Done()
	}
}

// emit delivers p to every subscriber of topic and of topicAll, through
// the emitter (see bus). It never waits for a handler.
func (b *bus) emit(topic string, p payload) {
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	b.obs.event(topic, p)
	p.topic = topic
	if p.mastership != nil {
		// admit counts each master-acquired handler as it admits the
		// event; this count, held until every subscriber has been
		// admitted, keeps the total from passing through zero while an
		// early handler returns, so Stop cannot stop waiting too soon.
		p.mastership.handlers.Add(1)
		defer p.mastership.handlers.Done()
	}
	b.em.Emit(topic, p)
}

// close stops accepting subscribers, lets every runner finish the events
// already queued, and waits for the runners until ctx ends. Events emitted
// after close reach no handler.
func (b *bus) close(ctx context.Context) error {
	b.mu.Lock()
	for s := range b.subs {
		b.em.Off(s.topic, s.ch) // the runner runs what ch and the overflow hold, then returns
	}
	b.subs = nil
	b.mu.Unlock()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("event handlers still running: %w", ctx.Err())
	}
}

func (b *bus) droppedErrors() uint64 { return b.dropped.Load() }

// event is called by bus.emit for every event, before the handlers get it,
// under bus.emitMu; it times the elections.
func (ol *observers) event(topic string, p payload) {
	set := ol.set.Load()
	switch {
	case topic == topicElectionStarted && set != nil:
		ol.electionStart = set.now()
	case topic == topicElectionStarted:
		ol.electionStart = time.Time{}
	case topic == topicElectionCompleted:
		start := ol.electionStart
		ol.electionStart = time.Time{}
		ol.electionDone(set, start, p.isMaster)
	}
}
