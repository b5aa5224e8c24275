package pubsub

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// Leader is what the Router needs to know about this process's mastership.
// *masterelection.MasterElection implements it. Implementations must be safe
// for concurrent use.
type Leader interface {
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
	client redis.UniversalClient
	leader Leader
	slaves SlaveLister
	cfg    Config
	keys   scripts.Keys // cfg.keys(), built once, not on every Send
	obs    observers    // Observe (observe.go)
}

// NewRouter returns a Router publishing through client on behalf of leader.
// slaves is used by Broadcast only; when it is nil and leader is also a
// SlaveLister (as *masterelection.MasterElection is), leader is used. When
// leader is a KeySource (the election is), the channel names come from it:
// NewRouter(client, election, nil, pubsub.Config{}) is all it takes.
func NewRouter(client redis.UniversalClient, leader Leader, slaves SlaveLister, cfg Config) (*Router, error) {
	if err := route.CheckLeader("pubsub: NewRouter", client, leader); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(client, leader)
	if err != nil {
		return nil, err
	}
	if l, ok := leader.(SlaveLister); ok && slaves == nil {
		slaves = l
	}
	return &Router{client: client, leader: leader, slaves: slaves, cfg: cfg, keys: cfg.keys()}, nil
}

// Send publishes one message of type msgType to the channel of slaveID,
// stamped with the current term, in one round trip: the route script
// publishes only while this process still holds the lock under that term
// (send-side fencing; receivers fence again by term). payload is encoded as
// described on Message: json.RawMessage as it is, anything else through
// json.Marshal.
//
// It returns ErrNotMaster when this process is not master (IsMaster is false
// or Term is 0), an error matching both ErrNotMaster and scripts.ErrFenced
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
	env, err := route.Stamp(r.leader, msgType, payload, r.cfg.clock.Now())
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
	// A refusal is scripts.ErrFenced, which matches ErrNotMaster too.
	return scripts.Route(ctx, r.client, r.keys, r.leader.NodeID(), env.Term, env.Data, channels...)
}

// Broadcast sends one message (one id, one term) to every live slave the
// SlaveLister returns, except this process, in one round trip through the
// route script (fenced like Send).
// delivered counts the slaves whose PUBLISH reached a subscriber. err joins
// a *NoSubscriberError for each slave that had none (list them with
// NoSubscribers), an ErrInvalidName error for each listed id that cannot be
// a channel name, and the error of the script call. It is ErrNotMaster, and
// nothing is sent, when this process is not master before or after listing
// the slaves; and it matches both ErrNotMaster and scripts.ErrFenced, with
// nothing sent, when the route script finds that the lock is no longer this
// process's under that term.
func (r *Router) Broadcast(ctx context.Context, msgType string, payload any) (delivered int, err error) {
	defer func() { r.obs.broadcast(delivered, err) }()
	if r.slaves == nil {
		return 0, errors.New("pubsub: Broadcast: the Router has no SlaveLister")
	}
	env, err := route.Stamp(r.leader, msgType, payload, r.cfg.clock.Now())
	if err != nil {
		return 0, err
	}
	nodes, err := r.slaves.Slaves(ctx)
	if err != nil {
		return 0, fmt.Errorf("list slaves: %w", err)
	}
	// Listing took a round trip: do not publish for a mastership that ended meanwhile.
	if !r.leader.IsMaster() || r.leader.Term() != env.Term {
		return 0, ErrNotMaster
	}
	self := r.leader.NodeID()
	seen := make(map[string]bool, len(nodes))
	var ids []string
	var errs []error
	for _, n := range nodes {
		if n.NodeID == self || seen[n.NodeID] {
			continue
		}
		seen[n.NodeID] = true
		if err := route.CheckName("slave id", n.NodeID); err != nil {
			errs = append(errs, err)
			continue
		}
		ids = append(ids, n.NodeID)
	}
	if len(ids) == 0 {
		return 0, errors.Join(errs...)
	}
	channels := make([]string, len(ids))
	for i, id := range ids {
		channels[i] = r.keys.SlaveChannel(id)
	}
	counts, err := r.route(ctx, env, channels...)
	if err != nil {
		return 0, errors.Join(append(errs, fmt.Errorf("broadcast: %w", err))...)
	}
	for i, n := range counts {
		if n == 0 {
			errs = append(errs, &NoSubscriberError{SlaveID: ids[i]})
		} else {
			delivered++
		}
	}
	return delivered, errors.Join(errs...)
}
