package registry

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/herdkit/herd/internal/wire"
	"github.com/herdkit/herd/keyspace"
)

// trackerState is the state of one Run, owned by its goroutine.
//
// Notices are hints: anyone allowed to PUBLISH on the channel can send one.
// None becomes a join or a leave until a read of the registry confirms it:
// each batch of notices costs one read of the entries they name, with the
// registry's version. Every registry write carries a version minted by
// Redis, larger than every earlier one (keyspace.Keys.ProcessesVersion); the
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

// newTrackerState returns the state of a Run of t that has seen nothing.
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
	hints, bad := s.hints(payloads)
	ids := s.unread(ctx, hints)
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), confirmBatch)]
		ids = ids[len(chunk):]
		s.confirm(ctx, chunk, hints)
	}
	for _, err := range bad {
		s.fail(ctx, err)
	}
}

// hints reads payloads: what they say, by process id, and the errors of
// the malformed ones.
func (s *trackerState) hints(payloads [][]byte) (map[string][]hint, []error) {
	var bad []error
	hints := map[string][]hint{}
	for _, payload := range payloads {
		id, h, err := s.hintOf(payload)
		switch {
		case err != nil:
			bad = append(bad, err)
		case id != "":
			hints[id] = append(hints[id], h)
		}
	}
	return hints, bad
}

// hintOf reads one notice: the process it names and what it says of it.
// id is "" for a notice the tracker ignores (no valid node id is empty);
// err says what is wrong with a malformed one.
func (s *trackerState) hintOf(payload []byte) (id string, h hint, err error) {
	n, err := keyspace.ParseNotice(payload)
	if err != nil {
		return "", hint{}, fmt.Errorf("registry events: %w", err)
	}
	switch {
	case !registryNotice(n):
		return "", hint{}, nil // a lock notice, or one of another program
	case keyspace.ValidateName("node id", n.NodeID) != nil:
		return "", hint{}, fmt.Errorf("%s notice %q: %w: no valid nodeId", n.Event, wire.Truncate(string(payload)), ErrUnconfirmedNotice)
	case s.ignores(n):
		return "", hint{}, nil
	}
	if err := checkCarried(n); err != nil {
		return "", hint{}, err
	}
	return n.NodeID, hint{unregistered: n.Event == keyspace.NoticeUnregistered, version: n.Version}, nil
}

// registryNotice reports whether n is one of the registry's notices, a
// registration or an unregistration.
func registryNotice(n keyspace.Notice) bool {
	return n.Event == keyspace.NoticeRegistered || n.Event == keyspace.NoticeUnregistered
}

// ignores reports whether the registry notice n, about a valid node id,
// tells the tracker nothing to confirm: it is about the tracker's own
// process, or an emulated read removed an expired entry (the native
// backends announce no expiry, so the sweep decides for all three alike).
func (s *trackerState) ignores(n keyspace.Notice) bool {
	return n.NodeID == s.t.opts.Self || (n.Event == keyspace.NoticeUnregistered && n.Reason == keyspace.ReasonExpired)
}

// checkCarried checks the entry a registration notice carries: it must
// decode as the entry of the notice's node.
func checkCarried(n keyspace.Notice) error {
	if n.Event != keyspace.NoticeRegistered {
		return nil
	}
	if _, err := decodeProcess(n.NodeID, string(n.Process)); err != nil {
		return fmt.Errorf("registered notice for %q: %w: %w", wire.Truncate(n.NodeID), ErrCorruptEntry, err)
	}
	return nil
}

// unread drops from hints every hint whose write a read reflects already,
// and returns, sorted, the ids left with hints to confirm.
func (s *trackerState) unread(ctx context.Context, hints map[string][]hint) []string {
	var ids []string
	for _, id := range sortedKeys(hints) {
		if hints[id] = s.unreadOf(ctx, id, hints[id]); len(hints[id]) > 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// unreadOf returns the hints about id whose write no read reflects yet,
// in place of hints. Of the others, one thing may be left to learn: that a
// slave the read found gone unregistered; it leaves then.
func (s *trackerState) unreadOf(ctx context.Context, id string, hints []hint) []hint {
	fresh := hints[:0]
	for _, h := range hints {
		if !h.readBy(s.applied(id)) {
			fresh = append(fresh, h)
		} else if h.unregistered && s.absent[id] {
			s.leave(ctx, id, LeftUnregistered)
		}
	}
	return fresh
}

// readBy reports whether the write h tells of is reflected by a read that
// reflects every write up to version applied; a hint without a version
// never is.
func (h hint) readBy(applied int64) bool {
	return h.version > 0 && h.version <= applied
}

// entryRead is what a confirming read showed of one process.
type entryRead struct {
	p       ProcessInfo
	present bool // the entry is in the registry
	live    bool // present, with a lastSeen at most SlaveTimeout old
}

// confirm reads the entries of ids and applies what the read shows; each
// hint is checked against it, and one the registry contradicts is reported.
func (s *trackerState) confirm(ctx context.Context, ids []string, hints map[string][]hint) {
	t := s.t
	entries, version, err := t.reg.entries(ctx, ids)
	if err != nil {
		s.fail(ctx, fmt.Errorf("confirm registry notices: %w", err))
		t.requestSweep() // it catches up on what these notices said
		return
	}
	now := t.reg.clock.Now()
	for _, id := range ids {
		p, present := entries[id]
		e := entryRead{p: p, present: present, live: present && now.Sub(p.LastSeen) <= t.opts.SlaveTimeout}
		left := s.check(ctx, id, hints[id], e, version)
		s.apply(ctx, id, e, left, now)
		s.saw(id, version)
	}
}

// check holds the hints about id against e, read at the registry's
// version, reporting each the read contradicts. It returns whether a hint
// that id unregistered is consistent with the read.
func (s *trackerState) check(ctx context.Context, id string, hints []hint, e entryRead, version int64) (left bool) {
	for _, h := range hints {
		switch {
		case h.contradictedBy(e):
			s.fail(ctx, s.contradicted(id, h, e.p))
		case h.unfoundedBy(e, version):
			s.fail(ctx, s.unfounded(id, h, version))
		case !e.present && h.unregistered:
			left = true
		}
	}
	return left
}

// contradictedBy reports whether e contradicts h: h says the process
// unregistered, but its entry is live and not newer than h.
func (h hint) contradictedBy(e entryRead) bool {
	return e.live && h.unregistered && !(h.version > 0 && h.version < e.p.Version)
}

// unfoundedBy reports whether the registry, read at version and showing e,
// cannot have sent h: its version is above every version minted yet, or it
// is a registration without a version for an entry the read does not show.
func (h hint) unfoundedBy(e entryRead, version int64) bool {
	future := version > 0 && h.version > version
	return future || (!e.present && h.version == 0 && !h.unregistered)
}

// apply reports what the confirming read e shows of id: a live slave
// joins (or stays, its lastSeen brought up to date), a process that is no
// longer a slave leaves, and so does one that left (a hint that it
// unregistered is consistent with the read) or vanished.
func (s *trackerState) apply(ctx context.Context, id string, e entryRead, left bool, now time.Time) {
	switch {
	case !e.present && left:
		s.leave(ctx, id, LeftUnregistered)
	case !e.present:
		s.vanished(ctx, id, now)
	case e.p.Role != RoleSlave:
		s.leave(ctx, id, LeftMaster)
	case e.live:
		s.live(ctx, e.p)
	}
	// Otherwise a stale slave: the sweep removes it and reports it, as for
	// any slave that stopped heartbeating.
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
	event := keyspace.NoticeRegistered
	if h.unregistered {
		event = keyspace.NoticeUnregistered
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
	snap, err := s.t.reg.load(ctx, true)
	if err != nil {
		s.fail(ctx, fmt.Errorf("sweep slaves: %w", err))
		return
	}
	now := s.t.reg.clock.Now()
	r := s.classify(ctx, snap, now)
	s.sweptAt(snap.version)
	s.reconcile(ctx, r, now)
}

// sweepRead is what a sweep found, by process id.
type sweepRead struct {
	present map[string]ProcessInfo // the live slaves, and the stale ones it could not remove that are known
	masters map[string]bool        // the processes that are not slaves
	stale   map[string]bool        // the stale slaves this sweep removed
}

// classify sorts the entries of snap, read at now, into a sweepRead, removing
// the stale slaves on the way. The tracker's own process is left out.
func (s *trackerState) classify(ctx context.Context, snap snapshot, now time.Time) sweepRead {
	r := sweepRead{present: map[string]ProcessInfo{}, masters: map[string]bool{}, stale: map[string]bool{}}
	for i, p := range snap.infos {
		id := p.ProcessID
		switch {
		case id == s.t.opts.Self:
		case p.Role != RoleSlave:
			r.masters[id] = true
		case now.Sub(p.LastSeen) <= s.t.opts.SlaveTimeout:
			r.present[id] = p
		default:
			s.classifyStale(ctx, r, p, snap.raws[i])
		}
	}
	return r
}

// classifyStale puts the stale slave p, read as raw, into r: removed, it
// is stale; not removed (an error, or rewritten or removed by someone else
// since the read), a known slave stays present as it is, and the next
// sweep decides.
func (s *trackerState) classifyStale(ctx context.Context, r sweepRead, p ProcessInfo, raw string) {
	id := p.ProcessID
	if s.removeStale(ctx, p, raw) {
		r.stale[id] = true
		return
	}
	if _, ok := s.known[id]; ok {
		r.present[id] = p
	}
}

// removeStale removes the entry of the stale slave p if it still holds
// raw, the value the sweep read, and reports whether it did.
func (s *trackerState) removeStale(ctx context.Context, p ProcessInfo, raw string) bool {
	t := s.t
	removed, err := t.reg.removeStale(ctx, p.ProcessID, raw)
	if err != nil {
		s.fail(ctx, err)
	}
	if removed == 0 {
		return false
	}
	s.saw(p.ProcessID, removed)
	t.reg.cfg.Logger.Info().Str("process", p.ProcessID).Time("lastSeen", p.LastSeen).
		Dur("slaveTimeout", t.opts.SlaveTimeout).Msg("removed a stale slave")
	return true
}

// sweptAt records that every write up to version, the registry's version
// as of a sweep's read, is reflected now; the versions seen before are not
// needed any more.
func (s *trackerState) sweptAt(version int64) {
	s.swept = max(s.swept, version)
	for id, v := range s.seen {
		if v <= s.swept {
			delete(s.seen, id)
		}
	}
}

// reconcile reports what the sweep r, read at now, shows: first the known
// slaves that left, then the slaves that joined, each in process id order.
func (s *trackerState) reconcile(ctx context.Context, r sweepRead, now time.Time) {
	for _, id := range sortedKeys(s.known) {
		s.recheck(ctx, id, r, now)
	}
	for _, id := range sortedKeys(r.present) {
		s.join(ctx, r.present[id])
	}
}

// recheck holds the known slave id against the sweep r, read at now: it
// is live, or it left (for a master, as stale), or it vanished.
func (s *trackerState) recheck(ctx context.Context, id string, r sweepRead, now time.Time) {
	switch p, present := r.present[id]; {
	case present:
		s.live(ctx, p)
	case r.masters[id]:
		s.leave(ctx, id, LeftMaster)
	case r.stale[id]:
		s.leave(ctx, id, LeftStale)
	default:
		s.vanished(ctx, id, now)
	}
}

// live records that a read found the slave p live: a known one is kept
// current (its lastSeen), one not known joins.
func (s *trackerState) live(ctx context.Context, p ProcessInfo) {
	delete(s.absent, p.ProcessID)
	if _, ok := s.known[p.ProcessID]; ok {
		s.known[p.ProcessID] = p.Slave()
		return
	}
	s.join(ctx, p)
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

// fail reports err, a problem the tracker goes on after, to the log and
// OnError, unless the run is over.
func (s *trackerState) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // the run is over; the error is its cancellation
	}
	s.t.reg.cfg.Logger.Warn().Err(err).Msg("slave tracker")
	if s.t.opts.OnError != nil {
		s.t.opts.OnError(err)
	}
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
