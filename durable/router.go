package durable

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/registry"
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
	client     redis.UniversalClient
	mastership pubsub.Mastership
	slaves     pubsub.SlaveLister
	cfg        Config
	keys       keyspace.Keys

	backlog backlog // the predecessors' entries taken over, per term
	orphans orphans // inboxes the last sweep could not move: no slave
	waits   waits   // inboxes of processes gone, left in place for their grace
}

// NewRouter returns a Router writing through client on behalf of mastership,
// taking the same arguments as pubsub.NewRouter: slaves lists the live
// slaves for Reassign (when nil and mastership is a pubsub.SlaveLister, as
// *masterelection.MasterElection is, mastership is used), and when mastership is a
// pubsub.KeySource the inbox names come from it.
func NewRouter(client redis.UniversalClient, mastership pubsub.Mastership, slaves pubsub.SlaveLister, cfg Config) (*Router, error) {
	if err := route.CheckMastership("durable: NewRouter", client, mastership); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(client, mastership)
	if err != nil {
		return nil, err
	}
	if l, ok := mastership.(pubsub.SlaveLister); ok && slaves == nil {
		slaves = l
	}
	return &Router{client: client, mastership: mastership, slaves: slaves, cfg: cfg, keys: cfg.keys(),
		backlog: backlog{turn: make(chan struct{}, 1)}}, nil
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
// keyspace.ErrFenced when Redis's lock is not this process's under that term
// (nothing was added), ErrNotRegistered when slaveID is not a live process
// in the registry, ErrMasterInbox when slaveID is this process (the
// master's inbox is moved to the slaves), ErrInboxFull when the inbox
// holds Config.MaxLen entries,
// and an error
// matching pubsub.ErrInvalidName, ErrInvalidPayload or ErrPayloadTooLarge
// for bad input. On any other error (a timeout, a lost connection) the
// message may or may not have been added.
func (r *Router) Send(ctx context.Context, slaveID, msgType string, payload any) (string, error) {
	if err := route.CheckName("slave id", slaveID); err != nil {
		return "", err
	}
	env, err := route.Stamp(r.mastership, msgType, payload, r.cfg.clock.Now())
	if err != nil {
		return "", err
	}
	errs, err := r.store(ctx, env.Term, []route.Item{{SlaveID: slaveID, Data: env.Data}})
	if err != nil {
		return "", fmt.Errorf("send to slave %q: %w", slaveID, err)
	}
	if errs[0] != nil {
		return "", errs[0]
	}
	return env.ID, nil
}

// store is one call of Send and SendBatch: after the mastership's takeover
// of its predecessors' entries, the inbox_send script adds items to their
// slaves' inboxes while this process holds the lock under term (a fenced
// call's keyspace.ErrFenced matches ErrNotMaster too). An item it did not
// add gets ErrInboxFull or ErrNotRegistered; one for this process itself,
// ErrMasterInbox, and is not sent.
func (r *Router) store(ctx context.Context, term int64, items []route.Item) ([]error, error) {
	if err := r.takeOver(ctx, term); err != nil {
		return nil, err
	}
	errs := make([]error, len(items))
	queued, at := r.queue(items, errs)
	ids, err := rdb.InboxSend(ctx, r.client, r.keys, r.mastership.NodeID(), term, r.cfg.MaxLen, r.deadlines(), queued)
	if err != nil {
		return nil, err
	}
	for q, id := range ids {
		errs[at[q]] = r.refused(items[at[q]].SlaveID, id)
	}
	return errs, nil
}

// deadlines tells whether the inbox scripts (inbox_send, and the sweep's
// inbox_adopt, so that the two agree on who is live) are to check the
// registry's deadlines (Keys.ProcessesExpiry) to tell a live process:
// unless the mastership's registry is known to use a backend whose entries
// Redis expires itself (native, hpexpire), as the registry's own reads then
// do not check them either. It saves each send a command there.
func (r *Router) deadlines() bool {
	src, ok := r.mastership.(registrySource)
	if !ok {
		return true
	}
	reg := src.Registry()
	return reg == nil || reg.Backend() == registry.BackendEmulated
}

// registrySource is a mastership that has a process registry, as
// *masterelection.MasterElection does after Start.
type registrySource interface {
	Registry() *registry.Registry
}

// queue returns the messages of items inbox_send is to add, with the index
// in items of each; an item for this process itself is not queued, and
// gets ErrMasterInbox in errs.
func (r *Router) queue(items []route.Item, errs []error) ([]rdb.Queued, []int) {
	queued := make([]rdb.Queued, 0, len(items))
	at := make([]int, 0, len(items))
	for j, it := range items {
		if it.SlaveID == r.mastership.NodeID() {
			errs[j] = fmt.Errorf("send to slave %q: %w", it.SlaveID, ErrMasterInbox)
			continue
		}
		queued = append(queued, rdb.Queued{Inbox: r.keys.Inbox(it.SlaveID), Message: it.Data})
		at = append(at, j)
	}
	return queued, at
}

// refused is the error of a message to slaveID that inbox_send answered
// with id: ErrInboxFull or ErrNotRegistered when it was not added, nil
// when id is its new entry's.
func (r *Router) refused(slaveID, id string) error {
	switch id {
	case rdb.SentFull:
		return fmt.Errorf("send to slave %q: %w (%d entries)", slaveID, ErrInboxFull, r.cfg.MaxLen)
	case rdb.SentNotLive:
		return fmt.Errorf("send to slave %q: %w", slaveID, ErrNotRegistered)
	}
	return nil
}

// Outcome is what became of one message of Router.SendBatch: pubsub's,
// with durable's meaning. ID is the message's id; "" when it was refused as
// invalid or SendBatch stopped before stamping it. Err is nil when Redis
// stored the message in the slave's inbox. Otherwise it matches
// ErrInboxFull, ErrNotRegistered or ErrMasterInbox (not added), pubsub.ErrInvalidName,
// ErrInvalidPayload or ErrPayloadTooLarge (refused before anything was
// sent), ErrNotSent (certainly not added; it wraps why the batch stopped),
// or it is the error of the call that carried the message (which may or
// may not have run on the server).
type Outcome = pubsub.Outcome

// BatchResult is the outcome of Router.SendBatch, message by message: Term
// is the term stamped on every message (0 when nothing was stamped),
// Outcomes has one entry per message in the order of the batch, and Calls
// is the number of script calls made, each one round trip.
type BatchResult pubsub.BatchResult

// Stored returns the number of messages Redis stored.
func (b BatchResult) Stored() int { return pubsub.BatchResult(b).Delivered() }

// Err joins the errors of the messages that were not stored, each prefixed
// with its index in the batch; nil when all were stored.
func (b BatchResult) Err() error { return pubsub.BatchResult(b).Err() }

// SendBatch adds msgs to the slaves' inboxes, each with its own id, all
// stamped with the term read when it begins, one round trip and one fencing
// check per call of up to MaxBatchChunk messages and MaxBatchChunkBytes
// bytes, as pubsub.Router.SendBatch does (the same core sends both). Each
// call adds its messages in one atomic step, so a slave reads its messages
// in the order of msgs; the first call of a mastership first takes over
// the predecessors' entries, as Send does.
//
// Invalid messages are refused one by one before anything is sent, and
// the others go. The error is nil when every call was made and answered
// (check the outcomes, or BatchResult.Err), and when no message is valid;
// otherwise it says why the batch stopped: ErrNotMaster (not master at the
// start, or the mastership ended or changed term between two calls), an
// error matching ErrNotMaster and keyspace.ErrFenced, or the error of a call
// or of ctx. The messages of the calls before were added (their outcomes
// say whether to a full inbox or a process gone); those after the call
// that stopped it match ErrNotSent, and so do those of that call when it
// was fenced or never made; otherwise their Err is the call's error.
func (r *Router) SendBatch(ctx context.Context, msgs []pubsub.Outgoing) (BatchResult, error) {
	b := route.NewBatch(len(msgs))
	for _, m := range msgs {
		b.Add(m.SlaveID, m.Type, m.Payload)
	}
	err := b.Send(ctx, r.mastership, r.cfg.clock.Now(), r.store)
	res := BatchResult{Term: b.Term, Outcomes: make([]Outcome, len(msgs)), Calls: b.Calls}
	for i := range res.Outcomes {
		res.Outcomes[i] = Outcome{ID: b.IDs[i], Err: b.Errs[i]}
	}
	return res, err
}
