package masterelection

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/registry"
)

// core is the election core: it owns the master lock, the fencing term,
// self-fencing and the notices. Its single loop (run, in loop.go) reads top
// to bottom: campaign as slave (followLoop), master with renewals
// (masterLoop), step down, and again, until Stop. Membership runs beside it
// (membership.go); the core tells it the role (and, for the master role,
// the mastership whose slave tracker it starts), and hands it only a view
// of itself (coreView).
type core struct {
	*node
	members *membership

	mastership atomic.Pointer[mastership] // the current mastership; nil while slave

	notices   chan notice          // lock notices from the events channel, read by run
	transfers chan transferRequest // Transfer, control-channel and hand-back requests, read by run
	candidacy chan struct{}        // signals run that Candidate changed
	stops     chan *stopRequest    // Stop's request that run resign first (stop.go)
	resolved  chan struct{}        // closed when the first election has resolved
	done      chan struct{}        // closed when run has returned (or will never run)
	doneOnce  sync.Once
}

// newCore returns the core of the election of n, not running yet.
func newCore(n *node) *core {
	return &core{
		node:      n,
		notices:   make(chan notice, 64),
		transfers: make(chan transferRequest, 1),
		candidacy: make(chan struct{}, 1),
		stops:     make(chan *stopRequest),
		resolved:  make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// view is what membership sees of c.
func (c *core) view() coreView {
	return coreView{current: c.current, offer: c.offer}
}

// current: see coreView.
func (c *core) current(l *mastership) bool {
	return l.ctx.Err() == nil && c.mastership.Load() == l && l.holds(c.clock.Now())
}

// offer: see coreView.
func (c *core) offer(req transferRequest) bool {
	select {
	case c.transfers <- req:
		return true
	default:
		return false
	}
}

// closeDone marks run returned (or never to run).
func (c *core) closeDone() { c.doneOnce.Do(func() { close(c.done) }) }

// term is the fencing term of the current mastership, or 0 when this
// process is not master: by the self-fencing deadline, as IsMaster.
func (c *core) term() int64 {
	l := c.mastership.Load()
	if l == nil || !l.holds(c.clock.Now()) {
		return 0
	}
	return l.term
}

// complete emits election-completed for the election in progress, and
// resolves the first election.
func (c *core) complete(ls *loopState, isMaster bool) {
	if ls.inElection || ls.unresolved {
		ls.inElection = false
		c.bus.emit(topicElectionCompleted, payload{isMaster: isMaster})
	}
	if ls.unresolved {
		ls.unresolved = false
		close(c.resolved)
		if !isMaster {
			c.members.setRole(registry.RoleSlave, 0, nil, false)
		}
	}
}

// resolveAsSlave completes an election in progress (or, for a process that
// is not a candidate, the first one) as slave.
func (c *core) resolveAsSlave(ls *loopState) {
	if ls.unresolved && !ls.inElection {
		ls.inElection = true
		c.bus.emit(topicElectionStarted, payload{})
	}
	if ls.inElection {
		c.complete(ls, false)
	}
}

// newMastership returns mastership term, whose self-fencing deadline is
// deadline (an offset from c.base) and whose ctx is also done when parent is.
func (c *core) newMastership(parent context.Context, term int64, deadline time.Duration) *mastership {
	l := &mastership{term: term, clock: c.clock, base: c.base}
	l.deadline.Store(int64(deadline))
	newMasterCtx(parent, l)
	return l
}
