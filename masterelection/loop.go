package masterelection

import (
	"context"
	"sync"
	"time"

	"github.com/herdkit/herd/registry"
	"github.com/herdkit/herd/scripts"
)

// loopState is owned by the run goroutine.
type loopState struct {
	unresolved    bool               // the first election has not resolved yet
	inElection    bool               // election-started was emitted and its election-completed not yet
	heldTerm      int64              // a lock of ours under this term may outlive our mastership (step-down on the deadline, a failed release); 0: none
	maybeHeld     bool               // an acquire's reply was lost: the lock may be ours under a term we never learnt
	lostAcquires  lostAcquires       // the acquires whose reply was lost since maybeHeld was set
	lossWait      time.Time          // after a data loss: do not contend before this instant
	lossTerm      int64              // the observed term when lossWait was set: a higher one means a newer loss
	claim         notice             // the acquired notice with the highest term that Redis has not yet been asked about
	claimAt       time.Time          // when claim arrived: only an answer to a call sent since can refute it
	holdOff       time.Time          // after a Transfer: do not contend before this instant
	next          scripts.Succession // the master's succession, as the last check read it
	yielded       bool               // a pending attempt gave way to an acquired notice since the lock was last seen held
	retry         backoff            // after Redis errors
	feedConfirmed <-chan struct{}    // closed when the notice feed is confirmed (noticeFeed); nil once followLoop has seen it
	// firstRegistered is closed by the membership loop at its first
	// registration; awaitRegistered is it while a look at the lock owed
	// to a late feed waits for that registration (nil otherwise).
	firstRegistered, awaitRegistered <-chan struct{}
	stopRequested                    bool // Stop's request came (stop.go): run returns without another attempt
	// awaitID is the first registration's channel while the process waits
	// for it before it contends (MasterElection.awaitingID); nil otherwise.
	awaitID <-chan struct{}

	// haltMembership stops the membership loop and waits for it (Stop's
	// resignation does so before the release: no registry write of this
	// process may follow it, Stop unregisters).
	haltMembership func()

	// renewAttempts counts the renew attempts still running; run waits for them
	// before it returns. Only the attempts touch it besides run.
	renewAttempts sync.WaitGroup
}

// tookLock records that the lock under term is this process's: it may
// outlive the mastership (a step-down on the deadline, a failed release),
// and followLoop releases it then.
func (ls *loopState) tookLock(term int64) { ls.heldTerm = term }

// lockGone records that no lock of this process's remains: it was released,
// or a renewal found it gone.
func (ls *loopState) lockGone() { ls.heldTerm = 0 }

// lockNotOurs records a check that found the lock free or another node's:
// no lock of ours lingers, and no lost acquire of ours took it.
func (ls *loopState) lockNotOurs() {
	ls.heldTerm, ls.maybeHeld, ls.lostAcquires = 0, false, lostAcquires{}
}

// run is the election's single loop: it owns the role, the timers and every
// Redis call of the election, alternating between followLoop (slave) and
// masterLoop (master) until ctx ends. feed is the notice feed Start opened (nil in
// standalone mode); run closes it.
func (m *MasterElection) run(ctx context.Context, feed *noticeFeed) {
	defer m.closeDone()
	if m.cfg.Standalone {
		m.runStandalone(ctx)
		return
	}
	defer m.bg.Wait()
	memCtx, stopMembership := context.WithCancel(ctx)
	defer stopMembership()
	membershipDone := make(chan struct{})
	firstRegistered := m.registered
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		defer close(membershipDone)
		m.membership(memCtx, firstRegistered)
	}()
	var wg sync.WaitGroup
	closeFeed := m.readFeed(ctx, &wg, feed)
	defer wg.Wait()
	defer closeFeed()

	ls := &loopState{unresolved: true, feedConfirmed: feed.confirmed, firstRegistered: firstRegistered}
	if m.awaitingID.Load() {
		ls.awaitID = firstRegistered
	}
	ls.haltMembership = func() {
		stopMembership()
		<-membershipDone
	}
	defer ls.renewAttempts.Wait()
	for ctx.Err() == nil && !ls.stopRequested {
		if l := m.followLoop(ctx, ls); l != nil {
			m.masterLoop(ctx, ls, l)
		}
	}
	if ls.heldTerm != 0 && m.mastership.Load() == nil {
		// Stop came while a lock of ours outlived its mastership: release
		// it, pinned to its term, so the others need not wait out its TTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opTimeout())
		if _, err := scripts.Release(rctx, m.client, m.keys, m.cfg.NodeID, ls.heldTerm); err != nil {
			m.log.Warn().Err(err).Int64("term", ls.heldTerm).Msg("could not release a lock left from an earlier mastership")
		}
		cancel()
	}
}

// runStandalone is run in standalone mode: master at once, until Stop.
func (m *MasterElection) runStandalone(ctx context.Context) {
	m.bus.emit(topicElectionStarted, payload{})
	term := m.clock.Now().UnixMilli()
	l := m.newMastership(ctx, term, time.Duration(^uint64(0)>>1)) // never: nothing can take it away
	m.noteTerm(term)
	m.mastership.Store(l)
	m.bus.emit(topicMasterAcquired, payload{term: term, mastership: l})
	m.bus.emit(topicElectionCompleted, payload{isMaster: true})
	close(m.resolved)
	<-ctx.Done()
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
