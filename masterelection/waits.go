package masterelection

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// seenForAcquire is the seen-term argument of the acquire script: the
// observed term, or 0 once this process has waited out the data loss it saw
// last (its wait has passed, and no newer term was seen since it began).
func (c *core) seenForAcquire(ls *loopState) int64 {
	seen := c.observedTerm.Load()
	if !ls.lossWait.IsZero() && ls.lossTerm == seen && !c.clock.Now().Before(ls.lossWait) {
		return 0
	}
	return seen
}

// noticeCheckDelay is a random wait in [0, CheckInterval/noticeCheckSpread]
// before the check that an acquired notice sets off on a slave. Routing
// verifies a new term itself (pubsub), and a slave that contends gives way
// at the notice. One exception: a slave waiting out a data loss
// (ls.lossWait) checks at once. A master elected since the loss must be
// known before Redis loses its data again, or this slave would contend at
// the end of a wait that did not cover that master (a soak schedule with
// two restarts 6 ms apart had two masters for 25 ms).
func (c *core) noticeCheckDelay(ls *loopState) time.Duration {
	if !ls.lossWait.IsZero() {
		return 0
	}
	return rand.N(c.cfg.CheckInterval/noticeCheckSpread + 1)
}

func (c *core) jitter() time.Duration {
	if c.cfg.ElectionJitter <= 0 {
		return 0
	}
	return rand.N(c.cfg.ElectionJitter + 1)
}

// contendDelay is how long this process waits before contending for the
// lock of term, found free: released (a notice) or expired (a check). The
// master of term published its succession (ls.next, read by the last
// check): the slave it ranks i-th waits i steps of ElectionJitter /
// (maxSuccession + 1), and a slave it does not rank waits past them all
// plus a jitter, all within ElectionJitter, so failover is no slower than
// before. In a settled herd one acquire is sent, the first-ranked's, and
// the others give way when its acquired notice comes (followLoop); a
// dead or paused first-ranked slave costs one step. Without a succession
// for term, a released lock is contended at once and an expired one after
// a jitter, by every slave.
func (c *core) contendDelay(ls *loopState, term int64, released bool) time.Duration {
	if ls.next.Term == 0 || ls.next.Term != term || len(ls.next.Order) == 0 {
		if released {
			return 0
		}
		return c.jitter()
	}
	// Only the first maxSuccession places count, whatever the key holds
	// (anyone who may write it could list thousands): every wait stays
	// within ElectionJitter.
	step := c.cfg.ElectionJitter / (maxSuccession + 1)
	if i := ls.next.Rank(c.cfg.NodeID); i >= 0 && i < maxSuccession {
		return time.Duration(i) * step
	}
	first := time.Duration(min(len(ls.next.Order), maxSuccession)) * step
	if rest := c.cfg.ElectionJitter - first; rest > 0 {
		return first + rand.N(rest+1)
	}
	return first
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
func (c *core) dataLossWait(ls *loopState, dataLost bool) time.Duration {
	if !dataLost || c.observedTerm.Load() == 0 {
		return 0
	}
	now := c.clock.Now()
	if !ls.lossWait.IsZero() && c.observedTerm.Load() != ls.lossTerm {
		// A master was elected after the loss that set lossWait (its term
		// came by a notice, between two checks that both found the key
		// gone): this is a new loss, and its master must fence itself too.
		ls.lossWait = time.Time{}
	}
	if ls.lossWait.IsZero() {
		ls.lossWait, ls.lossTerm = now.Add(c.cfg.LockTTL), c.observedTerm.Load()
		c.emitError(fmt.Errorf("%w: key %q is gone or behind term %d; contending after LockTTL (%v), when every earlier master has fenced itself",
			ErrDataLoss, c.keys.Term, c.observedTerm.Load(), c.cfg.LockTTL))
	}
	if rest := ls.lossWait.Sub(now); rest > 0 {
		return min(rest, c.cfg.CheckInterval)
	}
	return 0
}

// untilExpiry is when to look at a lock with remaining time ttl again: at
// the next CheckInterval, or just after it expires if that comes first.
func (c *core) untilExpiry(ttl time.Duration) time.Duration {
	if ttl >= 0 && ttl < c.cfg.CheckInterval {
		return ttl + time.Millisecond
	}
	return c.cfg.CheckInterval
}

// noticeCheckSpread bounds, as a fraction of CheckInterval, the wait
// before the check that an acquired notice sets off (noticeCheckDelay).
const noticeCheckSpread = 4

// afterCheck decides what followLoop does after a check that found st
// (dataLost: Redis lost a term this process had seen): on a free lock, wait
// out a data loss, or contend in this process's turn; else, or when not a
// candidate, stay slave and look again when the lock would expire.
func (c *core) afterCheck(ls *loopState, st rdb.MasterState, dataLost bool) (contend bool, next time.Duration) {
	if !st.Exists {
		if wait := c.dataLossWait(ls, dataLost); wait > 0 {
			return false, wait
		}
		if c.contends() {
			return true, c.contendDelay(ls, st.Term, false)
		}
	}
	c.resolveAsSlave(ls)
	if !st.Exists {
		return false, c.cfg.CheckInterval
	}
	return false, c.untilExpiry(st.TTL)
}
