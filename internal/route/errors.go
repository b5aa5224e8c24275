package route

import (
	"errors"

	"github.com/herdkit/herd/keyspace"
)

// The errors of the core, each with what returns it. Package pubsub
// exports them under the same names, documented there (pubsub.ErrInvalidName
// is ErrInvalidName), and durable reuses pubsub's, so their text carries
// pubsub's prefix. ErrNotATerm alone is not exported: a receiver reports it
// as it is.
var (
	ErrNotMaster       = keyspace.ErrNotMaster                      // LiveTerm, Stamp, Batch.Send
	ErrNotSent         = errors.New("pubsub: not sent")             // Batch.Send: certainly not sent
	ErrInvalidName     = errors.New("pubsub: invalid name")         // CheckName
	ErrInvalidPayload  = errors.New("pubsub: invalid payload")      // EncodePayload
	ErrPayloadTooLarge = errors.New("pubsub: payload too large")    // EncodePayload
	ErrUnknownType     = errors.New("pubsub: unknown message type") // Mux.Dispatch
	ErrHandlerPanic    = errors.New("pubsub: handler panicked")     // Mux.Dispatch
	ErrTermMissing     = errors.New("pubsub: term key missing")     // ReadTerm
	ErrConnection      = errors.New("pubsub: connection problem")   // ReadTerm, and the receivers' calls
	ErrNotATerm        = errors.New("not a term")                   // ReadTerm: the term key holds something else
)
