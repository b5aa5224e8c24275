package faults

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// This file holds the checkers of the forger, the transfers and the
// membership oracle (docs/testing.md, "The forger", "Transfers" and "The
// membership oracle"). Each rule names the documented bound it rests on.

// life is one node process as the harness saw it.
type life struct {
	spawned      bool
	spawn, ready int64
	dead         int64 // reaped; 0: ran to the end of the history
	stopping     int64 // got SIGTERM; 0: never
	candidate    bool
	// twin is set for a process started under the node id of another
	// (FaultTwin): it is refused, so it is never listed and can take
	// over from no one, unless Redis lost the entry of that id while it
	// waited: then it holds the id, and the other steps aside. of is that
	// node id.
	twin bool
	of   string
}

// span is one fault in force: from its record to its heal (or the end of
// the history).
type span struct {
	seq        int64
	kind, peer string
	from, to   int64
	latency    time.Duration // latency faults: the delay, jitter included
}

// lives returns every node process of the history by label.
func (c *checker) lives() map[string]*life {
	out := map[string]*life{}
	get := func(label string) *life {
		l := out[label]
		if l == nil {
			l = &life{candidate: true}
			out[label] = l
		}
		return l
	}
	for _, r := range c.recs {
		switch r.Kind {
		case KindSpawn:
			l := get(r.Peer)
			l.spawned, l.spawn = true, r.T
			l.twin = strings.HasPrefix(r.Detail, TwinOf)
			if l.twin {
				l.of = strings.TrimPrefix(r.Detail, TwinOf)
			}
		case KindReady:
			get(r.Proc).ready = r.T
		case KindDead:
			if r.Peer != "" {
				get(r.Peer).dead = r.T
			}
		case KindStopping:
			if l := get(r.Proc); l.stopping == 0 {
				l.stopping = r.T
			}
		case KindStart:
			if strings.Contains(r.Detail, "candidate=false") {
				get(r.Proc).candidate = false
			}
		}
	}
	return out
}

// spans returns the faults of the history, in the order they began.
func (c *checker) spans() []span {
	heals := map[int64]int64{}
	for _, r := range c.recs {
		if r.Kind == KindHeal {
			heals[r.Seq] = r.T
		}
	}
	end := c.end()
	var out []span
	for _, r := range c.recs {
		if r.Kind != KindFault {
			continue
		}
		s := span{seq: r.Seq, kind: r.Detail, peer: r.Peer, from: r.T, to: end}
		if h, ok := heals[r.Seq]; ok {
			s.to = h
		}
		if r.Detail == FaultLatency {
			if d, err := time.ParseDuration(r.Variant); err == nil {
				s.latency = d + d/10
			}
		}
		out = append(out, s)
	}
	return out
}

// end returns the instant of the last record.
func (c *checker) end() int64 {
	if n := len(c.recs); n > 0 {
		return c.recs[n-1].T
	}
	return 0
}

// redisFault reports whether s stops or restarts Redis.
func (s span) redisFault() bool { return s.kind == FaultRedisRestart || s.kind == FaultRedisPause }

// neutral reports whether s disturbs no process by itself: the forger, the
// transfer record (its kills are recorded as faults of their own), and a
// twin (its peer must run on undisturbed: the checkers judge it so).
func (s span) neutral() bool {
	return s.kind == FaultForger || s.kind == FaultTransfer || s.kind == FaultHandoverLoss || s.kind == FaultTwin
}

// disturbed reports whether a fault that holds one of procs (or Redis) was
// in force at some instant of [a, b].
func disturbed(spans []span, a, b int64, procs ...string) bool {
	for _, s := range spans {
		if s.neutral() || s.from > b || s.to < a {
			continue
		}
		if s.redisFault() || slices.Contains(procs, s.peer) {
			return true
		}
	}
	return false
}

// latencyOn returns the largest latency in force on proc's link at some
// instant of [a, b].
func latencyOn(spans []span, proc string, a, b int64) time.Duration {
	var d time.Duration
	for _, s := range spans {
		if s.peer == proc && s.latency > 0 && s.from <= b && s.to >= a {
			d = max(d, s.latency)
		}
	}
	return d
}

// stalled reports whether one of procs was not scheduled for longer than
// limit at some instant of [a, b] (its poller recorded a gap).
func (c *checker) stalled(a, b int64, limit time.Duration, procs ...string) bool {
	for _, r := range c.recs {
		if r.Kind == KindGap && slices.Contains(procs, r.Proc) && r.Begin <= b && r.T >= a && time.Duration(r.T-r.Begin) > limit {
			return true
		}
	}
	return false
}

// interval is [from, to] on the monotonic clock.
type interval struct{ from, to int64 }

// minus returns the parts of in not covered by any of cut.
func minus(in []interval, cut []interval) []interval {
	out := in
	for _, x := range cut {
		var next []interval
		for _, y := range out {
			if x.to <= y.from || x.from >= y.to {
				next = append(next, y)
				continue
			}
			if x.from > y.from {
				next = append(next, interval{y.from, x.from})
			}
			if x.to < y.to {
				next = append(next, interval{x.to, y.to})
			}
		}
		out = next
	}
	return out
}

// inside reports whether one of the windows ws holds the instant t.
func inside(ws []interval, t int64) bool { return insideOne(ws, t, t) }

// insideOne reports whether one of the windows ws holds all of [from, to]
// (to 0: not known, from alone). A mastership's end lies between its last
// observation as master and the first that saw it no more: when a fault
// other than the forger began within that span, the fault may have ended
// it (a stop-master whose SIGTERM the poller's gap straddled), not a
// forged notice.
func insideOne(ws []interval, from, to int64) bool {
	to = max(to, from)
	for _, w := range ws {
		if from >= w.from && to <= w.to {
			return true
		}
	}
	return false
}

// windows returns the windows in which no fault but the forger was in
// force (calm): those in which the forger was (forger) and the others
// (quiet).
// Both start once the cluster first settled and end when the harness began
// the shutdown; each fault other than the forger takes out the time from its
// injection to Slack + Reconnect after its heal, which is what the guarantees allow a
// fault to disturb (connections re-made, a new master's first messages).
func (c *checker) windows(spans []span) (forger, quiet, calm []interval) {
	var from, to int64 = 0, c.end()
	for _, r := range c.recs {
		if r.Kind == KindSettled && from == 0 {
			from = r.T
		}
		if r.Kind == KindShutdown {
			to = r.T
			break
		}
	}
	if from == 0 || from >= to {
		return nil, nil, nil
	}
	var cut, forging []interval
	for _, s := range spans {
		switch s.kind {
		case FaultForger:
			forging = append(forging, interval{s.from, s.to})
		case FaultHandoverLoss:
		case FaultRedisRestart:
			// A restart without data costs every process that saw a term a
			// LockTTL wait, then an election: a mastership may begin up to
			// LockTTL + the failover bound after Redis answers again.
			cut = append(cut, interval{s.from, s.to + int64(c.p.LockTTL+max(c.p.Slack, c.p.FailoverBound()))})
		default:
			cut = append(cut, interval{s.from, s.to + int64(c.p.Slack+c.p.Reconnect)})
		}
	}
	calm = minus([]interval{{from, to}}, cut)
	quiet = minus(calm, forging)
	for _, f := range forging {
		forger = append(forger, minus(minus([]interval{f}, cut), []interval{{0, from}, {to, 1<<63 - 1}})...)
	}
	return forger, quiet, calm
}

// maxTermBy returns the largest term of a mastership begun by t.
func (c *checker) maxTermBy(t int64) int64 {
	var m int64
	for _, ms := range c.rep.Masterships {
		if ms.Start <= t {
			m = max(m, ms.Term)
		}
	}
	return m
}

// forgeries judges what the forger could have changed:
//
//   - no process's ObservedTerm and no subscriber's highest term rises
//     above the terms Redis minted: the largest term of a mastership begun
//     by then, or within TransferWindow + FailoverBound after (a process
//     killed between its acquire and its first observation leaves a minted
//     term that no mastership shows until the next one, which is larger);
//   - no mastership begins or ends while the forger alone is in force: a
//     notice is a hint, so none can depose a master or elect one;
//   - deliveries (see there): in the windows with the forger alone, every
//     routed message a master sent to a live slave is handled, as in the
//     windows without any fault.
func (c *checker) forgeries() {
	for _, r := range c.recs {
		if r.Kind == KindForgery {
			c.rep.Forgeries++
			c.rep.Judged["forgery"]++
		}
	}
	if c.rep.Forgeries == 0 && !c.any(KindSettled) {
		return
	}
	allow := int64(c.p.TransferWindow + c.p.FailoverBound())
	for _, r := range c.recs {
		var term int64
		var what string
		switch r.Kind {
		case KindObserved:
			term, what = r.Term, "its ObservedTerm rose to"
		case KindAccepted, KindRejected, KindForgedAccepted:
			term, what = r.Highest, "its subscriber's highest term was"
		default:
			continue
		}
		if minted := c.maxTermBy(r.T + allow); term > minted {
			c.fail("forgery", r.T, "%s: %s %d, above every term Redis minted by then (%d)", r.Proc, what, term, minted)
		}
	}
	spans := c.spans()
	forger, quiet, calm := c.windows(spans)
	for i, m := range c.rep.Masterships {
		stall := c.stalled(m.Start-int64(c.p.LockTTL), m.End, c.p.LockTTL/4, m.Proc)
		// A hand-back is no notice's doing: the master decided it.
		_, handedBack := c.handedBack(m.Term)
		if i > 0 {
			if _, ok := c.handedBack(c.rep.Masterships[i-1].Term); ok {
				continue
			}
		}
		if inside(forger, m.Start) && !stall {
			c.fail("forgery", m.Start, "%s became master (term %d) while the forger alone was in force", m.Proc, m.Term)
		}
		if m.How == "lost" && inside(forger, m.End) && insideOne(calm, m.End, m.Seen) && !stall && !handedBack {
			c.fail("forgery", m.End, "%s's mastership (term %d) ended while the forger alone was in force", m.Proc, m.Term)
		}
	}
	c.deliveries(forger, quiet)
}

// any reports whether the history has a record of kind k.
func (c *checker) any(k Kind) bool {
	return slices.ContainsFunc(c.recs, func(r Record) bool { return r.Kind == k })
}

// deliveries checks that routed messages reach their handlers when nothing
// explains a loss. A message is due when its PUBLISH left a process that was
// master under the message's term at that instant, inside a window with no
// fault in force but the forger (see windows), at least two round trips
// before the window ends, to a process that was alive until Slack after the
// window, and the sender's fence did not refuse it. Pub/sub on a healthy
// Redis loses a message only when the receiver is disconnected, and every
// cause of that is a fault, which the windows leave out: so every due
// message must be handled, in the quiet windows (the control group) and in
// the forger's alike. A forgery that raised a subscriber's fence, deposed a
// master or shut a subscriber off shows as messages not handled.
func (c *checker) deliveries(forger, quiet []interval) {
	type key struct {
		from string
		term int64
		seq  int64
		to   string
	}
	lives := c.lives()
	handled := map[key]bool{}
	refused := map[key]bool{}
	last := map[key]int64{}
	for _, r := range c.recs {
		switch r.Kind {
		case KindAccepted:
			handled[key{r.Peer, r.Term, r.Seq, r.Node}] = true
		case KindRefused:
			refused[key{r.Node, r.Term, r.Seq, r.Peer}] = true
		case KindPublish:
			k := key{r.Node, r.Term, r.Seq, r.Peer}
			last[k] = max(last[k], r.T)
		}
	}
	reported := map[string]int{}
	for k, t := range last {
		var ws []interval
		var due, lost *int
		check := "forgery"
		switch {
		case inside(forger, t):
			ws, due, lost = forger, &c.rep.ForgerDue, &c.rep.ForgerLost
		case inside(quiet, t):
			ws, due, lost, check = quiet, &c.rep.QuietDue, &c.rep.QuietLost, "delivery"
		default:
			continue
		}
		var w interval
		for _, x := range ws {
			if t >= x.from && t <= x.to {
				w = x
			}
		}
		if t > w.to-2*int64(c.p.RoundTrip) || refused[k] {
			continue
		}
		to, ok := lives[k.to]
		if !ok || !to.spawned || to.spawn > t || to.dead != 0 && to.dead <= w.to+int64(c.p.Slack) ||
			to.stopping != 0 && to.stopping <= w.to+int64(c.p.Slack) {
			continue
		}
		m, ok := c.mastership(k.from, k.term)
		if !ok || m.Start > t || m.End < t {
			continue
		}
		*due++
		c.rep.Judged[check]++
		if handled[k] {
			continue
		}
		*lost++
		if reported[check] < 3 {
			reported[check]++
			where := "without any fault in force"
			if check == "forgery" {
				where = "with the forger alone in force"
			}
			c.fail(check, t, "message %d of %s (term %d) to %s, published %s, was never handled", k.seq, k.from, k.term, k.to, where)
		}
	}
}

// transfers judges each transfer against what Transfer promises: a live
// candidate named is master next, within TransferWindow + Slack of the
// request; a dead node or a non-candidate named is never master, and when
// the master did step down, the normal election gives the lock to another
// process within TransferWindow + FailoverBound of the request. Terms only
// grow and no two masters act at once under every variant (the terms and
// overlap checks).
func (c *checker) transfers() {
	for _, f := range c.recs {
		if f.Kind != KindFault || f.Detail != FaultTransfer {
			continue
		}
		variant, _, _ := strings.Cut(f.Variant, ":")
		c.rep.Judged["transfer"]++
		old, ok := c.mastershipByTerm(f.Term)
		if !ok {
			continue
		}
		if _, ok := c.handedBack(f.Term); ok {
			continue // the master handed back to a process of higher priority first
		}
		var next *Mastership
		for i, m := range c.rep.Masterships {
			if m.Term > f.Term && m.Start > old.Start {
				next = &c.rep.Masterships[i]
				break
			}
		}
		stepped := old.End <= f.T+int64(c.p.Slack) && old.How != "open"
		switch variant {
		case TransferLive:
			bound := c.p.TransferWindow + c.p.Slack
			if c.targetDisturbed(f.Peer, f.T, f.T+int64(bound)) {
				continue // the named node may not reach Redis in time: the promise is for a healthy one
			}
			switch {
			case !stepped:
				c.fail("transfer", f.T, "transfer %d to the live candidate %s: %s stayed master (term %d) for %v after the request",
					f.Seq, f.Peer, old.Proc, old.Term, time.Duration(old.End-f.T))
			case next == nil || next.Proc != f.Peer:
				who := "nobody"
				if next != nil {
					who = fmt.Sprintf("%s (term %d)", next.Proc, next.Term)
				}
				c.fail("transfer", f.T, "transfer %d to the live candidate %s: the next master was %s", f.Seq, f.Peer, who)
			case time.Duration(next.Start-f.T) > bound:
				c.fail("transfer", f.T, "transfer %d to %s: master %v after the request, bound %v", f.Seq, f.Peer, time.Duration(next.Start-f.T), bound)
			default:
				c.rep.Transfers = append(c.rep.Transfers, Failover{Fault: f.Variant, Seq: f.Seq, Duration: time.Duration(next.Start - f.T)})
			}
		case TransferDead, TransferNonCandidate:
			bound := c.p.TransferWindow + c.p.FailoverBound()
			for _, m := range c.rep.Masterships {
				if m.Proc == f.Peer && m.Start > f.T {
					c.fail("transfer", m.Start, "transfer %d to the %s node %s: it became master (term %d)", f.Seq, variant, f.Peer, m.Term)
				}
			}
			if !stepped {
				continue // the request was not honoured: nothing to fall back from
			}
			switch {
			case next == nil && c.end()-f.T > int64(bound):
				c.fail("transfer", f.T, "transfer %d to the %s node %s: no master within %v of the request", f.Seq, variant, f.Peer, time.Duration(c.end()-f.T))
			case next != nil && time.Duration(next.Start-f.T) > bound:
				c.fail("transfer", f.T, "transfer %d to the %s node %s: the normal election took %v, bound %v", f.Seq, variant, f.Peer, time.Duration(next.Start-f.T), bound)
			case next != nil:
				c.rep.Transfers = append(c.rep.Transfers, Failover{Fault: f.Variant, Seq: f.Seq, Duration: time.Duration(next.Start - f.T)})
			}
		}
	}
}

// handedBack returns the hand-back that ended mastership term, if one did.
func (c *checker) handedBack(term int64) (Record, bool) {
	for _, r := range c.recs {
		if r.Kind == KindHandBack && r.Term == term {
			return r, true
		}
	}
	return Record{}, false
}

// handBacks judges the hand-backs (KindHandBack) against what
// masterelection.Config.Priority promises: each goes to a process of
// higher priority than the master's (as their KindStart records say), and
// two are at least HandBackWindow apart, less the time one takes (the
// handlers' wait, HeartbeatInterval, and a round trip), whichever masters
// made them. Safety during a hand-back is the overlap and terms checks'.
func (c *checker) handBacks() {
	priority := map[string]int{}
	for _, r := range c.recs {
		if r.Kind != KindStart {
			continue
		}
		for _, f := range strings.Fields(r.Detail) {
			if v, ok := strings.CutPrefix(f, "priority="); ok {
				if n, err := strconv.Atoi(v); err == nil {
					priority[r.Proc] = n
					if r.Node != "" {
						priority[r.Node] = n
					}
				}
			}
		}
	}
	var last *Record
	for i, r := range c.recs {
		if r.Kind != KindHandBack {
			continue
		}
		c.rep.Judged["hand-back"]++
		if from, to := priority[r.Proc], priority[r.Peer]; to <= from {
			c.fail("hand-back", r.T, "%s (priority %d, term %d) handed back to %s, of priority %d", r.Proc, from, r.Term, r.Peer, to)
		}
		if least := c.p.HandBackWindow - c.p.HeartbeatInterval - c.p.RoundTrip; last != nil && c.p.HandBackWindow > 0 && time.Duration(r.T-last.T) < least {
			c.fail("hand-back", r.T, "%s handed back to %s %v after %s handed back to %s: less than HandBackWindow (%v) apart",
				r.Proc, r.Peer, time.Duration(r.T-last.T), last.Proc, last.Peer, c.p.HandBackWindow)
		}
		last = &c.recs[i]
	}
}

// targetDisturbed reports whether a fault could keep node from Redis at some
// instant of [from, to]: one on node itself or on Redis, in force then or
// healed less than Slack + Reconnect before from (its client may still be
// re-dialling, its subscription sleeping in its retry delay).
func (c *checker) targetDisturbed(node string, from, to int64) bool {
	settle := int64(c.p.Slack + c.p.Reconnect)
	for _, s := range c.spans() {
		switch s.kind {
		case FaultTransfer, FaultForger:
			continue
		case FaultRedisRestart, FaultRedisPause, FaultLatency, FaultHandoverLoss:
		default:
			if s.peer != node {
				continue
			}
		}
		if s.from <= to && s.to+settle >= from {
			return true
		}
	}
	return false
}

// mastershipOfNode returns the mastership under term of the process
// labelled node, or of a process running under node id node (a twin that
// kept the id: a notice names the node id, not the process).
func (c *checker) mastershipOfNode(node string, term int64) (Mastership, bool) {
	for _, m := range c.rep.Masterships {
		if m.Term == term && (m.Proc == node || m.Node == node) {
			return m, true
		}
	}
	return Mastership{}, false
}

// mastershipByTerm returns the mastership of term.
func (c *checker) mastershipByTerm(term int64) (Mastership, bool) {
	for _, m := range c.rep.Masterships {
		if m.Term == term {
			return m, true
		}
	}
	return Mastership{}, false
}

// roleWrite is one registry write with role master that the oracle saw: in
// a notice (received at at) or in an entry a poll listed (sent at sent, its
// lastSeen, and read by at).
type roleWrite struct {
	node     string
	term     int64
	sent, at int64 // sent is 0 for a notice: the write ran at most RoundTrip before at, unless Redis was paused in between
	seen     int64 // a notice's lastSeen: when its writer sent it (0: not known)
	notice   bool
}

// roles judges every registry write with role master that a notice or an
// entry shows (the registry watcher's records) against the masterships.
// A write with role master of X under term T is stored by Redis only while
// the lock holds X under T (registry_put.lua), so, with allow = RoundTrip
// plus the latency in force on X's link:
//
//   - X held a mastership under T, or sent the acquire that minted T and
//     registered it in the same script call but lost its reply
//     (lostAcquire), judged as a mastership that ended as it began;
//   - no mastership with a larger term had begun allow before the write was
//     sent (a notice: received; an entry: its lastSeen, taken at the send);
//   - the write was sent no later than StepDownMargin + allow after X's
//     mastership ended, which is when its lock can expire at the latest;
//   - Redis did not lose its data between X's election and the write (the
//     term key is gone then, so no write with role master can be stored);
//   - an entry that still says master once X's mastership has ended, while
//     X runs undisturbed, is written again as a slave's within
//     HeartbeatInterval + CheckInterval + StepDownMargin + allow (the
//     membership loop registers the new role at once).
func (c *checker) roles() {
	spans := c.spans()
	lives := c.lives()
	var writes []roleWrite
	seenEntry := map[string]bool{}
	stale := map[string]bool{} // entries reported by staleMasterEntry, by id/term
	for _, r := range c.recs {
		switch r.Kind {
		case KindRegNotice:
			if r.Detail == NoticeRegistered && r.Role == "master" {
				writes = append(writes, roleWrite{node: r.Peer, term: r.Term, at: r.T, seen: r.Seen, notice: true})
			}
		case KindRegPoll:
			for _, e := range ParseListing(r.Detail) {
				if e.Role != "master" {
					continue
				}
				k := fmt.Sprintf("%s/%d/%d", e.ID, e.Term, e.LastSeen)
				if mk := fmt.Sprintf("%s/%d", e.ID, e.Term); !stale[mk] && c.staleMasterEntry(r, e, lives, spans) {
					stale[mk] = true
				}
				if seenEntry[k] {
					continue
				}
				seenEntry[k] = true
				writes = append(writes, roleWrite{node: e.ID, term: e.Term, sent: e.LastSeen, at: r.T})
			}
		}
	}
	for _, w := range writes {
		c.rep.Judged["role"]++
		what := fmt.Sprintf("registry entry (lastSeen %s) listed by a read that ended at %s", c.at(w.sent), c.at(w.at))
		sent := w.sent
		if w.notice {
			what = "registered notice received at " + c.at(w.at)
			sent = w.at
			if from, ok := pausedBefore(spans, w.at, int64(c.p.RoundTrip)); ok {
				// Redis was stopped until less than a round trip before the
				// notice came: the write may have run just before the stop,
				// its notice waiting in Redis's output buffers until the
				// resume. It ran after it was sent (seen) all the same.
				sent = min(sent, max(w.seen, from-int64(c.p.RoundTrip)))
				what += fmt.Sprintf(" (Redis paused from %s; judged as written at %s)", c.at(from), c.at(sent))
			}
		}
		allow := int64(c.p.RoundTrip + latencyOn(spans, w.node, sent-int64(c.p.Slack), w.at))
		m, ok := c.mastershipOfNode(w.node, w.term)
		if !ok {
			if l := lives[w.node]; l != nil && l.dead != 0 && l.dead <= w.at+int64(c.p.Slack) {
				continue // killed between its election and its first observation
			}
			seen := w.seen
			if !w.notice {
				seen = w.sent
			}
			call, lost := c.lostAcquire(w.node, seen, sent, allow)
			if !lost {
				c.fail("role", w.at, "%s says %s is master under term %d, which it never held", what, w.node, w.term)
				continue
			}
			// Its acquire took the lock and registered it in one script
			// call whose reply it never read: judged as a mastership that
			// ended as it began.
			m = Mastership{Proc: w.node, Node: w.node, Term: w.term, Start: call, End: call, How: "lost"}
		}
		for _, n := range c.rep.Masterships {
			if n.Term > w.term && n.Start < sent-allow {
				c.fail("role", w.at, "%s says %s is master under term %d, but %s had been master under term %d for %v when it was written",
					what, w.node, w.term, n.Proc, n.Term, time.Duration(sent-n.Start))
				break
			}
		}
		if m.How != "open" && sent > m.End+int64(c.p.StepDownMargin)+allow {
			c.fail("role", w.at, "%s says %s is master under term %d, written %v after that mastership ended",
				what, w.node, w.term, time.Duration(sent-m.End))
		}
		if loss, ok := c.lastLossBetween(m.Start, sent-allow); ok && (w.notice || w.sent > loss) {
			c.fail("role", w.at, "%s says %s is master under term %d, written after Redis lost its data at %s",
				what, w.node, w.term, c.at(loss))
		}
	}
}

// lostAcquire returns when node sent the acquire that may have written a
// registry entry that says node is master under a term it never held: the
// election's first acquire (Start's) registers the new master in the same script call
// (rdb.AcquireRegister), and when its reply is lost the process never
// learns of the term, registers as a slave at once, and leaves the lock to
// expire. Only that acquire (AcquireRegister, Start's first) registers. The
// entry's lastSeen, seen, is taken just before that call is sent: the call
// is node's earliest such acquire sent at most allow before seen and Slack
// + allow after it (the process may be descheduled in between). When seen
// is not known (0: a notice without it), the call is node's latest such
// acquire sent at most allow after the write was seen, at, and at most an
// acquire's longest deadline (Start's: LockTTL - StepDownMargin) + allow
// before it. ok is false when there is none.
func (c *checker) lostAcquire(node string, seen, at, allow int64) (call int64, ok bool) {
	from, to := seen-allow, seen+int64(c.p.Slack)+allow
	if seen == 0 {
		from, to = at-int64(c.p.LockTTL-c.p.StepDownMargin)-allow, at+allow
	}
	for _, r := range c.recs {
		if r.Kind == KindLockCall && r.Detail == AcquireRegister && r.Node == node && r.T >= from && r.T <= to {
			call, ok = r.T, true
			if seen != 0 {
				break // the call that took that lastSeen, not a retry after it
			}
		}
	}
	return call, ok
}

// pausedBefore returns the start of the earliest Redis pause in force at
// at or ended less than roundTrip before it.
func pausedBefore(spans []span, at, roundTrip int64) (int64, bool) {
	var from int64
	found := false
	for _, s := range spans {
		if s.kind == FaultRedisPause && s.from <= at && s.to >= at-roundTrip && (!found || s.from < from) {
			from, found = s.from, true
		}
	}
	return from, found
}

// staleMasterEntry judges entry e of poll r: once e's mastership has ended
// and its process runs undisturbed, the entry must say slave soon. It
// reports whether it found a violation.
func (c *checker) staleMasterEntry(r Record, e Listed, lives map[string]*life, spans []span) bool {
	m, ok := c.mastership(e.ID, e.Term)
	if !ok {
		if call, lost := c.lostAcquire(e.ID, e.LastSeen, r.T, int64(c.p.RoundTrip)); lost {
			m, ok = Mastership{Proc: e.ID, Node: e.ID, Term: e.Term, Start: call, End: call, How: "lost"}, true
		}
	}
	l := lives[e.ID]
	if !ok || m.How != "lost" || l == nil || l.dead != 0 && l.dead <= r.T || l.stopping != 0 && l.stopping <= r.T {
		return false
	}
	from := m.End
	for _, s := range spans {
		if !s.neutral() && (s.peer == e.ID || s.redisFault()) && s.from <= r.Begin && s.to >= m.End {
			from = max(from, s.to) // held by a fault meanwhile: counted from its end
		}
	}
	bound := c.p.HeartbeatInterval + c.p.CheckInterval + c.p.StepDownMargin + c.p.RoundTrip + latencyOn(spans, e.ID, m.End, r.T)
	if c.p.HeartbeatInterval > 0 && r.Begin-from > int64(bound) && !c.stalled(from, r.T, bound/2, e.ID) {
		c.fail("role", r.T, "%s's registry entry still said master (term %d) %v after that mastership ended, bound %v",
			e.ID, e.Term, time.Duration(r.Begin-from), bound)
		return true
	}
	return false
}

// at formats a monotonic instant for a violation.
func (c *checker) at(t int64) string {
	if len(c.recs) == 0 {
		return "?"
	}
	return fmt.Sprintf("%.3fms", float64(t-c.recs[0].T)/1e6)
}

// The registry notices' events (keyspace.NoticeRegistered and
// keyspace.NoticeUnregistered), as the watcher writes them in Detail.
const (
	NoticeRegistered   = "registered"
	NoticeUnregistered = "unregistered"
)

// slaveEvents judges the masters' slave events beyond their alternation
// (membership):
//
//   - none names a node id that no process ever had (a ghost);
//   - a slave-removed of S by master M needs a cause: S ended or was
//     stopping, S became master, or S's heartbeats may not have arrived for
//     SlaveTimeout (a fault held S, M or Redis, or S or M was not scheduled,
//     within SlaveTimeout + CheckInterval + Slack before it). A slave whose
//     heartbeats kept arriving is never removed;
//   - once the cluster settled (KindSettled), every live slave that no
//     fault holds is, CheckInterval + Slack later, reported registered by
//     the master in office throughout: joined, or joined again after a
//     leave, and exactly once (membership checks that no join repeats).
func (c *checker) slaveEvents() {
	if !c.any(KindSpawn) {
		return // a history without the harness's records of the processes
	}
	lives := c.lives()
	spans := c.spans()
	for _, r := range c.recs {
		if r.Kind != KindSlaveJoined && r.Kind != KindSlaveLeft {
			continue
		}
		c.rep.Judged["slave-events"]++
		s, ok := lives[r.Peer]
		if !ok || !s.spawned {
			c.fail("slave-events", r.T, "%s (term %d) reported %s of %q, which no process ever was", r.Proc, r.Term, r.Kind, r.Peer)
			continue
		}
		if r.Kind != KindSlaveLeft {
			continue
		}
		look := r.T - int64(c.p.SlaveTimeout+c.p.CheckInterval+c.p.Slack)
		switch {
		case s.dead != 0 && s.dead <= r.T+int64(c.p.Slack), s.stopping != 0 && s.stopping <= r.T:
		case slices.ContainsFunc(c.rep.Masterships, func(m Mastership) bool {
			return m.Proc == r.Peer && m.Start <= r.T+int64(c.p.RoundTrip) && m.End >= look
		}):
		case disturbed(spans, look, r.T, r.Peer, r.Proc):
		case c.stalled(look, r.T, c.p.CheckInterval, r.Peer, r.Proc):
		default:
			c.fail("slave-events", r.T, "%s (term %d) reported slave-removed of %s, whose heartbeats kept arriving (alive, no fault on it, the master or Redis in the %v before)",
				r.Proc, r.Term, r.Peer, time.Duration(r.T-look))
		}
	}
	// Joined once the cluster settled.
	grace := int64(c.p.CheckInterval + c.p.Slack)
	for _, st := range c.recs {
		if st.Kind != KindSettled {
			continue
		}
		m, ok := c.mastership(st.Peer, st.Term)
		check := st.T + grace
		if !ok || m.End < check || m.Start > st.T || disturbed(spans, st.T, check, st.Peer) {
			continue
		}
		for label, s := range lives {
			if label == st.Peer || s.twin || s.ready == 0 || s.ready > st.T || s.dead != 0 && s.dead <= check ||
				s.stopping != 0 && s.stopping <= check || disturbed(spans, st.T-int64(c.p.Slack), check, label) {
				continue
			}
			if slices.ContainsFunc(c.rep.Masterships, func(x Mastership) bool { return x.Proc == label && x.Start <= check && x.End >= st.T }) {
				continue
			}
			c.rep.Judged["slave-events"]++
			var last Kind
			for _, r := range c.recs {
				if r.T > check {
					break
				}
				if (r.Kind == KindSlaveJoined || r.Kind == KindSlaveLeft) && r.Proc == m.Proc && r.Term == m.Term && r.Peer == label {
					last = r.Kind
				}
			}
			if last != KindSlaveJoined {
				state := "never reported it"
				if last == KindSlaveLeft {
					state = "had reported it removed"
				}
				c.fail("slave-events", check, "%s (term %d) %s as registered %v after the cluster settled with %s live and listed",
					m.Proc, m.Term, state, time.Duration(grace), label)
			}
		}
	}
}

// listing judges the registry watcher's reads: every live process that no
// fault disturbs is listed once it has run for ProcessTTL (it registers at
// Start and heartbeats every CheckInterval, well within its TTL), and every
// ended process is gone ProcessTTL + RoundTrip after it was reaped (its last
// write runs before that), plus one sweep (CheckInterval) on the emulated
// backend, whose entries go at the next read that runs the expiry.
func (c *checker) listing() {
	if c.p.ProcessTTL == 0 {
		return
	}
	lives := c.lives()
	spans := c.spans()
	ttl := int64(c.p.ProcessTTL)
	emulated := slices.ContainsFunc(c.recs, func(r Record) bool {
		return r.Kind == KindNote && strings.HasPrefix(r.Detail, "registry backend: emulated")
	})
	gone := ttl + int64(c.p.RoundTrip)
	if emulated {
		gone += int64(c.p.CheckInterval)
	}
	missing := map[string]int{}
	for _, r := range c.recs {
		if r.Kind != KindRegPoll {
			continue
		}
		listed := map[string]bool{}
		for _, e := range ParseListing(r.Detail) {
			listed[e.ID] = true
		}
		for _, label := range sortedLabels(lives) {
			l := lives[label]
			switch {
			case listed[label] && l.dead != 0 && r.Begin > l.dead+gone+int64(latencyOn(spans, label, l.dead-ttl, l.dead)) &&
				!twinHeld(lives, label, r.Begin-gone):
				c.fail("listing", r.T, "%s, reaped at %s, was still listed %v later (bound %v)", label, c.at(l.dead), time.Duration(r.Begin-l.dead), time.Duration(gone))
			case listed[label]:
			case !l.spawned || l.twin || l.spawn > r.Begin-ttl || l.dead != 0 && l.dead <= r.T || l.stopping != 0 && l.stopping <= r.T:
			case disturbed(spans, r.Begin-ttl, r.T, label) || c.stalled(r.Begin-ttl, r.T, c.p.CheckInterval, label):
			default:
				c.rep.Judged["listing"]++
				missing[label]++
				if missing[label] <= 2 {
					c.fail("listing", r.T, "%s, alive for %v with no fault on it or Redis in the last ProcessTTL, was not listed by the read that ended at %s",
						label, time.Duration(r.Begin-l.spawn), c.at(r.T))
				}
				continue
			}
			if listed[label] {
				c.rep.Judged["listing"]++
			}
		}
	}
}

func sortedLabels(m map[string]*life) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// twinHeld reports whether a twin of the process labelled node was alive
// at or after at: it may have taken node's id (Redis lost the entry while
// it waited, and node stepped aside), so the id listed then is the twin's.
func twinHeld(lives map[string]*life, node string, at int64) bool {
	for _, l := range lives {
		if l.twin && l.of == node && l.spawned && (l.dead == 0 || l.dead >= at) {
			return true
		}
	}
	return false
}
