package durable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/pubsub"
)

// read runs one XREADGROUP of new entries (">"), waiting up to block, with
// the queued acknowledgements in the same round trip when there are any.
func (c *Consumer) read(ctx context.Context, block time.Duration) ([]redis.XMessage, error) {
	args := &redis.XReadGroupArgs{
		Group: keyspace.InboxGroup, Consumer: c.processID, Streams: []string{c.inbox, ">"},
		Count: c.cfg.ReadCount, Block: block,
	}
	var cmd *redis.XStreamSliceCmd
	if len(c.acks.ids) == 0 {
		cmd = c.client.XReadGroup(ctx, args)
	} else {
		cmd = c.readAcking(ctx, args)
	}
	return messages(cmd.Result())
}

// readAcking is read with the queued acknowledgements: XDEL, XACK and
// XREADGROUP in one pipeline. go-redis gives a pipeline the client's read
// timeout, not stretched by a BLOCK as for a command alone, so the read
// blocks at most half of it (pipelineBlock); when the client's kind does
// not tell its timeout, the acknowledgements go first on their own.
func (c *Consumer) readAcking(ctx context.Context, args *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	block, ok := pipelineBlock(c.client, args.Block)
	if !ok {
		c.flushAcks(ctx)
		return c.client.XReadGroup(ctx, args)
	}
	args.Block = block
	var del, ack *redis.IntCmd
	var cmd *redis.XStreamSliceCmd
	_, _ = c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		del, ack = c.queueAcks(ctx, p)
		cmd = p.XReadGroup(ctx, args)
		return nil
	})
	c.settleAcks(ctx, del, ack)
	return cmd
}

// pipelineBlock is how long a blocking read in a pipeline of client may
// wait, at most block: half the client's read timeout when it has one (the
// rest for the reply to come), block when reads have no timeout; ok is
// false when client's kind does not tell.
func pipelineBlock(client redis.UniversalClient, block time.Duration) (time.Duration, bool) {
	var timeout time.Duration
	switch cl := client.(type) {
	case *redis.Client:
		timeout = cl.Options().ReadTimeout
	case *redis.ClusterClient:
		timeout = cl.Options().ReadTimeout
	default:
		return 0, false
	}
	if timeout <= 0 {
		return block, true // no read deadline beyond ctx's
	}
	return max(min(block, timeout/2), time.Millisecond), true
}

// messages reads an XREADGROUP reply of one stream: its entries, none
// when the read timed out.
func messages(streams []redis.XStream, err error) ([]redis.XMessage, error) {
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
		pend, err := c.pending(ctx, start)
		if err != nil {
			return err
		}
		due, counts := c.due(pend, all, listed)
		if err := c.claim(ctx, due, counts); err != nil {
			return err
		}
		if int64(len(pend)) < c.cfg.ReadCount {
			c.lost.keep(listed)
			return nil
		}
		start = "(" + pend[len(pend)-1].ID
	}
	return nil
}

// pending lists one page of this consumer's pending entries, from start.
func (c *Consumer) pending(ctx context.Context, start string) ([]redis.XPendingExt, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	return c.client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: c.inbox, Group: keyspace.InboxGroup, Start: start, End: "+", Count: c.cfg.ReadCount, Consumer: c.processID,
	}).Result()
}

// due returns the entries of one page of the pending list to deliver now,
// all of them when all is set, otherwise those idle for at least their
// backoff, with the delivery count each will have in this inbox. It adds
// the page to listed and tells lost the counts Redis shows.
func (c *Consumer) due(pend []redis.XPendingExt, all bool, listed map[string]bool) ([]string, map[string]int64) {
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
	return due, counts
}

// claim takes the due entries with XCLAIM and delivers them, each with its
// count, until ctx ends.
func (c *Consumer) claim(ctx context.Context, due []string, counts map[string]int64) error {
	if len(due) == 0 {
		return nil
	}
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	entries, err := c.client.XClaim(opCtx, &redis.XClaimArgs{
		Stream: c.inbox, Group: keyspace.InboxGroup, Consumer: c.processID, Messages: due,
	}).Result()
	cancel()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return nil
		}
		c.deliverClaimed(ctx, e, counts[e.ID])
	}
	return nil
}

// deliverClaimed delivers one entry XCLAIM returned. An entry deleted by a
// move while pending here comes without values (from servers that still
// return it): it is acknowledged, which drops it from the pending list.
func (c *Consumer) deliverClaimed(ctx context.Context, e redis.XMessage, count int64) {
	switch {
	case len(e.Values) > 0:
		c.deliver(ctx, e, count)
	case e.ID != "":
		c.acks.add(e.ID, false)
	}
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
	c.wait(ctx, c.cfg.RetryDelay)
}

// wait returns after d on the Consumer's clock, or when ctx ends.
func (c *Consumer) wait(ctx context.Context, d time.Duration) {
	t := c.cfg.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}
