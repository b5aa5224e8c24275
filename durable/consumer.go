package durable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// Delivery is one entry of a slave's inbox handed to a Handler.
type Delivery struct {
	// Message is the envelope as the master sent it: its ID is the same on
	// every delivery, also after the entry moved to another slave, so a
	// handler that records the ids it has handled can skip duplicates.
	pubsub.Message
	// EntryID is the stream entry id in this inbox ("<ms>-<seq>"); it
	// changes when the entry moves.
	EntryID string
	// Term is the term under which the entry was written to this inbox (its
	// send, or its last move by Reassign); the fence judges this one.
	Term int64
	// Deliveries is the number of times the entry has been delivered,
	// this delivery included, in this inbox and the inboxes it moved from:
	// 1 the first time, more when an earlier delivery was not acknowledged
	// (the handler failed, or the slave died before acknowledging). A
	// delivery that Redis counted but whose reply this Consumer lost (an
	// XCLAIM reply cut off) is not counted, as no handler saw it.
	Deliveries int64
}

// Handler handles one delivery. Returning nil acknowledges the entry (it is
// deleted and not delivered again); an error, or a panic, leaves it pending
// to be delivered again after Config.RetryDelay, doubled at each retry up to
// Config.MaxRetryDelay, until its Config.MaxDeliveries-th delivery fails:
// then it moves to the dead-letter stream. Handlers run on the Consumer's
// loop goroutine, one at a time; ctx is cancelled by Close.
type Handler func(ctx context.Context, d Delivery) error

// Consumer is a slave's side of durable routing: it reads its own inbox
// through the consumer group keyspace.InboxGroup (XREADGROUP, consumer name
// = process id), hands each entry to the handler of its type, and
// acknowledges it (XDEL and XACK, no MULTI) only after the handler
// returned nil, in the round trip of its next read. At Start it first
// handles the entries it had read and not acknowledged before (a restart
// under the same process id), then new ones;
// every Config.RetryDelay it looks at its pending entries again (XPENDING)
// and takes back (XCLAIM) those due: an entry whose handler failed, once its
// backoff has passed, and an entry whose delivery reply was lost.
//
// Entries are fenced by term as pubsub.Subscriber fences messages: an entry
// whose term is below the highest master term seen is never handled; it is
// acknowledged but left in the inbox, counted (Rejected) and passed to
// Config.OnStale, for the new master to adopt under its own term
// (Router.Sweep), after which it comes again. A term above every term verified is checked once against
// the term key, and refused (*pubsub.UnverifiedTermError, acknowledged and
// deleted) when Redis did not mint it.
// Its only goroutine is the loop started by Start and stopped (and waited
// for) by Close. All methods are safe for concurrent use.
type Consumer struct {
	client    redis.UniversalClient
	processID string
	inbox     string
	keys      keyspace.Keys
	cfg       Config

	mux   route.Mux[Delivery]
	fence *route.Fence // the highest term seen, and its verification
	lost  lostReplies  // the loop's own
	acks  acks         // the loop's own: entries done, to acknowledge
	log   zerolog.Logger
	// failing counts, per kind of Redis call, the calls of the loop that
	// failed in a row: one failure is logged, a second reported (a fault
	// that does not heal). The loop's own.
	failing map[string]int

	mu      sync.Mutex
	started bool               // guarded by mu
	closed  bool               // guarded by mu
	cancel  context.CancelFunc // guarded by mu
	done    chan struct{}      // guarded by mu; closed when the loop returns

	handled, rejected, unverified, failed, redelivered, dead atomic.Uint64
}

// NewConsumer returns a Consumer of the inbox of processID (its node id).
// It does not touch Redis until Start.
func NewConsumer(client redis.UniversalClient, processID string, cfg Config) (*Consumer, error) {
	if err := route.CheckClient("durable: NewConsumer", client); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults(client, cfg.Terms)
	if err != nil {
		return nil, err
	}
	if err := route.CheckName("process id", processID); err != nil {
		return nil, err
	}
	k := cfg.keys()
	return &Consumer{client: client, processID: processID, inbox: k.Inbox(processID), keys: k, cfg: cfg,
		fence: route.NewFence(client, k.Term, cfg.Terms, cfg.OpTimeout), log: cfg.logger(), failing: map[string]int{}}, nil
}

// Inbox returns the name of the stream this Consumer reads.
func (c *Consumer) Inbox() string { return c.inbox }

// Handle registers h for entries of type msgType, replacing any previous
// one; a nil h removes it. It may be called before or after Start.
func (c *Consumer) Handle(msgType string, h Handler) error { return c.mux.Handle(msgType, h) }

// HandleDefault registers h for entries whose type has no handler of its
// own (nil removes it). Without one, such entries fail with
// pubsub.ErrUnknownType and stay pending, to be delivered again.
func (c *Consumer) HandleDefault(h Handler) { c.mux.HandleDefault(h) }

// Start creates the consumer group of the inbox when it does not exist
// (reading from the inbox's first entry, so nothing the master added
// earlier is missed), reads the last minted term (so that entries of a
// deposed master are fenced from the first one), and starts the loop. ctx
// bounds these steps; the loop runs until Close.
func (c *Consumer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.started:
		return ErrStarted
	}
	if err := c.createGroup(ctx); err != nil {
		return err
	}
	if _, err := c.fence.Latest(ctx); err != nil && !errors.Is(err, pubsub.ErrTermMissing) {
		return fmt.Errorf("durable: start: %w", err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	c.started, c.cancel, c.done = true, cancel, make(chan struct{})
	go c.loop(loopCtx, c.done)
	return nil
}

// Close stops the loop and waits for it to return (up to Config.Block for
// a read in flight; the handler running sees its ctx cancelled). Close is
// idempotent and must not be called from a handler or OnError.
func (c *Consumer) Close() error {
	c.mu.Lock()
	c.closed = true
	cancel, done := c.cancel, c.done
	c.cancel = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// ObserveTerm tells the Consumer that a master term exists; entries with a
// lower term are rejected from then on. Pass only terms Redis has shown.
func (c *Consumer) ObserveTerm(term int64) { c.fence.Observe(term) }

// HighestTerm returns the highest master term seen so far (0: none yet).
func (c *Consumer) HighestTerm() int64 { return c.fence.Highest() }

// Handled returns how many entries were handled and acknowledged. An
// acknowledgement goes to Redis before the Consumer's next delivery, or
// with its next read, and counts once its reply came: up to Config.Block
// after the handler returned when no new entry comes meanwhile.
func (c *Consumer) Handled() uint64 { return c.handled.Load() }

// Rejected returns how many entries were left, not handled, for a stale
// term (Config.OnStale): the new master adopts them (they come again under
// its term) or drops them.
func (c *Consumer) Rejected() uint64 { return c.rejected.Load() }

// Dead returns how many entries this Consumer moved to the dead-letter
// stream.
func (c *Consumer) Dead() uint64 { return c.dead.Load() }

// Unverified returns how many entries were refused because Redis did not
// confirm their term.
func (c *Consumer) Unverified() uint64 { return c.unverified.Load() }

// Failed returns how many deliveries failed (handler error or panic, no
// handler, acknowledgement not confirmed): each is delivered again.
func (c *Consumer) Failed() uint64 { return c.failed.Load() }

// Redelivered returns how many deliveries had Deliveries above 1.
func (c *Consumer) Redelivered() uint64 { return c.redelivered.Load() }

// createGroup creates the inbox's group at the stream's start (MKSTREAM);
// a group that exists is kept. The inbox joins the set of inboxes, so the
// master's sweep finds it also when it never sent to it.
func (c *Consumer) createGroup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	var (
		create *redis.StatusCmd
		join   *redis.IntCmd
	)
	_, err := c.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		create = p.XGroupCreateMkStream(ctx, c.inbox, keyspace.InboxGroup, "0")
		join = p.SAdd(ctx, c.keys.Inboxes, c.processID)
		return nil
	})
	if err != nil && !groupExists(create, join) {
		return fmt.Errorf("durable: create group %q of %q: %w: %w", keyspace.InboxGroup, c.inbox, pubsub.ErrConnection, err)
	}
	return nil
}

// groupExists reports whether createGroup's transaction failed only
// because the group exists (BUSYGROUP), the inbox joining the set all the
// same: the group is kept.
func groupExists(create *redis.StatusCmd, join *redis.IntCmd) bool {
	return join != nil && join.Err() == nil && create.Err() != nil && strings.HasPrefix(create.Err().Error(), "BUSYGROUP")
}

// loop reads and handles until ctx is cancelled. It starts with a pass over
// the consumer's pending entries (a restart's unacknowledged work), reads
// new entries, and makes another pass over the pending ones every
// RetryDelay and after any read error (a reply lost on its way may have left
// entries pending that this process never saw).
func (c *Consumer) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer c.flushAcks(ctx) // what the last read did not carry
	passes := passSchedule{first: true}
	for ctx.Err() == nil {
		if !c.holds() {
			// Not this process's NodeID (yet, or any more): read nothing.
			c.flushAcks(ctx)
			c.wait(ctx, c.cfg.Block)
			continue
		}
		if !c.passIfDue(ctx, &passes) {
			continue
		}
		if !c.readNew(ctx, passes.next) {
			passes.next = time.Time{}
		}
	}
}

// passSchedule is when the loop's next pass over the pending entries is
// due, and whether it is the first (at Start, every pending entry is due).
// The loop's own.
type passSchedule struct {
	first bool
	next  time.Time // zero: at once
}

// holds reports whether this process holds its NodeID (Config.Holds;
// always, without one).
func (c *Consumer) holds() bool { return c.cfg.Holds == nil || c.cfg.Holds() }

// passIfDue makes the pass over the pending entries when s says it is due,
// and schedules the next one RetryDelay later; false when the pass failed
// (reported, and waited after).
func (c *Consumer) passIfDue(ctx context.Context, s *passSchedule) bool {
	if c.cfg.clock.Now().Before(s.next) {
		return true
	}
	c.flushAcks(ctx) // the pass must not find entries already done
	if err := c.pendingPass(ctx, s.first); err != nil {
		c.readFailed(ctx, err)
		return false
	}
	c.succeeded(opRead)
	s.first, s.next = false, c.cfg.clock.Now().Add(c.cfg.RetryDelay)
	return true
}

// readNew reads new entries, waiting for them up to Config.Block and no
// later than next, the next pending pass, and delivers them until ctx
// ends; false when the read failed (reported, and waited after).
func (c *Consumer) readNew(ctx context.Context, next time.Time) bool {
	block := min(c.cfg.Block, max(next.Sub(c.cfg.clock.Now()), time.Millisecond))
	entries, err := c.read(ctx, block)
	if err != nil {
		c.readFailed(ctx, err)
		return false
	}
	c.succeeded(opRead)
	for _, e := range entries {
		if ctx.Err() != nil {
			return true
		}
		c.deliver(ctx, e, 1)
	}
	return true
}
