package faults

import (
	"fmt"
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
	// Slack is the allowance for the scheduling of processes and for round
	// trips, added to the failover bound and to the membership deadlines.
	Slack time.Duration
}

// FailoverBound is the longest a crashed master may take to be replaced,
// counted from the crash: the lock lives at most LockTTL after the crash;
// a slave checks again when it would expire (CheckInterval covers one
// missed check), waits at most ElectionJitter, and acquires in one round
// trip (in Slack).
func (p Params) FailoverBound() time.Duration {
	return p.LockTTL + p.ElectionJitter + p.CheckInterval + p.Slack
}

// Mastership is one interval during which a process acted as master under
// one term: from the first observation of the term to the end of the last
// one (KindAcquired, KindLost and every KindSent in between).
type Mastership struct {
	Proc, Node string
	Term       int64
	Start, End int64
	// How tells how End is known: "lost" (an observation), "dead" (the
	// process was reaped; End is then the reaping, an upper bound) or
	// "open" (neither: End is the last record of the history).
	How string
}

// Overlap is two masterships that were both acting at some instant.
type Overlap struct {
	A, B     Mastership
	Duration time.Duration
	// DataLoss is true when Redis lost its data between A's start and B's:
	// the lock was lost with it, which the guarantees exclude (see
	// docs/safety.md); such overlaps are bounded, not forbidden.
	DataLoss bool
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
	Failovers   []Failover
	Violations  []Violation
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

// ForbiddenOverlaps counts the overlaps not explained by data loss.
func (r Report) ForbiddenOverlaps() int {
	n := 0
	for _, o := range r.Overlaps {
		if !o.DataLoss {
			n++
		}
	}
	return n
}

// masterLeaves are the fault kinds after which the election has no
// working master until a new one is elected: the failover is measured from
// the injection.
var masterLeaves = map[string]bool{
	FaultKillMaster:  true,
	FaultPauseMaster: true,
	FaultStopMaster:  true,
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
)

// FaultKinds lists every fault kind, in a fixed order.
var FaultKinds = []string{
	FaultKillMaster, FaultKillSlave, FaultPauseMaster, FaultPauseSlave,
	FaultStopMaster, FaultRestartSlave, FaultRedisRestart, FaultRedisPause,
	FaultLatency, FaultBlackhole, FaultResetPeer,
}

// Check judges a merged history (the records of every process of one run,
// in any order) and reports every broken property:
//
//   - overlap: no two masterships act at the same instant (except after
//     Redis lost its data, where the overlap is counted and bounded);
//   - self-fencing: every observation of a term began before the latest
//     lock call sent by then + LockTTL - StepDownMargin;
//   - terms: terms strictly increase in the order masterships start;
//   - failover: after each crash of the master, and after each Redis
//     fault heals, a new mastership starts within FailoverBound;
//   - fencing: every receiver accepts terms in non-decreasing order, each
//     equal to the highest it had seen, and rejects every message whose
//     PUBLISH left its sender after a newer master was in office;
//   - membership: each master reports each slave's join and leave once,
//     a slave paused past SlaveTimeout is reported removed once and
//     registered again once, and the leave of each ended process is
//     reported.
func Check(records []Record, p Params) Report {
	recs := slices.Clone(records)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].T < recs[j].T })
	c := &checker{recs: recs, p: p, rep: Report{Faults: map[string]int{}}}
	c.masterships()
	c.overlaps()
	c.selfFencing()
	c.terms()
	c.failovers()
	c.messages()
	c.membership()
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
	var order []procTerm
	dead := map[string]int64{}
	var last int64
	for _, r := range c.recs {
		last = max(last, r.T)
		switch r.Kind {
		case KindDead:
			dead[r.Peer] = r.T
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
				order = append(order, k)
			}
			m.Start = min(m.Start, start)
			m.End = max(m.End, r.T)
			if r.Kind == KindLost {
				m.How = "lost"
			}
		}
	}
	for _, k := range order {
		m := open[k]
		if m.How == "open" {
			if d, ok := dead[m.Proc]; ok {
				m.End, m.How = max(m.End, d), "dead"
			} else {
				m.End = max(m.End, last)
			}
		}
		c.rep.Masterships = append(c.rep.Masterships, *m)
	}
	sort.SliceStable(c.rep.Masterships, func(i, j int) bool { return c.rep.Masterships[i].Start < c.rep.Masterships[j].Start })
}

// dataLossBetween reports whether Redis lost its data in (a, b].
func (c *checker) dataLossBetween(a, b int64) bool {
	for _, r := range c.recs {
		if r.Kind == KindRedisDown && r.T > a && r.T <= b {
			return true
		}
	}
	return false
}

func (c *checker) overlaps() {
	ms := c.rep.Masterships
	for i := range ms {
		for j := i + 1; j < len(ms); j++ {
			a, b := ms[i], ms[j] // a.Start <= b.Start
			if b.Start >= a.End {
				continue
			}
			o := Overlap{A: a, B: b, Duration: time.Duration(min(a.End, b.End) - b.Start), DataLoss: c.dataLossBetween(a.Start, b.Start)}
			c.rep.Overlaps = append(c.rep.Overlaps, o)
			if !o.DataLoss {
				c.fail("overlap", b.Start, "%s (term %d, %s) and %s (term %d) both acted as master for %v",
					a.Proc, a.Term, a.How, b.Proc, b.Term, o.Duration)
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
		switch r.Kind {
		case KindLost, KindSent:
			begin, end = r.Begin, r.T
		case KindAcquired:
			begin, end = r.T, r.T
		default:
			continue
		}
		if begin == 0 {
			continue
		}
		cs := calls[r.Proc]
		// The latest call sent no later than the observation ended.
		i := sort.Search(len(cs), func(i int) bool { return cs[i] > end })
		if i == 0 {
			c.fail("self-fencing", begin, "%s observed term %d with no lock call sent before", r.Proc, r.Term)
			continue
		}
		if deadline := cs[i-1] + ttl[r.Proc] - margin[r.Proc]; begin >= deadline {
			c.fail("self-fencing", begin, "%s observed term %d (%s) %v after its deadline bound (last lock call + LockTTL - StepDownMargin)",
				r.Proc, r.Term, r.Kind, time.Duration(begin-deadline))
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
		d := time.Duration(next - from)
		c.rep.Failovers = append(c.rep.Failovers, Failover{Fault: f.Detail, Seq: f.Seq, Duration: d})
		if d > bound {
			c.fail("failover", from, "fault %d (%s): next master after %v, bound %v", f.Seq, f.Detail, d, bound)
		}
	}
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
		case KindAccepted:
			c.rep.Accepted++
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
	ended := map[string]int64{} // node id -> when its process ended
	for _, r := range c.recs {
		switch r.Kind {
		case KindDead:
			if r.Node != "" {
				ended[r.Node] = r.T
			}
		case KindSlaveJoined, KindSlaveLeft:
			if r.Kind == KindSlaveJoined {
				c.rep.Joins++
			} else {
				c.rep.Leaves++
			}
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
		// Until the slave should be back, but not into the next fault.
		windowEnd := h + grace
		for _, r := range c.recs {
			if r.Kind == KindFault && r.T > h {
				windowEnd = min(windowEnd, r.T)
				break
			}
		}
		var m *Mastership
		for i, ms := range c.rep.Masterships {
			if ms.Start <= f.T && ms.End >= windowEnd {
				m = &c.rep.Masterships[i]
			}
		}
		if m == nil {
			continue // the master changed meanwhile: the new one starts from the registry
		}
		// Joins before the leave are the master's late report of slaves
		// already there; they do not count.
		var joins, leaves int
		for _, r := range c.recs {
			if r.Proc != m.Proc || r.Term != m.Term || r.Peer != f.Node || r.T < f.T || r.T > windowEnd {
				continue
			}
			switch {
			case r.Kind == KindSlaveLeft:
				leaves++
			case r.Kind == KindSlaveJoined && leaves > 0:
				joins++
			}
		}
		if leaves != 1 || joins != 1 {
			c.fail("membership", f.T, "slave %s paused for %v: %s (term %d) reported %d leaves and %d joins after it, want 1 and 1",
				f.Node, time.Duration(h-f.T), m.Proc, m.Term, leaves, joins)
		}
	}
}
