package pubsub

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
)

// Errors returned or reported by this package. Match them with errors.Is;
// the typed errors below (NoSubscriberError, StaleTermError,
// UnverifiedTermError, MessageError) match their sentinel too. Package
// durable reuses those about names, payloads, envelopes, handlers, terms
// and connections.
var (
	// ErrNotMaster is matched by the errors of Router.Send, Router.Broadcast
	// and Router.SendBatch when this process is not the master, or its
	// mastership has no live term; and, with keyspace.ErrFenced, when the
	// route script found that Redis's lock is no longer this process's under
	// that term. It is keyspace.ErrNotMaster, the same value as
	// masterelection.ErrNotMaster and registry.ErrNotMaster.
	ErrNotMaster = keyspace.ErrNotMaster
	// ErrInvalidConfig is wrapped by the errors of Config.Validate and of the
	// constructors given a Config that cannot be used; the message names
	// every problem.
	ErrInvalidConfig = errors.New("pubsub: invalid config")
	// ErrNotSent is matched by the Outcome.Err of each message of
	// Router.SendBatch that was certainly not published because the batch
	// stopped before or at its call (not master, fenced, a cancelled
	// context, a failed earlier call); the error wraps that reason too.
	ErrNotSent = route.ErrNotSent
	// ErrNoSubscriber is matched by a *NoSubscriberError: PUBLISH reached no
	// subscriber, so nobody received the message.
	ErrNoSubscriber = errors.New("pubsub: no subscriber")
	// ErrStaleTerm is matched by a *StaleTermError: a message carried a term
	// lower than the highest master term the subscriber has seen.
	ErrStaleTerm = errors.New("pubsub: stale term")
	// ErrUnverifiedTerm is matched by an *UnverifiedTermError: a message or
	// an "acquired"/"released" notice carried a term above every term the
	// subscriber has verified, and the term key in Redis did not confirm
	// it (it held a lower term, was missing, or could not be read). The
	// message was not handled and the term did not raise the fence.
	ErrUnverifiedTerm = errors.New("pubsub: unverified term")
	// ErrTermMissing is wrapped by an *UnverifiedTermError when the term key
	// does not exist. The key has no TTL and is never deleted, so once a
	// term was minted its absence means Redis lost its data.
	ErrTermMissing = route.ErrTermMissing
	// ErrInvalidName wraps the reason a slave id, node id, message type,
	// lock name or channel prefix cannot be used.
	ErrInvalidName = route.ErrInvalidName
	// ErrInvalidPayload wraps the reason a payload cannot be encoded as JSON.
	ErrInvalidPayload = route.ErrInvalidPayload
	// ErrPayloadTooLarge is returned when a payload exceeds MaxPayloadSize,
	// and reported when a received envelope does.
	ErrPayloadTooLarge = route.ErrPayloadTooLarge
	// ErrMalformedEnvelope wraps the reason a received message is not a valid
	// envelope.
	ErrMalformedEnvelope = errors.New("pubsub: malformed envelope")
	// ErrUnknownType is reported when a message's type has no handler and no
	// default handler is registered.
	ErrUnknownType = route.ErrUnknownType
	// ErrHandlerPanic is reported when a handler panicked; the loop goes on.
	ErrHandlerPanic = route.ErrHandlerPanic
	// ErrStarted is returned by Start when the loop is already running.
	ErrStarted = errors.New("pubsub: already started")
	// ErrClosed is returned by Start after Close.
	ErrClosed = errors.New("pubsub: closed")
	// ErrConnection wraps receive and reconnect failures reported while the
	// loop keeps retrying; messages published meanwhile are lost.
	ErrConnection = route.ErrConnection
	// ErrBacklogFull is reported when messages were dropped because the
	// handlers of a Subscriber or Reports were more than Config.MaxBacklog
	// bytes of messages behind; the error says how many.
	ErrBacklogFull = errors.New("pubsub: backlog full, messages dropped")
)

// NoSubscriberError is returned by Router.Send (and joined into the error of
// Router.Broadcast) when PUBLISH to a slave's channel reached no subscriber:
// the slave is gone or not listening, and the message is lost. The caller
// should reassign the slave's work (see docs/routing.md).
type NoSubscriberError struct {
	// SlaveID is the process id of the slave that did not receive the message.
	SlaveID string
}

func (e *NoSubscriberError) Error() string {
	return fmt.Sprintf("pubsub: no subscriber on the channel of slave %q", e.SlaveID)
}

// Is reports whether target is ErrNoSubscriber.
func (e *NoSubscriberError) Is(target error) bool { return target == ErrNoSubscriber }

// NoSubscribers returns the slave ids of every *NoSubscriberError in err's
// tree, in order: for Broadcast, the slaves that received nothing.
func NoSubscribers(err error) []string {
	var ids []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *NoSubscriberError:
			ids = append(ids, e.SlaveID)
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return ids
}

// StaleTermError is reported by a Subscriber for each message it rejects
// because its term is lower than the highest master term seen: the sender
// was master once but has been superseded.
type StaleTermError struct {
	// Term is the term the message carried.
	Term int64
	// Highest is the highest master term the subscriber had seen.
	Highest int64
	// From is the node id of the sender.
	From string
	// ID and Type identify the rejected message.
	ID, Type string
}

func (e *StaleTermError) Error() string {
	return "pubsub: rejected message " + strconv.Quote(e.ID) + " of type " + strconv.Quote(e.Type) +
		" from " + strconv.Quote(e.From) + ": term " + strconv.FormatInt(e.Term, 10) +
		" is older than term " + strconv.FormatInt(e.Highest, 10)
}

// Is reports whether target is ErrStaleTerm.
func (e *StaleTermError) Is(target error) bool { return target == ErrStaleTerm }

// UnverifiedTermError is reported by a Subscriber for each message or notice
// it refuses because Redis does not confirm its term: the term is above
// every term the subscriber has verified, and the term key (read once for
// it) holds a lower term, is missing, or could not be read. No master was
// elected under such a term as far as Redis can tell, so the message is not
// handled and the notice raises nothing. See docs/routing.md.
type UnverifiedTermError struct {
	// Channel is the channel the message or notice arrived on.
	Channel string
	// Term is the term it carried.
	Term int64
	// Stored is the term the term key held; 0 when it was missing or could
	// not be read (then Err says why).
	Stored int64
	// From is the sender's node id (a notice's nodeId).
	From string
	// ID and Type identify a message; for a notice, ID is empty and Type is
	// the event ("acquired" or "released").
	ID, Type string
	// Err is nil when the term key held a lower term. Otherwise the term
	// could not be verified: Err matches ErrTermMissing, or is the error of
	// the read (a timeout after Config.OpTimeout or a connection error, both
	// matching ErrConnection; a value that is not a term).
	Err error
}

func (e *UnverifiedTermError) Error() string {
	what := "message " + strconv.Quote(e.ID) + " of type " + strconv.Quote(e.Type) + " from " + strconv.Quote(e.From)
	if e.ID == "" {
		what = strconv.Quote(e.Type) + " notice of node " + strconv.Quote(e.From)
	}
	head := "pubsub: refused " + what + " on " + strconv.Quote(e.Channel) + ": term " + strconv.FormatInt(e.Term, 10)
	if e.Err != nil {
		return head + " could not be verified: " + e.Err.Error()
	}
	return head + " is above term " + strconv.FormatInt(e.Stored, 10) + ", the last one minted in Redis"
}

// Is reports whether target is ErrUnverifiedTerm.
func (e *UnverifiedTermError) Is(target error) bool { return target == ErrUnverifiedTerm }

// Unwrap returns Err.
func (e *UnverifiedTermError) Unwrap() error { return e.Err }

// MessageError is reported when one received message could not be
// delivered: it was malformed or oversized, its type had no handler, or its
// handler returned an error or panicked. Err says which, and matches one of
// ErrMalformedEnvelope, ErrPayloadTooLarge, ErrUnknownType, ErrHandlerPanic,
// ErrNotMaster (a report that reached a Reports while not master) or the handler's own error.
type MessageError struct {
	// Channel is the channel the message arrived on.
	Channel string
	// ID, Type and From are copied from the envelope when it could be
	// decoded, and empty otherwise.
	ID, Type, From string
	// Err is the reason.
	Err error
}

func (e *MessageError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("message on %q: %v", e.Channel, e.Err)
	}
	return fmt.Sprintf("message %q of type %q from %q on %q: %v", e.ID, e.Type, e.From, e.Channel, e.Err)
}

// Unwrap returns Err.
func (e *MessageError) Unwrap() error { return e.Err }
