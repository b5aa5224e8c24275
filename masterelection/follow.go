package masterelection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// lostAcquires is what followLoop knows about the acquires whose reply was lost
// since maybeHeld was set, to tell a lock they may have taken from a twin's
// (another process running with the same NodeID).
type lostAcquires struct {
	infos   [][]byte // the master_process values they sent, without the term
	unknown bool     // one sent none, or more were lost than infos keeps
	// The lock last found under our node id while maybeHeld: its term, the
	// latest instant (local clock) at which it can expire unless renewed,
	// and when that was seen.
	term          int64
	expiry, since time.Time
	infoChecked   bool // master_process was compared for term (it changes only with the term)
}

// maxLostInfos bounds lostAcquires.infos.
const maxLostInfos = 16

// add records an acquire whose reply was lost, with the info it sent.
func (la *lostAcquires) add(info []byte) {
	if info == nil || len(la.infos) == maxLostInfos {
		la.unknown = true
		return
	}
	la.infos = append(la.infos, info)
}

// followLoop is the slave role: check the lock every CheckInterval and when it
// would expire, contend when it is free (in its turn: contendDelay). It
// returns the new mastership, or nil when ctx ends.
func (m *MasterElection) followLoop(ctx context.Context, ls *loopState) *leadership {
	contend := ls.unresolved && m.contends() // Start's first attempt goes straight to the lock
	var due time.Time                        // when the timer fires: a pending attempt (contend) or the next check
	timer := m.clock.NewTimer(0)
	defer timer.Stop()
	arm := func(d time.Duration) {
		due = m.clock.Now().Add(d)
		timer.Reset(d)
	}
	// askSoon arms the timer for a check after an acquired notice: within
	// noticeCheckSpread, unless one is due sooner. Every slave hears the
	// notice at once; spread, their N−1 checks neither reach Redis at once
	// nor wake at once in a process that runs many elections.
	askSoon := func() {
		if d := m.noticeCheckDelay(ls); m.clock.Now().Add(d).Before(due) {
			arm(d)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.candidacy:
			contend = false // no pending attempt outlives a change of candidacy
			if m.contends() {
				arm(0) // look at the lock now; contend if it is free
			}
		case <-ls.awaitID:
			// The first registration made the node id this process's
			// (twins.go): it may contend from now on.
			ls.awaitID = nil
			m.awaitingID.Store(false)
			if m.contends() && !contend {
				arm(0)
			}
		case req := <-m.transfers:
			req.reply(ErrNotMaster)
		case req := <-m.stops:
			ls.stopRequested = true // no mastership to end: Stop stops the loop
			close(req.done)
			return nil
		case <-ls.feedConfirmed:
			// The notice feed is in place only now (Start's first attempt
			// does not wait for it): a release announced between an earlier
			// answer and now was missed, so ask Redis again, once the first
			// registration (which the first answer set off) is done: the two
			// at once would take two of the client's connections, and the
			// second would stay open, idle, for the client's life.
			ls.feedConfirmed = nil
			if !ls.unresolved && !contend {
				select {
				case <-ls.firstRegistered:
					arm(0)
				default:
					ls.awaitRegistered = ls.firstRegistered
				}
			}
		case <-ls.awaitRegistered:
			ls.awaitRegistered = nil
			if !contend {
				arm(0)
			}
		case n := <-m.notices:
			switch m.followHint(ls, n) {
			case hintContend:
				wait := time.Duration(0)
				if n.To != m.cfg.NodeID {
					wait = m.contendDelay(ls, n.Term, true)
				}
				// A notice never postpones an attempt already due: a
				// stream of forged ones would hold it back for good.
				if !contend || m.clock.Now().Add(wait).Before(due) {
					contend = true
					arm(wait)
				}
			case hintAsk:
				switch {
				case ls.unresolved: // Start's first attempt asks Redis anyway
				case !contend:
					askSoon() // learn the new master and its term from Redis
				case !ls.yielded:
					// Someone took the lock while this process waited its
					// turn: ask Redis instead of sending an acquire that
					// would fail. Once per free lock, so that forged
					// notices cannot hold this process back for good.
					ls.yielded, contend = true, false
					arm(m.noticeCheckDelay(ls)) // in place of the pending attempt
				}
			}
		case <-timer.C():
			if ls.unresolved && ls.feedConfirmed != nil {
				select {
				case <-ls.feedConfirmed:
					// In place before Start's first attempt is sent: that
					// attempt misses nothing, and no second look is owed
					// (which would also run beside the first registration
					// and open a second connection).
					ls.feedConfirmed = nil
				default:
				}
			}
			var next time.Duration
			if contend {
				l, wait := m.contend(ctx, ls)
				if l != nil {
					return l
				}
				contend, next = false, wait
			} else {
				contend, next = m.check(ctx, ls)
			}
			arm(next)
		}
	}
}

// check runs the check script and decides what followLoop does next: contend
// (after the returned delay) or check again (after it).
func (m *MasterElection) check(ctx context.Context, ls *loopState) (contend bool, next time.Duration) {
	sent := m.clock.Now()
	limit := m.opTimeout()
	if ls.unresolved {
		limit = m.startTimeout()
	}
	cctx, cancel := context.WithTimeout(ctx, limit)
	var st scripts.MasterState
	var err error
	if m.beatDue(sent) {
		st, err = m.checkBeat(cctx)
	} else {
		st, err = scripts.Check(cctx, m.client, m.keys)
	}
	cancel()
	replied := m.clock.Now()
	if err != nil {
		if ctx.Err() == nil {
			m.emitError(fmt.Errorf("check master lock: %w", err))
		}
		return ls.inElection && m.contends(), ls.retry.next(m.cfg)
	}
	ls.retry.reset()
	// The term key is never deleted and only grows: missing, or below a
	// term seen on it, it tells that Redis lost data.
	dataLost := (st.TermMissing || st.Term < m.ObservedTerm()) && !st.TermGarbage
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
	if !st.Exists {
		if wait := m.dataLossWait(ls, dataLost); wait > 0 {
			return false, wait
		}
		if m.contends() {
			return true, m.contendDelay(ls, st.Term, false)
		}
		m.resolveAsSlave(ls)
		return false, m.cfg.CheckInterval
	}
	m.noteTerm(st.Term)
	if st.Garbage != "" {
		m.emitError(fmt.Errorf("%w: %s", ErrGarbage, st.Garbage))
	}
	if st.NodeID == m.cfg.NodeID {
		switch {
		case ls.heldTerm != 0 && st.Term == ls.heldTerm:
			if m.releaseStale(ctx, st.Term) {
				return m.contends(), 0
			}
		case dataLost:
			// The term key is gone or behind (a data loss, an eviction): the
			// lock is most likely this process's own from before, which
			// the renew script no longer accepts (it checks the term key).
			// Nothing tells it from a twin's; it is left to expire, which
			// the data-loss wait outlasts anyway.
		case ls.maybeHeld:
			// Ours from an acquire whose reply was lost, or a twin's with
			// our node id. Either way it is left to expire (releasing a
			// twin's lock would make two masters); it is reported when it
			// is certainly a twin's.
			if why := m.twinEvidence(ctx, ls, st, sent, replied); why != "" {
				ls.maybeHeld, ls.lostAcquires = false, lostAcquires{}
				m.emitError(fmt.Errorf("%w: %q (term %d): %s", ErrDuplicateNodeID, m.cfg.NodeID, st.Term, why))
			}
		default:
			m.emitError(fmt.Errorf("%w: %q (term %d)", ErrDuplicateNodeID, m.cfg.NodeID, st.Term))
		}
	}
	m.resolveAsSlave(ls)
	return false, m.untilExpiry(st.TTL)
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

// seenForAcquire is the seen-term argument of the acquire script: the
// observed term, or 0 once this process has waited out the data loss it saw
// last (its wait has passed, and no newer term was seen since it began).
func (m *MasterElection) seenForAcquire(ls *loopState) int64 {
	seen := m.ObservedTerm()
	if !ls.lossWait.IsZero() && ls.lossTerm == seen && !m.clock.Now().Before(ls.lossWait) {
		return 0
	}
	return seen
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

// contend runs the acquire script once. It returns the new mastership, or
// nil and the delay before the next check.
func (m *MasterElection) contend(ctx context.Context, ls *loopState) (*leadership, time.Duration) {
	if !m.contends() {
		return nil, 0 // no longer a candidate since the attempt was set: look at the lock instead
	}
	if rest := ls.holdOff.Sub(m.clock.Now()); rest > 0 {
		return nil, rest // this process just handed the lock over
	}
	if !ls.inElection {
		ls.inElection = true
		m.bus.emit(topicElectionStarted, payload{})
	}
	info, err := m.masterInfoJSON()
	if err != nil {
		m.emitError(err)
		info = nil
	}
	sent := m.clock.Now()
	limit := m.opTimeout()
	if ls.unresolved {
		// Start's: a slow reply is safe (the deadline counts from sent),
		// and in a fleet starting at once it is slow; but one that comes
		// after the deadline would give a mastership already over.
		limit = min(m.startTimeout(), m.cfg.LockTTL-m.cfg.StepDownMargin)
	}
	actx, cancel := context.WithTimeout(ctx, limit)
	res, err := m.acquire(actx, info, m.seenForAcquire(ls))
	cancel()
	if err != nil {
		if res.Term != 0 {
			ls.tookLock(res.Term) // acquired, but void (too few replicas) and its release failed
		} else {
			ls.maybeHeld = true // the script may have run although its reply was lost
			ls.lostAcquires.add(info)
		}
		if ctx.Err() == nil {
			m.emitError(fmt.Errorf("acquire master lock: %w", err))
		}
		return nil, ls.retry.next(m.cfg)
	}
	ls.retry.reset()
	if res.DataLoss {
		// The lock is free, but Redis lost a term this process had seen:
		// wait, whichever path brought this attempt (see dataLossWait).
		return nil, max(m.dataLossWait(ls, true), m.cfg.retryInterval())
	}
	if res.TermGarbage {
		// Someone else's data in the term key: herd writes nothing over it.
		m.emitError(fmt.Errorf("%w: %s", ErrGarbage, res.Garbage))
		return nil, m.cfg.CheckInterval
	}
	if res.Reserved {
		// A Transfer reserved the free lock for another node: look again
		// when the reservation ends, unless that node took it.
		m.noteTerm(res.HolderTerm)
		m.complete(ls, false)
		return nil, m.untilExpiry(res.TTL)
	}
	if res.Term == 0 {
		m.noteTerm(res.HolderTerm)
		if res.Holder == m.cfg.NodeID {
			// Ours from an attempt whose reply was lost: an earlier one, or
			// this very call, which go-redis sent again after losing its reply
			// (MaxRetries) and which then found its own lock. Or a twin's.
			// check sorts it out, as after any lost reply.
			ls.maybeHeld = true
			ls.lostAcquires.add(info)
			return nil, 0
		}
		if res.Garbage != "" {
			m.emitError(fmt.Errorf("%w: %s", ErrGarbage, res.Garbage))
		}
		m.complete(ls, false)
		return nil, m.untilExpiry(res.TTL)
	}

	l := m.newLeadership(ctx, res.Term, m.deadlineAfter(sent))
	ls.tookLock(res.Term)
	m.noteTerm(res.Term)
	m.lead.Store(l)
	m.log.Info().Int64("term", res.Term).Msg("became master")
	m.bus.emit(topicMasterAcquired, payload{term: res.Term, lead: l})
	// The handlers' runners, waiting on their emitter channels, were made
	// runnable on this goroutine's processor, where they would wait until
	// this loop blocks or another processor wakes up to take them, behind
	// the registration and the slave tracker started below: most of a
	// handover's last phase (docs/performance.md, row 4). Yield once so
	// that OnMasterAcquired starts now. The next renewal is a
	// HeartbeatInterval away; a handler that computes without blocking
	// holds this loop for a scheduler time slice at worst, until another
	// processor takes the loop or the handler is preempted.
	runtime.Gosched()
	m.complete(ls, true)
	m.setRole(registry.RoleMaster, res.Term)
	m.bg.Add(1)
	go m.trackSlaves(l)
	return l, 0
}

// acquire runs the acquire script, waiting for replicas when configured.
// A lock acquired with too few acknowledgements is released at once (pinned
// to its term) and reported as an error wrapping ErrReplicas; when that
// release fails, the error comes with the term, so the loop knows the lock
// that may still be its own.
func (m *MasterElection) acquire(ctx context.Context, info []byte, seen int64) (scripts.Acquired, error) {
	if m.cfg.WaitReplicas <= 0 {
		return scripts.Acquire(ctx, m.client, m.keys, m.cfg.NodeID, m.cfg.LockTTL, info, seen)
	}
	res, acked, err := scripts.AcquireReplicated(ctx, m.client, m.keys, m.cfg.NodeID, m.cfg.LockTTL, info, seen, m.cfg.replication())
	if err != nil || res.Term == 0 || acked >= int64(m.cfg.WaitReplicas) {
		return res, err
	}
	if _, rerr := scripts.Release(ctx, m.client, m.keys, m.cfg.NodeID, res.Term); rerr != nil {
		return scripts.Acquired{Term: res.Term}, fmt.Errorf("%w: %d of %d acknowledged term %d, and its release failed: %w", ErrReplicas, acked, m.cfg.WaitReplicas, res.Term, rerr)
	}
	return scripts.Acquired{}, fmt.Errorf("%w: %d of %d acknowledged term %d, released", ErrReplicas, acked, m.cfg.WaitReplicas, res.Term)
}

// untilExpiry is when to look at a lock with remaining time ttl again: at
// the next CheckInterval, or just after it expires if that comes first.
func (m *MasterElection) untilExpiry(ttl time.Duration) time.Duration {
	if ttl >= 0 && ttl < m.cfg.CheckInterval {
		return ttl + time.Millisecond
	}
	return m.cfg.CheckInterval
}

// noticeCheckSpread bounds, as a fraction of CheckInterval, the wait
// before the check that an acquired notice sets off (noticeCheckDelay).
const noticeCheckSpread = 4

// noticeCheckDelay is a random wait in [0, CheckInterval/noticeCheckSpread]
// before the check that an acquired notice sets off on a slave. Routing
// verifies a new term itself (pubsub), and a slave that contends gives way
// at the notice. One exception: a slave waiting out a data loss
// (ls.lossWait) checks at once. A master elected since the loss must be
// known before Redis loses its data again, or this slave would contend at
// the end of a wait that did not cover that master (a soak schedule with
// two restarts 6 ms apart had two masters for 25 ms).
func (m *MasterElection) noticeCheckDelay(ls *loopState) time.Duration {
	if !ls.lossWait.IsZero() {
		return 0
	}
	return rand.N(m.cfg.CheckInterval/noticeCheckSpread + 1)
}

func (m *MasterElection) jitter() time.Duration {
	if m.cfg.ElectionJitter <= 0 {
		return 0
	}
	return rand.N(m.cfg.ElectionJitter + 1)
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
func (m *MasterElection) contendDelay(ls *loopState, term int64, released bool) time.Duration {
	if ls.next.Term == 0 || ls.next.Term != term || len(ls.next.Order) == 0 {
		if released {
			return 0
		}
		return m.jitter()
	}
	// Only the first maxSuccession places count, whatever the key holds
	// (anyone who may write it could list thousands): every wait stays
	// within ElectionJitter.
	step := m.cfg.ElectionJitter / (maxSuccession + 1)
	if i := ls.next.Rank(m.cfg.NodeID); i >= 0 && i < maxSuccession {
		return time.Duration(i) * step
	}
	first := time.Duration(min(len(ls.next.Order), maxSuccession)) * step
	if rest := m.cfg.ElectionJitter - first; rest > 0 {
		return first + rand.N(rest+1)
	}
	return first
}
