package pubsub

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/route"
)

// Inbox is the master's side of slave reports: it listens on the master
// inbox channel (Config.MasterInbox) and hands each report, with the
// sender's node id in Message.From, to the handlers, in order. Reports that
// arrive while mastership is not master are dropped (counted by Dropped and
// reported as ErrNotMaster), so every process may run an Inbox and only the
// master acts on reports. Its only goroutine is the loop started by Start
// and stopped (and waited for) by Close. All methods are safe for
// concurrent use.
type Inbox struct {
	channel    string
	mastership Mastership
	mux        route.Mux[Message] // its Stacks set: a panic is reported with its stack
	recv       receiver
	dropped    atomic.Uint64
}

// NewInbox returns an Inbox gated by mastership; a nil mastership delivers every
// report (for a process that only watches). It does not touch Redis until
// Start.
func NewInbox(client redis.UniversalClient, mastership Mastership, cfg Config) (*Inbox, error) {
	if err := route.CheckClient("pubsub: NewInbox", client); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(client, mastership)
	if err != nil {
		return nil, err
	}
	in := &Inbox{channel: cfg.keys().MasterInbox, mastership: mastership}
	in.mux.Stacks = true
	in.recv = receiver{client: client, channels: []string{in.channel}, cfg: cfg, onMessage: in.onMessage}
	return in, nil
}

// Channel returns the inbox channel.
func (in *Inbox) Channel() string { return in.channel }

// Handle registers h for reports of type msgType, replacing any previous
// one; a nil h removes it. It may be called before or after Start.
func (in *Inbox) Handle(msgType string, h Handler) error { return in.mux.Handle(msgType, h) }

// HandleDefault registers h for reports whose type has no handler of its
// own (nil removes it).
func (in *Inbox) HandleDefault(h Handler) { in.mux.HandleDefault(h) }

// Start subscribes, on the pub/sub connection the client's receivers
// share, waits until Redis confirms, and starts the loop. ctx bounds the
// subscription (while Redis cannot be reached, Start keeps trying until
// ctx ends); the loop runs until Close.
func (in *Inbox) Start(ctx context.Context) error { return in.recv.start(ctx) }

// Close stops the loop and waits for it. It is idempotent and must not be
// called from a handler or OnError.
func (in *Inbox) Close() error { return in.recv.close() }

// Dropped returns how many reports arrived while this process was not master.
func (in *Inbox) Dropped() uint64 { return in.dropped.Load() }

func (in *Inbox) onMessage(ctx context.Context, rm *redis.Message) {
	m, err := ParseMessage([]byte(rm.Payload))
	if err != nil {
		in.recv.report(&MessageError{Channel: in.channel, Err: err})
		return
	}
	if in.mastership != nil && !in.mastership.IsMaster() {
		in.dropped.Add(1)
		in.recv.report(&MessageError{Channel: in.channel, ID: m.ID, Type: m.Type, From: m.From,
			Err: fmt.Errorf("report dropped: %w", ErrNotMaster)})
		return
	}
	if err := in.mux.Dispatch(ctx, m.Type, m); err != nil {
		in.recv.report(&MessageError{Channel: in.channel, ID: m.ID, Type: m.Type, From: m.From, Err: err})
	}
}
