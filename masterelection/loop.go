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

	ls := &loopState{unresolved: true, feedConfirmed: feed.confirmed, firstRegistered: firstRegistered, firstLook: look}
	if c.awaitingID.Load() {
		ls.awaitID = firstRegistered
	}
	ls.haltMembership = haltMembership
	defer ls.renewAttempts.Wait()
	l := c.takeFirst(ctx, ls, took)
	for ctx.Err() == nil && !ls.stopRequested {
		if l == nil {
			l = c.followLoop(ctx, ls)
		}
		if l != nil {
			c.masterLoop(ctx, ls, l)
		}
		l = nil
	}
	if ls.heldTerm != 0 && c.mastership.Load() == nil {
		c.releaseLeftLock(ctx, ls.heldTerm)
	}
}

// takeFirst takes the outcome of Start's first attempt at the lock, made
// with its questions (askTaking), before anything else can happen to the
// loop (a Stop, a change of candidacy): the new mastership when it took
// the lock, nil otherwise. A lock taken when ctx has already ended, or
// whose self-fencing deadline has passed, is left to the loop's release;
// a reply that was lost leaves the lock maybe
// this process's, as acquireFailed does (Start reported it: its questions
// got no answer either), and the first attempt is made as usual.
func (c *core) takeFirst(ctx context.Context, ls *loopState, took *firstTake) *mastership {
	switch {
	case took == nil:
		return nil
	case took.lost:
		ls.maybeHeld = true
		ls.lostAcquires.add(took.info)
		return nil
	case ctx.Err() != nil || c.deadlineAfter(took.sent) <= c.clock.Now().Sub(c.base):
		// Stopped, or the reply came (and Start's other work ran) too late
		// for a mastership: the lock is left to the loop, which releases it.
		ls.tookLock(took.term)
		return nil
	}
	ls.inElection = true
	c.bus.emit(topicElectionStarted, payload{})
	return c.becomeMaster(ctx, ls, took.term, took.sent, took.registered)
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
