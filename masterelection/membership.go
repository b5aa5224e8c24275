package masterelection

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/internal/beat"

	"github.com/herdkit/herd/registry"
)

// membership is this process's part in the registry, beside the election
// core: the registry entry, written at each role change and heartbeated
// (loop), the slave tracker and succession ranking of a master
// (trackSlaves, slaves.go), the hand-back (handback.go) and the refusal of
// a twin (twins.go). It sees the core only through coreView.
type membership struct {
	*node
	core coreView
	stop func(context.Context) error // the facade's Stop, for stepping aside; set by Start

	roles       chan roleChange // the latest role, for the loop
	infoChanged chan struct{}   // metadata or candidacy changed: the loop registers again
	// infoGen counts the changes of the info (infoChangedNow); acquireInfo
	// is its value when Start's acquire took the info it registers
	// (acquireRegistering): the loop writes the role again if they differ.
	infoGen, acquireInfo atomic.Uint64
	beats                slaveBeats // a slave's heartbeat riding its checks
	// registered is closed by the loop at the first registration: this
	// process holds its node id in the registry.
	registered chan struct{}
	trackMu    sync.Mutex     // orders slave events before master-lost
	bg         sync.WaitGroup // the loop, and each mastership's tracker, succession writer and hand-back
	aside      error          // set once when the process stepped aside for a twin (under mu)
}

// newMembership returns the membership of the election of n, which sees
// the core through core; nothing runs until the core starts its loop.
func newMembership(n *node, core coreView) *membership {
	return &membership{
		node:        n,
		core:        core,
		roles:       make(chan roleChange, 1),
		infoChanged: make(chan struct{}, 1),
		registered:  make(chan struct{}),
		beats:       slaveBeats{base: n.clock.Now()},
	}
}

// holdingSlaveEvents runs fn while no slave event is being emitted
// (slaveEvent): a slave event of a mastership that fn ends comes before fn,
// or never.
func (mb *membership) holdingSlaveEvents(fn func()) {
	mb.trackMu.Lock()
	defer mb.trackMu.Unlock()
	fn()
}

// infoChangedNow tells the loop to register again: the entry's metadata
// or candidacy changed.
func (mb *membership) infoChangedNow() {
	mb.infoGen.Add(1)
	select {
	case mb.infoChanged <- struct{}{}:
	default: // a refresh is already pending
	}
}

// steppedAside returns the error with which the process stepped aside for
// a twin, or nil.
func (mb *membership) steppedAside() error {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.aside
}

// recordedAs reports whether the registry's record of this process, what
// its heartbeats write, has role and term: a registration sent with the
// acquire counts only while no later write replaced it.
func (mb *membership) recordedAs(role registry.Role, term int64) bool {
	reg := mb.registry()
	if reg == nil {
		return false
	}
	got, gotTerm, ok := beat.Recorded(reg, mb.cfg.NodeID)
	return ok && got == string(role) && gotTerm == term
}

// roleChange tells the membership loop this process's role as of now.
type roleChange struct {
	role registry.Role
	term int64
	// track, for the master role, is the mastership whose slave tracker
	// the loop starts after the role's first write attempt (whatever its
	// outcome: a tracker that waited for a success could wait for good).
	track *mastership
	// written: the role is registered already (the acquire's call did it).
	written bool
}

// setRole hands the latest role to the membership loop; only the latest
// matters, so an unread older value is replaced. For the master role, l is
// the mastership: its slave tracker starts after the registration's first
// attempt, whose round trip it would otherwise delay (a connection of its own to dial, a
// subscription, a read of every entry), and with it Start and the
// hand-over's registration.
func (mb *membership) setRole(role registry.Role, term int64, l *mastership, written bool) {
	for {
		select {
		case mb.roles <- roleChange{role, term, l, written}:
			return
		default:
		}
		select {
		case <-mb.roles:
		default:
		}
	}
}

// slaveBeats is how a slave's registry heartbeat rides its periodic look at
// the lock (rdb.CheckBeat): one script call per CheckInterval instead
// of two. The membership loop says when the slave's heartbeat may ride
// (the slave role is registered and nothing is pending) and sends it
// itself only when none rode for 1.25 CheckInterval (the follow loop was
// contending, waiting out a data loss, or failing).
type slaveBeats struct {
	ride atomic.Bool // the follow loop may send the heartbeat (set by the membership loop)
	// base is the clock's time when the election was made: last counts
	// from it, so that a wall clock stepped back (the clock's readings
	// carry a monotonic one) moves no write's age.
	base time.Time
	last atomic.Int64 // when the entry was last written, by either loop: nanoseconds after base, plus one; 0: never
}

// wrote records a write of the entry at t.
func (b *slaveBeats) wrote(t time.Time) { b.last.Store(max(int64(t.Sub(b.base)), 0) + 1) }

// since is how long ago the entry was last written; the longest duration
// when it never was.
func (b *slaveBeats) since(now time.Time) time.Duration {
	last := b.last.Load()
	if last == 0 {
		return math.MaxInt64
	}
	return now.Sub(b.base) - time.Duration(last-1)
}

// due tells the follow loop, at now, to send the heartbeat with its check:
// it may, and the last write is a quarter of a CheckInterval old (a check
// sent sooner after a notice carries none). A check that carries none
// leaves the next write to the next periodic check, a CheckInterval later,
// which stays within the membership loop's stand-in (slaveBeatStandIn)
// only if the last write was at most a quarter of one before.
func (mb *membership) beatDue(now time.Time) bool {
	return mb.beats.ride.Load() && mb.beats.since(now) >= slaveBeatStandIn(mb.cfg.CheckInterval)-mb.cfg.CheckInterval
}

// coreView is all that membership sees of the election core.
type coreView struct {
	// current reports whether mastership l is this process's mastership
	// and certain now (its self-fencing deadline has not passed).
	current func(l *mastership) bool
	// offer hands a transfer request to the core unless one is pending,
	// and reports whether it did.
	offer func(req transferRequest) bool
}
