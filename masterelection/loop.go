package masterelection

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// loopState is owned by the run goroutine.
type loopState struct {
	unresolved bool            // the first election has not resolved yet
	inElection bool            // election-started was emitted and its election-completed not yet
	heldTerm   int64           // a lock of ours under this term may outlive our mastership (step-down on the deadline, a failed release); 0: none
	maybeHeld  bool            // an acquire's reply was lost: the lock may be ours under a term we never learnt
	lost       lostAcquires    // the acquires whose reply was lost since maybeHeld was set
	lossWait   time.Time       // after a data loss: do not contend before this instant
	lossTerm   int64           // the observed term when lossWait was set: a higher one means a newer loss
	claim      notice          // the acquired notice with the highest term that Redis has not yet been asked about
	claimAt    time.Time       // when claim arrived: only an answer to a call sent since can refute it
	holdOff    time.Time       // after a Transfer: do not contend before this instant
	retry      backoff         // after Redis errors
	subscribed <-chan struct{} // closed when the events subscription is confirmed; nil once follow has seen it
	stopped    bool            // Stop's request came (stop.go): run returns without another attempt

	// haltMembership stops the membership loop and waits for it (Stop's
	// resignation does so before the release: no registry write of this
	// process may follow it, Stop unregisters).
	haltMembership func()

	// renewals counts the renew attempts still running; run waits for them
	// before it returns. Only the attempts touch it besides run.
	renewals sync.WaitGroup
}

// tookLock records that the lock under term is this process's: it may
// outlive the mastership (a step-down on the deadline, a failed release),
// and follow releases it then.
func (ls *loopState) tookLock(term int64) { ls.heldTerm = term }

// lockGone records that no lock of this process's remains: it was released,
// or a renewal found it gone.
func (ls *loopState) lockGone() { ls.heldTerm = 0 }

// lockNotOurs records a check that found the lock free or another node's:
// no lock of ours lingers, and no lost acquire of ours took it.
func (ls *loopState) lockNotOurs() {
	ls.heldTerm, ls.maybeHeld, ls.lost = 0, false, lostAcquires{}
}

// run is the election's single loop: it owns the role, the timers and every
// Redis call of the election, alternating between follow (slave) and lead
// (master) until ctx ends. sub is the events subscription Start made (nil in
// standalone mode); run closes it.
func (m *MasterElection) run(ctx context.Context, sub *subscription) {
	defer m.closeDone()
	if m.cfg.Standalone {
		m.runStandalone(ctx)
		return
	}
	defer m.bg.Wait()
	memCtx, stopMembership := context.WithCancel(ctx)
	defer stopMembership()
	membershipDone := make(chan struct{})
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		defer close(membershipDone)
		m.membership(memCtx)
	}()
	var wg sync.WaitGroup
	closeNotices := m.listen(ctx, &wg, sub)
	defer wg.Wait()
	defer closeNotices()

	ls := &loopState{unresolved: true, subscribed: sub.confirmed}
	ls.haltMembership = func() {
		stopMembership()
		<-membershipDone
	}
	defer ls.renewals.Wait()
	for ctx.Err() == nil && !ls.stopped {
		if l := m.follow(ctx, ls); l != nil {
			m.leadLoop(ctx, ls, l)
		}
	}
	if ls.heldTerm != 0 && m.lead.Load() == nil {
		// Stop came while a lock of ours outlived its mastership: release
		// it, pinned to its term, so the others need not wait out its TTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opTimeout())
		if _, err := scripts.Release(rctx, m.client, m.keys, m.cfg.NodeID, ls.heldTerm); err != nil {
			m.log.Warn().Err(err).Int64("term", ls.heldTerm).Msg("could not release a lock left from an earlier mastership")
		}
		cancel()
	}
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

// complete emits election-completed for the election in progress, and
// resolves the first election.
func (m *MasterElection) complete(ls *loopState, isMaster bool) {
	if ls.inElection || ls.unresolved {
		ls.inElection = false
		m.bus.emit(topicElectionCompleted, payload{isMaster: isMaster})
	}
	if ls.unresolved {
		ls.unresolved = false
		close(m.resolved)
		if !isMaster {
			m.setRole(registry.RoleSlave, 0)
		}
	}
}

// resolveAsSlave completes an election in progress (or, for a process that
// is not a candidate, the first one) as slave.
func (m *MasterElection) resolveAsSlave(ls *loopState) {
	if ls.unresolved && !ls.inElection {
		ls.inElection = true
		m.bus.emit(topicElectionStarted, payload{})
	}
	if ls.inElection {
		m.complete(ls, false)
	}
}

// backoff counts consecutive Redis errors of one loop, for the delay
// before its next retry.
type backoff struct{ errors int }

// next returns the delay before retrying after one more Redis error:
// doubling from retryInterval up to maxRetryInterval.
func (b *backoff) next(cfg Config) time.Duration {
	d := cfg.retryInterval() << min(b.errors, 16)
	b.errors++
	return min(d, cfg.maxRetryInterval())
}

// reset: a call succeeded.
func (b *backoff) reset() { b.errors = 0 }
