package masterelection

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

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
	topic    string // set on delivery
	term     int64
	lead     *leadership // master-acquired: the mastership, for its ctx and handler count
	isMaster bool
	slave    registry.SlaveNode
	nodeID   string
	err      error
}

// bus is the typed layer over olebedev/emitter. Each subscriber gets its own
// emitter listener, a pump goroutine that moves events into an unbounded
// queue, and a runner goroutine that calls the handler. So emitting never
// waits for a handler, each subscriber sees events in emission order, and a
// slow subscriber delays only itself.
type bus struct {
	em      *emitter.Emitter
	emitMu  sync.Mutex // serialises emit so every listener sees one order
	wg      sync.WaitGroup
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	closed  bool
	dropped uint64 // error events dropped because a subscriber was far behind; under mu
	onPanic func(topic string, v any, stack []byte)
	obs     observers // called by emit before the handlers get the event (observe.go)
}

func newBus(onPanic func(topic string, v any, stack []byte)) *bus {
	return &bus{em: emitter.New(16), subs: map[*subscriber]struct{}{}, onPanic: onPanic}
}

type subscriber struct {
	topic   string
	ch      <-chan emitter.Event
	handle  func(payload)
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []payload
	errs    int  // error events in queue
	ended   bool // the emitter channel is closed
	discard bool // unsubscribed: drop what is queued
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
	s.ch = b.em.On(topic, emitter.Sync)
	b.subs[s] = struct{}{}
	b.wg.Add(2)
	go b.pump(s)
	go b.runner(s)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.discard = true
			s.mu.Unlock()
			b.off(s)
		})
	}
}

func (b *bus) off(s *subscriber) {
	b.mu.Lock()
	_, ok := b.subs[s]
	delete(b.subs, s)
	b.mu.Unlock()
	if ok {
		b.emitMu.Lock()
		b.em.Off(s.topic, s.ch)
		b.emitMu.Unlock()
	}
}

// pump moves events from the emitter channel into the queue; it never blocks
// on the handler.
func (b *bus) pump(s *subscriber) {
	defer b.wg.Done()
	for ev := range s.ch {
		p := ev.Args[0].(payload)
		p.topic = ev.OriginalTopic
		s.mu.Lock()
		if p.err != nil && s.errs >= maxPendingErrors {
			s.mu.Unlock()
			b.mu.Lock()
			b.dropped++
			b.mu.Unlock()
			continue
		}
		if p.err != nil {
			s.errs++
		}
		s.queue = append(s.queue, p)
		s.cond.Signal()
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.ended = true
	s.cond.Signal()
	s.mu.Unlock()
}

// runner calls the handler for each queued event, in order, recovering panics.
func (b *bus) runner(s *subscriber) {
	defer b.wg.Done()
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.ended && !s.discard {
			s.cond.Wait()
		}
		if s.discard || len(s.queue) == 0 {
			dropped := s.queue
			s.queue = nil
			s.mu.Unlock()
			for _, p := range dropped {
				p.done()
			}
			return
		}
		p := s.queue[0]
		s.queue[0] = payload{}
		s.queue = s.queue[1:]
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

// done tells the mastership that one master-acquired handler has returned.
func (p payload) done() {
	if p.lead != nil {
		p.lead.handlers.Done()
	}
}

// emit delivers p to every subscriber of topic. It returns once every pump
// has taken the event, which is immediate: pumps only append to a queue.
func (b *bus) emit(topic string, p payload) {
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	b.obs.event(topic, p)
	if p.lead != nil {
		// Count the handlers before they can run, so Stop can wait for them.
		p.lead.handlers.Add(len(b.em.Listeners(topic)))
	}
	<-b.em.Emit(topic, p)
}

// close stops accepting subscribers, lets every runner finish the events
// already queued, and waits for the goroutines until ctx ends.
func (b *bus) close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	subs := b.subs
	b.subs = map[*subscriber]struct{}{}
	b.mu.Unlock()
	b.emitMu.Lock()
	for s := range subs {
		b.em.Off(s.topic, s.ch)
	}
	b.emitMu.Unlock()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("event handlers still running: %w", ctx.Err())
	}
}

func (b *bus) droppedErrors() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}
