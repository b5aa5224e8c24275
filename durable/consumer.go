package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/route"
	"github.com/herdkit/herd/pubsub"
	"github.com/herdkit/herd/scripts"
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
// through the consumer group scripts.InboxGroup (XREADGROUP, consumer name
// = process id), hands each entry to the handler of its type, and
// acknowledges it (XACK and XDEL, one round trip) only after the handler
// returned nil. At Start it first handles the entries it had read and not
// acknowledged before (a restart under the same process id), then new ones;
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
	keys      scripts.Keys
	cfg       Config

	mux   route.Mux[Delivery]
	fence *route.Fence // the highest term seen, and its verification
	lost  lostReplies  // the loop's own
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

// Handled returns how many entries were handled and acknowledged.
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
		create = p.XGroupCreateMkStream(ctx, c.inbox, scripts.InboxGroup, "0")
		join = p.SAdd(ctx, c.keys.Inboxes, c.processID)
		return nil
	})
	if err != nil && join != nil && join.Err() == nil && create.Err() != nil && strings.HasPrefix(create.Err().Error(), "BUSYGROUP") {
		err = nil // the group exists: kept
	}
	if err != nil {
		return fmt.Errorf("durable: create group %q of %q: %w: %w", scripts.InboxGroup, c.inbox, pubsub.ErrConnection, err)
	}
	return nil
}

// loop reads and handles until ctx is cancelled. It starts with a pass over
// the consumer's pending entries (a restart's unacknowledged work), reads
// new entries, and makes another pass over the pending ones every
// RetryDelay and after any read error (a reply lost on its way may have left
// entries pending that this process never saw).
func (c *Consumer) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	first := true
	var next time.Time // the next pass over the pending entries
	for ctx.Err() == nil {
		if c.cfg.Holds != nil && !c.cfg.Holds() {
			// Not this process's NodeID (yet, or any more): read nothing.
			select {
			case <-ctx.Done():
			case <-time.After(c.cfg.Block):
			}
			continue
		}
		if !time.Now().Before(next) {
			if err := c.pendingPass(ctx, first); err != nil {
				c.readFailed(ctx, err)
				continue
			}
			c.succeeded(opRead)
			first, next = false, time.Now().Add(c.cfg.RetryDelay)
		}
		block := min(c.cfg.Block, max(time.Until(next), time.Millisecond))
		entries, err := c.read(ctx, block)
		if err != nil {
			c.readFailed(ctx, err)
			next = time.Time{}
			continue
		}
		c.succeeded(opRead)
		for _, e := range entries {
			if ctx.Err() != nil {
				return
			}
			c.deliver(ctx, e, 1)
		}
	}
}

// read runs one XREADGROUP of new entries (">"), waiting up to block.
func (c *Consumer) read(ctx context.Context, block time.Duration) ([]redis.XMessage, error) {
	streams, err := c.client.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: scripts.InboxGroup, Consumer: c.processID, Streams: []string{c.inbox, ">"},
		Count: c.cfg.ReadCount, Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(streams) == 0 {
		return nil, nil
	}
	return streams[0].Messages, nil
}

// lostReplies tells, for the entries pending for this Consumer, how many
// of the deliveries Redis counted never reached it: a pending pass whose
// XCLAIM reply was lost (a connection cut mid-reply) still made Redis count
// a delivery of every entry claimed. Such deliveries saw no handler, so
// they count neither toward Config.MaxDeliveries nor in
// Delivery.Deliveries: a connection that keeps cutting replies must not
// move healthy entries to the dead letters. Deliveries before this process
// started count in full (a process that died in its handler is what
// MaxDeliveries is for), as does an XREADGROUP reply lost (once per entry).
// Only the loop goroutine uses it.
type lostReplies struct {
	counted map[string]int64 // entry id → Redis's delivery count as this process last knew it
	lost    map[string]int64 // entry id → deliveries counted that never reached this process
}

// saw records that XPENDING shows entry id delivered n times: any count
// above the one this process knew is a delivery whose reply was lost.
func (l *lostReplies) saw(id string, n int64) {
	if l.counted == nil {
		l.counted, l.lost = map[string]int64{}, map[string]int64{}
	}
	if known, ok := l.counted[id]; ok && n > known {
		l.lost[id] += n - known
	}
	l.counted[id] = n
}

// delivered records that this process received entry id at its n-th
// delivery, and returns the deliveries that reached it: n less the lost.
func (l *lostReplies) delivered(id string, n int64) int64 {
	if l.counted == nil {
		l.counted, l.lost = map[string]int64{}, map[string]int64{}
	}
	l.counted[id] = n
	return n - l.lost[id]
}

// forget drops entry id, which is no longer pending for this process.
func (l *lostReplies) forget(id string) {
	delete(l.counted, id)
	delete(l.lost, id)
}

// keep drops every entry not in pending, the whole pending list.
func (l *lostReplies) keep(pending map[string]bool) {
	for id := range l.counted {
		if !pending[id] {
			l.forget(id)
		}
	}
}

// pendingPass hands the due entries of this consumer's pending list to
// deliver: all of them when all is set (at Start: nothing is in flight),
// otherwise those idle for at least their backoff (backoff). It lists them
// with XPENDING, which changes nothing, and takes the due ones with XCLAIM,
// which counts a delivery.
func (c *Consumer) pendingPass(ctx context.Context, all bool) error {
	start := "-"
	listed := map[string]bool{} // the whole pending list, once the pass reaches its end
	for ctx.Err() == nil {
		opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
		pend, err := c.client.XPendingExt(opCtx, &redis.XPendingExtArgs{
			Stream: c.inbox, Group: scripts.InboxGroup, Start: start, End: "+", Count: c.cfg.ReadCount, Consumer: c.processID,
		}).Result()
		cancel()
		if err != nil {
			return err
		}
		var due []string
		counts := make(map[string]int64, len(pend))
		for _, p := range pend {
			c.lost.saw(p.ID, p.RetryCount)
			listed[p.ID] = true
			if all || p.Idle >= c.backoff(p.RetryCount) {
				due = append(due, p.ID)
				counts[p.ID] = p.RetryCount + 1
			}
		}
		if len(due) > 0 {
			opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
			entries, err := c.client.XClaim(opCtx, &redis.XClaimArgs{
				Stream: c.inbox, Group: scripts.InboxGroup, Consumer: c.processID, Messages: due,
			}).Result()
			cancel()
			if err != nil {
				return err
			}
			for _, e := range entries {
				if ctx.Err() != nil {
					return nil
				}
				if len(e.Values) == 0 {
					if e.ID != "" {
						c.ack(ctx, e.ID) // deleted by a move while pending here (servers that still return it)
					}
					continue
				}
				c.deliver(ctx, e, counts[e.ID])
			}
		}
		if int64(len(pend)) < c.cfg.ReadCount {
			c.lost.keep(listed)
			return nil
		}
		start = "(" + pend[len(pend)-1].ID
	}
	return nil
}

// backoff is how long an entry delivered n times in this inbox waits in the
// pending list before its next delivery: RetryDelay, doubled for each
// delivery after the first, at most MaxRetryDelay.
func (c *Consumer) backoff(n int64) time.Duration {
	d := c.cfg.RetryDelay
	for i := int64(1); i < n && d < c.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxRetryDelay)
}

// readFailed reports a read error and waits before the next attempt; a
// missing group (the inbox was deleted by a move while this process was
// thought gone) is created again at once.
func (c *Consumer) readFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	if strings.HasPrefix(err.Error(), "NOGROUP") {
		if err := c.createGroup(ctx); err == nil {
			return
		}
	}
	c.redisFailed(opRead, fmt.Errorf("durable: read %q: %w: %w", c.inbox, pubsub.ErrConnection, err))
	t := time.NewTimer(c.cfg.RetryDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// deliver judges and handles one entry; count is its delivery count in this
// inbox, this delivery included.
func (c *Consumer) deliver(ctx context.Context, e redis.XMessage, count int64) {
	raw, ok := e.Values[scripts.InboxFieldMessage].(string)
	if !ok {
		c.cfg.report(&pubsub.MessageError{Channel: c.inbox, ID: e.ID, Err: fmt.Errorf("%w: entry %s has no %q field", pubsub.ErrMalformedEnvelope, e.ID, scripts.InboxFieldMessage)})
		c.ack(ctx, e.ID)
		return
	}
	m, err := pubsub.ParseMessage([]byte(raw))
	if err != nil {
		c.cfg.report(&pubsub.MessageError{Channel: c.inbox, Err: fmt.Errorf("entry %s: %w", e.ID, err)})
		c.ack(ctx, e.ID)
		return
	}
	term, err := strconv.ParseInt(fmt.Sprint(e.Values[scripts.InboxFieldTerm]), 10, 64)
	if err != nil || term <= 0 {
		c.cfg.report(&pubsub.MessageError{Channel: c.inbox, ID: m.ID, Type: m.Type, From: m.From,
			Err: fmt.Errorf("%w: entry %s has no positive term", pubsub.ErrMalformedEnvelope, e.ID)})
		c.ack(ctx, e.ID)
		return
	}
	prior, _ := strconv.ParseInt(fmt.Sprint(e.Values[scripts.InboxFieldDeliveries]), 10, 64)
	c.fence.Poll()
	if ok, stored, err := c.fence.Verify(ctx, term); !ok {
		refused := &pubsub.UnverifiedTermError{Channel: c.inbox, Term: term, Stored: stored, From: m.From, ID: m.ID, Type: m.Type, Err: err}
		if err != nil && !errors.Is(err, pubsub.ErrTermMissing) {
			c.redisFailed(opVerify, refused)
			c.failed.Add(1)
			return // left pending: Redis could not be asked, ask again later
		}
		c.unverified.Add(1)
		c.cfg.report(refused)
		c.ack(ctx, e.ID)
		return
	}
	c.succeeded(opVerify)
	if h, ok := c.fence.Admit(term); !ok {
		// Not this master's order: leave it for the master to adopt (or
		// drop). Acknowledged, so no pass delivers it again; not deleted.
		// Expected at every master change: no error.
		c.rejected.Add(1)
		c.log.Debug().Str("inbox", c.inbox).Str("entry", e.ID).Str("id", m.ID).Str("from", m.From).Int64("term", term).Int64("highest", h).
			Msg("entry of an older term left for the new master to adopt")
		if c.cfg.OnStale != nil {
			c.cfg.OnStale(&pubsub.StaleTermError{Term: term, Highest: h, From: m.From, ID: m.ID, Type: m.Type})
		}
		c.leave(ctx, e.ID)
		return
	}
	d := Delivery{Message: m, EntryID: e.ID, Term: term, Deliveries: prior + c.lost.delivered(e.ID, count)}
	if limit := c.cfg.MaxDeliveries; limit > 0 && d.Deliveries > limit {
		// Delivered that often with no outcome: the process stopped in its
		// handler each time, or the replies were lost.
		c.bury(ctx, e, d, fmt.Errorf("delivered %d times without an outcome (the process stopped during its handler?)", d.Deliveries-1))
		return
	}
	if d.Deliveries > 1 {
		c.redelivered.Add(1)
	}
	if err := c.mux.Dispatch(ctx, d.Type, d); err != nil {
		c.failed.Add(1)
		failed := &pubsub.MessageError{Channel: c.inbox, ID: m.ID, Type: m.Type, From: m.From, Err: err}
		if ctx.Err() != nil {
			// Close cut the handler short: no fault, the entry comes again.
			c.log.Debug().Err(failed).Msg("handler stopped by Close; the entry stays pending")
		} else {
			c.cfg.report(failed)
		}
		if limit := c.cfg.MaxDeliveries; limit > 0 && d.Deliveries >= limit && ctx.Err() == nil {
			c.bury(ctx, e, d, err) // not when Close cut the handler short
		}
		return // left pending: delivered again after its backoff
	}
	if c.ack(ctx, e.ID) {
		c.handled.Add(1)
	}
}

// bury moves an entry to the dead-letter stream with its last error; when
// that fails, the entry stays pending and is tried again.
func (c *Consumer) bury(ctx context.Context, e redis.XMessage, d Delivery, last error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OpTimeout)
	defer cancel()
	id, err := scripts.InboxDead(opCtx, c.client, c.keys, scripts.InboxGroup, c.inbox, e.ID, c.processID, d.Deliveries, last.Error())
	if err != nil {
		c.redisFailed(opBury, fmt.Errorf("durable: move entry %s of %q to the dead letters: %w: %w", e.ID, c.inbox, pubsub.ErrConnection, err))
		return // left pending: tried again at its next delivery
	}
	c.succeeded(opBury)
	if id == "" {
		return // moved or acknowledged meanwhile
	}
	c.dead.Add(1)
	if c.cfg.OnDead != nil {
		raw, _ := e.Values[scripts.InboxFieldMessage].(string)
		c.cfg.OnDead(DeadLetter{ID: id, Message: d.Message, Raw: raw, Term: d.Term, Inbox: c.processID, Process: c.processID,
			Deliveries: d.Deliveries, Error: last.Error(), At: time.Now()})
	}
}

// leave acknowledges an entry without deleting it: no pass delivers it
// again, and the master's sweep finds it.
func (c *Consumer) leave(ctx context.Context, id string) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OpTimeout)
	defer cancel()
	if err := c.client.XAck(opCtx, c.inbox, scripts.InboxGroup, id).Err(); err != nil {
		c.failed.Add(1)
		c.redisFailed(opAck, fmt.Errorf("durable: acknowledge entry %s of %q: %w: %w", id, c.inbox, pubsub.ErrConnection, err))
		return
	}
	c.succeeded(opAck)
}

// ack acknowledges and deletes one entry in one round trip (MULTI), even
// when ctx was just cancelled, and reports whether it did. An ack that fails
// leaves the entry pending: it will be delivered again (the duplicate
// docs/routing.md describes).
func (c *Consumer) ack(ctx context.Context, id string) bool {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OpTimeout)
	defer cancel()
	_, err := c.client.TxPipelined(opCtx, func(p redis.Pipeliner) error {
		p.XAck(opCtx, c.inbox, scripts.InboxGroup, id)
		p.XDel(opCtx, c.inbox, id)
		return nil
	})
	if err != nil {
		c.failed.Add(1)
		c.redisFailed(opAck, fmt.Errorf("durable: acknowledge entry %s of %q: %w: %w", id, c.inbox, pubsub.ErrConnection, err))
		return false
	}
	c.succeeded(opAck)
	return true
}

// The kinds of Redis calls of the loop whose failures are counted apart:
// reads (XREADGROUP, and the pending pass's XPENDING and XCLAIM),
// acknowledgements, term verifications, moves to the dead letters.
const (
	opRead   = "read"
	opAck    = "acknowledge"
	opVerify = "verify"
	opBury   = "bury"
)

// redisFailed handles a failed Redis call of kind op. A failure whose
// previous call of that kind succeeded is logged at debug level only: a
// lost reply or a reconnection, healed by the retry it leads to (the entry
// is delivered again). A second failure in a row is a fault that does not
// heal, and goes to OnError, as does every further one.
func (c *Consumer) redisFailed(op string, err error) {
	c.failing[op]++
	if c.failing[op] < 2 {
		c.log.Debug().Err(err).Str("inbox", c.inbox).Str("call", op).Msg("redis call failed; trying again")
		return
	}
	c.cfg.report(err)
}

// succeeded records that a Redis call of kind op went through.
func (c *Consumer) succeeded(op string) {
	if c.failing[op] != 0 {
		delete(c.failing, op)
	}
}
