package pubsub

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/herdkit/herd/keyspace"
)

// Observer receives the outcome of every message a Router sends and of
// every message a Subscriber receives. It is meant for metrics (package
// metrics builds its Prometheus metrics on it); add one with Router.Observe
// or Subscriber.Observe. It adds no dependency and costs nothing while no
// Observer is added.
//
// Every field may be nil. The functions are called synchronously: Routed on
// the goroutine that called Send, Broadcast or SendBatch (so calls may
// overlap), Received on the Subscriber's loop goroutine (one at a time, in
// the order the messages arrived). They must return quickly and must not
// block, panic, or call Close.
type Observer struct {
	// Routed is called once per Send, Broadcast and SendBatch call for each
	// outcome its messages had, with how many had it (n > 0). A message
	// sent to several slaves (Broadcast) counts once per slave; a call
	// refused as a whole (not master, an invalid type or payload) counts
	// one message.
	Routed func(outcome RouteOutcome, n int)
	// Received is called once per message that arrived on the Subscriber's
	// channel, and once per notice on the events channel that it refused,
	// with what became of it.
	Received func(ReceiveOutcome)
}

// RouteOutcome is what became of a routed message. Its values are short
// snake_case words, fit for a metric label.
type RouteOutcome string

// The outcomes of a routed message.
const (
	// RouteDelivered: Redis handed the message to at least one
	// subscriber's connection.
	RouteDelivered RouteOutcome = "delivered"
	// RouteNoSubscriber: published, but nobody listened on the channel
	// (*NoSubscriberError).
	RouteNoSubscriber RouteOutcome = "no_subscriber"
	// RouteNotMaster: not sent, because the election says this process is
	// not master, or its term changed (ErrNotMaster).
	RouteNotMaster RouteOutcome = "not_master"
	// RouteFenced: not sent, because the route script found that Redis's
	// lock is no longer this process's under the term (keyspace.ErrFenced).
	RouteFenced RouteOutcome = "fenced"
	// RouteInvalid: refused before sending: a bad slave id or type, a
	// payload that cannot be encoded or is too large.
	RouteInvalid RouteOutcome = "invalid"
	// RouteFailed: the script call failed (a network error, a timeout, a
	// cancelled context); the message may or may not have been published.
	RouteFailed RouteOutcome = "error"
)

// ReceiveOutcome is what became of a message a Subscriber received. Its
// values are short snake_case words, fit for a metric label.
type ReceiveOutcome string

// The outcomes of a received message. All but ReceiveHandled mean that no
// handler saw the message, or that its handler failed.
const (
	// ReceiveHandled: its handler returned nil.
	ReceiveHandled ReceiveOutcome = "handled"
	// ReceiveHandlerError: its handler returned an error.
	ReceiveHandlerError ReceiveOutcome = "handler_error"
	// ReceiveHandlerPanic: its handler panicked.
	ReceiveHandlerPanic ReceiveOutcome = "handler_panic"
	// ReceiveUnknownType: no handler for its type and no default handler.
	ReceiveUnknownType ReceiveOutcome = "unknown_type"
	// ReceiveStaleTerm: rejected, its term is older than the highest seen
	// (*StaleTermError): it came from a replaced master.
	ReceiveStaleTerm ReceiveOutcome = "stale_term"
	// ReceiveUnverifiedTerm: refused, Redis did not confirm its term
	// (*UnverifiedTermError); also a refused notice.
	ReceiveUnverifiedTerm ReceiveOutcome = "unverified_term"
	// ReceiveMalformed: not a valid envelope (or notice).
	ReceiveMalformed ReceiveOutcome = "malformed"
	// ReceiveTooLarge: its envelope or payload exceeds the limits.
	ReceiveTooLarge ReceiveOutcome = "too_large"
	// ReceiveDropped: dropped unread, the receiver's handlers being more
	// than Config.MaxBacklog bytes behind (ErrBacklogFull).
	ReceiveDropped ReceiveOutcome = "dropped"
)

// Observe adds o to the Router's observers and returns the function that
// removes it. It may be called at any time.
func (r *Router) Observe(o Observer) (remove func()) { return r.obs.add(o) }

// Observe adds o to the Subscriber's observers and returns the function
// that removes it. It may be called at any time, before or after Start.
func (s *Subscriber) Observe(o Observer) (remove func()) { return s.recv.obs.add(o) }

// observers is a list of Observers, read without a lock at each call site.
type observers struct {
	mu   sync.Mutex // serialises add and remove
	list atomic.Pointer[[]*Observer]
}

func (ol *observers) add(o Observer) (remove func()) {
	p := &o
	ol.mu.Lock()
	var next []*Observer
	if cur := ol.list.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, p)
	ol.list.Store(&next)
	ol.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			ol.mu.Lock()
			defer ol.mu.Unlock()
			var next []*Observer
			for _, x := range *ol.list.Load() {
				if x != p {
					next = append(next, x)
				}
			}
			ol.list.Store(&next)
		})
	}
}

func (ol *observers) load() []*Observer {
	if l := ol.list.Load(); l != nil {
		return *l
	}
	return nil
}

// routed reports n messages with outcome; n <= 0 reports nothing.
func (ol *observers) routed(outcome RouteOutcome, n int) {
	if n <= 0 {
		return
	}
	for _, o := range ol.load() {
		if o.Routed != nil {
			o.Routed(outcome, n)
		}
	}
}

// sent reports the outcome of Send, one message.
func (ol *observers) sent(err error) {
	if len(ol.load()) == 0 {
		return
	}
	ol.routed(routeOutcome(err), 1)
}

// broadcast reports the outcome of Broadcast: delivered messages, and one
// outcome for each error joined into err.
func (ol *observers) broadcast(delivered int, err error) {
	if len(ol.load()) == 0 {
		return
	}
	ol.routed(RouteDelivered, delivered)
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	counts := map[RouteOutcome]int{}
	for _, e := range errs {
		counts[routeOutcome(e)]++
	}
	for outcome, n := range counts {
		ol.routed(outcome, n)
	}
}

// batch reports the outcomes of SendBatch, message by message.
func (ol *observers) batch(res BatchResult) {
	if len(ol.load()) == 0 {
		return
	}
	counts := map[RouteOutcome]int{}
	for _, o := range res.Outcomes {
		counts[routeOutcome(o.Err)]++
	}
	for outcome, n := range counts {
		ol.routed(outcome, n)
	}
}

// routeOutcome classifies the error of one routed message.
func routeOutcome(err error) RouteOutcome {
	switch {
	case err == nil:
		return RouteDelivered
	case errors.Is(err, ErrNoSubscriber):
		return RouteNoSubscriber
	case errors.Is(err, keyspace.ErrFenced):
		return RouteFenced
	case errors.Is(err, ErrNotMaster):
		return RouteNotMaster
	case errors.Is(err, ErrInvalidName), errors.Is(err, ErrInvalidPayload), errors.Is(err, ErrPayloadTooLarge):
		return RouteInvalid
	}
	return RouteFailed
}

// received reports one received message or notice.
func (ol *observers) received(outcome ReceiveOutcome) {
	for _, o := range ol.load() {
		if o.Received != nil {
			o.Received(outcome)
		}
	}
}

// reported reports the message behind an error of the receive loop; errors
// that are about no message (connection problems) report nothing.
func (ol *observers) reported(err error) {
	if len(ol.load()) == 0 {
		return
	}
	switch e := err.(type) {
	case *StaleTermError:
		ol.received(ReceiveStaleTerm)
	case *UnverifiedTermError:
		ol.received(ReceiveUnverifiedTerm)
	case *MessageError:
		ol.received(messageOutcome(e.Err))
	}
}

// messageOutcome classifies the Err of a *MessageError.
func messageOutcome(err error) ReceiveOutcome {
	switch {
	case errors.Is(err, ErrPayloadTooLarge):
		return ReceiveTooLarge
	case errors.Is(err, ErrMalformedEnvelope):
		return ReceiveMalformed
	case errors.Is(err, ErrUnknownType):
		return ReceiveUnknownType
	case errors.Is(err, ErrHandlerPanic):
		return ReceiveHandlerPanic
	}
	return ReceiveHandlerError
}
