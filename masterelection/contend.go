package masterelection

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// maxLostInfos bounds lostAcquires.infos.
const maxLostInfos = 16

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

// add records an acquire whose reply was lost, with the info it sent.
func (la *lostAcquires) add(info []byte) {
	if info == nil || len(la.infos) == maxLostInfos {
		la.unknown = true
		return
	}
	la.infos = append(la.infos, info)
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

// contend runs the acquire script once. It returns the new mastership, or
// nil and the delay before the next check.
func (m *MasterElection) contend(ctx context.Context, ls *loopState) (*mastership, time.Duration) {
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

	l := m.newMastership(ctx, res.Term, m.deadlineAfter(sent))
	ls.tookLock(res.Term)
	m.noteTerm(res.Term)
	m.mastership.Store(l)
	m.log.Info().Int64("term", res.Term).Msg("became master")
	m.bus.emit(topicMasterAcquired, payload{term: res.Term, mastership: l})
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
