package masterelection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/scripts"
)

// check runs the check script and decides what followLoop does next: contend
// (after the returned delay) or check again (after it).
func (m *MasterElection) check(ctx context.Context, ls *loopState) (contend bool, next time.Duration) {
	sent := m.clock.Now()
	st, err := m.readLock(ctx, ls, sent)
	replied := m.clock.Now()
	if err != nil {
		if ctx.Err() == nil {
			m.emitError(fmt.Errorf("check master lock: %w", err))
		}
		return ls.inElection && m.contends(), ls.retry.next(m.cfg)
	}
	ls.retry.reset()
	dataLost := m.noteLock(ls, st)
	if !st.Exists {
		return m.lockFree(ls, st, dataLost)
	}
	m.noteTerm(st.Term)
	if st.Garbage != "" {
		m.emitError(fmt.Errorf("%w: %s", ErrGarbage, st.Garbage))
	}
	if st.NodeID == m.cfg.NodeID && m.ownNodeIDHolds(ctx, ls, st, dataLost, sent, replied) {
		return m.contends(), 0 // a lock of ours outlived its mastership and was released
	}
	m.resolveAsSlave(ls)
	return false, m.untilExpiry(st.TTL)
}

// readLock is check's script call, sent at sent: the check alone, or with
// the slave's heartbeat when one is due.
func (m *MasterElection) readLock(ctx context.Context, ls *loopState, sent time.Time) (scripts.MasterState, error) {
	limit := m.opTimeout()
	if ls.unresolved {
		limit = m.startTimeout()
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if m.beatDue(sent) {
		return m.checkBeat(cctx)
	}
	return scripts.Check(cctx, m.client, m.keys)
}

// noteLock records in ls what a check read of the lock, and reports whether
// Redis lost data: the term key is never deleted and only grows, so missing,
// or below a term seen on it, it tells that.
func (m *MasterElection) noteLock(ls *loopState, st scripts.MasterState) (dataLost bool) {
	dataLost = (st.TermMissing || st.Term < m.ObservedTerm()) && !st.TermGarbage
	if !dataLost {
		ls.lossWait = time.Time{}
	}
	if !st.Exists || st.NodeID != m.cfg.NodeID {
		ls.lockNotOurs()
	}
	ls.next = st.Next
	if st.Exists {
		ls.yielded = false
	}
	if st.TermMissing {
		ls.claim = notice{} // Redis lost its data: nothing to confirm a notice with
	} else {
		m.confirmClaim(ls, st.NodeID, st.Term)
	}
	return dataLost
}

// lockFree decides what to do on a free lock: wait out a data loss, contend
// in this process's turn, or (not a candidate) stay slave.
func (m *MasterElection) lockFree(ls *loopState, st scripts.MasterState, dataLost bool) (contend bool, next time.Duration) {
	if wait := m.dataLossWait(ls, dataLost); wait > 0 {
		return false, wait
	}
	if m.contends() {
		return true, m.contendDelay(ls, st.Term, false)
	}
	m.resolveAsSlave(ls)
	return false, m.cfg.CheckInterval
}

// ownNodeIDHolds handles a lock held under this process's node id that is
// not a current mastership of this process: a lock of its own that
// outlived its mastership is released (it reports true then); one of a
// twin is reported; one that may be its own is left to expire.
func (m *MasterElection) ownNodeIDHolds(ctx context.Context, ls *loopState, st scripts.MasterState, dataLost bool, sent, replied time.Time) (released bool) {
	switch {
	case ls.heldTerm != 0 && st.Term == ls.heldTerm:
		return m.releaseStale(ctx, st.Term)
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
		if why := m.twinEvidence(ctx, ls, st, sent, replied); why != "" {
			ls.maybeHeld, ls.lostAcquires = false, lostAcquires{}
			m.emitError(fmt.Errorf("%w: %q (term %d): %s", ErrDuplicateNodeID, m.cfg.NodeID, st.Term, why))
		}
	default:
		m.emitError(fmt.Errorf("%w: %q (term %d)", ErrDuplicateNodeID, m.cfg.NodeID, st.Term))
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
func (m *MasterElection) twinEvidence(ctx context.Context, ls *loopState, st scripts.MasterState, sent, replied time.Time) string {
	la := &ls.lostAcquires
	if st.TTL >= 0 {
		lo, hi := sent.Add(st.TTL), replied.Add(st.TTL)
		if la.term == st.Term {
			// Between two reads of an unrenewed lock the estimates differ by
			// the clocks' rate difference (StepDownMargin per LockTTL at
			// most) and PTTL's rounding.
			slack := 2*time.Millisecond + time.Duration(float64(m.cfg.StepDownMargin)*float64(sent.Sub(la.since))/float64(m.cfg.LockTTL))
			if lo.After(la.expiry.Add(slack)) {
				return fmt.Sprintf("the lock was renewed (its expiry moved %v later), and this process never renews a term it did not learn",
					lo.Sub(la.expiry).Round(time.Millisecond))
			}
			if hi.Before(la.expiry) {
				la.expiry = hi
			}
		} else {
			la.term, la.expiry, la.since, la.infoChecked = st.Term, hi, sent, false
		}
	}
	if la.unknown || len(la.infos) == 0 || la.infoChecked {
		return ""
	}
	gctx, cancel := context.WithTimeout(ctx, m.opTimeout())
	raw, err := m.client.Get(gctx, m.keys.MasterProcess).Bytes()
	cancel()
	switch {
	case errors.Is(err, redis.Nil):
		return ""
	case err != nil:
		if ctx.Err() == nil {
			m.emitError(fmt.Errorf("read %s: %w", m.keys.MasterProcess, err))
		}
		return ""
	}
	written, term, ok := scripts.SplitMasterProcess(raw)
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

// dataLossWait returns how long to hold back before contending when the
// term key is missing (or below a term seen on it) although this process has
// seen a term on the lock name: Redis lost its data, and a master elected
// before may still believe it is master for up to LockTTL after its last
// renewal, which came before the loss. Waiting LockTTL from the first sight
// of the loss outlasts every such belief. 0 means contend now.
//
// The wait cannot be skipped by a path that goes to the lock without a
// check (Start, a release notice, a candidacy change): the acquire script
// refuses to write while the term key is behind the seen term it is given
// (seenForAcquire), answering DataLoss, and contend starts the wait here.
func (m *MasterElection) dataLossWait(ls *loopState, dataLost bool) time.Duration {
	if !dataLost || m.ObservedTerm() == 0 {
		return 0
	}
	now := m.clock.Now()
	if !ls.lossWait.IsZero() && m.ObservedTerm() != ls.lossTerm {
		// A master was elected after the loss that set lossWait (its term
		// came by a notice, between two checks that both found the key
		// gone): this is a new loss, and its master must fence itself too.
		ls.lossWait = time.Time{}
	}
	if ls.lossWait.IsZero() {
		ls.lossWait, ls.lossTerm = now.Add(m.cfg.LockTTL), m.ObservedTerm()
		m.emitError(fmt.Errorf("%w: key %q is gone or behind term %d; contending after LockTTL (%v), when every earlier master has fenced itself",
			ErrDataLoss, m.keys.Term, m.ObservedTerm(), m.cfg.LockTTL))
	}
	if rest := ls.lossWait.Sub(now); rest > 0 {
		return min(rest, m.cfg.CheckInterval)
	}
	return 0
}

// releaseStale deletes a lock that carries our node id but that we are not
// master of: a mastership of ours under term that we stepped down from while
// the lock lived on. term pins the release to that lock.
func (m *MasterElection) releaseStale(ctx context.Context, term int64) bool {
	rctx, cancel := context.WithTimeout(ctx, m.opTimeout())
	defer cancel()
	ok, err := scripts.Release(rctx, m.client, m.keys, m.cfg.NodeID, term)
	if err != nil {
		m.emitError(fmt.Errorf("release stale master lock: %w", err))
		return false
	}
	if ok {
		m.log.Info().Int64("term", term).Msg("released a lock left from an earlier mastership")
	}
	return ok
}

// untilExpiry is when to look at a lock with remaining time ttl again: at
// the next CheckInterval, or just after it expires if that comes first.
func (m *MasterElection) untilExpiry(ttl time.Duration) time.Duration {
	if ttl >= 0 && ttl < m.cfg.CheckInterval {
		return ttl + time.Millisecond
	}
	return m.cfg.CheckInterval
}
