package pubsub

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
)

// Subscriber is a slave's side of routing: it receives the messages routed
// to its own channel, rejects those from superseded masters, and hands the
// others to handlers, in order. It also sends reports to the master.
//
// It listens to its channel and to the election's events channel on ONE
// connection, so a takeover notice and the messages around it arrive in the
// order Redis executed the PUBLISH commands. A term on a message or notice
// is believed only when Redis confirms it: a term above every term the
// Subscriber has verified costs one GET of the term key (then none for the
// next messages of that term), and is refused (*UnverifiedTermError) when
// the key holds less. Its only goroutine is the loop started by Start and
// stopped (and waited for) by Close. All methods are safe for concurrent
// use.
type Subscriber struct {
	client    redis.UniversalClient
	processID string
	channel   string
	keys      keyspace.Keys
	cfg       Config
	mux       route.Mux[Message] // its Stacks set: a panic is reported with its stack
	recv      receiver

	fence      *route.Fence  // the highest term seen, and its verification
	rejected   atomic.Uint64 // messages rejected for a stale term
	unverified atomic.Uint64 // messages and notices refused for an unverified term
	notHeld    atomic.Uint64 // messages dropped while Config.Holds said no
}

// NewSubscriber returns a Subscriber for the process processID (its node id),
// listening on cfg.SlaveChannel(processID). It does not touch Redis until
// Start.
func NewSubscriber(client redis.UniversalClient, processID string, cfg Config) (*Subscriber, error) {
	if err := route.CheckNode("pubsub: NewSubscriber", client, processID); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(client, cfg.Terms)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{client: client, processID: processID, channel: cfg.SlaveChannel(processID), keys: cfg.keys(), cfg: cfg}
	s.mux.Stacks = true
	s.fence = route.NewFence(client, s.keys.Term, cfg.Terms, cfg.OpTimeout)
	s.recv = receiver{
		client: client,
		// The events channel comes first: under Redis Cluster the shared
		// connection (internal/subhub) is the one of the first channel's
		// slot, on that slot's node, which is the node of the election's
		// keys, where the route script publishes and counts receivers.
		channels:     []string{s.keys.Events, s.channel},
		cfg:          cfg,
		onMessage:    s.onMessage,
		onSubscribed: s.onSubscribed,
	}
	return s, nil
}

// Channel returns the channel this Subscriber listens on.
func (s *Subscriber) Channel() string { return s.channel }

// Handle registers h for messages of type msgType, replacing any previous
// one; a nil h removes it. It may be called before or after Start.
func (s *Subscriber) Handle(msgType string, h Handler) error { return s.mux.Handle(msgType, h) }

// HandleDefault registers h for messages whose type has no handler of its
// own (nil removes it). Without one, such messages are reported as
// ErrUnknownType and dropped.
func (s *Subscriber) HandleDefault(h Handler) { s.mux.HandleDefault(h) }

// Start subscribes to the slave channel and the events channel, on the
// pub/sub connection the client's receivers share, waits until Redis
// confirms both, reads the last minted term from Redis (so that a stale
// master is fenced from the first message), and starts the loop. ctx
// bounds these steps: while Redis cannot be reached, Start keeps trying
// until ctx ends, and its error then names the last connection error. The
// loop runs until Close. Handlers registered after Start see only later
// messages.
func (s *Subscriber) Start(ctx context.Context) error { return s.recv.start(ctx) }

// Close stops the loop and waits for it to return; the handler running at
// that moment sees its ctx cancelled. Close is idempotent and must not be
// called from a handler or OnError.
func (s *Subscriber) Close() error { return s.recv.close() }

// ObserveTerm tells the Subscriber that a master term exists, for example
// the term the election's check script returned; messages with a lower term
// are rejected from then on. Terms lower than one already seen are ignored.
// The term is trusted as verified: pass only terms Redis has shown (a
// script's reply, the term key), never one read from a notice or message.
// (Config.Terms does the same by polling, once per message.)
func (s *Subscriber) ObserveTerm(term int64) { s.fence.Observe(term) }

// HighestTerm returns the highest master term seen so far (0: none yet).
func (s *Subscriber) HighestTerm() int64 { return s.fence.Highest() }

// Rejected returns how many messages were rejected for a stale term.
func (s *Subscriber) Rejected() uint64 { return s.rejected.Load() }

// Unverified returns how many messages and notices were refused because
// Redis did not confirm their term (reported as *UnverifiedTermError).
func (s *Subscriber) Unverified() uint64 { return s.unverified.Load() }

// NotHeld returns how many routed messages were dropped unhandled because
// Config.Holds said this process does not hold its NodeID.
func (s *Subscriber) NotHeld() uint64 { return s.notHeld.Load() }

// ReportToMaster publishes a report of type msgType to the master inbox
// (cfg.MasterInbox()), from this process with term 0. It returns an error
// matching ErrNoSubscriber when no Reports is listening. It does not need
// Start.
func (s *Subscriber) ReportToMaster(ctx context.Context, msgType string, payload any) error {
	if err := route.CheckName("message type", msgType); err != nil {
		return err
	}
	raw, err := route.EncodePayload(payload)
	if err != nil {
		return err
	}
	data := route.Encode(uuid.NewString(), s.processID, 0, msgType, raw, s.cfg.clock.Now())
	n, err := publishOnSlot(ctx, s.client, s.keys.MasterInbox, data)
	if err != nil {
		return fmt.Errorf("report to master: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("report to master on %q: %w", s.keys.MasterInbox, ErrNoSubscriber)
	}
	return nil
}

// onSubscribed reads the last minted term whenever the events channel is
// (re)subscribed, and raises the fence to it: notices published while the
// connection was down are lost, but the term key remembers them.
func (s *Subscriber) onSubscribed(ctx context.Context, channel string) {
	if channel != s.keys.Events {
		return
	}
	_, err := s.fence.Latest(ctx) // raises the fence to the term read
	switch {
	case err == nil, errors.Is(err, ErrTermMissing):
		// ErrTermMissing: no term minted yet, or lost with the data
	case errors.Is(err, route.ErrNotATerm):
		s.recv.report(fmt.Errorf("pubsub: %w", err))
	default:
		s.recv.report(fmt.Errorf("%w: read the last term: %w", ErrConnection, err))
	}
}

func (s *Subscriber) onMessage(ctx context.Context, rm *redis.Message) {
	switch rm.Channel {
	case s.keys.Events:
		s.onNotice(ctx, rm.Payload)
	case s.channel:
		s.onRouted(ctx, rm.Payload)
	}
}

// notice is the part of an events-channel notice the Subscriber reads.
// onNotice raises the highest term on "acquired" and "released" notices
// whose term Redis confirms, and ignores every other event.
func (s *Subscriber) onNotice(ctx context.Context, payload string) {
	n, err := keyspace.ParseNotice([]byte(payload))
	if err != nil {
		s.recv.report(&MessageError{Channel: s.keys.Events, Err: fmt.Errorf("%w: %w", ErrMalformedEnvelope, err)})
		return
	}
	if !n.Lock() {
		return
	}
	term := n.Term
	if e := s.verify(ctx, term); e != nil {
		if ctx.Err() != nil {
			return // closing: nothing was refused, and a notice carries no data
		}
		e.Channel, e.From, e.Type = s.keys.Events, n.NodeID, n.Event
		s.refuse(e)
		return
	}
	s.fence.Raise(term)
}

// onRouted validates, fences and dispatches one routed message. A term
// above the fence is verified first; a term below it is rejected as stale
// without asking Redis.
func (s *Subscriber) onRouted(ctx context.Context, payload string) {
	if s.cfg.Holds != nil && !s.cfg.Holds() {
		s.notHeld.Add(1) // not this process's NodeID (yet, or any more)
		return
	}
	m, err := ParseMessage([]byte(payload))
	if err != nil {
		s.recv.report(&MessageError{Channel: s.channel, Err: err})
		return
	}
	if m.Term <= 0 {
		s.recv.report(&MessageError{Channel: s.channel, ID: m.ID, Type: m.Type, From: m.From,
			Err: fmt.Errorf("%w: term %d on a slave channel; a master's term is positive", ErrMalformedEnvelope, m.Term)})
		return
	}
	s.fence.Poll()
	if m.Term > s.fence.Highest() {
		if e := s.verify(ctx, m.Term); e != nil {
			e.Channel, e.From, e.ID, e.Type = s.channel, m.From, m.ID, m.Type
			s.refuse(e)
			return
		}
	}
	if h, ok := s.fence.Admit(m.Term); !ok {
		s.rejected.Add(1)
		s.recv.report(&StaleTermError{Term: m.Term, Highest: h, From: m.From, ID: m.ID, Type: m.Type})
		return
	}
	if err := s.mux.Dispatch(ctx, m.Type, m); err != nil {
		s.recv.report(&MessageError{Channel: s.channel, ID: m.ID, Type: m.Type, From: m.From, Err: err})
		return
	}
	s.recv.obs.received(ReceiveHandled)
}

// verify returns nil when Redis confirms term (route.Fence.Verify), and
// otherwise the refusal with Term, Stored and Err set, for the caller to
// complete with what identifies the message or notice.
func (s *Subscriber) verify(ctx context.Context, term int64) *UnverifiedTermError {
	if ok, stored, err := s.fence.Verify(ctx, term); !ok {
		return &UnverifiedTermError{Term: term, Stored: stored, Err: err}
	}
	return nil
}

// refuse counts and reports a message or notice whose term was not verified.
func (s *Subscriber) refuse(e *UnverifiedTermError) {
	s.unverified.Add(1)
	s.recv.report(e)
}

// publishOnSlot publishes on the node that serves channel's slot. Under
// Redis Cluster PUBLISH reaches every node's subscribers but counts only
// those of the node that ran it; a Reports listens on its channel's slot
// node, so publishing there makes the count (and ErrNoSubscriber) true.
func publishOnSlot(ctx context.Context, client redis.UniversalClient, channel string, data []byte) (int64, error) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return 0, err
		}
		return node.Publish(ctx, channel, data).Result()
	}
	return client.Publish(ctx, channel, data).Result()
}
