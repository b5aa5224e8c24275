package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// deliver judges and handles one entry; count is its delivery count in this
// inbox, this delivery included.
func (c *Consumer) deliver(ctx context.Context, e redis.XMessage, count int64) {
	// At most one entry done and not yet acknowledged at a time: the
	// entries before this one are acknowledged before it is handled, as
	// each was right after its handler, so a crash re-runs at most the
	// last handler (a crash loop must not use up the delivery counts of
	// entries handled well).
	c.flushAcks(ctx)
	m, term, ok := c.parseEntry(ctx, e)
	if !ok || !c.admit(ctx, e.ID, m, term) {
		return
	}
	prior, _ := strconv.ParseInt(fmt.Sprint(e.Values[rdb.InboxFieldDeliveries]), 10, 64)
	d := Delivery{Message: m, EntryID: e.ID, Term: term, Deliveries: prior + c.lost.delivered(e.ID, count)}
	if c.exhausted(d.Deliveries - 1) {
		// The deliveries before this one used up MaxDeliveries with no
		// outcome: the process stopped in its handler each time, or the
		// replies were lost.
		c.bury(ctx, e, d, fmt.Errorf("delivered %d times without an outcome (the process stopped during its handler?)", d.Deliveries-1))
		return
	}
	if d.Deliveries > 1 {
		c.redelivered.Add(1)
	}
	if err := c.mux.Dispatch(ctx, d.Type, d); err != nil {
		c.handlerFailed(ctx, e, d, err)
		return // left pending: delivered again after its backoff
	}
	c.acks.add(e.ID, true)
}

// parseEntry reads the envelope and the term of entry e. A malformed entry is
// reported and acknowledged (deleted), and ok is false.
func (c *Consumer) parseEntry(ctx context.Context, e redis.XMessage) (m pubsub.Message, term int64, ok bool) {
	raw, ok := e.Values[rdb.InboxFieldMessage].(string)
	if !ok {
		c.malformed(e.ID, &pubsub.MessageError{Channel: c.inbox, ID: e.ID, Err: fmt.Errorf("%w: entry %s has no %q field", pubsub.ErrMalformedEnvelope, e.ID, rdb.InboxFieldMessage)})
		return m, 0, false
	}
	m, err := pubsub.ParseMessage([]byte(raw))
	if err != nil {
		c.malformed(e.ID, &pubsub.MessageError{Channel: c.inbox, Err: fmt.Errorf("entry %s: %w", e.ID, err)})
		return m, 0, false
	}
	term, err = strconv.ParseInt(fmt.Sprint(e.Values[rdb.InboxFieldTerm]), 10, 64)
	if err != nil || term <= 0 {
		c.malformed(e.ID, &pubsub.MessageError{Channel: c.inbox, ID: m.ID, Type: m.Type, From: m.From,
			Err: fmt.Errorf("%w: entry %s has no positive term", pubsub.ErrMalformedEnvelope, e.ID)})
		return m, 0, false
	}
	return m, term, true
}

// malformed reports the malformed entry id, err saying why, and deletes it:
// no delivery would read it better.
func (c *Consumer) malformed(id string, err *pubsub.MessageError) {
	c.cfg.report(err)
	c.acks.add(id, false)
}

// admit judges the term of entry id against the fence and reports whether
// it may be handled. An entry whose term Redis does not confirm is refused
// (acknowledged, deleted), or left pending when Redis could not be asked;
// one of an older term is left, acknowledged but not deleted, for the new
// master to adopt.
func (c *Consumer) admit(ctx context.Context, id string, m pubsub.Message, term int64) bool {
	c.fence.Poll()
	return c.verified(ctx, id, m, term) && c.fresh(ctx, id, m, term)
}

// verified reports whether Redis minted term, the term of entry id. An
// entry whose term Redis does not confirm is refused (acknowledged,
// deleted), or left pending when Redis could not be asked.
func (c *Consumer) verified(ctx context.Context, id string, m pubsub.Message, term int64) bool {
	ok, stored, err := c.fence.Verify(ctx, term)
	if ok {
		c.succeeded(opVerify)
		return true
	}
	refused := &pubsub.UnverifiedTermError{Channel: c.inbox, Term: term, Stored: stored, From: m.From, ID: m.ID, Type: m.Type, Err: err}
	if err != nil && !errors.Is(err, pubsub.ErrTermMissing) {
		c.redisFailed(opVerify, refused)
		c.failed.Add(1)
		return false // left pending: Redis could not be asked, ask again later
	}
	c.unverified.Add(1)
	c.cfg.report(refused)
	c.acks.add(id, false)
	return false
}

// fresh reports whether term, the term of entry id, is not below the
// highest term seen. An entry of an older term is left, acknowledged but
// not deleted, for the new master to adopt.
func (c *Consumer) fresh(ctx context.Context, id string, m pubsub.Message, term int64) bool {
	h, ok := c.fence.Admit(term)
	if ok {
		return true
	}
	// Not this master's order: leave it for the master to adopt (or
	// drop). Acknowledged, so no pass delivers it again; not deleted.
	// Expected at every master change: no error.
	c.rejected.Add(1)
	c.log.Debug().Str("inbox", c.inbox).Str("entry", id).Str("id", m.ID).Str("from", m.From).Int64("term", term).Int64("highest", h).
		Msg("entry of an older term left for the new master to adopt")
	if c.cfg.OnStale != nil {
		c.cfg.OnStale(&pubsub.StaleTermError{Term: term, Highest: h, From: m.From, ID: m.ID, Type: m.Type})
	}
	c.leave(ctx, id)
	return false
}

// exhausted reports whether an entry delivered n times has had its last
// delivery: n reached Config.MaxDeliveries (0: no limit).
func (c *Consumer) exhausted(n int64) bool {
	return c.cfg.MaxDeliveries > 0 && n >= c.cfg.MaxDeliveries
}

// handlerFailed counts and reports a handler's error on delivery d of
// entry e, and buries the entry when that was its last delivery. When
// Close cut the handler short (ctx ended) it is no fault: logged at debug
// level only, and the entry stays pending to come again.
func (c *Consumer) handlerFailed(ctx context.Context, e redis.XMessage, d Delivery, err error) {
	c.failed.Add(1)
	failed := &pubsub.MessageError{Channel: c.inbox, ID: d.ID, Type: d.Type, From: d.From, Err: err}
	if ctx.Err() != nil {
		c.log.Debug().Err(failed).Msg("handler stopped by Close; the entry stays pending")
		return
	}
	c.cfg.report(failed)
	if c.exhausted(d.Deliveries) && ctx.Err() == nil {
		c.bury(ctx, e, d, err) // not when Close came meanwhile
	}
}

// bury moves an entry to the dead-letter stream with its last error; when
// that fails, the entry stays pending and is tried again.
func (c *Consumer) bury(ctx context.Context, e redis.XMessage, d Delivery, last error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OpTimeout)
	defer cancel()
	id, err := rdb.InboxDead(opCtx, c.client, c.keys, keyspace.InboxGroup, c.inbox, e.ID, c.processID, d.Deliveries, last.Error())
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
		raw, _ := e.Values[rdb.InboxFieldMessage].(string)
		c.cfg.OnDead(DeadLetter{ID: id, Message: d.Message, Raw: raw, Term: d.Term, Inbox: c.processID, Process: c.processID,
			Deliveries: d.Deliveries, Error: last.Error(), At: c.cfg.clock.Now()})
	}
}

// leave acknowledges an entry without deleting it: no pass delivers it
// again, and the master's sweep finds it.
func (c *Consumer) leave(ctx context.Context, id string) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OpTimeout)
	defer cancel()
	if err := c.client.XAck(opCtx, c.inbox, keyspace.InboxGroup, id).Err(); err != nil {
		c.failed.Add(1)
		c.redisFailed(opAck, fmt.Errorf("durable: acknowledge entry %s of %q: %w: %w", id, c.inbox, pubsub.ErrConnection, err))
		return
	}
	c.succeeded(opAck)
}

// acks are the entries the loop is done with (handled, or refused for
// good), to be acknowledged and deleted: they go to Redis with the next
// read, in the same round trip (readAcking), or on their own (flushAcks)
// before the next delivery, before the loop waits or makes a pending pass,
// and when it ends. Only the loop goroutine touches them.
type acks struct {
	ids     []string
	handled int // how many of ids were handled (Consumer.Handled)
}

// add queues entry id; handled tells whether its handler returned nil.
func (a *acks) add(id string, handled bool) {
	a.ids = append(a.ids, id)
	if handled {
		a.handled++
	}
}

// queue adds the deletion and acknowledgement of the queued entries to p:
// XDEL first, so that should the XACK not run (the connection cut between
// them), the entry is gone and its pending-list slot is dropped by the next
// pending pass (XCLAIM finds it deleted; deliverClaimed), never delivered
// again.
func (c *Consumer) queueAcks(ctx context.Context, p redis.Pipeliner) (del, ack *redis.IntCmd) {
	return p.XDel(ctx, c.inbox, c.acks.ids...), p.XAck(ctx, c.inbox, keyspace.InboxGroup, c.acks.ids...)
}

// settleAcks counts the queued entries as done when both commands went
// through, or as failed (they stay pending, to be delivered again: the
// duplicate docs/routing.md describes), and empties the queue. When ctx
// ended (Close), the call may not have been sent at all: the queue is
// kept for the loop's last flush, which does not take ctx (the commands
// do nothing the second time).
func (c *Consumer) settleAcks(ctx context.Context, del, ack *redis.IntCmd) {
	err := del.Err()
	if err == nil {
		err = ack.Err()
	}
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil {
		c.failed.Add(uint64(len(c.acks.ids)))
		c.redisFailed(opAck, fmt.Errorf("durable: acknowledge %d entries of %q: %w: %w", len(c.acks.ids), c.inbox, pubsub.ErrConnection, err))
	} else {
		c.handled.Add(uint64(c.acks.handled))
		c.succeeded(opAck)
	}
	c.acks.ids, c.acks.handled = c.acks.ids[:0], 0
}

// flushAcks sends the queued acknowledgements in one round trip of their
// own, even when ctx was just cancelled.
func (c *Consumer) flushAcks(ctx context.Context) {
	if len(c.acks.ids) == 0 {
		return
	}
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OpTimeout)
	defer cancel()
	var del, ack *redis.IntCmd
	_, _ = c.client.Pipelined(opCtx, func(p redis.Pipeliner) error {
		del, ack = c.queueAcks(opCtx, p)
		return nil
	})
	c.settleAcks(opCtx, del, ack)
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
