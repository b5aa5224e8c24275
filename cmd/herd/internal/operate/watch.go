package operate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdkit/herd/keyspace"
	"github.com/herdkit/herd/registry"
)

// DefaultInterval is the default re-sync interval of a Watcher.
const DefaultInterval = time.Second

// Update is what a Watcher hands over after each read.
type Update struct {
	// Snapshot is the last snapshot read successfully.
	Snapshot Snapshot
	// Events are the changes this read confirmed, in order.
	Events []Event
	// Err is the error of this read, nil when it succeeded (Snapshot is
	// then this read's).
	Err error
}

// Watcher follows one lock name live. It reads a Snapshot when a notice
// arrives on the events or registry-events channel, when the master's lock
// is due to expire, and every interval otherwise, and reports the
// differences between consecutive snapshots as Events. A notice only
// makes it read sooner and qualifies what the read shows (a release, the
// reason of an unregistration); one that the read does not confirm is
// dropped, and a lost one delays what it announced by at most an interval.
//
// A Watcher is used by one goroutine: Run.
type Watcher struct {
	reader   *Reader
	interval time.Duration
	now      func() time.Time

	// The fields below are owned by Run.
	prev      *Snapshot
	offset    time.Duration         // server clock minus local clock, at the last read
	released  map[int64]releaseHint // release notices by term
	left      map[string]leftHint   // unregistration notices by process id
	lastEnd   *ended                // the last mastership that ended without a successor yet
	warnSince map[string]time.Time  // warnings of the last reads, by when first seen
	warned    map[string]bool       // warnings already reported as events
	failing   string                // the last read error's message, "" when reads succeed
	pending   *Snapshot             // the snapshot being explained (unexplained)
}

// leftHint is an unregistration notice: when it came and its reason.
type leftHint struct {
	at     time.Time // local clock
	reason string
}

// releaseHint is a release notice: when it came and whom it named.
type releaseHint struct {
	at time.Time // local clock
	to string
}

// ended is a mastership that ended, for the failover that follows.
type ended struct {
	nodeID string
	term   int64
	at     time.Time // server clock; the earliest possible end when atMost
	atMost bool      // the end is only bounded: the gap is an upper bound
}

// NewWatcher returns a Watcher reading through r, re-syncing every interval
// (DefaultInterval when 0).
func NewWatcher(r *Reader, interval time.Duration) *Watcher {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Watcher{
		reader: r, interval: interval, now: time.Now,
		released: map[int64]releaseHint{}, left: map[string]leftHint{},
		warnSince: map[string]time.Time{}, warned: map[string]bool{},
	}
}

// Interval returns the re-sync interval.
func (w *Watcher) Interval() time.Duration { return w.interval }

// Run subscribes to the lock's notice channels, reads the first snapshot and
// calls fn with it (one EventState), then with every later read, until ctx
// ends; it then returns nil. fn is called on Run's goroutine, one call at a
// time; a slow fn delays the next read. A failed read after the first is
// handed to fn (Update.Err, one EventError per new error) and retried every
// interval; a read has at most twice the interval (and two seconds). Run
// returns an error when the subscription or the first read
// fails (classified as Classify does) or when the lock name is unknown
// (ErrUnknownLock).
func (w *Watcher) Run(ctx context.Context, fn func(Update)) error {
	conn := w.reader.conn
	ps := conn.Client.Subscribe(ctx, conn.Keys.Events, conn.Keys.RegistryEvents)
	rctx, cancel := context.WithTimeout(ctx, DialTimeout)
	_, err := ps.Receive(rctx)
	if err == nil {
		// A release the master's succession names is announced only on the
		// ranked processes' own channels (keyspace.Keys.Turn).
		err = ps.PSubscribe(rctx, conn.Keys.TurnPattern())
	}
	cancel()
	if err != nil {
		_ = ps.Close()
		if ctx.Err() != nil {
			return nil
		}
		return Classify(fmt.Sprintf("subscribe to %s and %s", conn.Keys.Events, conn.Keys.RegistryEvents), err)
	}
	// The notices are stamped with their arrival as they come, on a
	// goroutine of their own, so a notice that comes during a read keeps
	// its time. The goroutine ends when the subscription is closed.
	notices := make(chan notice, 256)
	forwarded := make(chan struct{})
	defer func() {
		_ = ps.Close()
		<-forwarded
	}()
	go func() {
		defer close(forwarded)
		for msg := range ps.Channel(redis.WithChannelHealthCheckInterval(10 * time.Second)) {
			n, _ := keyspace.ParseNotice([]byte(msg.Payload)) // one that does not parse still wakes the watcher
			select {
			case notices <- notice{Notice: n, at: w.now()}:
			default: // far behind: the periodic read covers what is dropped
			}
		}
	}()

	rctx, cancel = context.WithTimeout(ctx, 2*DialTimeout)
	first, err := w.reader.Read(rctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if !first.Known {
		return UnknownLock(ctx, conn)
	}
	w.accept(first)
	fn(Update{Snapshot: first, Events: []Event{w.stateEvent(first, "")}})

	timer := time.NewTimer(w.next(first))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg := <-notices:
			w.hint(msg)
			w.drain(notices)
		case <-timer.C:
		}
		start := w.now()
		rctx, cancel := context.WithTimeout(ctx, max(2*w.interval, 2*time.Second))
		snap, err := w.reader.Read(rctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			var evs []Event
			if msg := err.Error(); msg != w.failing {
				w.failing = msg
				evs = append(evs, Event{Time: w.now(), Kind: EventError, Message: msg})
			}
			fn(Update{Snapshot: *w.prev, Events: evs, Err: err})
			timer.Reset(w.interval)
			continue
		}
		// The scripts publish in the step that writes, but a notice can
		// reach this subscription after the read saw its change: take in
		// the notices that came, and wait a little for those a change
		// without one calls for.
		w.drain(notices)
		if w.unexplained(snap) {
			w.await(notices, settleWait)
		}
		fn(Update{Snapshot: snap, Events: w.diff(snap, start)})
		timer.Reset(w.next(snap))
	}
}

// settleWait is how long a read whose changes lack their notices waits for
// them.
const settleWait = 30 * time.Millisecond

// drain takes in the notices that have arrived, without waiting.
func (w *Watcher) drain(notices <-chan notice) {
	for {
		select {
		case msg := <-notices:
			w.hint(msg)
		default:
			return
		}
	}
}

// await takes in notices for up to d, or until s has no unexplained
// change left.
func (w *Watcher) await(notices <-chan notice, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for w.unexplainedNow() {
		select {
		case msg := <-notices:
			w.hint(msg)
		case <-t.C:
			return
		}
	}
}

// unexplained reports whether s shows, against the previous snapshot, the
// end of a mastership or the removal of an entry that no notice explains
// and that the clock does not explain either (an expiry).
func (w *Watcher) unexplained(s Snapshot) bool {
	w.pending = &s
	return w.unexplainedNow()
}

func (w *Watcher) unexplainedNow() bool {
	s, prev := w.pending, w.prev
	if s == nil || prev == nil {
		return false
	}
	if pm, cm := prev.Master, s.Master; pm != nil && (cm == nil || cm.NodeID != pm.NodeID || cm.Term != pm.Term) {
		if _, ok := w.released[pm.Term]; !ok && !w.expired(*prev, s) {
			return true
		}
	}
	now := make(map[string]bool, len(s.Processes))
	for _, p := range s.Processes {
		now[p.Info.ProcessID] = true
	}
	for _, p := range prev.Processes {
		if _, ok := w.left[p.Info.ProcessID]; !now[p.Info.ProcessID] && !ok && p.Age+s.Time.Sub(prev.Time) < s.ProcessTTL {
			return true
		}
	}
	return false
}

// expired reports whether the master of prev lost its lock by expiry, as
// far as the clock of s tells: its TTL ran out before s was read, and
// before its successor (if any) began.
func (w *Watcher) expired(prev Snapshot, s *Snapshot) bool {
	pm, cm := prev.Master, s.Master
	if pm.TTL < 0 {
		return false
	}
	expiry := prev.Time.Add(pm.TTL)
	return !s.Time.Before(expiry) && (cm == nil || cm.Since.IsZero() || !cm.Since.Before(expiry))
}

// next is the time until the next periodic read: the interval, or until
// just after the master's lock expires when that is sooner.
func (w *Watcher) next(s Snapshot) time.Duration {
	d := w.interval
	if s.Master != nil && s.Master.TTL >= 0 {
		d = min(d, s.Master.TTL+5*time.Millisecond)
	}
	return d
}

// notice is a message of the notice channels, as keyspace.ParseNotice read
// it (the zero Notice when it did not parse), and when it arrived.
type notice struct {
	keyspace.Notice
	at time.Time // local clock
}

// hint records a notice. Notices that did not parse, or that the watcher
// has no use for, are dropped: they only made it read sooner.
func (w *Watcher) hint(n notice) {
	now := n.at
	switch n.Event {
	case keyspace.NoticeReleased:
		w.released[n.Term] = releaseHint{at: now, to: n.To}
	case keyspace.NoticeUnregistered:
		reason := n.Reason
		if reason == "" {
			reason = "left"
		}
		w.left[n.NodeID] = leftHint{at: now, reason: reason}
	}
}

// accept makes s the previous snapshot.
func (w *Watcher) accept(s Snapshot) {
	if !s.Local.IsZero() {
		w.offset = s.Time.Sub(s.Local)
	}
	w.prev = &s
}

// serverTime converts a local time to the server's clock.
func (w *Watcher) serverTime(local time.Time) time.Time { return local.Add(w.offset) }

// diff compares s, read from start on, with the previous snapshot and
// returns the events that tell the difference; s becomes the previous one.
func (w *Watcher) diff(s Snapshot, start time.Time) []Event {
	now := w.now()
	prev := *w.prev
	w.accept(s)
	var evs []Event
	add := func(e Event) {
		e.Time = now
		evs = append(evs, e)
	}
	if w.failing != "" {
		w.failing = ""
		add(w.stateEvent(s, "Redis answers again: "))
	}

	pm, cm := prev.Master, s.Master
	changed := func(a, b *Master) bool { return a.NodeID != b.NodeID || a.Term != b.Term }
	if pm != nil && (cm == nil || changed(pm, cm)) {
		var expiry time.Time
		if pm.TTL >= 0 {
			expiry = prev.Time.Add(pm.TTL)
		}
		end := &ended{nodeID: pm.NodeID, term: pm.Term}
		h, noticed := w.released[pm.Term]
		switch {
		case noticed && pm.Term != 0:
			end.at = w.serverTime(h.at)
			add(Event{Kind: EventReleased, At: end.at, NodeID: pm.NodeID, Identifier: pm.Identifier, Term: pm.Term, To: h.to})
		case w.expired(prev, &s):
			end.at = expiry
			add(Event{Kind: EventExpired, At: end.at, NodeID: pm.NodeID, Identifier: pm.Identifier, Term: pm.Term})
		default:
			end.at, end.atMost = prev.Time, true
			add(Event{Kind: EventReleased, NodeID: pm.NodeID, Identifier: pm.Identifier, Term: pm.Term, Reason: "unannounced"})
		}
		w.lastEnd = end
	}
	if cm != nil && (pm == nil || changed(pm, cm)) {
		add(Event{Kind: EventAcquired, At: cm.Since, NodeID: cm.NodeID, Identifier: cm.Identifier, Term: cm.Term})
		if e := w.lastEnd; e != nil {
			begin, atMost := cm.Since, e.atMost
			if begin.IsZero() {
				begin, atMost = s.Time, true
			}
			add(Event{Kind: EventFailover, At: cm.Since, NodeID: cm.NodeID, Identifier: cm.Identifier, Term: cm.Term,
				From: e.nodeID, FromTerm: e.term, Gap: max(begin.Sub(e.at), 0), GapAtMost: atMost})
			w.lastEnd = nil
		}
	}

	before := make(map[string]Process, len(prev.Processes))
	for _, p := range prev.Processes {
		before[p.Info.ProcessID] = p
	}
	for _, p := range s.Processes {
		old, ok := before[p.Info.ProcessID]
		delete(before, p.Info.ProcessID)
		switch {
		case !ok:
			add(Event{Kind: EventRegistered, NodeID: p.Info.ProcessID, Identifier: p.Info.Identifier, Role: string(p.Info.Role)})
		case old.Info.Role != p.Info.Role:
			add(Event{Kind: EventRole, NodeID: p.Info.ProcessID, Identifier: p.Info.Identifier, Role: string(p.Info.Role)})
		}
	}
	for _, p := range prev.Processes {
		if _, gone := before[p.Info.ProcessID]; !gone {
			continue
		}
		id := p.Info.ProcessID
		switch h, noticed := w.left[id]; {
		case noticed && h.reason == keyspace.ReasonExpired:
			add(Event{Kind: EventProcessExpired, NodeID: id, Identifier: p.Info.Identifier})
		case noticed:
			add(Event{Kind: EventUnregistered, NodeID: id, Identifier: p.Info.Identifier, Reason: h.reason})
		case p.Age+s.Time.Sub(prev.Time) >= s.ProcessTTL:
			add(Event{Kind: EventProcessExpired, NodeID: id, Identifier: p.Info.Identifier})
		default:
			add(Event{Kind: EventUnregistered, NodeID: id, Identifier: p.Info.Identifier, Reason: "unannounced"})
		}
	}

	// Warnings: one that lasts an interval is reported once; a corrupt
	// entry, which the registry reports once, at once.
	seen := map[string]bool{}
	for _, msg := range s.Warnings {
		seen[msg] = true
		first, ok := w.warnSince[msg]
		if !ok {
			first = now
			w.warnSince[msg] = now
		}
		if !w.warned[msg] && !strings.HasPrefix(msg, "no master") &&
			(now.Sub(first) >= w.interval || strings.Contains(msg, registry.ErrCorruptEntry.Error())) {
			w.warned[msg] = true
			add(Event{Kind: EventWarning, Message: msg})
		}
	}
	for msg := range w.warnSince {
		if !seen[msg] {
			delete(w.warnSince, msg)
			delete(w.warned, msg)
		}
	}

	// Every notice that came before this read began is accounted for: the
	// scripts publish in the same step as they write, so this read saw what
	// each announced, or the notice was not true.
	for term, h := range w.released {
		if h.at.Before(start) {
			delete(w.released, term)
		}
	}
	for id, h := range w.left {
		if h.at.Before(start) {
			delete(w.left, id)
		}
	}
	return evs
}

// stateEvent sums s up.
func (w *Watcher) stateEvent(s Snapshot, prefix string) Event {
	e := Event{Time: w.now(), Kind: EventState}
	var b strings.Builder
	b.WriteString(prefix)
	if m := s.Master; m != nil {
		e.NodeID, e.Identifier, e.Term = m.NodeID, m.Identifier, m.Term
		fmt.Fprintf(&b, "master %s", m.NodeID)
		if m.Identifier != "" && m.Identifier != m.NodeID {
			fmt.Fprintf(&b, " (%s)", m.Identifier)
		}
		fmt.Fprintf(&b, ", term %d", m.Term)
		if m.Held >= 0 {
			fmt.Fprintf(&b, ", held %s", FormatAge(m.Held))
		}
	} else {
		b.WriteString("no master")
	}
	masters, slaves := 0, 0
	for _, p := range s.Processes {
		if p.Info.Role == registry.RoleMaster {
			masters++
		} else {
			slaves++
		}
	}
	fmt.Fprintf(&b, "; %s (%s, %s); registry backend %s",
		plural(len(s.Processes), "process", "processes"), plural(masters, "master", "masters"), plural(slaves, "slave", "slaves"), s.Backend)
	e.Message = b.String()
	return e
}

// plural writes n with the noun's form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
