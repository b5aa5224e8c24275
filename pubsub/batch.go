package pubsub

import (
	"context"
	"errors"
	"fmt"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/route"
)

// Bounds of one script call of Router.SendBatch. A longer batch is split
// into calls of consecutive messages, each call fenced on its own.
const (
	// MaxBatchChunk is the most messages one call publishes. The script
	// holds the Redis server for the whole call (all the PUBLISH commands run
	// in one atomic step), so the bound also bounds how long other clients
	// wait behind it.
	MaxBatchChunk = route.MaxChunk
	// MaxBatchChunkBytes is the most envelope bytes one call carries: 1 MiB.
	// A message is never split, so a call whose first message alone is
	// larger carries that message only.
	MaxBatchChunkBytes = route.MaxChunkBytes
)

// Outgoing is one message of Router.SendBatch.
type Outgoing struct {
	// SlaveID is the process id of the slave to send to; the message goes
	// to its channel (Config.SlaveChannel).
	SlaveID string
	// Type selects the slave's handler.
	Type string
	// Payload is encoded as Send encodes its payload: json.RawMessage as it
	// is, nil as null, anything else through json.Marshal.
	Payload any
}

// Outcome is what became of one message of Router.SendBatch.
type Outcome struct {
	// ID is the message's id (a random UUID, its own for every message of
	// the batch); "" when the message was refused as invalid, or when
	// SendBatch stopped before stamping any message (not master).
	ID string
	// Err is nil when Redis handed the message to at least one subscriber's
	// connection (which does not mean the slave processed it). Otherwise it
	// is, and tells whether the message was published:
	//   - a *NoSubscriberError (ErrNoSubscriber): published, but no process
	//     was subscribed to the channel, so nobody received it;
	//   - an error matching ErrInvalidName, ErrInvalidPayload or
	//     ErrPayloadTooLarge: refused before anything was sent;
	//   - an error matching ErrNotSent, which also wraps the reason the batch
	//     stopped (ErrNotMaster, keyspace.ErrFenced, a cancelled context, the
	//     error of an earlier call): certainly not published;
	//   - any other error, the error of the script call that carried the
	//     message (a network error, a timeout): the call may or may not have
	//     run on the server, as with Send (and with go-redis's retries on,
	//     it may have run twice: see docs/routing.md).
	Err error
}

// BatchResult is the outcome of Router.SendBatch, message by message.
type BatchResult struct {
	// Term is the term stamped on every message of the batch, read once
	// when SendBatch began; 0 when nothing was stamped.
	Term int64
	// Outcomes has one entry per message, in the order of the batch.
	Outcomes []Outcome
	// Calls is the number of script calls made, each one round trip.
	Calls int
}

// Delivered returns the number of messages that reached at least one
// subscriber.
func (b BatchResult) Delivered() int {
	n := 0
	for _, o := range b.Outcomes {
		if o.Err == nil && o.ID != "" {
			n++
		}
	}
	return n
}

// Err joins the errors of the messages that were not delivered, each
// prefixed with its index in the batch; nil when all were delivered.
// NoSubscribers(b.Err()) lists the slaves nobody was listening for.
func (b BatchResult) Err() error {
	var errs []error
	for i, o := range b.Outcomes {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("message %d: %w", i, o.Err))
		}
	}
	return errors.Join(errs...)
}

// SendBatch publishes msgs, each with its own id, all stamped with the one
// term read when it begins, through the route_batch script: one round trip
// and one fencing check per call of up to MaxBatchChunk messages and
// MaxBatchChunkBytes bytes. Each call publishes its messages in one atomic
// step, only while this process still holds the lock under that term, so a
// slave receives its messages in the order of msgs.
//
// Invalid messages (bad slave id or type, a payload that cannot be encoded
// or is too large) are refused one by one, before anything is sent, and the
// others go out. To send all or nothing, check BatchResult.Err and call
// again with the valid ones only after fixing them, or validate beforehand.
//
// The result has an Outcome per message (see Outcome.Err for what each
// error means). The error is nil when every call was made and answered,
// even when some messages were refused or reached nobody: check the
// outcomes, or BatchResult.Err. Otherwise it says why the batch stopped:
//   - ErrNotMaster when this process is not master when SendBatch begins
//     (nothing is sent), or when the election reports between two calls
//     that the mastership is over or has a new term;
//   - an error matching both ErrNotMaster and keyspace.ErrFenced when a call
//     found that Redis's lock is no longer this process's under the term;
//   - the error of a call or of ctx.
//
// A batch split into several calls can stop part way. The messages of the
// calls before the one that failed were published (their outcomes say
// whether anyone received them); those of the calls after it were not
// (ErrNotSent); those of the failed call were not when it was fenced or
// never made (ErrNotSent), and may or may not have been when it failed in
// flight (a network error, a timeout: their Err is that error).
// An empty batch makes no call and returns a nil error, master or not.
func (r *Router) SendBatch(ctx context.Context, msgs []Outgoing) (res BatchResult, err error) {
	defer func() { r.obs.batch(res) }()
	b := route.NewBatch(len(msgs))
	for _, m := range msgs {
		b.Add(m.SlaveID, m.Type, m.Payload)
	}
	err = b.Send(ctx, r.mastership, r.cfg.clock.Now(), r.publishBatch)
	res = BatchResult{Term: b.Term, Outcomes: make([]Outcome, len(msgs)), Calls: b.Calls}
	for i := range res.Outcomes {
		res.Outcomes[i] = Outcome{ID: b.IDs[i], Err: b.Errs[i]}
	}
	return res, err
}

// publishBatch is one call of SendBatch: the route_batch script publishes
// items to their slaves' channels while this process holds the lock under
// term. A message that reached no subscriber gets a *NoSubscriberError.
func (r *Router) publishBatch(ctx context.Context, term int64, items []route.Item) ([]error, error) {
	routed := make([]rdb.Routed, len(items))
	for j, it := range items {
		routed[j] = rdb.Routed{Channel: r.keys.SlaveChannel(it.SlaveID), Message: it.Data}
	}
	counts, err := rdb.RouteBatch(ctx, r.client, r.keys, r.mastership.NodeID(), term, routed)
	if err != nil {
		return nil, err // keyspace.ErrFenced when fenced
	}
	errs := make([]error, len(items))
	for j, n := range counts {
		if n == 0 {
			errs[j] = &NoSubscriberError{SlaveID: items[j].SlaveID}
		}
	}
	return errs, nil
}
