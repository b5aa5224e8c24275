package faults

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// Params are the timings a history is judged against: those the nodes ran
// with, and the allowance for process scheduling on a busy machine.
type Params struct {
	// LockTTL, ElectionJitter and CheckInterval are the nodes' settings.
	LockTTL        time.Duration
	ElectionJitter time.Duration
	CheckInterval  time.Duration
	// SlaveTimeout is the nodes' SlaveTimeout.
	SlaveTimeout time.Duration
	// HeartbeatInterval, StepDownMargin, ProcessTTL and TransferWindow are
	// the nodes' settings (TransferWindow the effective one); the membership
	// oracle and the transfer check need them, and skip what needs one that
	// is zero.
	HeartbeatInterval time.Duration
	StepDownMargin    time.Duration
	ProcessTTL        time.Duration
	TransferWindow    time.Duration
	// HandBackWindow is the nodes' effective HandBackWindow: two
	// hand-backs (KindHandBack) are at least this far apart, less the
	// time a hand-back takes (HeartbeatInterval + RoundTrip). Zero skips
	// that check.
	HandBackWindow time.Duration
	// Emulated is set when the registry expires entries by its emulated
	// backend (Redis before 7.4): an expired entry goes at the next read
	// that runs the expiry, so a dead process may stay listed one sweep
	// (CheckInterval) past its TTL.
	Emulated bool
	// RoundTrip is the allowance for one round trip to Redis with the
	// scheduling of a busy machine, where a rule says "beyond one round
	// trip".
	RoundTrip time.Duration
	// Slack is the allowance for the scheduling of processes and for round
	// trips, added to the failover bound and to the membership deadlines.
	Slack time.Duration
	// Reconnect is the longest a subscriber whose connection a fault kept
	// cutting may still wait, once the fault ends, before it reconnects: its
	// retry delay has grown to pubsub's MaxRetryDelay by then. Routed
	// messages are judged only from Slack + Reconnect after a fault.
	Reconnect time.Duration
}

// FailoverBound is the longest a crashed master may take to be replaced,
// counted from the crash, leaving out the time during which every other
// candidate was held stopped by a pause or cut off from Redis by a network
// fault on its link: the lock lives at most LockTTL after the crash;
// a slave checks again when it would expire (CheckInterval covers one
// missed check), waits at most ElectionJitter, and acquires in one round
// trip (in Slack).
func (p Params) FailoverBound() time.Duration {
	return p.LockTTL + p.ElectionJitter + p.CheckInterval + p.Slack
}

// Mastership is one interval during which a process acted as master under
// one term: from the first observation of the term to the end of the last
// one (KindAcquired, KindLost and every KindSent in between). The live span
// of a ctx handed out for a mastership is one too (Ctx names it): from the
// first observation that saw it live to the end of the last one
// (KindCtxLive, KindCtxDone).
type Mastership struct {
	Proc, Node string
	Term       int64
	Start, End int64
	// How tells how End is known: "lost" (an observation), "dead" (the
	// process was reaped; End is then the reaping, an upper bound) or
	// "open" (neither: End is the last record of the history).
	How string
	// LastBegin is the instant just before the last observation that acted
	// on it, and Seen the instant just before the first observation that no
	// longer could (Term returned something else, or the ctx was done); both
	// are 0 when not known (How is not "lost").
	LastBegin, Seen int64
	// Ctx is "" for the mastership as Term and IsMaster showed it, or the
	// ctx whose live span this is (CtxMasterAcquired, CtxRunIfMaster).
	Ctx string
}

// what names m in a violation: "n1.1 (term 12, lost)", or for a ctx span
// "n1.1's master-acquired ctx (term 12, lost)".
func (m Mastership) what() string {
	if m.Ctx != "" {
		return fmt.Sprintf("%s's %s ctx (term %d, %s)", m.Proc, m.Ctx, m.Term, m.How)
	}
	return fmt.Sprintf("%s (term %d, %s)", m.Proc, m.Term, m.How)
}

// Overlap is two processes acting as master at some instant: two
// masterships, or a mastership and another process's ctx span.
type Overlap struct {
	A, B     Mastership // A.Start <= B.Start
	Duration time.Duration
	// DataLoss is true when Redis lost its data between A's start and B's.
	DataLoss bool
	// SawTerm is the highest term B's process had observed before that
	// loss (0: none). A process that has seen a term and then finds the term
	// key gone waits LockTTL before contending, which outlasts every
	// mastership begun before the loss, so only a process that had seen no
	// term may overlap after a loss (see docs/safety.md).
	SawTerm int64
}

// Excused reports whether the guarantees allow o: Redis lost its data in
// between and the later process had seen no term before the loss, so it
// could not tell the loss from a new lock name. Such overlaps are bounded,
// not forbidden.
func (o Overlap) Excused() bool { return o.DataLoss && o.SawTerm == 0 }

// TwinBound is the longest a twin's Start may take to be refused, counted
// from its spawn (masterelection/twins.go): the process starts and reads
// its id's entry (a round trip), its first registration is refused, it
// waits until that entry would have gone SlaveTimeout without a write
// (less its age, plus SlaveTimeout/20), registers again and is refused;
// the membership loop may take a CheckInterval to come round to each of
// the two registrations; Slack for the start of a process and the
// scheduling of a busy machine.
func (p Params) TwinBound() time.Duration {
	return p.SlaveTimeout + p.SlaveTimeout/20 + 2*p.CheckInterval + p.Slack
}

// Failover is the time from a fault that left the election without a
// working master to the next mastership.
type Failover struct {
	Fault    string
	Seq      int64
	Duration time.Duration
}

// Violation is one broken property.
type Violation struct {
	Check string
	T     int64
	Text  string
}

func (v Violation) String() string { return v.Check + ": " + v.Text }

// Report is the outcome of Check.
type Report struct {
	Masterships []Mastership
	Overlaps    []Overlap // every overlap, including those after data loss
	// Ctxs are the live spans of the ctxs handed out for masterships (Ctx
	// set), and CtxOverlaps those that overlap another process's mastership.
	Ctxs        []Mastership
	CtxOverlaps []Overlap
	// Items are the live spans of the assign items' OnAssigned ctxs (Ctx
	// is the item), and ItemOverlaps the overlaps between two processes'
	// spans of one item (Excused when Redis lost its data in between).
	Items        []Mastership
	ItemOverlaps []Overlap
	// OwnerWait is the longest the harness waited, after the cluster
	// settled, until every item had an owner again (KindOwned).
	OwnerWait  time.Duration
	Failovers  []Failover
	Violations []Violation
	// Judged counts, per checker (the Check of its violations), what it
	// judged: masterships (overlap, terms), observations (self-fencing), ctx
	// spans (ctx), failovers, accepted deliveries (fencing) and slave events
	// (membership).
	Judged map[string]int
	// Message counts: messages the masters decided to send, sends refused
	// with ErrNotMaster (by the router or by Redis), deliveries accepted
	// and rejected as stale, publishes that left a process after a newer
	// master was in office (none of which may be accepted), and accepted
	// deliveries that broke a fencing rule.
	Sent, Refused, Accepted, Rejected, LatePublishes, StaleAccepted int
	// Membership counts: joins and leaves reported by masters, and live
	// processes the registry did not list (counted by the harness, which
	// reads the registry while the run goes on).
	Joins, Leaves, Lost int
	// Faults counts the injected faults by kind.
	Faults map[string]int
	// Forger counts: forgeries published; forged envelopes handed to a
	// handler (those that carried the real term of the master they named);
	// and, in the windows with the forger alone and in those without any
	// fault (see deliveries), the routed messages that had to be delivered
	// and those that were not.
	Forgeries, ForgedAccepted                  int
	ForgerDue, ForgerLost, QuietDue, QuietLost int
	// Transfers are the transfers judged, with the time from the request to
	// the next mastership.
	Transfers []Failover
	// Durable counts durable routing (nodes run with -durable).
	Durable DurableCounts
	// Twins counts the twins (FaultTwin) and their outcomes.
	Twins TwinCounts
}

// OK reports whether the history broke no property.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// MaxFailover returns the longest failover.
func (r Report) MaxFailover() time.Duration {
	var m time.Duration
	for _, f := range r.Failovers {
		m = max(m, f.Duration)
	}
	return m
}

// ForbiddenOverlaps counts the overlaps the guarantees do not excuse.
func (r Report) ForbiddenOverlaps() int {
	n := 0
	for _, o := range r.Overlaps {
		if !o.Excused() {
			n++
		}
	}
	return n
}

// ExcusedOverlaps returns the overlaps of masterships that the guarantees
// excuse (see Overlap.Excused): their number and the longest.
func (r Report) ExcusedOverlaps() (n int, longest time.Duration) {
	for _, o := range r.Overlaps {
		if o.Excused() {
			n++
			longest = max(longest, o.Duration)
		}
	}
	return n, longest
}

// masterLeaves are the fault kinds after which the election has no
// working master until a new one is elected: the failover is measured from
// the injection.
var masterLeaves = map[string]bool{
	FaultKillMaster:      true,
	FaultPauseMaster:     true,
	FaultStopMaster:      true,
	FaultBurstKillMaster: true,
}

// isCrash reports whether fault f left the election without a working
// master. Network faults count when they cut the master's requests off
// (the harness sets Highest to 1 then): when only the replies are lost, the
// master's renewals still reach Redis until its deadline, so the lock
// outlives the fault's start by up to 2 x LockTTL, as it must.
func isCrash(f Record) bool {
	switch f.Detail {
	case FaultBlackhole, FaultResetPeer:
		return f.Highest == 1
	}
	return masterLeaves[f.Detail]
}

// Fault kinds; the harness writes them as the Detail of KindFault.
const (
	FaultKillMaster   = "kill-master"
	FaultKillSlave    = "kill-slave"
	FaultPauseMaster  = "pause-master"
	FaultPauseSlave   = "pause-slave"
	FaultStopMaster   = "stop-master"
	FaultRestartSlave = "restart-slave"
	FaultRedisRestart = "redis-restart"
	FaultRedisPause   = "redis-pause"
	FaultLatency      = "latency"
	FaultBlackhole    = "blackhole"
	FaultResetPeer    = "reset-peer"
	// FaultHandoverLoss is a composite: a slave is paused; the master stops
	// gracefully (its release is announced) and another node takes over;
	// Redis restarts without its data; the slave resumes. Its parts are
	// recorded as faults of their own kinds as well.
	FaultHandoverLoss = "handover-loss"
	// FaultRankedPause is a composite: the slave that the master's
	// succession ranks first (the one that contends at once) is paused;
	// the master stops gracefully or is killed, so the second-ranked must
	// take over a turn later; the slave resumes. Its parts are recorded as
	// faults of their own kinds as well.
	FaultRankedPause = "ranked-pause"
	// FaultForger: a plain client (not herd) publishes forged lock notices,
	// registry notices, routed envelopes and malformed JSON on herd's
	// channels while the fault is in force (each one a KindForgery record).
	FaultForger = "forger"
	// FaultTransfer: the master is asked to transfer its mastership (Peer
	// names the successor, Term the master's term, Variant how: see the
	// Transfer* constants). A kill that is part of it is recorded as a
	// fault of its own kind as well.
	FaultTransfer = "transfer"
	// FaultConsumerBlip: for a moment (200-900 ms) each connection of one
	// slave to Redis is closed once it has passed a few hundred to a few
	// thousand bytes of replies (toxiproxy's limit_data on its replies;
	// Variant says how many), in the middle of the reply that crosses the
	// limit, then its connections are reset: an XREADGROUP whose reply is
	// cut leaves entries pending to its Consumer, which never saw them.
	FaultConsumerBlip = "consumer-blip"
	// FaultBurstKillMaster: the master is asked to send a burst of durable
	// messages as fast as it can (KindBurst) and is killed with SIGKILL the
	// moment it has sent them (Variant "after") or in the middle of them
	// ("during"). The fault record is written just before the signal.
	FaultBurstKillMaster = "burst-kill-master"
	// FaultTwin: a process is started under the node id of a live one, its
	// peer (Peer; Variant says whether the master or a slave), with the
	// same flags, under a label of its own (its KindSpawn's Detail begins
	// with TwinOf); it is stopped when the fault heals, if still running.
	// Its Start must be refused (see checker.twins).
	FaultTwin = "twin"
)

// The variants of FaultTransfer: the Variant of its record is one of them,
// followed by ":stdin" (the node calls Transfer) or ":control" (the
// harness publishes a request on <lock>:control).
const (
	// TransferLive names a live candidate slave.
	TransferLive = "live"
	// TransferDead names a slave killed just before the request.
	TransferDead = "dead"
	// TransferNonCandidate names a slave that is not a candidate.
	TransferNonCandidate = "non-candidate"
	// TransferRaceTarget names a live candidate slave, killed 0-20 ms after
	// the request.
	TransferRaceTarget = "race-target"
	// TransferRaceMaster names a live candidate slave; the master is killed
	// 0-20 ms after the request.
	TransferRaceMaster = "race-master"
)

// FaultKinds lists every fault kind, in a fixed order.
var FaultKinds = []string{
	FaultKillMaster, FaultKillSlave, FaultPauseMaster, FaultPauseSlave,
	FaultStopMaster, FaultRestartSlave, FaultRedisRestart, FaultRedisPause,
	FaultLatency, FaultBlackhole, FaultResetPeer, FaultHandoverLoss,
	FaultForger, FaultTransfer, FaultConsumerBlip, FaultBurstKillMaster,
	FaultRankedPause, FaultTwin,
}

// composites are the fault kinds played as other kinds together; their
// parts are recorded and counted under their own kinds as well.
var composites = map[string]bool{FaultHandoverLoss: true, FaultRankedPause: true}

// Check judges a merged history (the records of every process of one run,
// in any order) and reports every broken property:
//
//   - overlap: no two masterships act at the same instant (except after
//     Redis lost its data, when the later process had seen no term before
//     the loss: such an overlap is counted and bounded);
//   - self-fencing: every observation of a term began before the latest
//     lock call sent by then + LockTTL - StepDownMargin;
//   - ctx: every ctx handed out for a mastership is judged like the
//     mastership: no observation sees it live once one has seen Term no
//     longer return the mastership's term, none sees it live past the
//     self-fencing bound above, and its live span overlaps no other
//     process's mastership (with the same exception after a data loss);
//   - terms: terms strictly increase in the order masterships start;
//   - failover: after each crash of the master, and after each Redis
//     fault heals, a new mastership starts within FailoverBound;
//   - fencing: every receiver accepts terms in non-decreasing order, each
//     equal to the highest it had seen, and rejects every message whose
//     PUBLISH left its sender after a newer master was in office;
//   - durable (nodes run with -durable): every message a master stored in
//     an inbox is handled (one never handled is lost, whether it was
//     rejected as stale, left in an inbox after the final drain or
//     dead-lettered, unless Redis lost its data after the store), none is
//     handled under a stale term (each receiver's terms never go down), no
//     store is taken from a master after a newer mastership began;
//     duplicates are counted by cause;
//   - ownership (nodes run with -assign): an assign item's OnAssigned ctx
//     is live in at most one process at any instant, unless Redis lost
//     its data in between (the ownership hash with it); its liveness half
//     ("owners": every item owned again within a bound after the cluster
//     settles) is judged by the harness as it runs;
//   - twin (FaultTwin; see checker.twins): a twin's Start is refused
//     within TwinBound, it works nothing, and its peer is unaffected,
//     unless a fault held the peer or Redis meanwhile; at no instant do two
//     processes under one node id have item ctxs live;
//   - membership: each master reports each slave's join and leave once,
//     a slave paused past SlaveTimeout is reported removed once and
//     registered again once, and the leave of each ended process is
//     reported.
func Check(records []Record, p Params) Report {
	recs := slices.Clone(records)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].T < recs[j].T })
	c := &checker{recs: recs, p: p, rep: Report{Faults: map[string]int{}, Judged: map[string]int{}}}
	c.masterships()
	c.overlaps()
	c.ctxs()
	c.selfFencing()
	c.terms()
	c.failovers()
	c.messages()
	c.membership()
	c.forgeries()
	c.transfers()
	c.handBacks()
	c.roles()
	c.slaveEvents()
	c.listing()
	c.durable()
	c.ownership()
	c.twins()
	return c.rep
}

type checker struct {
	recs []Record
	p    Params
	rep  Report
}

func (c *checker) fail(check string, t int64, format string, args ...any) {
	c.rep.Violations = append(c.rep.Violations, Violation{Check: check, T: t, Text: fmt.Sprintf(format, args...)})
}

type procTerm struct {
	proc string
	term int64
}

// masterships builds the acting intervals from the node records.
func (c *checker) masterships() {
	open := map[procTerm]*Mastership{}
	var order []*Mastership
	for _, r := range c.recs {
		switch r.Kind {
		case KindAcquired, KindLost, KindSent:
			k := procTerm{r.Proc, r.Term}
			m := open[k]
			start := r.T
			if r.Kind == KindSent {
				start = r.Begin
			}
			if m == nil {
				m = &Mastership{Proc: r.Proc, Node: r.Node, Term: r.Term, Start: start, End: r.T, How: "open"}
				open[k] = m
				order = append(order, m)
			}
			m.Start = min(m.Start, start)
			m.End = max(m.End, r.T)
			if r.Kind == KindLost {
				m.How, m.LastBegin, m.Seen = "lost", r.Begin, r.Seen
			}
		}
	}
	c.rep.Masterships = c.ended(order)
	c.rep.Judged["overlap"] = len(c.rep.Masterships)
	c.rep.Judged["terms"] = len(c.rep.Masterships)
}

// dataLossBetween reports whether Redis lost its data in (a, b].
func (c *checker) dataLossBetween(a, b int64) bool {
	_, ok := c.lastLossBetween(a, b)
	return ok
}

// lastLossBetween returns the last instant in (a, b] at which Redis lost
// its data.
func (c *checker) lastLossBetween(a, b int64) (int64, bool) {
	var at int64
	found := false
	for _, r := range c.recs {
		if r.Kind == KindRedisDown && r.T > a && r.T <= b {
			at, found = r.T, true
		}
	}
	return at, found
}

// observedBefore returns the highest term proc had observed before t.
func (c *checker) observedBefore(proc string, t int64) int64 {
	var term int64
	for _, r := range c.recs {
		if r.T >= t {
			break
		}
		if r.Proc == proc && r.Kind == KindObserved {
			term = max(term, r.Term)
		}
	}
	return term
}

// overlap returns the overlap of x and y, two acting spans of different
// processes, if they were both acting at some instant.
func (c *checker) overlap(x, y Mastership) (Overlap, bool) {
	a, b := x, y
	if b.Start < a.Start {
		a, b = b, a
	}
	if a.Proc == b.Proc || b.Start >= a.End {
		return Overlap{}, false
	}
	o := Overlap{A: a, B: b, Duration: time.Duration(min(a.End, b.End) - b.Start)}
	if loss, ok := c.lastLossBetween(a.Start, b.Start); ok {
		o.DataLoss = true
		o.SawTerm = c.observedBefore(b.Proc, loss)
	}
	return o, true
}

// within reports whether the instants at which span s and mastership m
// both acted all lie in an overlap of s's own mastership own with m.
func within(s, own, m Mastership) bool {
	from, to := max(s.Start, m.Start), min(s.End, m.End)
	return own.Start <= from && to <= own.End && own.Start < m.End && m.Start < own.End
}

// why explains an overlap that is not excused.
func (o Overlap) why() string {
	if o.DataLoss {
		return fmt.Sprintf(" (Redis lost its data in between, but %s had seen term %d before the loss)", o.B.Proc, o.SawTerm)
	}
	return ""
}

// ended returns spans (masterships or ctx spans), sorted by start, with
// each span still open at the end of the records ended: at the reaping of
// its process (How "dead") when the harness recorded one, else at the
// last record.
func (c *checker) ended(spans []*Mastership) []Mastership {
	dead, killed := map[string]int64{}, map[string]int64{}
	var last int64
	for _, r := range c.recs {
		last = max(last, r.T)
		switch r.Kind {
		case KindDead:
			dead[r.Peer] = r.T
		case KindKilled:
			if _, ok := killed[r.Peer]; !ok {
				killed[r.Peer] = r.T + int64(KillLatency)
			}
		}
	}
	var out []Mastership
	for _, s := range spans {
		if s.How == "open" {
			if d, ok := dead[s.Proc]; ok {
				// A killed process acts no more once SIGKILL is sent, even
				// when it is reaped late (seed 1795676246398546749: reaped
				// 2.4 ms after the kill, 1 ms after the next master began).
				if k, ok := killed[s.Proc]; ok && k < d {
					d = k
				}
				s.End, s.How = max(s.End, d), "dead"
			} else {
				s.End = max(s.End, last)
			}
		}
		out = append(out, *s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func (c *checker) overlaps() {
	ms := c.rep.Masterships
	for i := range ms {
		for j := i + 1; j < len(ms); j++ {
			o, ok := c.overlap(ms[i], ms[j])
			if !ok {
				continue
			}
			c.rep.Overlaps = append(c.rep.Overlaps, o)
			if !o.Excused() {
				c.fail("overlap", o.B.Start, "%s and %s (term %d) both acted as master for %v%s",
					o.A.what(), o.B.Proc, o.B.Term, o.Duration, o.why())
			}
		}
	}
}

// ctxs builds the live spans of the ctxs handed out for masterships and
// judges each like its mastership: it must not be seen live once Term was
// seen to no longer return the mastership's term (the node reads the ctx
// right after Term in each observation, so the same observation counts),
// and it must not overlap another process's mastership where its own
// mastership did not (that overlap is the overlap check's). Its
// observations are checked against the self-fencing bound by selfFencing.
// liveSpans builds the live spans of the ctxs that records of kinds live
// and done describe (one per process and serial, Ctx naming the ctx or
// the item): from the first observation that saw it live (or, its live
// record lost, the Begin of its done record) to the end of the last one;
// still "open" when no done record came (ended closes those).
func (c *checker) liveSpans(live, done Kind) []*Mastership {
	type key struct {
		proc   string
		serial int64
	}
	spans := map[key]*Mastership{}
	var order []*Mastership
	for _, r := range c.recs {
		if r.Kind != live && r.Kind != done {
			continue
		}
		k := key{r.Proc, r.Seq}
		s := spans[k]
		if s == nil {
			s = &Mastership{Proc: r.Proc, Node: r.Node, Term: r.Term, Ctx: r.Detail, Start: r.T, End: r.T, How: "open"}
			if r.Kind == done && r.Begin != 0 {
				s.Start = r.Begin // its first live record was lost
			}
			spans[k] = s
			order = append(order, s)
		}
		if r.Kind == done {
			s.End, s.LastBegin, s.Seen = max(s.End, r.T), r.Begin, r.Seen
			if r.Seen != 0 {
				s.How = "lost"
			} else {
				s.How = "poller stopped"
			}
		}
	}
	return order
}

func (c *checker) ctxs() {
	order := c.liveSpans(KindCtxLive, KindCtxDone)
	c.rep.Ctxs = c.ended(order)
	c.rep.Judged["ctx"] = len(c.rep.Ctxs)
	for _, s := range c.rep.Ctxs {
		if m, ok := c.mastership(s.Proc, s.Term); ok && m.Seen != 0 && s.LastBegin != 0 && s.LastBegin >= m.Seen {
			done := "never seen done"
			if s.Seen != 0 {
				done = fmt.Sprintf("first seen done %v after it", time.Duration(s.Seen-m.Seen))
			}
			c.fail("ctx", s.LastBegin, "%s was seen live after IsMaster was seen false: its last live observation began %v after the first false one; %s",
				s.what(), time.Duration(s.LastBegin-m.Seen), done)
		}
		own, hasOwn := c.mastership(s.Proc, s.Term)
		reported := false
		for _, m := range c.rep.Masterships {
			o, ok := c.overlap(s, m)
			if !ok {
				continue
			}
			c.rep.CtxOverlaps = append(c.rep.CtxOverlaps, o)
			if hasOwn && within(s, own, m) {
				continue // the overlap of the masterships themselves, reported by overlaps
			}
			if !o.Excused() && !reported {
				reported = true
				c.fail("ctx", o.B.Start, "%s and %s both acted as master for %v%s",
					o.A.what(), o.B.what(), o.Duration, o.why())
			}
		}
	}
}

// selfFencing checks every observation of a term against the deadline
// bound derived from the lock calls the process had sent by its end.
func (c *checker) selfFencing() {
	ttl := map[string]int64{}
	margin := map[string]int64{}
	calls := map[string][]int64{} // per proc, in T order
	for _, r := range c.recs {
		switch r.Kind {
		case KindStart:
			ttl[r.Proc], margin[r.Proc] = r.LockTTL, r.Margin
		case KindLockCall:
			calls[r.Proc] = append(calls[r.Proc], r.T)
		}
	}
	for _, r := range c.recs {
		var begin, end int64
		check, what := "self-fencing", fmt.Sprintf("%s observed term %d", r.Proc, r.Term)
		switch r.Kind {
		case KindLost, KindSent:
			begin, end = r.Begin, r.T
		case KindAcquired:
			// Term was called between T and Seen: a lock call sent by
			// Seen may be the acquire that Term's answer comes from (the
			// poller descheduled between its clock reading and the call).
			begin, end = r.T, max(r.T, r.Seen)
		case KindCtxLive, KindCtxDone:
			// An observation that saw the ctx live.
			begin, end = r.Begin, r.T
			if r.Kind == KindCtxLive {
				begin = r.T
			}
			check, what = "ctx", fmt.Sprintf("%s saw its %s ctx of term %d live", r.Proc, r.Detail, r.Term)
		default:
			continue
		}
		if begin == 0 {
			continue
		}
		if check == "self-fencing" {
			c.rep.Judged[check]++
		}
		cs := calls[r.Proc]
		// The latest call sent no later than the observation ended.
		i := sort.Search(len(cs), func(i int) bool { return cs[i] > end })
		if i == 0 {
			c.fail(check, begin, "%s with no lock call sent before", what)
			continue
		}
		if deadline := cs[i-1] + ttl[r.Proc] - margin[r.Proc]; begin >= deadline {
			c.fail(check, begin, "%s (%s) %v after its deadline bound (last lock call + LockTTL - StepDownMargin)",
				what, r.Kind, time.Duration(begin-deadline))
		}
	}
}

func (c *checker) terms() {
	seen := map[int64]Mastership{}
	var prev *Mastership
	for i, m := range c.rep.Masterships {
		if o, ok := seen[m.Term]; ok && o.Proc != m.Proc {
			c.fail("terms", m.Start, "term %d held by both %s and %s", m.Term, o.Proc, m.Proc)
		}
		seen[m.Term] = m
		if prev != nil && m.Term <= prev.Term {
			c.fail("terms", m.Start, "%s started term %d after %s started term %d", m.Proc, m.Term, prev.Proc, prev.Term)
		}
		prev = &c.rep.Masterships[i]
	}
}

// failovers measures, after each crash of the master, the time to the next
// mastership, and after each Redis fault heals, the time until a master is
// acting for good.
func (c *checker) failovers() {
	heals := map[int64]int64{}
	for _, r := range c.recs {
		if r.Kind == KindHeal {
			heals[r.Seq] = r.T
		}
	}
	var last int64
	if n := len(c.recs); n > 0 {
		last = c.recs[n-1].T
	}
	bound := c.p.FailoverBound()
	lives, spans := c.lives(), c.spans()
	for _, f := range c.recs {
		if f.Kind != KindFault {
			continue
		}
		c.rep.Faults[f.Detail]++
		heal, healed := heals[f.Seq]
		var (
			from int64
			next int64
			ok   bool
		)
		switch {
		case isCrash(f):
			from = f.T
			if m, found := c.mastership(f.Peer, f.Term); found && (healed && m.End >= heal || !healed && m.End >= from+int64(bound)) {
				// The master was still acting when the fault was undone (a
				// network fault shorter than its deadline): nothing to
				// replace.
				continue
			}
			if _, replaced := c.firstStart(func(m Mastership) bool { return f.Term != 0 && m.Term > f.Term && m.Start <= from }); replaced {
				// Another process was master already when the fault hit (a
				// transfer raced it): nothing to replace.
				continue
			}
			// A newer term started after the crash; the crashed process
			// itself may win it once it is back.
			next, ok = c.firstStart(func(m Mastership) bool {
				return m.Start > from && (m.Term > f.Term && f.Term != 0 || f.Term == 0 && m.Proc != f.Peer)
			})
		case f.Detail == FaultRedisRestart && healed:
			// The lock went with the data: a mastership acquired after the
			// restart, counted from the server answering again.
			from = heal
			next, ok = c.firstStart(func(m Mastership) bool { return m.Start > f.T })
			next = max(next, from)
		case f.Detail == FaultRedisPause && healed:
			// A master that outlives the pause by a LockTTL counts at once;
			// otherwise the next one elected.
			from = heal
			next, ok = c.firstStart(func(m Mastership) bool {
				return m.Start <= from && m.End >= from+int64(c.p.LockTTL) || m.Start > from
			})
			next = max(next, from)
		default:
			continue
		}
		if !ok {
			if last-from > int64(bound) {
				c.fail("failover", from, "no new master after fault %d (%s) within %v", f.Seq, f.Detail, time.Duration(last-from))
			}
			continue
		}
		// No one can take over while every other candidate is held stopped
		// or cut off (seed 1795679857908587330: the only other candidate's
		// link was reset for 2.3 s while the master's was blackholed):
		// that time does not count (seed 1795663376952882153: the only other
		// candidate was paused 2 ms after the master's link was reset, for
		// 2.2 s).
		d := time.Duration(next-from) - c.heldTime(from, next, f.Peer, lives, spans)
		c.rep.Failovers = append(c.rep.Failovers, Failover{Fault: f.Detail, Seq: f.Seq, Duration: d})
		c.rep.Judged["failover"]++
		if d > bound && !c.soonAfterRedis(from, next, f.Peer, lives, spans) {
			c.fail("failover", from, "fault %d (%s): next master after %v, bound %v", f.Seq, f.Detail, d, bound)
		}
	}
}

// heldTime returns how long, within [a, b], every candidate process other
// than crashed was held stopped by a pause-slave fault or cut off from
// Redis by a blackhole or reset-peer on its link (and there was at
// least one): no one could take over then.
func (c *checker) heldTime(a, b int64, crashed string, lives map[string]*life, spans []span) time.Duration {
	points := []int64{a, b}
	for _, s := range spans {
		if holds(s.kind) && s.peer != crashed {
			points = append(points, s.from, s.to)
		}
	}
	for _, l := range lives {
		points = append(points, l.spawn, l.dead)
	}
	slices.Sort(points)
	held := func(t int64) bool {
		others := 0
		for label, l := range lives {
			if label == crashed || !l.candidate || l.twin || !l.spawned || l.spawn > t || l.dead != 0 && l.dead <= t {
				continue
			}
			others++
			if !slices.ContainsFunc(spans, func(s span) bool {
				return holds(s.kind) && s.peer == label && s.from <= t && s.to > t
			}) {
				return false
			}
		}
		return others > 0
	}
	var d int64
	for i := 1; i < len(points); i++ {
		lo, hi := max(points[i-1], a), min(points[i], b)
		if hi > lo && held(lo+(hi-lo)/2) {
			d += hi - lo
		}
	}
	return time.Duration(d)
}

// soonAfterRedis reports whether a failover from from to next is excused
// by a Redis pause or restart that healed in between: while Redis is
// stopped no one can take over, yet the lock's TTL runs on (a pause) or
// the lock is gone (a restart), so a lock that expired meanwhile is
// free when Redis answers again, and a candidate takes it at its next
// check: within CheckInterval + ElectionJitter + Slack of the heal, less
// any time every other candidate was held (seed 1795974105028048371: a
// 1.76 s redis-pause inside a blackhole's failover, the next master 29 ms
// after the pause). A pause that healed before the lock expired excuses
// nothing: the takeover is then due within the usual bound.
func (c *checker) soonAfterRedis(from, next int64, crashed string, lives map[string]*life, spans []span) bool {
	soon := c.p.CheckInterval + c.p.ElectionJitter + c.p.Slack
	for _, s := range spans {
		if !s.redisFault() || s.to <= from || s.to >= next {
			continue
		}
		if time.Duration(next-s.to)-c.heldTime(s.to, next, crashed, lives, spans) <= soon {
			return true
		}
	}
	return false
}

// holds reports whether a fault of kind on a process keeps it from taking
// over: stopped, or no Redis round trip can complete.
func holds(kind string) bool {
	return kind == FaultPauseSlave || kind == FaultBlackhole || kind == FaultResetPeer
}

// firstStart returns the start of the first mastership (in start order)
// for which match holds.
func (c *checker) firstStart(match func(Mastership) bool) (int64, bool) {
	for _, m := range c.rep.Masterships {
		if match(m) {
			return m.Start, true
		}
	}
	return 0, false
}

// mastership returns the mastership of proc under term.
func (c *checker) mastership(proc string, term int64) (Mastership, bool) {
	for _, m := range c.rep.Masterships {
		if m.Proc == proc && m.Term == term {
			return m, true
		}
	}
	return Mastership{}, false
}

// messages checks the fencing of routed messages.
func (c *checker) messages() {
	type key struct {
		from string
		term int64
		seq  int64
		to   string
	}
	highest := map[string]int64{} // per receiver proc: highest term accepted
	accepted := map[key]Record{}
	for _, r := range c.recs {
		switch r.Kind {
		case KindSent:
			c.rep.Sent++
		case KindRejected:
			c.rep.Rejected++
		case KindRefused:
			c.rep.Refused++
		case KindForgedAccepted:
			// A forgery that carried the real term: fenced like any message.
			c.rep.ForgedAccepted++
			c.rep.Judged["fencing"]++
			if r.Term < highest[r.Proc] || r.Highest != r.Term {
				c.rep.StaleAccepted++
				c.fail("fencing", r.T, "%s handed a forged message from %q with term %d to its handler after accepting term %d (highest then %d)", r.Proc, r.Peer, r.Term, highest[r.Proc], r.Highest)
			}
			highest[r.Proc] = max(highest[r.Proc], r.Term)
		case KindAccepted:
			c.rep.Accepted++
			c.rep.Judged["fencing"]++
			if r.Term < highest[r.Proc] {
				c.rep.StaleAccepted++
				c.fail("fencing", r.T, "%s accepted message %d from %s with term %d after accepting term %d", r.Proc, r.Seq, r.Peer, r.Term, highest[r.Proc])
			}
			highest[r.Proc] = max(highest[r.Proc], r.Term)
			if r.Highest != r.Term {
				c.rep.StaleAccepted++
				c.fail("fencing", r.T, "%s accepted message %d from %s with term %d while its highest term was %d", r.Proc, r.Seq, r.Peer, r.Term, r.Highest)
			}
			accepted[key{r.Peer, r.Term, r.Seq, r.Node}] = r
		}
	}
	// A PUBLISH that left after a mastership with a higher term had begun
	// reaches Redis after that term's acquire, whose notice reaches every
	// subscriber first (or the term key does, on resubscription), unless
	// Redis lost its data in between. A message sent through a script may
	// be recorded twice (EVALSHA, then EVAL after NOSCRIPT): the last
	// record is the attempt that ran.
	lastPublish := map[key]int64{}
	for _, r := range c.recs {
		if r.Kind == KindPublish {
			k := key{r.Node, r.Term, r.Seq, r.Peer}
			lastPublish[k] = max(lastPublish[k], r.T)
		}
	}
	for _, r := range c.recs {
		if r.Kind != KindPublish || lastPublish[key{r.Node, r.Term, r.Seq, r.Peer}] != r.T {
			continue
		}
		var newer *Mastership
		for i, m := range c.rep.Masterships {
			if m.Term > r.Term && m.Start < r.T && !c.dataLossBetween(m.Start, r.T) {
				newer = &c.rep.Masterships[i]
				break
			}
		}
		if newer == nil {
			continue
		}
		c.rep.LatePublishes++
		if a, ok := accepted[key{r.Node, r.Term, r.Seq, r.Peer}]; ok {
			c.rep.StaleAccepted++
			c.fail("fencing", a.T, "%s accepted message %d of %s with term %d, published %v after %s began term %d",
				a.Proc, r.Seq, r.Node, r.Term, time.Duration(r.T-newer.Start), newer.Proc, newer.Term)
		}
	}
}

// membership checks the slave events the masters reported.
func (c *checker) membership() {
	type pair struct {
		master procTerm
		slave  string
	}
	last := map[pair]Kind{}
	ended := map[string]int64{} // node id -> when its last process ended
	running := map[string]int{} // node id -> its processes spawned and not reaped (a twin's included)
	for _, r := range c.recs {
		switch r.Kind {
		case KindSpawn:
			if r.Node != "" {
				running[r.Node]++
			}
		case KindDead:
			if r.Node != "" {
				running[r.Node] = max(running[r.Node]-1, 0)
				if running[r.Node] == 0 {
					ended[r.Node] = r.T
				}
			}
		case KindSlaveJoined, KindSlaveLeft:
			if r.Kind == KindSlaveJoined {
				c.rep.Joins++
			} else {
				c.rep.Leaves++
			}
			c.rep.Judged["membership"]++
			k := pair{procTerm{r.Proc, r.Term}, r.Peer}
			if last[k] == r.Kind {
				c.fail("membership", r.T, "%s (term %d) reported %s of %s twice in a row", r.Proc, r.Term, r.Kind, r.Peer)
			}
			if r.Kind == KindSlaveLeft && last[k] == "" {
				c.fail("membership", r.T, "%s (term %d) reported %s of %s, never reported joined", r.Proc, r.Term, r.Kind, r.Peer)
			}
			last[k] = r.Kind
		}
	}
	// Every slave a mastership saw join and whose process ended well
	// before the mastership did must have been reported gone.
	grace := int64(c.p.SlaveTimeout + 2*c.p.CheckInterval + c.p.Slack)
	for _, m := range c.rep.Masterships {
		for k, kind := range last {
			if k.master != (procTerm{m.Proc, m.Term}) || kind != KindSlaveJoined {
				continue
			}
			if e, ok := ended[k.slave]; ok && e+grace < m.End && m.How != "open" {
				c.fail("membership", e, "%s (term %d) never reported the leave of %s, which ended %v before the mastership did",
					m.Proc, m.Term, k.slave, time.Duration(m.End-e))
			}
		}
	}
	// A slave paused past SlaveTimeout, under one mastership throughout, is
	// reported removed once and registered again once.
	heals := map[int64]int64{}
	for _, r := range c.recs {
		if r.Kind == KindHeal {
			heals[r.Seq] = r.T
		}
	}
	for _, f := range c.recs {
		if f.Kind != KindFault || f.Detail != FaultPauseSlave {
			continue
		}
		h, ok := heals[f.Seq]
		if !ok || time.Duration(h-f.T) <= c.p.SlaveTimeout+2*c.p.CheckInterval {
			continue
		}
		// Until the slave should be back, but not into the next fault. A
		// window the next fault cuts short may end before the master could
		// report the return (seed 1795573672879275858: the master stopped
		// 3 ms after the slave resumed): the join is not required then.
		windowEnd := h + grace
		for _, r := range c.recs {
			if r.Kind == KindFault && r.T > h {
				windowEnd = min(windowEnd, r.T)
				break
			}
		}
		cutShort := windowEnd < h+grace
		var m *Mastership
		for i, ms := range c.rep.Masterships {
			if ms.Start <= f.T && ms.End >= windowEnd {
				m = &c.rep.Masterships[i]
			}
		}
		if m == nil {
			continue // the master changed meanwhile: the new one starts from the registry
		}
		// A slave the master had not reported joined when it was paused
		// (it was master until a moment before, and its entry still said
		// so) is not known to leave: it is reported joined once it
		// registers as a slave again. Otherwise joins before the leave are
		// the master's late report of slaves already there; they do not
		// count.
		var joins, leaves int
		var before Kind
		for _, r := range c.recs {
			if r.Proc != m.Proc || r.Term != m.Term || r.Peer != f.Node || r.T > windowEnd || r.Kind != KindSlaveJoined && r.Kind != KindSlaveLeft {
				continue
			}
			switch {
			case r.T < f.T || r.Kind == KindSlaveJoined && leaves == 0 && r.T < f.T+int64(c.p.CheckInterval):
				// Before the pause, or the report of a registration from
				// before it, a round trip late (seed 1795573672879275856:
				// the join came 0.3 ms after the pause began).
				before = r.Kind
			case r.Kind == KindSlaveLeft:
				leaves++
			case before != KindSlaveJoined || leaves > 0:
				joins++
			}
		}
		wantLeaves := 1
		if before != KindSlaveJoined {
			wantLeaves = 0
		}
		if leaves != wantLeaves || joins > 1 || joins == 0 && !cutShort {
			c.fail("membership", f.T, "slave %s paused for %v: %s (term %d) reported %d leaves and %d joins after it, want %d and 1",
				f.Node, time.Duration(h-f.T), m.Proc, m.Term, leaves, joins, wantLeaves)
		}
	}
}

// ownership checks that no assign item's OnAssigned ctx was live in two
// processes at once (docs/safety.md, guarantee 7): spans are built as for
// the mastership ctxs, from the first observation that saw the ctx live to
// the end of the last one (a killed process's, to its death). Two spans of
// one item in two processes may intersect only when Redis lost its data
// between their starts: the ownership hash went with it.
func (c *checker) ownership() {
	order := c.liveSpans(KindItemLive, KindItemDone)
	c.rep.Items = c.ended(order)
	c.rep.Judged["ownership"] = len(c.rep.Items)
	// The liveness half is judged by the harness as it runs (waitOwned):
	// every KindOwned is a settled cluster whose items all had owners again
	// in time; one that did not is the harness's "owners" violation.
	for _, r := range c.recs {
		if r.Kind == KindOwned {
			c.rep.Judged["owners"]++
			c.rep.OwnerWait = max(c.rep.OwnerWait, time.Duration(r.T-r.Begin))
		}
	}
	byItem := map[string][]Mastership{}
	for _, s := range c.rep.Items {
		byItem[s.Ctx] = append(byItem[s.Ctx], s)
	}
	for _, item := range slices.Sorted(maps.Keys(byItem)) {
		ss := byItem[item]
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				a, b := ss[i], ss[j] // a.Start <= b.Start
				if a.Proc == b.Proc || a.End < b.Start {
					continue
				}
				o := Overlap{A: a, B: b, Duration: time.Duration(min(a.End, b.End) - b.Start)}
				o.DataLoss = c.dataLossBetween(a.Start, b.Start)
				c.rep.ItemOverlaps = append(c.rep.ItemOverlaps, o)
				if !o.DataLoss {
					c.fail("ownership", b.Start, "item %s: %s's ctx (%s) and %s's were both live for %v", item, a.Proc, a.How, b.Proc, o.Duration)
				}
			}
		}
	}
}
