package pubsub

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/route"
)

// Reports is the master's receiver of the slaves' reports
// (Subscriber.ReportToMaster): it listens on the channel the specification
// calls the master inbox (Config.MasterInbox) and hands each report, with
// the sender's node id in Message.From, to the handlers, in order. Reports
// that arrive while its Mastership is not master are dropped (counted by
// Dropped and reported as ErrNotMaster), so every process may run a Reports
// and only the master acts on reports. Its only goroutine is the loop
// started by Start and stopped (and waited for) by Close. All methods are
// safe for concurrent use.
type Reports struct {
	channel    string
	mastership Mastership
	mux        route.Mux[Message] // its Stacks set: a panic is reported with its stack
	recv       receiver
	dropped    atomic.Uint64
}

// NewReports returns a Reports gated by mastership; a nil mastership
// delivers every report (for a process that only watches). It does not
// touch Redis until Start.
func NewReports(client redis.UniversalClient, mastership Mastership, cfg Config) (*Reports, error) {
	if err := route.CheckClient("pubsub: NewReports", client); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(client, mastership)
	if err != nil {
		return nil, err
	}
	r := &Reports{channel: cfg.keys().MasterInbox, mastership: mastership}
	r.mux.Stacks = true
	r.recv = receiver{client: client, channels: []string{r.channel}, cfg: cfg, onMessage: r.onMessage}
	return r, nil
}

// Channel returns the channel the reports arrive on (Config.MasterInbox).
func (r *Reports) Channel() string { return r.channel }

// Handle registers h for reports of type msgType, replacing any previous
// one; a nil h removes it. It may be called before or after Start.
func (r *Reports) Handle(msgType string, h Handler) error { return r.mux.Handle(msgType, h) }

// HandleDefault registers h for reports whose type has no handler of its
// own (nil removes it).
func (r *Reports) HandleDefault(h Handler) { r.mux.HandleDefault(h) }

// Start subscribes, on the pub/sub connection the client's receivers
// share, waits until Redis confirms, and starts the loop. ctx bounds the
// subscription (while Redis cannot be reached, Start keeps trying until
// ctx ends); the loop runs until Close.
func (r *Reports) Start(ctx context.Context) error { return r.recv.start(ctx) }

// Close stops the loop and waits for it. It is idempotent and must not be
// called from a handler or OnError.
func (r *Reports) Close() error { return r.recv.close() }

// Dropped returns how many reports arrived while this process was not master.
func (r *Reports) Dropped() uint64 { return r.dropped.Load() }

func (r *Reports) onMessage(ctx context.Context, rm *redis.Message) {
	m, err := ParseMessage([]byte(rm.Payload))
	if err != nil {
		r.recv.report(&MessageError{Channel: r.channel, Err: err})
		return
	}
	if r.mastership != nil && !r.mastership.IsMaster() {
		r.dropped.Add(1)
		r.recv.report(&MessageError{Channel: r.channel, ID: m.ID, Type: m.Type, From: m.From,
			Err: fmt.Errorf("report dropped: %w", ErrNotMaster)})
		return
	}
	if err := r.mux.Dispatch(ctx, m.Type, m); err != nil {
		r.recv.report(&MessageError{Channel: r.channel, ID: m.ID, Type: m.Type, From: m.From, Err: err})
	}
}
