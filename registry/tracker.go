package registry

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/internal/clock"
)

// Defaults of TrackerConfig, the specification's values.
const (
	// DefaultSlaveTimeout is the specification's SLAVE_TIMEOUT_MS, 15s.
	DefaultSlaveTimeout = 15 * time.Second
	// DefaultSweepInterval is 5s, a third of DefaultSlaveTimeout, as a
	// masterelection master sweeps with its default timings, so a stale
	// slave is reported within SlaveTimeout + one sweep interval.
	DefaultSweepInterval = 5 * time.Second
)

// noticeQueue is how many notices Notice buffers before it drops them.
const noticeQueue = 1024

// confirmBatch is the largest number of notices one registry read confirms.
const confirmBatch = 512

// LeaveReason tells why a SlaveTracker reported a slave gone
// (TrackerConfig.OnLeave).
type LeaveReason string

// The reasons a slave leaves.
const (
	// LeftUnregistered: it unregistered (a Stop), or another master removed
	// its entry; a notice said so and a read confirmed it.
	LeftUnregistered LeaveReason = "unregistered"
	// LeftStale: its lastSeen got older than SlaveTimeout; the master
	// removed its entry (it crashed, or was paused or cut off).
	LeftStale LeaveReason = "stale"
	// LeftVanished: its entry vanished without a notice (it expired, or
	// Redis lost its data) and it was not seen for SlaveTimeout.
	LeftVanished LeaveReason = "vanished"
	// LeftMaster: it became master.
	LeftMaster LeaveReason = "master"
)

// TrackerConfig configure a SlaveTracker. The zero value is usable.
type TrackerConfig struct {
	// SlaveTimeout is how old a slave's lastSeen may get before the master
	// removes its entry and reports it gone (the specification's
	// cleanupStaleSlaves). lastSeen is written with the slave's clock and
	// compared with this machine's clock, so it must also exceed the clock skew between
	// hosts. Default: 15s; negative is an error.
	SlaveTimeout time.Duration
	// SweepInterval is the period of the sweep that reads the whole registry,
	// removes stale slaves and catches every change a notice did not report.
	// Default: 5s; negative is an error.
	SweepInterval time.Duration
	// Self is the process id of the master running the tracker; that entry
	// is never reported, whatever its role. Default: "" (none).
	Self string
	// OnJoin is called when a slave joins. Default: nil.
	OnJoin func(SlaveNode)
	// OnLeave is called with the node id of a slave that left:
	//   - at once when it unregisters or becomes master (when the notice
	//     arrives and a read of the registry confirms it; a lost notice
	//     leaves it to the sweep: at once for a master, by the last rule for
	//     an unregistered slave);
	//   - when its lastSeen gets older than SlaveTimeout: the master then
	//     removes its entry;
	//   - when its entry vanished without a notice (it expired, or Redis lost
	//     its data) and the last lastSeen read is older than SlaveTimeout.
	// why tells which. Default: nil.
	OnLeave func(nodeID string, why LeaveReason)
	// OnError receives the errors of sweeps and of the reads that confirm
	// notices, malformed notices, and notices the registry contradicts
	// (wrapping ErrUnconfirmedNotice, once per notice); the tracker goes on.
	// Default: the registry's Config.OnError.
	OnError func(error)
}

// Validate reports every problem of c at once; the error wraps
// ErrInvalidConfig. NewSlaveTracker calls it.
func (c TrackerConfig) Validate() error {
	return invalid(notNegative("SlaveTimeout", c.SlaveTimeout), notNegative("SweepInterval", c.SweepInterval))
}

// SlaveTracker is the master's view of its slaves: it reports each slave
// joining and leaving, exactly once per transition, from two sources that it
// reconciles in one goroutine: the notices the registry scripts publish on
// Keys.RegistryEvents (fast), fed in through Notice, and a periodic sweep of the
// registry (the fallback for lost notices, and the only source for entries
// that expired or went stale).
//
// The registry is the truth, notices are hints: a notice makes the tracker
// read the entry it names (the notices queued together share one read, with
// the registry's version), and only what that read shows is reported. Every
// registry write carries a version minted by Redis; a notice whose write a
// read has already reflected is skipped, so nothing older than what the
// tracker has read is applied. A notice the read contradicts (an
// "unregistered" one for a live entry, one without a version for an entry
// that is not there, one whose version no write has reached) is ignored and
// reported to OnError. A client that may PUBLISH on the channel can thus
// make the tracker read more, not report a slave that Redis does not show.
//
// Run it while the process is master, with a ctx cancelled when the
// mastership ends. Each Run starts from nothing and first reports OnJoin for
// every live slave already registered, so a consumer built on the callbacks
// alone starts from the full set; within one Run a slave is reported joined
// only when it was not, and left only when it was, so a notice and a sweep
// seeing the same change yield one callback. A slave removed as stale that
// heartbeats again re-registers and is reported joined again.
//
// OnJoin, OnLeave and OnError are called from the goroutine running Run, one
// at a time, in order. They may block; while they do, notices queue up (up to
// 1024), then are dropped and counted by Dropped, and the tracker sweeps as
// soon as it can to catch up. Notice never blocks.
//
// An entry that vanishes without a notice is not reported at once: the
// slave leaves only if it stays away until its lastSeen is older than
// SlaveTimeout. So a Redis restart that loses the data reports nothing for
// the slaves whose next heartbeat succeeds before their lastSeen is
// SlaveTimeout old (SlaveTimeout exceeds the heartbeat interval: masterelection.Config).
// Not guaranteed: a slave that joins and leaves between two reads while its
// notices are dropped is never reported; a forged "unregistered" notice with
// a plausible version for a slave whose entry is absent at the read (lost
// with the data, say) makes it leave at once instead of after SlaveTimeout.
type SlaveTracker struct {
	reg  *Registry
	opts TrackerConfig

	notices chan []byte   // queued notices, consumed by Run
	resync  chan struct{} // a notice was dropped: sweep soon (capacity 1)
	dropped atomic.Uint64
	running atomic.Bool

	afterSweep func() // test hook, called by Run after each sweep; nil otherwise
}

// NewSlaveTracker returns a tracker of reg's slaves. It does no I/O.
func NewSlaveTracker(reg *Registry, opts TrackerConfig) (*SlaveTracker, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil registry", ErrInvalidConfig)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.SlaveTimeout = cmp.Or(opts.SlaveTimeout, DefaultSlaveTimeout)
	opts.SweepInterval = cmp.Or(opts.SweepInterval, DefaultSweepInterval)
	if opts.OnError == nil {
		opts.OnError = reg.cfg.OnError
	}
	return &SlaveTracker{
		reg: reg, opts: opts,
		notices: make(chan []byte, noticeQueue),
		resync:  make(chan struct{}, 1),
	}, nil
}

// Notice hands the tracker a message received on Keys.RegistryEvents. It never
// blocks: when the queue is full the notice is dropped, counted, and the
// tracker sweeps soon instead. Messages other than the registry's
// "registered" and "unregistered" notices (such as the lock scripts'
// "acquired" and "released") are ignored, so the subscriber may forward
// everything. Safe for concurrent use, also while Run is not running (the
// next Run discards what queued up meanwhile).
func (t *SlaveTracker) Notice(payload []byte) {
	select {
	case t.notices <- append([]byte(nil), payload...):
	default:
		t.dropped.Add(1)
		t.requestSweep()
	}
}

// requestSweep asks Run to sweep as soon as it can, to catch up on what
// notices said that the tracker could not confirm. It never blocks: a
// request pending already covers this one.
func (t *SlaveTracker) requestSweep() {
	select {
	case t.resync <- struct{}{}:
	default:
	}
}

// Dropped returns how many notices were dropped because the queue was full.
func (t *SlaveTracker) Dropped() uint64 { return t.dropped.Load() }

// Run tracks the slaves until ctx is done, then returns nil; it calls no
// callback after ctx is done. It returns ErrTrackerRunning at once when
// another Run of t has not returned. Sweep errors go to OnError and the next
// sweep retries.
func (t *SlaveTracker) Run(ctx context.Context) error {
	if !t.running.CompareAndSwap(false, true) {
		return ErrTrackerRunning
	}
	defer t.running.Store(false)
	t.discardQueued()
	t.track(ctx, newTrackerState(t))
	return nil
}

// track is Run's loop, with s its state: a sweep at once, then notices as
// they come and a sweep each SweepInterval or when one is asked for
// (requestSweep), until ctx is done.
func (t *SlaveTracker) track(ctx context.Context, s *trackerState) {
	timer := t.reg.clock.NewTimer(t.opts.SweepInterval)
	defer timer.Stop()
	s.sweep(ctx)
	t.swept()
	for t.awaitSweep(ctx, s, timer) {
		s.sweep(ctx)
		timer.Reset(t.opts.SweepInterval)
		t.swept()
	}
}

// awaitSweep handles the notices that come until a sweep is due (timer
// fired, or one was asked for), and reports whether one is: false when
// ctx is done first.
func (t *SlaveTracker) awaitSweep(ctx context.Context, s *trackerState, timer clock.Timer) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case p := <-t.notices:
			s.notices(ctx, t.batch(p))
		case <-t.resync:
			return true
		case <-timer.C():
			return true
		}
	}
}

// batch returns first and the notices queued behind it, at most
// confirmBatch in all, so that one read confirms them all.
func (t *SlaveTracker) batch(first []byte) [][]byte {
	out := [][]byte{first}
	for len(out) < confirmBatch {
		select {
		case p := <-t.notices:
			out = append(out, p)
		default:
			return out
		}
	}
	return out
}

// discardQueued empties the queue of notices and the pending sweep
// request, which a Run before this one left.
func (t *SlaveTracker) discardQueued() {
	for {
		select {
		case <-t.notices:
		case <-t.resync:
		default:
			return
		}
	}
}

// swept calls the test hook after a sweep.
func (t *SlaveTracker) swept() {
	if t.afterSweep != nil {
		t.afterSweep()
	}
}
