package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/herdkit/herd/scripts"
)

// Bounds of one script call of Router.SendBatch. A longer batch is split
// into calls of consecutive messages, each call fenced on its own.
const (
	// MaxBatchChunk is the most messages one call publishes. The script
	// holds the Redis server for the whole call (all the PUBLISH commands run
	// in one atomic step), so the bound also bounds how long other clients
	// wait behind it.
	MaxBatchChunk = 128
	// MaxBatchChunkBytes is the most envelope bytes one call carries: 1 MiB.
	// A message is never split, so a call whose first message alone is
	// larger carries that message only.
	MaxBatchChunkBytes = 1 << 20
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
	//     stopped (ErrNotMaster, scripts.ErrFenced, a cancelled context, the
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
//   - an error matching both ErrNotMaster and scripts.ErrFenced when a call
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
	res = BatchResult{Outcomes: make([]Outcome, len(msgs))}
	if len(msgs) == 0 {
		return res, nil
	}
	raws := make([]json.RawMessage, len(msgs))
	valid := 0
	for i, m := range msgs {
		raw, err := checkOutgoing(m)
		if err != nil {
			res.Outcomes[i].Err = fmt.Errorf("to slave %q: %w", m.SlaveID, err)
			continue
		}
		raws[i] = raw
		valid++
	}
	if valid == 0 {
		return res, nil
	}
	if !r.leader.IsMaster() {
		markNotSent(res.Outcomes, 0, ErrNotMaster)
		return res, ErrNotMaster
	}
	term := r.leader.Term()
	if term <= 0 {
		markNotSent(res.Outcomes, 0, ErrNotMaster)
		return res, ErrNotMaster
	}
	res.Term = term

	from, sentAt := r.leader.NodeID(), sentAtText(r.cfg.clock.Now())
	routed := make([]scripts.Routed, len(msgs))
	for i, m := range msgs {
		if raws[i] == nil {
			continue
		}
		id := uuid.NewString()
		res.Outcomes[i].ID = id
		routed[i] = scripts.Routed{Channel: r.keys.SlaveChannel(m.SlaveID), Message: encodeAt(id, from, term, m.Type, raws[i], sentAt)}
	}

	chunks := splitBatch(routed)
	for c, ch := range chunks {
		var err error
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case c > 0 && (!r.leader.IsMaster() || r.leader.Term() != term):
			// The election knows before Redis would tell: stop here.
			err = ErrNotMaster
		}
		if err != nil {
			markNotSent(res.Outcomes, ch.first, err)
			return res, fmt.Errorf("send batch: stopped before call %d of %d (messages %d to %d not sent): %w", c+1, len(chunks), ch.first, len(msgs)-1, err)
		}
		batch := make([]scripts.Routed, 0, len(ch.index))
		for _, i := range ch.index {
			batch = append(batch, routed[i])
		}
		counts, err := scripts.RouteBatch(ctx, r.client, r.keys, from, term, batch)
		res.Calls++
		if err != nil {
			if errors.Is(err, scripts.ErrFenced) { // it matches ErrNotMaster too
				markNotSent(res.Outcomes, ch.first, err)
			} else {
				for _, i := range ch.index {
					res.Outcomes[i].Err = err
				}
				markNotSent(res.Outcomes, ch.next, err)
			}
			return res, fmt.Errorf("send batch: call %d of %d (messages %d to %d): %w", c+1, len(chunks), ch.first, ch.next-1, err)
		}
		for j, i := range ch.index {
			if counts[j] == 0 {
				res.Outcomes[i].Err = &NoSubscriberError{SlaveID: msgs[i].SlaveID}
			}
		}
	}
	return res, nil
}

// checkOutgoing validates one message of a batch and encodes its payload.
func checkOutgoing(m Outgoing) (json.RawMessage, error) {
	if err := checkName("slave id", m.SlaveID); err != nil {
		return nil, err
	}
	if err := checkName("message type", m.Type); err != nil {
		return nil, err
	}
	return encodePayload(m.Payload)
}

// markNotSent gives every message from index from on that has no outcome
// yet (it was valid) an error matching ErrNotSent and reason.
func markNotSent(out []Outcome, from int, reason error) {
	err := fmt.Errorf("%w: %w", ErrNotSent, reason)
	for i := from; i < len(out); i++ {
		if out[i].Err == nil {
			out[i].Err = err
		}
	}
}

// chunk is one script call of a batch: the indexes of its messages in the
// batch, the first of them, and the index after the last.
type chunk struct {
	index       []int
	first, next int
}

// splitBatch groups the messages that have a channel (the valid ones) into
// consecutive chunks of at most MaxBatchChunk messages and
// MaxBatchChunkBytes bytes of envelopes (a single larger message goes
// alone).
func splitBatch(routed []scripts.Routed) []chunk {
	var chunks []chunk
	var cur chunk
	size := 0
	for i, m := range routed {
		if m.Channel == "" {
			continue
		}
		if len(cur.index) > 0 && (len(cur.index) == MaxBatchChunk || size+len(m.Message) > MaxBatchChunkBytes) {
			chunks = append(chunks, cur)
			cur, size = chunk{}, 0
		}
		if len(cur.index) == 0 {
			cur.first = i
		}
		cur.index = append(cur.index, i)
		cur.next = i + 1
		size += len(m.Message)
	}
	if len(cur.index) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks
}
