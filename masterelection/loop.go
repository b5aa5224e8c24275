package masterelection

import (
	"context"
	"sync"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// run is the election's single loop: it owns the role, the timers and every
// Redis call of the election, alternating between followLoop (slave) and
// masterLoop (master) until ctx ends. feed is the notice feed Start opened (nil in
// standalone mode); run closes it.
func (c *core) run(ctx context.Context, feed *noticeFeed) {
	defer c.closeDone()
	if c.cfg.Standalone {
		c.runStandalone(ctx)
		return
	}
	defer c.members.bg.Wait()
	memCtx, stopMembership := context.WithCancel(ctx)
	defer stopMembership()
	membershipDone := make(chan struct{})
	firstRegistered := c.members.registered
	c.members.bg.Add(1)
	go func() {
		defer c.members.bg.Done()
		defer close(membershipDone)
		c.members.loop(memCtx, firstRegistered)
	}()
	var wg sync.WaitGroup
	closeFeed := c.readFeed(ctx, &wg, feed)
	defer wg.Wait()
	defer closeFeed()

	ls := &loopState{unresolved: true, feedConfirmed: feed.confirmed, firstRegistered: firstRegistered}
	if c.awaitingID.Load() {
		ls.awaitID = firstRegistered
	}
	ls.haltMembership = func() {
		stopMembership()
		<-membershipDone
	}
	defer ls.renewAttempts.Wait()
	for ctx.Err() == nil && !ls.stopRequested {
		if l := c.followLoop(ctx, ls); l != nil {
			c.masterLoop(ctx, ls, l)
		}
	}
	if ls.heldTerm != 0 && c.mastership.Load() == nil {
		// Stop came while a lock of ours outlived its mastership: release
		// it, pinned to its term, so the others need not wait out its TTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout())
		if _, err := rdb.Release(rctx, c.client, c.keys, c.cfg.NodeID, ls.heldTerm); err != nil {
			c.log.Warn().Err(err).Int64("term", ls.heldTerm).Msg("could not release a lock left from an earlier mastership")
		}
		cancel()
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
