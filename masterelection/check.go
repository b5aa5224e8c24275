package masterelection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/internal/rdb"
)

// check runs the check script and decides what followLoop does next: contend
// (after the returned delay) or check again (after it).
func (c *core) check(ctx context.Context, ls *loopState) (contend bool, next time.Duration) {
	sent := c.clock.Now()
	st, err := c.readLock(ctx, ls, sent)
	replied := c.clock.Now()
	if err != nil {
		if ctx.Err() == nil {
			c.emitError(fmt.Errorf("check master lock: %w", err))
		}
		return ls.inElection && c.contends(), ls.retry.next(c.cfg)
	}
	ls.retry.reset()
	dataLost := c.noteLock(ls, st)
	if st.Exists {
		c.noteTerm(st.Term)
		if st.Garbage != "" {
			c.emitError(fmt.Errorf("%w: %s", ErrGarbage, st.Garbage))
		}
		if st.NodeID == c.cfg.NodeID && c.ownNodeIDHolds(ctx, ls, st, dataLost, sent, replied) {
			return c.contends(), 0 // a lock of ours outlived its mastership and was released
		}
	}
	return c.afterCheck(ls, st, dataLost)
}

// takeFirstLook takes Start's look at the lock (Start's first round trip
// asked the check's questions) as the first election's check when it found
// the lock held by another node: the process resolves as slave without an
// acquire bound to fail (or, not a candidate, a check of its own), and
// looks again when the lock would expire. ok is false, and the first
// attempt goes on as before, when there is no such look: the lock was free,
// this node id's, garbage, without a TTL, expired since, or not answered.
func (c *core) takeFirstLook(ls *loopState) (next time.Duration, ok bool) {
	look := ls.firstLook
	ls.firstLook = nil
	if look == nil || !ls.unresolved {
		return 0, false
	}
	st := look.st
	if !st.Exists || st.NodeID == c.cfg.NodeID || st.Garbage != "" || st.TermGarbage || st.TTL < 0 ||
		c.clock.Now().Sub(look.at) >= st.TTL { // the lock the look saw has expired since
		return 0, false
	}
	dataLost := c.noteLock(ls, st)
	c.noteTerm(st.Term)
	_, next = c.afterCheck(ls, st, dataLost)
	// The TTL was read when the look was answered.
	return max(next-c.clock.Now().Sub(look.at), 0), true
}

// readLock is check's script call, sent at sent: the check alone, or with
// the slave's heartbeat when one is due.
func (c *core) readLock(ctx context.Context, ls *loopState, sent time.Time) (rdb.MasterState, error) {
	limit := c.opTimeout()
	if ls.unresolved {
		limit = c.startTimeout()
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if c.members.beatDue(sent) {
		return c.members.checkBeat(cctx)
	}
	return rdb.Check(cctx, c.client, c.keys)
}

// noteLock records in ls what a check read of the lock, and reports whether
// Redis lost data: the term key is never deleted and only grows, so missing,
// or below a term seen on it, it tells that.
func (c *core) noteLock(ls *loopState, st rdb.MasterState) (dataLost bool) {
	dataLost = (st.TermMissing || st.Term < c.observedTerm.Load()) && !st.TermGarbage
	if !dataLost {
		ls.lossWait = time.Time{}
	}
	if !st.Exists || st.NodeID != c.cfg.NodeID {
		ls.lockNotOurs()
	}
	ls.next = st.Next
	if st.Exists {
		ls.yielded = false
	}
	if st.TermMissing {
		ls.claim = notice{} // Redis lost its data: nothing to confirm a notice with
	} else {
		c.confirmClaim(ls, st.NodeID, st.Term)
	}
	return dataLost
}

// ownNodeIDHolds handles a lock held under this process's node id that is
// not a current mastership of this process: a lock of its own that
// outlived its mastership is released (it reports true then); one of a
// twin is reported; one that may be its own is left to expire.
func (c *core) ownNodeIDHolds(ctx context.Context, ls *loopState, st rdb.MasterState, dataLost bool, sent, replied time.Time) (released bool) {
	switch {
	case ls.heldTerm != 0 && st.Term == ls.heldTerm:
		return c.releaseStale(ctx, st.Term)
	case dataLost:
		// The term key is gone or behind (a data loss, an eviction): the
		// lock is most likely this process's own from before, which the
		// renew script no longer accepts (it checks the term key). Nothing
		// tells it from a twin's; it is left to expire, which the data-loss
		// wait outlasts anyway.
	case ls.maybeHeld:
		// Ours from an acquire whose reply was lost, or a twin's with our
		// node id. Either way it is left to expire (releasing a twin's lock
		// would make two masters); it is reported when it is certainly a
		// twin's.
		if why := c.twinEvidence(ctx, ls, st, sent, replied); why != "" {
			ls.maybeHeld, ls.lostAcquires = false, lostAcquires{}
			c.emitError(fmt.Errorf("%w: %q (term %d): %s", ErrDuplicateNodeID, c.cfg.NodeID, st.Term, why))
		}
	default:
		c.emitError(fmt.Errorf("%w: %q (term %d)", ErrDuplicateNodeID, c.cfg.NodeID, st.Term))
	}
	return false
}

// twinEvidence tells why the lock st, found under this process's node id
// while an acquire's reply may have been lost, is certainly not the work of
// such an acquire but of a twin (another process with the same NodeID), or
// "" when it may be ours. sent and replied bracket the check that read st.
//
// An acquire that took the lock wrote master_process as the info it sent
// plus the term, and every lost acquire's info differs (its LastSeen is its
// send time), so a master_process of the lock's term that none of them sent
// was written by a twin. And this process never renews a term it did not
// learn, so a lock of that term whose expiry moved later was renewed by a
// twin. A twin that does neither (its reply was lost too, or it acquired at
// the same clock reading with the same info, as on a coarse clock) cannot
// be told from our own lost reply: that lock is left to expire unreported.
func (c *core) twinEvidence(ctx context.Context, ls *loopState, st rdb.MasterState, sent, replied time.Time) string {
	la := &ls.lostAcquires
	if why := c.renewedByAnother(la, st, sent, replied); why != "" {
		return why
	}
	if la.unknown || len(la.infos) == 0 || la.infoChecked {
		return ""
	}
	return c.writtenByAnother(ctx, la, st)
}

// renewedByAnother is twinEvidence's look at the lock's expiry: it tells
// that the lock of st was renewed since it was last seen, or "" when its
// expiry has not moved later. It keeps the expiry seen in la.
func (c *core) renewedByAnother(la *lostAcquires, st rdb.MasterState, sent, replied time.Time) string {
	if st.TTL < 0 {
		return ""
	}
	lo, hi := sent.Add(st.TTL), replied.Add(st.TTL)
	if la.term != st.Term {
		la.term, la.expiry, la.since, la.infoChecked = st.Term, hi, sent, false
		return ""
	}
	// Between two reads of an unrenewed lock the estimates differ by the
	// clocks' rate difference (StepDownMargin per LockTTL at most) and
	// PTTL's rounding.
	slack := 2*time.Millisecond + time.Duration(float64(c.cfg.StepDownMargin)*float64(sent.Sub(la.since))/float64(c.cfg.LockTTL))
	if lo.After(la.expiry.Add(slack)) {
		return fmt.Sprintf("the lock was renewed (its expiry moved %v later), and this process never renews a term it did not learn",
			lo.Sub(la.expiry).Round(time.Millisecond))
	}
	if hi.Before(la.expiry) {
		la.expiry = hi
	}
	return ""
}

// writtenByAnother is twinEvidence's look at master_process: it tells that
// an acquire this process did not send wrote it for the lock of st, or ""
// when one of the lost acquires (la) may have.
func (c *core) writtenByAnother(ctx context.Context, la *lostAcquires, st rdb.MasterState) string {
	gctx, cancel := context.WithTimeout(ctx, c.opTimeout())
	raw, err := c.client.Get(gctx, c.keys.MasterProcess).Bytes()
	cancel()
	switch {
	case errors.Is(err, redis.Nil):
		return ""
	case err != nil:
		if ctx.Err() == nil {
			c.emitError(fmt.Errorf("read %s: %w", c.keys.MasterProcess, err))
		}
		return ""
	}
	written, term, ok := rdb.SplitMasterProcess(raw)
	if !ok || term != st.Term {
		return "" // written for another lock: no evidence about this one
	}
	la.infoChecked = la.term == st.Term
	for _, info := range la.infos {
		if bytes.Equal(info, written) {
			return ""
		}
	}
	return "its master_process was written by an acquire that this process did not send"
}

// releaseStale deletes a lock that carries our node id but that we are not
// master of: a mastership of ours under term that we stepped down from while
// the lock lived on. term pins the release to that lock.
func (c *core) releaseStale(ctx context.Context, term int64) bool {
	rctx, cancel := context.WithTimeout(ctx, c.opTimeout())
	defer cancel()
	ok, err := rdb.Release(rctx, c.client, c.keys, c.cfg.NodeID, term)
	if err != nil {
		c.emitError(fmt.Errorf("release stale master lock: %w", err))
		return false
	}
	if ok {
		c.log.Info().Int64("term", term).Msg("released a lock left from an earlier mastership")
	}
	return ok
}

// confirmClaim compares the pending acquired notice with what Redis said:
// holder holds the lock (or nobody, "") and term is the last minted term. A
// notice that claims a term above it was not sent by a lock script of this
// lock: it is reported, once, and forgotten, having changed nothing.
func (c *core) confirmClaim(ls *loopState, holder string, term int64) {
	claim := ls.claim
	if claim.Term == 0 {
		return
	}
	ls.claim = notice{}
	if claim.Term > term {
		c.emitError(fmt.Errorf("%w: %.96q on %s claims that %q took the lock with term %d, but Redis has term %d held by %q: ignored",
			ErrUnconfirmedNotice, claim.raw, c.keys.Events, claim.NodeID, claim.Term, term, holder))
	}
}
