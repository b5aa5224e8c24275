package masterelection

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

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
	// Err is the error (error).
	Err error
}

// The bus topics are the event names.
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

// payload is what travels on the bus; which fields are set depends on the topic.
type payload struct {
	topic    string // set by emit: the event's own topic, also for topicAll subscribers
	term     int64
	lead     *leadership // master-acquired: the mastership, for its ctx and handler count
	isMaster bool
	slave    registry.SlaveNode
	nodeID   string
	err      error
}

// bus delivers the election's events to its handlers. Each subscriber has
// an unbounded queue and a runner goroutine that calls the handler; emit
// appends the event to the queue of every subscriber of its topic and
// wakes the runner, so an event reaches a handler with one goroutine
// switch. Emitting never waits for a handler, each subscriber sees events
// in emission order (emit is serialised), and a slow subscriber delays
// only itself.
type bus struct {
	emitMu  sync.Mutex // serialises emit so every subscriber sees one order
	wg      sync.WaitGroup
	mu      sync.Mutex
	subs    []*subscriber // under mu; replaced, never changed in place, so emit can walk a copy unlocked
	closed  bool          // under mu
	dropped atomic.Uint64 // error events dropped because a subscriber was far behind
	onPanic func(topic string, v any, stack []byte)
	obs     observers // called by emit before the handlers get the event (observe.go)
}

func newBus(onPanic func(topic string, v any, stack []byte)) *bus {
	return &bus{onPanic: onPanic}
}

type subscriber struct {
	topic  string // an event's topic, or topicAll
	handle func(payload)
	mu     sync.Mutex
	cond   *sync.Cond // signalled when queue grows, or ended or discard is set
	queue  []payload  // queue[head:] waits for the handler
	head   int
	errs   int  // error events in queue[head:]
	ended  bool // the bus closed: run what is queued, then return
	// discard: unsubscribed; drop what is queued and accept nothing more.
	discard bool
}

// wants reports whether s subscribed to topic.
func (s *subscriber) wants(topic string) bool {
	return s.topic == topic || s.topic == topicAll
}

// subscribe registers handle for topic and returns the function that
// removes it. handle runs on the subscriber's own goroutine.
func (b *bus) subscribe(topic string, handle func(payload)) (unsubscribe func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return func() {}
	}
	s := &subscriber{topic: topic, handle: handle}
	s.cond = sync.NewCond(&s.mu)
	b.subs = append(b.subs[:len(b.subs):len(b.subs)], s) // a new array: emit may be walking the old one
	b.wg.Add(1)
	go b.runner(s)
	var once sync.Once
	return func() { once.Do(func() { b.off(s) }) }
}

// off unsubscribes s: its runner drops what is queued and returns once the
// handler call in progress, if any, has returned; emit gives it nothing more.
func (b *bus) off(s *subscriber) {
	s.mu.Lock()
	s.discard = true
	s.cond.Signal()
	s.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.subs {
		if x == s {
			next := make([]*subscriber, 0, len(b.subs)-1)
			b.subs = append(append(next, b.subs[:i]...), b.subs[i+1:]...)
			return
		}
	}
}

// runner calls the handler for each queued event, in order, recovering panics.
func (b *bus) runner(s *subscriber) {
	defer b.wg.Done()
	for {
		s.mu.Lock()
		for s.head == len(s.queue) && !s.ended && !s.discard {
			s.cond.Wait()
		}
		if s.discard || s.head == len(s.queue) {
			dropped := s.queue[s.head:]
			s.queue, s.head, s.errs = nil, 0, 0
			s.mu.Unlock()
			for _, p := range dropped {
				p.done()
			}
			return
		}
		p := s.queue[s.head]
		s.queue[s.head] = payload{} // let the GC have what it holds
		s.head++
		if s.head == len(s.queue) {
			// Empty: start again at the front of the same array, so a
			// subscriber that keeps up appends without allocating.
			s.queue, s.head = s.queue[:0], 0
		}
		if p.err != nil {
			s.errs--
		}
		s.mu.Unlock()
		b.call(s, p)
	}
}

func (b *bus) call(s *subscriber, p payload) {
	defer p.done()
	defer func() {
		if v := recover(); v != nil {
			b.onPanic(s.topic, v, debug.Stack())
		}
	}()
	s.handle(p)
}

// done tells the mastership that one master-acquired handler has returned
// (or will never get the event).
func (p payload) done() {
	if p.lead != nil {
		p.lead.handlers.Done()
	}
}

// emit delivers p to every subscriber of topic and of topicAll: it appends
// p to their queues and wakes their runners. It never waits for a handler.
func (b *bus) emit(topic string, p payload) {
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	b.obs.event(topic, p)
	b.mu.Lock()
	subs := b.subs
	b.mu.Unlock()
	p.topic = topic
	if p.lead != nil {
		// Count the handlers before any of them can run, so Stop can wait
		// for them; a subscriber that turns the event down below is
		// counted off at once.
		n := 0
		for _, s := range subs {
			if s.wants(topic) {
				n++
			}
		}
		p.lead.handlers.Add(n)
	}
	for _, s := range subs {
		if !s.wants(topic) {
			continue
		}
		s.mu.Lock()
		switch {
		case s.ended || s.discard:
			// Closed or unsubscribed since subs was read.
			s.mu.Unlock()
			p.done()
			continue
		case p.err != nil && s.errs >= maxPendingErrors:
			s.mu.Unlock()
			b.dropped.Add(1)
			p.done()
			continue
		}
		s.push(p)
		s.cond.Signal()
		s.mu.Unlock()
	}
}

// push appends p to the queue; s.mu is held. When the array is full and
// at least half of it holds events already run, the waiting ones move to
// the front instead of the array growing, so a subscriber that is always a
// little behind does not grow it without bound.
func (s *subscriber) push(p payload) {
	if len(s.queue) == cap(s.queue) && s.head > 0 && s.head >= len(s.queue)/2 {
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue, s.head = s.queue[:n], 0
	}
	s.queue = append(s.queue, p)
	if p.err != nil {
		s.errs++
	}
}

// close stops accepting subscribers, lets every runner finish the events
// already queued, and waits for the runners until ctx ends. Events emitted
// after close reach no handler.
func (b *bus) close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		s.ended = true
		s.cond.Signal()
		s.mu.Unlock()
	}
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
