package masterelection

import (
	"sync"
	"time"

	"github.com/herdkit/herd/internal/rdb"
)

// loopState is owned by the run goroutine.
type loopState struct {
	unresolved    bool            // the first election has not resolved yet
	inElection    bool            // election-started was emitted and its election-completed not yet
	heldTerm      int64           // a lock of ours under this term may outlive our mastership (step-down on the deadline, a failed release); 0: none
	maybeHeld     bool            // an acquire's reply was lost: the lock may be ours under a term we never learnt
	lostAcquires  lostAcquires    // the acquires whose reply was lost since maybeHeld was set
	lossWait      time.Time       // after a data loss: do not contend before this instant
	lossTerm      int64           // the observed term when lossWait was set: a higher one means a newer loss
	claim         notice          // the acquired notice with the highest term that Redis has not yet been asked about
	claimAt       time.Time       // when claim arrived: only an answer to a call sent since can refute it
	holdOff       time.Time       // after a Transfer: do not contend before this instant
	next          rdb.Succession  // the master's succession, as the last check read it
	yielded       bool            // a pending attempt gave way to an acquired notice since the lock was last seen held
	retry         backoff         // after Redis errors
	feedConfirmed <-chan struct{} // closed when the notice feed is confirmed (noticeFeed); nil once followLoop or masterLoop has seen it
	// firstRegistered is closed by the membership loop at its first
	// registration; awaitRegistered is it while a look at the lock owed
	// to a late feed waits for that registration (nil otherwise).
	firstRegistered, awaitRegistered <-chan struct{}
	stopRequested                    bool // Stop's request came (stop.go): run returns without another attempt
	// awaitID is the first registration's channel while the process waits
	// for it before it contends (MasterElection.awaitingID); nil otherwise.
	awaitID <-chan struct{}
	// firstLook is Start's look at the lock, until followLoop took it
	// (takeFirstLook); nil after that, or when Start's look got no answer.
	firstLook *lockLook

	// haltMembership stops the membership loop and waits for it (Stop's
	// resignation does so before the release: no registry write of this
	// process may follow it, Stop unregisters).
	haltMembership func()

	// renewAttempts counts the renew attempts still running; run waits for them
	// before it returns. Only the attempts touch it besides run.
	renewAttempts sync.WaitGroup
}

// lockLook is an answered look at the lock: what it found, and when the
// answer came (on the election's clock).
type lockLook struct {
	st rdb.MasterState
	at time.Time
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

// noteClaim keeps the acquired notice n for the next answer of Redis (a
// check, or a renewal sent after it), which confirms or refutes it.
func (ls *loopState) noteClaim(n notice, now time.Time) {
	if n.Term > ls.claim.Term {
		ls.claim, ls.claimAt = n, now
	}
}
