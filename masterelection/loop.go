package masterelection

import (
	"context"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// run is the election's single loop: it owns the role, the timers and every
// Redis call of the election, alternating between followLoop (slave) and
// masterLoop (master) until ctx ends. feed is the notice feed Start opened (nil in
// standalone mode); run closes it.
func (c *core) run(ctx context.Context, feed *noticeFeed, look *lockLook, took *firstTake) {
	defer c.closeDone()
	if c.cfg.Standalone {
		c.runStandalone(ctx)
		return
	}
	defer c.members.wait()
	haltMembership := c.members.startLoop(ctx)
	defer haltMembership()
	firstRegistered := c.members.registered
	closeFeed := c.readFeed(ctx, feed)
	defer closeFeed()

	ls := &loopState{unresolved: true, feedConfirmed: feed.confirmed, firstRegistered: firstRegistered, firstLook: look, firstTake: took}
	if c.awaitingID.Load() {
		ls.awaitID = firstRegistered
	}
	ls.haltMembership = haltMembership
	defer ls.renewAttempts.Wait()
	for ctx.Err() == nil && !ls.stopRequested {
		if l := c.followLoop(ctx, ls); l != nil {
			c.masterLoop(ctx, ls, l)
		}
	}
	if ls.heldTerm != 0 && c.mastership.Load() == nil {
		c.releaseLeftLock(ctx, ls.heldTerm)
	}
}

// releaseLeftLock releases the lock of term, pinned to it: Stop came while
// a lock of ours outlived its mastership, and the others need not wait out
// its TTL.
func (c *core) releaseLeftLock(ctx context.Context, term int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout())
	defer cancel()
	if _, err := rdb.Release(rctx, c.client, c.keys, c.cfg.NodeID, term); err != nil {
		c.log.Warn().Err(err).Int64("term", term).Msg("could not release a lock left from an earlier mastership")
	}
}

// runStandalone is run in standalone mode: master at once, until Stop.
func (c *core) runStandalone(ctx context.Context) {
	c.bus.emit(topicElectionStarted, payload{})
	term := c.clock.Now().UnixMilli()
	l := c.newMastership(ctx, term, time.Duration(^uint64(0)>>1)) // never: nothing can take it away
	c.noteTerm(term)
	c.mastership.Store(l)
	c.bus.emit(topicMasterAcquired, payload{term: term, mastership: l})
	c.bus.emit(topicElectionCompleted, payload{isMaster: true})
	close(c.resolved)
	<-ctx.Done()
}
