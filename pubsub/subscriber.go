package pubsub

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/nilclient"
	"github.com/herdkit/herd/scripts"
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
	keys      scripts.Keys
	cfg       Config
	mux       mux
	recv      receiver

	// highest is the fence: the highest master term seen, raised only to
	// terms Redis has confirmed. known is the highest term known to exist
	// (term key reads, Config.Terms, ObserveTerm); highest <= known, and a
	// term up to known needs no read to be verified.
	highest    atomic.Int64
	known      atomic.Int64
	terms      termReads     // reads of the term key, shared by concurrent callers
	rejected   atomic.Uint64 // messages rejected for a stale term
	unverified atomic.Uint64 // messages and notices refused for an unverified term
}

// NewSubscriber returns a Subscriber for the process processID (its node id),
// listening on cfg.SlaveChannel(processID). It does not touch Redis until
// Start.
func NewSubscriber(client redis.UniversalClient, processID string, cfg Config) (*Subscriber, error) {
	if nilclient.Is(client) {
		return nil, errors.New("pubsub: NewSubscriber: client is nil")
	}
	cfg, err := cfg.withDefaults(client, cfg.Terms)
	if err != nil {
		return nil, err
	}
	if err := checkName("process id", processID); err != nil {
		return nil, err
	}
	s := &Subscriber{client: client, processID: processID, channel: cfg.SlaveChannel(processID), keys: cfg.keys(), cfg: cfg}
	s.terms.read = s.readTerm
	s.recv = receiver{
		client: client,
		// The events channel comes first: under Redis Cluster the
		// connection goes to the node of the first channel's slot, which is
		// the node of the election's keys, where the route script publishes
		// and counts receivers.
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
func (s *Subscriber) Handle(msgType string, h Handler) error { return s.mux.handle(msgType, h) }

// HandleDefault registers h for messages whose type has no handler of its
// own (nil removes it). Without one, such messages are reported as
// ErrUnknownType and dropped.
func (s *Subscriber) HandleDefault(h Handler) { s.mux.handleDefault(h) }

// Start subscribes to the slave channel and the events channel, waits until
// Redis confirms both, reads the last minted term from Redis (so that a
// stale master is fenced from the first message), and starts the loop. ctx
// bounds these steps; the loop runs until Close. Handlers registered after
// Start see only later messages.
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
func (s *Subscriber) ObserveTerm(term int64) {
	raise(&s.known, term) // first, so that highest <= known holds
	raise(&s.highest, term)
}

// HighestTerm returns the highest master term seen so far (0: none yet).
func (s *Subscriber) HighestTerm() int64 { return s.highest.Load() }

// Rejected returns how many messages were rejected for a stale term.
func (s *Subscriber) Rejected() uint64 { return s.rejected.Load() }

// Unverified returns how many messages and notices were refused because
// Redis did not confirm their term (reported as *UnverifiedTermError).
func (s *Subscriber) Unverified() uint64 { return s.unverified.Load() }

// ReportToMaster publishes a report of type msgType to the master inbox
// (cfg.MasterInbox()), from this process with term 0. It returns an error
// matching ErrNoSubscriber when no Inbox is listening. It does not need
// Start.
func (s *Subscriber) ReportToMaster(ctx context.Context, msgType string, payload any) error {
	if err := checkName("message type", msgType); err != nil {
		return err
	}
	raw, err := encodePayload(payload)
	if err != nil {
		return err
	}
	data := encode(uuid.NewString(), s.processID, 0, msgType, raw, s.cfg.clock.Now())
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
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	term, err := s.terms.latest(ctx)
	switch {
	case errors.Is(err, ErrTermMissing):
		return // no term minted yet, or lost with the data
	case errors.Is(err, errNotATerm):
		s.recv.report(fmt.Errorf("pubsub: %w", err))
		return
	case err != nil:
		s.recv.report(fmt.Errorf("%w: read the last term: %w", ErrConnection, err))
		return
	}
	s.ObserveTerm(term)
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
	n, err := scripts.ParseNotice([]byte(payload))
	if err != nil {
		s.recv.report(&MessageError{Channel: s.keys.Events, Err: fmt.Errorf("%w: %w", ErrMalformedEnvelope, err)})
		return
	}
	if !n.Lock() {
		return
	}
	term := n.Term
	if e := s.verify(ctx, term); e != nil {
		e.Channel, e.From, e.Type = s.keys.Events, n.NodeID, n.Event
		s.refuse(e)
		return
	}
	raise(&s.highest, term)
}

// onRouted validates, fences and dispatches one routed message. A term
// above the fence is verified first; a term below it is rejected as stale
// without asking Redis.
func (s *Subscriber) onRouted(ctx context.Context, payload string) {
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
	if s.cfg.Terms != nil {
		s.ObserveTerm(s.cfg.Terms.ObservedTerm())
	}
	if m.Term > s.highest.Load() {
		if e := s.verify(ctx, m.Term); e != nil {
			e.Channel, e.From, e.ID, e.Type = s.channel, m.From, m.ID, m.Type
			s.refuse(e)
			return
		}
	}
	if h, ok := s.fence(m.Term); !ok {
		s.rejected.Add(1)
		s.recv.report(&StaleTermError{Term: m.Term, Highest: h, From: m.From, ID: m.ID, Type: m.Type})
		return
	}
	if err := s.mux.dispatch(ctx, m); err != nil {
		s.recv.report(&MessageError{Channel: s.channel, ID: m.ID, Type: m.Type, From: m.From, Err: err})
		return
	}
	s.recv.obs.received(ReceiveHandled)
}

// fence accepts term when it is not lower than the highest seen, raising
// the highest to it (the caller has verified it). It returns the highest
// term it compared with.
func (s *Subscriber) fence(term int64) (int64, bool) {
	for {
		h := s.highest.Load()
		if term < h {
			return h, false
		}
		if term == h || s.highest.CompareAndSwap(h, term) {
			return h, true
		}
	}
}

// publishOnSlot publishes on the node that serves channel's slot. Under
// Redis Cluster PUBLISH reaches every node's subscribers but counts only
// those of the node that ran it; the inbox listens on its channel's slot
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
