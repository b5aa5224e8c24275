package masterelection

import (
	"context"
	"time"

	"github.com/herdkit/herd/internal/clock"
)

// followLoop is the slave role: check the lock every CheckInterval and when it
// would expire, contend when it is free (in its turn: contendDelay). It
// returns the new mastership, or nil when ctx ends.
func (c *core) followLoop(ctx context.Context, ls *loopState) *mastership {
	f := &follower{c: c, ls: ls, timer: c.clock.NewTimer(0)}
	f.contend = ls.unresolved && c.contends() // Start's first attempt goes straight to the lock, unless Start's look found it held
	if next, ok := c.takeFirstLook(ls); ok {
		f.contend = false
		f.arm(next)
	}
	defer f.timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.candidacy:
			f.candidacyChanged()
		case <-ls.awaitID:
			f.holdsID()
		case req := <-c.transfers:
			req.reply(ErrNotMaster)
		case req := <-c.stops:
			ls.stopRequested = true // no mastership to end: Stop stops the loop
			close(req.done)
			return nil
		case <-ls.feedConfirmed:
			f.feedConfirmed()
		case <-ls.awaitRegistered:
			f.registered()
		case n := <-c.notices:
			f.notice(n)
		case <-f.timer.C():
			if l := f.fire(ctx); l != nil {
				return l
			}
		}
	}
}

// follower is followLoop's state: whether an attempt at the lock is pending
// and when its timer fires. Only followLoop's goroutine touches it.
type follower struct {
	c       *core
	ls      *loopState
	contend bool      // the timer fires an attempt at the lock, not a check
	due     time.Time // when the timer fires
	timer   clock.Timer
}

// arm sets the timer to fire after d.
func (f *follower) arm(d time.Duration) {
	f.due = f.c.clock.Now().Add(d)
	f.timer.Reset(d)
}

// askSoon arms the timer for a check after an acquired notice: within
// noticeCheckSpread, unless one is due sooner. Every slave hears the
// notice at once; spread, their N−1 checks neither reach Redis at once nor
// wake at once in a process that runs many elections.
func (f *follower) askSoon() {
	if d := f.c.noticeCheckDelay(f.ls); f.c.clock.Now().Add(d).Before(f.due) {
		f.arm(d)
	}
}

// candidacyChanged: no pending attempt outlives a change of candidacy; a
// candidate looks at the lock now and contends if it is free.
func (f *follower) candidacyChanged() {
	f.contend = false
	if f.c.contends() {
		f.arm(0)
	}
}

// holdsID: the first registration made the node id this process's
// (twins.go): it may contend from now on.
func (f *follower) holdsID() {
	f.ls.awaitID = nil
	f.c.awaitingID.Store(false)
	if f.c.contends() && !f.contend {
		f.arm(0)
	}
}

// feedConfirmed: the notice feed is in place only now (Start's first
// attempt does not wait for it), so a release announced between an earlier
// answer and now was missed: ask Redis again, once the first registration
// (which the first answer set off) is done. The two at once would take two
// of the client's connections, and the second would stay open, idle, for
// the client's life.
func (f *follower) feedConfirmed() {
	ls := f.ls
	ls.feedConfirmed = nil
	if ls.unresolved || f.contend {
		return
	}
	select {
	case <-ls.firstRegistered:
		f.arm(0)
	default:
		ls.awaitRegistered = ls.firstRegistered
	}
}

// registered: the first registration is done, which a look at the lock
// owed to a late feed waited for (feedConfirmed).
func (f *follower) registered() {
	f.ls.awaitRegistered = nil
	if !f.contend {
		f.arm(0)
	}
}

// notice acts on a lock notice: contend in this process's turn, or ask
// Redis who holds the lock now.
func (f *follower) notice(n notice) {
	c, ls := f.c, f.ls
	switch c.followHint(ls, n) {
	case hintContend:
		f.contendInTurn(n)
	case hintAsk:
		f.askAboutClaim()
	}
}

// contendInTurn sets an attempt at the lock that notice n released: at
// once when n names this process the successor, else in its turn.
func (f *follower) contendInTurn(n notice) {
	c := f.c
	wait := time.Duration(0)
	if n.To != c.cfg.NodeID {
		wait = c.contendDelay(f.ls, n.Term, true)
	}
	// A notice never postpones an attempt already due: a stream of forged
	// ones would hold it back for good.
	if !f.contend || c.clock.Now().Add(wait).Before(f.due) {
		f.contend = true
		f.arm(wait)
	}
}

// askAboutClaim sets a look at the lock after another node's acquired
// notice: the new master and its term come from Redis.
func (f *follower) askAboutClaim() {
	ls := f.ls
	switch {
	case ls.unresolved: // Start's first attempt asks Redis anyway
	case !f.contend:
		f.askSoon()
	case !ls.yielded:
		// Someone took the lock while this process waited its turn: ask
		// Redis instead of sending an acquire that would fail. Once per
		// free lock, so that forged notices cannot hold this process back
		// for good.
		ls.yielded, f.contend = true, false
		f.arm(f.c.noticeCheckDelay(ls)) // in place of the pending attempt
	}
}

// fire runs what the timer was set for, an attempt at the lock or a
// check, and arms it again. It returns the new mastership, if any.
func (f *follower) fire(ctx context.Context) *mastership {
	ls := f.ls
	if ls.unresolved && ls.feedConfirmed != nil {
		select {
		case <-ls.feedConfirmed:
			// In place before Start's first attempt is sent: that attempt
			// misses nothing, and no second look is owed (which would also
			// run beside the first registration and open a second
			// connection).
			ls.feedConfirmed = nil
		default:
		}
	}
	var next time.Duration
	if f.contend {
		l, wait := f.c.contend(ctx, ls)
		if l != nil {
			return l
		}
		f.contend, next = false, wait
	} else {
		f.contend, next = f.c.check(ctx, ls)
	}
	f.arm(next)
	return nil
}
