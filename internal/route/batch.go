package route

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/herdkit/herd/keyspace"
)

// Bounds of one script call of a batch (pubsub.MaxBatchChunk and
// MaxBatchChunkBytes), and of a fan-out (Fanout, for Broadcast). A longer
// batch is split into calls of consecutive messages, each call fenced on
// its own.
const (
	// MaxChunk is the most messages one call carries. The script holds the
	// Redis server for the whole call, so the bound also bounds how long
	// other clients wait behind it.
	MaxChunk = 128
	// MaxChunkBytes is the most envelope bytes one call carries: 1 MiB. A
	// message is never split, so a call whose first message alone is
	// larger carries that message only.
	MaxChunkBytes = 1 << 20
)

// Item is one stamped message of a batch, as a Call carries it.
type Item struct {
	// SlaveID is the process the message goes to.
	SlaveID string
	// Data is its envelope.
	Data []byte
}

// Call makes one script call that carries items, in order, under term,
// fenced: the script acts only while this process holds the lock under
// term. It returns one error per item (nil: Redis took the message), or the
// error of the call, which matches keyspace.ErrFenced when the script
// refused for the fence.
type Call func(ctx context.Context, term int64, items []Item) ([]error, error)

// Batch is one batch of messages on its way: Add each message, then Send;
// or one envelope to many slaves, sent by Fanout. IDs, Errs, Term and Calls
// hold the outcome, message by message, for the transport's BatchResult.
// It is not safe for concurrent use.
type Batch struct {
	// Term is the term stamped on every message; 0 when nothing was stamped.
	Term int64
	// IDs[i] is message i's id; "" when it was refused or never stamped.
	IDs []string
	// Errs[i] is message i's error: nil when Redis took it; an error
	// matching ErrInvalidName, ErrInvalidPayload or ErrPayloadTooLarge when
	// it was refused before anything was sent; one matching ErrNotSent (and
	// wrapping the reason) when it certainly was not sent; what its Call returned for it; or the error of the call
	// that carried it, which may or may not have run on the server.
	Errs []error
	// Calls is the number of script calls made, each one round trip.
	Calls int

	msgs []outgoing
}

// outgoing is one message as Add validated it.
type outgoing struct {
	slaveID, msgType string
	payload          json.RawMessage // nil when refused
}

// NewBatch returns an empty Batch with room for n messages.
func NewBatch(n int) *Batch {
	return &Batch{IDs: make([]string, 0, n), Errs: make([]error, 0, n), msgs: make([]outgoing, 0, n)}
}

// Add appends one message to slaveID, validating its names and encoding
// its payload (as Stamp does); an invalid message is refused with its own
// error and the others still go.
func (b *Batch) Add(slaveID, msgType string, payload any) {
	m := outgoing{slaveID: slaveID, msgType: msgType}
	err := CheckName("slave id", slaveID)
	if err == nil {
		err = CheckName("message type", msgType)
	}
	if err == nil {
		m.payload, err = EncodePayload(payload)
	}
	if err != nil {
		err = fmt.Errorf("to slave %q: %w", slaveID, err)
	}
	b.msgs = append(b.msgs, m)
	b.IDs = append(b.IDs, "")
	b.Errs = append(b.Errs, err)
}

// Send stamps the valid messages with their own ids and l's live term,
// read once, and hands them to call in chunks of consecutive messages of at
// most MaxChunk messages and MaxChunkBytes bytes, in order.
//
// It returns nil when every call was made and answered, or when no message
// is valid (no call, master or not). Otherwise it says why the batch
// stopped: ErrNotMaster when l is not master at the start (nothing is
// sent), or reports between two calls that the mastership is over or has a
// new term; the error of a call (matching keyspace.ErrFenced when fenced);
// or ctx's. The messages of the calls before were sent; those after it are
// marked with an error matching ErrNotSent and the reason; those of the failed
// call too when it was fenced or never made, and otherwise get the call's
// error (their outcome is unknown).
func (b *Batch) Send(ctx context.Context, l Mastership, now time.Time, call Call) error {
	items, valid := b.addressed()
	if valid == 0 {
		return nil
	}
	term, err := LiveTerm(l)
	if err != nil {
		b.stop(0, err)
		return err
	}
	b.Term = term
	b.stamp(items, l.NodeID(), sentAtText(now))
	return b.run(ctx, l, items, call, "send batch", "messages")
}

// addressed returns one item per message, its SlaveID set for each valid
// one (no error yet), and how many are valid.
func (b *Batch) addressed() (items []Item, valid int) {
	items = make([]Item, len(b.msgs))
	for i, m := range b.msgs {
		if b.Errs[i] == nil {
			items[i].SlaveID = m.slaveID
			valid++
		}
	}
	return items, valid
}

// stamp gives each valid message a fresh id and encodes its envelope
// from from under b.Term, sent at sentAt (sentAtText), into its item.
func (b *Batch) stamp(items []Item, from string, sentAt []byte) {
	for i, m := range b.msgs {
		if b.Errs[i] == nil {
			b.IDs[i] = uuid.NewString()
			items[i].Data = encodeAt(b.IDs[i], from, b.Term, m.msgType, m.payload, sentAt)
		}
	}
}

// Fanout sends env, one envelope stamped by Stamp, to each of slaveIDs
// through call, in the chunks and with the stops of Send: each call carries
// consecutive slaves, at most MaxChunk of them and at most MaxChunkBytes
// bytes of envelopes counted once per slave (what the call publishes; a
// slave alone when env is larger), and is fenced under env.Term. l is
// checked between calls only: the caller checks it before Fanout.
//
// The Batch has one entry per slave id, in order: IDs[i] is env.ID, or ""
// when the id cannot be a channel name, and Errs[i] is nil when Redis took
// the message, an ErrInvalidName error for such an id, or what Send gives a
// message. The error is what Send returns, naming slaves instead of
// messages; nil without a call when no id is valid.
func Fanout(ctx context.Context, l Mastership, env Envelope, slaveIDs []string, call Call) (*Batch, error) {
	b := NewBatch(len(slaveIDs))
	b.Term = env.Term
	items := make([]Item, len(slaveIDs))
	for i, id := range slaveIDs {
		err := CheckName("slave id", id)
		b.msgs = append(b.msgs, outgoing{slaveID: id})
		b.IDs = append(b.IDs, "")
		b.Errs = append(b.Errs, err)
		if err == nil {
			b.IDs[i] = env.ID
			items[i] = Item{SlaveID: id, Data: env.Data}
		}
	}
	return b, b.run(ctx, l, items, call, "fan out", "slaves")
}

// run hands the stamped items (those with Data) to call in chunks (split),
// in order, under b.Term, as Send describes; what names the operation and
// unit the items in its errors.
func (b *Batch) run(ctx context.Context, l Mastership, items []Item, call Call, what, unit string) error {
	chunks := split(items)
	for c, ch := range chunks {
		if err := b.interrupted(ctx, l, c); err != nil {
			b.stop(ch.first, err)
			return fmt.Errorf("%s: stopped before call %d of %d (%s %d to %d not sent): %w", what, c+1, len(chunks), unit, ch.first, len(items)-1, err)
		}
		errs, err := call(ctx, b.Term, ch.of(items))
		b.Calls++
		if err != nil {
			b.failed(ch, err)
			return fmt.Errorf("%s: call %d of %d (%s %d to %d): %w", what, c+1, len(chunks), unit, ch.first, ch.next-1, err)
		}
		for j, i := range ch.index {
			b.Errs[i] = errs[j]
		}
	}
	return nil
}

// interrupted says why call c of the batch must not be made: ctx's error,
// or ErrNotMaster when, after the first call, l is no longer master under
// b.Term (the election knows before Redis would tell); nil to go on.
func (b *Batch) interrupted(ctx context.Context, l Mastership, c int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c > 0 && (!l.IsMaster() || l.Term() != b.Term) {
		return ErrNotMaster
	}
	return nil
}

// failed records the error of ch's call: fenced, nothing of it was sent;
// otherwise its messages' outcome is unknown and they get err. The
// messages after it were not sent.
func (b *Batch) failed(ch chunk, err error) {
	if errors.Is(err, keyspace.ErrFenced) { // it matches ErrNotMaster too
		b.stop(ch.first, err)
		return
	}
	for _, i := range ch.index {
		b.Errs[i] = err
	}
	b.stop(ch.next, err)
}

// stop gives every message from index from on that has no error yet (it
// was valid) an error matching ErrNotSent and reason.
func (b *Batch) stop(from int, reason error) {
	err := fmt.Errorf("%w: %w", ErrNotSent, reason)
	for i := from; i < len(b.Errs); i++ {
		if b.Errs[i] == nil {
			b.Errs[i] = err
		}
	}
}

// chunk is one script call of a batch: the indexes of its messages in the
// batch, the first of them, the index after the last, and the bytes of
// their envelopes.
type chunk struct {
	index       []int
	first, next int
	size        int
}

// split groups the stamped messages (those with Data) into consecutive
// chunks of at most MaxChunk messages and MaxChunkBytes bytes of envelopes
// (a single larger message goes alone).
func split(items []Item) []chunk {
	var chunks []chunk
	cur := chunk{}
	for i, it := range items {
		if it.Data == nil {
			continue
		}
		if !cur.fits(len(it.Data)) {
			chunks = append(chunks, cur)
			cur = chunk{}
		}
		cur.add(i, len(it.Data))
	}
	if len(cur.index) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks
}

// fits reports whether a message of n bytes may join ch: ch is empty, or
// stays within MaxChunk messages and MaxChunkBytes bytes with it.
func (ch *chunk) fits(n int) bool {
	return len(ch.index) == 0 || len(ch.index) < MaxChunk && ch.size+n <= MaxChunkBytes
}

// add puts message i, of n bytes, at the end of ch.
func (ch *chunk) add(i, n int) {
	if len(ch.index) == 0 {
		ch.first = i
	}
	ch.index = append(ch.index, i)
	ch.next = i + 1
	ch.size += n
}

// of returns the items ch carries, in order.
func (ch chunk) of(items []Item) []Item {
	carried := make([]Item, 0, len(ch.index))
	for _, i := range ch.index {
		carried = append(carried, items[i])
	}
	return carried
}
