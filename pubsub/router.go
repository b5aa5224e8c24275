package pubsub

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// Mastership is what the Router needs to know about this process's mastership.
// *masterelection.MasterElection implements it. Implementations must be safe
// for concurrent use.
type Mastership interface {
	// NodeID is this process's node id; it is the envelope's "from".
	NodeID() string
	// IsMaster reports whether this process holds the master lock.
	IsMaster() bool
	// Term is the fencing term of the current mastership, or 0 when this
	// process is not master (or no longer sure it is).
	Term() int64
}

// SlaveLister lists the live slaves for Router.Broadcast.
// *registry.Registry implements it.
type SlaveLister interface {
	Slaves(ctx context.Context) ([]registry.SlaveNode, error)
}

// Router is the master's side of routing: it publishes envelopes stamped with
// the current term to the slaves' channels. It starts no goroutine and keeps
// no connection of its own; it is safe for concurrent use.
type Router struct {
	client     redis.UniversalClient
	mastership Mastership
	slaves     SlaveLister
	cfg        Config
	keys       keyspace.Keys // cfg.keys(), built once, not on every Send
	obs        observers     // Observe (observe.go)
}

// NewRouter returns a Router publishing through client on behalf of mastership.
// slaves is used by Broadcast only; when it is nil and mastership is also a
// SlaveLister (as *masterelection.MasterElection is), mastership is used. When
// mastership is a KeySource (the election is), the channel names come from it:
// NewRouter(client, election, nil, pubsub.Config{}) is all it takes.
func NewRouter(client redis.UniversalClient, mastership Mastership, slaves SlaveLister, cfg Config) (*Router, error) {
	if err := route.CheckMastership("pubsub: NewRouter", client, mastership); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(client, mastership)
	if err != nil {
		return nil, err
	}
	if l, ok := mastership.(SlaveLister); ok && slaves == nil {
		slaves = l
	}
	return &Router{client: client, mastership: mastership, slaves: slaves, cfg: cfg, keys: cfg.keys()}, nil
}

// Send publishes one message of type msgType to the channel of slaveID,
// stamped with the current term, in one round trip: the route script
// publishes only while this process still holds the lock under that term
// (send-side fencing; receivers fence again by term). payload is encoded as
// described on Message: json.RawMessage as it is, anything else through
// json.Marshal.
//
// It returns ErrNotMaster when this process is not master (IsMaster is false
// or Term is 0), an error matching both ErrNotMaster and keyspace.ErrFenced
// when Redis's lock is not this process's under that term (nothing was
// published), a *NoSubscriberError (errors.Is ErrNoSubscriber) when no
// process is subscribed to the channel, and an error matching
// ErrInvalidName, ErrInvalidPayload or ErrPayloadTooLarge for bad input. A
// nil error means Redis handed the message to at least one subscriber's
// connection; it does not mean the slave processed it.
func (r *Router) Send(ctx context.Context, slaveID, msgType string, payload any) (err error) {
	defer func() { r.obs.sent(err) }()
	if err := route.CheckName("slave id", slaveID); err != nil {
		return err
	}
	env, err := route.Stamp(r.mastership, msgType, payload, r.cfg.clock.Now())
	if err != nil {
		return err
	}
	counts, err := r.route(ctx, env, r.keys.SlaveChannel(slaveID))
	if err != nil {
		return fmt.Errorf("send to slave %q: %w", slaveID, err)
	}
	if counts[0] == 0 {
		return &NoSubscriberError{SlaveID: slaveID}
	}
	return nil
}

// route publishes env through the route script, which refuses when this
// process no longer holds the lock under env's term: the check and the
// PUBLISH are one atomic step on the server, in one round trip.
func (r *Router) route(ctx context.Context, env route.Envelope, channels ...string) ([]int64, error) {
	// A refusal is keyspace.ErrFenced, which matches ErrNotMaster too.
	return rdb.Route(ctx, r.client, r.keys, r.mastership.NodeID(), env.Term, env.Data, channels...)
}

// Broadcast sends one message (one id, one term) to every live slave the
// SlaveLister returns, except this process, through the route script,
// fenced like Send. The slaves go out in calls of consecutive slaves made
// one after another, each one round trip and fenced on its own under the
// term, of at most MaxBatchChunk (128) slaves and MaxBatchChunkBytes
// (1 MiB) of envelopes counted once per slave (a slave alone when the
// envelope is larger): no script runs more than 128 PUBLISHes, and Redis
// serves other clients between calls. Up to 8 KiB of envelope, n slaves
// take ceil(n/128) calls.
//
// delivered counts the slaves whose PUBLISH reached a subscriber. err joins
// one error for each other listed slave: a *NoSubscriberError when nobody
// was subscribed (list them with NoSubscribers), an ErrInvalidName error
// when its id cannot be a channel name, one matching ErrNotSent (and why)
// when it was certainly not sent, or the error of the call that carried it
// (a network error, a timeout: it may or may not have been published).
//
// It is ErrNotMaster, and nothing is sent, when this process is not master
// before or after listing the slaves. When the mastership ends part way, the
// calls before were published and the slaves of the rest were not: their
// errors match ErrNotSent and ErrNotMaster, with keyspace.ErrFenced too when
// the route script refused a call because the lock is no longer this
// process's under the term (the first call refused: nothing is sent), and
// without it when the election reported the end between calls. A cancelled
// ctx stops it the same way.
func (r *Router) Broadcast(ctx context.Context, msgType string, payload any) (delivered int, err error) {
	defer func() { r.obs.broadcast(delivered, err) }()
	if r.slaves == nil {
		return 0, errors.New("pubsub: Broadcast: the Router has no SlaveLister")
	}
	env, err := route.Stamp(r.mastership, msgType, payload, r.cfg.clock.Now())
	if err != nil {
		return 0, err
	}
	nodes, err := r.slaves.Slaves(ctx)
	if err != nil {
		return 0, fmt.Errorf("list slaves: %w", err)
	}
	// Listing took a round trip: do not publish for a mastership that ended meanwhile.
	if !r.mastership.IsMaster() || r.mastership.Term() != env.Term {
		return 0, ErrNotMaster
	}
	self := r.mastership.NodeID()
	seen := make(map[string]bool, len(nodes))
	ids := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n.NodeID == self || seen[n.NodeID] {
			continue
		}
		seen[n.NodeID] = true
		ids = append(ids, n.NodeID)
	}
	// One call: route.lua publishes env to the channels of items' slaves
	// (every item carries env.Data) while the lock is this process's under
	// env.Term.
	call := func(ctx context.Context, _ int64, items []route.Item) ([]error, error) {
		channels := make([]string, len(items))
		for j, it := range items {
			channels[j] = r.keys.SlaveChannel(it.SlaveID)
		}
		counts, err := r.route(ctx, env, channels...)
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
	// Its error says at which call it stopped; the slaves' errors below say
	// which were not sent, and why.
	b, _ := route.Fanout(ctx, r.mastership, env, ids, call)
	var errs []error
	for i, e := range b.Errs {
		var nse *NoSubscriberError
		switch {
		case e == nil:
			delivered++
		case b.IDs[i] == "", errors.As(e, &nse): // an invalid id, or nobody subscribed
			errs = append(errs, e)
		default:
			errs = append(errs, fmt.Errorf("broadcast to slave %q: %w", ids[i], e))
		}
	}
	return delivered, errors.Join(errs...)
}
