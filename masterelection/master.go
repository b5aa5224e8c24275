package masterelection

import (
	"context"
	"fmt"
	"time"

	"github.com/herdkit/herd/internal/clock"
	"github.com/herdkit/herd/internal/rdb"
)

// masterLoop is the master role: renew until the self-fencing deadline, else
// step down. It returns when the mastership has ended or ctx ends (Stop then
// resigns). The renewal attempts and their timers are renewals' business.
func (c *core) masterLoop(ctx context.Context, ls *loopState, l *mastership) {
	rn := c.newRenewals(ctx, ls, l)
	defer rn.stop()
	for {
		var ended string
		select {
		case <-ctx.Done():
			return
		case <-rn.deadline.C():
			ended = rn.deadlinePassed()
		case <-rn.due.C():
			ended = rn.renewDue()
		case r := <-rn.results:
			ended = rn.outcome(r)
		case <-c.candidacy:
			if !c.candidate.Load() {
				c.handOver(ctx, ls, l)
				return
			}
		case req := <-c.transfers:
			c.transferOut(ctx, ls, l, req)
			return
		case req := <-c.stops:
			c.stopAsMaster(ls, l, req)
			return
		case <-ls.feedConfirmed:
			// Start returned as master before the feed was in place: no
			// release could be missed meanwhile, so no look is owed when
			// this mastership ends (follower.feedConfirmed).
			ls.feedConfirmed = nil
		case n := <-c.notices:
			if now := c.clock.Now(); c.masterHint(ls, l, n, now) == hintAsk {
				rn.attempt(now)
			}
		}
		if ended != "" {
			c.endMastership(l, ended)
			return
		}
	}
}

// renewals renews one mastership. Each renew attempt runs on a goroutine of
// its own, so that the master loop never waits on one: an attempt that has no
// answer after renewRetry (HeartbeatInterval/2) is joined by another, which
// go-redis sends on another connection, while the first stays in flight,
// since a slow link may still answer it. An attempt that fails is retried
// after a short backoff. The first success moves the deadline to its own
// send time + LockTTL - StepDownMargin; every attempt ends by the deadline in
// force when it was sent, and by maxRenewAttempts × renewRetry, so at most
// maxRenewAttempts are in flight. Only the master loop's goroutine uses it.
type renewals struct {
	c        *core
	ls       *loopState
	l        *mastership
	ctx      context.Context // the attempts' ctx, ended by stop
	cancel   context.CancelFunc
	results  chan renewOutcome // never full: at most maxRenewAttempts unread
	due      clock.Timer       // the next renewal, or the next attempt of an unanswered one
	deadline clock.Timer       // the self-fencing deadline

	inFlight int  // attempts started and not yet read from results
	pending  bool // a renewal is due and no attempt of it has succeeded
}

func (c *core) newRenewals(ctx context.Context, ls *loopState, l *mastership) *renewals {
	actx, cancel := context.WithCancel(ctx)
	return &renewals{
		c: c, ls: ls, l: l, ctx: actx, cancel: cancel,
		results:  make(chan renewOutcome, maxRenewAttempts),
		due:      c.clock.NewTimer(firstRenewal(c.cfg, l.remaining(c.clock.Now()))),
		deadline: c.clock.NewTimer(l.remaining(c.clock.Now())),
	}
}

// firstRenewal is when a mastership with remaining time left renews
// first: HeartbeatInterval after its acquire was sent, as every renewal
// after it comes HeartbeatInterval after the last one's send (renewed), or
// at once when that has passed, as when Start's first attempt took the
// lock (askTaking) and Start's other work ran before the mastership began.
func firstRenewal(cfg Config, remaining time.Duration) time.Duration {
	sinceSent := cfg.LockTTL - cfg.StepDownMargin - remaining
	return min(max(cfg.HeartbeatInterval-sinceSent, 0), cfg.HeartbeatInterval)
}

// stop ends the attempts in flight (run waits for them) and the timers.
func (rn *renewals) stop() {
	rn.cancel()
	rn.due.Stop()
	rn.deadline.Stop()
}

// deadlinePassed handles the deadline timer: the reason the mastership
// ends, or "" when a renewal moved the deadline since the timer was set.
func (rn *renewals) deadlinePassed() string {
	if rest := rn.l.remaining(rn.c.clock.Now()); rest > 0 {
		rn.deadline.Reset(rest)
		return ""
	}
	return "self-fencing deadline passed without a successful renewal"
}

// renewDue handles the renewal timer: a renewal is due, or the one due has
// no answer yet, and another attempt joins it.
func (rn *renewals) renewDue() string {
	now := rn.c.clock.Now()
	rest := rn.l.remaining(now)
	if rest <= 0 {
		return "self-fencing deadline passed without a successful renewal"
	}
	rn.pending = true
	rn.attempt(now)
	rn.due.Reset(min(rn.c.renewRetry(), rest))
	return ""
}

// attempt starts a renew attempt sent now, unless maxRenewAttempts are in
// flight or the deadline has passed.
func (rn *renewals) attempt(now time.Time) {
	c := rn.c
	rest := rn.l.remaining(now)
	if rn.inFlight >= maxRenewAttempts || rest <= 0 {
		return
	}
	rn.inFlight++
	rn.ls.renewAttempts.Add(1)
	go func() {
		defer rn.ls.renewAttempts.Done()
		rctx, cancel := context.WithTimeout(rn.ctx, min(rest, maxRenewAttempts*c.renewRetry()))
		ok, err := c.renew(rctx, rn.l.term)
		cancel()
		c.bus.obs.renewDone(rn.ctx, rn.l.term, now, ok, err)
		rn.results <- renewOutcome{sent: now, ok: ok, err: err}
	}()
}

// outcome applies the outcome of one attempt, and returns the reason the
// mastership ends, or "".
func (rn *renewals) outcome(r renewOutcome) string {
	c, ls, l := rn.c, rn.ls, rn.l
	rn.inFlight--
	now := c.clock.Now()
	switch {
	case rn.ctx.Err() != nil:
		return ""
	case r.err != nil && !rn.pending:
		// A straggler of a renewal that another attempt already made:
		// nothing is wrong with the mastership.
		c.log.Debug().Err(r.err).Int64("term", l.term).Msg("a renew attempt failed after another one succeeded")
		return ""
	case r.err != nil:
		rn.failed(r.err, now)
		return ""
	case !r.ok:
		// The lock is gone, for good: a renewal never recreates it, so no
		// other attempt of this term can succeed after this one.
		ls.lockGone()
		ls.claim = notice{}
		return "lock no longer held by this node and term"
	case !l.extend(c.deadlineAfter(r.sent)):
		// Too late: IsMaster has said false since the deadline, and a
		// mastership never comes back. The lock, renewed, is ours under
		// heldTerm: followLoop releases it.
		return "self-fencing deadline passed before a renewal's reply"
	}
	rn.renewed(r.sent, now)
	return ""
}

// failed handles an attempt of the renewal due that failed with err at now:
// an error event, and a retry soon when nothing else is in flight.
func (rn *renewals) failed(err error, now time.Time) {
	c := rn.c
	c.emitError(fmt.Errorf("renew master lock (term %d): %w", rn.l.term, err))
	if rn.inFlight == 0 {
		// Nothing else in flight: retry soon, not after renewRetry.
		rn.due.Reset(min(rn.ls.retry.next(c.cfg), c.renewRetry(), max(rn.l.remaining(now), 0)))
	}
}

// renewed handles a successful attempt sent at sent, whose deadline
// extend has moved: a claim older than it is confirmed, and the next
// renewal falls HeartbeatInterval after sent.
func (rn *renewals) renewed(sent, now time.Time) {
	c, ls, l := rn.c, rn.ls, rn.l
	ls.retry.reset()
	if !sent.Before(ls.claimAt) {
		c.confirmClaim(ls, c.cfg.NodeID, l.term)
	}
	rn.deadline.Reset(l.remaining(c.clock.Now()))
	if rn.pending {
		rn.pending = false
		rn.due.Reset(max(c.cfg.HeartbeatInterval-now.Sub(sent), 0))
	}
}

// maxRenewAttempts is how many renew attempts of one mastership may be in
// flight at once.
const maxRenewAttempts = 4

// renewOutcome is the outcome of one renew attempt.
type renewOutcome struct {
	sent time.Time // when the attempt was sent, on the local clock
	ok   bool      // the lock was renewed
	err  error
}

// renewRetry is how long a renew attempt goes unanswered before another
// one is sent: HeartbeatInterval/2, so that at least one more attempt fits
// before the self-fencing deadline (at least 2 × HeartbeatInterval −
// StepDownMargin after the renewal was due).
func (c *core) renewRetry() time.Duration {
	return max(c.cfg.HeartbeatInterval/2, time.Millisecond)
}

// renew runs the renew script, waiting for replicas when configured; too
// few acknowledgements make it an error wrapping ErrReplicas, so the
// self-fencing deadline is not extended.
func (c *core) renew(ctx context.Context, term int64) (bool, error) {
	if c.cfg.WaitReplicas <= 0 {
		return rdb.Renew(ctx, c.client, c.keys, c.cfg.NodeID, term, c.cfg.LockTTL)
	}
	ok, acked, err := rdb.RenewReplicated(ctx, c.client, c.keys, c.cfg.NodeID, term, c.cfg.LockTTL, c.cfg.replication())
	if err == nil && ok && acked < int64(c.cfg.WaitReplicas) {
		return false, fmt.Errorf("%w: %d of %d acknowledged the renewal", ErrReplicas, acked, c.cfg.WaitReplicas)
	}
	return ok, err
}
