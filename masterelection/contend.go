package masterelection

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/herdkit/herd/internal/beat"
	"github.com/herdkit/herd/internal/rdb"
	"github.com/herdkit/herd/registry"
)

// contend runs the acquire script once. It returns the new mastership, or
// nil and the delay before the next check.
func (c *core) contend(ctx context.Context, ls *loopState) (*mastership, time.Duration) {
	if !c.contends() {
		return nil, 0 // no longer a candidate since the attempt was set: look at the lock instead
	}
	if rest := ls.holdOff.Sub(c.clock.Now()); rest > 0 {
		return nil, rest // this process just handed the lock over
	}
	if !ls.inElection {
		ls.inElection = true
		c.bus.emit(topicElectionStarted, payload{})
	}
	info, err := c.masterInfoJSON()
	if err != nil {
		c.emitError(err)
		info = nil
	}
	sent := c.clock.Now()
	actx, cancel := context.WithTimeout(ctx, c.acquireLimit(ls))
	var res rdb.Acquired
	registered := false
	if ls.unresolved {
		res, registered, err = c.acquireRegistering(actx, info, c.seenForAcquire(ls))
	} else {
		res, err = c.acquire(actx, info, c.seenForAcquire(ls))
	}
	cancel()
	if err != nil {
		return nil, c.acquireFailed(ctx, ls, res, info, err)
	}
	ls.retry.reset()
	if res.DataLoss || res.TermGarbage || res.Reserved || res.Term == 0 {
		return nil, c.notAcquired(ls, res, info)
	}
	return c.becomeMaster(ctx, ls, res.Term, sent, registered), 0
}

// errNotTaken ends a registration sent with an acquire that did not take
// the lock: nothing was registered.
var errNotTaken = errors.New("the lock was not taken")

// acquireRegistering is acquire with, when it takes the lock, this
// process's registration as master under the new term in the same script
// call (rdb.AcquireRegister): a new master is registered in the round trip
// that made it master, which Start waits for. contend sends it only while
// the first election is unresolved: a hand-over or a failover waits for
// the acquire alone, which the registration would lengthen. registered
// tells whether that registration went through; when it did not (another
// incarnation's entry, garbage in the registry's keys) the membership loop
// sends it alone, as after a plain acquire, and handles its answer. Without
// an open registry, or when replicas must acknowledge the acquire, it is a
// plain acquire.
func (c *core) acquireRegistering(ctx context.Context, info []byte, seen int64) (res rdb.Acquired, registered bool, err error) {
	reg := c.registry()
	if reg == nil || c.cfg.WaitReplicas > 0 {
		res, err = c.acquire(ctx, info, seen)
		return res, false, err
	}
	sent := false
	c.members.acquireInfo.Store(c.members.infoGen.Load()) // before the info is read
	regErr := beat.RegisterWith(ctx, reg, c.processInfo(registry.RoleMaster), func(ctx context.Context, p rdb.Put) (rdb.Stored, int64, error) {
		sent = true
		var st rdb.Stored
		var putErr error
		res, st, putErr, err = rdb.AcquireRegister(ctx, c.client, c.keys, c.cfg.NodeID, c.cfg.LockTTL, info, seen, p)
		switch {
		case err != nil:
			return rdb.Stored{}, 0, err
		case res.Term == 0:
			return rdb.Stored{}, 0, errNotTaken
		}
		return st, res.Term, putErr
	})
	if !sent { // the registry refused the entry before any call: acquire alone
		res, err = c.acquire(ctx, info, seen)
		return res, false, err
	}
	if err == nil && res.Term != 0 && regErr != nil {
		c.log.Debug().Err(regErr).Int64("term", res.Term).Msg("registration with the acquire failed: the membership loop registers")
	}
	return res, err == nil && res.Term != 0 && regErr == nil, err
}

// acquireLimit bounds an acquire: by the loop's call bound, or for Start's
// first attempt by the start's, which a slow reply may take (the deadline
// counts from the send, and in a fleet starting at once replies are slow),
// but below the self-fencing margin: a reply after the deadline would give
// a mastership already over.
func (c *core) acquireLimit(ls *loopState) time.Duration {
	if ls.unresolved {
		return min(c.startTimeout(), c.cfg.LockTTL-c.cfg.StepDownMargin)
	}
	return c.opTimeout()
}

// acquireFailed handles an acquire that got no usable reply (err), sent
// with info, and returns the delay before the next attempt.
func (c *core) acquireFailed(ctx context.Context, ls *loopState, res rdb.Acquired, info []byte, err error) time.Duration {
	if res.Term != 0 {
		ls.tookLock(res.Term) // acquired, but void (too few replicas) and its release failed
	} else {
		ls.maybeHeld = true // the script may have run although its reply was lost
		ls.lostAcquires.add(info)
		// Start's first acquire may have registered this process as
		// master too (acquireRegistering): the first role, slave, is
		// registered at once when that election resolves (complete).
	}
	if ctx.Err() == nil {
		c.emitError(fmt.Errorf("acquire master lock: %w", err))
	}
	return ls.retry.next(c.cfg)
}

// notAcquired handles an acquire that did not take the lock, sent with
// info, and returns the delay before the next check.
func (c *core) notAcquired(ls *loopState, res rdb.Acquired, info []byte) time.Duration {
	switch {
	case res.DataLoss:
		// The lock is free, but Redis lost a term this process had seen:
		// wait, whichever path brought this attempt (see dataLossWait).
		return max(c.dataLossWait(ls, true), c.cfg.retryInterval())
	case res.TermGarbage:
		// Someone else's data in the term key: herd writes nothing over it.
		c.emitError(fmt.Errorf("%w: %s", ErrGarbage, res.Garbage))
		return c.cfg.CheckInterval
	}
	c.noteTerm(res.HolderTerm)
	switch {
	case res.Reserved:
		// A Transfer reserved the free lock for another node: look again
		// when the reservation ends, unless that node took it.
	case res.Holder == c.cfg.NodeID:
		// Ours from an attempt whose reply was lost: an earlier one, or
		// this very call, which go-redis sent again after losing its reply
		// (MaxRetries) and which then found its own lock. Or a twin's.
		// check sorts it out, as after any lost reply (a registration the
		// lost run carried at Start is written over as acquireFailed says).
		ls.maybeHeld = true
		ls.lostAcquires.add(info)
		return 0
	case res.Garbage != "":
		c.emitError(fmt.Errorf("%w: %s", ErrGarbage, res.Garbage))
	}
	c.complete(ls, false)
	return c.untilExpiry(res.TTL)
}

// becomeMaster starts the mastership of term, acquired by a call sent at
// sent: IsMaster turns true, master-acquired and election-completed are
// emitted, and membership registers the role (unless registered, by the
// acquire's call) and tracks the slaves.
func (c *core) becomeMaster(ctx context.Context, ls *loopState, term int64, sent time.Time, registered bool) *mastership {
	l := c.newMastership(ctx, term, c.deadlineAfter(sent))
	ls.tookLock(term)
	c.noteTerm(term)
	c.mastership.Store(l)
	c.log.Info().Int64("term", term).Msg("became master")
	c.bus.emit(topicMasterAcquired, payload{term: term, mastership: l})
	// The handlers' runners, waiting on their emitter channels, were made
	// runnable on this goroutine's processor, where they would wait until
	// this loop blocks or another processor wakes up to take them, behind
	// this loop's work below and the registration it sets off: most of a
	// handover's last phase (docs/performance.md, row 4). Yield once so
	// that OnMasterAcquired starts now. The next renewal is a
	// HeartbeatInterval away; a handler that computes without blocking
	// holds this loop for a scheduler time slice at worst, until another
	// processor takes the loop or the handler is preempted.
	runtime.Gosched()
	c.complete(ls, true)
	c.members.setRole(registry.RoleMaster, term, l, registered) // after its write (the acquire's, or its first attempt), the slave tracker starts
	return l
}

// acquire runs the acquire script, waiting for replicas when configured.
// A lock acquired with too few acknowledgements is released at once (pinned
// to its term) and reported as an error wrapping ErrReplicas; when that
// release fails, the error comes with the term, so the loop knows the lock
// that may still be its own.
func (c *core) acquire(ctx context.Context, info []byte, seen int64) (rdb.Acquired, error) {
	if c.cfg.WaitReplicas <= 0 {
		return rdb.Acquire(ctx, c.client, c.keys, c.cfg.NodeID, c.cfg.LockTTL, info, seen)
	}
	res, acked, err := rdb.AcquireReplicated(ctx, c.client, c.keys, c.cfg.NodeID, c.cfg.LockTTL, info, seen, c.cfg.replication())
	if err != nil || res.Term == 0 || acked >= int64(c.cfg.WaitReplicas) {
		return res, err
	}
	if _, rerr := rdb.Release(ctx, c.client, c.keys, c.cfg.NodeID, res.Term); rerr != nil {
		return rdb.Acquired{Term: res.Term}, fmt.Errorf("%w: %d of %d acknowledged term %d, and its release failed: %w", ErrReplicas, acked, c.cfg.WaitReplicas, res.Term, rerr)
	}
	return rdb.Acquired{}, fmt.Errorf("%w: %d of %d acknowledged term %d, released", ErrReplicas, acked, c.cfg.WaitReplicas, res.Term)
}
