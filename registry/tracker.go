package registry

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/scripts"
)

// Defaults of TrackerConfig, the specification's values.
const (
	// DefaultSlaveTimeout is the specification's SLAVE_TIMEOUT_MS, 15s.
	DefaultSlaveTimeout = 15 * time.Second
	// DefaultSweepInterval is the slaves' default CheckInterval, 5s, so a
	// stale slave is reported within SlaveTimeout + one sweep interval.
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
	var errs []error
	if c.SlaveTimeout < 0 {
		errs = append(errs, fmt.Errorf("SlaveTimeout %s is negative", c.SlaveTimeout))
	}
	if c.SweepInterval < 0 {
		errs = append(errs, fmt.Errorf("SweepInterval %s is negative", c.SweepInterval))
	}
	return invalid(errs)
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
// SlaveTimeout old (ValidateTimings makes room for one heartbeat interval).
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
	if opts.SlaveTimeout == 0 {
		opts.SlaveTimeout = DefaultSlaveTimeout
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
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
		select {
		case t.resync <- struct{}{}:
		default:
		}
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

	s := newTrackerState(t)
	timer := t.reg.clock.NewTimer(t.opts.SweepInterval)
	defer timer.Stop()
	s.sweep(ctx)
	t.swept()
	for {
		select {
		case <-ctx.Done():
			return nil
		case p := <-t.notices:
			s.notices(ctx, t.batch(p))
			continue
		case <-t.resync:
		case <-timer.C():
		}
		s.sweep(ctx)
		timer.Reset(t.opts.SweepInterval)
		t.swept()
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

func (t *SlaveTracker) swept() {
	if t.afterSweep != nil {
		t.afterSweep()
	}
}

// trackerState is the state of one Run, owned by its goroutine.
//
// Notices are hints: anyone allowed to PUBLISH on the channel can send one.
// None becomes a join or a leave until a read of the registry confirms it:
// each batch of notices costs one read of the entries they name, with the
// registry's version. Every registry write carries a version minted by
// Redis, larger than every earlier one (scripts.Keys.ProcessesVersion); the
// tracker records, per process, the registry version up to which its reads
// (a sweep, a confirming read, its own stale removal) reflect every write,
// and skips a notice whose version is not above it: that write was read
// already. So nothing older than what was read is applied, and a notice's
// version, forged or not, never raises what the tracker believes it has
// read: only Redis's replies do.
type trackerState struct {
	t      *SlaveTracker
	known  map[string]SlaveNode // reported joined and not yet left, by process id
	absent map[string]bool      // known slaves the last read found gone, without knowing why
	seen   map[string]int64     // per process id, the registry version its last read or removal reflects (above swept)
	swept  int64                // the registry's version as of the last sweep
}

func newTrackerState(t *SlaveTracker) *trackerState {
	return &trackerState{t: t, known: map[string]SlaveNode{}, absent: map[string]bool{}, seen: map[string]int64{}}
}

// applied returns the registry version up to which the state reflects every
// write of id.
func (s *trackerState) applied(id string) int64 { return max(s.seen[id], s.swept) }

// saw records that every write of id up to version is reflected.
func (s *trackerState) saw(id string, version int64) {
	if version > s.applied(id) {
		s.seen[id] = version
	}
}

// hint is what a notice says about one process.
type hint struct {
	unregistered bool
	version      int64 // 0: the notice carried none
}

// notices handles a batch of notices: it confirms the ones that could
// change something with one read of the entries they name, then reports
// the joins and leaves that read shows, in process id order, then the
// malformed notices.
func (s *trackerState) notices(ctx context.Context, payloads [][]byte) {
	var bad []error
	hints := map[string][]hint{}
	for _, payload := range payloads {
		n, err := scripts.ParseNotice(payload)
		if err != nil {
			bad = append(bad, fmt.Errorf("registry events: %w", err))
			continue
		}
		switch {
		case n.Event != scripts.NoticeRegistered && n.Event != scripts.NoticeUnregistered:
			continue // a lock notice, or one of another program
		case scripts.ValidateName("node id", n.NodeID) != nil:
			bad = append(bad, fmt.Errorf("%s notice %q: %w: no valid nodeId", n.Event, wire.Truncate(string(payload)), ErrUnconfirmedNotice))
			continue
		case n.NodeID == s.t.opts.Self:
			continue
		case n.Event == scripts.NoticeUnregistered && n.Reason == scripts.ReasonExpired:
			// An emulated read removed an expired entry. The native backends
			// announce no expiry, so the sweep decides for all three alike.
			continue
		case n.Event == scripts.NoticeRegistered:
			if _, err := decodeProcess(n.NodeID, string(n.Process)); err != nil {
				bad = append(bad, fmt.Errorf("registered notice for %q: %w: %w", wire.Truncate(n.NodeID), ErrCorruptEntry, err))
				continue
			}
		}
		hints[n.NodeID] = append(hints[n.NodeID], hint{unregistered: n.Event == scripts.NoticeUnregistered, version: n.Version})
	}

	var ids []string
	for _, id := range sortedKeys(hints) {
		fresh := hints[id][:0]
		for _, h := range hints[id] {
			if h.version > 0 && h.version <= s.applied(id) {
				// A read reflects this write already. One thing may be left
				// to learn: that a slave the read found gone unregistered.
				if h.unregistered && s.absent[id] {
					s.leave(ctx, id, LeftUnregistered)
				}
				continue
			}
			fresh = append(fresh, h)
		}
		if hints[id] = fresh; len(fresh) > 0 {
			ids = append(ids, id)
		}
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), confirmBatch)]
		ids = ids[len(chunk):]
		s.confirm(ctx, chunk, hints)
	}
	for _, err := range bad {
		s.fail(ctx, err)
	}
}

// confirm reads the entries of ids and applies what the read shows; each
// hint is checked against it, and one the registry contradicts is reported.
func (s *trackerState) confirm(ctx context.Context, ids []string, hints map[string][]hint) {
	t := s.t
	entries, version, err := t.reg.entries(ctx, ids)
	if err != nil {
		s.fail(ctx, fmt.Errorf("confirm registry notices: %w", err))
		select { // the next sweep catches up on what these notices said
		case t.resync <- struct{}{}:
		default:
		}
		return
	}
	now := t.reg.clock.Now()
	for _, id := range ids {
		p, present := entries[id]
		live := present && now.Sub(p.LastSeen) <= t.opts.SlaveTimeout
		left := false // a notice that it unregistered is consistent with the read
		for _, h := range hints[id] {
			future := version > 0 && h.version > version
			switch {
			case live && h.unregistered && !(h.version > 0 && h.version < p.Version):
				s.fail(ctx, s.contradicted(id, h, p))
			case future || (!present && h.version == 0 && !h.unregistered):
				s.fail(ctx, s.unfounded(id, h, version))
			case !present && h.unregistered:
				left = true
			}
		}
		switch {
		case live && p.Role == RoleSlave:
			delete(s.absent, id)
			if _, ok := s.known[id]; ok {
				s.known[id] = p.Slave() // keep its lastSeen current
			} else {
				s.join(ctx, p)
			}
		case present && p.Role == RoleSlave:
			// Stale: the sweep removes it and reports it, as for any slave
			// that stopped heartbeating.
		case present:
			s.leave(ctx, id, LeftMaster)
		case left:
			s.leave(ctx, id, LeftUnregistered)
		default:
			s.vanished(ctx, id, now)
		}
		s.saw(id, version)
	}
}

// vanished handles a known slave that a read found absent without a
// confirmed reason: expired, or lost with the data. It leaves when it has
// not been seen for SlaveTimeout, as a stale slave does; until then a
// heartbeat may bring it back unreported, and a notice that it unregistered
// makes it leave at once.
func (s *trackerState) vanished(ctx context.Context, id string, now time.Time) {
	node, ok := s.known[id]
	if !ok {
		return
	}
	s.absent[id] = true
	if now.Sub(node.LastSeen) > s.t.opts.SlaveTimeout {
		s.leave(ctx, id, LeftVanished)
	}
}

// contradicted is the error of an unregistered notice for a process whose
// entry is present and fresh, and not newer than the notice.
func (s *trackerState) contradicted(id string, h hint, p ProcessInfo) error {
	return fmt.Errorf("%w: unregistered notice for %q (version %d) ignored: its entry is in the registry as a live %s (version %d, lastSeen %s)",
		ErrUnconfirmedNotice, wire.Truncate(id), h.version, p.Role, p.Version, p.LastSeen.UTC().Format(time.RFC3339Nano))
}

// unfounded is the error of a notice the registry cannot have sent: one
// whose version is above every version minted yet, or a registration
// without a version for an entry the read does not show.
func (s *trackerState) unfounded(id string, h hint, version int64) error {
	event := scripts.NoticeRegistered
	if h.unregistered {
		event = scripts.NoticeUnregistered
	}
	if h.version == 0 {
		return fmt.Errorf("%w: %s notice for %q without a version ignored: the registry has no such entry", ErrUnconfirmedNotice, event, wire.Truncate(id))
	}
	return fmt.Errorf("%w: %s notice for %q ignored: its version %d is above every version the registry has minted (%d)",
		ErrUnconfirmedNotice, event, wire.Truncate(id), h.version, version)
}

// sweep reads the registry, removes the stale slaves and reconciles known
// with what is left: leaves first, then joins, each in process id order.
func (s *trackerState) sweep(ctx context.Context) {
	t := s.t
	snap, err := t.reg.load(ctx, true)
	if err != nil {
		s.fail(ctx, fmt.Errorf("sweep slaves: %w", err))
		return
	}
	now := t.reg.clock.Now()
	present := map[string]ProcessInfo{}
	masters := map[string]bool{}
	stale := map[string]bool{} // removed by this sweep
	for i, p := range snap.infos {
		id := p.ProcessID
		if id == t.opts.Self {
			continue
		}
		if p.Role != RoleSlave {
			masters[id] = true
			continue
		}
		if now.Sub(p.LastSeen) <= t.opts.SlaveTimeout {
			present[id] = p
			continue
		}
		removed, err := t.reg.removeStale(ctx, id, snap.raws[i])
		if err != nil {
			s.fail(ctx, err)
		}
		if removed == 0 {
			// Not removed (an error), or rewritten or removed by someone else
			// since the read: keep it as it is; the next sweep decides.
			if _, ok := s.known[id]; ok {
				present[id] = p
			}
			continue
		}
		s.saw(id, removed)
		stale[id] = true
		t.reg.cfg.Logger.Info().Str("process", id).Time("lastSeen", p.LastSeen).
			Dur("slaveTimeout", t.opts.SlaveTimeout).Msg("removed a stale slave")
	}
	// Every write up to the snapshot's version is reflected now; the
	// versions seen before are not needed any more.
	s.swept = max(s.swept, snap.version)
	for id, v := range s.seen {
		if v <= s.swept {
			delete(s.seen, id)
		}
	}
	for _, id := range sortedKeys(s.known) {
		if p, ok := present[id]; ok {
			s.known[id] = p.Slave() // keep its lastSeen current
			delete(s.absent, id)
			continue
		}
		if masters[id] {
			s.leave(ctx, id, LeftMaster)
			continue
		}
		if stale[id] {
			s.leave(ctx, id, LeftStale)
			continue
		}
		s.vanished(ctx, id, now)
	}
	for _, id := range sortedKeys(present) {
		s.join(ctx, present[id])
	}
}

// join reports p unless it is known (or is the tracker's own process).
func (s *trackerState) join(ctx context.Context, p ProcessInfo) {
	if _, ok := s.known[p.ProcessID]; ok || p.ProcessID == s.t.opts.Self || ctx.Err() != nil {
		return
	}
	node := p.Slave()
	s.known[p.ProcessID] = node
	if s.t.opts.OnJoin != nil {
		s.t.opts.OnJoin(node)
	}
}

// leave reports id if it is known, for why.
func (s *trackerState) leave(ctx context.Context, id string, why LeaveReason) {
	node, ok := s.known[id]
	if !ok || ctx.Err() != nil {
		return
	}
	delete(s.known, id)
	delete(s.absent, id)
	if s.t.opts.OnLeave != nil {
		s.t.opts.OnLeave(node.NodeID, why)
	}
}

func (s *trackerState) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // the run is over; the error is its cancellation
	}
	s.t.reg.cfg.Logger.Warn().Err(err).Msg("slave tracker")
	if s.t.opts.OnError != nil {
		s.t.opts.OnError(err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
