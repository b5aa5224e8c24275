package durable

import (
	"errors"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/pubsub"
)

// Errors returned by this package. Match them with errors.Is. Errors about
// input and received entries reuse pubsub's sentinels (pubsub.ErrInvalidName,
// pubsub.ErrInvalidPayload, pubsub.ErrPayloadTooLarge,
// pubsub.ErrMalformedEnvelope, pubsub.ErrUnknownType, pubsub.ErrHandlerPanic,
// pubsub.ErrConnection) and its typed errors (*pubsub.StaleTermError,
// *pubsub.UnverifiedTermError, *pubsub.MessageError).
var (
	// ErrNotMaster is pubsub.ErrNotMaster itself: Router.Send, SendBatch and
	// Reassign return it when this process is not master or has no live
	// term, and wrap it together with keyspace.ErrFenced when the script
	// found that Redis's lock is not this process's under that term (then
	// nothing was added or moved).
	ErrNotMaster = pubsub.ErrNotMaster
	// ErrInboxFull is returned by Router.Send, and is the Outcome.Err of a
	// message of SendBatch, when the slave's inbox already held
	// Config.MaxLen entries: the message was not added.
	ErrInboxFull = errors.New("durable: inbox full")
	// ErrNotRegistered is returned by Router.Send, and is the Outcome.Err
	// of a message of SendBatch, when the slave is not a live process in
	// the registry (never registered, removed, or expired): the message was
	// not added, since no process would read it.
	ErrNotRegistered = errors.New("durable: not a live process in the registry")
	// ErrNoDeadLetter is returned by DeadLetters.Retry when the dead
	// letter does not exist: nothing was changed.
	ErrNoDeadLetter = rdb.ErrNoDeadLetter
	// ErrMasterInbox is returned by Router.Send, and is the Outcome.Err of
	// a message of SendBatch, when the slave is this process, the master:
	// the master's own inbox is moved to the live slaves (Router.Sweep), so
	// nothing is stored in it. The message was not added.
	ErrMasterInbox = errors.New("durable: the slave is the master itself")
	// ErrNotSent is pubsub.ErrNotSent itself, the two Routers sending
	// batches alike: it is matched by the Outcome.Err of each message of
	// SendBatch that was certainly not added because the batch stopped
	// before or at its call; the error wraps the reason too.
	ErrNotSent = pubsub.ErrNotSent
	// ErrNoSlaves is returned by Reassign when there is no live slave to
	// take the entries: they stay in the old inbox.
	ErrNoSlaves = errors.New("durable: no slave to reassign to")
	// ErrBadPick is returned by Reassign when the Pick returned an id that
	// is not one of the slaves it was given; nothing more is moved.
	ErrBadPick = errors.New("durable: pick returned no listed slave")
	// ErrInvalidConfig is wrapped by Config.Validate's error and by the
	// constructors' errors about the Config.
	ErrInvalidConfig = errors.New("durable: invalid config")
	// ErrStarted is returned by Consumer.Start when it already runs.
	ErrStarted = errors.New("durable: already started")
	// ErrClosed is returned by Consumer.Start after Close.
	ErrClosed = errors.New("durable: closed")
)
