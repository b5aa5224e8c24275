package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/scripts"
)

// Bounds of one script call of Router.SendBatch, as for pubsub.SendBatch: a
// longer batch is split into calls of consecutive messages, each fenced on
// its own.
const (
	// MaxBatchChunk is the most messages one call adds.
	MaxBatchChunk = pubsub.MaxBatchChunk
	// MaxBatchChunkBytes is the most envelope bytes one call carries; a
	// message is never split.
	MaxBatchChunkBytes = pubsub.MaxBatchChunkBytes
)

// Router is the master's side of durable routing: it adds envelopes stamped
// with the current term to the slaves' inboxes, and moves a removed slave's
// entries to other slaves (Reassign). It starts no goroutine and keeps no
// connection of its own; it is safe for concurrent use.
type Router struct {
	client redis.UniversalClient
	leader pubsub.Leader
	slaves pubsub.SlaveLister
	cfg    Config
	keys   scripts.Keys
	now    func() time.Time

	backlog backlog // the predecessors' entries taken over, per term
	orphans orphans // inboxes the last sweep could not move: no slave
}

// NewRouter returns a Router writing through client on behalf of leader,
// taking the same arguments as pubsub.NewRouter: slaves lists the live
// slaves for Reassign (when nil and leader is a pubsub.SlaveLister, as
// *masterelection.MasterElection is, leader is used), and when leader is a
// pubsub.KeySource the inbox names come from it.
func NewRouter(client redis.UniversalClient, leader pubsub.Leader, slaves pubsub.SlaveLister, cfg Config) (*Router, error) {
	if nilclient.Is(client) {
		return nil, errors.New("durable: NewRouter: client is nil")
	}
	if leader == nil {
		return nil, errors.New("durable: NewRouter: leader is nil")
	}
	cfg, err := cfg.withDefaults(client, leader)
	if err != nil {
		return nil, err
	}
	if err := checkName("leader NodeID", leader.NodeID()); err != nil {
		return nil, err
	}
	if l, ok := leader.(pubsub.SlaveLister); ok && slaves == nil {
		slaves = l
	}
	return &Router{client: client, leader: leader, slaves: slaves, cfg: cfg, keys: cfg.keys(), now: time.Now}, nil
}

// Inbox returns the name of the inbox of slaveID.
func (r *Router) Inbox(slaveID string) string { return r.keys.Inbox(slaveID) }

// Send adds one message of type msgType to the inbox of slaveID, stamped
// with the current term, in one round trip: the inbox_send script adds it
// only while this process still holds the lock under that term (the fence
// of pubsub's route script). It returns the message's id. payload is
// encoded as pubsub.Router.Send encodes it.
//
// The first Send or SendBatch of a mastership first takes over what the
// predecessors stored in the inboxes (Router.Sweep's adoption, or its drop
// with Config.DropBacklog), so in each inbox the adopted entries come before
// this master's own; an error of that step is returned and nothing is sent.
//
// A nil error means Redis stored the message in the inbox: the slave will
// get it when it next reads, also after a restart, or another slave will
// when Reassign or a sweep moves it. It returns ErrNotMaster when this
// process is not master, an error matching both ErrNotMaster and
// scripts.ErrFenced when Redis's lock is not this process's under that term
// (nothing was added), ErrNotRegistered when slaveID is not a live process
// in the registry, ErrInboxFull when the inbox holds Config.MaxLen entries,
// and an error
// matching pubsub.ErrInvalidName, ErrInvalidPayload or ErrPayloadTooLarge
// for bad input. On any other error (a timeout, a lost connection) the
// message may or may not have been added.
func (r *Router) Send(ctx context.Context, slaveID, msgType string, payload any) (string, error) {
	if err := checkName("slave id", slaveID); err != nil {
		return "", err
	}
	term, err := r.term()
	if err != nil {
		return "", err
	}
	id, data, err := envelope(r.leader.NodeID(), term, msgType, payload, r.now())
	if err != nil {
		return "", err
	}
	ids, err := r.send(ctx, term, []scripts.Queued{{Inbox: r.keys.Inbox(slaveID), Message: data}})
	if err != nil {
		return "", fmt.Errorf("send to slave %q: %w", slaveID, err)
	}
	if err := r.refused(slaveID, ids[0]); err != nil {
		return "", err
	}
	return id, nil
}

// refused turns the entry id inbox_send returned for a message to slaveID
// into the error of a message it did not add, or nil.
func (r *Router) refused(slaveID, entryID string) error {
	switch entryID {
	case scripts.SentFull:
		return fmt.Errorf("send to slave %q: %w (%d entries)", slaveID, ErrInboxFull, r.cfg.MaxLen)
	case scripts.SentNotLive:
		return fmt.Errorf("send to slave %q: %w", slaveID, ErrNotRegistered)
	}
	return nil
}

// term returns this process's live term, or ErrNotMaster.
func (r *Router) term() (int64, error) {
	if !r.leader.IsMaster() {
		return 0, ErrNotMaster
	}
	term := r.leader.Term()
	if term <= 0 {
		return 0, ErrNotMaster
	}
	return term, nil
}

// send runs the inbox_send script, after the mastership's takeover of its
// predecessors' entries; a fenced call's scripts.ErrFenced matches
// ErrNotMaster too.
func (r *Router) send(ctx context.Context, term int64, msgs []scripts.Queued) ([]string, error) {
	if err := r.takeOver(ctx, term); err != nil {
		return nil, err
	}
	ids, err := scripts.InboxSend(ctx, r.client, r.keys, r.leader.NodeID(), term, r.cfg.MaxLen, msgs)
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Outcome is what became of one message of Router.SendBatch.
type Outcome struct {
	// ID is the message's id; "" when it was refused as invalid or
	// SendBatch stopped before stamping it.
	ID string
	// Err is nil when Redis stored the message in the slave's inbox.
	// Otherwise it matches ErrInboxFull or ErrNotRegistered (not added), pubsub.ErrInvalidName,
	// ErrInvalidPayload or ErrPayloadTooLarge (refused before anything was
	// sent), ErrNotSent (certainly not added; it wraps why the batch
	// stopped), or it is the error of the call that carried the message
	// (which may or may not have run on the server).
	Err error
}

// BatchResult is the outcome of Router.SendBatch, message by message.
type BatchResult struct {
	// Term is the term stamped on every message; 0 when nothing was stamped.
	Term int64
	// Outcomes has one entry per message, in the order of the batch.
	Outcomes []Outcome
	// Calls is the number of script calls made, each one round trip.
	Calls int
}

// Stored returns the number of messages Redis stored.
func (b BatchResult) Stored() int {
	n := 0
	for _, o := range b.Outcomes {
		if o.Err == nil && o.ID != "" {
			n++
		}
	}
	return n
}

// Err joins the errors of the messages that were not stored, each prefixed
// with its index in the batch; nil when all were stored.
func (b BatchResult) Err() error {
	var errs []error
	for i, o := range b.Outcomes {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("message %d: %w", i, o.Err))
		}
	}
	return errors.Join(errs...)
}

// SendBatch adds msgs to the slaves' inboxes, each with its own id, all
// stamped with the term read when it begins, one round trip and one fencing
// check per call of up to MaxBatchChunk messages and MaxBatchChunkBytes
// bytes, as pubsub.Router.SendBatch does. Each call adds its messages in one
// atomic step, so a slave reads its messages in the order of msgs.
//
// Invalid messages are refused one by one before anything is sent. The
// error is nil when every call was made and answered (check the outcomes,
// or BatchResult.Err); otherwise it says why the batch stopped:
// ErrNotMaster (nothing more sent), an error matching ErrNotMaster and
// scripts.ErrFenced, or the error of a call or of ctx. The messages after
// the call that stopped it match ErrNotSent.
func (r *Router) SendBatch(ctx context.Context, msgs []pubsub.Outgoing) (BatchResult, error) {
	res := BatchResult{Outcomes: make([]Outcome, len(msgs))}
	term, err := r.term()
	if err != nil {
		for i := range res.Outcomes {
			res.Outcomes[i].Err = fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return res, err
	}
	res.Term = term
	from, now := r.leader.NodeID(), r.now()
	var chunk []scripts.Queued
	var idx []int
	size := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		defer func() { chunk, idx, size = chunk[:0], idx[:0], 0 }()
		if err := ctx.Err(); err != nil {
			return err
		}
		if !r.leader.IsMaster() || r.leader.Term() != term {
			return ErrNotMaster
		}
		res.Calls++
		ids, err := r.send(ctx, term, chunk)
		if err != nil {
			for _, i := range idx {
				res.Outcomes[i].Err = err
			}
			return err
		}
		for j, i := range idx {
			res.Outcomes[i].Err = r.refused(msgs[i].SlaveID, ids[j])
		}
		return nil
	}
	stop := func(from int, err error) (BatchResult, error) {
		for i := from; i < len(msgs); i++ {
			if res.Outcomes[i].Err == nil {
				res.Outcomes[i].Err = fmt.Errorf("%w: %w", ErrNotSent, err)
			}
		}
		return res, err
	}
	for i, m := range msgs {
		if err := checkName("slave id", m.SlaveID); err != nil {
			res.Outcomes[i].Err = err
			continue
		}
		id, data, err := envelope(from, term, m.Type, m.Payload, now)
		if err != nil {
			res.Outcomes[i].Err = err
			continue
		}
		if len(chunk) == MaxBatchChunk || (len(chunk) > 0 && size+len(data) > MaxBatchChunkBytes) {
			first := idx[0]
			if err := flush(); err != nil {
				return stop(first, err)
			}
		}
		res.Outcomes[i].ID = id
		chunk = append(chunk, scripts.Queued{Inbox: r.keys.Inbox(m.SlaveID), Message: data})
		idx = append(idx, i)
		size += len(data)
	}
	if len(idx) > 0 {
		first := idx[0]
		if err := flush(); err != nil {
			return stop(first, err)
		}
	}
	return res, nil
}
